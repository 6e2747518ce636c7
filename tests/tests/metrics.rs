//! `/metrics` by the conventions, on the real binaries and without a test bed: the agent in
//! standalone mode (a records file) serves what `promtool check metrics` accepts, in the format
//! the scraper asks for; every binary's `--version` and `xcc_build_info` name the revision; the
//! docs name the admin port as the manifests do. (The controller's and a cluster-fed agent's
//! `/metrics` are checked on the test bed: e2e `metrics`.)

use std::{net::SocketAddr, path::Path, process::Command, time::Duration};

use xcc_e2e::{
    free_port,
    scrape::{promtool_check, require_promtool, scrape},
    spawn,
    xcc::{binary, http_status},
};

const RECORDS: &str =
    "records:\n  gateway.cluster-a.dev-team.clusters.xcc.test:\n    addresses: [192.0.2.10]\n";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the workspace")
}

/// A DNS query (id 7, recursion desired) for `name` A.
fn query(name: &str) -> Vec<u8> {
    let mut message = vec![0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.trim_end_matches('.').split('.') {
        message.push(label.len() as u8);
        message.extend_from_slice(label.as_bytes());
    }
    message.extend_from_slice(&[0, 0, 1, 0, 1]);
    message
}

/// Both formats of `/metrics` on `admin`, as Prometheus asks for them: the classic one (asked
/// for, and without an `Accept` header) passes promtool; OpenMetrics when asked.
async fn check_both_formats(
    promtool: &std::path::PathBuf,
    admin: SocketAddr,
    what: &str,
) -> String {
    let mut classic_text = String::new();
    for accept in [None, Some("text/plain;version=0.0.4;q=0.5,*/*;q=0.1")] {
        let classic = scrape(admin, accept).await.unwrap();
        assert_eq!(
            classic.content_type, "text/plain; version=0.0.4; charset=utf-8",
            "{what}, Accept {accept:?}"
        );
        assert!(!classic.body.contains("# EOF"), "{what}: {}", classic.body);
        if let Err(problems) = promtool_check(promtool, &classic.body) {
            panic!("{what}, Accept {accept:?}: {problems}\n{}", classic.body);
        }
        classic_text = classic.body;
    }
    // What Prometheus 2 sends.
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                      version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let openmetrics = scrape(admin, Some(prometheus)).await.unwrap();
    assert_eq!(
        openmetrics.content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8",
        "{what}"
    );
    assert!(
        openmetrics.body.ends_with("# EOF\n"),
        "{what}: {}",
        openmetrics.body
    );
    classic_text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standalone_agents_metrics_pass_promtool_in_the_format_asked_for() {
    let Some(promtool) = require_promtool() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.yaml");
    std::fs::write(&records, RECORDS).unwrap();
    let dns: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut agent = spawn(
        "xcc-agent",
        &binary("xcc-agent"),
        &[
            format!("--records={}", records.display()),
            format!("--listen={dns}"),
            format!("--admin-listen={admin}"),
            "--threads=1".into(),
            "--udp-sockets=1".into(),
        ],
        &dir.path().join("xcc-agent.log"),
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while http_status(admin, "/readyz").await != Some(200) {
        assert!(agent.exited().is_none(), "xcc-agent exited");
        assert!(std::time::Instant::now() < deadline, "xcc-agent not ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One query over UDP, answered: the size histograms see it.
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let question = query("gateway.cluster-a.dev-team.clusters.xcc.test");
    socket.send_to(&question, dns).await.unwrap();
    let mut answer = [0u8; 512];
    let (answer_len, _) =
        tokio::time::timeout(Duration::from_secs(5), socket.recv_from(&mut answer))
            .await
            .expect("an answer within 5 s")
            .unwrap();

    let text = check_both_formats(&promtool, admin, "xcc-agent --records").await;
    let labels = r#"{server="dns://"#;
    let sample = |name: &str| -> f64 {
        text.lines()
            .filter(|l| {
                l.starts_with(&format!("{name}{labels}"))
                    && l.contains(r#"zone="xcc.test.",proto="udp"}"#)
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    assert_eq!(sample("xcc_dns_request_size_bytes_count"), 1.0, "{text}");
    assert_eq!(
        sample("xcc_dns_request_size_bytes_sum"),
        question.len() as f64,
        "{text}"
    );
    assert_eq!(
        sample("xcc_dns_response_size_bytes_sum"),
        answer_len as f64,
        "{text}"
    );
    for line in [
        "# TYPE xcc_panics_total counter\nxcc_panics_total 0\n",
        "# TYPE xcc_dns_requests_total counter\n",
        "# TYPE xcc_dns_request_size_bytes histogram\n",
        "# TYPE xcc_dns_response_size_bytes histogram\n",
    ] {
        assert!(text.contains(line), "{line} missing in {text}");
    }
    // The commit, not whether the tree had edits: the binaries and this test may have been
    // built at different moments of an edited checkout.
    let revision = xcc_kube::metrics::REVISION.trim_end_matches("-dirty");
    assert!(
        text.contains(&format!(r#"revision="{revision}""#))
            || text.contains(&format!(r#"revision="{revision}-dirty""#)),
        "xcc_build_info does not say revision {revision}: {text}"
    );
}

/// `git rev-parse --short=12 HEAD` of this checkout, `None` without git or a checkout.
fn head() -> Option<String> {
    let out = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short=12",
            "HEAD",
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn every_binary_says_its_version_and_revision() {
    let revision = xcc_kube::metrics::REVISION;
    match head() {
        // Built from this checkout (unless the build was given XCC_REVISION).
        Some(head) if std::env::var_os("XCC_REVISION").is_none() => assert!(
            revision == head || revision == format!("{head}-dirty"),
            "the binaries' revision {revision} is not HEAD's {head}"
        ),
        Some(_) => {}
        None => eprintln!("not a git checkout: the revision is {revision}"),
    }
    for name in [
        "xcc-agent",
        "xcc-controller",
        "xcc-coredns-patcher",
        "kubectl-xcc",
    ] {
        let out = Command::new(binary(name))
            .arg("--version")
            .output()
            .unwrap();
        assert!(out.status.success(), "{name} --version: {out:?}");
        // The commit, not whether the tree had edits (see above).
        let said = String::from_utf8_lossy(&out.stdout).replace("-dirty)", ")");
        assert_eq!(
            said,
            format!(
                "{name} {} ({})\n",
                env!("CARGO_PKG_VERSION"),
                revision.trim_end_matches("-dirty")
            ),
        );
    }
}

/// docs/metrics.md names the admin port as the manifests' Services and ServiceMonitors do.
#[test]
fn the_metrics_page_names_the_port_of_the_manifests() {
    let page = std::fs::read_to_string(root().join("docs/metrics.md")).unwrap();
    let mut ports = Vec::new();
    for file in [
        "manifests/agent/agent.yaml",
        "manifests/controller/controller.yaml",
        "manifests/install/components/agent-service-monitor/service-monitor.yaml",
        "manifests/install/components/controller-service-monitor/service-monitor.yaml",
    ] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        for doc in docs {
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match doc["kind"].as_str() {
                Some("Service") => {
                    for port in doc["spec"]["ports"].as_array().into_iter().flatten() {
                        if port["port"] == 9180 {
                            let namespace =
                                doc["metadata"]["namespace"].as_str().unwrap_or_default();
                            assert!(
                                page.contains(&format!("`{namespace}/{name}`")),
                                "docs/metrics.md does not name the Service {namespace}/{name}"
                            );
                            ports.push(port["name"].as_str().unwrap().to_string());
                        }
                    }
                }
                Some("ServiceMonitor") => {
                    for endpoint in doc["spec"]["endpoints"].as_array().into_iter().flatten() {
                        ports.push(endpoint["port"].as_str().unwrap().to_string());
                    }
                }
                _ => {}
            }
        }
    }
    assert_eq!(ports.len(), 4, "{ports:?}");
    for port in &ports {
        assert!(
            page.contains(&format!("the port named `{port}`")),
            "docs/metrics.md does not name the port {port} of the manifests"
        );
    }
    assert!(
        !page.contains("xcc-metrics"),
        "docs/metrics.md names a port xcc-metrics"
    );
}

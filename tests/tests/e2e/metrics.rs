//! `/metrics` of the controller and of a cluster-fed agent, after the walkthrough's GatewayDNS
//! is published (so that the per-cluster, per-watch and per-reconciler series exist): in the
//! classic text format `promtool check metrics` accepts it, and OpenMetrics when asked.
//! (The standalone agent's: `tests/tests/metrics.rs`.)

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use xcc_e2e::{
    Testbed, require_testbed,
    scrape::{promtool_check, require_promtool, scrape},
};

use crate::xcc_dns::{
    KUARD, agent, controller_with_admin, envoy, management, manifest, wait_answer,
};

/// Scrapes `admin` until `ready` holds for the classic text, then checks both formats.
async fn check(promtool: &PathBuf, admin: SocketAddr, what: &str, ready: impl Fn(&str) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let classic = loop {
        let classic = scrape(admin, None).await.unwrap();
        if ready(&classic.body) {
            break classic;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: the series looked for are missing: {}",
            classic.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        classic.content_type, "text/plain; version=0.0.4; charset=utf-8",
        "{what}"
    );
    if let Err(problems) = promtool_check(promtool, &classic.body) {
        panic!("{what}: {problems}\n{}", classic.body);
    }
    let asked = scrape(admin, Some("text/plain;version=0.0.4"))
        .await
        .unwrap();
    assert_eq!(asked.content_type, classic.content_type, "{what}");
    if let Err(problems) = promtool_check(promtool, &asked.body) {
        panic!("{what}: {problems}\n{}", asked.body);
    }
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_and_a_cluster_fed_agents_metrics_pass_promtool() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let Some(promtool) = require_promtool() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["management", "cluster-a"])
        .await
        .unwrap();
    management(&bed, &["cluster-a"]).await;
    let mgmt = bed.cluster("management");
    let kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let (_controller, controller_admin) = controller_with_admin(&bed, &kubeconfig.path);
    let ca = bed.cluster("cluster-a");
    let agent_a = agent(ca).await;
    envoy(ca, r#"[{"ip":"10.1.2.3"}]"#).await;
    mgmt.kubectl(&[
        "apply",
        "-f",
        &manifest("manifests/examples/dev-team-gateway-dns.yaml"),
    ])
    .await
    .unwrap();
    wait_answer(
        agent_a.dns,
        KUARD,
        "A",
        &["10.1.2.3"],
        Duration::from_secs(30),
    )
    .await;

    check(&promtool, controller_admin, "xcc-controller", |text| {
        text.contains("xcc_controller_cluster_state{")
            && text.contains("# TYPE xcc_panics_total counter\n")
    })
    .await;
    check(&promtool, agent_a.admin, "xcc-agent on cluster-a", |text| {
        text.contains("xcc_sync_watch_state{")
            && text.contains("xcc_dns_response_size_bytes_count{")
    })
    .await;
}

//! The install users apply (manifests/install/), applied with `kubectl apply -k` as a user would,
//! then each component run as a local process with a token of the installed ServiceAccount and
//! the installed Deployment's environment: it does its initial work (every watch listed, the
//! Lease held) without one WARN or ERROR line, and a feature switched off by a component is
//! absent from the log, the metrics and the RBAC.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use xcc_e2e::{
    Cluster, Process, Testbed, free_port, require_testbed, spawn,
    xcc::{binary, http_status},
};

use crate::secrets::{repo, wait_for};

/// The workspace version: every xcc image of the manifests is tagged with it.
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn install_dir(name: &str) -> String {
    repo()
        .join("manifests/install")
        .join(name)
        .display()
        .to_string()
}

/// Every manifest and kustomization under `dir`, recursively.
fn manifest_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            manifest_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml")
            || path.file_name().is_some_and(|n| n == "Kustomization")
        {
            out.push(path);
        }
    }
}

/// No test bed needed: a release bumps the workspace version, and the manifests must follow.
#[test]
fn every_xcc_image_is_tagged_with_the_workspace_version_and_pulled_if_not_present() {
    let mut files = Vec::new();
    manifest_files(&repo().join("manifests"), &mut files);
    let mut images = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            if let Some(image) = trimmed.strip_prefix("image: ") {
                let (name, tag) = image.rsplit_once(':').unwrap_or((image, ""));
                if name != "xcc" && !name.ends_with("/xcc") {
                    continue;
                }
                images += 1;
                assert_eq!(
                    tag,
                    VERSION,
                    "{}:{}: image {image} is not tagged {VERSION}",
                    file.display(),
                    i + 1
                );
                let policy = lines[i..]
                    .iter()
                    .take_while(|l| !l.trim_start().starts_with("- name:") || *l == line)
                    .find_map(|l| l.trim_start().strip_prefix("imagePullPolicy: "));
                assert_eq!(
                    policy,
                    Some("IfNotPresent"),
                    "{}:{}: image {image} without imagePullPolicy: IfNotPresent",
                    file.display(),
                    i + 1
                );
            }
            if let Some(tag) = trimmed.strip_prefix("newTag: ") {
                assert_eq!(tag, VERSION, "{}:{}", file.display(), i + 1);
            }
        }
    }
    // The agent, the controller and the patcher Job at least.
    assert!(images >= 3, "only {images} xcc images found in manifests/");
}

/// `GET path` on `addr`: status and body.
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.get(9..12)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// The environment of container 0 of Deployment `namespace/name` as installed, with the
/// downward-API fields a pod would get filled in from `fields`.
async fn deployment_env(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    fields: &BTreeMap<&str, String>,
) -> BTreeMap<String, String> {
    let json = cluster
        .kubectl(&["-n", namespace, "get", "deployment", name, "-o", "json"])
        .await
        .unwrap();
    let deployment: serde_json::Value = serde_json::from_str(&json).unwrap();
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    env.iter()
        .map(|var| {
            let key = var["name"].as_str().unwrap().to_string();
            let value = match var["value"].as_str() {
                Some(value) => value.to_string(),
                None => {
                    let path = var["valueFrom"]["fieldRef"]["fieldPath"]
                        .as_str()
                        .unwrap_or_else(|| panic!("{key}: neither a value nor a fieldRef"));
                    fields
                        .get(path)
                        .unwrap_or_else(|| panic!("{key}: no value for field {path}"))
                        .clone()
                }
            };
            (key, value)
        })
        .collect()
}

/// Starts `program` with environment `env` (through `env(1)`, which execs it: the pid is the
/// program's) and `args`.
fn start(program: &Path, env: &BTreeMap<String, String>, args: &[String], log: &Path) -> Process {
    let mut argv: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    argv.push(program.display().to_string());
    argv.extend(args.iter().cloned());
    spawn(
        &program.file_name().unwrap().to_string_lossy(),
        Path::new("/usr/bin/env"),
        &argv,
        log,
    )
    .unwrap()
}

/// The WARN and ERROR lines of a log.
fn warnings(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(str::to_string)
        .collect()
}

async fn lease_holder(cluster: &Cluster, namespace: &str, name: &str) -> Option<String> {
    Api::<Lease>::namespaced(cluster.client.clone(), namespace)
        .get_opt(name)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// The `xcc_sync_watch_state` series at 1 of the agent's metrics: kind → state.
fn watch_states(metrics: &str) -> BTreeMap<String, String> {
    metrics
        .lines()
        .filter(|l| l.starts_with("xcc_sync_watch_state{") && l.ends_with(" 1"))
        .filter_map(|l| {
            let label = |name: &str| {
                l.split(&format!("{name}=\""))
                    .nth(1)?
                    .split('"')
                    .next()
                    .map(str::to_string)
            };
            Some((label("kind")?, label("state")?))
        })
        .collect()
}

/// An agent run the way the installed Deployment runs it, on the loopback.
struct InstalledAgent {
    process: Process,
    admin: SocketAddr,
    log: PathBuf,
}

const POD: &str = "xcc-agent-install-test";

/// Whether the agent's ServiceAccount may `verb` `resource` (`kubectl auth can-i`, which exits
/// non-zero for "no").
async fn agent_may(cluster: &Cluster, verb: &str, resource: &str) -> bool {
    let answer = cluster
        .kubectl(&[
            "auth",
            "can-i",
            verb,
            resource,
            "--as=system:serviceaccount:xcc-dns:xcc-agent",
        ])
        .await;
    matches!(answer, Ok(yes) if yes.trim() == "yes")
}

/// Waits until kube-controller-manager's ClusterRole aggregation has filled in the role of
/// resource sync (cluster-registry's aggregated ClusterRoles are empty until then).
async fn wait_aggregated(cluster: &Cluster) {
    wait_for(
        "the aggregated ClusterRole of resource sync",
        Duration::from_secs(60),
        || async {
            agent_may(cluster, "list", "clusters.clusterregistry.k8s.cisco.com")
                .await
                .then_some(())
        },
    )
    .await;
}

/// Once the installed CRDs are served and the aggregated RBAC is in, the installed agent.
async fn installed_agent_when_served(cluster: &Cluster) -> InstalledAgent {
    cluster
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])
        .await
        .unwrap();
    wait_aggregated(cluster).await;
    run_installed_agent(cluster, cluster.dir().join("agent.log")).await
}

async fn run_installed_agent(cluster: &Cluster, log: PathBuf) -> InstalledAgent {
    let kubeconfig = cluster
        .mint_kubeconfig("xcc-dns", "xcc-agent")
        .await
        .unwrap();
    let fields = BTreeMap::from([
        ("metadata.namespace", "xcc-dns".to_string()),
        ("metadata.name", POD.to_string()),
        ("status.podIP", "127.0.0.1".to_string()),
    ]);
    let env = deployment_env(cluster, "xcc-dns", "xcc-agent", &fields).await;
    assert_eq!(
        env.get("XCC_LEADER_ELECT").map(String::as_str),
        Some("true")
    );
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    // The listen addresses of a pod, moved to free loopback ports (flags win over env).
    let args = vec![
        format!("--kubeconfig={}", kubeconfig.path.display()),
        format!("--listen=127.0.0.1:{}", free_port()),
        format!("--admin-listen={admin}"),
        format!("--projection-proxy-listen=127.0.0.1:{}", free_port()),
        "--threads=1".into(),
        "--udp-sockets=1".into(),
    ];
    let process = start(&binary("xcc-agent"), &env, &args, &log);
    InstalledAgent {
        process,
        admin,
        log,
    }
}

impl InstalledAgent {
    /// Waits until the agent has done its initial work: ready, the Lease held, and every watch
    /// of the sync core listed (state 1), including one of each kind in `expected`.
    async fn wait_initial_work(&mut self, cluster: &Cluster, expected: &[&str]) -> String {
        let admin = self.admin;
        let started = std::time::Instant::now();
        while http_status(admin, "/readyz").await != Some(200) {
            still_running(&mut self.process, &self.log);
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "xcc-agent not ready after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        wait_for(
            "the agent holds the Lease",
            Duration::from_secs(60),
            || async {
                (lease_holder(cluster, "xcc-dns", "xcc-agent")
                    .await
                    .as_deref()
                    == Some(POD))
                .then_some(())
            },
        )
        .await;
        let mut last = BTreeMap::new();
        loop {
            if let Some((_, metrics)) = http_get(admin, "/metrics").await {
                last = watch_states(&metrics);
                if expected.iter().all(|k| last.contains_key(*k))
                    && last.values().all(|s| s == "synced")
                {
                    return metrics;
                }
            }
            still_running(&mut self.process, &self.log);
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "not every watch listed (want {expected:?}, all 1): {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The workload install on a fresh cluster; its agent with every default feature, then SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workload_install_applies_and_its_agent_starts_without_a_warning() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["workload", "dry-run"])
        .await
        .expect("test bed starts");

    // A server-side dry run needs the namespaces the install creates: a dry run creates nothing.
    let dry = bed.cluster("dry-run");
    let refused = dry
        .kubectl(&["apply", "--dry-run=server", "-k", &install_dir("workload")])
        .await
        .expect_err("a dry run before the namespaces exist");
    assert!(refused.to_string().contains("not found"), "{refused:#}");
    for namespace in [
        "xcc-dns",
        "plumber-system",
        "kubeconfig",
        "services-toolkit",
    ] {
        dry.kubectl(&["create", "namespace", namespace])
            .await
            .unwrap();
    }
    dry.kubectl(&["apply", "--dry-run=server", "-k", &install_dir("workload")])
        .await
        .unwrap();
    let deployments = dry
        .kubectl(&["-n", "xcc-dns", "get", "deployments", "-o", "name"])
        .await
        .unwrap();
    assert_eq!(deployments.trim(), "", "a dry run created nothing");

    let cluster = bed.cluster("workload");
    // As on a real cluster: ClusterRole aggregation (kube-controller-manager) runs.
    let _aggregation = xcc_e2e::aggregation::start(&binaries, cluster).unwrap();
    let applied = cluster
        .kubectl(&["apply", "-k", &install_dir("workload")])
        .await
        .unwrap();
    for object in [
        "deployment.apps/xcc-agent",
        "job.batch/xcc-coredns-patcher",
        "poddisruptionbudget.policy/xcc-agent",
        "clusterrole.rbac.authorization.k8s.io/xcc-agent-plumber",
        "clusterrole.rbac.authorization.k8s.io/xcc-agent-projection",
        "clusterrole.rbac.authorization.k8s.io/xcc-agent-secret-replication",
        "clusterrole.rbac.authorization.k8s.io/xcc-agent-cluster-registry",
        "customresourcedefinition.apiextensions.k8s.io/replicators.plumber.jnytnai0613.github.io",
    ] {
        assert!(applied.contains(object), "{object} not in:\n{applied}");
    }
    assert!(
        !applied.contains("gatewaydns"),
        "GatewayDNS is the management cluster's:\n{applied}"
    );
    // Applied twice: nothing to change, no error (the Job's spec is immutable).
    cluster
        .kubectl(&["apply", "-k", &install_dir("workload")])
        .await
        .unwrap();
    let mut agent = installed_agent_when_served(cluster).await;
    let metrics = agent
        .wait_initial_work(
            cluster,
            &[
                "SecretExport",
                "Cluster",
                "Replicator",
                "UpstreamClusterLink",
            ],
        )
        .await;
    eprintln!("watches: {:?}", watch_states(&metrics));
    let log = std::fs::read_to_string(&agent.log).unwrap();
    for feature in [
        "secret-replication",
        "resource-sync",
        "plumber",
        "api-projection",
    ] {
        assert!(log.contains(feature), "{feature} not started:\n{log}");
    }
    assert_eq!(warnings(&agent.log), Vec::<String>::new(), "{log}");

    // SIGTERM, as the kubelet sends it: out of the endpoints and the Lease at once, DNS served
    // through the drain (XCC_SHUTDOWN_DELAY of the Deployment), then a clean exit.
    let pid = agent.process.pid().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let admin = agent.admin;
    wait_for(
        "readiness fails and the Lease is released while the agent drains",
        Duration::from_secs(4),
        || async {
            (http_status(admin, "/readyz").await == Some(503)
                && lease_holder(cluster, "xcc-dns", "xcc-agent")
                    .await
                    .is_none())
            .then_some(())
        },
    )
    .await;
    let signalled = std::time::Instant::now();
    let exit = loop {
        if let Some(status) = agent.process.exited() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(20),
            "no exit within 20 s of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "{exit}");
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(log.contains("draining"), "{log}");
    assert_eq!(warnings(&agent.log), Vec::<String>::new(), "{log}");
}

/// The management install on a fresh cluster (with Cluster API's Cluster CRD); its controller
/// with leader election takes the Lease and reconciles a GatewayDNS without a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_management_install_applies_and_its_controller_starts_without_a_warning() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["management"])
        .await
        .expect("test bed starts");
    let cluster = bed.cluster("management");
    // Only the Cluster API fixture: there is no such directory.
    cluster
        .install_crds(Path::new("/nonexistent"))
        .await
        .unwrap();
    let applied = cluster
        .kubectl(&["apply", "-k", &install_dir("management")])
        .await
        .unwrap();
    assert!(
        applied.contains("deployment.apps/xcc-controller"),
        "{applied}"
    );
    assert!(
        applied.contains("gatewaydns.connectivity.tanzu.vmware.com"),
        "{applied}"
    );
    assert!(
        !applied.contains("plumber") && !applied.contains("replication"),
        "the agent's CRDs belong to workload clusters:\n{applied}"
    );
    cluster
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])
        .await
        .unwrap();

    let kubeconfig = cluster
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let pod = "xcc-controller-install-test";
    let fields = BTreeMap::from([
        ("metadata.namespace", "xcc-system".to_string()),
        ("metadata.name", pod.to_string()),
    ]);
    let env = deployment_env(cluster, "xcc-system", "xcc-controller", &fields).await;
    assert_eq!(
        env.get("XCC_LEADER_ELECT").map(String::as_str),
        Some("true")
    );
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = cluster.dir().join("controller.log");
    let mut controller = start(
        &binary("xcc-controller"),
        &env,
        &[
            format!("--kubeconfig={}", kubeconfig.path.display()),
            format!("--admin-listen={admin}"),
        ],
        &log,
    );
    let started = std::time::Instant::now();
    while lease_holder(cluster, "xcc-system", "xcc-controller")
        .await
        .as_deref()
        != Some(pod)
    {
        still_running(&mut controller, &log);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "xcc-controller holds no Lease after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for(
        "the controller is ready",
        Duration::from_secs(30),
        || async { (http_status(admin, "/readyz").await == Some(200)).then_some(()) },
    )
    .await;
    // Its watches work: the documented GatewayDNS gets a status (no Cluster selected yet).
    cluster
        .kubectl(&["create", "namespace", "dev-team"])
        .await
        .unwrap();
    cluster
        .kubectl(&[
            "apply",
            "-f",
            &crate::secrets::manifest("manifests/examples/dev-team-gateway-dns.yaml"),
        ])
        .await
        .unwrap();
    wait_for(
        "the GatewayDNS is reconciled",
        Duration::from_secs(30),
        || async {
            let generation = cluster
                .kubectl(&[
                    "-n",
                    "dev-team",
                    "get",
                    "gatewaydns",
                    "-o",
                    "jsonpath={.items[0].status.observedGeneration}",
                ])
                .await
                .ok()?;
            (!generation.trim().is_empty()).then_some(())
        },
    )
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(warnings(&log), Vec::<String>::new(), "{text}");
    controller.stop(Duration::from_secs(10));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("stopped"), "{text}");
    assert_eq!(warnings(&log), Vec::<String>::new(), "{text}");
}

/// Fails the test with the log of `process` if it has exited.
fn still_running(process: &mut Process, log: &Path) {
    if let Some(status) = process.exited() {
        panic!(
            "{} exited ({status}):\n{}",
            process.name,
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

/// The path of `to` relative to directory `from` (both absolute): kustomize refuses absolute
/// paths in `resources` and `components`.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path = PathBuf::new();
    for _ in common..from.len() {
        path.push("..");
    }
    for part in &to[common..] {
        path.push(part);
    }
    path
}

/// A user's overlay with plumber and API projection switched off: their RBAC and CRDs are not
/// installed, and the agent never names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_switch_a_feature_off_with_its_rbac_and_it_is_never_mentioned() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["trimmed"])
        .await
        .expect("test bed starts");
    let cluster = bed.cluster("trimmed");
    let _aggregation = xcc_e2e::aggregation::start(&binaries, cluster).unwrap();
    let overlay = bed.dir().join("overlay");
    std::fs::create_dir_all(&overlay).unwrap();
    let install = repo().join("manifests/install").canonicalize().unwrap();
    let overlay = overlay.canonicalize().unwrap();
    let rel = |p: &str| relative(&overlay, &install.join(p)).display().to_string();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [{}]
components: [{}, {}]
",
            rel("workload"),
            rel("components/without-plumber"),
            rel("components/without-api-projection"),
        ),
    )
    .unwrap();
    let applied = cluster
        .kubectl(&["apply", "-k", &overlay.display().to_string()])
        .await
        .unwrap();
    assert!(applied.contains("deployment.apps/xcc-agent"), "{applied}");
    for absent in ["plumber", "projection", "services-toolkit"] {
        assert!(!applied.contains(absent), "{absent} in:\n{applied}");
    }
    // Their RBAC is absent: the agent may not read their kinds, nor what only they needed.
    for (verb, resource) in [
        ("list", "replicators.plumber.jnytnai0613.github.io"),
        (
            "list",
            "upstreamclusterlinks.projection.apiresources.multicluster.x-tanzu.vmware.com",
        ),
        ("create", "apiservices.apiregistration.k8s.io"),
        ("create", "deployments.apps"),
    ] {
        assert!(
            !agent_may(cluster, verb, resource).await,
            "the agent may {verb} {resource}"
        );
    }
    // What stays on is still granted.
    assert!(
        agent_may(
            cluster,
            "list",
            "secretexports.replication.apiresources.multicluster.x-tanzu.vmware.com"
        )
        .await
    );
    let mut agent = installed_agent_when_served(cluster).await;
    let metrics = agent
        .wait_initial_work(cluster, &["SecretExport", "Cluster"])
        .await;
    let states = watch_states(&metrics);
    for kind in [
        "Replicator",
        "ClusterDetector",
        "UpstreamClusterLink",
        "DownstreamClusterLink",
    ] {
        assert!(!states.contains_key(kind), "{kind} watched: {states:?}");
    }
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(log.contains("resource-sync"), "{log}");
    for absent in ["plumber", "projection"] {
        assert!(
            !log.to_lowercase().contains(absent),
            "{absent} in the log:\n{log}"
        );
    }
    assert_eq!(warnings(&agent.log), Vec::<String>::new(), "{log}");
}

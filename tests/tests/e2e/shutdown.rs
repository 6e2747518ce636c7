//! SIGTERM in every state (issue 35): each binary exits within its shutdown delay + 2 s of
//! SIGTERM, with status 0, whether its API server answers, is stopped (connection refused) or
//! blackholed (SIGSTOP: the kernel accepts connections, nothing answers); as Lease holder and as
//! standby with `--leader-elect`; and with a write in flight. Before each SIGTERM the test
//! proves the binary is in the state: ready, holding or waiting for the Lease, its watch
//! failing, or its connection open to the blackholed server. The writes in flight: the agent's
//! Lease renewal, and the controller's slices to a blackholed workload cluster.
//!
//! The CoreDNS patcher is a one-shot Job with nothing to save: SIGTERM ends it at once, by the
//! signal's default action (status "killed by SIGTERM", 143 in a pod's terminated state).

use std::{
    net::SocketAddr,
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use xcc_e2e::{
    Blackhole, Cluster, Process, Testbed, connections_to, free_port, require_testbed, spawn,
    xcc::{Agent, binary, http_status, metrics_text, sample_sum},
};

use crate::{
    resource_sync::{install_member_with, manifest, wait_for},
    xcc_dns::{KUARD, envoy, management, set_lb},
};

/// The bar after SIGTERM, beyond the shutdown delay (0 here: the binaries do not run in a pod).
const BAR: Duration = Duration::from_secs(2);

fn log_path(cluster: &Cluster, name: &str) -> PathBuf {
    cluster.dir().join(format!("{name}.log"))
}

fn logged(path: &Path, text: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|log| log.contains(text))
}

async fn wait_logged(path: &Path, text: &str) {
    wait_for(
        &format!("{text:?} in {}", path.display()),
        Duration::from_secs(60),
        || async { logged(path, text).then_some(()) },
    )
    .await;
}

/// The holder of Lease `namespace/name`, if any.
async fn holder(cluster: &Cluster, namespace: &str, name: &str) -> Option<String> {
    Api::<Lease>::namespaced(cluster.client.clone(), namespace)
        .get_opt(name)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// SIGTERM to `process`: asserts that it exits within `delay` + [`BAR`] with status 0.
fn sigterm(what: &str, process: &mut Process, delay: Duration) {
    let (took, status) = process.terminate(delay + BAR + Duration::from_secs(20));
    let status = status.unwrap_or_else(|| panic!("{what}: still running {took:?} after SIGTERM"));
    eprintln!("{what}: {status} {:.2} s after SIGTERM", took.as_secs_f64());
    assert!(
        took <= delay + BAR,
        "{what}: exited {took:?} after SIGTERM, bar {:?}",
        delay + BAR
    );
    assert_eq!(status.code(), Some(0), "{what}: {status}");
}

/// SIGTERM to the patcher: it ends at once, by the signal.
fn sigterm_patcher(what: &str, process: &mut Process) {
    let (took, status) = process.terminate(BAR + Duration::from_secs(20));
    let status = status.unwrap_or_else(|| panic!("{what}: still running {took:?} after SIGTERM"));
    eprintln!("{what}: {status} {:.2} s after SIGTERM", took.as_secs_f64());
    assert!(
        took <= BAR,
        "{what}: exited {took:?} after SIGTERM, bar {BAR:?}"
    );
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{what}: {status}");
}

/// What the binaries run as: kubeconfigs of the manifests' ServiceAccounts (minted while the
/// API server answers).
struct Accounts {
    agent: PathBuf,
    controller: PathBuf,
    patcher: PathBuf,
}

fn agent(cluster: &Cluster, accounts: &Accounts, name: &str, extra: &[&str]) -> Agent {
    let mut args = vec!["--secret-replication=false"];
    if !extra.iter().any(|a| a.starts_with("--log=")) {
        args.push("--log=info,xcc_sync=debug");
    }
    if !extra.iter().any(|a| a.starts_with("--shutdown-delay")) {
        args.push("--shutdown-delay=0s");
    }
    let pod = format!("--pod-name={name}");
    args.push(&pod);
    args.extend_from_slice(extra);
    Agent::start(&accounts.agent, &log_path(cluster, name), &args).unwrap()
}

fn controller(
    cluster: &Cluster,
    kubeconfig: &Path,
    name: &str,
    extra: &[&str],
) -> (Process, SocketAddr) {
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--admin-listen={admin}"),
        format!("--pod-name={name}"),
        "--log=info,xcc_sync=debug".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let process = spawn(
        name,
        &binary("xcc-controller"),
        &args,
        &log_path(cluster, name),
    )
    .unwrap();
    (process, admin)
}

/// The patcher, waiting for the ClusterIP of a Service that does not exist.
fn patcher(cluster: &Cluster, accounts: &Accounts, name: &str) -> Process {
    spawn(
        name,
        &binary("xcc-coredns-patcher"),
        &[
            format!("--kubeconfig={}", accounts.patcher.display()),
            "--dns-service-name=not-there".into(),
            "--service-wait=10m".into(),
            "--log=debug".into(),
        ],
        &log_path(cluster, name),
    )
    .unwrap()
}

async fn wait_ready(what: &str, admin: SocketAddr) {
    wait_for(what, Duration::from_secs(60), || async {
        (http_status(admin, "/readyz").await == Some(200)).then_some(())
    })
    .await;
}

/// Waits until `process` holds a connection to the cluster's (blackholed) API server.
async fn wait_connected(what: &str, cluster: &Cluster, process: &Process) {
    wait_for(
        &format!("{what} connected to the blackholed API server"),
        Duration::from_secs(30),
        || async { (connections_to(process.pid(), cluster.port()) > 0).then_some(()) },
    )
    .await;
}

/// Two replicas of a binary with `--leader-elect` (started by `start`): the standby, then the
/// leader, each stopped with SIGTERM once it is proven to be what it is.
async fn leader_and_standby(
    cluster: &Cluster,
    binary: &str,
    (namespace, lease): (&str, &str),
    mut replicas: Vec<(String, Process)>,
) {
    let first = wait_for(
        &format!("a {binary} Lease holder"),
        Duration::from_secs(60),
        || holder(cluster, namespace, lease),
    )
    .await;
    let leader_at = replicas
        .iter()
        .position(|(name, _)| *name == first)
        .expect("a replica holds the Lease");
    let (leader_name, mut leader) = replicas.remove(leader_at);
    let (standby_name, mut standby) = replicas.remove(0);
    wait_logged(&log_path(cluster, &leader_name), "leading: the work starts").await;
    wait_logged(&log_path(cluster, &standby_name), "waiting for the Lease").await;
    sigterm(&format!("{binary}, standby"), &mut standby, Duration::ZERO);
    assert_eq!(
        holder(cluster, namespace, lease).await.as_deref(),
        Some(leader_name.as_str())
    );
    sigterm(&format!("{binary}, leader"), &mut leader, Duration::ZERO);
    assert_eq!(
        holder(cluster, namespace, lease).await,
        None,
        "the leader released the Lease on its way out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_binary_exits_promptly_on_sigterm_in_every_state() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["solo"]).await.unwrap();
    let cluster = bed.cluster("solo");
    // The agent's manifests (its own agent stopped: the replicas below replace it), the
    // controller's and the patcher's.
    let mut member = install_member_with(&binaries, cluster, &["--secret-replication=false"]).await;
    member.agent.process.stop(Duration::from_secs(5));
    for file in [
        "manifests/controller/controller.yaml",
        "manifests/coredns-patcher/job.yaml",
    ] {
        cluster
            .kubectl(&["apply", "-f", &manifest(file)])
            .await
            .unwrap();
    }
    let accounts = Accounts {
        agent: cluster
            .mint_kubeconfig("xcc-dns", "xcc-agent")
            .await
            .unwrap()
            .path,
        controller: cluster
            .mint_kubeconfig("xcc-system", "xcc-controller")
            .await
            .unwrap()
            .path,
        patcher: cluster
            .mint_kubeconfig("xcc-dns", "xcc-coredns-patcher")
            .await
            .unwrap()
            .path,
    };

    // The API server answers: each binary serving, with a delay of 1 s for the agent.
    let mut plain = agent(cluster, &accounts, "agent-up", &["--shutdown-delay=1s"]);
    plain.wait_ready(Duration::from_secs(60)).await.unwrap();
    sigterm(
        "agent, API server up, --shutdown-delay=1s",
        &mut plain.process,
        Duration::from_secs(1),
    );
    let (mut process, admin) = controller(cluster, &accounts.controller, "controller-up", &[]);
    wait_ready("the controller is ready", admin).await;
    wait_logged(
        &log_path(cluster, "controller-up"),
        "xcc-controller starting",
    )
    .await;
    sigterm("controller, API server up", &mut process, Duration::ZERO);
    let mut process = patcher(cluster, &accounts, "patcher-up");
    wait_logged(
        &log_path(cluster, "patcher-up"),
        "waiting for the ClusterIP",
    )
    .await;
    sigterm_patcher("patcher, API server up", &mut process);

    // Leader and standby, API server up.
    let replicas = ["agent-a", "agent-b"].map(|name| {
        (
            name.to_string(),
            agent(cluster, &accounts, name, &["--leader-elect"]).process,
        )
    });
    leader_and_standby(
        cluster,
        "xcc-agent",
        ("xcc-dns", "xcc-agent"),
        replicas.into(),
    )
    .await;
    let replicas = ["controller-a", "controller-b"].map(|name| {
        (
            name.to_string(),
            controller(cluster, &accounts.controller, name, &["--leader-elect"]).0,
        )
    });
    leader_and_standby(
        cluster,
        "xcc-controller",
        ("xcc-system", "xcc-controller"),
        replicas.into(),
    )
    .await;

    // A write in flight: the Lease holder's renewal (every 10 s) to an API server that stopped
    // answering; kube-lease-manager says at DEBUG when it sends one.
    let mut writer = agent(
        cluster,
        &accounts,
        "agent-writing",
        &[
            "--leader-elect",
            "--log=info,xcc_sync=debug,kube_lease_manager=debug",
        ],
    );
    wait_for("agent-writing leads", Duration::from_secs(60), || async {
        (holder(cluster, "xcc-dns", "xcc-agent").await.as_deref() == Some("agent-writing"))
            .then_some(())
    })
    .await;
    let writing_log = log_path(cluster, "agent-writing");
    // The Lease shows the holder after the first of the two patches that take it: once the agent
    // says it leads, both are done, and the next call is the renewal.
    wait_logged(&writing_log, "leading: the work starts").await;
    let blackholed_at = std::fs::read_to_string(&writing_log).map_or(0, |log| log.len());
    let blackhole = Blackhole::start(cluster);
    let renewing = wait_for(
        "agent-writing renews its Lease with the API server blackholed",
        Duration::from_secs(30),
        || async {
            let log = std::fs::read_to_string(&writing_log).ok()?;
            let after = log.get(blackholed_at..)?;
            after
                .find("renew own lease lock")
                .map(|at| blackholed_at + at)
        },
    )
    .await;
    // The renewal is still in flight: nothing after it says it ended.
    let log = std::fs::read_to_string(&writing_log).unwrap();
    assert!(
        !log[renewing..].contains("could not be renewed"),
        "{}",
        &log[renewing..]
    );
    wait_connected("agent-writing", cluster, &writer.process).await;
    sigterm(
        "agent, leader, renewing its Lease with the API server blackholed",
        &mut writer.process,
        Duration::ZERO,
    );

    // Blackholed: each binary started while the API server accepts connections and never
    // answers.
    let mut plain = agent(cluster, &accounts, "agent-blackholed", &[]);
    wait_connected("agent-blackholed", cluster, &plain.process).await;
    assert_eq!(http_status(plain.admin, "/healthz").await, Some(200));
    sigterm(
        "agent, API server blackholed",
        &mut plain.process,
        Duration::ZERO,
    );
    let mut elected = agent(
        cluster,
        &accounts,
        "agent-elect-blackholed",
        &["--leader-elect"],
    );
    wait_connected("agent-elect-blackholed", cluster, &elected.process).await;
    sigterm(
        "agent --leader-elect, API server blackholed",
        &mut elected.process,
        Duration::ZERO,
    );
    for (name, extra) in [
        ("controller-blackholed", &[][..]),
        ("controller-elect-blackholed", &["--leader-elect"][..]),
    ] {
        let (mut process, admin) = controller(cluster, &accounts.controller, name, extra);
        wait_connected(name, cluster, &process).await;
        assert_eq!(http_status(admin, "/healthz").await, Some(200));
        sigterm(
            &format!("controller {extra:?}, API server blackholed"),
            &mut process,
            Duration::ZERO,
        );
    }
    let mut process = patcher(cluster, &accounts, "patcher-blackholed");
    wait_connected("patcher-blackholed", cluster, &process).await;
    sigterm_patcher("patcher, API server blackholed", &mut process);
    drop(blackhole);

    // Down: each binary serving (the agent and the controller as Lease holders too), then the
    // API server stopped; each has seen it go before its SIGTERM.
    let mut plain = agent(cluster, &accounts, "agent-down", &[]);
    plain.wait_ready(Duration::from_secs(90)).await.unwrap();
    let mut elected = agent(cluster, &accounts, "agent-elect-down", &["--leader-elect"]);
    elected.wait_ready(Duration::from_secs(60)).await.unwrap();
    wait_logged(
        &log_path(cluster, "agent-elect-down"),
        "leading: the work starts",
    )
    .await;
    let (mut control, admin) = controller(cluster, &accounts.controller, "controller-down", &[]);
    wait_ready("the controller is ready", admin).await;
    let (mut control_elect, _) = controller(
        cluster,
        &accounts.controller,
        "controller-elect-down",
        &["--leader-elect"],
    );
    wait_logged(
        &log_path(cluster, "controller-elect-down"),
        "leading: the work starts",
    )
    .await;
    let before =
        |name: &str| std::fs::read_to_string(log_path(cluster, name)).map_or(0, |log| log.len());
    let since = ["controller-down", "controller-elect-down"].map(|name| (name, before(name)));
    cluster.stop();
    let stopped = Instant::now();
    for agent in [&plain, &elected] {
        wait_for(
            "the agent's EndpointSlice watch fails",
            Duration::from_secs(30),
            || async {
                let text = metrics_text(agent.admin).await.ok()?;
                // One series per EndpointSlice watch (the record feed's, MCS's): any.
                (sample_sum(
                    &text,
                    "xcc_sync_watch_state",
                    &[("kind", "EndpointSlice"), ("state", "unreachable")],
                ) >= 1.0)
                    .then_some(())
            },
        )
        .await;
    }
    // Their watches of Clusters and kubeconfig Secrets failed (at DEBUG until 10 s).
    for (name, since) in since {
        wait_for(
            &format!("{name} sees its watches fail"),
            Duration::from_secs(30),
            || async {
                let log = std::fs::read_to_string(log_path(cluster, name)).ok()?;
                log.get(since..)?
                    .contains("the watch of Cluster API Clusters failed; retrying")
                    .then_some(())
            },
        )
        .await;
    }
    eprintln!(
        "every binary saw the API server go within {:.1} s",
        stopped.elapsed().as_secs_f64()
    );
    let mut process = patcher(cluster, &accounts, "patcher-down");
    wait_logged(
        &log_path(cluster, "patcher-down"),
        "waiting for the ClusterIP",
    )
    .await;
    sigterm("agent, API server down", &mut plain.process, Duration::ZERO);
    sigterm(
        "agent, leader, API server down",
        &mut elected.process,
        Duration::ZERO,
    );
    sigterm("controller, API server down", &mut control, Duration::ZERO);
    sigterm(
        "controller, leader, API server down",
        &mut control_elect,
        Duration::ZERO,
    );
    sigterm_patcher("patcher, API server down", &mut process);
}

/// A write in flight for the controller: it applies a GatewayDNS's slices to a workload cluster
/// whose API server is blackholed (the address changed on the cluster the gateway runs on), and
/// gets SIGTERM while that write waits for an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_exits_promptly_on_sigterm_during_a_write() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["management", "cluster-a", "cluster-b"])
        .await
        .unwrap();
    management(&bed, &["cluster-a", "cluster-b"]).await;
    let (mgmt, ca, cb) = (
        bed.cluster("management"),
        bed.cluster("cluster-a"),
        bed.cluster("cluster-b"),
    );
    // cluster-b reads its slices (namespace xcc-dns, no agent needed: the controller writes what
    // the original XCC reads); the gateway runs on cluster-a.
    cb.kubectl(&["apply", "-f", &manifest("manifests/agent/agent.yaml")])
        .await
        .unwrap();
    envoy(ca, r#"[{"ip":"10.1.2.3"}]"#).await;
    let kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let name = "controller-writing";
    let (mut process, admin) = controller(mgmt, &kubeconfig.path, name, &[]);
    wait_ready("the controller is ready", admin).await;
    mgmt.kubectl(&[
        "apply",
        "-f",
        &manifest("manifests/examples/dev-team-gateway-dns.yaml"),
    ])
    .await
    .unwrap();
    // Its first write reached cluster-b.
    let slices: Api<EndpointSlice> = Api::namespaced(cb.client.clone(), "xcc-dns");
    let holds = |ip: &'static str| {
        let slices = slices.clone();
        async move {
            let listed = slices.list(&Default::default()).await.ok()?;
            listed
                .items
                .iter()
                .flat_map(|slice| &slice.endpoints)
                .any(|endpoint| endpoint.addresses.iter().any(|a| a == ip))
                .then_some(())
        }
    };
    wait_for(
        &format!("{KUARD}'s address in cluster-b's slices"),
        Duration::from_secs(60),
        || holds("10.1.2.3"),
    )
    .await;

    // cluster-b stops answering; the address changes on cluster-a: the controller writes the new
    // slices to cluster-b, and that write waits.
    let log = log_path(mgmt, name);
    let since = std::fs::read_to_string(&log).map_or(0, |text| text.len());
    let blackhole = Blackhole::start(cb);
    set_lb(ca, r#"[{"ip":"10.1.2.4"}]"#).await;
    // The reconcile waited for its writes (2 s) and reports cluster-b's as still going on; the
    // write itself gives up only after 10 s.
    wait_for(
        "the controller's write to cluster-b is still going on",
        Duration::from_secs(60),
        || async {
            let text = std::fs::read_to_string(&log).ok()?;
            let after = text.get(since..)?;
            after
                .contains("writes still going on; reported as pending")
                .then_some(())
        },
    )
    .await;
    wait_connected(name, cb, &process).await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text[since..].contains("timed out writing EndpointSlice"),
        "the write ended before the SIGTERM:\n{}",
        &text[since..]
    );
    sigterm(
        "controller, writing to a blackholed workload cluster",
        &mut process,
        Duration::ZERO,
    );
    drop(blackhole);
}

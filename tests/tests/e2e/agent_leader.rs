//! Two agent replicas with `--leader-elect`, as the manifest runs them: both serve DNS, only the
//! Lease holder runs the sync reconcilers; a killed leader is replaced within the Lease
//! duration, a leader stopped with SIGTERM hands over at once, and neither replica ever answers
//! NXDOMAIN for a live name meanwhile.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use xcc_e2e::{
    Cluster, Testbed, require_testbed,
    xcc::{Agent, dig, wait_dig},
};

use crate::resource_sync::{clusters_api, install_member_with, wait_for};

const NAME: &str = "gateway.cluster-a.dev-team.clusters.xcc.test";

async fn holder(cluster: &Cluster) -> Option<String> {
    Api::<Lease>::namespaced(cluster.client.clone(), "xcc-dns")
        .get_opt("xcc-agent")
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

async fn replica(cluster: &Cluster, name: &str) -> Agent {
    let kubeconfig = cluster
        .mint_kubeconfig("xcc-dns", "xcc-agent")
        .await
        .unwrap();
    let mut agent = Agent::start(
        &kubeconfig.path,
        &cluster.dir().join(format!("{name}.log")),
        &[
            "--log=info,xcc_agent=debug",
            "--leader-elect",
            &format!("--pod-name={name}"),
            "--secret-replication=false",
        ],
    )
    .unwrap();
    agent.wait_ready(Duration::from_secs(30)).await.unwrap();
    agent
}

/// Whether the replica's log says its sync reconcilers started.
fn synced(cluster: &Cluster, name: &str) -> bool {
    std::fs::read_to_string(cluster.dir().join(format!("{name}.log")))
        .unwrap_or_default()
        .contains("resource sync running")
}

/// Queries `agents` for `NAME` every 5 ms until stopped; counts answers that are not NOERROR.
struct Prober {
    bad: Arc<AtomicUsize>,
    asked: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Prober {
    fn start(agents: Vec<std::net::SocketAddr>) -> Prober {
        let bad = Arc::new(AtomicUsize::new(0));
        let asked = Arc::new(AtomicUsize::new(0));
        let (b, a) = (bad.clone(), asked.clone());
        let task = tokio::spawn(async move {
            loop {
                for agent in &agents {
                    if let Ok(answer) = dig(*agent, NAME, "A").await {
                        a.fetch_add(1, Ordering::Relaxed);
                        if answer.status != "NOERROR" {
                            b.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        Prober { bad, asked, task }
    }

    fn stop(self) -> (usize, usize) {
        self.task.abort();
        (
            self.asked.load(Ordering::Relaxed),
            self.bad.load(Ordering::Relaxed),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_syncs_and_hands_over_on_kill_and_on_sigterm() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["solo"]).await.unwrap();
    let cluster = bed.cluster("solo");
    // The member as installed, its own agent stopped: the replicas below take over.
    let mut member = install_member_with(&binaries, cluster, &["--secret-replication=false"]).await;
    member.agent.process.stop(Duration::from_secs(5));
    cluster
        .apply_yaml(&format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: dev-team-cluster-a-gateway\n  \
             namespace: xcc-dns\n  labels: {{kubernetes.io/service-name: dev-team-cluster-a-gateway}}\n  annotations:\n    \
             connectivity.tanzu.vmware.com/dns-hostname: '*.{NAME}'\naddressType: IPv4\nendpoints:\n- addresses: [10.4.4.4]\n"
        ))
        .await
        .unwrap();

    let mut a = replica(cluster, "agent-a").await;
    let mut b = replica(cluster, "agent-b").await;
    for agent in [&a, &b] {
        wait_dig(agent.dns, NAME, "A", Duration::from_secs(10), |d| {
            d.status == "NOERROR" && d.data == ["10.4.4.4"]
        })
        .await
        .unwrap();
    }
    // Exactly one leads, and only it runs the sync reconcilers: the other's never started.
    let first = wait_for("a Lease holder", Duration::from_secs(30), || {
        holder(cluster)
    })
    .await;
    let (leader, standby, standby_name) = if first == "agent-a" {
        (&mut a, &mut b, "agent-b")
    } else {
        (&mut b, &mut a, "agent-a")
    };
    wait_for("the leader syncs", Duration::from_secs(30), || async {
        synced(cluster, &first).then_some(())
    })
    .await;
    // The leader's own Cluster status proves its reconcilers run; the standby has seen the
    // same Lease (its log says it waits) and started nothing.
    wait_for("the standby waits", Duration::from_secs(30), || async {
        std::fs::read_to_string(cluster.dir().join(format!("{standby_name}.log")))
            .ok()?
            .contains("waiting for the Lease")
            .then_some(())
    })
    .await;
    assert!(
        !synced(cluster, standby_name),
        "the standby started its reconcilers"
    );

    // kill -9 the leader: the standby takes over within the Lease duration (15 s) + slack.
    let probe = Prober::start(vec![standby.dns]);
    let killed = Instant::now();
    leader.process.kill();
    let took = wait_for(
        "the standby takes over",
        Duration::from_secs(25),
        || async {
            (holder(cluster).await.as_deref() == Some(standby_name)
                && synced(cluster, standby_name))
            .then_some(killed.elapsed())
        },
    )
    .await;
    let (asked, bad) = probe.stop();
    eprintln!(
        "takeover after kill -9: {:.1} s ({asked} queries, {bad} not NOERROR)",
        took.as_secs_f64()
    );
    assert!(took <= Duration::from_secs(20), "takeover took {took:?}");
    assert!(asked > 0);
    assert_eq!(
        bad, 0,
        "the standby answered something else than NOERROR during the handover"
    );
    assert!(
        clusters_api(cluster)
            .get_opt("solo")
            .await
            .unwrap()
            .is_some(),
        "nothing was deleted"
    );

    // A new standby; SIGTERM on the leader hands over within 2 s.
    let mut c = replica(cluster, "agent-c").await;
    wait_for("agent-c waits", Duration::from_secs(30), || async {
        std::fs::read_to_string(cluster.dir().join("agent-c.log"))
            .ok()?
            .contains("waiting for the Lease")
            .then_some(())
    })
    .await;
    let probe = Prober::start(vec![c.dns]);
    let stopped = Instant::now();
    standby.process.stop(Duration::from_secs(5));
    let took = wait_for("agent-c takes over", Duration::from_secs(20), || async {
        (holder(cluster).await.as_deref() == Some("agent-c")).then_some(stopped.elapsed())
    })
    .await;
    let (asked, bad) = probe.stop();
    eprintln!(
        "handover after SIGTERM: {:.2} s ({asked} queries, {bad} not NOERROR)",
        took.as_secs_f64()
    );
    assert!(took <= Duration::from_secs(2), "handover took {took:?}");
    assert_eq!(bad, 0);
    c.wait_ready(Duration::from_secs(5)).await.unwrap();
}

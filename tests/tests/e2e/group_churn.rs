//! A group of three xcc members never churns, whatever the join path (issue 25): the third
//! cluster joins through the member the group was described from or through the other one, with
//! each of the three names sorting first. From the exchange on, no Cluster, peer Secret or synced
//! object is written more than 4 times, and nothing at all in a quiet 30 s window during which
//! every agent is shown to be working (its Cluster reconciles, in /metrics, go on).
//!
//! Each join path is one test bed; its cases run one after the other on it, the group taken apart
//! between them (agents stopped, every Cluster and Secret but each cluster's own deleted).

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams},
    runtime::watcher,
};
use xcc_e2e::{Binaries, Cluster, Testbed, require_testbed};

use crate::{
    cluster_group::exchange,
    resource_sync::{
        Member, REGISTRY_NS, TEST_RULE, TEST_SECRET, apply_namespaced, install_member, start_agent,
        wait_secret, wait_state,
    },
};

/// The bed's names: `a` sorts first, whichever role it plays.
const NAMES: [&str; 3] = ["a", "b", "c"];
/// Writes of one object allowed from the exchange on.
const MAX_WRITES: usize = 4;
const QUIET: Duration = Duration::from_secs(30);

/// Writes (watch events after the first list) per `cluster kind name`.
type Writes = Arc<Mutex<BTreeMap<String, usize>>>;

/// Counts every write of Clusters, ResourceSyncRules and Secrets of the registry namespace on
/// `cluster` from now on; the task ends when the returned handle is aborted.
async fn count_writes(cluster: &Cluster, writes: Writes) -> Vec<tokio::task::JoinHandle<()>> {
    let registry = |kind: &str| {
        ApiResource::from_gvk(&GroupVersionKind::gvk(
            "clusterregistry.k8s.cisco.com",
            "v1alpha1",
            kind,
        ))
    };
    let apis: Vec<(&str, Api<DynamicObject>)> = vec![
        (
            "Cluster",
            Api::all_with(cluster.client.clone(), &registry("Cluster")),
        ),
        (
            "ResourceSyncRule",
            Api::all_with(cluster.client.clone(), &registry("ResourceSyncRule")),
        ),
        (
            "Secret",
            Api::namespaced_with(
                cluster.client.clone(),
                REGISTRY_NS,
                &ApiResource::erase::<Secret>(&()),
            ),
        ),
    ];
    let mut tasks = Vec::new();
    for (kind, api) in apis {
        let writes = writes.clone();
        let name = cluster.name.clone();
        let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
        tasks.push(tokio::spawn(async move {
            let mut listed_tx = Some(listed_tx);
            let mut listed = false;
            let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let object = match event {
                    Ok(watcher::Event::InitDone) => {
                        listed = true;
                        if let Some(tx) = listed_tx.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) if listed => o,
                    _ => continue,
                };
                *writes
                    .lock()
                    .unwrap()
                    .entry(format!("{name} {kind} {}", object.name_any()))
                    .or_default() += 1;
            }
        }));
        listed_rx.await.expect("the write counter lists");
    }
    tasks
}

/// `xcc_sync_reconciles_total{reconciler="clusters",result="ok"}` of the agent at `admin`.
async fn cluster_reconciles(admin: SocketAddr) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(admin).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    text.lines()
        .find_map(|l| {
            l.strip_prefix(r#"xcc_sync_reconciles_total{reconciler="clusters",result="ok"} "#)
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Takes the group apart: agents stopped, every Cluster, peer Secret and rule but each cluster's
/// own gone, then the agents started again, each cluster alone.
async fn take_apart(bed: &Testbed, members: &mut [Member]) {
    for member in members.iter_mut() {
        member.agent.process.stop(Duration::from_secs(5));
    }
    let clusters = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "clusterregistry.k8s.cisco.com",
        "v1alpha1",
        "Cluster",
    ));
    let rules = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "clusterregistry.k8s.cisco.com",
        "v1alpha1",
        "ResourceSyncRule",
    ));
    for (cluster, member) in bed.clusters.iter().zip(members.iter_mut()) {
        let client = &cluster.client;
        let all = ListParams::default();
        for c in Api::<DynamicObject>::all_with(client.clone(), &clusters)
            .list(&all)
            .await
            .unwrap()
        {
            if c.name_any() != cluster.name {
                Api::<DynamicObject>::all_with(client.clone(), &clusters)
                    .delete(&c.name_any(), &DeleteParams::default())
                    .await
                    .unwrap();
            }
        }
        Api::<DynamicObject>::all_with(client.clone(), &rules)
            .delete_collection(&DeleteParams::default(), &all)
            .await
            .unwrap();
        let secrets: Api<Secret> = Api::namespaced(client.clone(), REGISTRY_NS);
        for s in secrets.list(&all).await.unwrap() {
            if s.name_any() != cluster.name {
                secrets
                    .delete(&s.name_any(), &DeleteParams::default())
                    .await
                    .unwrap();
            }
        }
        member.agent = start_agent(cluster, "xcc-agent.log").await;
    }
}

/// One case: `first` ⇄ `second`, then `third` ⇄ `through`; writes counted from the second
/// exchange on, then a quiet window.
async fn join_case(
    bed: &Testbed,
    members: &[Member],
    [first, second, third]: [&str; 3],
    through: &str,
) {
    let case = format!("{first} ⇄ {second}, then {third} ⇄ {through}");
    let cluster = |name: &str| bed.cluster(name);
    let first_id = members[NAMES.iter().position(|n| *n == first).unwrap()]
        .id
        .clone();
    // A synced object besides the group's own: the reference's rule and Secret, on the first.
    apply_namespaced(cluster(first), TEST_SECRET).await;
    cluster(first).apply_yaml(TEST_RULE).await.unwrap();
    exchange(cluster(first), cluster(second)).await;
    for on in [first, second] {
        for name in [first, second] {
            let type_ = if on == name { "Local" } else { "Peer" };
            wait_state(cluster(on), name, "Ready", type_, "True").await;
        }
    }
    wait_secret(cluster(second), "test-secret", Some(&first_id)).await;

    let writes: Writes = Arc::default();
    let mut counters = Vec::new();
    for name in NAMES {
        counters.extend(count_writes(cluster(name), writes.clone()).await);
    }
    let started = std::time::Instant::now();
    exchange(cluster(third), cluster(through)).await;
    for on in NAMES {
        for name in NAMES {
            let type_ = if on == name { "Local" } else { "Peer" };
            wait_state(cluster(on), name, "Ready", type_, "True").await;
        }
        let owner = (on != first).then_some(first_id.as_str());
        wait_secret(cluster(on), "test-secret", owner).await;
    }
    let formed = started.elapsed();
    // Settled: no write for 5 s (the formation's last status writes).
    let total = || writes.lock().unwrap().values().sum::<usize>();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = total();
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = total();
        if now == last {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{case}: still writing a minute after the group formed: {:?}",
            writes.lock().unwrap()
        );
        last = now;
    }

    // The quiet window: no write, and every agent at work throughout.
    let reconciles_before: Vec<f64> =
        futures::future::join_all(members.iter().map(|m| cluster_reconciles(m.agent.admin))).await;
    // sleep: the measured window; the reconciles counted across it prove every agent worked
    // throughout.
    tokio::time::sleep(QUIET).await;
    let reconciles_after: Vec<f64> =
        futures::future::join_all(members.iter().map(|m| cluster_reconciles(m.agent.admin))).await;
    let quiet_writes = total() - last;
    for counter in counters {
        counter.abort();
    }
    let writes = writes.lock().unwrap().clone();
    let most = writes.values().copied().max().unwrap_or(0);
    eprintln!(
        "{case}: formed in {formed:?}; writes per object from the exchange on (most {most}): \
         {writes:?}; {quiet_writes} writes in the quiet {QUIET:?}"
    );
    for ((name, before), after) in NAMES.iter().zip(&reconciles_before).zip(&reconciles_after) {
        // A peer is checked every 5 s: two peers over 30 s give about a dozen reconciles.
        assert!(
            after - before >= 4.0,
            "{case}: {name}'s agent did {} Cluster reconciles in the quiet window",
            after - before
        );
    }
    assert_eq!(
        quiet_writes, 0,
        "{case}: writes in the quiet window: {writes:?}"
    );
    for (object, count) in &writes {
        assert!(
            *count <= MAX_WRITES,
            "{case}: {object} written {count} times from the exchange on: {writes:?}"
        );
    }
}

/// Every order in which each of the three names sorts first, as (first, second, third).
const ORDERS: [[&str; 3]; 3] = [["a", "b", "c"], ["b", "a", "c"], ["b", "c", "a"]];

async fn join_path(through_described: bool) {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &NAMES).await.unwrap();
    let mut members = members(&binaries, &bed).await;
    for (i, order) in ORDERS.into_iter().enumerate() {
        if i > 0 {
            take_apart(&bed, &mut members).await;
        }
        let through = if through_described {
            order[0]
        } else {
            order[1]
        };
        join_case(&bed, &members, order, through).await;
    }
}

async fn members(binaries: &Binaries, bed: &Testbed) -> Vec<Member> {
    let mut members = Vec::new();
    for cluster in &bed.clusters {
        members.push(install_member(binaries, cluster).await);
    }
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_joining_through_the_described_member_causes_no_churn() {
    join_path(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_joining_through_the_other_member_causes_no_churn() {
    join_path(false).await;
}

//! Resource sync benchmark (run by `bench/resource-sync.sh`, not by the default test run), on a
//! group of three clusters with one rule for Secrets labelled `bench: "yes"` in team-a:
//!
//! - 1,000 such Secrets are created on the first cluster while the agents of the two others are
//!   stopped; they start, and the clock runs until all 1,000 copies exist on both (bar: < 10 s).
//!   Creating them is not timed: that measures the test bed's API server, not the agents.
//! - API requests per synced object: the second cluster's API server counts the requests on
//!   Secrets (`apiserver_request_total`) while its agent syncs; the benchmark's own are removed.
//! - The agent's RSS.
//! - A restart of both agents when nothing changed: bar zero writes (no POST, PUT, PATCH or
//!   DELETE of Secrets, and every copy's resourceVersion unchanged).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    api::{ListParams, ObjectMeta},
};
use xcc_e2e::{Cluster, Testbed, require_testbed, xcc::Agent};

use crate::measure::{count_delta, create_all, request_counts, rss_mib};
use crate::resource_sync::{NAMES, group};

const OBJECTS: usize = 1000;
const NS: &str = "team-a";

const BENCH_RULE: &str = "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1
kind: ResourceSyncRule
metadata: {name: bench}
spec:
  groupVersionKind: {version: v1, kind: Secret}
  rules:
  - match:
    - namespaces: [team-a]
      labels:
      - matchLabels: {bench: \"yes\"}
";

fn secrets(cluster: &Cluster) -> Api<Secret> {
    Api::namespaced(cluster.client.clone(), NS)
}

/// `apiserver_request_total` for Secrets on `cluster`, summed by verb.
async fn secret_requests(cluster: &Cluster) -> BTreeMap<String, f64> {
    request_counts(cluster, |resource| resource == "secrets")
        .await
        .into_iter()
        .filter_map(|(key, n)| Some((key.strip_suffix(" secrets")?.to_string(), n)))
        .collect()
}

fn writes(requests: &BTreeMap<String, f64>) -> f64 {
    ["POST", "PUT", "PATCH", "DELETE", "APPLY"]
        .iter()
        .map(|v| requests.get(*v).unwrap_or(&0.0))
        .sum()
}

/// resourceVersions of the copies on `cluster`.
async fn copies(cluster: &Cluster) -> BTreeMap<String, String> {
    secrets(cluster)
        .list(&ListParams::default().labels("bench=yes"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| (s.name_any(), s.resource_version().unwrap_or_default()))
        .collect()
}

async fn start_agent(cluster: &Cluster, log: &str) -> Agent {
    let kubeconfig = cluster
        .mint_kubeconfig("xcc-dns", "xcc-agent")
        .await
        .unwrap();
    Agent::start(
        &kubeconfig.path,
        &cluster.dir().join(log),
        &["--log=info", "--secret-replication=false"],
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: bench/resource-sync.sh runs it"]
async fn resource_sync_benchmark() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &NAMES).await.unwrap();
    let mut members = group(&binaries, &bed).await;
    let [first, second, third] = [0, 1, 2].map(|i| &bed.clusters[i]);
    for cluster in &bed.clusters {
        cluster.apply_yaml(BENCH_RULE).await.unwrap();
    }
    for member in &mut members[1..] {
        member.agent.process.stop(Duration::from_secs(10));
    }

    let started = Instant::now();
    let objects: Vec<Secret> = (0..OBJECTS)
        .map(|i| Secret {
            metadata: ObjectMeta {
                name: Some(format!("bench-{i:04}")),
                namespace: Some(NS.into()),
                labels: Some([("bench".to_string(), "yes".to_string())].into()),
                ..Default::default()
            },
            string_data: Some([("v".to_string(), format!("value-{i}"))].into()),
            ..Default::default()
        })
        .collect();
    create_all(&secrets(first), objects).await;
    eprintln!(
        "resource-sync: {OBJECTS} Secrets created on first in {:.2} s (other agents stopped)",
        started.elapsed().as_secs_f64()
    );

    let before = secret_requests(second).await;
    let started = Instant::now();
    for (member, cluster) in members[1..].iter_mut().zip([second, third]) {
        member.agent = start_agent(cluster, "xcc-agent-bench.log").await;
    }
    let mut lists = 0.0;
    let mut done = [false, false];
    while done != [true, true] {
        for (i, cluster) in [second, third].into_iter().enumerate() {
            if !done[i] {
                lists += if i == 0 { 1.0 } else { 0.0 };
                done[i] = copies(cluster).await.len() == OBJECTS;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "copies incomplete after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let converged = started.elapsed();
    // sleep: lets the last status writes land before the request count (a figure, not an
    // assertion).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut requests = count_delta(&secret_requests(second).await, &before);
    *requests.entry("LIST".into()).or_insert(0.0) -= lists;
    let total: f64 = requests.values().sum();
    eprintln!(
        "resource-sync: agents started, {OBJECTS} copies on second and third in {:.2} s (bar < 10 s)",
        converged.as_secs_f64()
    );
    eprintln!(
        "resource-sync: second's API server, requests on Secrets while syncing: {requests:?} = {:.2} per synced object; agent RSS {:.0} MiB",
        total / OBJECTS as f64,
        rss_mib(members[1].agent.process.pid())
    );

    // A restart with nothing changed writes nothing.
    let versions = [copies(second).await, copies(third).await];
    let before = [secret_requests(second).await, secret_requests(third).await];
    for (member, cluster) in members[1..].iter_mut().zip([second, third]) {
        member.agent.process.stop(Duration::from_secs(10));
        member.agent = start_agent(cluster, "xcc-agent-restart.log").await;
        member
            .agent
            .wait_ready(Duration::from_secs(30))
            .await
            .unwrap();
    }
    // sleep: an agent holds keys back for 15 s after it starts while its peers settle (the
    // engine's SETTLE) and looks at them when that ends; the proof that it did comes next.
    tokio::time::sleep(Duration::from_secs(15)).await;
    for member in &members[1..] {
        let progress = member.agent.progress("resource-sync").await.unwrap();
        assert!(
            progress.reconciles >= OBJECTS as f64 && progress.queued == 0.0,
            "the restarted agent looked at every copy: {progress:?}"
        );
    }
    let written = [
        writes(&count_delta(&secret_requests(second).await, &before[0])),
        writes(&count_delta(&secret_requests(third).await, &before[1])),
    ];
    eprintln!(
        "resource-sync: restart of both agents, nothing changed: {} writes on second, {} on third (bar 0)",
        written[0], written[1]
    );
    assert_eq!(versions, [copies(second).await, copies(third).await]);
    assert!(
        converged < Duration::from_secs(10),
        "convergence bar missed"
    );
    assert_eq!(written, [0.0, 0.0], "writes after a restart");
}

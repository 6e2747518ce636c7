//! One watch per (cluster, kind) in the agent: with every reconciler on (Secret replication,
//! resource sync with a rule reading Secrets, group sync), the agent holds one watch of each kind
//! that several reconcilers read (local Secrets, ResourceSyncRules, Clusters, SecretImports,
//! SecretExports and both kinds of monitor), counted by the API server itself
//! (`apiserver_longrunning_requests`, the watches open right now): the count with the agent
//! running, less the count before it started (the role-aggregation controller of the test bed
//! watches too), once the peer's agent, which also watches this cluster, is stopped.

use std::time::Duration;

use xcc_e2e::{Cluster, Testbed, require_testbed};

use crate::{
    cluster_group::exchange,
    resource_sync::{
        TEST_RULE, TEST_SECRET, apply_namespaced, prepare_member, start_agent_with, wait_for,
        wait_secret, wait_state,
    },
};

/// The kinds the agent under test must watch once.
const WATCHED: [&str; 7] = [
    "secrets",
    "resourcesyncrules",
    "clusters",
    "secretimports",
    "secretexports",
    "clusterresourceimportmonitors",
    "clusterresourceexportmonitors",
];

/// Watches of `resource` open on `cluster`'s API server now, by its own metrics.
async fn open_watches(cluster: &Cluster, resource: &str) -> Option<u64> {
    let metrics = cluster.kubectl(&["get", "--raw", "/metrics"]).await.ok()?;
    let wanted = format!("resource=\"{resource}\"");
    Some(
        metrics
            .lines()
            .filter(|l| l.starts_with("apiserver_longrunning_requests{"))
            .filter(|l| l.contains("verb=\"WATCH\"") && l.contains(&wanted))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_watches_each_local_kind_once_for_all_its_reconcilers() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["first", "second"])
        .await
        .unwrap();
    let [first, second] = [0, 1].map(|i| &bed.clusters[i]);
    let prepared = prepare_member(&binaries, first).await;
    let second_prepared = prepare_member(&binaries, second).await;
    let mut before = Vec::new();
    for resource in WATCHED {
        before.push(
            open_watches(first, resource)
                .await
                .expect("API server metrics"),
        );
    }
    // Every reconciler on (the defaults).
    let _first = prepared.start(start_agent_with(first, "xcc-agent.log", &[]).await);
    let mut second_member =
        second_prepared.start(start_agent_with(second, "xcc-agent.log", &[]).await);
    exchange(first, second).await;
    for cluster in [first, second] {
        for name in ["first", "second"] {
            let type_ = if *name == cluster.name {
                "Local"
            } else {
                "Peer"
            };
            wait_state(cluster, name, "Ready", type_, "True").await;
        }
    }
    // A rule that copies a Secret: the engine reads whole Secrets here, replication and the
    // Cluster reconciler read their metadata. The copy arriving proves the engine is running.
    let second_id = second.kube_system_uid().await.unwrap();
    apply_namespaced(second, TEST_SECRET).await;
    first.apply_yaml(TEST_RULE).await.unwrap();
    wait_secret(first, "test-secret", Some(&second_id)).await;

    // The second agent watches the first as its peer: stop it, so only the first's agent
    // watches the first's API server.
    second_member.agent.process.stop(Duration::from_secs(5));
    for (resource, before) in WATCHED.iter().zip(before) {
        let what = format!(
            "exactly one watch of {resource} by the agent on the first cluster ({before} before it)"
        );
        let last = std::cell::Cell::new(None);
        let seen = wait_for(&what, Duration::from_secs(30), || async {
            let count = open_watches(first, resource).await;
            eprintln!("open watches of {resource} on the first cluster: {count:?}");
            last.set(count);
            count.filter(|c| *c == before + 1)
        })
        .await;
        assert_eq!(seen, before + 1, "{what}: last count {:?}", last.get());
    }
    // The other kinds, for the log of this run.
    for resource in ["clusterfeatures", "resourceimportmonitorbindings"] {
        eprintln!(
            "open watches of {resource} on the first cluster: {:?}",
            open_watches(first, resource).await
        );
    }
}

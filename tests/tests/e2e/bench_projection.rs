//! API projection benchmark (run by `bench/projection.sh`, not by the default test run), on the
//! set-up of `projection_workload` (two real API servers, the workload one aggregating to the
//! agent's API server):
//! - **added latency of a get**: the same object read 1,000 times straight from the service
//!   cluster and 1,000 times through the workload cluster (its kube-apiserver, then the agent:
//!   front-proxy TLS, authorization, the forward), interleaved; p50/p99 of each and of the
//!   difference of the medians (bar: p50 added ≤ 2 ms);
//! - **watch relay**: 200 changes made on the service cluster, each seen by a watch there and by a
//!   watch through the workload cluster; the relay latency is when the second saw it minus when
//!   the first did (bar: p99 ≤ 20 ms);
//! - **100 concurrent watches** through the one agent: its RSS before and after, and every watch
//!   gets the next change (bar: growth ≤ 30 MB).

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams, WatchEvent, WatchParams},
};
use serde_json::json;
use xcc_e2e::require_testbed;

use crate::{
    measure::{percentile, rss_mib},
    projection_workload::{RABBIT, project, rabbits},
};

const GETS: usize = 1_000;
const CHANGES: usize = 200;
const WATCHES: usize = 100;

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Opens a watch of team-1's RabbitmqClusters from `version`; the stream of its events.
async fn watch(
    api: &Api<DynamicObject>,
    version: &str,
) -> impl futures::Stream<Item = WatchEvent<DynamicObject>> + Unpin + use<> {
    api.watch(&WatchParams::default().timeout(290), version)
        .await
        .unwrap()
        .map(|event| event.unwrap())
        .boxed()
}

/// Waits for the event that carries `replicas`; when it arrived.
async fn seen(
    events: &mut (impl futures::Stream<Item = WatchEvent<DynamicObject>> + Unpin),
    replicas: usize,
) -> Instant {
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if let WatchEvent::Modified(object) = event
                && object.data["spec"]["replicas"] == json!(replicas)
            {
                return Instant::now();
            }
        }
        panic!("the watch ended");
    })
    .await
    .unwrap_or_else(|_| panic!("change to {replicas} replicas never arrived"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: bench/projection.sh runs it"]
async fn projection_benchmark() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let projected = project(&binaries).await;
    let (services, workload) = (projected.services(), projected.workload());
    workload.apply_yaml(RABBIT).await.unwrap();
    let direct: Api<DynamicObject> =
        Api::namespaced_with(services.client.clone(), "team-1", &rabbits());
    let proxied: Api<DynamicObject> =
        Api::namespaced_with(workload.client.clone(), "team-1", &rabbits());

    // Gets, interleaved so that both paths see the same machine; 50 of each first to warm up.
    for _ in 0..50 {
        direct.get("hello").await.unwrap();
        proxied.get("hello").await.unwrap();
    }
    let (mut straight, mut through) = (Vec::with_capacity(GETS), Vec::with_capacity(GETS));
    for _ in 0..GETS {
        let started = Instant::now();
        direct.get("hello").await.unwrap();
        straight.push(started.elapsed());
        let started = Instant::now();
        proxied.get("hello").await.unwrap();
        through.push(started.elapsed());
    }
    straight.sort();
    through.sort();
    let added = percentile(&through, 50.0).saturating_sub(percentile(&straight, 50.0));
    let added_p99 = percentile(&through, 99.0).saturating_sub(percentile(&straight, 99.0));
    println!(
        "projection: get straight p50 {:.2} ms p99 {:.2} ms; through the workload cluster p50 {:.2} ms p99 {:.2} ms; added p50 {:.2} ms p99 {:.2} ms ({GETS} each)",
        millis(percentile(&straight, 50.0)),
        millis(percentile(&straight, 99.0)),
        millis(percentile(&through, 50.0)),
        millis(percentile(&through, 99.0)),
        millis(added),
        millis(added_p99),
    );

    // Watch relay: one watch on each side, from the same version.
    let version = direct
        .get("hello")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut there = watch(&direct, &version).await;
    let mut here = watch(&proxied, &version).await;
    let mut relay = Vec::with_capacity(CHANGES);
    for i in 0..CHANGES {
        let replicas = 10 + i;
        direct
            .patch(
                "hello",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
        let (upstream_at, proxied_at) =
            futures::join!(seen(&mut there, replicas), seen(&mut here, replicas));
        relay.push(proxied_at.saturating_duration_since(upstream_at));
    }
    relay.sort();
    println!(
        "projection: watch relay p50 {:.2} ms p99 {:.2} ms max {:.2} ms ({CHANGES} changes)",
        millis(percentile(&relay, 50.0)),
        millis(percentile(&relay, 99.0)),
        millis(*relay.last().unwrap()),
    );
    drop((there, here));

    // 100 watches at once through the one agent.
    let pid = projected.workload_agent.process.pid();
    let rss_before = rss_mib(pid);
    let version = direct
        .get("hello")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut watches = futures::stream::iter(0..WATCHES)
        .map(|_| {
            let proxied = proxied.clone();
            let version = version.clone();
            async move { watch(&proxied, &version).await }
        })
        .buffer_unordered(20)
        .collect::<Vec<_>>()
        .await;
    let replicas = 10_000;
    direct
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
    let changed = Instant::now();
    let arrived = futures::future::join_all(watches.iter_mut().map(|w| seen(w, replicas))).await;
    let last = arrived.iter().max().unwrap().duration_since(changed);
    let rss_after = rss_mib(pid);
    let growth = rss_after - rss_before;
    println!(
        "projection: {WATCHES} watches through the agent: every one got the change within {:.1} ms; agent RSS {rss_before:.1} → {rss_after:.1} MiB (+{growth:.1} MiB)",
        millis(last),
    );
    drop(watches);

    let mut missed = Vec::new();
    if added > Duration::from_millis(2) {
        missed.push(format!(
            "added get latency p50 {:.2} ms > 2 ms",
            millis(added)
        ));
    }
    if percentile(&relay, 99.0) > Duration::from_millis(20) {
        missed.push(format!(
            "watch relay p99 {:.2} ms > 20 ms",
            millis(percentile(&relay, 99.0))
        ));
    }
    if growth * 1.048_576 > 30.0 {
        missed.push(format!("RSS growth {growth:.1} MiB > 30 MB"));
    }
    assert!(missed.is_empty(), "bars missed: {}", missed.join("; "));
}

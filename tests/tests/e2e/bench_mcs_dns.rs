//! Freshness of the clusterset names (run by `bench/mcs-dns.sh`, not by the default test run): on
//! one real API server with one agent, the time from a write the MCS reconciler makes to the
//! agent's first answer that shows it. 50 new ServiceImports (until `<svc>.demo.svc.clusterset.local`
//! answers its IP) and 50 endpoint changes of an MCS EndpointSlice (until the endpoint's own name
//! answers its new address); prints p50, p99 and the worst of each, and fails when a p99 misses
//! the bar: 1 s (the "export → DNS answer" and "endpoint change" bars).
//!
//! The clock starts when the API server has accepted the write and stops at the first DNS answer
//! with the new data (UDP queries straight to the agent, one every millisecond).

use std::{
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use hickory_proto::rr::Name;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use xcc_e2e::{Testbed, require_testbed};

use crate::{
    bench_propagation::ask,
    mcs_dns::{WEB, agent, set_up},
    measure::percentile,
};

const CHANGES: usize = 50;
const BAR: Duration = Duration::from_secs(1);

/// Asks `name` every millisecond until it answers exactly `ip`; returns how long that took.
async fn until_answers(
    socket: &tokio::net::UdpSocket,
    server: SocketAddr,
    name: &Name,
    ip: IpAddr,
    id: &mut u16,
) -> Duration {
    let started = Instant::now();
    loop {
        *id = id.wrapping_add(1);
        if ask(socket, server, name, *id).await == [ip] {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{name} never answered {ip}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn report(what: &str, mut took: Vec<Duration>) -> Duration {
    took.sort();
    let p99 = percentile(&took, 99.0);
    println!(
        "mcs-dns {what}: p50 {:?} p99 {p99:?} max {:?} over {} changes (bar: p99 ≤ {BAR:?})",
        percentile(&took, 50.0),
        took.last().copied().unwrap_or_default(),
        took.len()
    );
    p99
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: bench/mcs-dns.sh runs it"]
async fn clusterset_freshness_benchmark() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["solo"]).await.unwrap();
    let cluster = bed.cluster("solo");
    set_up(cluster).await;
    let agent = agent(cluster).await;
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut id = 0u16;

    // New imports: created, until their name answers.
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("multicluster.x-k8s.io", "v1beta1", "ServiceImport"),
        "serviceimports",
    );
    let imports: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), "demo", &resource);
    let mut created = Vec::with_capacity(CHANGES);
    for i in 0..CHANGES {
        let ip: IpAddr = format!("10.97.0.{}", 10 + i).parse().unwrap();
        let svc = format!("svc-{i}");
        let import: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceImport",
            "metadata": {"name": svc, "namespace": "demo"},
            "spec": {"type": "ClusterSetIP", "ips": [ip.to_string()],
                     "ports": [{"name": "tcp", "protocol": "TCP", "port": 80}]},
        }))
        .unwrap();
        imports
            .create(&PostParams::default(), &import)
            .await
            .unwrap();
        let name = Name::from_ascii(format!("{svc}.demo.svc.clusterset.local.")).unwrap();
        created.push(until_answers(&socket, agent.dns, &name, ip, &mut id).await);
    }

    // Endpoint changes: c2's one endpoint moves to a new address, until its own name answers it.
    let slices: Api<EndpointSlice> = Api::namespaced(cluster.client.clone(), "demo");
    // The import `web` names the endpoints; the slice's labels keep it among the MCS slices.
    let mut changed = Vec::with_capacity(CHANGES);
    for i in 0..CHANGES {
        let ip: IpAddr = format!("10.1.1.{}", 10 + i).parse().unwrap();
        let patch = serde_json::json!({"endpoints": [
            {"addresses": [ip.to_string()], "hostname": "pod", "conditions": {"ready": true}}
        ]});
        slices
            .patch("web-c2", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let name = Name::from_ascii(format!("pod.c2.{WEB}")).unwrap();
        changed.push(until_answers(&socket, agent.dns, &name, ip, &mut id).await);
    }

    let import_p99 = report("ServiceImport created → answer", created);
    let slice_p99 = report("EndpointSlice changed → answer", changed);
    assert!(
        import_p99 <= BAR,
        "ServiceImport → answer p99 {import_p99:?} > {BAR:?}"
    );
    assert!(
        slice_p99 <= BAR,
        "EndpointSlice → answer p99 {slice_p99:?} > {BAR:?}"
    );
}

use super::{
    clients::kubeconfig_secret_name, services::ready_endpoints, slices::next_generation, *,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;
use std::collections::BTreeSet;
use xcc_kube::scenario::{self, Scenario};

use crate::desired::{Observation, SLICE_NAMESPACE};

fn status(code: u16, reason: &str) -> (u16, serde_json::Value) {
    scenario::status(code, reason, &format!("{reason} by the test"))
}

fn workloads(client: Client, ttl: Duration) -> Workloads {
    let (trigger, _) = tokio::sync::mpsc::unbounded_channel();
    Workloads::new(
        client,
        PeerClients::new(xcc_kube::PeerTrust::default()),
        trigger,
        ttl,
    )
}

fn slice(name: &str, ready: &[Option<bool>]) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": SLICE_NAMESPACE},
        "addressType": "IPv4",
        "endpoints": ready.iter().enumerate().map(|(i, ready)| json!({
            "addresses": [format!("10.0.0.{i}")],
            "conditions": {"ready": ready},
        })).collect::<Vec<_>>(),
    }))
    .unwrap()
}

#[test]
fn ready_endpoints_count_an_unset_ready_as_ready_over_every_slice() {
    let slices = [
        slice("a", &[Some(true), None, Some(false)]),
        slice("b", &[Some(false)]),
        slice("c", &[None]),
    ];
    assert_eq!(ready_endpoints(&slices), 3);
    assert_eq!(ready_endpoints(&slices[1..2]), 0);
    assert_eq!(ready_endpoints(&[]), 0);
}

#[test]
fn a_refused_kubeconfig_and_an_unavailable_one_are_told_apart() {
    assert_eq!(kubeconfig_secret_name("cluster-a"), "cluster-a-kubeconfig");
    let rejected = ClientError::Rejected("exec is refused".into());
    assert_eq!(rejected.to_string(), "exec is refused");
    assert_eq!(
        Observation::from(rejected),
        Observation::KubeconfigRejected("exec is refused".into())
    );
    assert_eq!(
        Observation::from(ClientError::Unavailable("no Secret".into())),
        Observation::Unreachable("no Secret".into())
    );
    assert_ne!(next_generation(), next_generation());
}

#[tokio::test]
async fn an_announcement_is_read_once_per_ttl_and_a_refused_read_is_cached_too() {
    const ANNOUNCEMENT: &str = "/api/v1/namespaces/xcc-dns/configmaps/xcc-agent";
    let (client, server) = Scenario::new()
        .always("GET", ANNOUNCEMENT)
        .reply((
            200,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "xcc-agent", "namespace": "xcc-dns"}}),
        ))
        .run();
    let asked = || server.count(|r| r.method == "GET" && r.path == ANNOUNCEMENT);
    let cached = workloads(client.clone(), Duration::from_secs(3600));
    assert!(cached.cached_announcement("ns", "a").is_none());
    let first = cached.announcement("ns", "a", &client).await;
    assert!(matches!(first, Ok(Some(_))), "{first:?}");
    let again = cached.announcement("ns", "a", &client).await;
    assert!(matches!(again, Ok(Some(_))), "{again:?}");
    assert_eq!(asked(), 1, "one read within the TTL");
    assert!(matches!(
        cached.cached_announcement("ns", "a"),
        Some(Ok(Some(_)))
    ));
    // Another cluster is another read.
    cached.announcement("ns", "b", &client).await.unwrap();
    assert_eq!(asked(), 2);
    // With no TTL every call reads.
    let uncached = workloads(client.clone(), Duration::ZERO);
    uncached.announcement("ns", "a", &client).await.unwrap();
    uncached.announcement("ns", "a", &client).await.unwrap();
    assert_eq!(asked(), 4);
    server.done().await;

    let (refusing, server) = Scenario::new()
        .always("GET", ANNOUNCEMENT)
        .reply(status(403, "Forbidden"))
        .run();
    let cached = workloads(refusing.clone(), Duration::from_secs(3600));
    let error = cached.announcement("ns", "a", &refusing).await.unwrap_err();
    assert!(error.contains("xcc-dns/xcc-agent"), "{error}");
    assert!(cached.announcement("ns", "a", &refusing).await.is_err());
    assert_eq!(server.done().await.len(), 1, "a refusal is cached as well");
}

#[tokio::test]
async fn slices_of_a_cluster_without_a_client_entry_are_listed_and_not_from_a_store() {
    let (client, server) = Scenario::new()
        .expect(
            "GET",
            "/apis/discovery.k8s.io/v1/namespaces/xcc-dns/endpointslices",
        )
        .reply((
            200,
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
                   "metadata": {"resourceVersion": "7"},
                   "items": [{"metadata": {"name": "dev-team-a-gateway",
                                           "namespace": "xcc-dns"},
                              "addressType": "IPv4",
                              "endpoints": [{"addresses": ["10.0.0.1"]}]}]}),
        ))
        .run();
    let workloads = workloads(client.clone(), Duration::ZERO);
    let (generation, names) = workloads
        .with_slices("dev-team", "a", &client, |slices| {
            slices.keys().cloned().collect::<Vec<_>>()
        })
        .await
        .unwrap();
    assert_eq!(generation, None, "no store: read by a LIST");
    assert_eq!(names, ["dev-team-a-gateway"]);
    assert_eq!(server.done().await.len(), 1);
    assert_eq!(workloads.slice_generation("dev-team", "a"), None);
    assert_eq!(workloads.ready_endpoints("dev-team", "a", "ns/svc"), None);
}

#[test]
fn a_node_is_read_as_its_name_readiness_cordon_and_addresses_only() {
    let node: nodes::NodeView = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-1", "resourceVersion": "7", "labels": {"zone": "a"},
                     "annotations": {"big": "x".repeat(1000)},
                     "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
        "spec": {"unschedulable": true, "podCIDR": "10.244.0.0/24"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.1.0.1"},
                          {"type": "InternalIP", "address": "fd00::1"},
                          {"type": "Hostname", "address": "node-1"}],
            "conditions": [{"type": "MemoryPressure", "status": "False"},
                           {"type": "Ready", "status": "True",
                            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "reason": "KubeletReady"}],
            "images": [{"names": ["busybox"], "sizeBytes": 1}],
        },
    }))
    .unwrap();
    // Nothing else of the Node is kept.
    let meta = kube::Resource::meta(&node);
    assert!(meta.annotations.is_none() && meta.managed_fields.is_none());
    assert_eq!(meta.resource_version.as_deref(), Some("7"));
    let info = node.info();
    assert_eq!(info.name, "node-1");
    assert!(info.ready && info.unschedulable);
    assert_eq!(
        info.ips(crate::gatewaydns::NodeAddressType::InternalIP),
        [
            "10.1.0.1".parse::<std::net::IpAddr>().unwrap(),
            "fd00::1".parse().unwrap()
        ]
    );
    assert!(!info.serves(), "a cordoned node serves no gateway answer");
}

#[tokio::test]
async fn one_node_watch_per_cluster_is_shared_and_stops_with_its_last_gateway() {
    let (client, server) = Scenario::new()
        .always("GET", "/api/v1/nodes")
        .when(|r| r.is_watch())
        .hang()
        .always("GET", "/api/v1/nodes")
        .reply((
            200,
            json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "3"},
                   "items": [{"metadata": {"name": "node-1", "resourceVersion": "2"},
                              "status": {"addresses": [{"type": "InternalIP", "address": "10.1.0.1"}],
                                         "conditions": [{"type": "Ready", "status": "True"}]}}]}),
        ))
        .run();
    let workloads = workloads(client.clone(), Duration::ZERO);
    for cluster in ["a", "b"] {
        workloads.clusters.insert(
            ("dev-team".into(), cluster.into()),
            ClusterEntry {
                peer: PeerClient {
                    client: client.clone(),
                    identity: format!("dev-team/{cluster}-kubeconfig@test"),
                    server: "https://a.test".into(),
                    tls: xcc_kube::PeerTls::Verified,
                },
                secret_version: None,
                services: HashMap::new(),
                nodes: None,
                slices: None,
            },
        );
    }
    let (g1, g2) = (
        ObjectRef::<GatewayDNS>::new("g1").within("dev-team"),
        ObjectRef::<GatewayDNS>::new("g2").within("dev-team"),
    );
    for gateway in [&g1, &g2] {
        let nodes = workloads
            .nodes("dev-team", "a", gateway, client.clone())
            .await
            .unwrap();
        assert_eq!(nodes.len(), 1);
        assert!(nodes[0].serves());
    }
    let watching = |cluster: &str| {
        workloads
            .clusters
            .get(&("dev-team".to_string(), cluster.to_string()))
            .unwrap()
            .nodes
            .as_ref()
            .map(|w| w.subscribers.lock().unwrap().len())
    };
    assert_eq!(watching("a"), Some(2), "one watch, both subscribed");
    assert_eq!(
        watching("b"),
        None,
        "no GatewayDNS asked for cluster b's nodes"
    );
    // g1 still needs cluster a: kept; then neither does: the watch stops.
    workloads.retain_nodes("dev-team", &g1, &["a".to_string()].into());
    workloads.retain_nodes("dev-team", &g2, &BTreeSet::new());
    assert_eq!(watching("a"), Some(1));
    workloads.retain_nodes("dev-team", &g1, &BTreeSet::new());
    assert_eq!(watching("a"), None);
    server.close().await;
}

/// A Node as the API serves it, Ready or not, with a heartbeat time.
fn node_json(ready: bool, heartbeat: &str, version: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": "node-1", "resourceVersion": version},
           "status": {"addresses": [{"type": "InternalIP", "address": "10.1.0.1"}],
                      "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                                      "lastHeartbeatTime": heartbeat}]}})
}

#[tokio::test]
async fn a_node_change_wakes_the_gateways_of_its_cluster_and_a_heartbeat_wakes_nobody() {
    let watch = |r: &xcc_kube::scenario::Request| r.is_watch();
    let (client_a, server_a) = Scenario::new()
        .always("GET", "/api/v1/nodes")
        .when(|r| !r.is_watch())
        .reply((
            200,
            json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "3"},
                   "items": [node_json(true, "2026-01-01T00:00:00Z", "3")]}),
        ))
        // A kubelet's heartbeat: nothing a GatewayDNS reads changed.
        .expect("GET", "/api/v1/nodes")
        .when(watch)
        .reply((
            200,
            json!({"type": "MODIFIED", "object": node_json(true, "2026-01-01T00:00:10Z", "4")}),
        ))
        // Then the node turns NotReady.
        .expect("GET", "/api/v1/nodes")
        .when(watch)
        .reply((
            200,
            json!({"type": "MODIFIED", "object": node_json(false, "2026-01-01T00:00:20Z", "5")}),
        ))
        .always("GET", "/api/v1/nodes")
        .when(watch)
        .hang()
        .run();
    let (client_b, server_b) = Scenario::new()
        .always("GET", "/api/v1/nodes")
        .when(watch)
        .hang()
        .always("GET", "/api/v1/nodes")
        .reply((
            200,
            json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "3"},
                   "items": [node_json(true, "2026-01-01T00:00:00Z", "3")]}),
        ))
        .run();
    let (trigger, mut woken) = tokio::sync::mpsc::unbounded_channel();
    let workloads = Workloads::new(
        client_a.clone(),
        PeerClients::new(xcc_kube::PeerTrust::default()),
        trigger,
        Duration::ZERO,
    );
    for (cluster, client) in [("a", &client_a), ("b", &client_b)] {
        workloads.clusters.insert(
            ("dev-team".into(), cluster.into()),
            ClusterEntry {
                peer: PeerClient {
                    client: client.clone(),
                    identity: format!("dev-team/{cluster}-kubeconfig@test"),
                    server: format!("https://{cluster}.test"),
                    tls: xcc_kube::PeerTls::Verified,
                },
                secret_version: None,
                services: HashMap::new(),
                nodes: None,
                slices: None,
            },
        );
    }
    let (on_a, on_b) = (
        ObjectRef::<GatewayDNS>::new("on-a").within("dev-team"),
        ObjectRef::<GatewayDNS>::new("on-b").within("dev-team"),
    );
    // Each subscribes to its cluster's nodes (read straight away: the watch has not listed).
    workloads
        .nodes("dev-team", "a", &on_a, client_a.clone())
        .await
        .unwrap();
    workloads
        .nodes("dev-team", "b", &on_b, client_b.clone())
        .await
        .unwrap();
    // Once cluster a's watch asks a third time, it has handled both events (one at a time):
    // on-a was woken by its first list and by the NotReady event, not by the heartbeat; on-b
    // heard nothing of cluster a.
    let started = std::time::Instant::now();
    while server_a.count(xcc_kube::scenario::Request::is_watch) < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            server_a.seen()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut wakes = Vec::new();
    while let Ok(gateway) = woken.try_recv() {
        wakes.push(gateway);
    }
    let count = |g: &ObjectRef<GatewayDNS>| wakes.iter().filter(|w| *w == g).count();
    assert_eq!(
        count(&on_a),
        2,
        "the list and the NotReady event: {wakes:?}"
    );
    assert!(
        count(&on_b) <= 1,
        "on-b only by its own cluster's list: {wakes:?}"
    );
    let nodes = workloads
        .nodes("dev-team", "a", &on_a, client_a.clone())
        .await
        .unwrap();
    assert!(!nodes[0].ready);
    server_a.close().await;
    server_b.close().await;
}

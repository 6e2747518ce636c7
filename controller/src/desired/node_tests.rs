//! `nodePort`, `hostPort` and node names: what a plan publishes of a cluster's nodes.

use super::{
    plan::*,
    tests::{contour, gateway, xcc_agent},
    writes::*,
    *,
};
use crate::gatewaydns::{
    ClusterGatewayStatus, GatewayDNSStatus, GatewayPort, GatewayState, NodeAddressType,
    ResolutionType,
};
use k8s_openapi::api::{
    core::v1::{ServicePort, ServiceSpec},
    discovery::v1::EndpointSlice,
};
use serde_json::json;

/// A node: its name, whether Ready, whether cordoned, and its addresses as (type, address).
fn node(name: &str, ready: bool, cordoned: bool, addresses: &[(&str, &str)]) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        ready,
        unschedulable: cordoned,
        addresses: addresses
            .iter()
            .map(|(t, a)| (t.to_string(), a.parse().unwrap()))
            .collect(),
    }
}

/// A fleet's worth of nodes: two Ready ones (one dual-stack), one NotReady, one cordoned.
fn nodes() -> Vec<NodeInfo> {
    vec![
        node(
            "node-1",
            true,
            false,
            &[("InternalIP", "10.1.0.1"), ("ExternalIP", "203.0.113.1")],
        ),
        node(
            "node-2",
            true,
            false,
            &[("InternalIP", "10.1.0.2"), ("InternalIP", "fd00::2")],
        ),
        node("node-3", false, false, &[("InternalIP", "10.1.0.3")]),
        node("node-4", true, true, &[("InternalIP", "10.1.0.4")]),
    ]
}

/// A Service of `type_` with a named port `http` (node port 30080), a named `dns` UDP port
/// (30053) and an unnamed one.
fn service(type_: &str) -> Service {
    let port = |name: Option<&str>, protocol: &str, port: i32, node_port: i32| ServicePort {
        name: name.map(Into::into),
        protocol: Some(protocol.into()),
        port,
        node_port: Some(node_port),
        ..Default::default()
    };
    Service {
        spec: Some(ServiceSpec {
            type_: Some(type_.into()),
            ports: Some(vec![
                port(Some("http"), "TCP", 80, 30080),
                port(Some("dns"), "UDP", 53, 30053),
                port(None, "TCP", 81, 30081),
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node_gateway(resolution: ResolutionType, names: bool) -> GatewayDNS {
    let mut g = gateway("g", 0, &[("hasContour", "true")]);
    g.spec.resolution_type = resolution;
    g.spec.node_names = names.then_some(true);
    g
}

fn plan_of(g: &GatewayDNS, observe: impl FnMut(&str) -> Observation) -> Plan {
    plan(g, std::slice::from_ref(g), &contour(), "xcc.test", observe)
}

fn slice_named<'a>(plan: &'a Plan, name: &str) -> &'a EndpointSlice {
    plan.slices
        .iter()
        .find(|s| s.name_any() == name)
        .unwrap_or_else(|| panic!("no slice {name} in {:?}", plan.slices))
}

fn addresses(slice: &EndpointSlice) -> Vec<String> {
    slice
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.clone())
        .collect()
}

fn ports(slice: &EndpointSlice) -> Vec<(String, String, i32)> {
    slice
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone().unwrap(),
                p.protocol.clone().unwrap(),
                p.port.unwrap(),
            )
        })
        .collect()
}

#[test]
fn node_port_publishes_the_ready_schedulable_nodes_and_the_named_node_ports() {
    let g = node_gateway(ResolutionType::NodePort, false);
    let plan = plan_of(&g, |_| {
        observe_node_port(
            Some(&service("NodePort")),
            &nodes(),
            NodeAddressType::InternalIP,
        )
    });
    let v4 = slice_named(&plan, "dev-team-cluster-a-gateway");
    // node-3 is NotReady, node-4 cordoned: neither answers.
    assert_eq!(addresses(v4), ["10.1.0.1", "10.1.0.2"]);
    assert_eq!(
        v4.annotations()[HOSTNAME_ANNOTATION],
        "*.gateway.cluster-a.dev-team.clusters.xcc.test"
    );
    let expected = [
        ("dns".to_string(), "UDP".to_string(), 30053),
        ("http".to_string(), "TCP".to_string(), 30080),
    ];
    assert_eq!(
        ports(v4),
        expected,
        "named ports only, with their node ports"
    );
    let v6 = slice_named(&plan, "dev-team-cluster-a-gateway-ipv6");
    assert_eq!(addresses(v6), ["fd00::2"]);
    assert_eq!(ports(v6), expected);
    let a = &plan.clusters[0];
    assert_eq!(a.state, GatewayState::Published);
    assert_eq!(a.addresses, ["10.1.0.1", "10.1.0.2", "fd00::2"]);
    assert_eq!(
        a.ports,
        [
            GatewayPort {
                name: "dns".into(),
                protocol: "UDP".into(),
                port: 30053
            },
            GatewayPort {
                name: "http".into(),
                protocol: "TCP".into(),
                port: 30080
            }
        ]
    );
    // No node names unless asked.
    assert!(!plan.slices.iter().any(|s| s.name_any().contains("-nodes")));
}

#[test]
fn external_ip_is_published_when_asked_and_a_load_balancer_service_counts_as_node_port() {
    let external = observe_node_port(
        Some(&service("LoadBalancer")),
        &nodes(),
        NodeAddressType::ExternalIP,
    );
    let Observation::Addresses { ips, .. } = external else {
        panic!("{external:?}");
    };
    assert_eq!(ips, ["203.0.113.1".parse::<std::net::IpAddr>().unwrap()]);
}

#[test]
fn node_port_on_a_cluster_ip_service_or_without_nodes_says_why() {
    let g = node_gateway(ResolutionType::NodePort, false);
    let plan = plan_of(&g, |c| match c {
        "cluster-a" => observe_node_port(
            Some(&service("ClusterIP")),
            &nodes(),
            NodeAddressType::InternalIP,
        ),
        _ => observe_node_port(
            Some(&service("NodePort")),
            &nodes()[2..],
            NodeAddressType::InternalIP,
        ),
    });
    assert!(plan.slices.is_empty(), "{:?}", plan.slices);
    assert_eq!(plan.clusters[0].state, GatewayState::NotNodePort);
    assert!(
        plan.clusters[0].message.contains(
            "is of type ClusterIP; resolutionType nodePort needs type NodePort or LoadBalancer"
        ),
        "{}",
        plan.clusters[0].message
    );
    assert_eq!(plan.clusters[1].state, GatewayState::NoAddress);
    assert!(
        plan.clusters[1]
            .message
            .contains("no node that is Ready, schedulable and has an InternalIP address"),
        "{}",
        plan.clusters[1].message
    );
}

/// An EndpointSlice of the gateway Service: endpoints on `on` (node name, ready), port `http`
/// at container port 8080.
fn endpoints(on: &[(&str, Option<bool>)]) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": "envoy-abc", "namespace": "projectcontour"},
        "addressType": "IPv4",
        "endpoints": on.iter().enumerate().map(|(i, (node, ready))| json!({
            "addresses": [format!("192.168.0.{i}")],
            "nodeName": node,
            "conditions": {"ready": ready},
        })).collect::<Vec<_>>(),
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
    }))
    .unwrap()
}

#[test]
fn host_port_publishes_only_the_nodes_with_a_ready_endpoint() {
    let g = node_gateway(ResolutionType::HostPort, false);
    // node-1 runs a ready pod, node-2 one that is not ready, node-4 (cordoned) a ready one.
    let slice = endpoints(&[
        ("node-1", Some(true)),
        ("node-2", Some(false)),
        ("node-4", None),
    ]);
    let plan = plan_of(&g, |_| {
        observe_host_port(
            Some(&service("ClusterIP")),
            &[&slice],
            &nodes(),
            NodeAddressType::InternalIP,
            None,
        )
    });
    let v4 = slice_named(&plan, "dev-team-cluster-a-gateway");
    assert_eq!(addresses(v4), ["10.1.0.1"]);
    assert_eq!(ports(v4), [("http".to_string(), "TCP".to_string(), 8080)]);
    assert!(
        !plan
            .slices
            .iter()
            .any(|s| s.name_any() == "dev-team-cluster-a-gateway-ipv6"),
        "node-2 (the only IPv6 one) has no ready endpoint"
    );
    // No ready endpoint on a schedulable Ready node: nothing, and why.
    let none = endpoints(&[("node-2", Some(false)), ("node-3", Some(true))]);
    let plan = plan_of(&g, |_| {
        observe_host_port(
            Some(&service("ClusterIP")),
            &[&none],
            &nodes(),
            NodeAddressType::InternalIP,
            None,
        )
    });
    assert!(plan.slices.is_empty());
    assert_eq!(plan.clusters[0].state, GatewayState::NoAddress);
    assert!(
        plan.clusters[0].message.contains("runs a ready endpoint"),
        "{}",
        plan.clusters[0].message
    );
}

#[test]
fn host_port_publishes_the_host_port_of_the_container_port_a_pod_declares() {
    let slice = endpoints(&[("node-1", Some(true))]);
    let observed = |pod: &PodPorts| {
        observe_host_port(
            Some(&service("ClusterIP")),
            &[&slice],
            &nodes(),
            NodeAddressType::InternalIP,
            Some(pod),
        )
    };
    // Container port 8080 (port `http` of the slice) is open on the node at 80.
    let pod = vec![
        (8080, "TCP".to_string(), Some(80)),
        (9090, "TCP".into(), None),
    ];
    let Observation::Addresses { ports, .. } = observed(&pod) else {
        panic!()
    };
    assert_eq!(
        ports,
        [GatewayPort {
            name: "http".into(),
            protocol: "TCP".into(),
            port: 80
        }]
    );
    // A container port without a host port is not reachable on the node: no SRV record.
    let pod = vec![(8080, "TCP".to_string(), None)];
    let Observation::Addresses { ports, .. } = observed(&pod) else {
        panic!()
    };
    assert!(ports.is_empty(), "{ports:?}");
}

#[test]
fn node_names_are_published_only_when_asked_and_a_dotted_name_only_under_nodes() {
    let mut all = nodes();
    all.push(node(
        "node-5.example.com",
        true,
        false,
        &[("InternalIP", "10.1.0.5")],
    ));
    let observed = |all: &[NodeInfo]| {
        observe_node_port(Some(&service("NodePort")), all, NodeAddressType::InternalIP)
            .with_nodes(named_nodes(all, NodeAddressType::InternalIP))
    };
    let off = plan_of(&node_gateway(ResolutionType::NodePort, false), |_| {
        observed(&all)
    });
    assert!(!off.slices.iter().any(|s| s.name_any().contains("-nodes")));

    let on = plan_of(&node_gateway(ResolutionType::NodePort, true), |_| {
        observed(&all)
    });
    let v4 = slice_named(&on, "dev-team-cluster-a-nodes");
    assert_eq!(
        v4.annotations()[HOSTNAME_ANNOTATION],
        "nodes.cluster-a.dev-team.clusters.xcc.test"
    );
    let by_host: Vec<(Option<String>, Vec<String>)> = v4
        .endpoints
        .iter()
        .map(|e| (e.hostname.clone(), e.addresses.clone()))
        .collect();
    // Ready nodes only, the cordoned node-4 included; node-5's name is not one label.
    assert_eq!(
        by_host,
        [
            (Some("node-1".into()), vec!["10.1.0.1".into()]),
            (Some("node-2".into()), vec!["10.1.0.2".into()]),
            (Some("node-4".into()), vec!["10.1.0.4".into()]),
            (None, vec!["10.1.0.5".into()]),
        ]
    );
    let v6 = slice_named(&on, "dev-team-cluster-a-nodes-ipv6");
    assert_eq!(v6.endpoints[0].hostname.as_deref(), Some("node-2"));
    assert!(
        on.clusters[0].message.contains("node-5.example.com"),
        "{}",
        on.clusters[0].message
    );
    // The node names are no gateway: not a source of the global name.
    assert!(!on.sources.contains_key("dev-team-cluster-a-nodes"));
}

#[test]
fn an_unreachable_cluster_keeps_its_ports_and_node_names() {
    let mut g = node_gateway(ResolutionType::NodePort, true);
    let port = GatewayPort {
        name: "http".into(),
        protocol: "TCP".into(),
        port: 30080,
    };
    g.status = Some(GatewayDNSStatus {
        clusters: vec![ClusterGatewayStatus {
            cluster: "cluster-a".into(),
            addresses: vec!["10.1.0.1".into()],
            ports: vec![port.clone()],
            ..Default::default()
        }],
        ..Default::default()
    });
    let plan = plan_of(&g, |_| Observation::Unreachable("down".into()));
    let v4 = slice_named(&plan, "dev-team-cluster-a-gateway");
    assert_eq!(ports(v4), [("http".to_string(), "TCP".to_string(), 30080)]);
    assert_eq!(plan.clusters[0].ports, [port]);
    assert!(plan.keep.contains("dev-team-cluster-a-nodes"));
    assert!(plan.keep.contains("dev-team-cluster-a-nodes-ipv6"));
}

#[test]
fn a_changed_port_or_node_is_rewritten_and_the_same_content_is_not() {
    let g = node_gateway(ResolutionType::NodePort, true);
    let with = |svc: &Service, all: &[NodeInfo]| {
        plan_of(&g, |_| {
            observe_node_port(Some(svc), all, NodeAddressType::InternalIP)
                .with_nodes(named_nodes(all, NodeAddressType::InternalIP))
        })
    };
    let before = with(&service("NodePort"), &nodes());
    let on_cluster: Vec<EndpointSlice> = before.slices.clone();
    let same = cluster_writes(&before, &on_cluster, "dev-team/g", Some(&xcc_agent()));
    assert!(same.apply.is_empty(), "{:?}", same.apply);

    let mut moved = service("NodePort");
    moved.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = Some(31080);
    let port_changed = with(&moved, &nodes());
    let writes = cluster_writes(&port_changed, &on_cluster, "dev-team/g", Some(&xcc_agent()));
    let mut applied: Vec<String> = writes.apply.iter().map(|s| s.name_any()).collect();
    applied.sort();
    assert_eq!(
        applied,
        [
            "dev-team-cluster-a-gateway",
            "dev-team-cluster-a-gateway-ipv6",
            "dev-team-cluster-b-gateway",
            "dev-team-cluster-b-gateway-ipv6"
        ]
    );

    // node-1 goes NotReady: it leaves the gateway and the node names.
    let mut fewer = nodes();
    fewer[0].ready = false;
    let node_left = with(&service("NodePort"), &fewer);
    let writes = cluster_writes(&node_left, &on_cluster, "dev-team/g", Some(&xcc_agent()));
    assert!(
        writes
            .apply
            .iter()
            .any(|s| s.name_any() == "dev-team-cluster-a-nodes"),
        "{:?}",
        writes.apply
    );
    let gateway = writes
        .apply
        .iter()
        .find(|s| s.name_any() == "dev-team-cluster-a-gateway")
        .unwrap();
    assert_eq!(addresses(gateway), ["10.1.0.2"]);
    // Without any, the slices go.
    let none = cluster_writes(
        &with(&service("NodePort"), &[]),
        &on_cluster,
        "dev-team/g",
        Some(&xcc_agent()),
    );
    assert!(
        none.delete
            .contains(&"dev-team-cluster-a-nodes".to_string()),
        "{:?}",
        none.delete
    );
}

#[test]
fn more_than_a_hundred_nodes_spread_over_endpoints() {
    let many: Vec<NodeInfo> = (0..250)
        .map(|i| {
            node(
                &format!("n{i}"),
                true,
                false,
                &[("InternalIP", &format!("10.2.{}.{}", i / 200, i % 200))],
            )
        })
        .collect();
    let g = node_gateway(ResolutionType::NodePort, false);
    let plan = plan_of(&g, |_| {
        observe_node_port(
            Some(&service("NodePort")),
            &many,
            NodeAddressType::InternalIP,
        )
    });
    let v4 = slice_named(&plan, "dev-team-cluster-a-gateway");
    let sizes: Vec<usize> = v4.endpoints.iter().map(|e| e.addresses.len()).collect();
    assert_eq!(sizes, [100, 100, 50]);
}

#[test]
fn a_cluster_without_an_agent_is_sent_only_the_ipv4_slices_the_original_reads() {
    let g = node_gateway(ResolutionType::NodePort, true);
    let plan = plan_of(&g, |_| {
        observe_node_port(
            Some(&service("NodePort")),
            &nodes(),
            NodeAddressType::InternalIP,
        )
        .with_nodes(named_nodes(&nodes(), NodeAddressType::InternalIP))
    });
    // The original dns-server reads IPv4 slices (their ports and endpoint host names it
    // ignores: it answers A at the slice's name) and dies when an IPv6 one is deleted.
    let writes = cluster_writes(&plan, &[], "dev-team/g", None);
    let mut sent: Vec<String> = writes.apply.iter().map(|s| s.name_any()).collect();
    sent.sort();
    assert_eq!(
        sent,
        [
            "dev-team-cluster-a-gateway",
            "dev-team-cluster-a-nodes",
            "dev-team-cluster-b-gateway",
            "dev-team-cluster-b-nodes"
        ]
    );
    let mut withheld = writes.withheld.clone();
    withheld.sort();
    assert_eq!(
        withheld,
        [
            "dev-team-cluster-a-gateway-ipv6",
            "dev-team-cluster-a-nodes-ipv6",
            "dev-team-cluster-b-gateway-ipv6",
            "dev-team-cluster-b-nodes-ipv6"
        ]
    );
}

//! The `gateway` data plane: importing clusters reach an exported Service through the exporting
//! cluster's node addresses and a node port of the agent's own (a NodePort Service with the
//! exported Service's selector and ports), or, when the exported Service is a LoadBalancer with
//! an address, through that address and the Service's ports. Pure functions.
//!
//! A headless export in gateway mode: the importing slices list the node addresses (or the load
//! balancer's), not the pods, so there are no per-pod hostnames; the import is still `Headless`,
//! and its DNS names resolve to those addresses.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Node, Service, ServicePort as CorePort, ServiceSpec},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

use super::{
    plan::hash,
    publication::{EndpointGroup, EndpointPort, PublishedEndpoint},
};

/// Annotation on a ServiceExport: its data plane (`flat` or `gateway`), over `--mcs-data-plane`.
pub const DATA_PLANE_ANNOTATION: &str = "mcs.xcc.test/data-plane";
/// Label on a gateway Service: the name of the exported Service it opens.
pub const LABEL_GATEWAY_FOR: &str = "mcs.xcc.test/gateway-for";
/// Prefix of every gateway Service's name (then a hash of the exported Service's name).
pub const GATEWAY_PREFIX: &str = "xcc-mcs-gw-";

/// The gateway Service of exported Service `name`.
pub fn gateway_name(name: &str) -> String {
    format!("{GATEWAY_PREFIX}{}", hash(name))
}

/// The exported Service's load balancer addresses, if it is a LoadBalancer that has any.
fn load_balancer_addresses(service: &Service) -> Vec<String> {
    let spec = service.spec.clone().unwrap_or_default();
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return Vec::new();
    }
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.clone())
        .collect()
}

/// Whether `service` needs a gateway Service of the agent's (not a LoadBalancer with an address).
pub fn needs_node_port(service: &Service) -> bool {
    load_balancer_addresses(service).is_empty()
}

/// The NodePort Service that opens `service` (same selector and ports) on every node.
pub fn gateway_service(service: &Service) -> Service {
    let spec = service.spec.clone().unwrap_or_default();
    let name = service.metadata.name.clone().unwrap_or_default();
    Service {
        metadata: ObjectMeta {
            name: Some(gateway_name(&name)),
            namespace: service.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(LABEL_GATEWAY_FOR.to_string(), name)])),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("NodePort".into()),
            selector: spec.selector.clone(),
            ports: Some(
                spec.ports
                    .iter()
                    .flatten()
                    .map(|p| CorePort {
                        name: p.name.clone(),
                        protocol: p.protocol.clone(),
                        app_protocol: p.app_protocol.clone(),
                        port: p.port,
                        target_port: p.target_port.clone(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: None,
    }
}

/// The address family of `address`.
fn family(address: &str) -> &'static str {
    if address.contains(':') {
        "IPv6"
    } else {
        "IPv4"
    }
}

/// The ready nodes' InternalIP addresses.
fn node_addresses(nodes: &[Node]) -> Vec<String> {
    let mut out: Vec<String> = nodes
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_none_or(|c| {
                    c.iter()
                        .find(|c| c.type_ == "Ready")
                        .is_none_or(|c| c.status == "True")
                })
        })
        .flat_map(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.addresses.clone())
                .unwrap_or_default()
                .into_iter()
                .filter(|a| a.type_ == "InternalIP")
                .map(|a| a.address)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The endpoints `service` is reached at from other clusters in gateway mode: its load
/// balancer's addresses and its ports; else the nodes' addresses and the node ports of
/// `gateway` (its gateway Service as the API server wrote it; none yet: no endpoints).
pub fn gateway_endpoints(
    service: &Service,
    gateway: Option<&Service>,
    nodes: &[Node],
) -> Vec<EndpointGroup> {
    let spec = service.spec.clone().unwrap_or_default();
    let lb = load_balancer_addresses(service);
    // The number to connect to per Service port: the load balancer's is the port itself.
    let (addresses, node_ports) = if lb.is_empty() {
        let Some(gateway) = gateway else {
            return Vec::new();
        };
        let node_ports: BTreeMap<(Option<String>, i32), i32> = gateway
            .spec
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .filter_map(|p| Some(((p.name.clone(), p.port), p.node_port?)))
            .collect();
        (node_addresses(nodes), Some(node_ports))
    } else {
        (lb, None)
    };
    let number = |p: &CorePort| match &node_ports {
        Some(node_ports) => node_ports.get(&(p.name.clone(), p.port)).copied(),
        None => Some(p.port),
    };
    let ports: Vec<EndpointPort> = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            Some(EndpointPort {
                name: p.name.clone().filter(|n| !n.is_empty()),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
                service_port: p.port,
                port: number(p)?,
            })
        })
        .collect();
    if ports.is_empty() {
        // No node port allocated yet: nothing to reach.
        return Vec::new();
    }
    let mut groups: BTreeMap<&'static str, Vec<PublishedEndpoint>> = BTreeMap::new();
    for address in addresses {
        groups
            .entry(family(&address))
            .or_default()
            .push(PublishedEndpoint {
                addresses: vec![address],
                hostname: None,
                ready: true,
                serving: true,
                terminating: false,
            });
    }
    groups
        .into_iter()
        .map(|(address_type, endpoints)| EndpointGroup {
            address_type: address_type.into(),
            ports: ports.clone(),
            endpoints,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, NodeAddress, NodeCondition, NodeStatus,
        ServiceStatus,
    };

    use super::*;

    fn exported(type_: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("demo".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                selector: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
                ports: Some(vec![CorePort {
                    name: Some("http".into()),
                    port: 80,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn node(address: &str, ready: &str) -> Node {
        Node {
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress {
                        type_: "InternalIP".into(),
                        address: address.into(),
                    },
                    NodeAddress {
                        type_: "Hostname".into(),
                        address: "n".into(),
                    },
                ]),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_cluster_ip_service_is_reached_at_the_ready_nodes_and_the_gateways_node_port() {
        let service = exported("ClusterIP");
        assert!(needs_node_port(&service));
        let mut gateway = gateway_service(&service);
        assert_eq!(
            gateway.metadata.name.as_deref(),
            Some(gateway_name("web").as_str())
        );
        let spec = gateway.spec.as_mut().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("NodePort"));
        assert_eq!(spec.selector, service.spec.clone().unwrap().selector);
        let nodes = [node("192.168.1.2", "True"), node("192.168.1.3", "False")];
        // No node port yet: nothing to publish.
        assert!(gateway_endpoints(&service, Some(&gateway), &nodes).is_empty());
        gateway.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = Some(30080);
        let groups = gateway_endpoints(&service, Some(&gateway), &nodes);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].address_type, "IPv4");
        assert_eq!(groups[0].endpoints.len(), 1);
        assert_eq!(groups[0].endpoints[0].addresses, ["192.168.1.2"]);
        assert_eq!(groups[0].endpoints[0].hostname, None);
        assert_eq!(groups[0].ports[0].service_port, 80);
        assert_eq!(groups[0].ports[0].port, 30080);
    }

    #[test]
    fn a_load_balancer_with_an_address_is_reached_there_without_a_gateway_service() {
        let mut service = exported("LoadBalancer");
        assert!(needs_node_port(&service));
        service.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    ip: Some("203.0.113.7".into()),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        });
        assert!(!needs_node_port(&service));
        let groups = gateway_endpoints(&service, None, &[node("192.168.1.2", "True")]);
        assert_eq!(groups[0].endpoints[0].addresses, ["203.0.113.7"]);
        assert_eq!(groups[0].ports[0].port, 80);
    }
}

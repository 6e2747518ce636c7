//! Node addresses as gateways (`resolutionType: nodePort` and `hostPort`) and as names
//! (`spec.nodeNames`), computed without I/O from what the Node, Service and EndpointSlice
//! watches hold.
//!
//! - `nodePort`: every node that is Ready (condition `Ready=True`) and schedulable (not
//!   `spec.unschedulable`, i.e. not cordoned); the Service must be of type NodePort or
//!   LoadBalancer; each named Service port is published with its `nodePort`.
//! - `hostPort`: those of the nodes above that run a ready endpoint of the Service (the
//!   `nodeName` of its EndpointSlices' endpoints whose `ready` is not false); each named Service
//!   port is published with the `hostPort` of the container port the EndpointSlices give for
//!   that name, read from one pod of a ready endpoint (its `targetRef`; a port of that pod
//!   without a `hostPort` is not published). Endpoints without a pod to read (a hand-written
//!   EndpointSlice) publish the EndpointSlice's port itself: a host port equal to the container
//!   port.
//! - node names: every Ready node, cordoned or not (a cordoned node is still a node).

use std::{collections::BTreeSet, net::IpAddr};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};

use super::Observation;
use crate::gatewaydns::{GatewayPort, NodeAddressType};

/// What the controller keeps of one node (read through its partial watch).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeInfo {
    pub name: String,
    /// Condition `Ready` is `True`.
    pub ready: bool,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `status.addresses` that are IP addresses, as (type, address).
    pub addresses: Vec<(String, IpAddr)>,
}

impl NodeInfo {
    /// Its addresses of type `kind`, sorted, without duplicates.
    pub fn ips(&self, kind: NodeAddressType) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = self
            .addresses
            .iter()
            .filter(|(t, _)| t == kind.as_str())
            .map(|(_, ip)| *ip)
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Ready and schedulable: a node a gateway answer may name.
    pub fn serves(&self) -> bool {
        self.ready && !self.unschedulable
    }
}

/// One node as its name publishes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NamedNode {
    pub name: String,
    pub ips: Vec<IpAddr>,
}

/// The Ready nodes (cordoned ones included) with an address of type `kind`, by name.
pub fn named_nodes(nodes: &[NodeInfo], kind: NodeAddressType) -> Vec<NamedNode> {
    let mut out: Vec<NamedNode> = nodes
        .iter()
        .filter(|n| n.ready)
        .map(|n| NamedNode {
            name: n.name.clone(),
            ips: n.ips(kind),
        })
        .filter(|n| !n.ips.is_empty())
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Whether `name` can be one DNS label (`<node>.nodes...`): a DNS-1123 label.
pub fn is_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn addresses(
    nodes: &[NodeInfo],
    kind: NodeAddressType,
    wanted: impl Fn(&NodeInfo) -> bool,
) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = nodes
        .iter()
        .filter(|n| n.serves() && wanted(n))
        .flat_map(|n| n.ips(kind))
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

fn protocol(protocol: Option<&String>) -> String {
    protocol.cloned().unwrap_or_else(|| "TCP".into())
}

fn sorted(mut ports: Vec<GatewayPort>) -> Vec<GatewayPort> {
    ports.sort();
    ports.dedup();
    ports
}

/// The gateway of a `nodePort` GatewayDNS on a cluster with `nodes`, its Service `service`.
pub fn observe_node_port(
    service: Option<&Service>,
    nodes: &[NodeInfo],
    kind: NodeAddressType,
) -> Observation {
    let Some(service) = service else {
        return Observation::ServiceNotFound;
    };
    let spec = service.spec.clone().unwrap_or_default();
    let type_ = spec.type_.unwrap_or_else(|| "ClusterIP".into());
    if type_ != "NodePort" && type_ != "LoadBalancer" {
        return Observation::NotNodePort(type_);
    }
    let ports = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            Some(GatewayPort {
                name: p.name.filter(|n| !n.is_empty())?,
                protocol: protocol(p.protocol.as_ref()),
                port: u16::try_from(p.node_port?).ok()?,
            })
        })
        .collect();
    let ips = addresses(nodes, kind, |_| true);
    if ips.is_empty() {
        return Observation::NoAddress;
    }
    Observation::addresses(ips, sorted(ports))
}

/// The container ports of a gateway pod: (containerPort, protocol, hostPort).
pub type PodPorts = Vec<(i32, String, Option<i32>)>;

/// The gateway of a `hostPort` GatewayDNS on a cluster with `nodes`, its Service `service` and
/// that Service's EndpointSlices `slices`; `pod` the container ports of one of its pods, when
/// its endpoints name one that could be read.
pub fn observe_host_port(
    service: Option<&Service>,
    slices: &[&EndpointSlice],
    nodes: &[NodeInfo],
    kind: NodeAddressType,
    pod: Option<&PodPorts>,
) -> Observation {
    let Some(service) = service else {
        return Observation::ServiceNotFound;
    };
    let running: BTreeSet<&str> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .filter_map(|e| e.node_name.as_deref())
        .collect();
    let slice_ports: Vec<(&str, &str, i32)> = slices
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|p| {
            Some((
                p.name.as_deref().unwrap_or_default(),
                p.protocol.as_deref().unwrap_or("TCP"),
                p.port?,
            ))
        })
        .collect();
    let spec = service.spec.clone().unwrap_or_default();
    let ports = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            let name = p.name.filter(|n| !n.is_empty())?;
            let protocol = protocol(p.protocol.as_ref());
            let (_, _, port) = slice_ports
                .iter()
                .find(|(n, proto, _)| *n == name && *proto == protocol)?;
            let port = match pod {
                Some(pod) => {
                    pod.iter()
                        .find(|(container, proto, _)| container == port && *proto == protocol)?
                        .2?
                }
                None => *port,
            };
            Some(GatewayPort {
                name,
                protocol,
                port: u16::try_from(port).ok()?,
            })
        })
        .collect();
    let ips = addresses(nodes, kind, |n| running.contains(n.name.as_str()));
    if ips.is_empty() {
        return Observation::NoAddress;
    }
    Observation::addresses(ips, sorted(ports))
}

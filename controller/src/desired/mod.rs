//! The desired state, computed without any I/O: which EndpointSlices a GatewayDNS wants on every
//! cluster of its namespace, and what its status says about each selected cluster.
//!
//! Per selected cluster `c` of namespace `ns`, with the gateway Service's load-balancer ingress:
//! - IPv4 addresses → slice `<ns>-<c>-gateway` (XCC's name and contract, so either side
//!   interoperates with the original), IPv6 → `<ns>-<c>-gateway-ipv6`, a host name →
//!   `<ns>-<c>-gateway-fqdn` (a CNAME);
//! - all three carry the annotations `dns-hostname: *.gateway.<c>.<ns>.clusters.<zone>` and
//!   `gateway-dns-ref: <ns>/<name>`, and the label `kubernetes.io/service-name`;
//! - `nodePort` and `hostPort` ([`nodes`]) publish node addresses in the same slices, with the
//!   Service's named ports in the slices' `ports` (the agent serves them as SRV records);
//! - `spec.nodeNames` adds `<ns>-<c>-nodes` (and `-ipv6`), host name
//!   `nodes.<c>.<ns>.clusters.<zone>`, one endpoint per Ready node whose `hostname` is the
//!   node's name (`<node>.nodes...`; a node name that is not one DNS label has no hostname).
//!
//! What each cluster of the namespace is sent depends on what it reads ([`cluster_writes`]): a
//! cluster whose xcc-agent announced `ipv6` gets every slice; any other cluster (perhaps still
//! running the original XCC dns-server, which dies when a slice it cannot read is deleted) gets
//! only IPv4 and FQDN slices, and an IPv6 slice already there is neither changed nor deleted.
//!
//! A cluster whose Service cannot be read keeps its slices as they are (never withdraw a gateway
//! because its cluster is unreachable). Two GatewayDNS selecting one cluster would write the same
//! name for it: the oldest (then the first by namespace/name) publishes it; the others report
//! `Conflict` for it ([`plan::publisher_of`]).
//!
//! In files by concept: the plan of one GatewayDNS ([`plan`]), its global name ([`global`]),
//! what the writes compare of a slice ([`print`]), and what one cluster is sent ([`writes`]).

mod global;
mod health;
#[cfg(test)]
mod node_tests;
mod nodes;
mod plan;
mod print;
#[cfg(test)]
mod tests;
mod writes;

use std::{collections::BTreeMap, net::IpAddr};

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;

use crate::gatewaydns::{GatewayDNS, GatewayPort};

pub use nodes::{
    NamedNode, NodeInfo, PodPorts, is_label, named_nodes, observe_host_port, observe_node_port,
};
pub use plan::{HealthView, Plan, plan_with_health};
pub use print::{Print, Slices};
pub use writes::{cluster_writes_in, readable_by, same_content};

pub const HOSTNAME_ANNOTATION: &str = "connectivity.tanzu.vmware.com/dns-hostname";
pub const REF_ANNOTATION: &str = "connectivity.tanzu.vmware.com/gateway-dns-ref";
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "xcc-controller.connectivity.tanzu.vmware.com";
/// Namespace of the slices on every cluster.
pub const SLICE_NAMESPACE: &str = "xcc-dns";

/// What the controller saw of one cluster's gateway Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    Addresses {
        ips: Vec<IpAddr>,
        hostnames: Vec<String>,
        /// The named ports published as SRV records (`nodePort`, `hostPort`).
        ports: Vec<GatewayPort>,
        /// The Ready nodes, for their names (`spec.nodeNames`; empty unless asked).
        nodes: Vec<NamedNode>,
        /// The Service's first port (what `spec.healthCheck` probes unless it names a port).
        port: Option<u16>,
    },
    ServiceNotFound,
    NotLoadBalancer(String),
    /// `nodePort`: the Service is of this type, neither NodePort nor LoadBalancer.
    NotNodePort(String),
    NoAddress,
    /// The cluster could not be asked (no kubeconfig, API server down, forbidden, ...).
    Unreachable(String),
    /// The trust rules refuse the cluster's kubeconfig Secret (exec, a file path, ...): it was
    /// not asked at all.
    KubeconfigRejected(String),
}

/// Reads a Service as the gateway of a cluster (`None`: the Service does not exist).
pub fn observe(service: Option<&Service>) -> Observation {
    let Some(service) = service else {
        return Observation::ServiceNotFound;
    };
    let kind = service
        .spec
        .as_ref()
        .and_then(|s| s.type_.clone())
        .unwrap_or_else(|| "ClusterIP".into());
    if kind != "LoadBalancer" {
        return Observation::NotLoadBalancer(kind);
    }
    let ingress = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut ips: Vec<IpAddr> = ingress
        .iter()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect();
    let mut hostnames: Vec<String> = ingress
        .iter()
        .filter_map(|i| i.hostname.clone())
        .filter(|h| !h.is_empty())
        .map(|h| h.to_ascii_lowercase())
        .collect();
    ips.sort();
    ips.dedup();
    hostnames.sort();
    hostnames.dedup();
    if ips.is_empty() && hostnames.is_empty() {
        return Observation::NoAddress;
    }
    let port = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.first())
        .and_then(|p| u16::try_from(p.port).ok());
    Observation::Addresses {
        ips,
        hostnames,
        port,
        ports: Vec::new(),
        nodes: Vec::new(),
    }
}

impl Observation {
    /// Node addresses `ips` with `ports` (the first one's port is what `spec.healthCheck` probes
    /// unless it names a port).
    pub fn addresses(ips: Vec<IpAddr>, ports: Vec<GatewayPort>) -> Observation {
        Observation::Addresses {
            ips,
            hostnames: Vec::new(),
            port: ports.first().map(|p| p.port),
            ports,
            nodes: Vec::new(),
        }
    }

    /// The same, with `named` as the nodes its names publish (an observation that publishes
    /// nothing stays as it is).
    pub fn with_nodes(mut self, named: Vec<NamedNode>) -> Observation {
        if let Observation::Addresses { nodes, .. } = &mut self {
            *nodes = named;
        }
        self
    }
}

/// A Cluster API Cluster as the controller needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// `<ns>/<name>`, the value of the ref annotation.
pub fn gateway_ref(gateway: &GatewayDNS) -> String {
    format!(
        "{}/{}",
        gateway.namespace().unwrap_or_default(),
        gateway.name_any()
    )
}

/// The host name published for cluster `cluster` of namespace `namespace`.
pub fn hostname(cluster: &str, namespace: &str, zone: &str) -> String {
    format!("*.gateway.{cluster}.{namespace}.clusters.{zone}")
}

/// The name of a cluster's nodes (`nodes.<cluster>.<namespace>.clusters.<zone>`).
pub fn nodes_hostname(cluster: &str, namespace: &str, zone: &str) -> String {
    format!("nodes.{cluster}.{namespace}.clusters.{zone}")
}

/// The slices of a cluster's node names (IPv4, IPv6).
pub fn node_slice_names(namespace: &str, cluster: &str) -> [String; 2] {
    let base = format!("{namespace}-{cluster}-nodes");
    [base.clone(), format!("{base}-ipv6")]
}

/// The three slice names a cluster's gateway may use.
pub fn slice_names(namespace: &str, cluster: &str) -> [String; 3] {
    let base = format!("{namespace}-{cluster}-gateway");
    [base.clone(), format!("{base}-ipv6"), format!("{base}-fqdn")]
}

/// Whether `selector` matches `labels` (matchLabels and matchExpressions, as the API server does),
/// through kube's `Selector`. An unknown operator selects nothing; `In` or `NotIn` without
/// values compare with an empty set (`In` selects nothing, `NotIn` everything).
pub fn selects(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: &BTreeMap<String, String>,
) -> bool {
    use kube::core::{Selector, SelectorExt as _};
    let mut selector = selector.clone();
    for requirement in selector.match_expressions.iter_mut().flatten() {
        requirement.values.get_or_insert_with(Vec::new);
    }
    Selector::try_from(selector).is_ok_and(|selector| selector.matches(labels))
}

//! The plan of one GatewayDNS: the slices every cluster of its namespace is to have, and its
//! status entry for each selected cluster.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    hash::{Hash, Hasher},
    net::IpAddr,
};

use k8s_openapi::{
    api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice},
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{ResourceExt, api::ObjectMeta};

use super::{
    ClusterInfo, HOSTNAME_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL, NamedNode, Observation,
    REF_ANNOTATION, SERVICE_NAME_LABEL, SLICE_NAMESPACE, gateway_ref, global::plan_global,
    hostname, is_label, node_slice_names, nodes_hostname, print::Print, selects, slice_names,
};
use crate::{
    gatewaydns::{
        ClusterGatewayStatus, GatewayDNS, GatewayDNSStatus, GatewayHealth, GatewayPort,
        GatewayState, ResolutionType,
    },
    settings::Global,
};

/// The outcome for one GatewayDNS.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Slices to exist on every cluster of the namespace.
    pub slices: Vec<EndpointSlice>,
    /// Names of owned slices to leave alone (their source cluster is unreachable).
    pub keep: BTreeSet<String>,
    /// One entry per selected cluster, sorted by cluster name.
    pub clusters: Vec<ClusterGatewayStatus>,
    /// The selected cluster each slice name stands for (slice name → cluster).
    pub sources: BTreeMap<String, String>,
    /// The global name's slices of each selected cluster that may answer it (cluster → slices).
    pub global: BTreeMap<String, Vec<EndpointSlice>>,
    /// Which of those each cluster of the namespace is sent.
    pub global_members: GlobalMembers,
    /// The global name, and the TTL of its answers (empty in a plan without it).
    pub global_hostname: String,
    pub global_ttl: String,
    /// The owners (hashes of their `namespace/name`) of slices this GatewayDNS may take over:
    /// GatewayDNS of its namespace being deleted, whose names it may publish now.
    pub released: Vec<u64>,
    /// What each wanted slice (per-cluster and global, by name) says, computed once and
    /// compared with every cluster's slices.
    pub prints: HashMap<String, Print>,
    /// A hash of everything above that decides what any cluster is sent: a cluster whose
    /// last write was of a plan with the same hash, and whose slices and announcement did not
    /// change since, needs nothing.
    pub hash: u64,
}

/// Whose gateways the global name answers with, per asking cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum GlobalMembers {
    /// The same clusters for every asking cluster (`roundRobin`, `failover`, or the
    /// `whenNoneHealthy` fallback).
    Everyone(Vec<String>),
    /// `localFirst`: the asking cluster's own gateway if it is healthy, else the healthy ones,
    /// else `fallback`.
    LocalFirst {
        healthy: Vec<String>,
        fallback: Vec<String>,
    },
    /// Nothing yet (a plan without the global name).
    #[default]
    Nobody,
}

impl Plan {
    /// The global-name slices cluster `target` is to have (an agent that announced only
    /// [`Feature::Global`]).
    pub fn global_for(&self, target: &str) -> Vec<&EndpointSlice> {
        self.global_members_for(target)
            .into_iter()
            .filter_map(|c| self.global.get(c))
            .flatten()
            .collect()
    }

    /// The selected clusters whose gateways answer the global name on cluster `target`.
    pub fn global_members_for<'a>(&'a self, target: &'a str) -> Vec<&'a str> {
        match &self.global_members {
            GlobalMembers::Nobody => Vec::new(),
            GlobalMembers::Everyone(all) => all.iter().map(String::as_str).collect(),
            GlobalMembers::LocalFirst { healthy, fallback } => {
                if healthy.iter().any(|c| c == target) {
                    vec![target]
                } else if !healthy.is_empty() {
                    healthy.iter().map(String::as_str).collect()
                } else {
                    fallback.iter().map(String::as_str).collect()
                }
            }
        }
    }

    /// Whether an owned slice named `name` should be deleted (the global name aside).
    #[cfg(test)]
    pub fn should_delete(&self, name: &str) -> bool {
        !self.keep.contains(name)
            && !self
                .slices
                .iter()
                .any(|s| s.metadata.name.as_deref() == Some(name))
    }
}

/// The GatewayDNS that publishes `cluster`'s name among `all` (every GatewayDNS of its
/// namespace): the name `*.gateway.<cluster>.<namespace>.clusters.<zone>` and its slices
/// `<namespace>-<cluster>-gateway*` depend on the namespace and the cluster only, so every
/// GatewayDNS that selects a cluster would write the same name for it. The oldest (by
/// creationTimestamp, then namespace/name) that selects it and is not being deleted keeps it.
pub fn publisher_of<'a>(all: &'a [GatewayDNS], cluster: &ClusterInfo) -> Option<&'a GatewayDNS> {
    all.iter()
        .filter(|g| g.metadata.deletion_timestamp.is_none())
        .filter(|g| selects(&g.spec.cluster_selector, &cluster.labels))
        .min_by_key(|g| {
            (
                g.metadata.creation_timestamp.clone().map(|t| t.0),
                g.namespace(),
                g.name_any(),
            )
        })
}

/// The other GatewayDNS that publishes `cluster` instead of `gateway`, as `namespace/name`
/// (`None`: `gateway` publishes it).
fn owns_cluster(gateway: &GatewayDNS, all: &[GatewayDNS], cluster: &ClusterInfo) -> Option<String> {
    let first = publisher_of(all, cluster)?;
    (gateway_ref(first) != gateway_ref(gateway)).then(|| gateway_ref(first))
}

/// What the health tracking says of one selected cluster, for its status entry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HealthView {
    pub health: Option<GatewayHealth>,
    pub ready_endpoints: Option<u32>,
    pub unreachable_since: Option<Time>,
    pub last_seen: Option<Time>,
    /// The stale-record policy withdraws its records.
    pub withdrawn: bool,
    /// Why, for the status message (the policy's words).
    pub withdrawn_because: String,
}

/// Computes the plan of `gateway` without health and without the global name (see
/// [`plan_with_health`]).
#[cfg(test)]
pub fn plan(
    gateway: &GatewayDNS,
    all: &[GatewayDNS],
    clusters: &[ClusterInfo],
    zone: &str,
    observe: impl FnMut(&str) -> Observation,
) -> Plan {
    let mut plan = plan_with_health(
        gateway,
        all,
        clusters,
        zone,
        &Global::default(),
        observe,
        |_| HealthView::default(),
    );
    // These tests are about the per-cluster names.
    plan.global.clear();
    plan.global_members = GlobalMembers::Nobody;
    plan
}

/// Computes the plan of `gateway`. `all` is every GatewayDNS of its namespace (itself included),
/// `observe` what its Service looks like on a cluster, `health` what the health tracking and
/// the stale-record policy say of it: a withdrawn cluster's slices are deleted everywhere.
pub fn plan_with_health(
    gateway: &GatewayDNS,
    all: &[GatewayDNS],
    clusters: &[ClusterInfo],
    zone: &str,
    global: &Global,
    mut observe: impl FnMut(&str) -> Observation,
    mut health: impl FnMut(&str) -> HealthView,
) -> Plan {
    let mut planner = Planner {
        gateway,
        namespace: gateway.namespace().unwrap_or_default(),
        reference: gateway_ref(gateway),
        zone,
        old_status: gateway.status.clone().unwrap_or_default(),
        out: Plan::default(),
        candidates: Vec::new(),
        ports: BTreeMap::new(),
    };
    let mut selected: Vec<&ClusterInfo> = clusters
        .iter()
        .filter(|c| selects(&gateway.spec.cluster_selector, &c.labels))
        .collect();
    selected.sort_by(|a, b| a.name.cmp(&b.name));
    for cluster in selected {
        let status = planner.cluster(cluster, all, &mut observe, &mut health);
        planner.out.clusters.push(status);
    }
    let Planner {
        namespace,
        reference,
        mut out,
        candidates,
        ports,
        ..
    } = planner;
    plan_global(&mut out, &namespace, &reference, zone, global, &candidates);
    if let Some(check) = &gateway.spec.health_check {
        super::health::annotate(&mut out, check, &ports);
    }
    out.released = all
        .iter()
        .filter(|g| g.metadata.deletion_timestamp.is_some() && gateway_ref(g) != reference)
        .map(|g| super::print::hash_of(&gateway_ref(g)))
        .collect();
    out.released.sort_unstable();
    out.seal();
    out
}

/// A selected cluster that could answer the global name: its name, whether it is healthy,
/// and its addresses (v4, v6, host name).
pub(super) type Candidate = (String, bool, [Vec<String>; 3]);

/// The plan of one GatewayDNS while its clusters are gone through.
struct Planner<'a> {
    gateway: &'a GatewayDNS,
    namespace: String,
    reference: String,
    zone: &'a str,
    old_status: GatewayDNSStatus,
    out: Plan,
    candidates: Vec<Candidate>,
    /// The gateway Service's first port, per cluster where it was read.
    ports: BTreeMap<String, u16>,
}

impl Planner<'_> {
    /// Plans the slices of one selected cluster; gives its status entry.
    fn cluster(
        &mut self,
        cluster: &ClusterInfo,
        all: &[GatewayDNS],
        observe: &mut impl FnMut(&str) -> Observation,
        health: &mut impl FnMut(&str) -> HealthView,
    ) -> ClusterGatewayStatus {
        let namespace = &self.namespace;
        let mut status = ClusterGatewayStatus {
            cluster: cluster.name.clone(),
            hostname: hostname(&cluster.name, namespace, self.zone),
            ..Default::default()
        };
        if let Some(owner) = owns_cluster(self.gateway, all, cluster) {
            status.state = GatewayState::Conflict;
            status.message = format!(
                "GatewayDNS {owner} (older) already publishes {} for cluster {}; this one does not",
                status.hostname, cluster.name
            );
            return status;
        }
        let view = health(&cluster.name);
        status.health = view.health;
        status.ready_endpoints = view.ready_endpoints;
        status.unreachable_since = view.unreachable_since.clone();
        status.last_seen = view.last_seen.clone();
        if view.withdrawn {
            status.state = GatewayState::Withdrawn;
            status.message = format!(
                "cluster {}: its records are withdrawn from every cluster: {}",
                cluster.name, view.withdrawn_because
            );
            return status;
        }
        let healthy = view.health == Some(GatewayHealth::Healthy);
        let service = &self.gateway.spec.service;
        match observe(&cluster.name) {
            Observation::Addresses {
                ips,
                hostnames,
                ports,
                nodes,
                port,
            } => {
                status.ports = ports;
                self.publish(&mut status, healthy, &ips, &hostnames);
                if let Some(port) = port {
                    self.ports.insert(cluster.name.clone(), port);
                }
                if self.gateway.spec.node_names == Some(true) {
                    self.publish_nodes(&mut status, &nodes);
                }
            }
            Observation::Unreachable(why) => {
                // Its last addresses may still answer the global name when no cluster is
                // healthy (`serveAll`).
                self.keep_last(&mut status);
                status.state = GatewayState::Unreachable;
                status.message = format!(
                    "cluster {} is unreachable, its last records are kept: {why}",
                    cluster.name
                );
            }
            Observation::KubeconfigRejected(why) => {
                self.keep_last(&mut status);
                status.state = GatewayState::KubeconfigRejected;
                status.message = format!(
                    "cluster {} is not asked, its last records are kept: {why}",
                    cluster.name
                );
            }
            Observation::ServiceNotFound => {
                status.state = GatewayState::ServiceNotFound;
                status.message = format!("Service {service} not found on cluster {}", cluster.name);
            }
            Observation::NotLoadBalancer(kind) | Observation::NotNodePort(kind) => {
                (status.state, status.message) = self.wrong_type(&cluster.name, &kind);
            }
            Observation::NoAddress => {
                status.state = GatewayState::NoAddress;
                status.message = self.no_address(&cluster.name);
            }
        }
        status
    }

    /// The state and message of a gateway Service of type `kind` on `cluster`, which the
    /// resolution type cannot use.
    fn wrong_type(&self, cluster: &str, kind: &str) -> (GatewayState, String) {
        let resolution = self.gateway.spec.resolution_type;
        let (state, needs) = match resolution {
            ResolutionType::NodePort => (GatewayState::NotNodePort, "NodePort or LoadBalancer"),
            _ => (GatewayState::NotLoadBalancer, "LoadBalancer"),
        };
        let message = format!(
            "Service {} on cluster {cluster} is of type {kind}; resolutionType {} needs type {needs}",
            self.gateway.spec.service,
            resolution.as_str()
        );
        (state, message)
    }

    /// Why `cluster` publishes nothing when its gateway has no address.
    fn no_address(&self, cluster: &str) -> String {
        let service = &self.gateway.spec.service;
        let kind = self.gateway.spec.node_address_type.unwrap_or_default();
        match self.gateway.spec.resolution_type {
            ResolutionType::LoadBalancer => format!(
                "Service {service} on cluster {} has no load-balancer address yet",
                cluster
            ),
            ResolutionType::NodePort => format!(
                "cluster {} has no node that is Ready, schedulable and has an {} address",
                cluster,
                kind.as_str()
            ),
            ResolutionType::HostPort => format!(
                "no node of cluster {} that is Ready, schedulable and has an {} address runs a ready endpoint of Service {service}",
                cluster,
                kind.as_str()
            ),
        }
    }

    /// Publishes the addresses of the Service on `status`'s cluster.
    fn publish(
        &mut self,
        status: &mut ClusterGatewayStatus,
        healthy: bool,
        ips: &[IpAddr],
        hostnames: &[String],
    ) {
        let v4: Vec<String> = ips
            .iter()
            .filter(|i| i.is_ipv4())
            .map(|i| i.to_string())
            .collect();
        let v6: Vec<String> = ips
            .iter()
            .filter(|i| i.is_ipv6())
            .map(|i| i.to_string())
            .collect();
        let fqdn: Vec<String> = hostnames.iter().take(1).cloned().collect();
        let addresses = [v4, v6, fqdn];
        push_slices(
            &mut self.out,
            &slice_names(&self.namespace, &status.cluster),
            &addresses,
            (&status.hostname, &status.ports),
            &self.reference,
            &status.cluster,
        );
        status.state = GatewayState::Published;
        status.addresses = addresses.iter().flatten().cloned().collect();
        self.candidates
            .push((status.cluster.clone(), healthy, addresses));
        if hostnames.len() > 1 {
            status.message = format!(
                "the load balancer gives {} host names; a DNS name can alias only one, {} is published",
                hostnames.len(),
                hostnames[0]
            );
        }
    }

    /// Keeps the slices of `status`'s cluster as they are, and its last addresses (from the
    /// old status) as its records and an unhealthy candidate for the global name.
    fn keep_last(&mut self, status: &mut ClusterGatewayStatus) {
        let names = slice_names(&self.namespace, &status.cluster);
        if let Some(before) = self
            .old_status
            .clusters
            .iter()
            .find(|c| c.cluster == status.cluster)
        {
            status.addresses = before.addresses.clone();
            status.ports = before.ports.clone();
            let last = split(&before.addresses);
            push_slices(
                &mut self.out,
                &names,
                &last,
                (&status.hostname, &status.ports),
                &self.reference,
                &status.cluster,
            );
            self.candidates.push((status.cluster.clone(), false, last));
        }
        self.out.keep.extend(names);
        // Node names are not in the status: their slices are left as they are.
        if self.gateway.spec.node_names == Some(true) {
            self.out
                .keep
                .extend(node_slice_names(&self.namespace, &status.cluster));
        }
    }

    /// Publishes the names of the Ready `nodes` of `status`'s cluster: `nodes.<cluster>...`
    /// every one, `<node>.nodes.<cluster>...` each whose name is one DNS label (the others are
    /// named in the status message). Not a source of the global name.
    fn publish_nodes(&mut self, status: &mut ClusterGatewayStatus, nodes: &[NamedNode]) {
        let host = nodes_hostname(&status.cluster, &self.namespace, self.zone);
        let names = node_slice_names(&self.namespace, &status.cluster);
        let skipped: Vec<&str> = nodes
            .iter()
            .filter(|n| !is_label(&n.name))
            .map(|n| n.name.as_str())
            .collect();
        for (name, (kind, v4)) in names.iter().zip([("IPv4", true), ("IPv6", false)]) {
            let endpoints: Vec<Endpoint> = nodes
                .iter()
                .filter_map(|n| {
                    let ips: Vec<String> = n
                        .ips
                        .iter()
                        .filter(|ip| ip.is_ipv4() == v4)
                        .map(ToString::to_string)
                        .collect();
                    (!ips.is_empty()).then(|| Endpoint {
                        addresses: ips,
                        hostname: is_label(&n.name).then(|| n.name.clone()),
                        ..Default::default()
                    })
                })
                .take(MAX_ENDPOINTS)
                .collect();
            if endpoints.is_empty() {
                continue;
            }
            let mut slice = slice(name, kind, &[], &host, &self.reference);
            slice.endpoints = endpoints;
            self.out.slices.push(slice);
        }
        if !skipped.is_empty() {
            let note = format!(
                "node names that are not one DNS label answer only {host}, not <node>.{host}: {}",
                skipped.join(", ")
            );
            status.message = if status.message.is_empty() {
                note
            } else {
                format!("{}; {note}", status.message)
            };
        }
    }
}

/// Most endpoints in one EndpointSlice (the API's limit).
const MAX_ENDPOINTS: usize = 1000;
/// Most addresses in one endpoint (the API's limit).
const MAX_ADDRESSES: usize = 100;

impl Plan {
    /// Computes [`Plan::prints`] and [`Plan::hash`].
    pub fn seal(&mut self) {
        self.prints = self
            .slices
            .iter()
            .chain(self.global.values().flatten())
            .map(|s| (s.name_any(), Print::of(s)))
            .collect();
        let mut hasher = std::hash::DefaultHasher::new();
        let mut names: Vec<&String> = self.prints.keys().collect();
        names.sort();
        for name in names {
            name.hash(&mut hasher);
            self.prints[name].hash(&mut hasher);
        }
        self.keep.hash(&mut hasher);
        self.sources.hash(&mut hasher);
        self.released.hash(&mut hasher);
        for (cluster, slices) in &self.global {
            cluster.hash(&mut hasher);
            for slice in slices {
                slice.metadata.name.hash(&mut hasher);
            }
        }
        format!("{:?}", self.global_members).hash(&mut hasher);
        self.global_hostname.hash(&mut hasher);
        self.global_ttl.hash(&mut hasher);
        self.hash = hasher.finish();
    }
}

/// The per-cluster slices of `cluster` (names from [`slice_names`]) for its (v4, v6, host name)
/// addresses, the address slices with `ports` (SRV records).
fn push_slices(
    out: &mut Plan,
    names: &[String; 3],
    addresses: &[Vec<String>; 3],
    (host, ports): (&str, &[GatewayPort]),
    reference: &str,
    cluster: &str,
) {
    for ((name, kind), addresses) in names.iter().zip(["IPv4", "IPv6", "FQDN"]).zip(addresses) {
        if !addresses.is_empty() {
            let mut slice = slice(name, kind, addresses, host, reference);
            if kind != "FQDN" && !ports.is_empty() {
                slice.ports = Some(ports.iter().map(endpoint_port).collect());
            }
            out.slices.push(slice);
            out.sources.insert(name.clone(), cluster.to_string());
        }
    }
}

fn endpoint_port(port: &GatewayPort) -> EndpointPort {
    EndpointPort {
        name: Some(port.name.clone()),
        protocol: Some(port.protocol.clone()),
        port: Some(i32::from(port.port)),
        app_protocol: None,
    }
}

/// Addresses as the status lists them, back to (v4, v6, host names).
fn split(addresses: &[String]) -> [Vec<String>; 3] {
    let mut out: [Vec<String>; 3] = Default::default();
    for address in addresses {
        match address.parse::<IpAddr>() {
            Ok(IpAddr::V4(_)) => out[0].push(address.clone()),
            Ok(IpAddr::V6(_)) => out[1].push(address.clone()),
            Err(_) => out[2].push(address.clone()),
        }
    }
    out
}

pub(super) fn slice(
    name: &str,
    address_type: &str,
    addresses: &[String],
    host: &str,
    reference: &str,
) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(SLICE_NAMESPACE.to_string()),
            labels: Some(
                [
                    (SERVICE_NAME_LABEL.to_string(), name.to_string()),
                    (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
                ]
                .into(),
            ),
            annotations: Some(
                [
                    (HOSTNAME_ANNOTATION.to_string(), host.to_string()),
                    (REF_ANNOTATION.to_string(), reference.to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        address_type: address_type.to_string(),
        // One endpoint (XCC's layout), or as many as the API's limit per endpoint asks for (a
        // cluster with more than 100 nodes).
        endpoints: addresses
            .chunks(MAX_ADDRESSES)
            .take(MAX_ENDPOINTS)
            .map(|chunk| Endpoint {
                addresses: chunk.to_vec(),
                ..Default::default()
            })
            .collect(),
        ports: None,
    }
}

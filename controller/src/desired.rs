//! The desired state, computed without any I/O: which EndpointSlices a GatewayDNS wants on every
//! cluster of its namespace, and what its status says about each selected cluster.
//!
//! Per selected cluster `c` of namespace `ns`, with the gateway Service's load-balancer ingress:
//! - IPv4 addresses → slice `<ns>-<c>-gateway` (XCC's name and contract, so either side
//!   interoperates with the original), IPv6 → `<ns>-<c>-gateway-ipv6`, a host name →
//!   `<ns>-<c>-gateway-fqdn` (a CNAME);
//! - all three carry the annotations `dns-hostname: *.gateway.<c>.<ns>.clusters.<zone>` and
//!   `gateway-dns-ref: <ns>/<name>`, and the label `kubernetes.io/service-name`.
//!
//! What each cluster of the namespace is sent depends on what it reads ([`cluster_writes`]): a
//! cluster whose xcc-agent announced `ipv6` gets every slice; any other cluster (perhaps still
//! running the original XCC dns-server, which dies when a slice it cannot read is deleted) gets
//! only IPv4 and FQDN slices, and an IPv6 slice already there is neither changed nor deleted.
//!
//! A cluster whose Service cannot be read keeps its slices as they are (never withdraw a gateway
//! because its cluster is unreachable). Two GatewayDNS selecting one cluster: the oldest (then
//! the first by name) publishes it; the others report `Conflict` for it.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    hash::{Hash, Hasher},
    net::IpAddr,
};

use k8s_openapi::api::{
    core::v1::Service,
    discovery::v1::{Endpoint, EndpointSlice},
};
use kube::{ResourceExt, api::ObjectMeta};

use xcc_kube::{
    Announcement, Feature,
    announcement::{
        GLOBAL_ANNOTATION, GLOBAL_HOSTNAME_ANNOTATION, GLOBAL_TTL_ANNOTATION, TTL_ANNOTATION,
    },
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{
    gatewaydns::{
        ClusterGatewayStatus, GatewayDNS, GatewayDNSStatus, GatewayHealth, GatewayState,
        GlobalStrategy, NoneHealthy,
    },
    settings::Global,
};

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
    },
    ServiceNotFound,
    NotLoadBalancer(String),
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
    Observation::Addresses { ips, hostnames }
}

/// A Cluster API Cluster as the controller needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

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

/// Whether `gateway` is the one that publishes `cluster` among all GatewayDNS of the namespace.
fn owns_cluster(gateway: &GatewayDNS, all: &[GatewayDNS], cluster: &ClusterInfo) -> Option<String> {
    let key = |g: &GatewayDNS| {
        (
            g.metadata.creation_timestamp.clone().map(|t| t.0),
            g.name_any(),
        )
    };
    let first = all
        .iter()
        .filter(|g| g.metadata.deletion_timestamp.is_none())
        .filter(|g| selects(&g.spec.cluster_selector, &cluster.labels))
        .min_by_key(|g| key(g))?;
    (first.name_any() != gateway.name_any()).then(|| first.name_any())
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
        ..
    } = planner;
    plan_global(&mut out, &namespace, &reference, zone, global, &candidates);
    out.seal();
    out
}

/// A selected cluster that could answer the global name: its name, whether it is healthy,
/// and its addresses (v4, v6, host name).
type Candidate = (String, bool, [Vec<String>; 3]);

/// The plan of one GatewayDNS while its clusters are gone through.
struct Planner<'a> {
    gateway: &'a GatewayDNS,
    namespace: String,
    reference: String,
    zone: &'a str,
    old_status: GatewayDNSStatus,
    out: Plan,
    candidates: Vec<Candidate>,
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
                "GatewayDNS {namespace}/{owner} (older) already publishes cluster {}; this one does not",
                cluster.name
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
            Observation::Addresses { ips, hostnames } => {
                self.publish(&mut status, healthy, &ips, &hostnames);
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
            Observation::NotLoadBalancer(kind) => {
                status.state = GatewayState::NotLoadBalancer;
                status.message = format!(
                    "Service {service} on cluster {} is of type {kind}; resolutionType loadBalancer needs type LoadBalancer",
                    cluster.name
                );
            }
            Observation::NoAddress => {
                status.state = GatewayState::NoAddress;
                status.message = format!(
                    "Service {service} on cluster {} has no load-balancer address yet",
                    cluster.name
                );
            }
        }
        status
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
            &status.hostname,
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
            let last = split(&before.addresses);
            push_slices(
                &mut self.out,
                &names,
                &last,
                &status.hostname,
                &self.reference,
                &status.cluster,
            );
            self.candidates.push((status.cluster.clone(), false, last));
        }
        self.out.keep.extend(names);
    }
}

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

/// The annotations and labels the writes compare, in [`Print::keys`] order.
const KEYS: [(&str, bool); 8] = [
    (HOSTNAME_ANNOTATION, true),
    (REF_ANNOTATION, true),
    (TTL_ANNOTATION, true),
    (GLOBAL_ANNOTATION, true),
    (GLOBAL_HOSTNAME_ANNOTATION, true),
    (GLOBAL_TTL_ANNOTATION, true),
    (SERVICE_NAME_LABEL, false),
    (MANAGED_BY_LABEL, false),
];
/// Positions in [`KEYS`].
const HOSTNAME_KEY: usize = 0;
const REF_KEY: usize = 1;
const GLOBAL_HOSTNAME_KEY: usize = 4;
const GLOBAL_TTL_KEY: usize = 5;

fn hash_of(value: &str) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    value.hash(&mut hasher);
    // 0 stands for "absent".
    hasher.finish().max(1)
}

/// What the writes need to know of an EndpointSlice, in a few dozen bytes: its address type,
/// a hash of its addresses, and a hash of each annotation and label they compare (0: absent).
/// The controller keeps this of every slice in `xcc-dns` of every cluster, never the object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Print {
    pub address_type: AddressType,
    /// Of the sorted addresses, when the slice has exactly one endpoint; 0 otherwise.
    pub addresses: u64,
    pub keys: [u64; 8],
}

/// An EndpointSlice's `addressType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AddressType {
    #[default]
    IPv4,
    IPv6,
    Fqdn,
    Other,
}

impl AddressType {
    pub fn of(address_type: &str) -> AddressType {
        match address_type {
            "IPv4" => AddressType::IPv4,
            "IPv6" => AddressType::IPv6,
            "FQDN" => AddressType::Fqdn,
            _ => AddressType::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AddressType::IPv4 => "IPv4",
            AddressType::IPv6 => "IPv6",
            AddressType::Fqdn => "FQDN",
            AddressType::Other => "other",
        }
    }
}

impl Print {
    pub fn of(slice: &EndpointSlice) -> Print {
        let address_type = AddressType::of(&slice.address_type);
        let addresses = match slice.endpoints.as_slice() {
            [one] => {
                let mut sorted: Vec<&str> = one.addresses.iter().map(String::as_str).collect();
                sorted.sort_unstable();
                let mut hasher = std::hash::DefaultHasher::new();
                sorted.hash(&mut hasher);
                hasher.finish().max(1)
            }
            _ => 0,
        };
        let (annotations, labels) = (slice.annotations(), slice.labels());
        let keys = KEYS.map(|(key, annotation)| {
            let value = if annotation {
                annotations.get(key)
            } else {
                labels.get(key)
            };
            value.map_or(0, |v| hash_of(v))
        });
        Print {
            address_type,
            addresses,
            keys,
        }
    }

    /// Whether this (a slice on a cluster) already says what `desired` says, with the global
    /// name (host, TTL hashes) `global` or without one: every annotation and label `desired`
    /// has is here with its value, and the global name is exactly `global`.
    pub fn says(&self, desired: &Print, global: Option<(u64, u64)>) -> bool {
        let (host, ttl) = global.unwrap_or_default();
        self.address_type == desired.address_type
            && self.addresses != 0
            && self.addresses == desired.addresses
            && self.keys[GLOBAL_HOSTNAME_KEY] == host
            && self.keys[GLOBAL_TTL_KEY] == ttl
            && self
                .keys
                .iter()
                .zip(desired.keys)
                .enumerate()
                .filter(|(i, _)| *i != GLOBAL_HOSTNAME_KEY && *i != GLOBAL_TTL_KEY)
                .all(|(_, (have, want))| want == 0 || *have == want)
    }

    /// Whether this is a slice that `reference` (`<ns>/<name>`) wrote: the host-name
    /// annotation, and the ref annotation naming it.
    pub fn owned_by(&self, reference: u64) -> bool {
        self.keys[HOSTNAME_KEY] != 0 && self.keys[REF_KEY] == reference
    }

    /// The global name (host, TTL) this says, if any.
    pub fn global_name(&self) -> Option<(u64, u64)> {
        let global = (self.keys[GLOBAL_HOSTNAME_KEY], self.keys[GLOBAL_TTL_KEY]);
        (global != (0, 0)).then_some(global)
    }
}

/// The slices in `xcc-dns` of one cluster, by name.
pub type Slices = HashMap<String, Print>;

/// What [`original_reads`] and [`readable_by`] look at.
pub trait SliceKind {
    fn kind(&self) -> AddressType;
    fn has_hostname(&self) -> bool;
    /// Carries a global name as a separate slice (`xcc.test/global: "true"`).
    fn global(&self) -> bool;
}

impl SliceKind for Print {
    fn kind(&self) -> AddressType {
        self.address_type
    }
    fn has_hostname(&self) -> bool {
        self.keys[HOSTNAME_KEY] != 0
    }
    fn global(&self) -> bool {
        self.keys[3] == hash_of("true")
    }
}

impl SliceKind for EndpointSlice {
    fn kind(&self) -> AddressType {
        AddressType::of(&self.address_type)
    }
    fn has_hostname(&self) -> bool {
        self.annotations().contains_key(HOSTNAME_ANNOTATION)
    }
    fn global(&self) -> bool {
        is_global(self)
    }
}

/// The per-cluster slices of `cluster` (names from [`slice_names`]) for its (v4, v6, host name)
/// addresses.
fn push_slices(
    out: &mut Plan,
    names: &[String; 3],
    addresses: &[Vec<String>; 3],
    host: &str,
    reference: &str,
    cluster: &str,
) {
    for ((name, kind), addresses) in names.iter().zip(["IPv4", "IPv6", "FQDN"]).zip(addresses) {
        if !addresses.is_empty() {
            out.slices
                .push(slice(name, kind, addresses, host, reference));
            out.sources.insert(name.clone(), cluster.to_string());
        }
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

/// The global name `*.gateway.<namespace>.global.<zone>`.
pub fn global_hostname(namespace: &str, zone: &str) -> String {
    format!("*.gateway.{namespace}.global.{zone}")
}

/// The three global-name slice names of a cluster's gateway (never one of [`slice_names`]:
/// those end in `-gateway`, `-gateway-ipv6` or `-gateway-fqdn`).
pub fn global_slice_names(namespace: &str, cluster: &str) -> [String; 3] {
    let base = format!("{namespace}-{cluster}-global");
    [base.clone(), format!("{base}-ipv6"), format!("{base}-fqdn")]
}

/// Chooses whose gateways answer the global name (`global`'s strategy among the healthy
/// `candidates`, or its `whenNoneHealthy` fallback), and builds their slices.
fn plan_global(
    out: &mut Plan,
    namespace: &str,
    reference: &str,
    zone: &str,
    global: &Global,
    candidates: &[Candidate],
) {
    let host = global_hostname(namespace, zone);
    let healthy: Vec<String> = candidates
        .iter()
        .filter(|(_, healthy, _)| *healthy)
        .map(|(c, _, _)| c.clone())
        .collect();
    let fallback: Vec<String> = match global.when_none_healthy {
        NoneHealthy::ServeAll => candidates.iter().map(|(c, _, _)| c.clone()).collect(),
        NoneHealthy::Nxdomain => Vec::new(),
    };
    out.global_members = match global.strategy {
        GlobalStrategy::RoundRobin if !healthy.is_empty() => GlobalMembers::Everyone(healthy),
        GlobalStrategy::Failover if !healthy.is_empty() => {
            let first = global
                .failover_order
                .iter()
                .find(|c| healthy.contains(c))
                .unwrap_or(&healthy[0]);
            GlobalMembers::Everyone(vec![first.clone()])
        }
        GlobalStrategy::LocalFirst => GlobalMembers::LocalFirst { healthy, fallback },
        _ => GlobalMembers::Everyone(fallback),
    };
    let ttl = global.ttl.to_string();
    out.global_hostname = host.clone();
    out.global_ttl = ttl.clone();
    for (cluster, _, addresses) in candidates {
        let names = global_slice_names(namespace, cluster);
        let mut slices = Vec::new();
        for ((name, kind), addresses) in names
            .iter()
            .zip(["IPv4", "IPv6", "FQDN"])
            .zip(addresses.iter())
        {
            if addresses.is_empty() {
                continue;
            }
            let mut global_slice = slice(name, kind, addresses, &host, reference);
            let annotations = global_slice.metadata.annotations.get_or_insert_default();
            annotations.insert(TTL_ANNOTATION.to_string(), ttl.clone());
            annotations.insert(GLOBAL_ANNOTATION.to_string(), "true".to_string());
            slices.push(global_slice);
        }
        out.global.insert(cluster.clone(), slices);
    }
}

/// Whether `slice` carries a global name.
pub fn is_global(slice: &EndpointSlice) -> bool {
    slice
        .annotations()
        .get(GLOBAL_ANNOTATION)
        .is_some_and(|v| v == "true")
}

fn slice(
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
        endpoints: vec![Endpoint {
            addresses: addresses.to_vec(),
            ..Default::default()
        }],
        ports: None,
    }
}

/// Whether the original XCC dns-server reads `slice`: addressType IPv4 or FQDN, with the host-name
/// annotation. It stores only those, and its process dies when any other slice of its namespace
/// is deleted; so these are the only slices that may be created or deleted on a cluster where
/// no xcc-agent is announced.
pub fn original_reads(slice: &impl SliceKind) -> bool {
    matches!(slice.kind(), AddressType::IPv4 | AddressType::Fqdn)
        && slice.has_hostname()
        && !slice.global()
}

/// The announced feature an agent needs before it is sent `slice`; `None` for a slice the
/// original reads, or one no xcc-agent feature covers.
pub fn feature_needed(slice: &impl SliceKind) -> Option<Feature> {
    if original_reads(slice) {
        return None;
    }
    if slice.global() && slice.has_hostname() {
        return Some(Feature::Global);
    }
    match slice.kind() {
        AddressType::IPv6 if slice.has_hostname() => Some(Feature::Ipv6),
        _ => None,
    }
}

/// Whether a cluster whose agent announced `agent` (`None`: nothing announced, perhaps the
/// original dns-server runs there) may be sent, or have deleted, `slice`.
pub fn readable_by(slice: &impl SliceKind, agent: Option<&Announcement>) -> bool {
    let needs = |f: Feature| agent.is_some_and(|a| a.reads(f));
    original_reads(slice)
        || (feature_needed(slice).is_some_and(needs)
            // A global IPv6 slice needs both.
            && (!slice.global() || slice.kind() != AddressType::IPv6 || needs(Feature::Ipv6)))
}

/// What to do with one GatewayDNS's slices on one cluster of the namespace.
#[derive(Debug, Default, PartialEq)]
pub struct ClusterWrites {
    /// Slices to create or update (server-side apply).
    pub apply: Vec<EndpointSlice>,
    /// Owned slices to delete.
    pub delete: Vec<String>,
    /// Wanted slices not written because this cluster cannot read them.
    pub withheld: Vec<String>,
    /// Owned slices this cluster cannot read, left as they are: deleting (or rewriting) one
    /// would crash an original dns-server. Written by an earlier xcc version.
    pub kept_unreadable: Vec<(String, String)>,
    /// Wanted names taken by a slice this GatewayDNS does not own.
    pub foreign: Vec<String>,
    /// Global-name slices not sent: the cluster announced no agent that serves them (not a
    /// problem to report: the original never serves global names).
    pub withheld_global: bool,
}

/// [`cluster_writes_for`] without the global name.
#[cfg(test)]
pub fn cluster_writes(
    plan: &Plan,
    existing: &[EndpointSlice],
    reference: &str,
    agent: Option<&Announcement>,
) -> ClusterWrites {
    cluster_writes_for(plan, existing, reference, agent, "")
}

/// [`cluster_writes_in`] for slices given as objects.
#[cfg(test)]
pub fn cluster_writes_for(
    plan: &Plan,
    existing: &[EndpointSlice],
    reference: &str,
    agent: Option<&Announcement>,
    target: &str,
) -> ClusterWrites {
    let existing: Slices = existing
        .iter()
        .map(|s| (s.name_any(), Print::of(s)))
        .collect();
    cluster_writes_in(plan, &existing, reference, agent, target)
}

/// Brings `existing` (the slices in `xcc-dns` of cluster `target`) to `plan`, sending only what
/// a cluster with announcement `agent` reads: without one, no slice the original cannot read is
/// ever created, changed or deleted there. Deletions and kept slices come sorted by name.
pub fn cluster_writes_in(
    plan: &Plan,
    existing: &Slices,
    reference: &str,
    agent: Option<&Announcement>,
    target: &str,
) -> ClusterWrites {
    let mut out = ClusterWrites::default();
    let owner = hash_of(reference);
    // An agent that reads the global name off the per-cluster slices gets it there: one slice
    // per gateway, one write per change. An earlier one gets the separate global slices.
    let on_slices =
        agent.is_some_and(|a| a.reads(Feature::GlobalHostname)) && !plan.global_hostname.is_empty();
    let members: HashSet<&str> = if on_slices {
        plan.global_members_for(target).into_iter().collect()
    } else {
        HashSet::new()
    };
    let global_keys = (hash_of(&plan.global_hostname), hash_of(&plan.global_ttl));
    let member = |slice: &EndpointSlice| {
        on_slices
            && slice
                .metadata
                .name
                .as_deref()
                .and_then(|n| plan.sources.get(n))
                .is_some_and(|c| members.contains(c.as_str()))
    };
    let global = if on_slices {
        Vec::new()
    } else {
        plan.global_for(target)
    };
    let mut wanted: HashSet<&str> = HashSet::new();
    for want in plan.slices.iter().chain(global) {
        let name = want.metadata.name.as_deref().unwrap_or_default();
        if !readable_by(want, agent) {
            if is_global(want) {
                out.withheld_global = true;
            } else {
                out.withheld.push(name.to_string());
            }
            continue;
        }
        wanted.insert(name);
        let global = member(want);
        let print = plan
            .prints
            .get(name)
            .cloned()
            .unwrap_or_else(|| Print::of(want));
        match existing.get(name) {
            Some(have) if !have.owned_by(owner) => out.foreign.push(name.to_string()),
            Some(have) if have.says(&print, global.then_some(global_keys)) => {}
            _ => out.apply.push(if global {
                with_global_hostname(want, &plan.global_hostname, &plan.global_ttl)
            } else {
                want.clone()
            }),
        }
    }
    for (name, have) in existing.iter().filter(|(_, s)| s.owned_by(owner)) {
        if !readable_by(have, agent) {
            out.kept_unreadable
                .push((name.clone(), have.address_type.as_str().to_string()));
        } else if !wanted.contains(name.as_str()) && !plan.keep.contains(name) {
            out.delete.push(name.clone());
        }
    }
    out.delete.sort();
    out.kept_unreadable.sort();
    out
}

/// `slice` also answering the global name `host`, with TTL `ttl`.
pub fn with_global_hostname(slice: &EndpointSlice, host: &str, ttl: &str) -> EndpointSlice {
    let mut slice = slice.clone();
    let annotations = slice.metadata.annotations.get_or_insert_default();
    annotations.insert(GLOBAL_HOSTNAME_ANNOTATION.to_string(), host.to_string());
    annotations.insert(GLOBAL_TTL_ANNOTATION.to_string(), ttl.to_string());
    slice
}

/// Whether `existing` is a slice this GatewayDNS wrote (both annotations, matching ref).
#[cfg(test)]
pub fn is_owned(existing: &EndpointSlice, reference: &str) -> bool {
    Print::of(existing).owned_by(hash_of(reference))
}

/// Whether `existing` already says what `desired` says (no write needed), the global name
/// included.
pub fn same_content(existing: &Print, desired: &Print) -> bool {
    existing.says(desired, desired.global_name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gatewaydns::{GatewayDNSSpec, ResolutionType};
    use k8s_openapi::{
        api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceSpec, ServiceStatus},
        apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, Time},
        jiff::Timestamp,
    };

    fn gateway(name: &str, age_secs: i64, selector: &[(&str, &str)]) -> GatewayDNS {
        let mut g = GatewayDNS::new(
            name,
            GatewayDNSSpec {
                cluster_selector: LabelSelector {
                    match_labels: Some(
                        selector
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                    ),
                    ..Default::default()
                },
                service: "projectcontour/envoy".into(),
                resolution_type: ResolutionType::LoadBalancer,
                stale_records: None,
                global: None,
            },
        );
        g.metadata.namespace = Some("dev-team".into());
        g.metadata.creation_timestamp = Some(Time(
            Timestamp::from_second(1_700_000_000 + age_secs).unwrap(),
        ));
        g
    }

    fn cluster(name: &str, labels: &[(&str, &str)]) -> ClusterInfo {
        ClusterInfo {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn lb(ips: &[&str], hostnames: &[&str]) -> Service {
        let ingress = ips
            .iter()
            .map(|ip| LoadBalancerIngress {
                ip: Some(ip.to_string()),
                ..Default::default()
            })
            .chain(hostnames.iter().map(|h| LoadBalancerIngress {
                hostname: Some(h.to_string()),
                ..Default::default()
            }))
            .collect();
        Service {
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ..Default::default()
            }),
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(ingress),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn contour() -> Vec<ClusterInfo> {
        vec![
            cluster("cluster-a", &[("hasContour", "true")]),
            cluster("cluster-b", &[("hasContour", "true")]),
            cluster("cluster-c", &[]),
        ]
    }

    #[test]
    fn the_walkthrough_publishes_each_selected_cluster_with_xccs_names() {
        let g = gateway("dev-team-gateway-dns", 0, &[("hasContour", "true")]);
        let plan = plan(
            &g,
            std::slice::from_ref(&g),
            &contour(),
            "xcc.test",
            |c| match c {
                "cluster-a" => observe(Some(&lb(&["10.0.0.1"], &[]))),
                _ => observe(Some(&lb(&["10.0.0.2"], &[]))),
            },
        );
        assert_eq!(plan.clusters.len(), 2, "cluster-c is not selected");
        let a = &plan.slices[0];
        assert_eq!(a.name_any(), "dev-team-cluster-a-gateway");
        assert_eq!(a.namespace().as_deref(), Some("xcc-dns"));
        assert_eq!(a.address_type, "IPv4");
        assert_eq!(a.endpoints[0].addresses, ["10.0.0.1"]);
        assert_eq!(
            a.annotations()[HOSTNAME_ANNOTATION],
            "*.gateway.cluster-a.dev-team.clusters.xcc.test"
        );
        assert_eq!(
            a.annotations()[REF_ANNOTATION],
            "dev-team/dev-team-gateway-dns"
        );
        assert_eq!(a.labels()[SERVICE_NAME_LABEL], "dev-team-cluster-a-gateway");
        assert!(
            plan.clusters
                .iter()
                .all(|c| c.state == GatewayState::Published)
        );
    }

    #[test]
    fn ipv6_and_hostnames_get_their_own_slices() {
        let g = gateway("g", 0, &[("hasContour", "true")]);
        let plan = plan(
            &g,
            std::slice::from_ref(&g),
            &contour()[..1],
            "xcc.test",
            |_| observe(Some(&lb(&["10.0.0.1", "fd00::1"], &["LB.Example.com"]))),
        );
        let kinds: Vec<(String, String)> = plan
            .slices
            .iter()
            .map(|s| (s.name_any(), s.address_type.clone()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("dev-team-cluster-a-gateway".into(), "IPv4".into()),
                ("dev-team-cluster-a-gateway-ipv6".into(), "IPv6".into()),
                ("dev-team-cluster-a-gateway-fqdn".into(), "FQDN".into()),
            ]
        );
        assert_eq!(plan.slices[2].endpoints[0].addresses, ["lb.example.com"]);
    }

    #[test]
    fn every_failure_is_explained_and_unreachable_keeps_records() {
        let g = gateway("g", 0, &[]);
        let clusters = vec![
            cluster("missing", &[]),
            cluster("clusterip", &[]),
            cluster("pending", &[]),
            cluster("down", &[]),
            cluster("refused", &[]),
        ];
        let mut clusterip = lb(&[], &[]);
        clusterip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        let plan = plan(
            &g,
            std::slice::from_ref(&g),
            &clusters,
            "xcc.test",
            |c| match c {
                "missing" => observe(None),
                "clusterip" => observe(Some(&clusterip)),
                "pending" => observe(Some(&lb(&[], &[]))),
                "refused" => Observation::KubeconfigRejected("exec".into()),
                _ => Observation::Unreachable("connection refused".into()),
            },
        );
        assert!(plan.slices.is_empty());
        let states: Vec<&str> = plan.clusters.iter().map(|c| c.state.as_str()).collect();
        assert_eq!(
            states,
            [
                "NotLoadBalancer",
                "Unreachable",
                "ServiceNotFound",
                "NoAddress",
                "KubeconfigRejected"
            ]
        );
        assert!(plan.clusters[0].message.contains("ClusterIP"));
        assert!(plan.clusters[1].message.contains("connection refused"));
        // An unreachable cluster's slices are kept, the others' are withdrawn.
        assert!(!plan.should_delete("dev-team-down-gateway"));
        assert!(!plan.should_delete("dev-team-down-gateway-ipv6"));
        // So are those of a cluster whose kubeconfig is refused.
        assert!(!plan.should_delete("dev-team-refused-gateway"));
        assert!(plan.clusters[4].message.contains("exec"));
        assert!(plan.should_delete("dev-team-missing-gateway"));
    }

    #[test]
    fn two_gateways_on_one_cluster_the_older_wins() {
        let old = gateway("old", 0, &[("hasContour", "true")]);
        let new = gateway("new", 10, &[]);
        let all = vec![new.clone(), old.clone()];
        let seen = |_: &str| observe(Some(&lb(&["10.0.0.1"], &[])));
        let new_plan = plan(&new, &all, &contour(), "xcc.test", seen);
        let conflicts: Vec<&str> = new_plan
            .clusters
            .iter()
            .filter(|c| c.state == GatewayState::Conflict)
            .map(|c| c.cluster.as_str())
            .collect();
        assert_eq!(conflicts, ["cluster-a", "cluster-b"]);
        assert!(new_plan.clusters[0].message.contains("dev-team/old"));
        assert_eq!(new_plan.slices.len(), 1, "cluster-c is new's alone");
        let old_plan = plan(&old, &all, &contour(), "xcc.test", seen);
        assert_eq!(old_plan.slices.len(), 2);
    }

    #[test]
    fn selectors_follow_the_api_semantics() {
        let labels: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
        let expr = |op: &str, values: &[&str]| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        };
        assert!(
            selects(&LabelSelector::default(), &labels),
            "empty selects all"
        );
        assert!(selects(&expr("In", &["prod", "dev"]), &labels));
        assert!(!selects(&expr("NotIn", &["prod"]), &labels));
        assert!(selects(&expr("Exists", &[]), &labels));
        assert!(!selects(&expr("DoesNotExist", &[]), &labels));
        assert!(!selects(&expr("Bogus", &[]), &labels));
        // matchLabels and matchExpressions together: both must hold.
        let both = |env: &str, tier_op: &str| LabelSelector {
            match_labels: Some([("env".to_string(), env.to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: tier_op.into(),
                values: Some(vec!["edge".into()]),
            }]),
        };
        assert!(selects(&both("prod", "NotIn"), &labels));
        assert!(!selects(&both("prod", "In"), &labels));
        assert!(!selects(&both("dev", "NotIn"), &labels));
        let edge: BTreeMap<String, String> = [
            ("env".to_string(), "prod".to_string()),
            ("tier".to_string(), "edge".to_string()),
        ]
        .into();
        assert!(selects(&both("prod", "In"), &edge));
        assert!(!selects(&both("prod", "NotIn"), &edge));
        // Without values, as the hand-written matcher read them: an empty set.
        let no_values = |op: &str| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: op.into(),
                values: None,
            }]),
            ..Default::default()
        };
        assert!(!selects(&no_values("In"), &labels));
        assert!(selects(&no_values("NotIn"), &labels));
        assert!(selects(&no_values("Exists"), &labels));
    }

    #[test]
    fn ownership_and_sameness() {
        let g = gateway("g", 0, &[]);
        let plan = plan(
            &g,
            std::slice::from_ref(&g),
            &contour()[..1],
            "xcc.test",
            |_| observe(Some(&lb(&["10.0.0.1"], &[]))),
        );
        let mine = plan.slices[0].clone();
        assert!(is_owned(&mine, "dev-team/g"));
        assert!(!is_owned(&mine, "dev-team/other"));
        let mut by_hand = mine.clone();
        by_hand.metadata.annotations = None;
        assert!(
            !is_owned(&by_hand, "dev-team/g"),
            "a slice made by a person is never ours"
        );
        assert!(same_content(&Print::of(&mine), &Print::of(&plan.slices[0])));
        let mut moved = mine.clone();
        moved.endpoints[0].addresses = vec!["10.0.0.9".into()];
        assert!(!same_content(
            &Print::of(&moved),
            &Print::of(&plan.slices[0])
        ));
    }

    fn mixed_plan(ips: &[&str], hostnames: &[&str]) -> Plan {
        let g = gateway("g", 0, &[("hasContour", "true")]);
        plan(
            &g,
            std::slice::from_ref(&g),
            &contour()[..1],
            "xcc.test",
            |_| observe(Some(&lb(ips, hostnames))),
        )
    }

    fn names(slices: &[EndpointSlice]) -> Vec<String> {
        slices.iter().map(|s| s.name_any()).collect()
    }

    fn xcc_agent() -> Announcement {
        Announcement::current("test")
    }

    #[test]
    fn what_the_original_reads() {
        let all = mixed_plan(&["10.0.0.1", "fd00::1"], &["lb.example.com"]).slices;
        let kinds: Vec<(&str, bool)> = all
            .iter()
            .map(|s| (s.address_type.as_str(), original_reads(s)))
            .collect();
        assert_eq!(kinds, [("IPv4", true), ("IPv6", false), ("FQDN", true)]);
        assert_eq!(feature_needed(&all[1]), Some(Feature::Ipv6));
        let mut unannotated = all[0].clone();
        unannotated.metadata.annotations = None;
        assert!(
            !original_reads(&unannotated),
            "the original never stores a slice without the host-name annotation"
        );
        assert!(!readable_by(&unannotated, Some(&xcc_agent())));
    }

    #[test]
    fn an_unannounced_cluster_is_sent_only_what_the_original_reads() {
        let plan = mixed_plan(&["10.0.0.1", "fd00::1"], &["lb.example.com"]);
        let none = cluster_writes(&plan, &[], "dev-team/g", None);
        assert_eq!(
            names(&none.apply),
            [
                "dev-team-cluster-a-gateway",
                "dev-team-cluster-a-gateway-fqdn"
            ]
        );
        assert_eq!(none.withheld, ["dev-team-cluster-a-gateway-ipv6"]);
        assert!(none.delete.is_empty() && none.kept_unreadable.is_empty());

        let announced = cluster_writes(&plan, &[], "dev-team/g", Some(&xcc_agent()));
        assert_eq!(names(&announced.apply).len(), 3, "{announced:?}");
        assert!(announced.withheld.is_empty());

        // An agent that reads FQDN but announced no IPv6 (an older or newer protocol) is not
        // sent IPv6 either.
        let fqdn_only = Announcement {
            features: [Feature::Fqdn].into(),
            version: None,
        };
        let older = cluster_writes(&plan, &[], "dev-team/g", Some(&fqdn_only));
        assert_eq!(older.withheld, ["dev-team-cluster-a-gateway-ipv6"]);
    }

    #[test]
    fn an_unannounced_cluster_never_loses_a_slice_the_original_cannot_read() {
        // An earlier xcc version wrote all three; the gateway is back to IPv4 only.
        let before = mixed_plan(&["10.0.0.1", "fd00::1"], &["lb.example.com"]).slices;
        let after = mixed_plan(&["10.0.0.1"], &[]);
        let none = cluster_writes(&after, &before, "dev-team/g", None);
        assert_eq!(none.delete, ["dev-team-cluster-a-gateway-fqdn"]);
        assert_eq!(
            none.kept_unreadable,
            [(
                "dev-team-cluster-a-gateway-ipv6".to_string(),
                "IPv6".to_string()
            )]
        );
        assert!(none.apply.is_empty(), "the IPv4 slice is unchanged");
        let announced = cluster_writes(&after, &before, "dev-team/g", Some(&xcc_agent()));
        assert_eq!(
            announced.delete,
            [
                "dev-team-cluster-a-gateway-fqdn",
                "dev-team-cluster-a-gateway-ipv6"
            ]
        );
        assert!(announced.kept_unreadable.is_empty());

        // Still wanted but unreadable there: not rewritten either, even with new addresses.
        let moved = mixed_plan(&["10.0.0.1", "fd00::2"], &[]);
        let none = cluster_writes(&moved, &before, "dev-team/g", None);
        assert!(names(&none.apply).is_empty(), "{none:?}");
        assert_eq!(none.withheld, ["dev-team-cluster-a-gateway-ipv6"]);
        assert_eq!(none.kept_unreadable.len(), 1);
    }

    #[test]
    fn a_deleted_gateway_withdraws_only_what_the_original_reads_from_an_unannounced_cluster() {
        let before = mixed_plan(&["10.0.0.1", "fd00::1"], &["lb.example.com"]).slices;
        let mut by_hand = before[1].clone();
        by_hand.metadata.name = Some("by-hand".into());
        by_hand.metadata.annotations = None;
        let existing = [before.clone(), vec![by_hand]].concat();
        let gone = Plan::default();
        let none = cluster_writes(&gone, &existing, "dev-team/g", None);
        assert_eq!(
            none.delete,
            [
                "dev-team-cluster-a-gateway",
                "dev-team-cluster-a-gateway-fqdn"
            ]
        );
        assert_eq!(none.kept_unreadable.len(), 1);
        let announced = cluster_writes(&gone, &existing, "dev-team/g", Some(&xcc_agent()));
        assert_eq!(announced.delete.len(), 3, "never the person's slice");
        // Another GatewayDNS's slices are never touched.
        let other = cluster_writes(&gone, &existing, "dev-team/other", Some(&xcc_agent()));
        assert!(other.delete.is_empty() && other.kept_unreadable.is_empty());
    }

    fn global_plan(global: &Global, healthy: &[&str]) -> Plan {
        let g = gateway("g", 0, &[("hasContour", "true")]);
        plan_with_health(
            &g,
            std::slice::from_ref(&g),
            &contour(),
            "xcc.test",
            global,
            |c| match c {
                "cluster-a" => observe(Some(&lb(&["10.0.0.1"], &[]))),
                _ => observe(Some(&lb(&["10.0.0.2"], &[]))),
            },
            |c| HealthView {
                health: Some(if healthy.contains(&c) {
                    GatewayHealth::Healthy
                } else {
                    GatewayHealth::NoReadyEndpoints
                }),
                ..Default::default()
            },
        )
    }

    fn global_addresses(plan: &Plan, target: &str) -> Vec<String> {
        plan.global_for(target)
            .iter()
            .flat_map(|s| s.endpoints[0].addresses.clone())
            .collect()
    }

    #[test]
    fn the_global_name_answers_with_the_healthy_gateways_by_strategy() {
        let round_robin = global_plan(&Global::default(), &["cluster-a", "cluster-b"]);
        assert_eq!(
            global_addresses(&round_robin, "cluster-c"),
            ["10.0.0.1", "10.0.0.2"]
        );
        let slice = round_robin.global_for("cluster-c")[0];
        assert_eq!(slice.name_any(), "dev-team-cluster-a-global");
        assert_eq!(
            slice.annotations()[HOSTNAME_ANNOTATION],
            "*.gateway.dev-team.global.xcc.test"
        );
        assert_eq!(slice.annotations()[TTL_ANNOTATION], "5");
        assert_eq!(feature_needed(slice), Some(Feature::Global));
        assert!(
            !original_reads(slice),
            "the original never gets a global name"
        );

        // One gateway without ready endpoints leaves the global name (not its own name).
        let one = global_plan(&Global::default(), &["cluster-b"]);
        assert_eq!(global_addresses(&one, "cluster-a"), ["10.0.0.2"]);
        assert_eq!(one.slices.len(), 2, "per-cluster names stay");

        let local = Global {
            strategy: GlobalStrategy::LocalFirst,
            ..Global::default()
        };
        let both = global_plan(&local, &["cluster-a", "cluster-b"]);
        assert_eq!(global_addresses(&both, "cluster-a"), ["10.0.0.1"]);
        assert_eq!(global_addresses(&both, "cluster-b"), ["10.0.0.2"]);
        assert_eq!(
            global_addresses(&both, "cluster-c"),
            ["10.0.0.1", "10.0.0.2"],
            "a cluster without a gateway gets every healthy one"
        );
        let a_down = global_plan(&local, &["cluster-b"]);
        assert_eq!(global_addresses(&a_down, "cluster-a"), ["10.0.0.2"]);

        let failover = Global {
            strategy: GlobalStrategy::Failover,
            failover_order: vec!["cluster-b".into(), "cluster-a".into()],
            ..Global::default()
        };
        let first = global_plan(&failover, &["cluster-a", "cluster-b"]);
        assert_eq!(global_addresses(&first, "cluster-a"), ["10.0.0.2"]);
        let second = global_plan(&failover, &["cluster-a"]);
        assert_eq!(global_addresses(&second, "cluster-b"), ["10.0.0.1"]);

        // Nobody healthy: everyone (serveAll), or nothing (nxdomain).
        assert_eq!(
            global_addresses(&global_plan(&Global::default(), &[]), "cluster-a"),
            ["10.0.0.1", "10.0.0.2"]
        );
        let nx = Global {
            when_none_healthy: NoneHealthy::Nxdomain,
            ..Global::default()
        };
        assert!(global_addresses(&global_plan(&nx, &[]), "cluster-a").is_empty());
    }

    /// A cluster without slices.
    const NONE: &[EndpointSlice] = &[];

    /// An xcc-agent of the version before [`Feature::GlobalHostname`]: it reads the separate
    /// global slices.
    fn earlier_agent() -> Announcement {
        Announcement {
            features: [Feature::Fqdn, Feature::Global, Feature::Ipv6].into(),
            version: Some("earlier".into()),
        }
    }

    #[test]
    fn global_names_go_only_to_clusters_that_announced_them_and_leave_when_unhealthy() {
        let plan = global_plan(&Global::default(), &["cluster-a", "cluster-b"]);
        let none = cluster_writes_for(&plan, NONE, "dev-team/g", None, "cluster-c");
        assert_eq!(names(&none.apply).len(), 2, "{none:?}");
        assert!(none.withheld_global && none.withheld.is_empty());
        assert!(
            none.apply
                .iter()
                .all(|s| !s.annotations().contains_key(GLOBAL_HOSTNAME_ANNOTATION)),
            "{none:?}"
        );
        let xcc_agent = earlier_agent;
        let announced =
            cluster_writes_for(&plan, NONE, "dev-team/g", Some(&xcc_agent()), "cluster-c");
        assert_eq!(names(&announced.apply).len(), 4, "{announced:?}");
        // cluster-a loses its ready endpoints: its global slice goes, its own name stays.
        let existing: Vec<EndpointSlice> = announced.apply.clone();
        let after = global_plan(&Global::default(), &["cluster-b"]);
        let writes = cluster_writes_for(
            &after,
            &existing,
            "dev-team/g",
            Some(&xcc_agent()),
            "cluster-c",
        );
        assert_eq!(writes.delete, ["dev-team-cluster-a-global"]);
        assert!(writes.apply.is_empty());
        // An unannounced cluster never loses one either (it never had one).
        let writes = cluster_writes_for(&after, &existing, "dev-team/g", None, "cluster-c");
        assert!(writes.delete.is_empty(), "{writes:?}");
    }

    /// The global name on the per-cluster slices of the clusters `target` is to answer it with.
    fn global_on(writes: &ClusterWrites) -> Vec<(String, String, String)> {
        writes
            .apply
            .iter()
            .filter_map(|s| {
                let a = s.annotations();
                Some((
                    s.name_any(),
                    a.get(GLOBAL_HOSTNAME_ANNOTATION)?.clone(),
                    a.get(GLOBAL_TTL_ANNOTATION)?.clone(),
                ))
            })
            .collect()
    }

    /// What cluster `target` has after `writes` were made on `existing`.
    fn after_writes(existing: &[EndpointSlice], writes: &ClusterWrites) -> Vec<EndpointSlice> {
        let mut out: Vec<EndpointSlice> = existing
            .iter()
            .filter(|s| !writes.delete.contains(&s.name_any()))
            .filter(|s| !writes.apply.iter().any(|w| w.name_any() == s.name_any()))
            .cloned()
            .collect();
        out.extend(writes.apply.iter().cloned());
        out
    }

    #[test]
    fn the_global_name_rides_on_the_per_cluster_slices_one_write_per_change() {
        let agent = xcc_agent();
        let write = |plan: &Plan, existing: &[EndpointSlice], target: &str| {
            cluster_writes_for(plan, existing, "dev-team/g", Some(&agent), target)
        };
        let both = global_plan(&Global::default(), &["cluster-a", "cluster-b"]);
        let first = write(&both, NONE, "cluster-c");
        // Two slices, each naming both its cluster's name and the global one.
        assert_eq!(
            names(&first.apply),
            ["dev-team-cluster-a-gateway", "dev-team-cluster-b-gateway"]
        );
        let host = "*.gateway.dev-team.global.xcc.test".to_string();
        assert_eq!(
            global_on(&first),
            [
                (
                    "dev-team-cluster-a-gateway".into(),
                    host.clone(),
                    "5".into()
                ),
                (
                    "dev-team-cluster-b-gateway".into(),
                    host.clone(),
                    "5".into()
                ),
            ]
        );
        assert!(!first.withheld_global);
        assert!(
            first.apply.iter().all(original_reads),
            "the original reads them as before (and ignores the global name)"
        );
        let have = after_writes(&[], &first);
        // Nothing changed: nothing to write.
        assert_eq!(write(&both, &have, "cluster-c"), ClusterWrites::default());

        // One gateway's address changes: one write on this cluster.
        let g = gateway("g", 0, &[("hasContour", "true")]);
        let moved = plan_with_health(
            &g,
            std::slice::from_ref(&g),
            &contour(),
            "xcc.test",
            &Global::default(),
            |c| match c {
                "cluster-a" => observe(Some(&lb(&["10.0.0.9"], &[]))),
                _ => observe(Some(&lb(&["10.0.0.2"], &[]))),
            },
            |_| HealthView {
                health: Some(GatewayHealth::Healthy),
                ..Default::default()
            },
        );
        let change = write(&moved, &have, "cluster-c");
        assert_eq!(names(&change.apply), ["dev-team-cluster-a-gateway"]);
        assert_eq!(change.apply[0].endpoints[0].addresses, ["10.0.0.9"]);
        assert_eq!(global_on(&change).len(), 1, "it keeps the global name");
        assert!(change.delete.is_empty());

        // cluster-a turns unhealthy: its slice loses the global name (a rewrite, not a delete).
        let b_only = global_plan(&Global::default(), &["cluster-b"]);
        let left = write(&b_only, &have, "cluster-c");
        assert_eq!(names(&left.apply), ["dev-team-cluster-a-gateway"]);
        assert!(global_on(&left).is_empty(), "{left:?}");
        assert!(left.delete.is_empty());
        let have = after_writes(&have, &left);
        assert_eq!(write(&b_only, &have, "cluster-c"), ClusterWrites::default());

        // localFirst: each cluster with a healthy gateway answers with its own.
        let local = global_plan(
            &Global {
                strategy: GlobalStrategy::LocalFirst,
                ..Global::default()
            },
            &["cluster-a", "cluster-b"],
        );
        let on_a = write(&local, &[], "cluster-a");
        assert_eq!(
            global_on(&on_a),
            [(
                "dev-team-cluster-a-gateway".into(),
                host.clone(),
                "5".into()
            )]
        );
        assert_eq!(global_on(&write(&local, &[], "cluster-c")).len(), 2);
    }

    #[test]
    fn an_agent_that_reads_global_names_off_the_slices_loses_the_separate_global_slices() {
        let plan = global_plan(&Global::default(), &["cluster-a", "cluster-b"]);
        // What an earlier controller wrote for an earlier agent.
        let earlier = cluster_writes_for(&plan, NONE, "dev-team/g", Some(&earlier_agent()), "c");
        assert_eq!(earlier.apply.len(), 4);
        assert!(global_on(&earlier).is_empty());
        let have = after_writes(&[], &earlier);
        // The agent is upgraded: the per-cluster slices gain the name, the global ones go.
        let now = cluster_writes_for(&plan, &have, "dev-team/g", Some(&xcc_agent()), "c");
        assert_eq!(global_on(&now).len(), 2, "{now:?}");
        let mut deleted = now.delete.clone();
        deleted.sort();
        assert_eq!(
            deleted,
            ["dev-team-cluster-a-global", "dev-team-cluster-b-global"]
        );
        // Going back to an agent without it: the name leaves the per-cluster slices.
        let have = after_writes(&have, &now);
        let back = cluster_writes_for(&plan, &have, "dev-team/g", None, "c");
        assert_eq!(back.apply.len(), 2);
        assert!(global_on(&back).is_empty());
        assert!(back.withheld_global);
    }

    #[test]
    fn an_unreachable_cluster_keeps_its_last_addresses_under_the_global_name() {
        let g = gateway("g", 0, &[("hasContour", "true")]);
        let mut g_with_status = g.clone();
        g_with_status.status = Some(crate::gatewaydns::GatewayDNSStatus {
            clusters: vec![ClusterGatewayStatus {
                cluster: "cluster-a".into(),
                addresses: vec!["10.0.0.1".into()],
                ..Default::default()
            }],
            ..Default::default()
        });
        // Nobody healthy, serveAll: cluster-a (unreachable) answers with its last address.
        let plan = plan_with_health(
            &g_with_status,
            std::slice::from_ref(&g_with_status),
            &contour(),
            "xcc.test",
            &Global::default(),
            |c| match c {
                "cluster-a" => Observation::Unreachable("down".into()),
                _ => observe(Some(&lb(&["10.0.0.2"], &[]))),
            },
            |_| HealthView::default(),
        );
        let writes = cluster_writes_for(&plan, NONE, "dev-team/g", Some(&xcc_agent()), "c");
        assert_eq!(global_on(&writes).len(), 2, "{writes:?}");
        let a = writes
            .apply
            .iter()
            .find(|s| s.name_any() == "dev-team-cluster-a-gateway")
            .expect("cluster-a's last records");
        assert_eq!(a.endpoints[0].addresses, ["10.0.0.1"]);
        // Its slices are never deleted while it is unreachable.
        assert!(plan.keep.contains("dev-team-cluster-a-gateway-ipv6"));
    }
}

//! The GatewayDNS API (`connectivity.tanzu.vmware.com/v1alpha1`), unchanged from XCC so that its
//! users' YAML applies as is, plus a status subresource and schema validation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Publishes the load-balancer addresses of one gateway Service, on every Cluster API cluster
/// matching `clusterSelector`, as DNS names `*.gateway.<cluster>.<namespace>.clusters.<zone>`
/// resolvable from every cluster of the namespace (and of the namespaces in `resolveFrom`).
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "connectivity.tanzu.vmware.com",
    version = "v1alpha1",
    kind = "GatewayDNS",
    plural = "gatewaydns",
    singular = "gatewaydns",
    namespaced,
    status = "GatewayDNSStatus",
    printcolumn = r#"{"name":"Resolution Type","type":"string","jsonPath":".spec.resolutionType"}"#,
    printcolumn = r#"{"name":"Service","type":"string","jsonPath":".spec.service"}"#,
    printcolumn = r#"{"name":"Cluster Selector","type":"string","jsonPath":".spec.clusterSelector","priority":1}"#,
    printcolumn = r#"{"name":"Clusters","type":"string","jsonPath":".status.summary"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GatewayDNSSpec {
    /// Selects the Cluster API Clusters (in this namespace) whose gateway is published.
    #[serde(default)]
    pub cluster_selector: LabelSelector,
    /// The gateway Service on each selected cluster, as `namespace/name`.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub service: String,
    /// How the gateway is reached: `loadBalancer` (default), the Service's load-balancer
    /// ingress; `nodePort`, the addresses of the cluster's Ready, schedulable nodes (the node
    /// ports in SRV records); `hostPort`, those of the nodes that run a ready endpoint of the
    /// Service (the host ports in SRV records).
    #[serde(default)]
    pub resolution_type: ResolutionType,
    /// (xcc) Which node address `nodePort` and `hostPort` (and node names) publish:
    /// `InternalIP` (default) or `ExternalIP`. IPv4 addresses answer A queries, IPv6 ones AAAA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_address_type: Option<NodeAddressType>,
    /// (xcc) Also publish `nodes.<cluster>.<namespace>.clusters.<zone>` (every Ready node) and
    /// `<node>.nodes.<cluster>.<namespace>.clusters.<zone>` (one node). Default false: nothing
    /// about nodes is published unless asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_names: Option<bool>,
    /// (xcc) How long the records of an unreachable cluster are still served, and how a cluster
    /// whose records were withdrawn comes back. Unset: withdrawn after 5 minutes, back after 3
    /// good health checks in a row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_records: Option<StaleRecords>,
    /// (xcc) The cluster-agnostic name `*.gateway.<namespace>.global.<zone>`: which selected
    /// clusters' gateways it answers with. Unset: every healthy one (`roundRobin`), TTL 5 s.
    /// Served only by clusters whose xcc-agent announced `global`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalName>,
    /// (xcc) The other management-cluster namespaces whose clusters may resolve this
    /// GatewayDNS's names. Unset: only the clusters of its own namespace (which always may).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve_from: Option<ResolveFrom>,
    /// (xcc) How every xcc-agent probes the gateways' addresses from its own cluster: a gateway
    /// that fails there leaves that cluster's answers (per-cluster and global names) until it
    /// passes again. Unset: no probing (the control plane's view only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
}

/// Who, beyond the GatewayDNS's own namespace, may resolve its names.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResolveFrom {
    /// Management-cluster namespaces whose Cluster API Clusters are sent this GatewayDNS's
    /// records, as are the clusters of its own namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(max = 63))
    )]
    pub namespaces: Vec<String>,
    /// And the management-cluster namespaces whose labels match, as a NetworkPolicy's
    /// `namespaceSelector` (`{}`: every namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
}

/// Management-cluster namespace → its labels.
pub type NamespaceLabels =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>;

impl GatewayDNSSpec {
    /// The namespaces, other than `own`, whose clusters are sent this GatewayDNS's records
    /// (sorted, without duplicates): those listed, and those of `namespaces` the selector
    /// matches (none while `namespaces` is unknown).
    pub fn resolving_namespaces(
        &self,
        own: &str,
        namespaces: Option<&NamespaceLabels>,
    ) -> Vec<String> {
        let Some(from) = &self.resolve_from else {
            return Vec::new();
        };
        let mut out: Vec<String> = from.namespaces.clone();
        if let (Some(selector), Some(namespaces)) = (&from.namespace_selector, namespaces) {
            out.extend(
                namespaces
                    .iter()
                    .filter(|(_, labels)| crate::desired::selects(selector, labels))
                    .map(|(name, _)| name.clone()),
            );
        }
        out.retain(|n| n != own);
        out.sort();
        out.dedup();
        out
    }

    /// Whether this GatewayDNS reads the nodes of its clusters.
    pub fn needs_nodes(&self) -> bool {
        self.resolution_type.uses_nodes() || self.node_names == Some(true)
    }

    /// Whether which namespaces resolve it depends on namespace labels.
    pub fn selects_namespaces(&self) -> bool {
        self.resolve_from
            .as_ref()
            .is_some_and(|r| r.namespace_selector.is_some())
    }
}

/// How the global name chooses among the selected clusters' gateways.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.strategy) || self.strategy != 'failover' || (has(self.failoverOrder) && size(self.failoverOrder) > 0)",
    "message": "spec.global.failoverOrder must name at least one cluster when spec.global.strategy is failover",
    "fieldPath": ".failoverOrder"
}]))]
pub struct GlobalName {
    /// `roundRobin` (default): every healthy gateway. `localFirst`: each cluster's own gateway
    /// while it is healthy, else the other healthy ones. `failover`: the first healthy cluster
    /// of `failoverOrder` (then the rest by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<GlobalStrategy>,
    /// For `failover`: cluster names, the preferred first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(max = 63))
    )]
    pub failover_order: Vec<String>,
    /// When no selected cluster is healthy: `serveAll` (default; every gateway whose address is
    /// known, better than nothing) or `nxdomain` (the name does not resolve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_none_healthy: Option<NoneHealthy>,
    /// TTL, in seconds, of the global name's answers (default 5), short so that caches do not
    /// hold up a failover. Per-cluster names keep the agent's TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 3600))]
    pub ttl_seconds: Option<u32>,
}

/// How the global name chooses among healthy gateways.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum GlobalStrategy {
    /// Every healthy gateway.
    #[default]
    RoundRobin,
    /// The asking cluster's own gateway while it is healthy, else the others.
    LocalFirst,
    /// The first healthy cluster of `failoverOrder`.
    Failover,
}

/// What the global name answers when no selected cluster is healthy.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum NoneHealthy {
    /// Every gateway whose address is known.
    #[default]
    ServeAll,
    /// NXDOMAIN.
    Nxdomain,
}

/// When the records of an unreachable cluster are withdrawn, and when they come back.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StaleRecords {
    /// How long the records of a cluster whose API server cannot be reached are still served
    /// before they are withdrawn from every cluster: a duration such as `30s`, `5m` or `1h`, or
    /// `0` or `never` to keep them for as long as the cluster is away (the original XCC's
    /// behaviour). Default `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(never|0|([0-9]+(ms|s|m|h))+)$"), length(max = 32))]
    pub withdraw_after: Option<String>,
    /// How many health checks in a row (one every `--probe-interval` of the controller, 5 s by
    /// default) a cluster whose records were withdrawn must pass before they are published
    /// again: a cluster that flaps does not flap the DNS answers with it. Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub readmit_after: Option<u32>,
}

/// How a gateway Service is resolved.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum ResolutionType {
    /// The addresses (or host name) in `status.loadBalancer.ingress` of a `type: LoadBalancer`
    /// Service.
    #[default]
    #[serde(rename = "loadBalancer")]
    LoadBalancer,
    /// (xcc) The addresses of the cluster's Ready, schedulable nodes; the Service must be of
    /// type NodePort or LoadBalancer, its named ports' node ports are published as SRV records.
    #[serde(rename = "nodePort")]
    NodePort,
    /// (xcc) The addresses of the Ready, schedulable nodes that run a ready endpoint of the
    /// Service; its named ports' host ports are published as SRV records.
    #[serde(rename = "hostPort")]
    HostPort,
}

impl ResolutionType {
    /// Whether node addresses answer (`nodePort`, `hostPort`).
    pub fn uses_nodes(self) -> bool {
        matches!(self, ResolutionType::NodePort | ResolutionType::HostPort)
    }

    /// As the spec spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ResolutionType::LoadBalancer => "loadBalancer",
            ResolutionType::NodePort => "nodePort",
            ResolutionType::HostPort => "hostPort",
        }
    }
}

/// (xcc) Which node address `nodePort` and `hostPort` (and node names) publish: `InternalIP`
/// (default) or `ExternalIP`, of the node's `status.addresses`. IPv4 addresses answer A
/// queries, IPv6 ones AAAA.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum NodeAddressType {
    /// `status.addresses` of type `InternalIP`.
    #[default]
    InternalIP,
    /// `status.addresses` of type `ExternalIP`.
    ExternalIP,
}

impl NodeAddressType {
    /// As `status.addresses[].type` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeAddressType::InternalIP => "InternalIP",
            NodeAddressType::ExternalIP => "ExternalIP",
        }
    }
}

/// One named port of the gateway Service, as its SRV record publishes it.
#[derive(
    Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
#[serde(rename_all = "camelCase")]
pub struct GatewayPort {
    /// The Service port's name (`_<name>._<protocol>.gateway...`).
    pub name: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The node port (`nodePort`) or host port (`hostPort`) the SRV record gives.
    pub port: u16,
}

/// What the controller did with a GatewayDNS.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayDNSStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: every selected cluster's gateway is published on every cluster of the namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Published/selected clusters, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// What is published, or why not: one entry per selected cluster while there are at most
    /// 20; beyond that, only the clusters that need attention (not `Published`, not healthy,
    /// or not sent every address), the first 20 by name. Every entry: the controller's admin
    /// endpoint `/gatewaydns/<namespace>/<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterGatewayStatus>,
    /// Selected clusters per state (`Published`, `Unreachable`, ...).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub cluster_counts: std::collections::BTreeMap<String, u32>,
    /// Selected clusters not listed in `clusters`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub clusters_not_listed: u32,
    /// (xcc) The other namespaces whose clusters are sent this GatewayDNS's records: those of
    /// `spec.resolveFrom`, and one dropped from it until its records are withdrawn there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolved_from: Vec<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What became of one selected cluster's gateway.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum GatewayState {
    /// Its addresses are published on every cluster of the namespace.
    Published,
    /// The Service `spec.service` does not exist there.
    ServiceNotFound,
    /// The Service is not of type LoadBalancer.
    NotLoadBalancer,
    /// (`nodePort`) The Service is neither of type NodePort nor LoadBalancer.
    NotNodePort,
    /// The load balancer has no address yet.
    NoAddress,
    /// The cluster could not be asked; its last records are kept.
    Unreachable,
    /// The trust rules refuse its kubeconfig Secret; it is not asked, its last records are kept.
    KubeconfigRejected,
    /// Another (older) GatewayDNS publishes this cluster.
    Conflict,
    /// Its records are withdrawn: it was unreachable for longer than
    /// `spec.staleRecords.withdrawAfter`, and has not yet passed `readmitAfter` health checks
    /// in a row since.
    Withdrawn,
    /// A value this version does not know (written by another version).
    #[default]
    #[serde(other)]
    Unknown,
}

impl GatewayState {
    pub fn as_str(self) -> &'static str {
        match self {
            GatewayState::Published => "Published",
            GatewayState::ServiceNotFound => "ServiceNotFound",
            GatewayState::NotLoadBalancer => "NotLoadBalancer",
            GatewayState::NotNodePort => "NotNodePort",
            GatewayState::NoAddress => "NoAddress",
            GatewayState::Unreachable => "Unreachable",
            GatewayState::KubeconfigRejected => "KubeconfigRejected",
            GatewayState::Conflict => "Conflict",
            GatewayState::Withdrawn => "Withdrawn",
            GatewayState::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for GatewayState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether one selected cluster's gateway can take traffic.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum GatewayHealth {
    /// Its API server answers and the gateway Service has ready endpoints.
    Healthy,
    /// Its API server answers, but no endpoint behind the gateway Service is ready (or the
    /// Service has no EndpointSlice at all).
    NoReadyEndpoints,
    /// Its API server does not answer (or its kubeconfig Secret is missing or unusable); see
    /// `unreachableSince`.
    Unreachable,
    /// A value this version does not know (written by another version).
    #[default]
    #[serde(other)]
    Unknown,
}

/// The gateway of one selected cluster.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterGatewayStatus {
    /// Cluster API Cluster name.
    pub cluster: String,
    /// The DNS name published for it (`*.gateway.<cluster>.<namespace>.clusters.<zone>`).
    pub hostname: String,
    /// `Published`, or why not.
    pub state: GatewayState,
    /// Addresses or host names published.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// (`nodePort`, `hostPort`) The ports published as SRV records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<GatewayPort>,
    /// Details a person can act on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Whether the gateway can take traffic, as the controller last saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<GatewayHealth>,
    /// Ready endpoints behind the gateway Service (its EndpointSlices), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_endpoints: Option<u32>,
    /// Since when the cluster cannot be reached (set while `health` is `Unreachable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable_since: Option<Time>,
    /// The last time the cluster's API server answered (refreshed at most once a minute while
    /// nothing else changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<Time>,
    /// Clusters of the namespace that are not sent this gateway's IPv6 addresses: no xcc-agent
    /// is announced there (ConfigMap xcc-dns/xcc-agent), and the original XCC dns-server, which
    /// may run there, cannot read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld_from: Vec<String>,
}

// --- Data-path health checks (spec.healthCheck) ---

/// Default probe interval, timeout and thresholds: a gateway that stops answering leaves the
/// answers within interval × failureThreshold + timeout (700 ms), well under a second.
pub const HEALTH_CHECK_DEFAULTS: HealthCheckDefaults = HealthCheckDefaults {
    interval_ms: 250,
    timeout_ms: 200,
    failure_threshold: 2,
    success_threshold: 2,
    expected_status: (200, 399),
};

/// The values of [`HEALTH_CHECK_DEFAULTS`].
#[derive(Clone, Copy, Debug)]
pub struct HealthCheckDefaults {
    pub interval_ms: u32,
    pub timeout_ms: u32,
    pub failure_threshold: u32,
    pub success_threshold: u32,
    pub expected_status: (u16, u16),
}

/// How each xcc-agent probes the gateways it answers for, from its own cluster.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.timeoutMilliseconds) ? self.timeoutMilliseconds : 200) < (has(self.intervalMilliseconds) ? self.intervalMilliseconds : 250)",
        "message": "spec.healthCheck.timeoutMilliseconds (default 200) must be less than intervalMilliseconds (default 250)",
        "fieldPath": ".timeoutMilliseconds"
    },
    {
        "rule": "!(has(self.path) || has(self.expectedStatus) || has(self.host)) || (has(self.type) && (self.type == 'http' || self.type == 'https'))",
        "message": "spec.healthCheck.path, expectedStatus and host apply only to type http or https"
    }
]))]
pub struct HealthCheck {
    /// `tcp` (default): a TCP connection to the address and port. `http` / `https`: `GET path`,
    /// whose status must be in `expectedStatus`. `none`: no probing (as if unset).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<HealthCheckType>,
    /// Port probed on each load-balancer address. Default: the gateway Service's first port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<u16>,
    /// HTTP(S): the path asked for. Default `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^/[^\s]*$"), length(max = 256))]
    pub path: Option<String>,
    /// HTTP(S): the statuses that pass, `200` or a range `200-399` (default `200-399`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-5][0-9][0-9](-[1-5][0-9][0-9])?$"))]
    pub expected_status: Option<String>,
    /// HTTP(S): the `Host` header and TLS server name (SNI). Default: the address probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?(:[0-9]{1,5})?$"),
        length(max = 253)
    )]
    pub host: Option<String>,
    /// Time between two probes of one address, in milliseconds (default 250).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 50, max = 60000))]
    pub interval_milliseconds: Option<u32>,
    /// How long one probe may take, in milliseconds (default 200; less than the interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 59999))]
    pub timeout_milliseconds: Option<u32>,
    /// Failed probes in a row that take an address out of the answers (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub failure_threshold: Option<u32>,
    /// Passed probes in a row that bring a failed address back (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub success_threshold: Option<u32>,
}

/// How a gateway is probed.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HealthCheckType {
    /// A TCP connection.
    #[default]
    Tcp,
    /// An HTTP GET.
    Http,
    /// An HTTPS GET (the certificate is not verified).
    Https,
    /// No probing.
    None,
}

impl HealthCheck {
    /// The check the agents are sent for a gateway whose Service's first port is
    /// `service_port`: every default applied. `None` for type `none`, or when no port is known.
    pub fn resolve(
        &self,
        service_port: Option<u16>,
    ) -> Option<xcc_kube::health_check::HealthCheck> {
        use xcc_kube::health_check::ProbeKind;
        let kind = match self.kind.unwrap_or_default() {
            HealthCheckType::Tcp => ProbeKind::Tcp,
            HealthCheckType::Http => ProbeKind::Http,
            HealthCheckType::Https => ProbeKind::Https,
            HealthCheckType::None => return None,
        };
        let d = HEALTH_CHECK_DEFAULTS;
        let expected_status = self
            .expected_status
            .as_deref()
            .and_then(|s| match s.split_once('-') {
                Some((low, high)) => Some((low.parse().ok()?, high.parse().ok()?)),
                None => s.parse().ok().map(|one| (one, one)),
            })
            .unwrap_or(d.expected_status);
        let http = kind != ProbeKind::Tcp;
        Some(xcc_kube::health_check::HealthCheck {
            kind,
            port: self.port.or(service_port)?,
            path: http.then(|| self.path.clone().unwrap_or_else(|| "/".into())),
            host: self.host.clone().filter(|_| http),
            expected_status,
            interval_ms: self.interval_milliseconds.unwrap_or(d.interval_ms),
            timeout_ms: self.timeout_milliseconds.unwrap_or(d.timeout_ms),
            failure_threshold: self.failure_threshold.unwrap_or(d.failure_threshold),
            success_threshold: self.success_threshold.unwrap_or(d.success_threshold),
        })
    }
}

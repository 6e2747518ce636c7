//! The GatewayDNS API (`connectivity.tanzu.vmware.com/v1alpha1`), unchanged from XCC so that its
//! users' YAML applies as is, plus a status subresource and schema validation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Publishes the load-balancer addresses of one gateway Service, on every Cluster API cluster
/// matching `clusterSelector`, as DNS names `*.gateway.<cluster>.<namespace>.clusters.<zone>`
/// resolvable from every cluster of the namespace.
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
    /// How the gateway is reached. Only `loadBalancer`: the Service's load-balancer ingress.
    #[serde(default)]
    pub resolution_type: ResolutionType,
}

/// How a gateway Service is resolved.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum ResolutionType {
    /// The addresses (or host name) in `status.loadBalancer.ingress` of a `type: LoadBalancer`
    /// Service.
    #[default]
    #[serde(rename = "loadBalancer")]
    LoadBalancer,
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
    /// One entry per selected cluster: what is published, or why not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterGatewayStatus>,
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
    /// The load balancer has no address yet.
    NoAddress,
    /// The cluster could not be asked; its last records are kept.
    Unreachable,
    /// The trust rules refuse its kubeconfig Secret; it is not asked, its last records are kept.
    KubeconfigRejected,
    /// Another (older) GatewayDNS publishes this cluster.
    Conflict,
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
            GatewayState::NoAddress => "NoAddress",
            GatewayState::Unreachable => "Unreachable",
            GatewayState::KubeconfigRejected => "KubeconfigRejected",
            GatewayState::Conflict => "Conflict",
            GatewayState::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for GatewayState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
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
    /// Details a person can act on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Clusters of the namespace that are not sent this gateway's IPv6 addresses: no xcc-agent
    /// is announced there (ConfigMap xcc-dns/xcc-agent), and the original XCC dns-server, which
    /// may run there, cannot read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld_from: Vec<String>,
}

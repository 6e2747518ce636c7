//! The one object each agent publishes per valid export, in its own cluster: `ExportedService`
//! (`mcs.xcc.test/v1alpha1`), in the exported Service's namespace and under its name. It carries
//! everything the importing clusters need, so that a peer reads only these (and the
//! ClusterProperties), never the Services or EndpointSlices of the cluster.

use std::collections::BTreeMap;

use k8s_openapi::{api::core::v1::SessionAffinityConfig, apimachinery::pkg::apis::meta::v1::Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::api::ServicePort;

/// The API group of [`ExportedService`].
pub const GROUP: &str = "mcs.xcc.test";

/// One exported Service as its cluster publishes it to the ClusterSet.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "mcs.xcc.test",
    version = "v1alpha1",
    kind = "ExportedService",
    plural = "exportedservices",
    singular = "exportedservice",
    namespaced,
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterID"}"#,
    printcolumn = r#"{"name":"Headless","type":"boolean","jsonPath":".spec.headless"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ExportedServiceSpec {
    /// The exporting cluster's ID (its ClusterProperty `cluster.clusterset.k8s.io`).
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// The ServiceExport's creationTimestamp: the oldest export wins a conflict.
    pub exported_at: Time,
    /// The exported Service is headless (`clusterIP: None`).
    #[serde(default)]
    pub headless: bool,
    /// The exported Service's ports.
    #[serde(default)]
    pub ports: Vec<ServicePort>,
    /// `ClientIP` or `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    /// The session affinity config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// The internal traffic policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    /// The traffic distribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
    /// The Service's IP families.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_families: Vec<String>,
    /// The export's `spec.exportedLabels`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_labels: BTreeMap<String, String>,
    /// The export's `spec.exportedAnnotations`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_annotations: BTreeMap<String, String>,
    /// `flat` (pod addresses) or `gateway` (node addresses and node ports, or the load balancer).
    #[serde(default)]
    pub data_plane: String,
    /// The endpoints, one group per address family and set of ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointGroup>,
}

/// Endpoints of one address family that share their ports (one source EndpointSlice's worth).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointGroup {
    /// `IPv4`, `IPv6` or `FQDN`.
    pub address_type: String,
    /// The ports the endpoints serve.
    #[serde(default)]
    pub ports: Vec<EndpointPort>,
    /// The endpoints.
    #[serde(default)]
    pub endpoints: Vec<PublishedEndpoint>,
}

/// A port of an [`EndpointGroup`]: the Service port it serves and the number to connect to.
#[derive(
    Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPort {
    /// The Service port's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `TCP`, `UDP` or `SCTP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The application protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The Service port's number (what an import's port is matched on).
    pub service_port: i32,
    /// The number to connect to: the target port (`flat`), the node port or the load
    /// balancer's port (`gateway`).
    pub port: i32,
}

/// One endpoint.
#[derive(
    Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct PublishedEndpoint {
    /// Its addresses.
    pub addresses: Vec<String>,
    /// Its hostname (headless Services: the DNS name's first label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Ready.
    pub ready: bool,
    /// Serving.
    pub serving: bool,
    /// Terminating.
    pub terminating: bool,
}

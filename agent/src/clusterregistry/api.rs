//! The cluster-registry API (`clusterregistry.k8s.cisco.com/v1alpha1`), unchanged so that its
//! users' YAML applies as is: Cluster, ClusterFeature and ResourceSyncRule, all cluster-scoped.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelectorRequirement};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "clusterregistry.k8s.cisco.com";

/// A member of the cluster group. The one whose `clusterID` is the UID of this cluster's
/// `kube-system` namespace is the local cluster; the others are peers, read through the
/// kubeconfig of `authInfo.secretRef`.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "clusterregistry.k8s.cisco.com",
    version = "v1alpha1",
    kind = "Cluster",
    plural = "clusters",
    singular = "cluster",
    status = "ClusterStatus",
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".spec.clusterID"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".status.type"}"#,
    printcolumn = r#"{"name":"Synced","type":"string","jsonPath":".status.conditions[?(@.type==\"ClustersSynced\")].status"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.version","priority":1}"#,
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".status.provider","priority":1}"#,
    printcolumn = r#"{"name":"Distribution","type":"string","jsonPath":".status.distribution","priority":1}"#,
    printcolumn = r#"{"name":"Region","type":"string","jsonPath":".status.locality.region","priority":1}"#,
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".status.message","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// UID of the cluster's `kube-system` namespace.
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// Where the kubeconfig to read this cluster is (a Secret of type
    /// `k8s.cisco.com/cluster-registry-secret`, key `kubeconfig`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_info: Option<AuthInfo>,
    /// API server endpoints, per client network.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubernetes_api_endpoints: Vec<ApiEndpoint>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuthInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<NamespacedName>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct NamespacedName {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_network: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_address: Option<String>,
    /// PEM, base64-encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
}

/// What the agent knows about a Cluster.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// `Ready`, `Failed`, `Disabled`, `MissingAuthInfo` or `InvalidAuthInfo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `Local` or `Peer`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Why the state is what it is, and what to do about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality: Option<Locality>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `LocalCluster`, `LocalConflict`, `Ready` and `ClustersSynced`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Locality {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
}

/// A feature this cluster offers; ResourceSyncRules with `clusterFeatureMatch` only read from
/// clusters that have a matching ClusterFeature.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "clusterregistry.k8s.cisco.com",
    version = "v1alpha1",
    kind = "ClusterFeature",
    plural = "clusterfeatures",
    singular = "clusterfeature",
    shortname = "cf",
    status = "RuleStatus",
    printcolumn = r#"{"name":"Feature","type":"string","jsonPath":".spec.featureName"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterFeatureSpec {
    pub feature_name: String,
}

/// Copies the objects of one kind that match from the peers into this cluster.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "clusterregistry.k8s.cisco.com",
    version = "v1alpha1",
    kind = "ResourceSyncRule",
    plural = "resourcesyncrules",
    singular = "resourcesyncrule",
    shortname = "rsr",
    status = "RuleStatus",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.groupVersionKind.kind"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSyncRuleSpec {
    pub group_version_kind: GroupVersionKind,
    /// Read only from clusters with a ClusterFeature matching one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_feature_match: Vec<ClusterFeatureMatch>,
    /// An object is synced when any rule matches it; the first matching rule's mutations apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<SyncRule>,
}

#[derive(
    Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub struct GroupVersionKind {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    pub version: String,
    pub kind: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterFeatureMatch {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub feature_name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct SyncRule {
    /// ANY entry matching is enough; no entry matches everything.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<Match>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutations: Option<Mutations>,
}

/// One match entry: all of its fields must match.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Match {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_key: Option<ObjectKey>,
    /// The same as `objectKey.name`: the published examples indent `name` and `namespace` one
    /// level too little, and are meant as an object key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The same as `objectKey.namespace` (see `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The object's namespace is one of these (ignored for cluster-scoped kinds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Label selectors; the object must match all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<LabelSelector>,
    /// Annotation selectors; the object must match all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub annotations: Vec<AnnotationSelector>,
    /// JSONPath (RFC 9535) queries and the value each must find.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ContentSelector>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct ObjectKey {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct ContentSelector {
    /// A JSONPath query such as `$.spec.type` (a leading `.` is read as `$.`).
    pub key: String,
    /// What the query must find (any node equal to it).
    #[schemars(schema_with = "any_value")]
    pub value: serde_json::Value,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Mutations {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<MapMutations>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<MapMutations>,
    /// Write the copy as this kind instead (another version of the resource, or a kind with the
    /// same fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_version_kind: Option<GroupVersionKind>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<Override>,
    /// Copy `status` too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sync_status: bool,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct MapMutations {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// A change to the copy at `path` (`/spec/replicas`; `~1` for `/` and `~0` for `~` in keys).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Override {
    /// `replace` (sets the value, creating missing maps) or `remove`.
    #[serde(rename = "type")]
    pub type_: String,
    pub path: String,
    /// The value to set, as a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Parse `value` as YAML (`3`, `true`, `{a: b}`) instead of taking it as a string.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parse_value: bool,
}

/// Status of a ResourceSyncRule or ClusterFeature.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuleStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: whether the rule can work, and if not why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

fn any_value(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

xcc_kube::status_enum! {
    /// A Cluster's `status.state`, in cluster-registry's words.
    pub enum ClusterState {
        /// The local cluster, or a peer that answers with its `clusterID`.
        Ready = "Ready",
        /// The peer's API server does not answer.
        Failed = "Failed",
        /// Annotation `cluster-disabled`: nothing is read from it.
        Disabled = "Disabled",
        /// No Secret to read the peer with.
        MissingAuthInfo = "MissingAuthInfo",
        /// The Secret gives no usable client, or reaches another cluster.
        InvalidAuthInfo = "InvalidAuthInfo",
    }
}

xcc_kube::status_enum! {
    /// A Cluster's `status.type`.
    pub enum ClusterType {
        Local = "Local",
        Peer = "Peer",
    }
}

xcc_kube::status_enum! {
    /// Reasons of a Cluster's conditions.
    pub enum ClusterReason {
        // LocalCluster.
        LocalCluster = "LocalCluster",
        PeerCluster = "PeerCluster",
        // LocalConflict.
        LocalConflict = "LocalConflict",
        NoConflict = "NoConflict",
        // Ready: the state, or a finer cause.
        Ready = "Ready",
        Failed = "Failed",
        Disabled = "Disabled",
        MissingAuthInfo = "MissingAuthInfo",
        InvalidAuthInfo = "InvalidAuthInfo",
        /// The trust rules refuse the peer's kubeconfig (also the reason of a Warning Event).
        KubeconfigRejected = "KubeconfigRejected",
        // ClustersSynced.
        Synced = "Synced",
        NotSynced = "NotSynced",
    }
}

impl From<&ClusterState> for ClusterReason {
    /// The Ready reason that says `state`.
    fn from(state: &ClusterState) -> ClusterReason {
        ClusterReason::from(state.as_str())
    }
}

xcc_kube::status_enum! {
    /// Reasons of a ResourceSyncRule's Ready condition.
    pub enum RuleReason {
        Ready = "Ready",
        /// The API server serves no such kind.
        UnknownKind = "UnknownKind",
        /// This agent or a peer kubeconfig may not read or write the kind.
        MissingPermission = "MissingPermission",
        InvalidSelector = "InvalidSelector",
        InvalidJsonPath = "InvalidJSONPath",
        InvalidOverride = "InvalidOverride",
        InvalidTemplate = "InvalidTemplate",
    }
}

//! plumber's API (`plumber.jnytnai0613.github.io/v1`), unchanged so that its users' YAML (the
//! `replicator-sample`) applies as is, plus standard `conditions` with `observedGeneration`, and a
//! generic `resources[]` next to the four legacy kinds.
//!
//! The original embeds Kubernetes apply configurations (`DeploymentSpecApplyConfiguration`, ...):
//! every field optional, the selector filled in by the controller. The schema here keeps them
//! open objects (`x-kubernetes-preserve-unknown-fields`) so that a partial spec such as the
//! sample's Deployment without `selector` is accepted; the API server checks each object when
//! it is applied, and its refusal lands in the status.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Replicates a namespace and an app's ConfigMap, Deployment, Service and Ingress (and any
/// `resources[]`) to this cluster and to every target cluster, with server-side apply.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "plumber.jnytnai0613.github.io",
    version = "v1",
    kind = "Replicator",
    plural = "replicators",
    singular = "replicator",
    shortname = "rep",
    status = "ReplicatorStatus",
    printcolumn = r#"{"name":"SYNCED","type":"string","jsonPath":".status.synced"}"#,
    printcolumn = r#"{"name":"NAMESPACE","type":"string","priority":1,"jsonPath":".spec.replicationNamespace"}"#,
    printcolumn = r#"{"name":"READY","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"REASON","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatorSpec {
    /// ClusterDetector names (`<cluster>.<user>`) or context names of the kubeconfig Secret to
    /// replicate to, besides this cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_cluster: Vec<String>,
    /// The namespace of every replicated object; created where missing.
    pub replication_namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_name: Option<String>,
    /// A Deployment spec (apply configuration): selector and template labels are filled in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "open_object")]
    pub deployment_spec: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_data: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// A Service spec (apply configuration): the selector is filled in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "open_object")]
    pub service_spec: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_name: Option<String>,
    /// An Ingress spec (apply configuration); with `ingressSecureEnabled` its `tls` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "open_object")]
    pub ingress_spec: Option<serde_json::Value>,
    /// Terminate TLS at the Ingress with generated certificates and require client
    /// certificates: Secrets `ca-secret` (CA, server certificate and key) and `cli-secret`
    /// (client certificate and key), the Ingress's `tls` and nginx client-auth annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_secure_enabled: Option<bool>,
    /// Any other objects to replicate, as manifests (`apiVersion`, `kind`, `metadata.name`, and
    /// the rest); a namespaced object goes into `replicationNamespace`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<Manifest>,
}

/// One manifest of `resources[]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
pub struct Manifest(#[schemars(schema_with = "open_object")] pub serde_json::Value);

/// Status of a Replicator, as the original writes it (`applied`, `synced`), plus conditions.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatorStatus {
    /// One entry per object per cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<ApplyStatus>,
    /// `"synced"` when every object is applied on every cluster, else `"not synced"` (the
    /// original's strings; printer column SYNCED).
    #[serde(default)]
    pub synced: SyncState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: synced, and if not, why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What became of one object on one cluster.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApplyStatus {
    pub cluster: String,
    pub kind: String,
    pub name: String,
    /// `applied`; `existing` (a namespace that was there already: used, not owned);
    /// `Unreachable`; `Conflict` (someone else's object of that name, left as is);
    /// `Failed`; `LeftBehind` (on deletion, not removable from a silent cluster).
    #[schemars(with = "String")]
    pub apply_status: ApplyState,
    /// Why, when not applied (bounded text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One context of plumber's kubeconfig Secret, and whether its cluster answers.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "plumber.jnytnai0613.github.io",
    version = "v1",
    kind = "ClusterDetector",
    plural = "clusterdetectors",
    singular = "clusterdetector",
    shortname = "cd",
    namespaced,
    status = "ClusterDetectorStatus",
    printcolumn = r#"{"name":"CONTEXT","type":"string","jsonPath":".spec.context"}"#,
    printcolumn = r#"{"name":"CLUSTER","type":"string","jsonPath":".spec.cluster"}"#,
    printcolumn = r#"{"name":"USER","type":"string","jsonPath":".spec.user"}"#,
    printcolumn = r#"{"name":"CLUSTERSTATUS","type":"string","jsonPath":".status.clusterstatus"}"#,
    printcolumn = r#"{"name":"REASON","type":"string","priority":1,"jsonPath":".status.reason"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct ClusterDetectorSpec {
    pub context: String,
    pub cluster: String,
    pub user: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct ClusterDetectorStatus {
    /// `RUNNING` or `UNKNOWN`, as the original writes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusterstatus: Option<ClusterState>,
    /// Why not `RUNNING` (bounded text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A Replicator's `status.synced`: the original's strings. Reads what older versions wrote (a
/// boolean) and anything else as [`SyncState::Unknown`] rather than failing the whole object.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub enum SyncState {
    #[serde(rename = "synced")]
    Synced,
    #[default]
    #[serde(rename = "not synced")]
    NotSynced,
    /// A value this version does not know (never written by it).
    #[serde(rename = "unknown")]
    Unknown,
}

impl SyncState {
    pub fn from_bool(synced: bool) -> SyncState {
        if synced {
            SyncState::Synced
        } else {
            SyncState::NotSynced
        }
    }
}

impl<'de> Deserialize<'de> for SyncState {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(s) if s == "synced" => SyncState::Synced,
            serde_json::Value::String(s) if s == "not synced" => SyncState::NotSynced,
            // xcc before 0.2 wrote a boolean.
            serde_json::Value::Bool(b) => SyncState::from_bool(b),
            _ => SyncState::Unknown,
        })
    }
}

impl JsonSchema for SyncState {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SyncState".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // A plain string, as the original's schema: older objects keep validating.
        schemars::json_schema!({ "type": "string", "description": "`synced` or `not synced`." })
    }
}

/// A ClusterDetector's `status.clusterstatus`: the original's upper-case values. Older xcc's
/// `Running`/`Unknown` read as the same states; anything else as [`ClusterState::Unknown`].
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ClusterState {
    #[serde(rename = "RUNNING", alias = "Running")]
    Running,
    #[serde(rename = "UNKNOWN", alias = "Unknown", other)]
    Unknown,
}

impl JsonSchema for ClusterState {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ClusterState".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "description": "`RUNNING` or `UNKNOWN`." })
    }
}

fn open_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

xcc_kube::status_enum! {
    /// An `applyStatus`: what became of one object on one cluster.
    pub enum ApplyState {
        Applied = "applied",
        /// A namespace that was there already: used, not owned.
        Existing = "existing",
        Unreachable = "Unreachable",
        /// Someone else's object of that name, left as is.
        Conflict = "Conflict",
        Failed = "Failed",
        /// On deletion, not removable from a silent cluster.
        LeftBehind = "LeftBehind",
    }
}

xcc_kube::status_enum! {
    /// Reasons of a Replicator's Ready condition.
    pub enum Reason {
        Synced = "Synced",
        Unreachable = "Unreachable",
        Conflict = "Conflict",
        ApplyFailed = "ApplyFailed",
        InvalidSpec = "InvalidSpec",
        LeftBehind = "LeftBehind",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_values_are_the_originals_and_older_ones_still_read() {
        let json = |v: &SyncState| serde_json::to_value(v).unwrap();
        assert_eq!(json(&SyncState::Synced), "synced");
        assert_eq!(json(&SyncState::NotSynced), "not synced");
        let read = |v: serde_json::Value| serde_json::from_value::<SyncState>(v).unwrap();
        assert_eq!(read("synced".into()), SyncState::Synced);
        assert_eq!(read("not synced".into()), SyncState::NotSynced);
        assert_eq!(read(true.into()), SyncState::Synced);
        assert_eq!(read(false.into()), SyncState::NotSynced);
        assert_eq!(read("half".into()), SyncState::Unknown);
        assert_eq!(read(serde_json::json!(3)), SyncState::Unknown);

        let state = |v: &str| serde_json::from_value::<ClusterState>(v.into()).unwrap();
        assert_eq!(
            serde_json::to_value(ClusterState::Running).unwrap(),
            "RUNNING"
        );
        assert_eq!(
            serde_json::to_value(ClusterState::Unknown).unwrap(),
            "UNKNOWN"
        );
        assert_eq!(state("RUNNING"), ClusterState::Running);
        assert_eq!(state("Running"), ClusterState::Running);
        assert_eq!(state("Unknown"), ClusterState::Unknown);
        assert_eq!(state("DOWN"), ClusterState::Unknown);

        // A whole status as the previous version stored it still reads.
        let status: ReplicatorStatus =
            serde_json::from_value(serde_json::json!({"synced": true, "applied": []})).unwrap();
        assert_eq!(status.synced, SyncState::Synced);
    }
}

//! The Services Toolkit replication API (`replication.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1`),
//! unchanged so that its users' YAML applies as is, plus a status with `observedGeneration` and a
//! `Ready` condition.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Marks a Secret of its namespace (on the service cluster) for replication, and lets the named
/// ServiceAccount of its namespace read exactly that Secret.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "replication.apiresources.multicluster.x-tanzu.vmware.com",
    version = "v1alpha1",
    kind = "SecretExport",
    plural = "secretexports",
    singular = "secretexport",
    namespaced,
    status = "ReplicationStatus",
    printcolumn = r#"{"name":"Secret","type":"string","jsonPath":".spec.secret.name"}"#,
    printcolumn = r#"{"name":"Service Account","type":"string","jsonPath":".spec.serviceAccount.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SecretExportSpec {
    /// The Secret of this namespace to replicate.
    pub secret: LocalRef,
    /// The ServiceAccount of this namespace that workload clusters use to read the Secret.
    pub service_account: LocalRef,
}

/// Copies a Secret of the same namespace on the service cluster into this namespace, and keeps
/// the copy current.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "replication.apiresources.multicluster.x-tanzu.vmware.com",
    version = "v1alpha1",
    kind = "SecretImport",
    plural = "secretimports",
    singular = "secretimport",
    namespaced,
    status = "ReplicationStatus",
    printcolumn = r#"{"name":"Secret","type":"string","jsonPath":".spec.secret.name"}"#,
    printcolumn = r#"{"name":"Remote Kubeconfig","type":"string","jsonPath":".spec.remoteKubeconfig.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SecretImportSpec {
    /// The Secret to copy: its name on the service cluster and here.
    pub secret: LocalRef,
    /// A Secret of this namespace holding a kubeconfig for the service cluster (data key
    /// `kubeconfig`, `value` or `config`).
    pub remote_kubeconfig: LocalRef,
}

/// An object of the same namespace, by name.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct LocalRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// What the agent did with a SecretExport or SecretImport.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, with reason `Exported` / `Replicated` when true, otherwise why not:
    /// `SecretNotFound`, `Forbidden`, `RemoteUnreachable`, `Conflict`, `KubeconfigMissing`,
    /// `KubeconfigInvalid`, `ClientFailed` or `WriteFailed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Watches the instances of one kind on this (the workload) cluster; in every namespace that a
/// ResourceImportMonitorBinding enables, each Secret named at one of `secretPaths` of an instance
/// gets a SecretImport `<instance>.<path>`.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "replication.apiresources.multicluster.x-tanzu.vmware.com",
    version = "v1alpha1",
    kind = "ClusterResourceImportMonitor",
    plural = "clusterresourceimportmonitors",
    singular = "clusterresourceimportmonitor",
    status = "ReplicationStatus",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.resource.kind"}"#,
    printcolumn = r#"{"name":"Group","type":"string","jsonPath":".spec.resource.group"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterResourceImportMonitorSpec {
    /// The kind of the instances owning the Secrets.
    pub resource: MonitoredResource,
    /// Where an instance names a Secret of its namespace (JSONPath, e.g. `.status.binding.name`).
    pub secret_paths: Vec<String>,
}

/// Watches the instances of one kind on this (the service) cluster; in every namespace that a
/// ResourceExportMonitorBinding enables, each Secret named at one of `secretPaths` of an instance
/// gets a SecretExport `<instance>.<path>`.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "replication.apiresources.multicluster.x-tanzu.vmware.com",
    version = "v1alpha1",
    kind = "ClusterResourceExportMonitor",
    plural = "clusterresourceexportmonitors",
    singular = "clusterresourceexportmonitor",
    status = "ReplicationStatus",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.resource.kind"}"#,
    printcolumn = r#"{"name":"Group","type":"string","jsonPath":".spec.resource.group"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterResourceExportMonitorSpec {
    /// The kind of the instances owning the Secrets.
    pub resource: MonitoredResource,
    /// Where an instance names a Secret of its namespace (JSONPath, e.g. `.status.binding.name`).
    pub secret_paths: Vec<String>,
}

/// A kind, by group, version and kind (`group` empty for the core group).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct MonitoredResource {
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// Enables a ClusterResourceImportMonitor in this namespace, importing through the kubeconfig in
/// `remoteKubeconfig`.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "replication.apiresources.multicluster.x-tanzu.vmware.com",
    version = "v1alpha1",
    kind = "ResourceImportMonitorBinding",
    plural = "resourceimportmonitorbindings",
    singular = "resourceimportmonitorbinding",
    namespaced,
    status = "ReplicationStatus",
    printcolumn = r#"{"name":"Monitor","type":"string","jsonPath":".spec.monitorRef.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceImportMonitorBindingSpec {
    /// The ClusterResourceImportMonitor enabled here.
    pub monitor_ref: LocalRef,
    /// A Secret of this namespace holding a kubeconfig for the service cluster; every generated
    /// SecretImport uses it.
    pub remote_kubeconfig: LocalRef,
}

/// Enables a ClusterResourceExportMonitor in this namespace, exporting to `serviceAccount`.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "replication.apiresources.multicluster.x-tanzu.vmware.com",
    version = "v1alpha1",
    kind = "ResourceExportMonitorBinding",
    plural = "resourceexportmonitorbindings",
    singular = "resourceexportmonitorbinding",
    namespaced,
    status = "ReplicationStatus",
    printcolumn = r#"{"name":"Monitor","type":"string","jsonPath":".spec.monitorRef.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceExportMonitorBindingSpec {
    /// The ClusterResourceExportMonitor enabled here.
    pub monitor_ref: LocalRef,
    /// The ServiceAccount of this namespace that every generated SecretExport grants access to.
    pub service_account: LocalRef,
}

xcc_kube::status_enum! {
    /// Reasons of the Ready condition of every object of this API.
    pub enum Reason {
        Exported = "Exported",
        Replicated = "Replicated",
        SecretNotFound = "SecretNotFound",
        Forbidden = "Forbidden",
        RemoteUnreachable = "RemoteUnreachable",
        Conflict = "Conflict",
        KubeconfigMissing = "KubeconfigMissing",
        /// The trust rules refuse the kubeconfig (exec, a file path, ...): nothing is read.
        KubeconfigRejected = "KubeconfigRejected",
        /// The other reasons a kubeconfig Secret gives no client
        /// ([`xcc_kube::KubeconfigError::reason`]).
        KubeconfigInvalid = "KubeconfigInvalid",
        KubeconfigUnreadable = "KubeconfigUnreadable",
        NoKubeconfig = "NoKubeconfig",
        ClientFailed = "ClientFailed",
        WriteFailed = "WriteFailed",
        /// A monitor's labels and secretPaths are valid.
        Valid = "Valid",
        InvalidMonitor = "InvalidMonitor",
        /// A monitor binding's objects are in place.
        Synced = "Synced",
        MonitorNotFound = "MonitorNotFound",
        ResourceNotFound = "ResourceNotFound",
    }
}

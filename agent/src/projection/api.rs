//! The Services Toolkit projection API (`projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1`),
//! with the reference's kinds, fields, scopes, status fields and condition types, so that its
//! users' YAML applies as is.
//!
//! On the service cluster: [`UpstreamClusterLink`] and [`APIExportRoleBinding`]. On the workload
//! cluster: [`DownstreamClusterLink`], [`ClusterAPIGroupImport`] and [`APIResourceImport`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// On the service cluster: manages the ServiceAccount a workload cluster acts as.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "projection.apiresources.multicluster.x-tanzu.vmware.com",
    version = "v1alpha1",
    kind = "UpstreamClusterLink",
    plural = "upstreamclusterlinks",
    singular = "upstreamclusterlink",
    namespaced,
    status = "UpstreamClusterLinkStatus",
    printcolumn = r#"{"name":"Downstream","type":"string","jsonPath":".spec.downstream.name"}"#,
    printcolumn = r#"{"name":"Service Account","type":"string","jsonPath":".status.serviceAccount.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamClusterLinkSpec {
    /// The workload cluster this link serves.
    pub downstream: NamedCluster,
}

/// A cluster, by name (used for debugging).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct NamedCluster {
    pub name: String,
}

/// What the agent made for an UpstreamClusterLink.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamClusterLinkStatus {
    /// The ServiceAccount of the link's namespace the workload cluster acts as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ObjectName>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` and `ServiceAccountReady`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// An object by name.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct ObjectName {
    pub name: String,
}

/// An object by name and namespace.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct NamespacedName {
    pub name: String,
    pub namespace: String,
}

/// On the service cluster: binds a ClusterRole to the ServiceAccount of an UpstreamClusterLink.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "projection.apiresources.multicluster.x-tanzu.vmware.com",
    version = "v1alpha1",
    kind = "APIExportRoleBinding",
    plural = "apiexportrolebindings",
    singular = "apiexportrolebinding",
    status = "ProjectionStatus",
    printcolumn = r#"{"name":"Link","type":"string","jsonPath":".spec.upstreamClusterLinkRef.name"}"#,
    printcolumn = r#"{"name":"Link Namespace","type":"string","jsonPath":".spec.upstreamClusterLinkRef.namespace"}"#,
    printcolumn = r#"{"name":"Cluster Role","type":"string","jsonPath":".spec.clusterRoleRef.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct APIExportRoleBindingSpec {
    /// The UpstreamClusterLink whose ServiceAccount gets the role.
    pub upstream_cluster_link_ref: NamespacedName,
    /// The ClusterRole to bind.
    pub cluster_role_ref: ObjectName,
}

/// `observedGeneration` and conditions.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProjectionStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// On the workload cluster: the upstream (service) cluster and the API proxy serving its APIs.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "projection.apiresources.multicluster.x-tanzu.vmware.com",
    version = "v1alpha1",
    kind = "DownstreamClusterLink",
    plural = "downstreamclusterlinks",
    singular = "downstreamclusterlink",
    namespaced,
    status = "DownstreamClusterLinkStatus",
    printcolumn = r#"{"name":"Upstream","type":"string","jsonPath":".spec.upstream.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DownstreamClusterLinkSpec {
    /// The API proxy.
    pub proxy: ProxySpec,
    /// The service cluster.
    pub upstream: UpstreamSpec,
}

/// The API proxy's serving certificate.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct ProxySpec {
    /// The TLS Secret of the proxy.
    #[serde(rename = "TLS")]
    pub tls: SecretName,
}

/// The service cluster: its name and a Secret holding a kubeconfig for it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct UpstreamSpec {
    pub kubeconfig: SecretName,
    pub name: String,
}

/// A Secret of the same namespace.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretName {
    pub secret_name: String,
}

/// The API proxy as served.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DownstreamClusterLinkStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyStatus>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `ServiceAccountReady`, `ProxyDeploymentReady`, `ProxyServiceReady`,
    /// `ProxyConfigMapReady`, `ProxyServiceAccountReady`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The CA and Service of the API proxy.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProxyStatus {
    /// Base64-encoded CA of the API proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_reference: Option<ServiceReference>,
}

/// A Service and port.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct ServiceReference {
    pub name: String,
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// On the workload cluster (cluster-scoped, one per API group): imports an API group through a
/// DownstreamClusterLink.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "projection.apiresources.multicluster.x-tanzu.vmware.com",
    version = "v1alpha1",
    kind = "ClusterAPIGroupImport",
    plural = "clusterapigroupimports",
    singular = "clusterapigroupimport",
    status = "ProjectionStatus",
    printcolumn = r#"{"name":"Group","type":"string","jsonPath":".spec.group"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAPIGroupImportSpec {
    /// The DownstreamClusterLink to import through.
    pub downstream_cluster_link_ref: NamespacedName,
    /// The API group to project.
    pub group: String,
    /// The version to project; every version discovered upstream when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// On the workload cluster: the resources of an imported group available in this namespace.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "projection.apiresources.multicluster.x-tanzu.vmware.com",
    version = "v1alpha1",
    kind = "APIResourceImport",
    plural = "apiresourceimports",
    singular = "apiresourceimport",
    namespaced,
    status = "ProjectionStatus",
    printcolumn = r#"{"name":"Import","type":"string","jsonPath":".spec.clusterApiImportRef.name"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct APIResourceImportSpec {
    /// The ClusterAPIGroupImport whose group the resources belong to.
    pub cluster_api_import_ref: ObjectName,
    /// The resources (plural names) available in this namespace.
    pub resources: Vec<String>,
}

xcc_kube::status_enum! {
    /// Reasons of the conditions of every object of this API.
    pub enum Reason {
        // UpstreamClusterLink.
        Linked = "Linked",
        ServiceAccountCreated = "ServiceAccountCreated",
        NameTooLong = "NameTooLong",
        ServiceAccountConflict = "ServiceAccountConflict",
        ServiceAccountNotReady = "ServiceAccountNotReady",
        SecretConflict = "SecretConflict",
        ClusterCaNotFound = "ClusterCANotFound",
        TokenRequestFailed = "TokenRequestFailed",
        RoleConflict = "RoleConflict",
        NoServerUrl = "NoServerURL",
        // APIExportRoleBinding.
        Bound = "Bound",
        UpstreamClusterLinkNotFound = "UpstreamClusterLinkNotFound",
        UpstreamClusterLinkNotReady = "UpstreamClusterLinkNotReady",
        ClusterRoleNotFound = "ClusterRoleNotFound",
        Conflict = "Conflict",
        BindFailed = "BindFailed",
        // DownstreamClusterLink, by condition type.
        Ready = "Ready",
        NotReady = "NotReady",
        Authenticated = "Authenticated",
        KubeconfigSecretNotFound = "KubeconfigSecretNotFound",
        KubeconfigRejected = "KubeconfigRejected",
        UpstreamRefused = "UpstreamRefused",
        UpstreamUnreachable = "UpstreamUnreachable",
        Serving = "Serving",
        NotListening = "NotListening",
        TokenRenewed = "TokenRenewed",
        TokenNotRenewed = "TokenNotRenewed",
        TlsSecretInvalid = "TLSSecretInvalid",
        TlsSecretConflict = "TLSSecretConflict",
        ServiceApplied = "ServiceApplied",
        ServiceConflict = "ServiceConflict",
        FrontProxySettingsRead = "FrontProxySettingsRead",
        FrontProxySettingsUnusable = "FrontProxySettingsUnusable",
        MayDelegate = "MayDelegate",
        MayNotDelegate = "MayNotDelegate",
        // ClusterAPIGroupImport and APIResourceImport.
        Available = "Available",
        ApiServiceNotAvailable = "APIServiceNotAvailable",
        DownstreamClusterLinkNotFound = "DownstreamClusterLinkNotFound",
        DownstreamClusterLinkNotReady = "DownstreamClusterLinkNotReady",
        GroupServedLocally = "GroupServedLocally",
        GroupNotFoundUpstream = "GroupNotFoundUpstream",
        Reconciled = "Reconciled",
        ClusterApiGroupImportNotFound = "ClusterAPIGroupImportNotFound",
        ClusterApiGroupImportNotReady = "ClusterAPIGroupImportNotReady",
        ResourcesReady = "ResourcesReady",
        ResourcesNotFound = "ResourcesNotFound",
    }
}

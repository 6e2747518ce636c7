//! The Multi-Cluster Services API as users write it: `multicluster.x-k8s.io/v1beta1`
//! ServiceExport and ServiceImport (KEP-1645, the schema of `sigs.k8s.io/mcs-api` v0.5.2), and the
//! About API's ClusterProperty (`about.k8s.io/v1alpha1`, KEP-2149) that names each cluster.
//!
//! Only `v1beta1` is served: the upstream CRDs also serve `v1alpha1` (same fields), which no
//! conversion is needed for; a user of `v1alpha1` objects switches the `apiVersion`.

use k8s_openapi::{
    api::core::v1::SessionAffinityConfig,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta},
};
use kube::{CustomResource, CustomResourceExt as _};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of ServiceExport and ServiceImport.
pub const GROUP: &str = "multicluster.x-k8s.io";
/// Label on every EndpointSlice of an imported service: the service's name.
pub const LABEL_SERVICE_NAME: &str = "multicluster.kubernetes.io/service-name";
/// Label on every EndpointSlice of an imported service: the ID of the cluster its endpoints are in.
pub const LABEL_SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";
/// The ClusterProperty holding this cluster's ID, unique in its ClusterSet.
pub const CLUSTER_ID_PROPERTY: &str = "cluster.clusterset.k8s.io";
/// The ClusterProperty holding the name of the ClusterSet this cluster belongs to.
pub const CLUSTERSET_PROPERTY: &str = "clusterset.k8s.io";

/// `ServiceExport` condition types (as `sigs.k8s.io/mcs-api` names them, and xcc's `PeersRead`).
pub mod conditions {
    /// Whether the export is valid: the Service exists and is of a type that can be exported.
    pub const VALID_CONDITION: &str = "Valid";
    /// Whether the export is in use by the ClusterSet.
    pub const READY_CONDITION: &str = "Ready";
    /// Whether this export disagrees with another cluster's export of the same service.
    pub const CONFLICT_CONDITION: &str = "Conflict";
    /// Whether every peer of the cluster group is read (xcc's own).
    pub const PEERS_READ_CONDITION: &str = "PeersRead";
}

xcc_kube::status_enum! {
    /// Reasons of the `ServiceExport` conditions (as `sigs.k8s.io/mcs-api` names them, and xcc's
    /// for `PeersRead`).
    pub enum ExportReason {
        /// `Valid=True`.
        Valid = "Valid",
        /// `Valid=False`: no Service of that name in the namespace.
        NoService = "NoService",
        /// `Valid=False`: an ExternalName Service cannot be exported.
        InvalidServiceType = "InvalidServiceType",
        /// `Ready=True`.
        Ready = "Ready",
        /// `Ready=True`: exported, its publication not yet seen.
        Exported = "Exported",
        /// `Ready=False`: waiting.
        Pending = "Pending",
        /// `Ready=False`: failed.
        Failed = "Failed",
        /// `Conflict=True`: the ports differ.
        PortConflict = "PortConflict",
        /// `Conflict=True`: one export is headless, another not.
        TypeConflict = "TypeConflict",
        /// `Conflict=True`: session affinity differs.
        SessionAffinityConflict = "SessionAffinityConflict",
        /// `Conflict=True`: session affinity config differs.
        SessionAffinityConfigConflict = "SessionAffinityConfigConflict",
        /// `Conflict=True`: the exported labels differ.
        LabelsConflict = "LabelsConflict",
        /// `Conflict=True`: the exported annotations differ.
        AnnotationsConflict = "AnnotationsConflict",
        /// `Conflict=True`: internal traffic policy differs.
        InternalTrafficPolicyConflict = "InternalTrafficPolicyConflict",
        /// `Conflict=True`: traffic distribution differs.
        TrafficDistributionConflict = "TrafficDistributionConflict",
        /// `Conflict=True`: IP families differ.
        IPFamilyConflict = "IPFamilyConflict",
        /// `Conflict=False`.
        NoConflicts = "NoConflicts",
        /// `PeersRead=True`.
        AllPeersRead = "AllPeersRead",
        /// `PeersRead=False`: a peer's kubeconfig is refused or missing.
        PeerRefused = "PeerRefused",
    }
}

/// A ServiceExport: the Service of the same name and namespace is exported to the ClusterSet.
/// Its `spec` is optional (most exports have none), so the type is written out rather than derived;
/// [`service_export_crd`] gives its CRD.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExport {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What to carry over to the ServiceImport.
    #[serde(default)]
    pub spec: ServiceExportSpec,
    /// What the agent says about the export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ServiceExportStatus>,
}

impl kube::Resource for ServiceExport {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "ServiceExport".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1beta1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "serviceexports".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The CRD schema of [`ServiceExport`] (the derive needs a required `spec`; the CRD written from
/// it is made optional again by [`service_export_crd`]).
mod export_schema {
    use super::{Deserialize, JsonSchema, Serialize, ServiceExportStatus};
    use kube::CustomResource;
    use std::collections::BTreeMap;
    /// What a ServiceExport carries over to the ServiceImport.
    #[derive(
        CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq,
    )]
    #[kube(
        group = "multicluster.x-k8s.io",
        version = "v1beta1",
        kind = "ServiceExport",
        plural = "serviceexports",
        singular = "serviceexport",
        shortname = "svcex",
        shortname = "svcexport",
        namespaced,
        status = "ServiceExportStatus",
        printcolumn = r#"{"name":"Valid","type":"string","jsonPath":".status.conditions[?(@.type==\"Valid\")].status"}"#,
        printcolumn = r#"{"name":"Conflict","type":"string","jsonPath":".status.conditions[?(@.type==\"Conflict\")].status"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )]
    #[serde(rename_all = "camelCase")]
    pub struct ServiceExportSpec {
        /// Annotations copied to the ServiceImport.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub exported_annotations: BTreeMap<String, String>,
        /// Labels copied to the ServiceImport.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub exported_labels: BTreeMap<String, String>,
    }
}

pub use export_schema::ServiceExportSpec;

/// The ServiceExport CRD: `spec` optional, as upstream.
pub fn service_export_crd() -> CustomResourceDefinition {
    let mut crd = export_schema::ServiceExport::crd();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            && let Some(required) = schema.required.as_mut()
        {
            required.retain(|r| r != "spec");
            if required.is_empty() {
                schema.required = None;
            }
        }
    }
    crd
}

/// What the agent says about a ServiceExport: `Valid`, `Ready` and `Conflict` conditions, each
/// with `observedGeneration`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportStatus {
    /// The conditions, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A service of the ClusterSet as this cluster imports it: written by the agent in every member
/// cluster, in the namespace of the exported Service, under its name.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1beta1",
    kind = "ServiceImport",
    plural = "serviceimports",
    singular = "serviceimport",
    shortname = "svcim",
    shortname = "svcimport",
    namespaced,
    status = "ServiceImportStatus",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"IP","type":"string","jsonPath":".spec.ips"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportSpec {
    /// The union of the exported services' ports.
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<ServicePort>,
    /// The ClusterSet IPs, one per IP family, in the order of `ipFamilies` (none when headless).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub ips: Vec<String>,
    /// `ClusterSetIP` or `Headless`.
    #[serde(rename = "type")]
    pub type_: ServiceImportType,
    /// `ClientIP` or `None`, from the exported service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    /// The exported service's session affinity config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// `IPv4` and/or `IPv6`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub ip_families: Vec<String>,
    /// The exported service's internal traffic policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    /// The exported service's traffic distribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
}

/// How a ServiceImport is reached.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum ServiceImportType {
    /// A virtual IP per family (the derived Service's ClusterIPs).
    #[default]
    ClusterSetIP,
    /// No virtual IP: DNS names the endpoints.
    Headless,
}

/// One port of a ServiceImport.
#[derive(
    Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// The port's name (a DNS label), unique in the import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `TCP`, `UDP` or `SCTP` (default `TCP`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The application protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The port number.
    pub port: i32,
}

/// Which clusters back a ServiceImport.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportStatus {
    /// The clusters exporting the service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub clusters: Vec<ClusterStatus>,
    /// Conditions (`Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Whether the import's endpoints are in EndpointSlices labelled
    /// `multicluster.kubernetes.io/service-name`: xcc always writes them (`Present`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_slice_objects: Option<EndpointSliceObjects>,
}

/// `status.endpointSliceObjects` of a ServiceImport.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum EndpointSliceObjects {
    /// The implementation writes MCS EndpointSlices for the import.
    Present,
    /// It does not.
    Absent,
}

/// One exporting cluster.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct ClusterStatus {
    /// Its cluster ID.
    pub cluster: String,
}

/// A property of this cluster (About API, KEP-2149). `cluster.clusterset.k8s.io` holds the
/// cluster's ID, `clusterset.k8s.io` the ClusterSet's name.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "about.k8s.io",
    version = "v1alpha1",
    kind = "ClusterProperty",
    plural = "clusterproperties",
    singular = "clusterproperty",
    printcolumn = r#"{"name":"Value","type":"string","jsonPath":".spec.value"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct ClusterPropertySpec {
    /// The property's value.
    #[schemars(length(min = 1, max = 128_000))]
    pub value: String,
}

/// The CRDs of the MCS API and the About API, in the order `xcc-agent crds` prints them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut property = ClusterProperty::crd();
    // `*.k8s.io` is a protected group: the API server serves it only with this annotation, which
    // the upstream About API CRD carries too.
    property.metadata.annotations = Some(
        [(
            "api-approved.kubernetes.io".to_string(),
            "https://github.com/kubernetes/enhancements/pull/3084".to_string(),
        )]
        .into(),
    );
    vec![property, service_export_crd(), ServiceImport::crd()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An export as users write it (no spec) reads as one with an empty spec.
    #[test]
    fn an_export_without_spec_parses() {
        let export: ServiceExport = serde_json::from_value(serde_json::json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceExport",
            "metadata": {"name": "hello", "namespace": "demo"},
        }))
        .unwrap();
        assert_eq!(export.spec, ServiceExportSpec::default());
        let crd = service_export_crd();
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap();
        assert!(
            schema
                .required
                .as_ref()
                .is_none_or(|r| !r.iter().any(|f| f == "spec"))
        );
    }

    /// The CRDs are those of the upstream groups, versions and scopes.
    #[test]
    fn crds_are_the_upstream_ones() {
        let names: Vec<_> = crds()
            .iter()
            .map(|c| {
                (
                    c.metadata.name.clone().unwrap(),
                    c.spec.versions[0].name.clone(),
                    c.spec.scope.clone(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                (
                    "clusterproperties.about.k8s.io".to_string(),
                    "v1alpha1".to_string(),
                    "Cluster".to_string()
                ),
                (
                    "serviceexports.multicluster.x-k8s.io".into(),
                    "v1beta1".into(),
                    "Namespaced".into()
                ),
                (
                    "serviceimports.multicluster.x-k8s.io".into(),
                    "v1beta1".into(),
                    "Namespaced".into()
                ),
            ]
        );
    }
}

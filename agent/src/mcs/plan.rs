//! What the MCS reconciler decides, as pure functions: an export's validity, its publication, the
//! KEP-1645 merge of every cluster's publication (conflicts included), and the ServiceImport,
//! derived Service and EndpointSlices an importing cluster gets. No API calls here.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    api::{
        core::v1::{Service, ServicePort as CorePort, ServiceSpec},
        discovery::v1::{Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

use super::{
    api::{
        ClusterStatus, EndpointSliceObjects, ExportReason, LABEL_SERVICE_NAME,
        LABEL_SOURCE_CLUSTER, ServiceExport, ServiceImport, ServiceImportSpec, ServiceImportStatus,
        ServiceImportType, ServicePort,
    },
    publication::{EndpointGroup, EndpointPort, ExportedServiceSpec, PublishedEndpoint},
};

/// Prefix of every derived Service's name (then a hash of the exported Service's name).
pub const DERIVED_PREFIX: &str = "xcc-mcs-";
/// Label on the derived Service: the name of the ServiceImport (and exported Service) it serves.
pub const LABEL_IMPORT: &str = "mcs.xcc.test/service-import";
/// The `endpointslice.kubernetes.io/managed-by` value of the slices the agent writes.
pub const MANAGED_BY: &str = "mcs.xcc.test";
/// The label Kubernetes reads to tie an EndpointSlice to its Service.
pub const LABEL_KUBE_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The label that names an EndpointSlice's controller.
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";

/// Whether an export can be served, and why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    /// The Service exists and may be exported.
    Valid,
    /// No Service of that name in the namespace.
    NoService,
    /// An ExternalName Service.
    InvalidServiceType,
}

/// The validity of an export whose Service is `service`.
pub fn validate(service: Option<&Service>) -> Validity {
    match service {
        None => Validity::NoService,
        Some(s) if s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("ExternalName") => {
            Validity::InvalidServiceType
        }
        Some(_) => Validity::Valid,
    }
}

/// A 64-bit FNV-1a hash of `text`, as 16 hex digits: stable across versions and platforms.
pub fn hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The derived Service of the import of Service `name` (same namespace): a name no user Service
/// has unless it takes the prefix, and never the exported Service's own.
pub fn derived_name(name: &str) -> String {
    format!("{DERIVED_PREFIX}{}", hash(name))
}

/// The ports of `service` as the import states them.
fn import_ports(service: &ServiceSpec) -> Vec<ServicePort> {
    service
        .ports
        .iter()
        .flatten()
        .map(|p| ServicePort {
            name: p.name.clone().filter(|n| !n.is_empty()),
            protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
            app_protocol: p.app_protocol.clone(),
            port: p.port,
        })
        .collect()
}

/// The endpoints of `service` (flat data plane): its EndpointSlices' endpoints, grouped by
/// address family and ports; each slice port tied to the Service port of the same name.
pub fn flat_endpoints(service: &ServiceSpec, slices: &[&EndpointSlice]) -> Vec<EndpointGroup> {
    let mut groups: BTreeMap<(String, Vec<EndpointPort>), BTreeSet<PublishedEndpoint>> =
        BTreeMap::new();
    for slice in slices {
        let ports: Vec<EndpointPort> = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|sp| {
                let name = sp.name.clone().filter(|n| !n.is_empty());
                let protocol = sp.protocol.clone().unwrap_or_else(|| "TCP".into());
                let service_port = service.ports.iter().flatten().find(|p| {
                    p.name.clone().filter(|n| !n.is_empty()) == name
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })?;
                Some(EndpointPort {
                    name,
                    protocol: Some(protocol),
                    app_protocol: sp.app_protocol.clone(),
                    service_port: service_port.port,
                    port: sp.port?,
                })
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let entry = groups
            .entry((slice.address_type.clone(), ports))
            .or_default();
        for endpoint in &slice.endpoints {
            entry.insert(published(endpoint));
        }
    }
    groups
        .into_iter()
        .map(|((address_type, ports), endpoints)| EndpointGroup {
            address_type,
            ports,
            endpoints: endpoints.into_iter().collect(),
        })
        .collect()
}

/// An EndpointSlice's endpoint as published (conditions as Kubernetes reads absent ones).
fn published(endpoint: &Endpoint) -> PublishedEndpoint {
    let conditions = endpoint.conditions.clone().unwrap_or_default();
    let ready = conditions.ready.unwrap_or(true);
    PublishedEndpoint {
        addresses: endpoint.addresses.clone(),
        hostname: endpoint.hostname.clone(),
        ready,
        serving: conditions.serving.unwrap_or(ready),
        terminating: conditions.terminating.unwrap_or(false),
    }
}

/// What cluster `cluster_id` publishes for `export` of `service`, with `endpoints`.
pub fn publication(
    cluster_id: &str,
    export: &ServiceExport,
    service: &Service,
    data_plane: &str,
    endpoints: Vec<EndpointGroup>,
) -> ExportedServiceSpec {
    let spec = service.spec.clone().unwrap_or_default();
    ExportedServiceSpec {
        cluster_id: cluster_id.to_string(),
        exported_at: export.metadata.creation_timestamp.clone().unwrap_or(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        ),
        headless: spec.cluster_ip.as_deref() == Some("None"),
        ports: import_ports(&spec),
        session_affinity: spec.session_affinity.clone(),
        session_affinity_config: spec.session_affinity_config.clone(),
        internal_traffic_policy: spec.internal_traffic_policy.clone(),
        traffic_distribution: spec.traffic_distribution.clone(),
        ip_families: spec.ip_families.clone().unwrap_or_default(),
        exported_labels: export.spec.exported_labels.clone(),
        exported_annotations: export.spec.exported_annotations.clone(),
        data_plane: data_plane.to_string(),
        endpoints,
    }
}

/// One conflict between the exports of a service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The `Conflict=True` reason (`PortConflict`, ...).
    pub reason: ExportReason,
    /// The field that differs, as people read it (`ports`, `sessionAffinity`, ...).
    pub field: &'static str,
    /// The clusters whose export differs from the oldest's.
    pub clusters: Vec<String>,
}

/// The import of one service: what every exporting cluster published, merged.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    /// The oldest export's cluster, whose properties win.
    pub winner: String,
    /// The ServiceImport's spec (without `ips`).
    pub spec: ServiceImportSpec,
    /// The winning export's exported labels and annotations.
    pub labels: BTreeMap<String, String>,
    /// See `labels`.
    pub annotations: BTreeMap<String, String>,
    /// The exporting clusters, sorted.
    pub clusters: Vec<String>,
    /// Every property on which some export differs from the oldest.
    pub conflicts: Vec<Conflict>,
}

impl Merged {
    /// The `Conflict` condition of `cluster`'s export: status, reason, message.
    pub fn conflict_of(&self, cluster: &str) -> (bool, ExportReason, String) {
        let concerned: Vec<&Conflict> = self
            .conflicts
            .iter()
            .filter(|c| cluster == self.winner || c.clusters.iter().any(|x| x == cluster))
            .collect();
        let Some(first) = concerned.first() else {
            return (false, ExportReason::NoConflicts, String::new());
        };
        let message = concerned
            .iter()
            .map(|c| {
                format!(
                    "{} of cluster(s) {} differ(s) from the oldest export's, cluster {}'s, which is used",
                    c.field,
                    c.clusters.join(", "),
                    self.winner
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        (true, first.reason.clone(), message)
    }
}

/// Merges the publications of a service per KEP-1645: the oldest export (creation time, then
/// cluster ID) wins type, session affinity, traffic policies, IP families, labels and
/// annotations; ports are the union by name, a name published with another protocol or number
/// taking the oldest's. Every difference is a [`Conflict`]. `None` when nobody exports.
pub fn merge(publications: &[&ExportedServiceSpec]) -> Option<Merged> {
    let mut sorted: Vec<&ExportedServiceSpec> = publications.to_vec();
    sorted.sort_by(|a, b| (a.exported_at.0, &a.cluster_id).cmp(&(b.exported_at.0, &b.cluster_id)));
    let winner = *sorted.first()?;
    let mut ports: Vec<ServicePort> = Vec::new();
    for publication in &sorted {
        for port in &publication.ports {
            if !ports.iter().any(|p| p.name == port.name) {
                ports.push(port.clone());
            }
        }
    }
    let conflicts = conflicts(&sorted);
    let mut clusters: Vec<String> = sorted.iter().map(|p| p.cluster_id.clone()).collect();
    clusters.sort();
    clusters.dedup();
    Some(Merged {
        winner: winner.cluster_id.clone(),
        spec: ServiceImportSpec {
            ports,
            ips: Vec::new(),
            type_: if winner.headless {
                ServiceImportType::Headless
            } else {
                ServiceImportType::ClusterSetIP
            },
            session_affinity: winner.session_affinity.clone(),
            session_affinity_config: winner.session_affinity_config.clone(),
            ip_families: winner.ip_families.clone(),
            internal_traffic_policy: winner.internal_traffic_policy.clone(),
            traffic_distribution: winner.traffic_distribution.clone(),
        },
        labels: winner.exported_labels.clone(),
        annotations: winner.exported_annotations.clone(),
        clusters,
        conflicts,
    })
}

/// Every property on which a publication of `sorted` (oldest first, not empty) differs from the
/// oldest.
fn conflicts(sorted: &[&ExportedServiceSpec]) -> Vec<Conflict> {
    let winner = sorted[0];
    let mut conflicts = Vec::new();
    let mut check = |reason: ExportReason,
                     field: &'static str,
                     differs: &dyn Fn(&ExportedServiceSpec) -> bool| {
        let clusters: Vec<String> = sorted[1..]
            .iter()
            .filter(|p| differs(p))
            .map(|p| p.cluster_id.clone())
            .collect();
        if !clusters.is_empty() {
            conflicts.push(Conflict {
                reason,
                field,
                clusters,
            });
        }
    };
    let sorted_ports = |p: &ExportedServiceSpec| {
        let mut ports = p.ports.clone();
        ports.sort();
        ports
    };
    let winner_ports = sorted_ports(winner);
    check(
        ExportReason::TypeConflict,
        "headlessness (clusterIP: None)",
        &|p| p.headless != winner.headless,
    );
    check(ExportReason::PortConflict, "ports", &|p| {
        sorted_ports(p) != winner_ports
    });
    check(
        ExportReason::SessionAffinityConflict,
        "sessionAffinity",
        &|p| affinity(p) != affinity(winner),
    );
    check(
        ExportReason::SessionAffinityConfigConflict,
        "sessionAffinityConfig",
        &|p| p.session_affinity_config != winner.session_affinity_config,
    );
    check(
        ExportReason::InternalTrafficPolicyConflict,
        "internalTrafficPolicy",
        &|p| p.internal_traffic_policy != winner.internal_traffic_policy,
    );
    check(
        ExportReason::TrafficDistributionConflict,
        "trafficDistribution",
        &|p| p.traffic_distribution != winner.traffic_distribution,
    );
    check(ExportReason::IPFamilyConflict, "ipFamilies", &|p| {
        p.ip_families != winner.ip_families
    });
    check(ExportReason::LabelsConflict, "exportedLabels", &|p| {
        p.exported_labels != winner.exported_labels
    });
    check(
        ExportReason::AnnotationsConflict,
        "exportedAnnotations",
        &|p| p.exported_annotations != winner.exported_annotations,
    );
    conflicts
}

/// Session affinity as Kubernetes reads it (absent: `None`).
fn affinity(p: &ExportedServiceSpec) -> &str {
    p.session_affinity.as_deref().unwrap_or("None")
}

/// The ServiceImport of Service `namespace/name`, with the derived Service's `ips`.
pub fn service_import(
    namespace: &str,
    name: &str,
    merged: &Merged,
    ips: Vec<String>,
) -> ServiceImport {
    let mut spec = merged.spec.clone();
    spec.ips = if spec.type_ == ServiceImportType::Headless {
        Vec::new()
    } else {
        ips
    };
    ServiceImport {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(merged.labels.clone()).filter(|l| !l.is_empty()),
            annotations: Some(merged.annotations.clone()).filter(|a| !a.is_empty()),
            ..Default::default()
        },
        spec,
        status: Some(ServiceImportStatus {
            clusters: merged
                .clusters
                .iter()
                .map(|c| ClusterStatus { cluster: c.clone() })
                .collect(),
            conditions: Vec::new(),
            endpoint_slice_objects: Some(EndpointSliceObjects::Present),
        }),
    }
}

/// The ClusterSet IPs: the derived Service's `clusterIPs` in the order of `families` (the
/// Service's own order when it names none).
pub fn ips_of(service: &Service, families: &[String]) -> Vec<String> {
    let Some(spec) = &service.spec else {
        return Vec::new();
    };
    let ips: Vec<String> = spec
        .cluster_ips
        .clone()
        .or_else(|| spec.cluster_ip.clone().map(|ip| vec![ip]))
        .unwrap_or_default()
        .into_iter()
        .filter(|ip| ip != "None" && !ip.is_empty())
        .collect();
    let family_of = |ip: &String| if ip.contains(':') { "IPv6" } else { "IPv4" };
    if families.is_empty() {
        return ips;
    }
    families
        .iter()
        .filter_map(|f| ips.iter().find(|ip| family_of(ip) == f).cloned())
        .collect()
}

/// The selectorless Service in front of the import of `namespace/name`.
pub fn derived_service(namespace: &str, name: &str, merged: &Merged) -> Service {
    let spec = &merged.spec;
    let headless = spec.type_ == ServiceImportType::Headless;
    Service {
        metadata: ObjectMeta {
            name: Some(derived_name(name)),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([
                (LABEL_IMPORT.to_string(), name.to_string()),
                (LABEL_SERVICE_NAME.to_string(), name.to_string()),
            ])),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: headless.then(|| "None".to_string()),
            ports: Some(
                spec.ports
                    .iter()
                    .map(|p| CorePort {
                        name: p.name.clone(),
                        protocol: p.protocol.clone(),
                        app_protocol: p.app_protocol.clone(),
                        port: p.port,
                        ..Default::default()
                    })
                    .collect(),
            ),
            ip_families: Some(spec.ip_families.clone()).filter(|f| !f.is_empty()),
            ip_family_policy: (!spec.ip_families.is_empty()).then(|| {
                if spec.ip_families.len() > 1 {
                    "PreferDualStack".to_string()
                } else {
                    "SingleStack".to_string()
                }
            }),
            session_affinity: spec.session_affinity.clone(),
            session_affinity_config: spec.session_affinity_config.clone(),
            internal_traffic_policy: spec.internal_traffic_policy.clone(),
            traffic_distribution: spec.traffic_distribution.clone(),
            ..Default::default()
        }),
        status: None,
    }
}

/// The ports of `group` an importing slice lists: those that serve a port of the import (same
/// name, protocol and Service port number), under their number to connect to.
pub fn matching_ports(import: &[ServicePort], group: &EndpointGroup) -> Vec<SlicePort> {
    group
        .ports
        .iter()
        .filter(|gp| {
            import.iter().any(|ip| {
                ip.name == gp.name
                    && ip.protocol.as_deref().unwrap_or("TCP")
                        == gp.protocol.as_deref().unwrap_or("TCP")
                    && ip.port == gp.service_port
            })
        })
        .map(|gp| SlicePort {
            name: Some(gp.name.clone().unwrap_or_default()),
            protocol: Some(gp.protocol.clone().unwrap_or_else(|| "TCP".into())),
            app_protocol: gp.app_protocol.clone(),
            port: Some(gp.port),
        })
        .collect()
}

/// The EndpointSlices of the import of `namespace/name`: one per source cluster and endpoint
/// group (one per address family, unless a cluster's slices of one family disagree on ports).
pub fn slices(
    namespace: &str,
    name: &str,
    merged: &Merged,
    publications: &[&ExportedServiceSpec],
) -> Vec<EndpointSlice> {
    let derived = derived_name(name);
    let mut out = Vec::new();
    for publication in publications {
        let cluster = &publication.cluster_id;
        let mut per_family: BTreeMap<&str, usize> = BTreeMap::new();
        for group in &publication.endpoints {
            let n = per_family.entry(group.address_type.as_str()).or_default();
            let mut slice_name = format!(
                "{derived}-{}-{}",
                &hash(cluster)[..10],
                group.address_type.to_lowercase()
            );
            if *n > 0 {
                slice_name.push_str(&format!("-{n}"));
            }
            *n += 1;
            out.push(EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(slice_name),
                    namespace: Some(namespace.into()),
                    labels: Some(BTreeMap::from([
                        (LABEL_KUBE_SERVICE_NAME.to_string(), derived.clone()),
                        (LABEL_SERVICE_NAME.to_string(), name.to_string()),
                        (LABEL_SOURCE_CLUSTER.to_string(), cluster.clone()),
                        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
                    ])),
                    ..Default::default()
                },
                address_type: group.address_type.clone(),
                ports: Some(matching_ports(&merged.spec.ports, group)),
                endpoints: group
                    .endpoints
                    .iter()
                    .map(|e| Endpoint {
                        addresses: e.addresses.clone(),
                        hostname: e.hostname.clone(),
                        conditions: Some(EndpointConditions {
                            ready: Some(e.ready),
                            serving: Some(e.serving),
                            terminating: Some(e.terminating),
                        }),
                        ..Default::default()
                    })
                    .collect(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;

//! The merge, the conflicts, the port matching and the slices, on the cases of the upstream
//! conformance suite and a few more.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        core::v1::{Service, ServicePort as CorePort, ServiceSpec},
        discovery::v1::{Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice},
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::Timestamp,
};

use super::*;
use crate::mcs::api::ServiceExportSpec;

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(1_700_000_000 + seconds).unwrap())
}

fn port(name: &str, protocol: &str, number: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        protocol: Some(protocol.into()),
        app_protocol: None,
        port: number,
    }
}

fn publication(cluster: &str, exported: i64, ports: Vec<ServicePort>) -> ExportedServiceSpec {
    ExportedServiceSpec {
        cluster_id: cluster.into(),
        exported_at: at(exported),
        headless: false,
        ports,
        session_affinity: None,
        session_affinity_config: None,
        internal_traffic_policy: None,
        traffic_distribution: None,
        ip_families: vec!["IPv4".into()],
        exported_labels: BTreeMap::new(),
        exported_annotations: BTreeMap::new(),
        data_plane: "flat".into(),
        endpoints: Vec::new(),
    }
}

fn group(ports: Vec<EndpointPort>, addresses: &[&str]) -> EndpointGroup {
    EndpointGroup {
        address_type: "IPv4".into(),
        ports,
        endpoints: addresses
            .iter()
            .map(|a| PublishedEndpoint {
                addresses: vec![(*a).into()],
                hostname: None,
                ready: true,
                serving: true,
                terminating: false,
            })
            .collect(),
    }
}

fn endpoint_port(name: &str, service_port: i32, port: i32) -> EndpointPort {
    EndpointPort {
        name: Some(name.into()),
        protocol: Some("TCP".into()),
        app_protocol: None,
        service_port,
        port,
    }
}

#[test]
fn a_single_export_is_imported_as_it_is_without_conflict() {
    let a = publication("a", 0, vec![port("tcp", "TCP", 42)]);
    let merged = merge(&[&a]).unwrap();
    assert_eq!(merged.spec.ports, [port("tcp", "TCP", 42)]);
    assert_eq!(merged.spec.type_, ServiceImportType::ClusterSetIP);
    assert_eq!(merged.clusters, ["a"]);
    assert!(merged.conflicts.is_empty());
    assert_eq!(
        merged.conflict_of("a"),
        (false, ExportReason::NoConflicts, String::new())
    );
    assert_eq!(merge(&[]), None);
}

/// The suite's "union of ports ... and raise a conflict": one cluster has an extra port.
#[test]
fn ports_are_the_union_by_name_and_an_extra_port_is_a_conflict_on_both() {
    let a = publication("a", 0, vec![port("tcp", "TCP", 42)]);
    let b = publication("b", 5, vec![port("tcp", "TCP", 42), port("udp", "UDP", 43)]);
    let merged = merge(&[&b, &a]).unwrap();
    assert_eq!(merged.winner, "a");
    assert_eq!(
        merged.spec.ports,
        [port("tcp", "TCP", 42), port("udp", "UDP", 43)]
    );
    for cluster in ["a", "b"] {
        let (conflict, reason, message) = merged.conflict_of(cluster);
        assert!(conflict, "{cluster}");
        assert_eq!(reason, ExportReason::PortConflict);
        assert!(
            message.contains("ports") && message.contains('b') && message.contains("cluster a"),
            "{message}"
        );
    }
}

/// The same name with another number: the oldest export's port, a conflict.
#[test]
fn a_port_name_with_another_number_takes_the_oldest_and_conflicts() {
    let old = publication("b", 0, vec![port("tcp", "TCP", 42)]);
    let new = publication("a", 1, vec![port("tcp", "TCP", 4242)]);
    let merged = merge(&[&new, &old]).unwrap();
    assert_eq!(merged.winner, "b");
    assert_eq!(merged.spec.ports, [port("tcp", "TCP", 42)]);
    assert!(merged.conflict_of("a").0);
    assert!(merged.conflict_of("b").0);
}

#[test]
fn the_same_creation_time_is_decided_by_the_cluster_id() {
    let a = publication("a", 0, vec![port("tcp", "TCP", 1)]);
    let b = publication("b", 0, vec![port("tcp", "TCP", 2)]);
    assert_eq!(merge(&[&b, &a]).unwrap().winner, "a");
    assert_eq!(
        merge(&[&a, &b]).unwrap().spec.ports,
        [port("tcp", "TCP", 1)]
    );
}

#[test]
fn different_port_names_are_all_kept() {
    let a = publication("a", 0, vec![port("http", "TCP", 80)]);
    let b = publication("b", 1, vec![port("https", "TCP", 443)]);
    let merged = merge(&[&a, &b]).unwrap();
    assert_eq!(
        merged.spec.ports,
        [port("http", "TCP", 80), port("https", "TCP", 443)]
    );
    assert_eq!(merged.conflicts.len(), 1);
}

#[test]
fn headless_against_not_headless_is_a_type_conflict_and_the_oldest_wins() {
    let mut a = publication("a", 0, vec![port("tcp", "TCP", 42)]);
    a.headless = true;
    let b = publication("b", 1, vec![port("tcp", "TCP", 42)]);
    let merged = merge(&[&a, &b]).unwrap();
    assert_eq!(merged.spec.type_, ServiceImportType::Headless);
    let (conflict, reason, _) = merged.conflict_of("b");
    assert!(conflict);
    assert_eq!(reason, ExportReason::TypeConflict);
    // Headless: no ClusterSet IP, however many the derived Service has.
    let import = service_import("ns", "svc", &merged, vec!["10.0.0.1".into()]);
    assert!(import.spec.ips.is_empty());
    let derived = derived_service("ns", "svc", &merged);
    assert_eq!(derived.spec.unwrap().cluster_ip.as_deref(), Some("None"));
}

#[test]
fn labels_and_annotations_are_the_oldest_exports_and_a_difference_conflicts() {
    let mut a = publication("a", 0, vec![]);
    a.exported_labels = BTreeMap::from([("team".to_string(), "x".to_string())]);
    let mut b = publication("b", 1, vec![]);
    b.exported_labels = BTreeMap::from([("team".to_string(), "y".to_string())]);
    b.exported_annotations = BTreeMap::from([("note".to_string(), "n".to_string())]);
    let merged = merge(&[&b, &a]).unwrap();
    assert_eq!(merged.labels, a.exported_labels);
    assert!(merged.annotations.is_empty());
    let reasons: Vec<_> = merged.conflicts.iter().map(|c| c.reason.clone()).collect();
    assert_eq!(
        reasons,
        [
            ExportReason::LabelsConflict,
            ExportReason::AnnotationsConflict
        ]
    );
    let import = service_import("ns", "svc", &merged, vec![]);
    assert_eq!(import.metadata.labels, Some(a.exported_labels.clone()));
    assert_eq!(import.metadata.annotations, None);
}

#[test]
fn session_affinity_and_traffic_policies_come_from_the_oldest() {
    let mut a = publication("a", 0, vec![]);
    a.session_affinity = Some("ClientIP".into());
    a.internal_traffic_policy = Some("Local".into());
    let mut b = publication("b", 1, vec![]);
    b.session_affinity = Some("None".into());
    b.traffic_distribution = Some("PreferClose".into());
    let merged = merge(&[&a, &b]).unwrap();
    assert_eq!(merged.spec.session_affinity.as_deref(), Some("ClientIP"));
    assert_eq!(
        merged.spec.internal_traffic_policy.as_deref(),
        Some("Local")
    );
    assert_eq!(merged.spec.traffic_distribution, None);
    let reasons: Vec<_> = merged.conflicts.iter().map(|c| c.reason.clone()).collect();
    assert_eq!(
        reasons,
        [
            ExportReason::SessionAffinityConflict,
            ExportReason::InternalTrafficPolicyConflict,
            ExportReason::TrafficDistributionConflict
        ]
    );
    // Absent session affinity is `None`: no conflict between the two spellings.
    let mut c = publication("c", 2, vec![]);
    c.session_affinity = None;
    let mut d = publication("d", 3, vec![]);
    d.session_affinity = Some("None".into());
    assert!(merge(&[&c, &d]).unwrap().conflicts.is_empty());
}

#[test]
fn externalname_and_missing_services_are_not_valid() {
    let service = |type_: &str| Service {
        spec: Some(ServiceSpec {
            type_: Some(type_.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(validate(None), Validity::NoService);
    assert_eq!(
        validate(Some(&service("ExternalName"))),
        Validity::InvalidServiceType
    );
    for type_ in ["ClusterIP", "NodePort", "LoadBalancer"] {
        assert_eq!(validate(Some(&service(type_))), Validity::Valid);
    }
}

/// A cluster whose `tcp` is 4242 while the import's `tcp` is 42 gets no `tcp` in its slice:
/// kube-proxy never sends port-42 traffic there.
#[test]
fn a_slice_lists_only_the_ports_that_serve_a_port_of_the_import() {
    let mut a = publication("a", 0, vec![port("tcp", "TCP", 42)]);
    a.endpoints = vec![group(vec![endpoint_port("tcp", 42, 8080)], &["10.1.0.1"])];
    let mut b = publication(
        "b",
        1,
        vec![port("tcp", "TCP", 4242), port("udp", "UDP", 53)],
    );
    b.endpoints = vec![group(
        vec![
            endpoint_port("tcp", 4242, 9090),
            EndpointPort {
                protocol: Some("UDP".into()),
                ..endpoint_port("udp", 53, 5353)
            },
        ],
        &["10.2.0.1", "10.2.0.2"],
    )];
    let merged = merge(&[&a, &b]).unwrap();
    let slices = slices("ns", "svc", &merged, &[&a, &b]);
    assert_eq!(slices.len(), 2);
    let ports = |s: &EndpointSlice| {
        s.ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone().unwrap(), p.port.unwrap()))
            .collect::<Vec<_>>()
    };
    assert_eq!(ports(&slices[0]), [("tcp".to_string(), 8080)]);
    assert_eq!(ports(&slices[1]), [("udp".to_string(), 5353)]);
    assert_eq!(slices[1].endpoints.len(), 2);
    let labels = slices[1].metadata.labels.clone().unwrap();
    assert_eq!(labels[LABEL_SOURCE_CLUSTER], "b");
    assert_eq!(labels[LABEL_SERVICE_NAME], "svc");
    assert_eq!(labels[LABEL_KUBE_SERVICE_NAME], derived_name("svc"));
    assert_eq!(labels[LABEL_MANAGED_BY], MANAGED_BY);
    assert_ne!(slices[0].metadata.name, slices[1].metadata.name);
}

#[test]
fn the_derived_service_is_selectorless_with_the_import_ports_and_never_the_services_name() {
    let mut a = publication("a", 0, vec![port("tcp", "TCP", 42)]);
    a.ip_families = vec!["IPv6".into(), "IPv4".into()];
    a.session_affinity = Some("ClientIP".into());
    let merged = merge(&[&a]).unwrap();
    let derived = derived_service("ns", "svc", &merged);
    let name = derived.metadata.name.clone().unwrap();
    assert_ne!(name, "svc");
    assert!(
        name.starts_with(DERIVED_PREFIX) && name.len() <= 63,
        "{name}"
    );
    assert_eq!(derived_name("svc"), name, "stable");
    assert_ne!(derived_name("svc2"), name);
    let spec = derived.spec.unwrap();
    assert_eq!(spec.selector, None);
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.cluster_ip, None);
    assert_eq!(spec.ip_family_policy.as_deref(), Some("PreferDualStack"));
    assert_eq!(spec.session_affinity.as_deref(), Some("ClientIP"));
    assert_eq!(spec.ports.unwrap()[0].port, 42);
    // The ClusterSet IPs follow the import's families.
    let written = Service {
        spec: Some(ServiceSpec {
            cluster_ips: Some(vec!["10.96.0.9".into(), "fd00::9".into()]),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        ips_of(&written, &merged.spec.ip_families),
        ["fd00::9", "10.96.0.9"]
    );
}

/// The exporting side: slices of the Service read into groups, each slice port tied to the
/// Service port of its name; absent conditions read as Kubernetes reads them.
#[test]
fn an_exported_services_slices_are_published_per_family_and_ports() {
    let service = ServiceSpec {
        ports: Some(vec![CorePort {
            name: Some("tcp".into()),
            port: 42,
            ..Default::default()
        }]),
        ..Default::default()
    };
    let slice = |name: &str, address: &str, ready: Option<bool>| EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        ports: Some(vec![
            SlicePort {
                name: Some("tcp".into()),
                port: Some(8080),
                protocol: Some("TCP".into()),
                app_protocol: None,
            },
            SlicePort {
                name: Some("other".into()),
                port: Some(1),
                protocol: Some("TCP".into()),
                app_protocol: None,
            },
        ]),
        endpoints: vec![Endpoint {
            addresses: vec![address.into()],
            hostname: Some("pod-0".into()),
            conditions: Some(EndpointConditions {
                ready,
                ..Default::default()
            }),
            ..Default::default()
        }],
    };
    let (one, two) = (
        slice("a", "10.0.0.2", None),
        slice("b", "10.0.0.1", Some(false)),
    );
    let groups = flat_endpoints(&service, &[&one, &two]);
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].ports, [endpoint_port("tcp", 42, 8080)]);
    let endpoints = &groups[0].endpoints;
    assert_eq!(endpoints[0].addresses, ["10.0.0.1"]);
    assert!(!endpoints[0].ready && !endpoints[0].serving);
    assert!(endpoints[1].ready && endpoints[1].serving && !endpoints[1].terminating);
    assert_eq!(endpoints[1].hostname.as_deref(), Some("pod-0"));
}

#[test]
fn a_publication_carries_the_exports_time_labels_and_the_services_shape() {
    let export = crate::mcs::api::ServiceExport {
        metadata: ObjectMeta {
            name: Some("svc".into()),
            creation_timestamp: Some(at(7)),
            ..Default::default()
        },
        spec: ServiceExportSpec {
            exported_labels: BTreeMap::from([("a".to_string(), "b".to_string())]),
            exported_annotations: BTreeMap::new(),
        },
        status: None,
    };
    let service = Service {
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            ports: Some(vec![CorePort {
                name: Some("tcp".into()),
                port: 42,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let spec = publication_of("c1", &export, &service);
    assert_eq!(spec.cluster_id, "c1");
    assert_eq!(spec.exported_at, at(7));
    assert!(spec.headless);
    assert_eq!(spec.ports, [port("tcp", "TCP", 42)]);
    assert_eq!(spec.exported_labels, export.spec.exported_labels);
}

fn publication_of(
    cluster: &str,
    export: &crate::mcs::api::ServiceExport,
    service: &Service,
) -> ExportedServiceSpec {
    super::publication(cluster, export, service, "flat", Vec::new())
}

#[test]
fn hashes_are_stable() {
    assert_eq!(hash(""), "cbf29ce484222325");
    assert_eq!(hash("a"), "af63dc4c8601ec8c");
}

//! `spec.healthCheck`: the check every xcc-agent is sent, in an annotation of each slice it
//! probes ([`xcc_kube::health_check::HEALTH_CHECK_ANNOTATION`]), every default applied and the
//! port resolved per cluster (the gateway Service's first port unless the spec names one).

use std::collections::BTreeMap;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use xcc_kube::health_check::HEALTH_CHECK_ANNOTATION;

use super::plan::Plan;
use crate::gatewaydns::HealthCheck;

/// Annotates the per-cluster and global slices of `out` with `check` (resolved with the port of
/// their cluster in `ports`). A cluster whose port is not known (its Service could not be read
/// and the spec names no port) is not probed: its records are served as they are.
pub(super) fn annotate(out: &mut Plan, check: &HealthCheck, ports: &BTreeMap<String, u16>) {
    let resolved = |cluster: &str| check.resolve(ports.get(cluster).copied());
    for slice in &mut out.slices {
        let cluster = slice
            .metadata
            .name
            .as_ref()
            .and_then(|name| out.sources.get(name));
        if let Some(check) = cluster.and_then(|c| resolved(c)) {
            set(slice, &check);
        }
    }
    for (cluster, slices) in &mut out.global {
        if let Some(check) = resolved(cluster) {
            slices.iter_mut().for_each(|slice| set(slice, &check));
        }
    }
}

fn set(slice: &mut EndpointSlice, check: &xcc_kube::health_check::HealthCheck) {
    // Host names (FQDN slices, a CNAME) are not probed.
    if slice.address_type == "FQDN" {
        return;
    }
    slice
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(HEALTH_CHECK_ANNOTATION.to_string(), check.to_annotation());
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort, ServiceSpec, ServiceStatus,
    };
    use kube::ResourceExt;
    use xcc_kube::health_check::{HealthCheck as Wire, ProbeKind};

    use super::*;
    use crate::{
        desired::{ClusterInfo, Print, observe, plan::plan_with_health},
        gatewaydns::{GatewayDNS, GatewayDNSSpec, HealthCheckType},
        settings::Global,
    };

    fn gateway(check: Option<HealthCheck>) -> GatewayDNS {
        let mut g = GatewayDNS::new(
            "gw",
            GatewayDNSSpec {
                cluster_selector: Default::default(),
                service: "projectcontour/envoy".into(),
                resolution_type: Default::default(),
                node_address_type: None,
                node_names: None,
                stale_records: None,
                global: None,
                resolve_from: None,
                health_check: check,
            },
        );
        g.metadata.namespace = Some("dev-team".into());
        g
    }

    fn service(ip: &str, port: Option<i32>) -> Service {
        Service {
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: port.map(|port| {
                    vec![ServicePort {
                        port,
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(vec![LoadBalancerIngress {
                        ip: Some(ip.into()),
                        ..Default::default()
                    }]),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Every slice of the plan (per-cluster and global) → its check annotation.
    fn checks(gateway: &GatewayDNS) -> Vec<(String, Option<Wire>)> {
        let clusters = ["cluster-a", "cluster-b"].map(|name| ClusterInfo {
            name: name.into(),
            labels: Default::default(),
        });
        let plan = plan_with_health(
            gateway,
            std::slice::from_ref(gateway),
            &clusters,
            "xcc.test",
            &Global::default(),
            |c| match c {
                "cluster-a" => observe(Some(&service("10.0.0.1", Some(8443)))),
                _ => observe(Some(&service("10.0.0.2", None))),
            },
            |_| Default::default(),
        );
        let mut out: Vec<(String, Option<Wire>)> = plan
            .slices
            .iter()
            .chain(plan.global.values().flatten())
            .map(|s| {
                let check = s
                    .annotations()
                    .get(HEALTH_CHECK_ANNOTATION)
                    .map(|v| Wire::parse(v).unwrap());
                (s.name_any(), check)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    #[test]
    fn the_check_goes_to_every_slice_with_the_defaults_and_the_services_first_port() {
        assert!(
            checks(&gateway(None)).iter().all(|(_, c)| c.is_none()),
            "no healthCheck: no annotation, as before"
        );
        let none = HealthCheck {
            kind: Some(HealthCheckType::None),
            ..Default::default()
        };
        assert!(
            checks(&gateway(Some(none)))
                .iter()
                .all(|(_, c)| c.is_none())
        );
        let found = checks(&gateway(Some(HealthCheck::default())));
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "dev-team-cluster-a-gateway",
                "dev-team-cluster-a-global",
                "dev-team-cluster-b-gateway",
                "dev-team-cluster-b-global"
            ]
        );
        let a = found[0].1.clone().expect("cluster-a's Service has a port");
        assert_eq!(found[1].1.as_ref(), Some(&a), "the global slice too");
        assert_eq!(
            a,
            Wire {
                kind: ProbeKind::Tcp,
                port: 8443,
                path: None,
                host: None,
                expected_status: (200, 399),
                interval_ms: 250,
                timeout_ms: 200,
                failure_threshold: 2,
                success_threshold: 2,
            }
        );
        assert_eq!(
            found[2].1, None,
            "cluster-b's Service has no port: not probed"
        );
        // A port in the spec wins; HTTP fields are resolved.
        let http = HealthCheck {
            kind: Some(HealthCheckType::Http),
            port: Some(8080),
            path: Some("/healthz".into()),
            expected_status: Some("204".into()),
            host: Some("gw.example".into()),
            interval_milliseconds: Some(500),
            ..Default::default()
        };
        let found = checks(&gateway(Some(http)));
        let b = found[2].1.clone().unwrap();
        assert_eq!(b.port, 8080);
        assert_eq!(b.path.as_deref(), Some("/healthz"));
        assert_eq!(b.expected_status, (204, 204));
        assert_eq!(b.host.as_deref(), Some("gw.example"));
        assert_eq!((b.interval_ms, b.timeout_ms), (500, 200));
    }

    #[test]
    fn a_check_added_or_removed_changes_what_the_writes_compare() {
        let mut with = super::super::plan::slice(
            "dev-team-cluster-a-gateway",
            "IPv4",
            &["10.0.0.1".into()],
            "*.gateway.cluster-a.dev-team.clusters.xcc.test",
            "dev-team/gw",
        );
        let without = with.clone();
        let check = HealthCheck::default().resolve(Some(443)).unwrap();
        set(&mut with, &check);
        let (with, without) = (Print::of(&with), Print::of(&without));
        assert!(!without.says(&with, None), "a check added is written");
        assert!(!with.says(&without, None), "a check removed is written");
        assert!(with.says(&with, None));
    }
}

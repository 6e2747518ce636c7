//! The global name of a GatewayDNS: whose gateways answer it, and its slices.

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

use xcc_kube::announcement::{GLOBAL_ANNOTATION, TTL_ANNOTATION};

use super::plan::{Candidate, GlobalMembers, Plan, slice};
use crate::{
    gatewaydns::{GlobalStrategy, NoneHealthy},
    settings::Global,
};

/// The global name `*.gateway.<namespace>.global.<zone>`.
pub fn global_hostname(namespace: &str, zone: &str) -> String {
    format!("*.gateway.{namespace}.global.{zone}")
}

/// The three global-name slice names of a cluster's gateway (never one of [`slice_names`]:
/// those end in `-gateway`, `-gateway-ipv6` or `-gateway-fqdn`).
pub fn global_slice_names(namespace: &str, cluster: &str) -> [String; 3] {
    let base = format!("{namespace}-{cluster}-global");
    [base.clone(), format!("{base}-ipv6"), format!("{base}-fqdn")]
}

/// Chooses whose gateways answer the global name (`global`'s strategy among the healthy
/// `candidates`, or its `whenNoneHealthy` fallback), and builds their slices.
pub(super) fn plan_global(
    out: &mut Plan,
    namespace: &str,
    reference: &str,
    zone: &str,
    global: &Global,
    candidates: &[Candidate],
) {
    let host = global_hostname(namespace, zone);
    let healthy: Vec<String> = candidates
        .iter()
        .filter(|(_, healthy, _)| *healthy)
        .map(|(c, _, _)| c.clone())
        .collect();
    let fallback: Vec<String> = match global.when_none_healthy {
        NoneHealthy::ServeAll => candidates.iter().map(|(c, _, _)| c.clone()).collect(),
        NoneHealthy::Nxdomain => Vec::new(),
    };
    out.global_members = match global.strategy {
        GlobalStrategy::RoundRobin if !healthy.is_empty() => GlobalMembers::Everyone(healthy),
        GlobalStrategy::Failover if !healthy.is_empty() => {
            let first = global
                .failover_order
                .iter()
                .find(|c| healthy.contains(c))
                .unwrap_or(&healthy[0]);
            GlobalMembers::Everyone(vec![first.clone()])
        }
        GlobalStrategy::LocalFirst => GlobalMembers::LocalFirst { healthy, fallback },
        _ => GlobalMembers::Everyone(fallback),
    };
    let ttl = global.ttl.to_string();
    out.global_hostname = host.clone();
    out.global_ttl = ttl.clone();
    for (cluster, _, addresses) in candidates {
        let names = global_slice_names(namespace, cluster);
        let mut slices = Vec::new();
        for ((name, kind), addresses) in names
            .iter()
            .zip(["IPv4", "IPv6", "FQDN"])
            .zip(addresses.iter())
        {
            if addresses.is_empty() {
                continue;
            }
            let mut global_slice = slice(name, kind, addresses, &host, reference);
            let annotations = global_slice.metadata.annotations.get_or_insert_default();
            annotations.insert(TTL_ANNOTATION.to_string(), ttl.clone());
            annotations.insert(GLOBAL_ANNOTATION.to_string(), "true".to_string());
            slices.push(global_slice);
        }
        out.global.insert(cluster.clone(), slices);
    }
}

/// Whether `slice` carries a global name.
pub fn is_global(slice: &EndpointSlice) -> bool {
    slice
        .annotations()
        .get(GLOBAL_ANNOTATION)
        .is_some_and(|v| v == "true")
}

//! The last addresses of a cluster that cannot be asked, read back from its slices elsewhere.

use std::collections::HashMap;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, Client, ResourceExt};

use crate::workload::CALL_TIMEOUT;
use crate::{
    desired::{self, Observation, SLICE_NAMESPACE},
    gatewaydns::{ClusterGatewayStatus, GatewayPort, GatewayState},
    workload::ClientError,
};

/// Clusters that cannot be asked now and whose last addresses `entries` does not have.
fn without_last_addresses(
    entries: &[ClusterGatewayStatus],
    observations: &HashMap<String, Observation>,
) -> Vec<String> {
    let mut missing: Vec<String> = observations
        .iter()
        .filter(|(_, seen)| {
            matches!(
                seen,
                Observation::Unreachable(_) | Observation::KubeconfigRejected(_)
            )
        })
        .map(|(cluster, _)| cluster)
        .filter(|cluster| {
            !entries
                .iter()
                .any(|e| &e.cluster == *cluster && !e.addresses.is_empty())
        })
        .cloned()
        .collect();
    missing.sort();
    missing
}

/// The entry of `cluster` as its slices in another cluster show it (the slices this GatewayDNS
/// wrote there, `reference`): its host name and its addresses in the order the status lists
/// them (IPv4, IPv6, host names). `None` when no such slice has an address.
fn entry_from_slices(
    cluster: &str,
    reference: &str,
    slices: &[EndpointSlice],
) -> Option<ClusterGatewayStatus> {
    let ours: Vec<&EndpointSlice> = slices
        .iter()
        .filter(|s| {
            s.annotations()
                .get(desired::REF_ANNOTATION)
                .map(String::as_str)
                == Some(reference)
        })
        .collect();
    let addresses: Vec<String> = ours
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    if addresses.is_empty() {
        return None;
    }
    let hostname = ours
        .iter()
        .find_map(|s| s.annotations().get(desired::HOSTNAME_ANNOTATION).cloned())
        .unwrap_or_default();
    let mut ports: Vec<GatewayPort> = ours
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|p| {
            Some(GatewayPort {
                name: p.name.clone()?,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port: u16::try_from(p.port?).ok()?,
            })
        })
        .collect();
    ports.sort();
    ports.dedup();
    Some(ClusterGatewayStatus {
        cluster: cluster.to_string(),
        hostname,
        state: GatewayState::Unreachable,
        addresses,
        ports,
        ..Default::default()
    })
}

/// Clusters asked for the slices of a cluster that cannot be asked itself, at most.
const RECOVERY_DONORS: usize = 3;

/// After a restart the status lists only some clusters (see `update_status`), so a selected
/// cluster that cannot be asked right now may have no last addresses: it would leave the
/// global name, and its own slices would only be kept, until it answers again. Its slices are
/// in every other cluster of the namespace: its last addresses are read back from the first of
/// a few reachable clusters that holds them. This runs in the first reconcile of a GatewayDNS
/// after the controller starts only (later ones have the entries of the one before), and asks
/// nothing when every such cluster is listed.
pub(super) async fn recover_last_addresses(
    entries: &mut Vec<ClusterGatewayStatus>,
    observations: &HashMap<String, Observation>,
    peers: &HashMap<String, Result<Client, ClientError>>,
    namespace: &str,
    reference: &str,
) {
    let missing = without_last_addresses(entries, observations);
    if missing.is_empty() {
        return;
    }
    // Selected clusters that answered this reconcile first, by name: they are known to answer.
    let mut donors: Vec<(&String, &Client)> = peers
        .iter()
        .filter(|(name, _)| {
            observations.get(*name).is_some_and(|seen| {
                !matches!(
                    seen,
                    Observation::Unreachable(_) | Observation::KubeconfigRejected(_)
                )
            })
        })
        .filter_map(|(name, client)| Some((name, client.as_ref().ok()?)))
        .collect();
    donors.sort_by(|a, b| a.0.cmp(b.0));
    donors.truncate(RECOVERY_DONORS);
    let donors = &donors;
    let recovered = futures::future::join_all(missing.iter().map(|cluster| async move {
        for (donor, client) in donors {
            let api: Api<EndpointSlice> = Api::namespaced((*client).clone(), SLICE_NAMESPACE);
            let names = desired::slice_names(namespace, cluster);
            let read = futures::future::join_all(
                names
                    .iter()
                    .map(|name| tokio::time::timeout(CALL_TIMEOUT, api.get_opt(name))),
            )
            .await;
            let slices: Vec<EndpointSlice> = read
                .into_iter()
                .filter_map(|r| r.ok()?.ok()?)
                .collect();
            if let Some(entry) = entry_from_slices(cluster, reference, &slices) {
                tracing::info!(
                    %cluster, %donor, gateway = %reference,
                    "last addresses of an unreachable cluster read back from another cluster's slices"
                );
                return Some(entry);
            }
        }
        None
    }))
    .await;
    for entry in recovered.into_iter().flatten() {
        entries.retain(|e| e.cluster != entry.cluster);
        entries.push(entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy_of(cluster: &str, kind: &str, addresses: &[&str], reference: &str) -> EndpointSlice {
        let name = match kind {
            "IPv4" => format!("dev-team-{cluster}-gateway"),
            "IPv6" => format!("dev-team-{cluster}-gateway-ipv6"),
            _ => format!("dev-team-{cluster}-gateway-fqdn"),
        };
        let mut slice = EndpointSlice {
            address_type: kind.into(),
            endpoints: vec![k8s_openapi::api::discovery::v1::Endpoint {
                addresses: addresses.iter().map(|a| a.to_string()).collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        slice.metadata.name = Some(name);
        slice.metadata.annotations = Some(
            [
                (desired::REF_ANNOTATION.to_string(), reference.to_string()),
                (
                    desired::HOSTNAME_ANNOTATION.to_string(),
                    format!("*.gateway.{cluster}.dev-team.clusters.xcc.test"),
                ),
            ]
            .into(),
        );
        slice
    }

    #[test]
    fn a_cluster_that_cannot_be_asked_and_is_not_listed_needs_its_addresses_read_back() {
        let observations: HashMap<String, Observation> = [
            ("a".to_string(), Observation::Unreachable("down".into())),
            (
                "b".to_string(),
                Observation::KubeconfigRejected("exec".into()),
            ),
            ("c".to_string(), Observation::Unreachable("down".into())),
            ("d".to_string(), Observation::NoAddress),
        ]
        .into();
        // `c` is listed with its addresses; `b` is listed without any (it never had one).
        let entries = vec![
            ClusterGatewayStatus {
                cluster: "c".into(),
                addresses: vec!["10.0.0.3".into()],
                ..Default::default()
            },
            ClusterGatewayStatus {
                cluster: "b".into(),
                ..Default::default()
            },
        ];
        assert_eq!(without_last_addresses(&entries, &observations), ["a", "b"]);
        assert!(without_last_addresses(&entries, &HashMap::new()).is_empty());
    }

    #[test]
    fn last_addresses_are_read_from_the_slices_this_gateway_wrote_elsewhere() {
        let ours = "dev-team/gateway-dns";
        let slices = vec![
            copy_of("a", "IPv4", &["10.0.0.1", "10.0.0.2"], ours),
            copy_of("a", "IPv6", &["fd00::1"], ours),
            copy_of("a", "FQDN", &["lb.example.com"], "other/gateway-dns"),
        ];
        let entry = entry_from_slices("a", ours, &slices).expect("addresses found");
        assert_eq!(entry.cluster, "a");
        assert_eq!(entry.addresses, ["10.0.0.1", "10.0.0.2", "fd00::1"]);
        assert_eq!(entry.hostname, "*.gateway.a.dev-team.clusters.xcc.test");
        assert_eq!(entry.state, GatewayState::Unreachable);
        // Slices of another GatewayDNS, or none at all, give nothing to go on.
        assert!(entry_from_slices("a", ours, &slices[2..]).is_none());
        assert!(entry_from_slices("a", ours, &[]).is_none());
    }
}

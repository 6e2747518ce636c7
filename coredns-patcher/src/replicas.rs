//! The CoreDNS replicas to ask: every ready endpoint of the EndpointSlices of CoreDNS's Service
//! (kube-system/kube-dns), each by its pod's name and its pod IP.
//!
//! The patcher runs in a pod of the cluster, which reaches any pod IP (the Kubernetes network
//! model), so each replica is asked directly rather than through the Service, whose answers
//! come from whichever replica kube-proxy picks.

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, Client, api::ListParams};

/// The port a replica is asked on when the slice names none for UDP.
const DNS_PORT: u16 = 53;

/// One CoreDNS replica.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Replica {
    /// Its pod's name (the endpoint's targetRef), or its address when the slice names no pod.
    pub name: String,
    pub address: SocketAddr,
}

/// Lists the EndpointSlices of Service `namespace/service` (label
/// `kubernetes.io/service-name`).
pub async fn list(
    client: Client,
    namespace: &str,
    service: &str,
) -> Result<Vec<Replica>, kube::Error> {
    let api: Api<EndpointSlice> = Api::namespaced(client, namespace);
    let params = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
    let slices = api.list(&params).await?;
    Ok(ready(&slices.items))
}

/// Every ready endpoint of `slices` (a missing `ready` counts as ready, as the API says), once,
/// sorted by name, at the slice's UDP DNS port: the port named `dns`, else its one UDP port,
/// else 53.
pub fn ready(slices: &[EndpointSlice]) -> Vec<Replica> {
    let mut out: Vec<Replica> = Vec::new();
    for slice in slices {
        let udp: Vec<_> = slice
            .ports
            .iter()
            .flatten()
            .filter(|p| p.protocol.as_deref() == Some("UDP"))
            .collect();
        let port = udp
            .iter()
            .find(|p| p.name.as_deref() == Some("dns"))
            .or(udp.first())
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(DNS_PORT);
        for endpoint in &slice.endpoints {
            let conditions = endpoint.conditions.as_ref();
            if conditions.and_then(|c| c.ready) == Some(false) {
                continue;
            }
            let Some(ip) = endpoint
                .addresses
                .first()
                .and_then(|a| a.parse::<IpAddr>().ok())
            else {
                continue;
            };
            let address = SocketAddr::new(ip, port);
            let name = endpoint
                .target_ref
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_else(|| ip.to_string());
            if !out.iter().any(|r| r.address == address) {
                out.push(Replica { name, address });
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(value: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn ready_endpoints_by_pod_name_at_the_dns_port() {
        let slices = [
            slice(json!({
                "metadata": {"name": "kube-dns-abc"},
                "addressType": "IPv4",
                "ports": [
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                    {"name": "metrics", "port": 9153, "protocol": "TCP"},
                    {"name": "dns", "port": 1053, "protocol": "UDP"},
                ],
                "endpoints": [
                    {"addresses": ["10.244.0.7"], "conditions": {"ready": true},
                     "targetRef": {"kind": "Pod", "name": "coredns-b"}},
                    {"addresses": ["10.244.0.8"], "conditions": {"ready": false},
                     "targetRef": {"kind": "Pod", "name": "coredns-terminating"}},
                    {"addresses": ["10.244.0.6"],
                     "targetRef": {"kind": "Pod", "name": "coredns-a"}},
                ],
            })),
            // Another family's slice, with no port names; and the same endpoint twice.
            slice(json!({
                "metadata": {"name": "kube-dns-def"},
                "addressType": "IPv6",
                "ports": [{"port": 53, "protocol": "UDP"}],
                "endpoints": [
                    {"addresses": ["fd00::9"], "conditions": {"ready": true}},
                ],
            })),
            slice(json!({
                "metadata": {"name": "kube-dns-ghi"},
                "addressType": "IPv4",
                "ports": [{"name": "dns", "port": 1053, "protocol": "UDP"}],
                "endpoints": [
                    {"addresses": ["10.244.0.7"], "targetRef": {"kind": "Pod", "name": "coredns-b"}},
                ],
            })),
        ];
        let replicas: Vec<String> = ready(&slices)
            .iter()
            .map(|r| format!("{} {}", r.name, r.address))
            .collect();
        assert_eq!(
            replicas,
            [
                "coredns-a 10.244.0.6:1053",
                "coredns-b 10.244.0.7:1053",
                "fd00::9 [fd00::9]:53"
            ]
        );
    }
}

//! The address CoreDNS forwards to: the ClusterIP of the agent's Service, waited for a little
//! because the patcher is often applied together with the Service.

use std::{net::IpAddr, time::Duration};

use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client};
use tokio::time::Instant;

use crate::report::kube_cause;

/// How often the Service is read while it has no ClusterIP (XCC's interval).
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// XCC's message, kept word for word.
    #[error("Timed out obtaining ClusterIP from service \"{service}\": {cause}")]
    Timeout { service: String, cause: String },
    #[error(
        "service \"{service}\" is headless (clusterIP: None), so there is no address to forward \
         to; give the agent a ClusterIP Service, or an address with --forward-to"
    )]
    Headless { service: String },
}

/// Reads Service `namespace/name` until it has a ClusterIP, for at most `wait` (one read at
/// least). Read errors — the Service not existing yet, most often — are retried until then and
/// reported as the cause of the time-out.
pub async fn wait_for_cluster_ip(
    client: Client,
    namespace: &str,
    name: &str,
    wait: Duration,
) -> Result<IpAddr, ServiceError> {
    let api: Api<Service> = Api::namespaced(client, namespace);
    let service = format!("{namespace}/{name}");
    let deadline = Instant::now() + wait;
    loop {
        // A read that hangs must not hold the job past its wait by much.
        let read_deadline = deadline.max(Instant::now() + POLL_INTERVAL);
        let cause = match tokio::time::timeout_at(read_deadline, api.get(name)).await {
            Err(_) => "no answer from the API server".to_string(),
            Ok(Err(error)) => kube_cause(&error),
            Ok(Ok(found)) => {
                match found
                    .spec
                    .and_then(|s| s.cluster_ip)
                    .as_deref()
                    .map(str::trim)
                {
                    None | Some("") => "the service has no ClusterIP yet".to_string(),
                    Some("None") => return Err(ServiceError::Headless { service }),
                    Some(ip) => match ip.parse() {
                        Ok(ip) => return Ok(ip),
                        Err(_) => format!("the service's ClusterIP {ip:?} is not an IP address"),
                    },
                }
            }
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(ServiceError::Timeout { service, cause });
        }
        tracing::debug!(%service, %cause, "waiting for the ClusterIP");
        tokio::time::sleep_until((now + POLL_INTERVAL).min(deadline)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use xcc_kube::scenario::{Scenario, status};

    const PATH: &str = "/api/v1/namespaces/xcc-dns/services/dns-server";

    fn service(cluster_ip: Option<&str>) -> (u16, serde_json::Value) {
        let body = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "dns-server", "namespace": "xcc-dns", "resourceVersion": "1"},
            "spec": {"clusterIP": cluster_ip, "ports": [{"port": 53}]},
        });
        (200, body)
    }

    fn not_found() -> (u16, serde_json::Value) {
        status(404, "NotFound", "services \"dns-server\" not found")
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_service_and_its_cluster_ip() {
        let (client, server) = Scenario::new()
            .expect("GET", PATH)
            .reply(not_found())
            .expect("GET", PATH)
            .reply(service(None))
            .expect("GET", PATH)
            .reply(service(Some("10.96.0.53")))
            .run();
        let ip = wait_for_cluster_ip(client, "xcc-dns", "dns-server", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(ip, "10.96.0.53".parse::<IpAddr>().unwrap());
        server.done().await;
    }

    #[tokio::test(start_paused = true)]
    async fn times_out_with_xccs_message_and_the_last_cause() {
        // 0 ms, 500 ms, ... 5 s: eleven reads.
        let scenario = (0..11).fold(Scenario::new(), |scenario, _| {
            scenario.expect("GET", PATH).reply(not_found())
        });
        let (client, server) = scenario.run();
        let started = Instant::now();
        let err = wait_for_cluster_ip(client, "xcc-dns", "dns-server", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Timed out obtaining ClusterIP from service \"xcc-dns/dns-server\": \
             services \"dns-server\" not found"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        server.done().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_headless_service_fails_at_once() {
        let (client, server) = Scenario::new()
            .expect("GET", PATH)
            .reply(service(Some("None")))
            .run();
        let err = wait_for_cluster_ip(client, "xcc-dns", "dns-server", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(err, ServiceError::Headless { .. }), "{err}");
        server.done().await;
    }
}

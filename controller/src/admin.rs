//! Admin HTTP on the shared router ([`xcc_sync::admin`]): `/healthz`, `/readyz` (this process
//! works; never "this process leads", so that a standby is ready and a rolling update
//! completes), `/metrics`, and `/gatewaydns/<namespace>/<name>`, every selected cluster's entry
//! of a GatewayDNS (its status lists at most 20).

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use axum::{
    Router,
    extract::Path,
    http::{StatusCode, header},
    routing::get,
};

use crate::{metrics::Metrics, reconcile::Details};

/// What the admin server reads.
#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    /// Raised once the client and the admin server are up.
    pub ready: Arc<AtomicBool>,
    pub details: Arc<Details>,
}

impl xcc_sync::admin::Probes for AdminState {
    fn health(&self) -> Result<(), String> {
        Ok(())
    }

    fn readiness(&self) -> Result<(), String> {
        match self.ready.load(Ordering::Acquire) {
            true => Ok(()),
            false => Err("not started\n".into()),
        }
    }

    fn metrics(&self) -> String {
        self.metrics.encode()
    }
}

/// The common routes and `/gatewaydns/<namespace>/<name>`.
pub fn router(state: AdminState) -> Router {
    let details = state.details.clone();
    let own = Router::new().route(
        "/gatewaydns/{namespace}/{name}",
        get(move |Path((namespace, name)): Path<(String, String)>| {
            let found = details.json(&namespace, &name);
            std::future::ready(match found {
                Some(json) => (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "application/json")],
                    json,
                ),
                None => (
                    StatusCode::NOT_FOUND,
                    [(header::CONTENT_TYPE, "text/plain")],
                    format!("GatewayDNS {namespace}/{name} is not reconciled here\n"),
                ),
            })
        }),
    );
    xcc_sync::admin::router(Arc::new(state), own)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xcc_sync::admin::testing::{get, get_accepting};

    #[tokio::test]
    async fn ready_once_started_and_an_unknown_gatewaydns_is_not_found() {
        let state = AdminState {
            metrics: Arc::new(Metrics::new()),
            ready: Arc::default(),
            details: Arc::default(),
        };
        let router = router(state.clone());
        assert_eq!(get(&router, "/healthz").await.2, "ok\n");
        let (status, _, body) = get(&router, "/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "not started\n")
        );
        state.ready.store(true, Ordering::Release);
        assert_eq!(get(&router, "/readyz").await.0, StatusCode::OK);
        let (status, kind, body) = get(&router, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(kind.as_deref(), Some(xcc_sync::admin::CLASSIC));
        assert!(body.contains("xcc_build_info"), "{body}");
        assert!(
            body.contains("# TYPE xcc_controller_reconciles_total counter\n"),
            "{body}"
        );
        let openmetrics = "application/openmetrics-text;version=1.0.0";
        let (_, kind, body) = get_accepting(&router, "/metrics", Some(openmetrics)).await;
        assert_eq!(kind.as_deref(), Some(xcc_sync::admin::OPENMETRICS));
        assert!(body.ends_with("# EOF\n"), "{body}");
        let (status, kind, body) = get(&router, "/gatewaydns/dev-team/missing").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(kind.as_deref(), Some("text/plain"));
        assert_eq!(body, "GatewayDNS dev-team/missing is not reconciled here\n");
    }
}

//! Admin HTTP: `/healthz` (the process answers and none of its core tasks has died), `/readyz`
//! (that, the table holds a first full load, and no shutdown has begun) and `/metrics` (in the
//! format the scraper asks for, [`xcc_sync::admin::negotiate`]). Neither depends on leading the
//! sync reconcilers: a standby replica serves DNS like the leader.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use axum::{
    Router,
    extract::{RawQuery, State},
    http::StatusCode,
    http::header,
    response::IntoResponse,
    routing::get,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use xcc_dns::RecordTable;
use xcc_sync::admin::Probes;

use crate::feed::{explain, metrics::Metrics, slices::SliceOrigins};

#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
    pub tasks: CoreTasks,
    /// The table DNS answers from, and where its slice sources came from (`/explain`).
    pub table: Arc<RecordTable>,
    pub origins: SliceOrigins,
    /// The probed gateways' health (`None`: standalone, nothing probed).
    pub health: Option<Arc<crate::feed::health::Health>>,
}

/// The tasks the process cannot work without (the DNS server, the record feed, the sync
/// reconcilers). One that ends while the process is not shutting down (an error, a panic) turns
/// `/healthz` and `/readyz` red, so that the kubelet restarts the pod instead of leaving a
/// process that answers HTTP and nothing else.
#[derive(Clone, Default)]
pub struct CoreTasks {
    dead: Arc<std::sync::Mutex<Vec<&'static str>>>,
    stopping: Arc<AtomicBool>,
}

impl CoreTasks {
    /// A guard to hold for as long as task `name` runs: dropped (the task returned, failed or
    /// panicked) before [`CoreTasks::stopping`], it marks the task dead.
    pub fn watch(&self, name: &'static str) -> TaskGuard {
        TaskGuard {
            tasks: self.clone(),
            name,
        }
    }

    /// The process is shutting down: tasks ending from now on are expected.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Whether the process is shutting down (`/readyz` fails while it drains).
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// The core tasks that ended unexpectedly.
    pub fn dead(&self) -> Vec<&'static str> {
        self.dead.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

pub struct TaskGuard {
    tasks: CoreTasks,
    name: &'static str,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if !self.tasks.stopping.load(Ordering::Acquire) {
            tracing::error!(
                task = self.name,
                "a core task ended; /healthz and /readyz now fail"
            );
            self.tasks
                .dead
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(self.name);
        }
    }
}

/// The process's admin routes: the common three and `/explain`.
pub fn router(state: AdminState) -> Router {
    let explain = Router::new()
        .route("/explain", get(explain_name))
        .with_state(state.clone());
    xcc_sync::admin::router(Arc::new(state), explain)
}

fn dead_tasks(state: &AdminState) -> Option<String> {
    let dead = state.tasks.dead();
    (!dead.is_empty()).then(|| format!("core task(s) ended: {}\n", dead.join(", ")))
}

impl Probes for AdminState {
    fn health(&self) -> Result<(), String> {
        dead_tasks(self).map_or(Ok(()), Err)
    }

    fn readiness(&self) -> Result<(), String> {
        if let Some(why) = dead_tasks(self) {
            Err(format!("not ready: {why}"))
        } else if self.tasks.is_stopping() {
            // Out of the Service's endpoints while DNS still answers (--shutdown-delay).
            Err("not ready: shutting down\n".into())
        } else if self.ready.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err("not ready: the record table has no first full load yet\n".into())
        }
    }

    fn metrics(&self) -> String {
        self.metrics.encode()
    }
}

/// `GET /explain?name=NAME[&type=A|AAAA|SRV]`: the answer and its provenance, as JSON. Read-only.
async fn explain_name(
    State(state): State<AdminState>,
    RawQuery(query): RawQuery,
) -> impl IntoResponse {
    let (status, body) = match explain::parse_query(query.as_deref()) {
        Ok((name, qtype)) => {
            let out = explain::explain_probed(
                &state.table,
                &state.origins,
                state.health.as_deref(),
                &name,
                qtype,
            );
            match serde_json::to_string(&out) {
                Ok(body) => (StatusCode::OK, body),
                Err(e) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    serde_json::json!({ "error": e.to_string() }).to_string(),
                ),
            }
        }
        Err(e) => (
            StatusCode::BAD_REQUEST,
            serde_json::json!({ "error": e.to_string() }).to_string(),
        ),
    };
    (status, [(header::CONTENT_TYPE, "application/json")], body)
}

/// Serves the admin routes until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    xcc_sync::admin::serve(listener, router(state), shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use xcc_sync::admin::{health as healthz, readiness as readyz};

    fn table() -> Arc<RecordTable> {
        Arc::new(
            RecordTable::new(
                vec![xcc_dns::Zone::new("xcc.test").unwrap()],
                xcc_dns::ZoneSettings::default(),
            )
            .unwrap(),
        )
    }

    fn state() -> AdminState {
        AdminState {
            metrics: Arc::new(Metrics::default()),
            ready: Arc::new(AtomicBool::new(true)),
            tasks: CoreTasks::default(),
            table: table(),
            origins: SliceOrigins::default(),
            health: None,
        }
    }

    async fn get_body(state: AdminState, uri: &str) -> (StatusCode, serde_json::Value) {
        let (status, _, body) = xcc_sync::admin::testing::get(&router(state), uri).await;
        (status, serde_json::from_str(&body).unwrap())
    }

    #[tokio::test]
    async fn explain_answers_json_and_refuses_bad_names() {
        let state = state();
        let index = crate::feed::slices::SliceIndex::new(state.table.clone());
        let state = AdminState {
            origins: index.origins(),
            ..state
        };
        let slice: k8s_openapi::api::discovery::v1::EndpointSlice =
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": "dev-team-cluster-a-gateway",
                    "namespace": "xcc-dns",
                    "annotations": {
                        "connectivity.tanzu.vmware.com/dns-hostname":
                            "*.gateway.cluster-a.dev-team.clusters.xcc.test",
                        "connectivity.tanzu.vmware.com/gateway-dns-ref": "dev-team/gateway-dns"
                    }
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.1.2.3"]}]
            }))
            .unwrap();
        index.apply(&slice).unwrap();
        let (status, body) = get_body(
            state.clone(),
            "/explain?name=kuard.gateway.cluster-a.dev-team.clusters.xcc.test",
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["rcode"], "NOERROR");
        assert_eq!(body["answers"][0]["data"], "10.1.2.3");
        assert_eq!(body["sources"][0]["gatewayDns"], "dev-team/gateway-dns");
        assert_eq!(
            body["sources"][0]["endpointSlice"]["name"],
            "dev-team-cluster-a-gateway"
        );
        assert_eq!(body["sources"][0]["cluster"]["name"], "cluster-a");

        let long = format!("/explain?name={}", "a".repeat(300));
        let (status, body) = get_body(state.clone(), &long).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body["error"].as_str().unwrap().contains("253"), "{body}");
        let (status, _) = get_body(state, "/explain").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn a_dead_core_task_turns_health_and_readiness_red_but_shutdown_does_not() {
        let state = state();
        let guard = state.tasks.watch("DNS server");
        assert_eq!(healthz(&state).0, StatusCode::OK);
        assert_eq!(readyz(&state).0, StatusCode::OK);
        // The task panics: its future, and the guard with it, is dropped.
        let task = tokio::spawn(async move {
            let _alive = guard;
            panic!("the DNS server failed");
        });
        assert!(task.await.is_err());
        let (status, body) = readyz(&state);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("DNS server"), "{body}");
        assert_eq!(healthz(&state).0, StatusCode::SERVICE_UNAVAILABLE);

        // During a shutdown, tasks end as they should.
        let tasks = CoreTasks::default();
        let guard = tasks.watch("record feed");
        tasks.stopping();
        drop(guard);
        assert!(tasks.dead().is_empty());
    }

    /// `xcc_panics_total` on `/metrics` rises when a task panics (and `/healthz` stays as it
    /// was: the task was no core task).
    #[tokio::test]
    async fn a_panicking_task_is_counted_on_the_metrics_route() {
        let router = router(state());
        let panics = |text: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix("xcc_panics_total "))
                .unwrap_or_else(|| panic!("no xcc_panics_total in {text}"))
                .parse()
                .unwrap()
        };
        let (_, _, before) = xcc_sync::admin::testing::get(&router, "/metrics").await;
        let before = panics(&before);
        let task = tokio::spawn(async { panic!("a panic the test causes, to be counted") });
        assert!(task.await.unwrap_err().is_panic());
        let (_, _, after) = xcc_sync::admin::testing::get(&router, "/metrics").await;
        // Other tests of this process may panic meanwhile: at least this one is counted.
        assert!(panics(&after) > before, "{after}");
        assert!(
            after.contains("# TYPE xcc_panics_total counter\n"),
            "{after}"
        );
        assert_eq!(
            xcc_sync::admin::testing::get(&router, "/healthz").await.0,
            StatusCode::OK
        );
    }

    #[tokio::test]
    async fn readiness_fails_while_shutting_down_and_health_stays_green() {
        let state = state();
        assert_eq!(readyz(&state).0, StatusCode::OK);
        state.tasks.stopping();
        let (status, body) = readyz(&state);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("shutting down"), "{body}");
        assert_eq!(healthz(&state).0, StatusCode::OK);
    }
}

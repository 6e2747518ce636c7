//! Admin HTTP: `/healthz` (the process answers and none of its core tasks has died), `/readyz`
//! (that, and the table holds a first full load) and `/metrics`. Neither depends on leading the
//! sync reconcilers: a standby replica serves DNS like the leader.

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{
    Router, extract::State, http::StatusCode, http::header, response::IntoResponse, routing::get,
};
use tokio::net::TcpListener;

use crate::metrics::Metrics;

#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
    pub tasks: CoreTasks,
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

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

fn dead_tasks(state: &AdminState) -> Option<String> {
    let dead = state.tasks.dead();
    (!dead.is_empty()).then(|| format!("core task(s) ended: {}\n", dead.join(", ")))
}

async fn healthz(State(state): State<AdminState>) -> (StatusCode, String) {
    match dead_tasks(&state) {
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
        None => (StatusCode::OK, "ok\n".into()),
    }
}

async fn readyz(State(state): State<AdminState>) -> (StatusCode, String) {
    if let Some(why) = dead_tasks(&state) {
        (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}"))
    } else if state.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n".into())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the record table has no first full load yet\n".into(),
        )
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dead_core_task_turns_health_and_readiness_red_but_shutdown_does_not() {
        let state = AdminState {
            metrics: Arc::new(Metrics::new()),
            ready: Arc::new(AtomicBool::new(true)),
            tasks: CoreTasks::default(),
        };
        let guard = state.tasks.watch("DNS server");
        assert_eq!(healthz(State(state.clone())).await.0, StatusCode::OK);
        assert_eq!(readyz(State(state.clone())).await.0, StatusCode::OK);
        // The task panics: its future, and the guard with it, is dropped.
        let task = tokio::spawn(async move {
            let _alive = guard;
            panic!("the DNS server failed");
        });
        assert!(task.await.is_err());
        let (status, body) = readyz(State(state.clone())).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("DNS server"), "{body}");
        assert_eq!(
            healthz(State(state.clone())).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );

        // During a shutdown, tasks end as they should.
        let tasks = CoreTasks::default();
        let guard = tasks.watch("record feed");
        tasks.stopping();
        drop(guard);
        assert!(tasks.dead().is_empty());
    }
}

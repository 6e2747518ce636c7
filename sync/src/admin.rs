//! The admin HTTP server of every xcc process: `/healthz`, `/readyz` and `/metrics` answered
//! from what the process says about itself ([`Probes`]), beside routes of its own (the agent's
//! `/explain`, the controller's `/gatewaydns/<ns>/<name>`), served until a
//! [`CancellationToken`] is cancelled.
//!
//! ```text
//!   GET /healthz  ─► Probes::health     200 "ok\n"    | 503 why
//!   GET /readyz   ─► Probes::readiness  200 "ready\n" | 503 why
//!   GET /metrics  ─► Probes::metrics    OpenMetrics text
//!   anything else ─► the process's own routes
//! ```

use std::sync::Arc;

use axum::{
    Router,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The content type of `/metrics`.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What a process says about itself on its admin server.
pub trait Probes: Send + Sync + 'static {
    /// `/healthz`: `Err(why)` (the whole body) when the process no longer works and should be
    /// restarted.
    fn health(&self) -> Result<(), String>;

    /// `/readyz`: `Err(why)` (the whole body) while the process should get no traffic.
    fn readiness(&self) -> Result<(), String>;

    /// `/metrics`: the process's registry in the OpenMetrics text format.
    fn metrics(&self) -> String;
}

/// The answer of `/healthz`.
pub fn health(probes: &dyn Probes) -> (StatusCode, String) {
    match probes.health() {
        Ok(()) => (StatusCode::OK, "ok\n".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

/// The answer of `/readyz`.
pub fn readiness(probes: &dyn Probes) -> (StatusCode, String) {
    match probes.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

/// The three common routes on `probes`, and `own` (the process's other routes) beside them.
pub fn router(probes: Arc<dyn Probes>, own: Router) -> Router {
    let (for_health, for_ready, for_metrics) = (probes.clone(), probes.clone(), probes);
    Router::new()
        .route(
            "/healthz",
            get(move || std::future::ready(health(&*for_health))),
        )
        .route(
            "/readyz",
            get(move || std::future::ready(readiness(&*for_ready))),
        )
        .route(
            "/metrics",
            get(move || {
                let text = for_metrics.metrics();
                std::future::ready(([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response())
            }),
        )
        .merge(own)
}

/// Serves `router` on `listener` until `shutdown` is cancelled; requests in flight then finish,
/// no new connection is accepted.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// For the tests of a process's admin routes: a request answered by a router, without a socket.
#[cfg(any(test, feature = "test-util"))]
pub mod testing {
    use axum::{
        Router,
        body::Body,
        http::{Request, StatusCode, header},
    };
    use tower::ServiceExt as _;

    /// What `GET uri` on `router` answers: its status, content type (if any) and body (text).
    pub async fn get(router: &Router, uri: &str) -> (StatusCode, Option<String>, String) {
        let request = Request::get(uri)
            .body(Body::empty())
            .expect("a GET request");
        let response = router
            .clone()
            .oneshot(request)
            .await
            .expect("a router always answers");
        let status = response.status();
        let kind = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().expect("a text content type").to_string());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("a body within 1 MiB");
        let body = String::from_utf8(body.to_vec()).expect("a UTF-8 body");
        (status, kind, body)
    }
}

#[cfg(test)]
mod tests {
    use super::{testing::get as fetch, *};
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Default)]
    struct Flags {
        broken: AtomicBool,
        ready: AtomicBool,
    }

    impl Probes for Flags {
        fn health(&self) -> Result<(), String> {
            match self.broken.load(Ordering::Acquire) {
                true => Err("broken\n".into()),
                false => Ok(()),
            }
        }

        fn readiness(&self) -> Result<(), String> {
            match self.ready.load(Ordering::Acquire) {
                true => Ok(()),
                false => Err("not started\n".into()),
            }
        }

        fn metrics(&self) -> String {
            "# EOF\n".into()
        }
    }

    #[tokio::test]
    async fn the_common_routes_answer_from_the_probes_and_the_own_routes_beside_them() {
        let flags = Arc::new(Flags::default());
        let own = Router::new().route("/own", get(|| async { "mine\n" }));
        let router = router(flags.clone(), own);

        assert_eq!(
            fetch(&router, "/healthz").await,
            (
                StatusCode::OK,
                Some("text/plain; charset=utf-8".into()),
                "ok\n".into()
            )
        );
        let (status, _, body) = fetch(&router, "/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "not started\n")
        );
        flags.ready.store(true, Ordering::Release);
        let (status, _, body) = fetch(&router, "/readyz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ready\n"));
        flags.broken.store(true, Ordering::Release);
        let (status, _, body) = fetch(&router, "/healthz").await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "broken\n")
        );

        let (status, kind, body) = fetch(&router, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(kind.as_deref(), Some(OPENMETRICS));
        assert_eq!(body, "# EOF\n");
        assert_eq!(fetch(&router, "/own").await.2, "mine\n");
        assert_eq!(fetch(&router, "/nothing").await.0, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn the_server_ends_when_its_token_is_cancelled() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let token = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener,
            router(Arc::new(Flags::default()), Router::new()),
            token.clone(),
        ));
        // It answers before the cancellation.
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok\n"), "{answer}");

        token.cancel();
        server.await.unwrap().unwrap();
        assert!(tokio::net::TcpStream::connect(address).await.is_err());
    }
}

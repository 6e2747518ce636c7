//! The admin HTTP server of every xcc process: `/healthz`, `/readyz` and `/metrics` answered
//! from what the process says about itself ([`Probes`]), beside routes of its own (the agent's
//! `/explain`, the controller's `/gatewaydns/<ns>/<name>`), served until a
//! [`CancellationToken`] is cancelled.
//!
//! ```text
//!   GET /healthz  ─► Probes::health     200 "ok\n"    | 503 why
//!   GET /readyz   ─► Probes::readiness  200 "ready\n" | 503 why
//!   GET /metrics  ─► Probes::metrics    OpenMetrics text when the Accept header asks for it,
//!                                       else the classic text format 0.0.4
//!   anything else ─► the process's own routes
//! ```

use std::sync::Arc;

use axum::{
    Router,
    http::{HeaderMap, StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The content type of `/metrics` in the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of `/metrics` in the classic Prometheus text format.
pub const CLASSIC: &str = xcc_kube::metrics::classic::CONTENT_TYPE;

/// The format of one `/metrics` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0 (`application/openmetrics-text`).
    OpenMetrics,
    /// The classic Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
    Classic,
}

/// The format an `Accept` header asks for, as the Prometheus Go client chooses it: the media
/// ranges by preference (`q`, highest first, then in their order; `q=0` refused), the first
/// that names OpenMetrics (version 1.0.0, 0.0.1 or none) or the classic format (`text/plain`,
/// version 0.0.4 or none) wins; anything else, or no header, gets the classic format.
pub fn negotiate(accept: Option<&str>) -> Format {
    let mut ranges: Vec<(f32, usize, Format)> = Vec::new();
    for (position, range) in accept.unwrap_or("").split(',').enumerate() {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let (mut q, mut version) = (1.0_f32, None);
        for parameter in parts {
            let Some((key, value)) = parameter.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match key.trim().to_ascii_lowercase().as_str() {
                "q" => q = value.parse().unwrap_or(0.0),
                "version" => version = Some(value.to_string()),
                _ => {}
            }
        }
        let format = match (media.as_str(), version.as_deref()) {
            ("application/openmetrics-text", None | Some("1.0.0" | "0.0.1")) => Format::OpenMetrics,
            ("text/plain", None | Some("0.0.4")) => Format::Classic,
            _ => continue,
        };
        if q > 0.0 {
            ranges.push((q, position, format));
        }
    }
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranges
        .first()
        .map_or(Format::Classic, |(_, _, format)| *format)
}

/// The answer of `/metrics` to a request with `headers`, from the OpenMetrics text
/// `openmetrics`.
pub fn metrics_answer(headers: &HeaderMap, openmetrics: String) -> axum::response::Response {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let accept = (!accept.is_empty()).then_some(accept.as_str());
    match negotiate(accept) {
        Format::OpenMetrics => ([(header::CONTENT_TYPE, OPENMETRICS)], openmetrics).into_response(),
        Format::Classic => {
            let classic = xcc_kube::metrics::classic::from_openmetrics(&openmetrics);
            ([(header::CONTENT_TYPE, CLASSIC)], classic).into_response()
        }
    }
}

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
            get(move |headers: HeaderMap| {
                std::future::ready(metrics_answer(&headers, for_metrics.metrics()))
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
        get_accepting(router, uri, None).await
    }

    /// What `GET uri` on `router` answers to a request with `accept` as its `Accept` header.
    pub async fn get_accepting(
        router: &Router,
        uri: &str,
        accept: Option<&str>,
    ) -> (StatusCode, Option<String>, String) {
        let mut request = Request::get(uri);
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        let request = request.body(Body::empty()).expect("a GET request");
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
            "# HELP up Up.\n# TYPE up counter\nup_total 1\nup_created 1.5\n# EOF\n".into()
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

        assert_eq!(fetch(&router, "/own").await.2, "mine\n");
        assert_eq!(fetch(&router, "/nothing").await.0, StatusCode::NOT_FOUND);
    }

    /// What Prometheus 2 and 3 send, and what other scrapers (curl, an old Prometheus, the
    /// Go client's tests) send.
    #[test]
    fn the_format_is_negotiated_as_the_go_client_does() {
        use Format::{Classic, OpenMetrics};
        for (accept, wanted) in [
            (None, Classic),
            (Some(""), Classic),
            (Some("*/*"), Classic),
            (Some("text/plain;version=0.0.4"), Classic),
            (Some("text/plain"), Classic),
            (Some("application/openmetrics-text"), OpenMetrics),
            (
                Some("application/openmetrics-text; version=1.0.0"),
                OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;version=0.0.1"),
                OpenMetrics,
            ),
            // Prometheus 2.x.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                     version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                OpenMetrics,
            ),
            // Prometheus 3.x.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
                     application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;\
                     escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
                ),
                OpenMetrics,
            ),
            // Prometheus configured with scrape_protocols: [PrometheusText0.0.4, OpenMetricsText1.0.0].
            (
                Some(
                    "text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0;\
                     q=0.4,*/*;q=0.3",
                ),
                Classic,
            ),
            // The preference decides, not the order.
            (
                Some("text/plain;version=0.0.4;q=0.2, application/openmetrics-text;q=0.9"),
                OpenMetrics,
            ),
            // Equal preference: the first.
            (Some("text/plain, application/openmetrics-text"), Classic),
            // Refused, or versions we do not write: the next range, else the classic format.
            (
                Some("application/openmetrics-text;q=0, text/plain"),
                Classic,
            ),
            (Some("application/openmetrics-text;version=2.0.0"), Classic),
            (
                Some("text/plain;version=1.0.0, application/openmetrics-text;q=0.1"),
                OpenMetrics,
            ),
            (
                Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily"),
                Classic,
            ),
            (
                Some("APPLICATION/OpenMetrics-Text; Version=\"1.0.0\""),
                OpenMetrics,
            ),
        ] {
            assert_eq!(negotiate(accept), wanted, "Accept: {accept:?}");
        }
    }

    #[tokio::test]
    async fn metrics_are_served_in_the_format_asked_for() {
        use testing::get_accepting;
        let router = router(Arc::new(Flags::default()), Router::new());
        let openmetrics = "# HELP up Up.\n# TYPE up counter\nup_total 1\nup_created 1.5\n# EOF\n";
        let classic = "# HELP up_total Up.\n# TYPE up_total counter\nup_total 1\n";
        for (accept, kind, body) in [
            (None, CLASSIC, classic),
            (Some("text/plain;version=0.0.4"), CLASSIC, classic),
            (
                Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
                OPENMETRICS,
                openmetrics,
            ),
        ] {
            let (status, served_kind, served) = get_accepting(&router, "/metrics", accept).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(served_kind.as_deref(), Some(kind), "Accept: {accept:?}");
            assert_eq!(served, body, "Accept: {accept:?}");
        }
        assert_eq!(CLASSIC, "text/plain; version=0.0.4; charset=utf-8");
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

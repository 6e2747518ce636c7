//! API servers over HTTP/2: a client's watches share a few TLS connections.
//!
//! Every client of the xcc binaries is built here, for its own cluster and for peers.
//! kube's client speaks HTTP/1.1, where every open watch holds a connection (and its TLS
//! handshake) of its own: a thousand SecretImports from one service cluster were a thousand
//! connections. Here requests to a peer are streams of HTTP/2 connections negotiated by ALPN. A
//! connection carries at most [`STREAMS_PER_CONNECTION`] requests at once (the API server's
//! default limit is higher, so no request queues behind the server's); the next request opens a
//! new connection. A stream is taken until its response body is dropped, so a watch holds one
//! for as long as it runs.
//!
//! Requests that upgrade the connection (exec, attach, port-forward over WebSocket or SPDY) and
//! servers that do not offer `h2` take kube's own HTTP/1.1 stack. A peer that stops answering is
//! noticed by HTTP/2 PINGs: its connections close and the next request dials again. Sockets
//! are `TCP_NODELAY`: a request's last segment never waits for the server's delayed ACK.

use std::{
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, combinators::UnsyncBoxBody};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use kube::{Client, Config, client::ConfigExt};
use rustls::pki_types::ServerName;
use tower::{BoxError, ServiceBuilder};

/// Requests at once on one connection before another is opened.
pub const STREAMS_PER_CONNECTION: usize = 100;
/// Deadline of a TCP connect plus TLS and HTTP/2 handshakes when the kubeconfig sets none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// PING interval and deadline: a connection whose peer is silent this long is closed.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A client for `config`: HTTP/2 streams when the server is reached over TLS without a proxy,
/// kube's HTTP/1.1 client otherwise.
///
/// Neither path retries on its own: kube's default retry of 429/503/504 (up to 15 times, with
/// delays growing to minutes) would hold a reconciler, or a request the aggregated API server
/// forwards, long after the answer came. Callers see every answer and retry on their own
/// schedule ([`crate::Backoff`]).
///
/// A request that gets no answer fails with the server's URL in its error
/// ([`crate::report::Unanswered`]), so that whoever says the error can say where.
pub fn client(mut config: Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    let default_ns = config.default_namespace.clone();
    let named = crate::report::Unanswered::layer(&config.cluster_url);
    let http1 = Client::try_from(config.clone())?;
    let Some(peer) = Peer::new(&config)? else {
        return Ok(kube::client::ClientBuilder::try_from(config)?
            .with_layer(&named)
            .build());
    };
    let peer = Arc::new(peer);
    let streams = ServiceBuilder::new()
        .layer(config.extra_headers_layer()?)
        .option_layer(config.auth_layer()?)
        .layer(config.base_uri_layer())
        .service(Streams(peer.clone()));
    let router = Router {
        peer,
        streams: tower::util::BoxCloneSyncService::new(streams),
        http1: Through(http1),
    };
    let service = ServiceBuilder::new().layer(named).service(router);
    Ok(kube::client::ClientBuilder::new(service, default_ns).build())
}

/// A bearer token shared by the clients that send it, replaced in place when it is renewed: a
/// client made by [`client_with_token`] sends the current one with every request, so that
/// long-lived users (watches that reconnect) never hold an expired token.
#[derive(Clone, Default)]
pub struct SharedToken(Arc<std::sync::RwLock<Option<http::HeaderValue>>>);

impl std::fmt::Debug for SharedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedToken(..)")
    }
}

impl SharedToken {
    /// Sends `token` from now on.
    pub fn set(&self, token: &str) -> Result<(), http::header::InvalidHeaderValue> {
        let mut value = http::HeaderValue::from_str(&format!("Bearer {token}"))?;
        value.set_sensitive(true);
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(value);
        Ok(())
    }

    /// Whether a token was set.
    pub fn is_set(&self) -> bool {
        self.0.read().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    fn header(&self) -> Option<http::HeaderValue> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// [`client`] for `config`'s server that authenticates with `token` (as it is at each request)
/// instead of the credentials `config` names: another identity of the same process, for
/// example a second ServiceAccount whose tokens it requests.
pub fn client_with_token(mut config: Config, token: SharedToken) -> Result<Client, kube::Error> {
    config.auth_info = Default::default();
    let default_ns = config.default_namespace.clone();
    let inner = client(config)?;
    let service = ServiceBuilder::new()
        .map_request(move |mut request: Request<kube::client::Body>| {
            if let Some(value) = token.header() {
                request
                    .headers_mut()
                    .insert(http::header::AUTHORIZATION, value);
            }
            request
        })
        .service(Through(inner));
    Ok(kube::client::ClientBuilder::new(service, default_ns).build())
}

/// A kube client as a tower service.
#[derive(Clone)]
struct Through(Client);

impl tower::Service<Request<kube::client::Body>> for Through {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let client = self.0.clone();
        Box::pin(async move {
            let response = client.send(request).await?;
            Ok(response.map(|body| body.map_err(BoxError::from).boxed_unsync()))
        })
    }
}

/// Where to dial and how to verify the peer.
struct Peer {
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
    connect_timeout: Duration,
    /// Open connections; a connection's slot count is taken under this lock.
    connections: Mutex<Vec<Connection>>,
    /// One dial at a time: requests that find every connection full wait for it rather than
    /// each opening their own.
    dialing: tokio::sync::Mutex<()>,
    /// The server answered ALPN without `h2`: every request takes HTTP/1.1.
    no_h2: AtomicBool,
    /// A connection negotiated `h2`: requests take streams.
    h2: AtomicBool,
}

struct Connection {
    sender: SendRequest<kube::client::Body>,
    streams: Arc<AtomicUsize>,
}

impl Peer {
    /// `None` when the server is not reached directly over TLS.
    fn new(config: &Config) -> Result<Option<Peer>, kube::Error> {
        let url = &config.cluster_url;
        if url.scheme_str() != Some("https") || config.proxy_url.is_some() {
            return Ok(None);
        }
        let Some(host) = url.host() else {
            return Ok(None);
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let name = config
            .tls_server_name
            .clone()
            .unwrap_or_else(|| host.clone());
        let Ok(server_name) = ServerName::try_from(name) else {
            return Ok(None);
        };
        let mut tls = config.rustls_client_config()?;
        tls.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Some(Peer {
            port: url.port_u16().unwrap_or(443),
            host,
            server_name,
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
            connect_timeout: config.connect_timeout.unwrap_or(CONNECT_TIMEOUT),
            connections: Mutex::new(Vec::new()),
            dialing: tokio::sync::Mutex::new(()),
            no_h2: AtomicBool::new(false),
            h2: AtomicBool::new(false),
        }))
    }

    /// Whether requests take HTTP/2 streams, found by the first connection's ALPN. Errors other
    /// than a refusal of `h2` leave the question open for the next request (and fail this one on
    /// the stream path, with the error).
    async fn speaks_h2(&self) -> bool {
        if self.h2.load(Ordering::Relaxed) {
            return true;
        }
        if self.no_h2.load(Ordering::Relaxed) {
            return false;
        }
        let _dialing = self.dialing.lock().await;
        if self.h2.load(Ordering::Relaxed) || self.no_h2.load(Ordering::Relaxed) {
            return self.h2.load(Ordering::Relaxed);
        }
        match tokio::time::timeout(self.connect_timeout, self.dial()).await {
            Ok(Ok(sender)) => {
                self.lock().push(Connection {
                    sender,
                    streams: Arc::new(AtomicUsize::new(0)),
                });
                true
            }
            Ok(Err(_)) => !self.no_h2.load(Ordering::Relaxed),
            Err(_) => true,
        }
    }

    /// A stream slot on a connection with room, dialing one when none has.
    async fn slot(&self) -> Result<(SendRequest<kube::client::Body>, Slot), BoxError> {
        if let Some(taken) = self.take_slot() {
            return Ok(taken);
        }
        let _dialing = self.dialing.lock().await;
        // Another request may have dialed while this one waited.
        if let Some(taken) = self.take_slot() {
            return Ok(taken);
        }
        let sender = tokio::time::timeout(self.connect_timeout, self.dial())
            .await
            .map_err(|_| {
                format!(
                    "no connection to {}:{} within {:?}",
                    self.host, self.port, self.connect_timeout
                )
            })??;
        let streams = Arc::new(AtomicUsize::new(1));
        let slot = Slot(streams.clone());
        self.lock().push(Connection {
            sender: sender.clone(),
            streams,
        });
        Ok((sender, slot))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.connections.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take_slot(&self) -> Option<(SendRequest<kube::client::Body>, Slot)> {
        let mut connections = self.lock();
        connections.retain(|c| !c.sender.is_closed());
        let connection = connections
            .iter()
            .find(|c| c.streams.load(Ordering::Relaxed) < STREAMS_PER_CONNECTION)?;
        connection.streams.fetch_add(1, Ordering::Relaxed);
        Some((connection.sender.clone(), Slot(connection.streams.clone())))
    }

    async fn dial(&self) -> Result<SendRequest<kube::client::Body>, BoxError> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port)).await?;
        tcp.set_nodelay(true)?;
        let tls = self.tls.connect(self.server_name.clone(), tcp).await?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            self.no_h2.store(true, Ordering::Relaxed);
            return Err(NoH2.into());
        }
        self.h2.store(true, Ordering::Relaxed);
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .handshake(TokioIo::new(tls))
            .await?;
        let peer = format!("{}:{}", self.host, self.port);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "HTTP/2 connection to a peer closed");
            }
        });
        Ok(sender)
    }
}

/// The server did not offer `h2` in ALPN.
#[derive(Debug, thiserror::Error)]
#[error("the server does not speak HTTP/2")]
struct NoH2;

/// One stream of a connection, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that holds its stream's slot until it is dropped.
struct SlotBody {
    body: hyper::body::Incoming,
    _slot: Slot,
}

impl http_body::Body for SlotBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Requests (with absolute URIs) as streams of the peer's connections.
#[derive(Clone)]
struct Streams(Arc<Peer>);

impl tower::Service<Request<kube::client::Body>> for Streams {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let peer = self.0.clone();
        Box::pin(async move {
            let (mut sender, slot) = peer.slot().await?;
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            Ok(response.map(|body| {
                SlotBody { body, _slot: slot }
                    .map_err(BoxError::from)
                    .boxed_unsync()
            }))
        })
    }
}

/// HTTP/2 streams, or kube's HTTP/1.1 client for upgrades and servers without `h2`.
#[derive(Clone)]
struct Router {
    peer: Arc<Peer>,
    streams:
        tower::util::BoxCloneSyncService<Request<kube::client::Body>, Response<Body>, BoxError>,
    http1: Through,
}

impl tower::Service<Request<kube::client::Body>> for Router {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let upgrade = request.headers().contains_key(http::header::UPGRADE);
        let peer = self.peer.clone();
        let mut http1 = self.http1.clone();
        let mut streams = self.streams.clone();
        Box::pin(async move {
            use tower::ServiceExt as _;
            if upgrade || !peer.speaks_h2().await {
                return http1.call(request).await;
            }
            streams.ready().await?.call(request).await
        })
    }
}

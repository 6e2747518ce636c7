//! The gateway prober: one task per probed address ([`super::health::Target`]), all under one
//! supervisor per agent ([`run`]), probing at the check's interval with ±10 % jitter (and a
//! random first delay within one interval, so that targets do not probe in step), at most
//! [`CONCURRENCY`] probes at a time. A probe is a TCP connect, or an HTTP/1.1 `GET` (over TLS for
//! `https`, with the check's host as SNI and `Host`, the certificate not verified) whose status
//! line must carry an expected status; each is bounded by the check's timeout and reads at most
//! [`MAX_RESPONSE`] bytes.

use std::{
    collections::HashMap,
    hash::{BuildHasher, Hasher},
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::TcpStream,
    sync::Semaphore,
    task::JoinSet,
    time::Instant,
};
use tokio_util::sync::CancellationToken;
use xcc_kube::health_check::ProbeKind;

use super::health::{Health, ProbeError, Target};

/// Most probes in flight at once, per agent.
pub const CONCURRENCY: usize = 64;
/// Most bytes of an HTTP answer read (its status line is all that counts).
pub const MAX_RESPONSE: usize = 1024;

/// How probes connect: TLS for `https`, from `source` (any port) when set.
#[derive(Clone)]
pub struct Connector {
    tls: tokio_rustls::TlsConnector,
    source: Option<IpAddr>,
}

impl Connector {
    /// Probes sent from `source` (default: the address the routing table picks).
    pub fn new(source: Option<IpAddr>) -> Connector {
        Connector {
            tls: tls_connector(),
            source,
        }
    }

    async fn connect(&self, address: SocketAddr) -> std::io::Result<TcpStream> {
        let Some(source) = self.source else {
            return TcpStream::connect(address).await;
        };
        let socket = match address {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.bind(SocketAddr::new(source, 0))?;
        socket.connect(address).await
    }
}

/// Probes every target of `health` from `source` (when set) until `stop`.
pub async fn run(health: Arc<Health>, source: Option<IpAddr>, stop: CancellationToken) {
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let tls = Connector::new(source);
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut running: HashMap<Target, tokio::task::AbortHandle> = HashMap::new();
    loop {
        let wanted = health.targets();
        running.retain(|target, handle| {
            let keep = wanted.contains(target);
            if !keep {
                handle.abort();
            }
            keep
        });
        for target in wanted {
            if running.contains_key(&target) {
                continue;
            }
            let handle = tasks.spawn(probe_loop(
                health.clone(),
                target.clone(),
                permits.clone(),
                tls.clone(),
            ));
            running.insert(target, handle);
        }
        tokio::select! {
            () = health.targets_changed() => {}
            () = stop.cancelled() => break,
            // Reap finished tasks: aborted ones, and one that panicked, which is started
            // again on the next turn while its target is wanted.
            Some(ended) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                let id = match &ended {
                    Ok((id, ())) => *id,
                    Err(error) => {
                        if error.is_panic() {
                            tracing::error!("a gateway probe task panicked; starting it again");
                        }
                        error.id()
                    }
                };
                running.retain(|_, handle| handle.id() != id);
            }
        }
    }
    tasks.abort_all();
}

/// A random fraction in [0, 1).
fn random_fraction() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

async fn probe_loop(health: Arc<Health>, target: Target, permits: Arc<Semaphore>, tls: Connector) {
    let interval = Duration::from_millis(u64::from(target.check.interval_ms));
    tokio::time::sleep(interval.mul_f64(random_fraction())).await;
    loop {
        let started = Instant::now();
        let result = {
            let Ok(_permit) = permits.acquire().await else {
                return;
            };
            let begun = Instant::now();
            let result = probe(&target, &tls).await;
            (result, begun.elapsed())
        };
        health.record(&target, result.0, result.1);
        let next = started + interval.mul_f64(0.9 + 0.2 * random_fraction());
        tokio::time::sleep_until(next).await;
    }
}

/// One probe of `target`, within its check's timeout.
pub async fn probe(target: &Target, tls: &Connector) -> Result<(), ProbeError> {
    let timeout = Duration::from_millis(u64::from(target.check.timeout_ms));
    tokio::time::timeout(timeout, probe_once(target, tls))
        .await
        .unwrap_or(Err(ProbeError::Timeout))
}

async fn probe_once(target: &Target, tls: &Connector) -> Result<(), ProbeError> {
    let address = SocketAddr::new(target.address, target.check.port);
    let stream = tls.connect(address).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => ProbeError::Refused,
        _ => ProbeError::Other(format!("connect: {e}")),
    })?;
    let check = &target.check;
    let host = check
        .host
        .clone()
        .unwrap_or_else(|| host_of(target.address, check.port));
    match check.kind {
        ProbeKind::Tcp => Ok(()),
        ProbeKind::Http => http_get(stream, target, &host).await,
        ProbeKind::Https => {
            let name = server_name(check.host.as_deref(), target.address)?;
            let stream = tls
                .tls
                .connect(name, stream)
                .await
                .map_err(|e| ProbeError::Other(format!("TLS: {e}")))?;
            http_get(stream, target, &host).await
        }
    }
}

fn host_of(address: IpAddr, port: u16) -> String {
    match address {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

fn server_name(
    host: Option<&str>,
    address: IpAddr,
) -> Result<rustls_pki_types::ServerName<'static>, ProbeError> {
    match host {
        Some(host) => {
            let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
            rustls_pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| ProbeError::Other(format!("TLS server name: {e}")))
        }
        None => Ok(rustls_pki_types::ServerName::IpAddress(address.into())),
    }
}

/// `GET path` on `stream`; passes when the status is in the check's range.
async fn http_get<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    target: &Target,
    host: &str,
) -> Result<(), ProbeError> {
    let path = target.check.path.as_deref().unwrap_or("/");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: xcc-agent-health-check\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    let io = |e: std::io::Error| ProbeError::Other(format!("HTTP: {e}"));
    stream.write_all(request.as_bytes()).await.map_err(io)?;
    let mut buffer = vec![0u8; MAX_RESPONSE];
    let mut read = 0;
    while !buffer[..read].contains(&b'\n') && read < buffer.len() {
        let n = stream.read(&mut buffer[read..]).await.map_err(io)?;
        if n == 0 {
            break;
        }
        read += n;
    }
    let status = parse_status(&buffer[..read])?;
    let (low, high) = target.check.expected_status;
    if (low..=high).contains(&status) {
        Ok(())
    } else {
        Err(ProbeError::Status(status))
    }
}

/// The status code of an HTTP/1.x status line.
fn parse_status(head: &[u8]) -> Result<u16, ProbeError> {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    match (words.next(), words.next()) {
        (Some(version), Some(code)) if version.starts_with("HTTP/1.") => code
            .parse()
            .map_err(|_| ProbeError::Other("not an HTTP status line".into())),
        _ if head.is_empty() => Err(ProbeError::Other("HTTP: no answer".into())),
        _ => Err(ProbeError::Other("not an HTTP status line".into())),
    }
}

/// A TLS client that accepts any certificate: a probe sends nothing secret, and a load
/// balancer's certificate rarely names the address it is probed on.
fn tls_connector() -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xcc_kube::health_check::HealthCheck;

    fn target(kind: ProbeKind, port: u16, path: Option<&str>) -> Target {
        Target {
            address: "127.0.0.1".parse().unwrap(),
            check: HealthCheck {
                kind,
                port,
                path: path.map(String::from),
                host: None,
                expected_status: (200, 299),
                interval_ms: 250,
                timeout_ms: 200,
                failure_threshold: 2,
                success_threshold: 2,
            },
        }
    }

    /// Answers every connection with `status`.
    async fn http_server(status: u16) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buffer = [0u8; 512];
                let _ = stream.read(&mut buffer).await;
                let _ = stream
                    .write_all(
                        format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n").as_bytes(),
                    )
                    .await;
            }
        });
        port
    }

    #[tokio::test]
    async fn probes_say_what_they_found() {
        let tls = Connector::new(None);
        let ok = http_server(204).await;
        let bad = http_server(503).await;
        assert_eq!(probe(&target(ProbeKind::Tcp, ok, None), &tls).await, Ok(()));
        assert_eq!(
            probe(&target(ProbeKind::Http, ok, Some("/healthz")), &tls).await,
            Ok(())
        );
        assert_eq!(
            probe(&target(ProbeKind::Http, bad, Some("/")), &tls).await,
            Err(ProbeError::Status(503))
        );
        // A port nobody listens on.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        assert_eq!(
            probe(&target(ProbeKind::Tcp, closed, None), &tls).await,
            Err(ProbeError::Refused)
        );
        // A listener that never answers the request: the timeout.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = silent.local_addr().unwrap().port();
        assert_eq!(
            probe(&target(ProbeKind::Http, port, Some("/")), &tls).await,
            Err(ProbeError::Timeout)
        );
    }

    #[tokio::test]
    async fn probes_go_from_the_source_address_when_one_is_set() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let source: IpAddr = "127.0.0.2".parse().unwrap();
        let accepted = tokio::spawn(async move { listener.accept().await.unwrap().1 });
        let (probed, connector) = (
            target(ProbeKind::Tcp, port, None),
            Connector::new(Some(source)),
        );
        assert_eq!(probe(&probed, &connector).await, Ok(()));
        assert_eq!(accepted.await.unwrap().ip(), source);
    }

    #[test]
    fn status_lines_are_parsed_strictly() {
        assert_eq!(parse_status(b"HTTP/1.1 200 OK\r\n"), Ok(200));
        assert_eq!(parse_status(b"HTTP/1.0 404\r\n"), Ok(404));
        assert!(parse_status(b"SSH-2.0-OpenSSH\r\n").is_err());
        assert!(parse_status(b"").is_err());
    }
}

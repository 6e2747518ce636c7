//! The HTTPS listener of the aggregated API server: the serving certificates (chosen by the
//! name a client asks for), the front proxy's settings and the TLS configuration made from
//! them, and each connection's caller as its client certificate shows it.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use dashmap::DashMap;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use rustls::{
    ServerConfig,
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

use http::{Response, StatusCode};

use super::{Body, Proxy, front, status};
use front::FrontProxy;

/// How long a TLS handshake may take.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// How often the front proxy's settings are read again.
const FRONT_PROXY_REFRESH: Duration = Duration::from_secs(30);

/// What the log lines of [`Proxy::refresh_front`] name.
const FRONT_SETTINGS: &str = "the aggregated API server's front-proxy settings";

/// What the front-proxy refresher has said: the outages of its read, and the standing problem
/// of the settings.
pub struct FrontLog {
    read: xcc_sync::outage::Outage,
    settings: xcc_sync::outage::Standing,
}
/// The serving certificates, by the server name a client asks for (every TLS handshake reads
/// it, the link reconciler writes it).
#[derive(Debug, Default)]
pub struct Certs(DashMap<String, Arc<CertifiedKey>>);

impl ResolvesServerCert for Certs {
    /// The certificate of the name asked for; without a known name (kube-aggregator's
    /// availability check dials the cluster IP without SNI and without verifying), any one:
    /// certificates are public, and a client that verifies refuses a wrong one.
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let named = hello
            .server_name()
            .and_then(|name| self.0.get(name).map(|cert| cert.clone()));
        named.or_else(|| self.0.iter().next().map(|cert| cert.clone()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("no certificate in tls.crt")]
    NoCertificate,
    #[error("tls.crt: {0}")]
    Certificate(String),
    #[error("tls.key: {0}")]
    Key(String),
}

/// The front proxy's settings and the TLS configuration made from them.
pub(super) struct Front {
    settings: FrontProxy,
    tls: Arc<ServerConfig>,
}

impl Proxy {
    /// Serves `name` (the Service's DNS name) with PEM `cert` (chain) and `key`.
    pub fn set_cert(&self, name: &str, cert: &[u8], key: &[u8]) -> Result<(), CertError> {
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CertError::Certificate(xcc_kube::bounded(&e)))?;
        if chain.is_empty() {
            return Err(CertError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| CertError::Key(xcc_kube::bounded(&e)))?;
        let provider = rustls::crypto::ring::default_provider();
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| CertError::Key(xcc_kube::bounded(&e)))?;
        let certified = CertifiedKey::new(chain, signing);
        certified
            .keys_match()
            .map_err(|e| CertError::Key(xcc_kube::bounded(&e)))?;
        self.certs.0.insert(name.to_string(), Arc::new(certified));
        Ok(())
    }

    /// Stops serving `name`.
    pub fn drop_cert(&self, name: &str) {
        self.certs.0.remove(name);
    }

    /// `Ok` when the front proxy's settings are in use, else why not.
    pub fn front_status(&self) -> Result<(), String> {
        match &*self.front_error.lock().unwrap_or_else(|e| e.into_inner()) {
            None => Ok(()),
            Some(error) => Err(error.clone()),
        }
    }

    /// Where the server listens, once it does.
    pub fn listening(&self) -> Option<SocketAddr> {
        *self.listening.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the front proxy's settings again; keeps the last good ones on failure. `log` says
    /// an outage of the read once, and a standing problem of the settings (none, or unusable)
    /// once and again only when it changes.
    pub async fn refresh_front(&self, log: &mut FrontLog) {
        let (namespace, name) = front::AUTH_CONFIG_MAP;
        let result = match Api::<ConfigMap>::namespaced(self.identity.client(), namespace)
            .get(name)
            .await
        {
            Ok(config_map) => {
                log.read.recovered();
                FrontProxy::from_config_map(&config_map).map_err(|e| e.to_string())
            }
            Err(error) => {
                log.read.failed(&error);
                Err(format!(
                    "cannot read ConfigMap {namespace}/{name}: {}",
                    xcc_kube::bounded(&error)
                ))
            }
        };
        match result {
            Ok(settings) => {
                let unchanged = self
                    .front
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .is_some_and(|f| {
                        f.settings.ca_pem == settings.ca_pem
                            && f.settings.allowed_names == settings.allowed_names
                    });
                if !unchanged {
                    let mut tls = match ServerConfig::builder_with_provider(Arc::new(
                        rustls::crypto::ring::default_provider(),
                    ))
                    .with_safe_default_protocol_versions()
                    {
                        Ok(builder) => builder
                            .with_client_cert_verifier(settings.handshake_verifier())
                            .with_cert_resolver(self.certs.clone()),
                        Err(error) => {
                            *self.front_error.lock().unwrap_or_else(|e| e.into_inner()) =
                                Some(format!("TLS: {error}"));
                            return;
                        }
                    };
                    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                    log.settings
                        .cleared(FRONT_SETTINGS, "front-proxy settings in use");
                    tracing::info!(allowed_names = ?settings.allowed_names, "front-proxy settings in use");
                    *self.front.write().unwrap_or_else(|e| e.into_inner()) =
                        Some(Arc::new(Front {
                            settings,
                            tls: Arc::new(tls),
                        }));
                }
                *self.front_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
            Err(error) => {
                // A read that failed is said by its outage; settings that are not there or do
                // not work are a standing condition, said once.
                if !log.read.is_down() {
                    log.settings.is(FRONT_SETTINGS, &error);
                }
                *self.front_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
            }
        }
    }

    /// Serves HTTPS on `listener` until `stop` resolves, reading the front proxy's settings
    /// every [`FRONT_PROXY_REFRESH`]; the connections open then are closed with it.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        stop: impl std::future::Future<Output = ()>,
    ) {
        *self.listening.lock().unwrap_or_else(|e| e.into_inner()) = listener.local_addr().ok();
        let refresher = {
            let proxy = self.clone();
            xcc_sync::task::spawn_owned(async move {
                let mut log = FrontLog {
                    read: xcc_sync::outage::Outage::new(
                        format!(
                            "the read of the front-proxy settings (ConfigMap {}/{})",
                            front::AUTH_CONFIG_MAP.0,
                            front::AUTH_CONFIG_MAP.1
                        ),
                        xcc_sync::outage::local_server(),
                    ),
                    settings: xcc_sync::outage::Standing::default(),
                };
                loop {
                    proxy.refresh_front(&mut log).await;
                    tokio::time::sleep(FRONT_PROXY_REFRESH).await;
                }
            })
        };
        let mut stop = std::pin::pin!(stop);
        // The connections end with the server: at `stop`, or when this future is dropped (the
        // leader's work aborted), so that no request is forwarded after this replica stopped.
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let (stream, remote) = tokio::select! {
                () = &mut stop => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::debug!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let front = self.front.read().unwrap_or_else(|e| e.into_inner()).clone();
            let Some(front) = front else {
                tracing::debug!(%remote, "no front-proxy settings yet: connection closed");
                continue;
            };
            connections.spawn(self.clone().connection(front, stream, remote));
        }
        refresher.abort();
    }

    /// Serves one accepted connection with the front proxy's settings `front`.
    async fn connection(
        self: Arc<Self>,
        front: Arc<Front>,
        stream: tokio::net::TcpStream,
        remote: SocketAddr,
    ) {
        let _ = stream.set_nodelay(true);
        let acceptor = tokio_rustls::TlsAcceptor::from(front.tls.clone());
        let tls = match tokio::time::timeout(HANDSHAKE_DEADLINE, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(error)) => {
                tracing::debug!(%remote, %error, "TLS handshake refused");
                return;
            }
            Err(_) => return,
        };
        // The handshake proved the client holds its certificate's key; whether the front-proxy
        // CA signed it, and whether its name is allowed, is judged here.
        let caller = Arc::new(Caller::of(
            &front.settings,
            tls.get_ref().1.peer_certificates(),
        ));
        let proxy = self;
        let service = hyper::service::service_fn(move |request| {
            let proxy = proxy.clone();
            let front = front.clone();
            let caller = caller.clone();
            async move {
                Ok::<_, std::convert::Infallible>(
                    proxy.handle(&front.settings, &caller, request).await,
                )
            }
        });
        let builder =
            hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
        if let Err(error) = builder
            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
            .await
        {
            tracing::debug!(%remote, %error, "connection ended");
        }
    }
}

/// The TLS identity of a connection.
pub(super) enum Caller {
    /// A client certificate of the front proxy.
    FrontProxy,
    /// A certificate signed by the front-proxy CA whose name is not allowed.
    NotAllowed(Option<String>),
    /// A certificate the front-proxy CA did not sign (why, bounded).
    Untrusted(String),
    /// No client certificate.
    Anonymous,
}

impl Caller {
    /// The 401 a caller other than the front proxy gets.
    pub(super) fn refusal(&self) -> Option<Response<Body>> {
        match self {
            Caller::FrontProxy => None,
            Caller::Anonymous => Some(status(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "a client certificate signed by the front-proxy CA is required",
            )),
            Caller::Untrusted(why) => Some(status(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                &format!("the client certificate is not signed by the front-proxy CA: {why}"),
            )),
            Caller::NotAllowed(cn) => Some(status(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                &format!(
                    "client certificate name {:?} is not in requestheader-allowed-names",
                    xcc_kube::bounded(&cn.clone().unwrap_or_default())
                ),
            )),
        }
    }

    /// Who presents certificate `chain` (none: anonymous), as the front proxy's `settings` judge.
    fn of(settings: &FrontProxy, chain: Option<&[CertificateDer<'_>]>) -> Caller {
        match chain {
            None | Some([]) => Caller::Anonymous,
            Some(chain) => match settings.trusts(chain) {
                Err(why) => Caller::Untrusted(why),
                Ok(()) => {
                    let cn = front::common_name(chain[0].as_ref());
                    if settings.allows(cn.as_deref()) {
                        Caller::FrontProxy
                    } else {
                        Caller::NotAllowed(cn)
                    }
                }
            },
        }
    }
}

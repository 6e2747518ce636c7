//! A local HTTPS server for the e2e tests (an aggregated API, a peer that answers 401).

use std::sync::Arc;

/// Serves `app` over TLS with the certificate `cert_der` and its PKCS#8 key on `listener`, one
/// task per connection, until the listener fails.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    cert_der: rustls::pki_types::CertificateDer<'static>,
    key_pkcs8_der: Vec<u8>,
    app: axum::Router,
) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert_der],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key_pkcs8_der.into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            return;
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
        });
    }
}

//! Who is asking: the kube-apiserver's front proxy, proven by its client certificate, speaking
//! for the user it names in request headers.
//!
//! The settings come from ConfigMap `kube-system/extension-apiserver-authentication`, as for
//! every aggregated API server: `requestheader-client-ca-file` (the CA that signs the front
//! proxy's client certificate), `requestheader-allowed-names` (the common names it may have; any
//! when empty), and the names of the user, group, UID and extra headers. The headers are read
//! only from a connection whose client certificate passed both checks; a request without one gets
//! 401 whatever headers it carries.

use std::{collections::BTreeMap, sync::Arc};

use http::HeaderMap;
use k8s_openapi::api::core::v1::ConfigMap;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
    client::danger::HandshakeSignatureValid,
    server::{
        WebPkiClientVerifier,
        danger::{ClientCertVerified, ClientCertVerifier},
    },
};
use rustls_pki_types::{CertificateDer, UnixTime, pem::PemObject};

/// Namespace and name of the ConfigMap kube-apiserver publishes for extension API servers.
pub const AUTH_CONFIG_MAP: (&str, &str) = ("kube-system", "extension-apiserver-authentication");

/// The front proxy's settings, read from [`AUTH_CONFIG_MAP`].
#[derive(Clone)]
pub struct FrontProxy {
    /// Checks a client certificate chain against the front-proxy CA ([`FrontProxy::trusts`]).
    verifier: Arc<dyn ClientCertVerifier>,
    /// Common names the client certificate may have; any when empty.
    pub allowed_names: Vec<String>,
    pub user_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    /// Lowercase prefixes of the extra headers.
    pub extra_prefixes: Vec<String>,
    /// The CA as read, to notice a change.
    pub ca_pem: String,
}

impl std::fmt::Debug for FrontProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontProxy")
            .field("allowed_names", &self.allowed_names)
            .field("user_headers", &self.user_headers)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FrontProxyError {
    #[error(
        "ConfigMap kube-system/extension-apiserver-authentication has no requestheader-client-ca-file: the API server runs without --requestheader-client-ca-file"
    )]
    NoCa,
    #[error("requestheader-client-ca-file holds no usable certificate: {0}")]
    BadCa(String),
    #[error("{key} is not a JSON list of strings: {error}")]
    BadList { key: &'static str, error: String },
    #[error("cannot build the client certificate verifier: {0}")]
    Verifier(String),
}

/// A JSON list of strings under `key` of `data` (kube-apiserver writes them so); empty when absent.
fn list(
    data: &BTreeMap<String, String>,
    key: &'static str,
) -> Result<Vec<String>, FrontProxyError> {
    match data.get(key) {
        None => Ok(Vec::new()),
        Some(text) if text.trim().is_empty() => Ok(Vec::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| FrontProxyError::BadList {
            key,
            error: xcc_kube::bounded(&e),
        }),
    }
}

impl FrontProxy {
    /// Reads the settings from the ConfigMap's data.
    pub fn from_config_map(config_map: &ConfigMap) -> Result<FrontProxy, FrontProxyError> {
        let empty = BTreeMap::new();
        let data = config_map.data.as_ref().unwrap_or(&empty);
        let ca_pem = data
            .get("requestheader-client-ca-file")
            .filter(|ca| !ca.trim().is_empty())
            .ok_or(FrontProxyError::NoCa)?
            .clone();
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| FrontProxyError::BadCa(xcc_kube::bounded(&e)))?;
            roots
                .add(cert)
                .map_err(|e| FrontProxyError::BadCa(xcc_kube::bounded(&e)))?;
        }
        if roots.is_empty() {
            return Err(FrontProxyError::BadCa("no PEM certificate".into()));
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        // A connection without a certificate is accepted so that its requests get a clear 401
        // rather than a failed handshake; a certificate that does not verify still fails it.
        .allow_unauthenticated()
        .build()
        .map_err(|e| FrontProxyError::Verifier(xcc_kube::bounded(&e)))?;
        let or = |found: Vec<String>, default: &str| {
            if found.is_empty() {
                vec![default.to_string()]
            } else {
                found
            }
        };
        Ok(FrontProxy {
            verifier,
            allowed_names: list(data, "requestheader-allowed-names")?,
            user_headers: or(
                list(data, "requestheader-username-headers")?,
                "X-Remote-User",
            ),
            group_headers: or(list(data, "requestheader-group-headers")?, "X-Remote-Group"),
            uid_headers: list(data, "requestheader-uid-headers")?,
            extra_prefixes: or(
                list(data, "requestheader-extra-headers-prefix")?,
                "X-Remote-Extra-",
            )
            .into_iter()
            .map(|p| p.to_ascii_lowercase())
            .collect(),
            ca_pem,
        })
    }

    /// The TLS handshake's client certificate verifier: proof of possession of the key is
    /// checked there, the chain after it ([`FrontProxy::trusts`]), so that a certificate of
    /// another CA gets a 401 saying so instead of a failed handshake.
    pub fn handshake_verifier(&self) -> Arc<dyn ClientCertVerifier> {
        Arc::new(Deferred(self.verifier.clone()))
    }

    /// Why the client certificate chain `chain` (leaf first) is not signed by the front-proxy
    /// CA, if it is not.
    pub fn trusts(&self, chain: &[CertificateDer<'_>]) -> Result<(), String> {
        let (leaf, intermediates) = chain.split_first().ok_or("no client certificate")?;
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map(|_| ())
            .map_err(|e| xcc_kube::bounded(&e))
    }

    /// Whether a client certificate with common name `cn` may act as the front proxy.
    pub fn allows(&self, cn: Option<&str>) -> bool {
        self.allowed_names.is_empty()
            || cn.is_some_and(|cn| self.allowed_names.iter().any(|n| n == cn))
    }

    /// The user the front proxy names in `headers`, if any.
    pub fn user(&self, headers: &HeaderMap) -> Option<User> {
        let first = |names: &[String]| {
            names.iter().find_map(|name| {
                headers
                    .get_all(name.as_str())
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find(|v| !v.is_empty())
                    .map(str::to_string)
            })
        };
        let name = first(&self.user_headers)?;
        let uid = first(&self.uid_headers);
        let groups = self
            .group_headers
            .iter()
            .flat_map(|name| headers.get_all(name.as_str()).iter())
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, value) in headers {
            let header = header.as_str();
            let Some(key) = self
                .extra_prefixes
                .iter()
                .find_map(|p| header.strip_prefix(p.as_str()))
            else {
                continue;
            };
            if let (Some(key), Ok(value)) = (unescape(key), value.to_str()) {
                extra
                    .entry(key.to_ascii_lowercase())
                    .or_default()
                    .push(value.to_string());
            }
        }
        Some(User {
            name,
            uid,
            groups,
            extra,
        })
    }
}

/// Accepts any client certificate chain during the handshake (the chain is judged after it, by
/// [`FrontProxy::trusts`]) but checks, as the inner verifier does, that the client holds the
/// certificate's key.
#[derive(Debug)]
struct Deferred(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for Deferred {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// A user as the front proxy names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The percent-decoding of an extra header's key (keys may hold characters a header name cannot);
/// `None` when it is not valid.
fn unescape(key: &str) -> Option<String> {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = key.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The common name of a DER certificate's subject, if it has one.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    cert.subject()
        .iter_common_name()
        .next()?
        .as_str()
        .ok()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn config_map(data: serde_json::Value) -> ConfigMap {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}, "data": data}))
            .unwrap()
    }

    fn ca() -> String {
        issuer().0
    }

    /// A CA: its PEM and what signs with it.
    fn issuer() -> (String, rcgen::Issuer<'static, rcgen::KeyPair>) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "front-proxy-ca");
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        (pem, rcgen::Issuer::new(params, key))
    }

    /// A client certificate named `cn`, signed by `issuer`.
    fn client(
        cn: &str,
        issuer: &rcgen::Issuer<'static, rcgen::KeyPair>,
    ) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().unwrap();
        params.signed_by(&key, issuer).unwrap().der().clone()
    }

    #[test]
    fn only_a_chain_of_the_front_proxy_ca_is_trusted() {
        let (pem, front_ca) = issuer();
        let (_, other_ca) = issuer();
        let front = FrontProxy::from_config_map(&config_map(serde_json::json!({
            "requestheader-client-ca-file": pem,
            "requestheader-allowed-names": "[\"front-proxy-client\"]",
        })))
        .unwrap();
        let signed = client("front-proxy-client", &front_ca);
        assert_eq!(front.trusts(std::slice::from_ref(&signed)), Ok(()));
        assert_eq!(
            common_name(signed.as_ref()).as_deref(),
            Some("front-proxy-client")
        );
        // Another CA of the same name: the name does not make the signature.
        let forged = client("front-proxy-client", &other_ca);
        let why = front.trusts(&[forged]).unwrap_err();
        assert!(why.contains("BadSignature"), "{why}");
        assert!(front.trusts(&[]).is_err());
    }

    #[test]
    fn settings_are_read_as_kube_apiserver_writes_them() {
        let front = FrontProxy::from_config_map(&config_map(serde_json::json!({
            "requestheader-client-ca-file": ca(),
            "requestheader-allowed-names": "[\"front-proxy-client\"]",
            "requestheader-username-headers": "[\"X-Remote-User\"]",
            "requestheader-group-headers": "[\"X-Remote-Group\"]",
            "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
        })))
        .unwrap();
        assert!(front.allows(Some("front-proxy-client")));
        assert!(!front.allows(Some("someone-else")));
        assert!(!front.allows(None));

        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", HeaderValue::from_static("alice"));
        headers.append("x-remote-group", HeaderValue::from_static("team-1"));
        headers.append(
            "x-remote-group",
            HeaderValue::from_static("system:authenticated"),
        );
        headers.append("x-remote-extra-scopes%2fa", HeaderValue::from_static("one"));
        headers.append("x-remote-extra-scopes%2fa", HeaderValue::from_static("two"));
        let user = front.user(&headers).unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["team-1", "system:authenticated"]);
        assert_eq!(user.extra["scopes/a"], ["one", "two"]);

        headers.remove("x-remote-user");
        assert_eq!(front.user(&headers), None);
    }

    #[test]
    fn a_config_map_without_a_usable_ca_is_an_error() {
        assert!(matches!(
            FrontProxy::from_config_map(&config_map(serde_json::json!({}))),
            Err(FrontProxyError::NoCa)
        ));
        assert!(matches!(
            FrontProxy::from_config_map(&config_map(serde_json::json!({
                "requestheader-client-ca-file": "not a certificate"
            }))),
            Err(FrontProxyError::BadCa(_))
        ));
        assert!(matches!(
            FrontProxy::from_config_map(&config_map(serde_json::json!({
                "requestheader-client-ca-file": ca(),
                "requestheader-allowed-names": "front-proxy-client",
            }))),
            Err(FrontProxyError::BadList { .. })
        ));
    }

    #[test]
    fn extra_keys_are_percent_decoded() {
        assert_eq!(unescape("a%2fb").as_deref(), Some("a/b"));
        assert_eq!(unescape("plain").as_deref(), Some("plain"));
        assert_eq!(unescape("bad%zz"), None);
        assert_eq!(unescape("cut%2"), None);
    }
}

//! Certificates of `ingressSecureEnabled`: a CA, a server certificate for every host of the
//! Ingress rules, and a client certificate, all signed by the CA. They are kept in the Secrets
//! `ca-secret` (`ca.crt`, `tls.crt`, `tls.key`: the Ingress's TLS and nginx's client CA) and
//! `cli-secret` (`client.crt`, `client.key`), and made again when the hosts change or less than
//! [`RENEW_BEFORE`] of their validity is left.

use std::collections::BTreeMap;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// How long the certificates are valid.
pub const VALIDITY: time::Duration = time::Duration::days(365);
/// Renewed when less than this is left.
pub const RENEW_BEFORE: time::Duration = time::Duration::days(30);

/// Annotation on `ca-secret`: the hosts its server certificate is for (comma-separated).
pub const HOSTS_ANNOTATION: &str = "plumber.xcc.test/hosts";
/// Annotation on `ca-secret`: when its certificates expire (Unix seconds).
pub const NOT_AFTER_ANNOTATION: &str = "plumber.xcc.test/not-after";

pub const CA_SECRET: &str = "ca-secret";
pub const CLIENT_SECRET: &str = "cli-secret";

/// The data of both Secrets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    pub hosts: Vec<String>,
    /// Unix seconds.
    pub not_after: i64,
    pub ca: BTreeMap<String, String>,
    pub client: BTreeMap<String, String>,
}

impl Bundle {
    /// Whether this bundle still serves `hosts` at `now` (Unix seconds) with time to spare.
    pub fn serves(&self, hosts: &[String], now: i64) -> bool {
        self.hosts == hosts && self.not_after - RENEW_BEFORE.whole_seconds() > now
    }
}

/// A new CA, server certificate for `hosts` and client certificate.
pub fn generate(hosts: &[String]) -> Result<Bundle, rcgen::Error> {
    let now = time::OffsetDateTime::now_utc();
    let not_before = now - time::Duration::minutes(5);
    let not_after = now + VALIDITY;
    let base = |cn: &str, sans: Vec<String>| -> Result<CertificateParams, rcgen::Error> {
        let mut params = CertificateParams::new(sans)?;
        params
            .distinguished_name
            .push(DnType::OrganizationName, "xcc plumber");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.not_before = not_before;
        params.not_after = not_after;
        Ok(params)
    };
    let mut ca_params = base("ca", Vec::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca_pem = ca_cert.pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let mut server = base("server", hosts.to_vec())?;
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let server_key = KeyPair::generate()?;
    let server_cert = server.signed_by(&server_key, &issuer)?;

    let mut client = base("client", Vec::new())?;
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    client.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let client_key = KeyPair::generate()?;
    let client_cert = client.signed_by(&client_key, &issuer)?;

    Ok(Bundle {
        hosts: hosts.to_vec(),
        not_after: not_after.unix_timestamp(),
        ca: [
            ("ca.crt".to_string(), ca_pem),
            ("tls.crt".to_string(), server_cert.pem()),
            ("tls.key".to_string(), server_key.serialize_pem()),
        ]
        .into(),
        client: [
            ("client.crt".to_string(), client_cert.pem()),
            ("client.key".to_string(), client_key.serialize_pem()),
        ]
        .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_serves_its_hosts_until_renewal_is_due() {
        let hosts = vec!["nginx.example.com".to_string()];
        let bundle = generate(&hosts).unwrap();
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        assert!(bundle.serves(&hosts, now));
        assert!(!bundle.serves(&["other.example.com".to_string()], now));
        let late = bundle.not_after - RENEW_BEFORE.whole_seconds() + 1;
        assert!(!bundle.serves(&hosts, late));
        for key in ["ca.crt", "tls.crt", "tls.key"] {
            assert!(bundle.ca[key].starts_with("-----BEGIN"), "{key}");
        }
        assert_ne!(bundle.ca["tls.crt"], bundle.client["client.crt"]);
    }
}

//! Keys and certificates the API servers need, made fresh for each test bed.

use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// Writes, into `dir`: `sa.key` and `sa.pub` (service-account signing key, ECDSA P-256),
/// `front-proxy-ca.crt`, and `front-proxy-client.{crt,key}` signed by it (aggregation layer),
/// `serving-ca.crt` and the API server's `serving.{crt,key}` for 127.0.0.1 and localhost signed by
/// it, so that every kubeconfig of the test bed verifies the server (xcc refuses
/// `insecure-skip-tls-verify` in kubeconfigs from Secrets).
pub fn write(dir: &Path) -> anyhow::Result<()> {
    write_with_sans(dir, &[])
}

/// [`write`], with `extra_sans` (addresses or names) in the serving certificate besides
/// 127.0.0.1 and localhost.
pub fn write_with_sans(dir: &Path, extra_sans: &[String]) -> anyhow::Result<()> {
    let serving_ca = ca("xcc-testbed-serving-ca")?;
    std::fs::write(dir.join("serving-ca.crt"), serving_ca.pem)?;
    let mut sans = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    sans.extend(extra_sans.iter().cloned());
    let serving = CertificateParams::new(sans)?;
    let serving_key = KeyPair::generate()?;
    let serving_cert = serving.signed_by(&serving_key, &serving_ca.issuer)?;
    std::fs::write(dir.join("serving.crt"), serving_cert.pem())?;
    std::fs::write(dir.join("serving.key"), serving_key.serialize_pem())?;

    let sa = KeyPair::generate()?;
    std::fs::write(dir.join("sa.key"), sa.serialize_pem())?;
    std::fs::write(dir.join("sa.pub"), sa.public_key_pem())?;

    let front_proxy_ca = ca("xcc-testbed-front-proxy-ca")?;
    std::fs::write(dir.join("front-proxy-ca.crt"), &front_proxy_ca.pem)?;

    write_client(
        dir,
        "front-proxy-client",
        "front-proxy-client",
        &front_proxy_ca,
    )
}

/// Writes `<stem>.crt` and `<stem>.key` into `dir`: a client certificate with common name `cn`
/// signed by `ca`.
pub fn write_client(dir: &Path, stem: &str, cn: &str, ca: &Ca) -> anyhow::Result<()> {
    write_client_in_group(dir, stem, cn, None, ca)
}

/// [`write_client`], with organization (Kubernetes group) `group` when given.
pub fn write_client_in_group(
    dir: &Path,
    stem: &str,
    cn: &str,
    group: Option<&str>,
    ca: &Ca,
) -> anyhow::Result<()> {
    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client.distinguished_name.push(DnType::CommonName, cn);
    if let Some(group) = group {
        client
            .distinguished_name
            .push(DnType::OrganizationName, group);
    }
    let client_key = KeyPair::generate()?;
    let client_cert = client.signed_by(&client_key, &ca.issuer)?;
    std::fs::write(dir.join(format!("{stem}.crt")), client_cert.pem())?;
    std::fs::write(dir.join(format!("{stem}.key")), client_key.serialize_pem())?;
    Ok(())
}

/// A self-signed CA: its certificate and what signs with it.
pub struct Ca {
    /// The CA certificate, PEM.
    pub pem: String,
    /// The CA's name and key, to sign certificates with.
    pub issuer: Issuer<'static, KeyPair>,
}

/// A new self-signed CA named `name`.
pub fn ca(name: &str) -> anyhow::Result<Ca> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    })
}

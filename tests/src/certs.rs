//! Keys and certificates the API servers need, made fresh for each test bed.

use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// Writes, into `dir`: `sa.key` and `sa.pub` (service-account signing key, ECDSA P-256),
/// `front-proxy-ca.crt`, and `front-proxy-client.{crt,key}` signed by it (aggregation layer).
pub fn write(dir: &Path) -> anyhow::Result<()> {
    let sa = KeyPair::generate()?;
    std::fs::write(dir.join("sa.key"), sa.serialize_pem())?;
    std::fs::write(dir.join("sa.pub"), sa.public_key_pem())?;

    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "xcc-testbed-front-proxy-ca");
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    std::fs::write(dir.join("front-proxy-ca.crt"), ca_cert.pem())?;

    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client
        .distinguished_name
        .push(DnType::CommonName, "front-proxy-client");
    let client_key = KeyPair::generate()?;
    let issuer = Issuer::new(ca_params, ca_key);
    let client_cert = client.signed_by(&client_key, &issuer)?;
    std::fs::write(dir.join("front-proxy-client.crt"), client_cert.pem())?;
    std::fs::write(
        dir.join("front-proxy-client.key"),
        client_key.serialize_pem(),
    )?;
    Ok(())
}

//! DownstreamClusterLink: the service cluster a workload cluster projects APIs from, and the
//! endpoint of the aggregated API server that serves them.
//!
//! For link `L` in namespace `N` the agent
//! - builds a client from the kubeconfig Secret `spec.upstream.kubeconfig.secretName` of `N`,
//!   through the trust gate, and checks with a SelfSubjectReview that the service cluster accepts
//!   it (`ServiceAccountReady`);
//! - serves the name `L-proxy.N.svc` in its aggregated API server with the certificate of Secret
//!   `spec.proxy.TLS.secretName` (`tls.crt`, `tls.key`, optional `ca.crt`), which it generates
//!   (a CA and a certificate it signs, owned by the link) when the Secret does not exist
//!   (`ProxyDeploymentReady`); the CA goes to `status.proxy.caBundle`;
//! - applies Service `L-proxy` in `N` (port `--projection-proxy-service-port`, target the
//!   server's port) and, with `--projection-proxy-address`, its EndpointSlice pointing at this
//!   agent (`ProxyServiceReady`; `status.proxy.serviceReference`);
//! - reports whether the server uses the front proxy's settings of ConfigMap
//!   `kube-system/extension-apiserver-authentication` (`ProxyConfigMapReady`) and whether the
//!   server's own ServiceAccount ([`super::proxy::identity`]) may create SubjectAccessReviews
//!   (`ProxyServiceAccountReady`, whose message names the identity in use).

use std::{net::IpAddr, sync::Arc, time::Duration};

use k8s_openapi::{
    ByteString,
    api::{
        authentication::v1::SelfSubjectReview,
        authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        },
        core::v1::{Secret, Service},
        discovery::v1::EndpointSlice,
    },
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::PostParams,
    runtime::{controller::Action, events::Recorder},
};
use serde_json::json;
use xcc_kube::PeerClients;

use super::{
    Error, Verdict,
    api::{DownstreamClusterLink, ProxyStatus, Reason, ServiceReference},
    owned_by,
    proxy::Proxy,
    publish, reason_of,
};
use crate::sink::{self, Counted};

/// How often a ready link is looked at again (the service cluster's answer, the front proxy).
const RESYNC: Duration = Duration::from_secs(60);
/// How soon a link that is not ready is looked at again.
const RETRY: Duration = Duration::from_secs(5);

/// Where the aggregated API server is reached.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Port of the Service `<link>-proxy`.
    pub service_port: i32,
    /// The address written into the Service's EndpointSlice, if any.
    pub address: Option<IpAddr>,
}

pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub peers: PeerClients,
    pub proxy: Arc<Proxy>,
    pub endpoint: Endpoint,
    pub counted: Counted,
    /// When each link's token was last renewed (`namespace/name`).
    pub renewed: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

/// The Service (and EndpointSlice) of link `link`.
pub fn service_name(link: &str) -> String {
    format!("{link}-proxy")
}

/// The DNS name the API server asks for when it reaches the link's Service.
pub fn server_name(link: &str, namespace: &str) -> String {
    format!("{}.{namespace}.svc", service_name(link))
}

fn labels() -> serde_json::Value {
    json!({ super::MANAGED_BY.0: super::MANAGED_BY.1 })
}

pub async fn reconcile(
    link: Arc<DownstreamClusterLink>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let (Some(namespace), Some(uid)) = (link.namespace(), link.uid()) else {
        return Ok(Action::await_change());
    };
    let name = link.name_any();
    if link.metadata.deletion_timestamp.is_some() {
        // What it owns (Service, generated TLS Secret) goes with it.
        ctx.proxy.drop_link(&namespace, &name);
        ctx.proxy.drop_cert(&server_name(&name, &namespace));
        return Ok(Action::await_change());
    }
    let generation = link.meta().generation;
    let owner = serde_json::to_value(link.controller_owner_ref(&()))?;

    let service_account = upstream(&link, &namespace, &ctx).await;
    let (deployment, ca) = serving(&link, &namespace, &uid, &owner, &ctx).await?;
    let config_map = match ctx.proxy.front_status() {
        Ok(()) => Verdict::ok(
            Reason::FrontProxySettingsRead,
            "the aggregated API server authenticates the front proxy with ConfigMap kube-system/extension-apiserver-authentication",
        ),
        Err(error) => Verdict::not(Reason::FrontProxySettingsUnusable, error),
    };
    let proxy_account = delegates(ctx.proxy.identity()).await;
    let service = service(&name, &namespace, &uid, &owner, &ctx).await?;

    let all = [
        &service_account,
        &deployment,
        &service,
        &config_map,
        &proxy_account,
    ];
    let ready = match all.iter().find(|v| !v.ready) {
        None => Verdict::ok(
            Reason::Ready,
            format!(
                "APIs of {} are served through Service {}/{}",
                link.spec.upstream.name,
                namespace,
                service_name(&name)
            ),
        ),
        Some(first) => Verdict::not(
            Reason::NotReady,
            format!("{}: {}", first.reason, first.message),
        ),
    };

    let old = link.status.clone().unwrap_or_default();
    let mut status = old.clone();
    for (verdict, type_) in [
        (&ready, "Ready"),
        (&service_account, "ServiceAccountReady"),
        (&deployment, "ProxyDeploymentReady"),
        (&service, "ProxyServiceReady"),
        (&config_map, "ProxyConfigMapReady"),
        (&proxy_account, "ProxyServiceAccountReady"),
    ] {
        verdict.set(&mut status.conditions, type_, generation);
    }
    status.proxy = Some(ProxyStatus {
        ca_bundle: ca.map(xcc_kube::wire::encode_base64),
        service_reference: service.ready.then(|| ServiceReference {
            name: service_name(&name),
            namespace: namespace.clone(),
            port: Some(ctx.endpoint.service_port),
        }),
    });
    status.observed_generation = generation;
    let api: Api<DownstreamClusterLink> = Api::namespaced(ctx.client.clone(), &namespace);
    sink::write_status(&api, link.as_ref(), &status, &ctx.counted).await?;
    if reason_of(&old.conditions, "Ready") != Some(&*ready.reason)
        || old
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .is_some_and(|c| c.message != ready.message)
    {
        tracing::info!(%namespace, link = %name, ready = ready.ready, message = %ready.message, "DownstreamClusterLink status");
        publish(&ctx.recorder, link.as_ref(), "Link", &ready).await;
    }
    Ok(Action::requeue(if ready.ready { RESYNC } else { RETRY }))
}

pub fn error_policy(link: Arc<DownstreamClusterLink>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.counted.failed(error);
    tracing::warn!(
        namespace = %link.namespace().unwrap_or_default(),
        link = %link.name_any(),
        %error,
        "DownstreamClusterLink reconcile failed"
    );
    Action::requeue(RETRY)
}

/// The service cluster: a client from the kubeconfig Secret (through the trust gate), and who the
/// service cluster says it is. Hands the client to the proxy when it is accepted.
async fn upstream(link: &DownstreamClusterLink, namespace: &str, ctx: &Context) -> Verdict {
    let secret_name = &link.spec.upstream.kubeconfig.secret_name;
    let name = link.name_any();
    let secret = match Api::<Secret>::namespaced(ctx.client.clone(), namespace)
        .get_opt(secret_name)
        .await
    {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            ctx.proxy.drop_link(namespace, &name);
            ctx.peers.forget(namespace, secret_name);
            return Verdict::not(
                Reason::KubeconfigSecretNotFound,
                format!(
                    "Secret {namespace}/{secret_name} (spec.upstream.kubeconfig.secretName) does not exist"
                ),
            );
        }
        Err(error) => {
            return Verdict::not(
                Reason::KubeconfigSecretNotFound,
                format!(
                    "cannot read Secret {namespace}/{secret_name}: {}",
                    xcc_kube::bounded(&error)
                ),
            );
        }
    };
    let peer = match ctx.peers.client_for(&secret).await {
        Ok(peer) => peer,
        Err(error) => {
            ctx.proxy.drop_link(namespace, &name);
            return Verdict::not(Reason::KubeconfigRejected, xcc_kube::bounded(&error));
        }
    };
    let review = Api::<SelfSubjectReview>::all(peer.client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await;
    match review {
        Ok(review) => {
            let who = review
                .status
                .and_then(|s| s.user_info)
                .and_then(|u| u.username)
                .unwrap_or_default();
            let now = k8s_openapi::jiff::Timestamp::now().as_second();
            let key = xcc_kube::trust::kubeconfig_key(&secret);
            let link_key = format!("{namespace}/{name}");
            let recently = ctx
                .renewed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&link_key)
                .is_some_and(|at| at.elapsed() < super::renew::MIN_INTERVAL);
            let renewal = if recently {
                Ok(None)
            } else {
                super::renew::renew_if_due(
                    &secret,
                    key,
                    &who,
                    &peer.client,
                    &ctx.client,
                    &ctx.counted,
                    now,
                )
                .await
            };
            match renewal {
                Ok(None) => {}
                Ok(Some(expires)) => {
                    ctx.renewed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(link_key, std::time::Instant::now());
                    let message = format!(
                        "renewed the token of Secret {secret_name} with the service cluster; it expires at {}",
                        k8s_openapi::jiff::Timestamp::from_second(expires)
                            .map(|t| t.to_string())
                            .unwrap_or_default()
                    );
                    tracing::info!(%namespace, link = %name, %message, "DownstreamClusterLink token");
                    publish(
                        &ctx.recorder,
                        link,
                        "RenewToken",
                        &Verdict::ok(Reason::TokenRenewed, message),
                    )
                    .await;
                }
                Err(why) => {
                    tracing::warn!(%namespace, link = %name, %why, "DownstreamClusterLink token");
                    publish(
                        &ctx.recorder,
                        link,
                        "RenewToken",
                        &Verdict::not(Reason::TokenNotRenewed, why),
                    )
                    .await;
                }
            }
            ctx.proxy.set_link(namespace, &name, peer);
            Verdict::ok(
                Reason::Authenticated,
                format!(
                    "the service cluster accepts the kubeconfig of Secret {secret_name} as {}",
                    xcc_kube::bounded(&who)
                ),
            )
        }
        Err(kube::Error::Api(error)) => {
            ctx.proxy.drop_link(namespace, &name);
            Verdict::not(
                Reason::UpstreamRefused,
                format!(
                    "the service cluster refuses the kubeconfig of Secret {secret_name}: {}",
                    xcc_kube::bounded(&error)
                ),
            )
        }
        // Unreachable: the last client stays, so requests work again as soon as it answers.
        Err(error) => Verdict::not(
            Reason::UpstreamUnreachable,
            format!(
                "the service cluster of Secret {secret_name} does not answer: {}",
                xcc_kube::bounded(&error)
            ),
        ),
    }
}

/// The serving certificate: loaded into the proxy from the TLS Secret, made first when the
/// Secret does not exist. Returns the verdict and the CA (PEM) clients should trust.
async fn serving(
    link: &DownstreamClusterLink,
    namespace: &str,
    uid: &str,
    owner: &serde_json::Value,
    ctx: &Context,
) -> Result<(Verdict, Option<String>), Error> {
    let name = link.name_any();
    let secret_name = &link.spec.proxy.tls.secret_name;
    let dns = server_name(&name, namespace);
    let Some(listening) = ctx.proxy.listening() else {
        return Ok((
            Verdict::not(
                Reason::NotListening,
                "the aggregated API server of this agent is not listening (see --projection-proxy-listen and the agent's log)",
            ),
            None,
        ));
    };
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let secret = match api.get_opt(secret_name).await? {
        Some(secret) => secret,
        None => {
            let generated = generate(&name, namespace)
                .map_err(|e| Error::Certificate(xcc_kube::bounded(&e)))?;
            let desired = json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/tls",
                "metadata": {
                    "name": secret_name,
                    "namespace": namespace,
                    "labels": labels(),
                    "ownerReferences": [owner],
                },
                "data": {
                    "tls.crt": xcc_kube::wire::encode_base64(&generated.cert),
                    "tls.key": xcc_kube::wire::encode_base64(&generated.key),
                    "ca.crt": xcc_kube::wire::encode_base64(&generated.ca),
                },
            });
            sink::apply_whole(&api, secret_name, desired, &ctx.counted).await?
        }
    };
    let data = |key: &str| -> Option<Vec<u8>> {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|ByteString(b)| b.clone())
            .filter(|b| !b.is_empty())
    };
    let (Some(cert), Some(key)) = (data("tls.crt"), data("tls.key")) else {
        let why = if owned_by(&secret.metadata, uid) {
            Reason::TlsSecretInvalid
        } else {
            Reason::TlsSecretConflict
        };
        return Ok((
            Verdict::not(
                why,
                format!(
                    "Secret {namespace}/{secret_name} (spec.proxy.TLS.secretName) has no tls.crt and tls.key"
                ),
            ),
            None,
        ));
    };
    if let Err(error) = ctx.proxy.set_cert(&dns, &cert, &key) {
        return Ok((
            Verdict::not(
                Reason::TlsSecretInvalid,
                format!("Secret {namespace}/{secret_name}: {error}"),
            ),
            None,
        ));
    }
    let ca = data("ca.crt").unwrap_or(cert);
    let ca = String::from_utf8_lossy(&ca).to_string();
    Ok((
        Verdict::ok(
            Reason::Serving,
            format!(
                "the aggregated API server of this agent listens on port {} and serves {dns} with Secret {secret_name}",
                listening.port()
            ),
        ),
        Some(ca),
    ))
}

/// A CA, and a certificate it signed for the link's Service names.
struct Generated {
    ca: String,
    cert: String,
    key: String,
}

fn generate(link: &str, namespace: &str) -> Result<Generated, rcgen::Error> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(
        DnType::CommonName,
        format!("xcc-agent projection CA {namespace}/{link}"),
    );
    let ca_key = KeyPair::generate()?;
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let dns = server_name(link, namespace);
    let mut params = CertificateParams::new(vec![dns.clone(), format!("{dns}.cluster.local")])?;
    params.distinguished_name.push(DnType::CommonName, dns);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Generated {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Whether the aggregated API server's identity may create SubjectAccessReviews
/// (system:auth-delegator); the message names that identity.
async fn delegates(identity: &super::proxy::identity::Identity) -> Verdict {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("create".into()),
                group: Some("authorization.k8s.io".into()),
                resource: Some("subjectaccessreviews".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let who = identity.describe();
    match Api::<SelfSubjectAccessReview>::all(identity.client())
        .create(&PostParams::default(), &review)
        .await
    {
        Ok(review) if review.status.as_ref().is_some_and(|s| s.allowed) => Verdict::ok(
            Reason::MayDelegate,
            format!(
                "the aggregated API server acts as {who}, which may create SubjectAccessReviews (system:auth-delegator)"
            ),
        ),
        Ok(_) => Verdict::not(
            Reason::MayNotDelegate,
            format!(
                "the aggregated API server acts as {who}, which may not create SubjectAccessReviews: bind it to system:auth-delegator (manifests/agent/projection.yaml)"
            ),
        ),
        Err(error) => Verdict::not(
            Reason::MayNotDelegate,
            format!(
                "cannot check the permissions of {who}: {}",
                xcc_kube::bounded(&error)
            ),
        ),
    }
}

/// Service `<link>-proxy` and, with an address, its EndpointSlice.
async fn service(
    name: &str,
    namespace: &str,
    uid: &str,
    owner: &serde_json::Value,
    ctx: &Context,
) -> Result<Verdict, Error> {
    let service_name = service_name(name);
    let Some(listening) = ctx.proxy.listening() else {
        return Ok(Verdict::not(
            Reason::NotListening,
            "the aggregated API server of this agent is not listening",
        ));
    };
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    let current = api.get_opt(&service_name).await?;
    if let Some(current) = &current
        && !owned_by(&current.metadata, uid)
    {
        return Ok(Verdict::not(
            Reason::ServiceConflict,
            format!(
                "Service {namespace}/{service_name} exists and is not this link's; it is left alone"
            ),
        ));
    }
    let desired = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name,
            "namespace": namespace,
            "labels": labels(),
            "ownerReferences": [owner],
        },
        "spec": {
            "type": "ClusterIP",
            "ports": [{
                "name": "https",
                "protocol": "TCP",
                "port": ctx.endpoint.service_port,
                "targetPort": listening.port(),
            }],
        },
    });
    let up_to_date = current.as_ref().is_some_and(|c| {
        let c = serde_json::to_value(c).unwrap_or_default();
        c["spec"]["ports"] == desired["spec"]["ports"]
            && c["spec"]["selector"].is_null()
            && sink::up_to_date(
                &json!({"metadata": c["metadata"]}),
                &json!({"metadata": desired["metadata"]}),
            )
    });
    if !up_to_date {
        sink::apply_whole(&api, &service_name, desired, &ctx.counted).await?;
    }
    let mut message = format!(
        "Service {namespace}/{service_name} port {} leads to port {} of the agent",
        ctx.endpoint.service_port,
        listening.port()
    );
    if let Some(address) = ctx.endpoint.address {
        let slices: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), namespace);
        let desired = json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": service_name,
                "namespace": namespace,
                "labels": {
                    super::MANAGED_BY.0: super::MANAGED_BY.1,
                    "kubernetes.io/service-name": service_name,
                    "endpointslice.kubernetes.io/managed-by": "xcc-agent",
                },
                "ownerReferences": [owner],
            },
            "addressType": if address.is_ipv4() { "IPv4" } else { "IPv6" },
            "endpoints": [{"addresses": [address.to_string()], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "protocol": "TCP", "port": listening.port()}],
        });
        let current = slices.get_opt(&service_name).await?;
        if let Some(current) = &current
            && !owned_by(&current.metadata, uid)
        {
            return Ok(Verdict::not(
                Reason::ServiceConflict,
                format!(
                    "EndpointSlice {namespace}/{service_name} exists and is not this link's; it is left alone"
                ),
            ));
        }
        let fresh = current.as_ref().is_some_and(|c| {
            sink::up_to_date(&serde_json::to_value(c).unwrap_or_default(), &desired)
        });
        if !fresh {
            sink::apply_whole(&slices, &service_name, desired, &ctx.counted).await?;
        }
        message.push_str(&format!(" at {address}"));
    }
    Ok(Verdict::ok(Reason::ServiceApplied, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_certificate_is_for_the_services_name_and_signed_by_its_ca() {
        let generated = generate("services-2b", "services-toolkit").unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(generated.cert.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let names: Vec<String> = cert
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert!(
            names.contains(&"DNSName(services-2b-proxy.services-toolkit.svc)".to_string()),
            "{names:?}"
        );
        let (_, ca) = x509_parser::pem::parse_x509_pem(generated.ca.as_bytes()).unwrap();
        let ca = ca.parse_x509().unwrap();
        assert_eq!(cert.issuer(), ca.subject());
    }
}

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

use k8s_openapi::api::{
    authentication::v1::SelfSubjectReview,
    authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec},
    core::v1::{Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::PostParams,
    runtime::{controller::Action, events::Recorder},
};
use xcc_kube::{PeerClient, PeerClients};

use super::{
    Error, Verdict,
    api::DownstreamClusterLink,
    owned_by,
    proxy::Proxy,
    publish,
    write::{self, Write},
};
use crate::sink::{self, Counted};

mod plan;

use plan::{Checks, Upstream};

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
    pub renewed: dashmap::DashMap<String, std::time::Instant>,
}

/// The Service (and EndpointSlice) of link `link`.
pub fn service_name(link: &str) -> String {
    format!("{link}-proxy")
}

/// The DNS name the API server asks for when it reaches the link's Service.
pub fn server_name(link: &str, namespace: &str) -> String {
    format!("{}.{namespace}.svc", service_name(link))
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
    let config_map = plan::front_proxy(ctx.proxy.front_status());
    let proxy_account = delegates(ctx.proxy.identity()).await;
    let service = service(&name, &namespace, &uid, &owner, &ctx).await?;
    let checks = Checks {
        service_account,
        deployment,
        service,
        config_map,
        proxy_account,
    };
    let old = link.status.clone().unwrap_or_default();
    let report = plan::report(
        &name,
        &namespace,
        &link.spec.upstream.name,
        &checks,
        ca,
        ctx.endpoint.service_port,
        &old,
        generation,
    );
    let api: Api<DownstreamClusterLink> = Api::namespaced(ctx.client.clone(), &namespace);
    sink::write_status(&api, link.as_ref(), &report.status, &ctx.counted).await?;
    let ready = &report.ready;
    if report.announce {
        tracing::info!(%namespace, link = %name, ready = ready.ready, message = %ready.message, "DownstreamClusterLink status");
        publish(&ctx.recorder, link.as_ref(), "Link", ready).await;
    }
    Ok(Action::requeue(report.requeue))
}

pub fn error_policy(link: Arc<DownstreamClusterLink>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(
        namespace = %link.namespace().unwrap_or_default(),
        link = %link.name_any(),
        %error,
        "DownstreamClusterLink reconcile failed"
    );
    Action::requeue(RETRY)
}

/// The service cluster: a client from the kubeconfig Secret (through the trust gate), and who the
/// service cluster says it is. The proxy keeps, uses or drops the link's client as
/// [`Upstream::client`] says.
async fn upstream(link: &DownstreamClusterLink, namespace: &str, ctx: &Context) -> Verdict {
    let secret_name = &link.spec.upstream.kubeconfig.secret_name;
    let name = link.name_any();
    let (found, peer) = check_upstream(link, namespace, ctx).await;
    match (found.client(), peer) {
        (plan::Client::Use, Some(peer)) => ctx.proxy.set_link(namespace, &name, peer),
        (plan::Client::Drop, _) => ctx.proxy.drop_link(namespace, &name),
        (plan::Client::DropAndForget, _) => {
            ctx.proxy.drop_link(namespace, &name);
            ctx.peers.forget(namespace, secret_name);
        }
        _ => {}
    }
    found.verdict(namespace, secret_name)
}

/// Reads the kubeconfig Secret, builds its client and asks the service cluster who it is (and
/// renews the token when due); what it found, and the client when it is accepted.
async fn check_upstream(
    link: &DownstreamClusterLink,
    namespace: &str,
    ctx: &Context,
) -> (Upstream, Option<PeerClient>) {
    let secret_name = &link.spec.upstream.kubeconfig.secret_name;
    let secret = match Api::<Secret>::namespaced(ctx.client.clone(), namespace)
        .get_opt(secret_name)
        .await
    {
        Ok(Some(secret)) => secret,
        Ok(None) => return (Upstream::SecretMissing, None),
        Err(error) => return (Upstream::SecretUnreadable(xcc_kube::bounded(&error)), None),
    };
    let peer = match ctx.peers.client_for(&secret).await {
        Ok(peer) => peer,
        Err(error) => return (Upstream::Rejected(xcc_kube::bounded(&error)), None),
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
            renew(link, namespace, &secret, &who, &peer, ctx).await;
            (Upstream::Accepted { who }, Some(peer))
        }
        Err(kube::Error::Api(error)) => (Upstream::Refused(xcc_kube::bounded(&error)), None),
        Err(error) => (Upstream::Unreachable(xcc_kube::bounded(&error)), None),
    }
}

/// Renews the token of the kubeconfig Secret with the service cluster when it is due (at most
/// once per [`super::renew::MIN_INTERVAL`]); an Event says it was renewed, or why not.
async fn renew(
    link: &DownstreamClusterLink,
    namespace: &str,
    secret: &Secret,
    who: &str,
    peer: &PeerClient,
    ctx: &Context,
) {
    let name = link.name_any();
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let key = xcc_kube::trust::kubeconfig_key(secret);
    let link_key = format!("{namespace}/{name}");
    let recently = ctx
        .renewed
        .get(&link_key)
        .is_some_and(|at| at.elapsed() < super::renew::MIN_INTERVAL);
    let renewal = if recently {
        Ok(None)
    } else {
        super::renew::renew_if_due(
            secret,
            key,
            who,
            &peer.client,
            &ctx.client,
            &ctx.counted,
            now,
        )
        .await
    };
    if let Ok(Some(_)) = renewal {
        ctx.renewed.insert(link_key, std::time::Instant::now());
    }
    let secret_name = &link.spec.upstream.kubeconfig.secret_name;
    let Some(verdict) = plan::renewal(&renewal, secret_name) else {
        return;
    };
    if verdict.ready {
        tracing::info!(%namespace, link = %name, message = %verdict.message, "DownstreamClusterLink token");
    } else {
        tracing::warn!(%namespace, link = %name, why = %verdict.message, "DownstreamClusterLink token");
    }
    publish(&ctx.recorder, link, "RenewToken", &verdict).await;
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
        return Ok((plan::not_listening(true), None));
    };
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let secret = match api.get_opt(secret_name).await? {
        Some(secret) => secret,
        None => {
            let generated = generate(&name, namespace)
                .map_err(|e| Error::Certificate(xcc_kube::bounded(&e)))?;
            let desired = plan::tls_secret(
                secret_name,
                namespace,
                owner,
                &generated.ca,
                &generated.cert,
                &generated.key,
            );
            sink::apply_whole(&api, secret_name, desired, &ctx.counted).await?
        }
    };
    let (cert, key, ca) = match plan::tls_keys(&secret, uid, namespace, secret_name) {
        Ok(keys) => keys,
        Err(verdict) => return Ok((verdict, None)),
    };
    let loaded = ctx
        .proxy
        .set_cert(&dns, &cert, &key)
        .map_err(|e| e.to_string());
    let verdict = plan::serving(namespace, secret_name, &dns, listening.port(), loaded);
    let ca = verdict.ready.then_some(ca);
    Ok((verdict, ca))
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
    let allowed = Api::<SelfSubjectAccessReview>::all(identity.client())
        .create(&PostParams::default(), &review)
        .await
        .map(|review| review.status.as_ref().is_some_and(|s| s.allowed))
        .map_err(|error| xcc_kube::bounded(&error));
    plan::delegation(&identity.describe(), allowed)
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
        return Ok(plan::not_listening(false));
    };
    let port = ctx.endpoint.service_port;
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    let current = api.get_opt(&service_name).await?;
    if let Some(current) = &current
        && !owned_by(&current.metadata, uid)
    {
        return Ok(plan::service_conflict("Service", namespace, &service_name));
    }
    let desired = plan::service(name, namespace, owner, port, listening.port());
    let up_to_date = current.as_ref().is_some_and(|c| {
        plan::service_up_to_date(&serde_json::to_value(c).unwrap_or_default(), &desired)
    });
    if !up_to_date {
        sink::apply_whole(&api, &service_name, desired, &ctx.counted).await?;
    }
    if let Some(address) = ctx.endpoint.address {
        let slices: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), namespace);
        let desired = plan::endpoint_slice(name, namespace, owner, address, listening.port());
        let current = slices.get_opt(&service_name).await?;
        match write::decide(current.as_ref(), uid, &desired)? {
            Write::LeaveAlone => {
                return Ok(plan::service_conflict(
                    "EndpointSlice",
                    namespace,
                    &service_name,
                ));
            }
            Write::Keep => {}
            Write::Apply => {
                sink::apply_whole(&slices, &service_name, desired, &ctx.counted).await?;
            }
        }
    }
    Ok(plan::service_applied(
        name,
        namespace,
        port,
        listening.port(),
        ctx.endpoint.address,
    ))
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

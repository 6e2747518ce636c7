//! A DownstreamClusterLink's decisions, apart from I/O: what each check found becomes a
//! condition (and what the proxy keeps of the link's client), the objects it wants, and the
//! status, Event and requeue of the whole.

use std::{net::IpAddr, time::Duration};

use k8s_openapi::{ByteString, api::core::v1::Secret};
use serde_json::{Value, json};

use super::{RESYNC, RETRY, service_name};
use crate::projection::{
    MANAGED_BY, Verdict,
    api::Reason,
    api::{DownstreamClusterLinkStatus, ProxyStatus, ServiceReference},
    owned_by,
};

/// What the service cluster said of the link's kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// Secret `spec.upstream.kubeconfig.secretName` does not exist.
    SecretMissing,
    /// It could not be read (bounded error).
    SecretUnreadable(String),
    /// The trust gate refused the kubeconfig (bounded error).
    Rejected(String),
    /// The service cluster accepts it, as this user.
    Accepted { who: String },
    /// The service cluster answered with an error (bounded).
    Refused(String),
    /// The service cluster did not answer (bounded error).
    Unreachable(String),
}

/// What the aggregated API server keeps of the link's client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// The new client serves the link.
    Use,
    /// The last client stays (an unreachable server works again as soon as it answers).
    Keep,
    /// The link is not served.
    Drop,
    /// Not served, and the cached client of the Secret is forgotten too (it is gone).
    DropAndForget,
}

impl Upstream {
    /// What the proxy does with the link's client.
    pub fn client(&self) -> Client {
        match self {
            Upstream::SecretMissing => Client::DropAndForget,
            Upstream::Rejected(_) | Upstream::Refused(_) => Client::Drop,
            Upstream::SecretUnreadable(_) | Upstream::Unreachable(_) => Client::Keep,
            Upstream::Accepted { .. } => Client::Use,
        }
    }

    /// `ServiceAccountReady`, for the kubeconfig of Secret `secret` in `namespace`.
    pub fn verdict(&self, namespace: &str, secret: &str) -> Verdict {
        match self {
            Upstream::SecretMissing => Verdict::not(
                Reason::KubeconfigSecretNotFound,
                format!(
                    "Secret {namespace}/{secret} (spec.upstream.kubeconfig.secretName) does not exist"
                ),
            ),
            Upstream::SecretUnreadable(why) => Verdict::not(
                Reason::KubeconfigSecretNotFound,
                format!("cannot read Secret {namespace}/{secret}: {why}"),
            ),
            Upstream::Rejected(why) => Verdict::not(Reason::KubeconfigRejected, why.clone()),
            Upstream::Accepted { who } => Verdict::ok(
                Reason::Authenticated,
                format!(
                    "the service cluster accepts the kubeconfig of Secret {secret} as {}",
                    xcc_kube::bounded(who)
                ),
            ),
            Upstream::Refused(why) => Verdict::not(
                Reason::UpstreamRefused,
                format!("the service cluster refuses the kubeconfig of Secret {secret}: {why}"),
            ),
            Upstream::Unreachable(why) => Verdict::not(
                Reason::UpstreamUnreachable,
                format!("the service cluster of Secret {secret} does not answer: {why}"),
            ),
        }
    }
}

/// The Event of a token renewal (`Ok(None)`: not due, nothing to say): renewed, expiring at
/// `expires` (Unix seconds), or why not.
pub fn renewal(result: &Result<Option<i64>, String>, secret: &str) -> Option<Verdict> {
    match result {
        Ok(None) => None,
        Ok(Some(expires)) => Some(Verdict::ok(
            Reason::TokenRenewed,
            format!(
                "renewed the token of Secret {secret} with the service cluster; it expires at {}",
                k8s_openapi::jiff::Timestamp::from_second(*expires)
                    .map(|t| t.to_string())
                    .unwrap_or_default()
            ),
        )),
        Err(why) => Some(Verdict::not(Reason::TokenNotRenewed, why.clone())),
    }
}

fn labels() -> Value {
    json!({ MANAGED_BY.0: MANAGED_BY.1 })
}

/// The TLS Secret made when `spec.proxy.TLS.secretName` does not exist (PEM texts).
pub fn tls_secret(
    name: &str,
    namespace: &str,
    owner: &Value,
    ca: &str,
    cert: &str,
    key: &str,
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels(),
            "ownerReferences": [owner],
        },
        "data": {
            "tls.crt": xcc_kube::wire::encode_base64(cert),
            "tls.key": xcc_kube::wire::encode_base64(key),
            "ca.crt": xcc_kube::wire::encode_base64(ca),
        },
    })
}

/// The certificate, key and CA (PEM) of a TLS Secret (the CA: `ca.crt`, else the certificate);
/// or `ProxyDeploymentReady` saying why it cannot serve (the link's own Secret is invalid,
/// someone else's is a conflict).
pub fn tls_keys(
    secret: &Secret,
    uid: &str,
    namespace: &str,
    name: &str,
) -> Result<(Vec<u8>, Vec<u8>, String), Verdict> {
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
        return Err(Verdict::not(
            why,
            format!(
                "Secret {namespace}/{name} (spec.proxy.TLS.secretName) has no tls.crt and tls.key"
            ),
        ));
    };
    let ca = data("ca.crt").unwrap_or_else(|| cert.clone());
    Ok((cert, key, String::from_utf8_lossy(&ca).to_string()))
}

/// `ProxyDeploymentReady` once the certificate of Secret `secret` was `loaded` into the server
/// listening on `port` for name `dns` (or why it could not be).
pub fn serving(
    namespace: &str,
    secret: &str,
    dns: &str,
    port: u16,
    loaded: Result<(), String>,
) -> Verdict {
    match loaded {
        Ok(()) => Verdict::ok(
            Reason::Serving,
            format!(
                "the aggregated API server of this agent listens on port {port} and serves {dns} with Secret {secret}"
            ),
        ),
        Err(error) => Verdict::not(
            Reason::TlsSecretInvalid,
            format!("Secret {namespace}/{secret}: {error}"),
        ),
    }
}

/// `ProxyDeploymentReady` while the aggregated API server does not listen.
pub fn not_listening(detail: bool) -> Verdict {
    Verdict::not(
        Reason::NotListening,
        if detail {
            "the aggregated API server of this agent is not listening (see --projection-proxy-listen and the agent's log)"
        } else {
            "the aggregated API server of this agent is not listening"
        },
    )
}

/// `ProxyServiceReady` when the Service or its EndpointSlice (`kind`) is someone else's.
pub fn service_conflict(kind: &str, namespace: &str, name: &str) -> Verdict {
    Verdict::not(
        Reason::ServiceConflict,
        format!("{kind} {namespace}/{name} exists and is not this link's; it is left alone"),
    )
}

/// Service `<link>-proxy`: port `port` to the agent's port `target`, no selector (its
/// EndpointSlice is written by the agent).
pub fn service(link: &str, namespace: &str, owner: &Value, port: i32, target: u16) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(link),
            "namespace": namespace,
            "labels": labels(),
            "ownerReferences": [owner],
        },
        "spec": {
            "type": "ClusterIP",
            "ports": [{
                "name": "https",
                "protocol": "TCP",
                "port": port,
                "targetPort": target,
            }],
        },
    })
}

/// Whether the Service found (`current`, JSON) is [`service`] already: the same ports, no
/// selector, our labels (the API server fills in the rest of `spec`).
pub fn service_up_to_date(current: &Value, desired: &Value) -> bool {
    current["spec"]["ports"] == desired["spec"]["ports"]
        && current["spec"]["selector"].is_null()
        && crate::sink::up_to_date(
            &json!({"metadata": current["metadata"]}),
            &json!({"metadata": desired["metadata"]}),
        )
}

/// The EndpointSlice of Service `<link>-proxy`: `address`, port `target`.
pub fn endpoint_slice(
    link: &str,
    namespace: &str,
    owner: &Value,
    address: IpAddr,
    target: u16,
) -> Value {
    let name = service_name(link);
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                MANAGED_BY.0: MANAGED_BY.1,
                "kubernetes.io/service-name": name,
                "endpointslice.kubernetes.io/managed-by": "xcc-agent",
            },
            "ownerReferences": [owner],
        },
        "addressType": if address.is_ipv4() { "IPv4" } else { "IPv6" },
        "endpoints": [{"addresses": [address.to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "protocol": "TCP", "port": target}],
    })
}

/// `ProxyServiceReady` once the Service (and the EndpointSlice at `address`) are applied.
pub fn service_applied(
    link: &str,
    namespace: &str,
    port: i32,
    target: u16,
    address: Option<IpAddr>,
) -> Verdict {
    let mut message = format!(
        "Service {namespace}/{} port {port} leads to port {target} of the agent",
        service_name(link)
    );
    if let Some(address) = address {
        message.push_str(&format!(" at {address}"));
    }
    Verdict::ok(Reason::ServiceApplied, message)
}

/// `ProxyConfigMapReady` from the aggregated server's front-proxy settings.
pub fn front_proxy(status: Result<(), String>) -> Verdict {
    match status {
        Ok(()) => Verdict::ok(
            Reason::FrontProxySettingsRead,
            "the aggregated API server authenticates the front proxy with ConfigMap kube-system/extension-apiserver-authentication",
        ),
        Err(error) => Verdict::not(Reason::FrontProxySettingsUnusable, error),
    }
}

/// `ProxyServiceAccountReady`: whether the server's identity `who` may create
/// SubjectAccessReviews (`Err`: the check failed, bounded).
pub fn delegation(who: &str, allowed: Result<bool, String>) -> Verdict {
    match allowed {
        Ok(true) => Verdict::ok(
            Reason::MayDelegate,
            format!(
                "the aggregated API server acts as {who}, which may create SubjectAccessReviews (system:auth-delegator)"
            ),
        ),
        Ok(false) => Verdict::not(
            Reason::MayNotDelegate,
            format!(
                "the aggregated API server acts as {who}, which may not create SubjectAccessReviews: bind it to system:auth-delegator (manifests/agent/projection.yaml)"
            ),
        ),
        Err(why) => Verdict::not(
            Reason::MayNotDelegate,
            format!("cannot check the permissions of {who}: {why}"),
        ),
    }
}

/// The five checks of a link, each a condition.
#[derive(Debug, Clone)]
pub struct Checks {
    pub service_account: Verdict,
    pub deployment: Verdict,
    pub service: Verdict,
    pub config_map: Verdict,
    pub proxy_account: Verdict,
}

/// The whole link: what to write to its status, and when to look again.
#[derive(Debug, Clone)]
pub struct Report {
    pub ready: Verdict,
    pub status: DownstreamClusterLinkStatus,
    /// Whether `Ready` changed (reason or message): logged and published as an Event.
    pub announce: bool,
    pub requeue: Duration,
}

/// The [`Report`] of link `link` (of service cluster `upstream`) from `checks`, over `old`, for
/// `generation`; `ca` is the CA clients trust, `port` the Service's port.
#[allow(clippy::too_many_arguments)]
pub fn report(
    link: &str,
    namespace: &str,
    upstream: &str,
    checks: &Checks,
    ca: Option<String>,
    port: i32,
    old: &DownstreamClusterLinkStatus,
    generation: Option<i64>,
) -> Report {
    let all = [
        &checks.service_account,
        &checks.deployment,
        &checks.service,
        &checks.config_map,
        &checks.proxy_account,
    ];
    let ready = match all.iter().find(|v| !v.ready) {
        None => Verdict::ok(
            Reason::Ready,
            format!(
                "APIs of {upstream} are served through Service {namespace}/{}",
                service_name(link)
            ),
        ),
        Some(first) => Verdict::not(
            Reason::NotReady,
            format!("{}: {}", first.reason, first.message),
        ),
    };
    let mut status = old.clone();
    for (verdict, type_) in [
        (&ready, "Ready"),
        (&checks.service_account, "ServiceAccountReady"),
        (&checks.deployment, "ProxyDeploymentReady"),
        (&checks.service, "ProxyServiceReady"),
        (&checks.config_map, "ProxyConfigMapReady"),
        (&checks.proxy_account, "ProxyServiceAccountReady"),
    ] {
        verdict.set(&mut status.conditions, type_, generation);
    }
    status.proxy = Some(ProxyStatus {
        ca_bundle: ca.map(xcc_kube::wire::encode_base64),
        service_reference: checks.service.ready.then(|| ServiceReference {
            name: service_name(link),
            namespace: namespace.to_string(),
            port: Some(port),
        }),
    });
    status.observed_generation = generation;
    let before = old.conditions.iter().find(|c| c.type_ == "Ready");
    let announce = before.map(|c| c.reason.as_str()) != Some(&*ready.reason)
        || before.is_some_and(|c| c.message != ready.message);
    let requeue = if ready.ready { RESYNC } else { RETRY };
    Report {
        ready,
        status,
        announce,
        requeue,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(reason: Reason) -> Verdict {
        Verdict::ok(reason, "fine")
    }

    fn checks() -> Checks {
        Checks {
            service_account: ok(Reason::Authenticated),
            deployment: ok(Reason::Serving),
            service: ok(Reason::ServiceApplied),
            config_map: ok(Reason::FrontProxySettingsRead),
            proxy_account: ok(Reason::MayDelegate),
        }
    }

    #[test]
    fn what_the_service_cluster_said_becomes_a_condition_and_the_proxys_client() {
        let rows = [
            (
                Upstream::SecretMissing,
                false,
                Reason::KubeconfigSecretNotFound,
                Client::DropAndForget,
            ),
            (
                Upstream::SecretUnreadable("forbidden".into()),
                false,
                Reason::KubeconfigSecretNotFound,
                Client::Keep,
            ),
            (
                Upstream::Rejected("untrusted CA".into()),
                false,
                Reason::KubeconfigRejected,
                Client::Drop,
            ),
            (
                Upstream::Accepted {
                    who: "system:serviceaccount:ns:sa".into(),
                },
                true,
                Reason::Authenticated,
                Client::Use,
            ),
            (
                Upstream::Refused("Unauthorized".into()),
                false,
                Reason::UpstreamRefused,
                Client::Drop,
            ),
            (
                Upstream::Unreachable("timed out".into()),
                false,
                Reason::UpstreamUnreachable,
                Client::Keep,
            ),
        ];
        for (found, ready, why, client) in rows {
            let verdict = found.verdict("services-toolkit", "upstream-kubeconfig");
            assert_eq!(
                (
                    verdict.ready,
                    Reason::from(&*verdict.reason),
                    found.client()
                ),
                (ready, why, client),
                "{found:?}"
            );
        }
        assert_eq!(
            Upstream::SecretMissing.verdict("ns", "s").message,
            "Secret ns/s (spec.upstream.kubeconfig.secretName) does not exist"
        );
    }

    #[test]
    fn a_renewal_is_announced_only_when_it_happened_or_failed() {
        assert_eq!(renewal(&Ok(None), "s"), None);
        let renewed = renewal(&Ok(Some(0)), "s").unwrap();
        assert_eq!(
            (renewed.ready, Reason::from(&*renewed.reason)),
            (true, Reason::TokenRenewed)
        );
        assert!(
            renewed.message.ends_with("expires at 1970-01-01T00:00:00Z"),
            "{}",
            renewed.message
        );
        let failed = renewal(&Err("denied".into()), "s").unwrap();
        assert_eq!(
            (
                failed.ready,
                Reason::from(&*failed.reason),
                failed.message.as_str()
            ),
            (false, Reason::TokenNotRenewed, "denied")
        );
    }

    #[test]
    fn a_tls_secret_serves_when_it_holds_a_certificate_and_key() {
        let secret = |owner: &str, data: Value| -> Secret {
            serde_json::from_value(json!({"metadata": {"name": "tls", "ownerReferences": [
                {"apiVersion": "v1", "kind": "X", "name": "x", "uid": owner}]}, "data": data}))
            .unwrap()
        };
        let b = xcc_kube::wire::encode_base64;
        let with_ca = secret(
            "me",
            json!({"tls.crt": b("C"), "tls.key": b("K"), "ca.crt": b("A")}),
        );
        assert_eq!(
            tls_keys(&with_ca, "me", "ns", "tls").unwrap(),
            (b"C".to_vec(), b"K".to_vec(), "A".into())
        );
        let self_signed = secret("me", json!({"tls.crt": b("C"), "tls.key": b("K")}));
        assert_eq!(tls_keys(&self_signed, "me", "ns", "tls").unwrap().2, "C");
        let rows = [
            (
                "ours, without key",
                secret("me", json!({"tls.crt": b("C")})),
                Reason::TlsSecretInvalid,
            ),
            (
                "ours, empty",
                secret("me", json!({"tls.crt": "", "tls.key": ""})),
                Reason::TlsSecretInvalid,
            ),
            (
                "someone else's, without key",
                secret("them", json!({"tls.crt": b("C")})),
                Reason::TlsSecretConflict,
            ),
        ];
        for (situation, secret, why) in rows {
            let verdict = tls_keys(&secret, "me", "ns", "tls").unwrap_err();
            assert_eq!(Reason::from(&*verdict.reason), why, "{situation}");
            assert_eq!(
                verdict.message,
                "Secret ns/tls (spec.proxy.TLS.secretName) has no tls.crt and tls.key"
            );
        }
    }

    #[test]
    fn a_loaded_certificate_serves_and_a_refused_one_says_why() {
        let ok = serving("ns", "tls", "l-proxy.ns.svc", 9443, Ok(()));
        assert_eq!(
            (ok.ready, Reason::from(&*ok.reason)),
            (true, Reason::Serving)
        );
        assert_eq!(
            ok.message,
            "the aggregated API server of this agent listens on port 9443 and serves l-proxy.ns.svc with Secret tls"
        );
        let bad = serving("ns", "tls", "l-proxy.ns.svc", 9443, Err("no key".into()));
        assert_eq!(
            (bad.ready, Reason::from(&*bad.reason), bad.message.as_str()),
            (false, Reason::TlsSecretInvalid, "Secret ns/tls: no key")
        );
    }

    #[test]
    fn a_service_is_up_to_date_with_its_ports_no_selector_and_our_labels() {
        let desired = service("l", "ns", &json!({"uid": "u"}), 443, 9443);
        let found = |ports: Value, selector: Value, labels: Value| {
            json!({"metadata": {"name": "l-proxy", "labels": labels},
                   "spec": {"clusterIP": "10.0.0.1", "ports": ports, "selector": selector}})
        };
        let ports = desired["spec"]["ports"].clone();
        let rows = [
            (
                "as made (the API server adds a cluster IP)",
                found(ports.clone(), Value::Null, labels()),
                true,
            ),
            (
                "another port",
                found(json!([{"port": 80}]), Value::Null, labels()),
                false,
            ),
            (
                "a selector added",
                found(ports.clone(), json!({"app": "x"}), labels()),
                false,
            ),
            (
                "our label removed",
                found(ports, Value::Null, json!({})),
                false,
            ),
        ];
        for (situation, current, want) in rows {
            assert_eq!(service_up_to_date(&current, &desired), want, "{situation}");
        }
        let slice = endpoint_slice("l", "ns", &json!({}), "fd00::1".parse().unwrap(), 9443);
        assert_eq!(slice["addressType"], "IPv6");
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"],
            "l-proxy"
        );
        assert_eq!(
            service_applied("l", "ns", 443, 9443, Some("10.1.2.3".parse().unwrap())).message,
            "Service ns/l-proxy port 443 leads to port 9443 of the agent at 10.1.2.3"
        );
    }

    #[test]
    fn the_front_proxy_and_delegation_checks_say_what_to_do() {
        assert!(front_proxy(Ok(())).ready);
        assert_eq!(
            front_proxy(Err("no CA".into())).reason,
            Reason::FrontProxySettingsUnusable
        );
        let rows = [
            (Ok(true), true, "which may create"),
            (Ok(false), false, "bind it to system:auth-delegator"),
            (
                Err("timeout".into()),
                false,
                "cannot check the permissions of sa: timeout",
            ),
        ];
        for (allowed, ready, says) in rows {
            let verdict = delegation("sa", allowed);
            assert_eq!(verdict.ready, ready);
            assert!(verdict.message.contains(says), "{}", verdict.message);
        }
    }

    #[test]
    fn the_link_is_ready_when_every_check_is_and_says_the_first_that_is_not() {
        let old = DownstreamClusterLinkStatus::default();
        let all = report(
            "l",
            "ns",
            "services",
            &checks(),
            Some("CA".into()),
            443,
            &old,
            Some(3),
        );
        assert_eq!(
            (all.ready.ready, Reason::from(&*all.ready.reason)),
            (true, Reason::Ready)
        );
        assert_eq!(
            all.ready.message,
            "APIs of services are served through Service ns/l-proxy"
        );
        assert_eq!(all.requeue, RESYNC);
        assert!(all.announce);
        assert_eq!(all.status.conditions.len(), 6);
        assert_eq!(all.status.observed_generation, Some(3));
        let proxy = all.status.proxy.as_ref().unwrap();
        assert_eq!(
            proxy.ca_bundle.as_deref(),
            Some(xcc_kube::wire::encode_base64("CA").as_str())
        );
        assert_eq!(proxy.service_reference.as_ref().unwrap().port, Some(443));

        // The same again: nothing to announce.
        let again = report(
            "l",
            "ns",
            "services",
            &checks(),
            Some("CA".into()),
            443,
            &all.status,
            Some(3),
        );
        assert!(!again.announce);

        let mut broken = checks();
        broken.service = service_conflict("Service", "ns", "l-proxy");
        broken.proxy_account = delegation("sa", Ok(false));
        let not = report(
            "l",
            "ns",
            "services",
            &broken,
            None,
            443,
            &all.status,
            Some(3),
        );
        assert_eq!(
            (not.ready.ready, Reason::from(&*not.ready.reason)),
            (false, Reason::NotReady)
        );
        assert!(
            not.ready
                .message
                .starts_with("ServiceConflict: Service ns/l-proxy exists"),
            "{}",
            not.ready.message
        );
        assert_eq!(not.requeue, RETRY);
        assert!(not.announce);
        assert_eq!(not.status.proxy.as_ref().unwrap().service_reference, None);
        assert_eq!(not.status.proxy.as_ref().unwrap().ca_bundle, None);
    }
}

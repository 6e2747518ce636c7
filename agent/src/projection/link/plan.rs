//! An UpstreamClusterLink's decisions, apart from I/O: the objects it wants, whether its token
//! is kept, and which conditions and requeue each situation reports.

use std::time::Duration;

use k8s_openapi::{api::core::v1::Secret, jiff::Timestamp};
use serde_json::{Value, json};

use super::{
    EXPIRES_ANNOTATION, ISSUED_ANNOTATION, KUBECONFIG_KEY, MIN_REQUEUE, RESYNC, ROOT_CA_CONFIGMAP,
    SERVICE_ACCOUNT_UID_ANNOTATION, secret_name, service_account_name,
};
use crate::projection::{MANAGED_BY, Verdict, api::Reason};

/// The names of what link `link` makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub service_account: String,
    pub secret: String,
    /// The Role and RoleBinding that let the ServiceAccount request its own tokens.
    pub token_role: String,
}

impl Names {
    pub fn of(link: &str) -> Names {
        let service_account = service_account_name(link);
        Names {
            token_role: format!("{service_account}-token"),
            secret: secret_name(link),
            service_account,
        }
    }

    /// Whether a name is longer than Kubernetes allows.
    pub fn too_long(&self) -> bool {
        self.service_account.len() > 253 || self.secret.len() > 253
    }
}

fn labels() -> Value {
    json!({ MANAGED_BY.0: MANAGED_BY.1 })
}

/// ServiceAccount `names.service_account`, owned by `owner` (an ownerReference, JSON).
pub fn service_account(names: &Names, namespace: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": names.service_account,
            "namespace": namespace,
            "labels": labels(),
            "ownerReferences": [owner],
        },
    })
}

/// The Role that lets the ServiceAccount request its own tokens (and nothing more), so that a
/// workload cluster keeps its copy of the kubeconfig alive (`projection::renew`).
pub fn token_role(names: &Names, namespace: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": names.token_role, "namespace": namespace, "labels": labels(), "ownerReferences": [owner]},
        "rules": [{"apiGroups": [""], "resources": ["serviceaccounts/token"],
            "resourceNames": [names.service_account], "verbs": ["create"]}],
    })
}

/// The RoleBinding of [`token_role`] to the ServiceAccount.
pub fn token_role_binding(names: &Names, namespace: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": names.token_role, "namespace": namespace, "labels": labels(), "ownerReferences": [owner]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.token_role},
        "subjects": [{"kind": "ServiceAccount", "name": names.service_account, "namespace": namespace}],
    })
}

/// The kubeconfig Secret: `config` (a kubeconfig with `token`), and when `token` was issued for
/// ServiceAccount `sa_uid`.
pub fn kubeconfig_secret(
    names: &Names,
    namespace: &str,
    owner: &Value,
    token: &Token,
    sa_uid: &str,
    config: &str,
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": names.secret,
            "namespace": namespace,
            "labels": labels(),
            "annotations": {
                ISSUED_ANNOTATION: ts(token.issued),
                EXPIRES_ANNOTATION: ts(token.expires),
                SERVICE_ACCOUNT_UID_ANNOTATION: sa_uid,
            },
            "ownerReferences": [owner],
        },
        "data": { KUBECONFIG_KEY: xcc_kube::wire::encode_base64(config) },
    })
}

/// A token and its life, in Unix seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub token: String,
    pub issued: i64,
    pub expires: i64,
}

impl Token {
    /// When a third of its life remains.
    pub fn renew_at(&self) -> i64 {
        self.issued + (self.expires - self.issued) * 2 / 3
    }
}

/// RFC 3339 of Unix seconds (empty when out of range).
pub fn ts(seconds: i64) -> String {
    Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The token of `secret` if it was issued for ServiceAccount `sa_uid` and more than a third of its
/// life remains at `now`: kept; otherwise a new one is requested.
pub fn still_valid(secret: &Secret, sa_uid: &str, now: i64) -> Option<Token> {
    let annotations = secret.metadata.annotations.as_ref()?;
    if annotations.get(SERVICE_ACCOUNT_UID_ANNOTATION)? != sa_uid {
        return None;
    }
    let time = |key: &str| {
        annotations
            .get(key)?
            .parse::<Timestamp>()
            .ok()
            .map(|t| t.as_second())
    };
    let (issued, expires) = (time(ISSUED_ANNOTATION)?, time(EXPIRES_ANNOTATION)?);
    let config = secret.data.as_ref()?.get(KUBECONFIG_KEY)?;
    let config: Value = xcc_kube::yaml::from_slice(&config.0).ok()?;
    let token = config["users"][0]["user"]["token"].as_str()?.to_string();
    let token = Token {
        token,
        issued,
        expires,
    };
    (expires > issued && token.renew_at() > now).then_some(token)
}

/// Where a reconcile of a link stopped, or that it linked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    NameTooLong,
    ServiceAccountConflict,
    /// The ServiceAccount as written has no UID yet.
    ServiceAccountWithoutUid,
    /// A Role or RoleBinding (this kind) of the token role's name is someone else's.
    RoleConflict(&'static str),
    /// No `--projection-advertise-url` (nor the agent's own URL).
    NoServerUrl,
    SecretConflict,
    /// ConfigMap `kube-root-ca.crt` has no `ca.crt`.
    NoClusterCa,
    /// The TokenRequest was answered without a token.
    EmptyToken,
    /// The TokenRequest was refused (the API server's bounded message).
    TokenRefused(String),
    /// The Secret holds a kubeconfig whose token is renewed in this many seconds.
    Linked {
        renew_in: u64,
    },
}

/// What a reconcile reports: the two conditions and when to look again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub service_account: Verdict,
    pub ready: Verdict,
    pub requeue: Duration,
}

/// The [`Outcome`] of `finding` for the link whose objects are `names` in `namespace`; the
/// kubeconfigs point at `url`.
pub fn report(finding: &Finding, names: &Names, namespace: &str, url: &str) -> Outcome {
    let Names {
        service_account: sa,
        secret,
        token_role,
    } = names;
    let both = |verdict: Verdict| Outcome {
        service_account: verdict.clone(),
        ready: verdict,
        requeue: RESYNC,
    };
    let sa_ok = Verdict::ok(
        Reason::ServiceAccountCreated,
        format!(
            "ServiceAccount {sa} is the workload cluster's identity (it may renew its own token)"
        ),
    );
    let not_ready = |verdict: Verdict| Outcome {
        service_account: sa_ok.clone(),
        ready: verdict,
        requeue: RESYNC,
    };
    match finding {
        Finding::NameTooLong => both(Verdict::not(
            Reason::NameTooLong,
            format!(
                "the link's name is too long for ServiceAccount {sa:?} and Secret {secret:?} (253 characters at most)"
            ),
        )),
        Finding::ServiceAccountConflict => both(Verdict::not(
            Reason::ServiceAccountConflict,
            format!("ServiceAccount {sa} exists and is not this link's; it is left alone"),
        )),
        Finding::ServiceAccountWithoutUid => both(Verdict::not(
            Reason::ServiceAccountNotReady,
            format!("ServiceAccount {sa} has no UID yet"),
        )),
        Finding::RoleConflict(kind) => both(Verdict::not(
            Reason::RoleConflict,
            format!("{kind} {token_role} exists and is not this link's; it is left alone"),
        )),
        Finding::NoServerUrl => not_ready(Verdict::not(
            Reason::NoServerUrl,
            "no API server URL to advertise (--projection-advertise-url)",
        )),
        Finding::SecretConflict => not_ready(Verdict::not(
            Reason::SecretConflict,
            format!("Secret {secret} exists and is not this link's; it is left alone"),
        )),
        Finding::NoClusterCa => not_ready(Verdict::not(
            Reason::ClusterCaNotFound,
            format!("ConfigMap {ROOT_CA_CONFIGMAP} of namespace {namespace} has no ca.crt"),
        )),
        Finding::EmptyToken => not_ready(Verdict::not(
            Reason::TokenRequestFailed,
            "the TokenRequest was answered without a token",
        )),
        Finding::TokenRefused(why) => Outcome {
            requeue: MIN_REQUEUE,
            ..not_ready(Verdict::not(
                Reason::TokenRequestFailed,
                format!("TokenRequest for ServiceAccount {sa}: {why}"),
            ))
        },
        Finding::Linked { renew_in } => Outcome {
            service_account: sa_ok.clone(),
            ready: Verdict::ok(
                Reason::Linked,
                format!(
                    "Secret {secret} (key {KUBECONFIG_KEY}) holds a kubeconfig for ServiceAccount {sa} at {url}"
                ),
            ),
            requeue: Duration::from_secs(*renew_in).clamp(MIN_REQUEUE, RESYNC),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_situation_reports_its_conditions_and_requeue() {
        let names = Names::of("workload-3c");
        let hour = 3600;
        // (situation, finding, ServiceAccountReady, Ready reason, ready, requeue)
        let rows: Vec<(&str, Finding, bool, Reason, bool, Duration)> = vec![
            (
                "name too long",
                Finding::NameTooLong,
                false,
                Reason::NameTooLong,
                false,
                RESYNC,
            ),
            (
                "someone else's ServiceAccount",
                Finding::ServiceAccountConflict,
                false,
                Reason::ServiceAccountConflict,
                false,
                RESYNC,
            ),
            (
                "ServiceAccount without UID",
                Finding::ServiceAccountWithoutUid,
                false,
                Reason::ServiceAccountNotReady,
                false,
                RESYNC,
            ),
            (
                "someone else's Role",
                Finding::RoleConflict("Role"),
                false,
                Reason::RoleConflict,
                false,
                RESYNC,
            ),
            (
                "no URL to advertise",
                Finding::NoServerUrl,
                true,
                Reason::NoServerUrl,
                false,
                RESYNC,
            ),
            (
                "someone else's Secret",
                Finding::SecretConflict,
                true,
                Reason::SecretConflict,
                false,
                RESYNC,
            ),
            (
                "no cluster CA",
                Finding::NoClusterCa,
                true,
                Reason::ClusterCaNotFound,
                false,
                RESYNC,
            ),
            (
                "token answer without token",
                Finding::EmptyToken,
                true,
                Reason::TokenRequestFailed,
                false,
                RESYNC,
            ),
            (
                "token refused: tried again soon",
                Finding::TokenRefused("forbidden".into()),
                true,
                Reason::TokenRequestFailed,
                false,
                MIN_REQUEUE,
            ),
            (
                "linked, token renewed in 16 h",
                Finding::Linked {
                    renew_in: 16 * hour,
                },
                true,
                Reason::Linked,
                true,
                RESYNC,
            ),
            (
                "linked, token renewed in 2 min",
                Finding::Linked { renew_in: 120 },
                true,
                Reason::Linked,
                true,
                Duration::from_secs(120),
            ),
            (
                "linked, token due now",
                Finding::Linked { renew_in: 0 },
                true,
                Reason::Linked,
                true,
                MIN_REQUEUE,
            ),
        ];
        for (situation, finding, sa_ready, why, ready, requeue) in rows {
            let outcome = report(
                &finding,
                &names,
                "services-toolkit",
                "https://services.example:6443",
            );
            assert_eq!(outcome.service_account.ready, sa_ready, "{situation}");
            if !sa_ready {
                assert_eq!(
                    Reason::from(&*outcome.service_account.reason),
                    why,
                    "{situation}"
                );
            } else {
                assert_eq!(
                    Reason::from(&*outcome.service_account.reason),
                    Reason::ServiceAccountCreated,
                    "{situation}"
                );
            }
            assert_eq!(
                (Reason::from(&*outcome.ready.reason), outcome.ready.ready),
                (why, ready),
                "{situation}"
            );
            assert_eq!(outcome.requeue, requeue, "{situation}");
        }
        let refused = report(
            &Finding::TokenRefused("forbidden".into()),
            &names,
            "ns",
            "u",
        );
        assert_eq!(
            refused.ready.message,
            "TokenRequest for ServiceAccount xcc-upstream-workload-3c: forbidden"
        );
        let role = report(&Finding::RoleConflict("RoleBinding"), &names, "ns", "u");
        assert_eq!(
            role.ready.message,
            "RoleBinding xcc-upstream-workload-3c-token exists and is not this link's; it is left alone"
        );
    }

    #[test]
    fn names_longer_than_kubernetes_allows_are_refused() {
        assert!(!Names::of(&"a".repeat(240)).too_long());
        assert!(Names::of(&"a".repeat(241)).too_long());
    }
}

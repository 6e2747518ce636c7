//! UpstreamClusterLink: the ServiceAccount a workload cluster acts as, and a ready-to-use
//! kubeconfig for it.
//!
//! For link `L` in namespace `N` the agent applies ServiceAccount `xcc-upstream-L`, Role and
//! RoleBinding `xcc-upstream-L-token` (that ServiceAccount may request its own tokens and nothing
//! more, so that a workload cluster renews its copy of the kubeconfig: [`super::renew`]) and
//! Secret `L-kubeconfig` (key `kubeconfig`), all in `N` and owned by the link, so that deleting
//! the link removes them. The kubeconfig holds the advertised API server URL, the cluster CA from ConfigMap
//! `kube-root-ca.crt` of `N`, and a token from the TokenRequest API (valid [`TOKEN_SECONDS`],
//! renewed once less than a third of its life remains, or when the ServiceAccount was replaced).
//! An object of either name that the link does not own is left alone (`...Conflict`). Tokens are
//! never logged.

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        core::v1::{ConfigMap, Secret, ServiceAccount},
        rbac::v1::{Role, RoleBinding},
    },
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::PostParams,
    runtime::{controller::Action, events::Recorder},
};
use serde_json::{Value, json};

use super::{
    Error,
    api::{ObjectName, UpstreamClusterLink},
    owned_by, publish, reason_of,
    write::{self, Write},
};
use crate::sink::{self, Counted};

mod plan;

use plan::{Finding, Names, Token};

/// Lifetime asked for each token: a day.
pub const TOKEN_SECONDS: i64 = 24 * 3600;
/// When the token in the Secret was issued (RFC 3339).
pub const ISSUED_ANNOTATION: &str = "xcc.test/token-issued";
/// When the token in the Secret expires (RFC 3339).
pub const EXPIRES_ANNOTATION: &str = "xcc.test/token-expires";
/// The UID of the ServiceAccount the token was issued for.
pub const SERVICE_ACCOUNT_UID_ANNOTATION: &str = "xcc.test/service-account-uid";
/// The Secret's key holding the kubeconfig.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// The ConfigMap of every namespace holding the cluster CA.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
/// Longest wait between two reconciles of a link (drift of what it made).
const RESYNC: Duration = Duration::from_secs(600);
/// Shortest requeue.
const MIN_REQUEUE: Duration = Duration::from_secs(30);

pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    /// The API server URL written into the kubeconfigs.
    pub advertise_url: String,
    /// Lifetime asked for each token, in seconds.
    pub token_seconds: i64,
    pub counted: Counted,
}

/// The ServiceAccount of link `link`.
pub fn service_account_name(link: &str) -> String {
    format!("xcc-upstream-{link}")
}

/// The kubeconfig Secret of link `link`.
pub fn secret_name(link: &str) -> String {
    format!("{link}-kubeconfig")
}

pub async fn reconcile(link: Arc<UpstreamClusterLink>, ctx: Arc<Context>) -> Result<Action, Error> {
    let (Some(namespace), Some(uid)) = (link.namespace(), link.uid()) else {
        return Ok(Action::await_change());
    };
    if link.metadata.deletion_timestamp.is_some() {
        // Going: what it owns goes with it; nothing is made again.
        return Ok(Action::await_change());
    }
    let name = link.name_any();
    let generation = link.meta().generation;
    let names = Names::of(&name);
    let finding = ensure(&link, &names, &namespace, &uid, &ctx).await?;
    let outcome = plan::report(&finding, &names, &namespace, &ctx.advertise_url);

    let old = link.status.clone().unwrap_or_default();
    let mut status = old.clone();
    outcome
        .service_account
        .set(&mut status.conditions, "ServiceAccountReady", generation);
    outcome
        .ready
        .set(&mut status.conditions, "Ready", generation);
    status.service_account = outcome.service_account.ready.then(|| ObjectName {
        name: service_account_name(&name),
    });
    status.observed_generation = generation;
    let api: Api<UpstreamClusterLink> = Api::namespaced(ctx.client.clone(), &namespace);
    sink::write_status(&api, link.as_ref(), &status, &ctx.counted).await?;
    if reason_of(&old.conditions, "Ready") != Some(&*outcome.ready.reason) {
        tracing::info!(%namespace, link = %name, ready = outcome.ready.ready, reason = %outcome.ready.reason, message = %outcome.ready.message, "UpstreamClusterLink status");
        publish(&ctx.recorder, link.as_ref(), "Link", &outcome.ready).await;
    }
    Ok(Action::requeue(outcome.requeue))
}

pub fn error_policy(link: Arc<UpstreamClusterLink>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(
        namespace = %link.namespace().unwrap_or_default(),
        link = %link.name_any(),
        %error,
        "UpstreamClusterLink reconcile failed"
    );
    Action::requeue(Duration::from_secs(5))
}

/// Observe, decide and write in the order the decisions need them: the ServiceAccount (its UID
/// is needed for the token), its token Role and RoleBinding, then the kubeconfig Secret. Where
/// it stopped ([`plan::report`] says what that means for the status), or that it linked.
async fn ensure(
    link: &UpstreamClusterLink,
    names: &Names,
    namespace: &str,
    uid: &str,
    ctx: &Context,
) -> Result<Finding, Error> {
    if names.too_long() {
        return Ok(Finding::NameTooLong);
    }
    let owner = serde_json::to_value(link.controller_owner_ref(&()))?;
    let sa_api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), namespace);
    let current = sa_api.get_opt(&names.service_account).await?;
    let desired = plan::service_account(names, namespace, &owner);
    let sa = match (write::decide(current.as_ref(), uid, &desired)?, current) {
        (Write::LeaveAlone, _) => return Ok(Finding::ServiceAccountConflict),
        (Write::Keep, Some(sa)) => sa,
        _ => sink::apply_whole(&sa_api, &names.service_account, desired, &ctx.counted).await?,
    };
    let Some(sa_uid) = sa.uid() else {
        return Ok(Finding::ServiceAccountWithoutUid);
    };
    let role = plan::token_role(names, namespace, &owner);
    if let Some(kind) = apply_owned::<Role>(ctx, namespace, &names.token_role, uid, role).await? {
        return Ok(Finding::RoleConflict(kind));
    }
    let binding = plan::token_role_binding(names, namespace, &owner);
    if let Some(kind) =
        apply_owned::<RoleBinding>(ctx, namespace, &names.token_role, uid, binding).await?
    {
        return Ok(Finding::RoleConflict(kind));
    }

    // The kubeconfig Secret.
    if ctx.advertise_url.is_empty() {
        return Ok(Finding::NoServerUrl);
    }
    let secret_api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let current = secret_api.get_opt(&names.secret).await?;
    if current
        .as_ref()
        .is_some_and(|secret| !owned_by(&secret.metadata, uid))
    {
        return Ok(Finding::SecretConflict);
    }
    let ca = Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace)
        .get_opt(ROOT_CA_CONFIGMAP)
        .await?
        .and_then(|cm| cm.data?.remove("ca.crt"))
        .filter(|ca| !ca.trim().is_empty());
    let Some(ca) = ca else {
        return Ok(Finding::NoClusterCa);
    };
    let now = Timestamp::now().as_second();
    let kept = current
        .as_ref()
        .and_then(|secret| plan::still_valid(secret, &sa_uid, now));
    let token = match kept {
        Some(token) => token,
        None => match request_token(&sa_api, names, ctx.token_seconds, now).await? {
            Ok(token) => token,
            Err(finding) => return Ok(finding),
        },
    };
    let config = kubeconfig(
        &ctx.advertise_url,
        &ca,
        &names.service_account,
        &token.token,
        namespace,
    )?;
    let desired = plan::kubeconfig_secret(names, namespace, &owner, &token, &sa_uid, &config);
    if write::decide(current.as_ref(), uid, &desired)? == Write::Apply {
        sink::apply_whole(&secret_api, &names.secret, desired, &ctx.counted).await?;
    }
    let renew_in = (token.renew_at() - now).max(0) as u64;
    Ok(Finding::Linked { renew_in })
}

/// A token for the link's ServiceAccount, valid `seconds` from `now`; or what stopped it.
async fn request_token(
    sa_api: &Api<ServiceAccount>,
    names: &Names,
    seconds: i64,
    now: i64,
) -> Result<Result<Token, Finding>, Error> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(seconds),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    match sa_api
        .create_token_request(&names.service_account, &PostParams::default(), &request)
        .await
    {
        Ok(TokenRequest {
            status: Some(status),
            ..
        }) if !status.token.is_empty() => Ok(Ok(Token {
            token: status.token,
            issued: now,
            expires: status.expiration_timestamp.0.as_second(),
        })),
        Ok(_) => Ok(Err(Finding::EmptyToken)),
        Err(kube::Error::Api(error)) => Ok(Err(Finding::TokenRefused(xcc_kube::bounded(&error)))),
        Err(error) => Err(error.into()),
    }
}

/// Applies `desired` as `K` `name` in `namespace` unless it is up to date; the kind's name
/// instead when an object of that name exists that link `uid` does not own (left alone).
async fn apply_owned<K>(
    ctx: &Context,
    namespace: &str,
    name: &str,
    uid: &str,
    desired: Value,
) -> Result<Option<&'static str>, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    let current = api.get_opt(name).await?;
    match write::decide(current.as_ref(), uid, &desired)? {
        Write::LeaveAlone => return Ok(Some(<K as k8s_openapi::Resource>::KIND)),
        Write::Keep => {}
        Write::Apply => {
            sink::apply_whole(&api, name, desired, &ctx.counted).await?;
        }
    }
    Ok(None)
}

/// A kubeconfig for ServiceAccount `user` with `token` at `server`, trusting `ca` (PEM).
pub fn kubeconfig(
    server: &str,
    ca: &str,
    user: &str,
    token: &str,
    namespace: &str,
) -> Result<String, xcc_kube::yaml::SerializeError> {
    xcc_kube::yaml::to_string(&json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "upstream", "cluster": {
            "server": server,
            "certificate-authority-data": xcc_kube::wire::encode_base64(ca),
        }}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "upstream", "context": {
            "cluster": "upstream",
            "user": user,
            "namespace": namespace,
        }}],
        "current-context": "upstream",
    }))
}

#[cfg(test)]
mod tests {
    use super::plan::{still_valid, ts};
    use super::*;
    use crate::projection::api::Reason;
    use crate::projection::testing::{body, lines};
    use kube::runtime::events::Reporter;
    use xcc_kube::scenario::{Scenario, echo, not_found, with_status};

    const SA_PATH: &str =
        "/api/v1/namespaces/services-toolkit/serviceaccounts/xcc-upstream-workload-3c";
    const SECRET_PATH: &str = "/api/v1/namespaces/services-toolkit/secrets/workload-3c-kubeconfig";
    const ROLE_PATH: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/services-toolkit/roles/xcc-upstream-workload-3c-token";
    const BINDING_PATH: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/services-toolkit/rolebindings/xcc-upstream-workload-3c-token";
    const STATUS_PATH: &str = "/apis/projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1/namespaces/services-toolkit/upstreamclusterlinks/workload-3c/status";
    const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/services-toolkit/events";
    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn link() -> Arc<UpstreamClusterLink> {
        Arc::new(serde_json::from_value(link_json()).unwrap())
    }

    fn link_json() -> Value {
        json!({
                "apiVersion": "projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1",
                "kind": "UpstreamClusterLink",
                "metadata": {"name": "workload-3c", "namespace": "services-toolkit",
                             "uid": "link-uid", "generation": 1},
                "spec": {"downstream": {"name": "workload-3c"}},
        })
    }

    fn context(client: Client) -> Arc<Context> {
        Arc::new(Context {
            recorder: Recorder::new(
                client.clone(),
                Reporter {
                    controller: "xcc-agent".into(),
                    instance: None,
                },
            ),
            client,
            advertise_url: "https://services.example:6443".into(),
            token_seconds: TOKEN_SECONDS,
            counted: Counted {
                metrics: crate::sync_metrics::SyncMetrics::register(
                    &mut prometheus_client::registry::Registry::default(),
                ),
                reconciler: "test",
            },
        })
    }

    #[tokio::test]
    async fn a_link_makes_its_service_account_kubeconfig_secret_and_status() {
        let (client, server) = Scenario::new()
            .expect("GET", SA_PATH)
            .reply(not_found())
            .expect("PATCH", SA_PATH)
            .reply_with(echo)
            .expect("GET", ROLE_PATH)
            .reply(not_found())
            .expect("PATCH", ROLE_PATH)
            .reply_with(echo)
            .expect("GET", BINDING_PATH)
            .reply(not_found())
            .expect("PATCH", BINDING_PATH)
            .reply_with(echo)
            .expect("GET", SECRET_PATH)
            .reply(not_found())
            .expect(
                "GET",
                "/api/v1/namespaces/services-toolkit/configmaps/kube-root-ca.crt",
            )
            .reply((
                200,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "kube-root-ca.crt", "namespace": "services-toolkit"},
                       "data": {"ca.crt": CA}}),
            ))
            .expect("POST", format!("{SA_PATH}/token"))
            .check(|body| assert_eq!(body["spec"]["expirationSeconds"], 86_400))
            .reply_with(|body| {
                let expires =
                    Timestamp::from_second(Timestamp::now().as_second() + 86_400).unwrap();
                (
                    201,
                    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                           "spec": body["spec"],
                           "status": {"token": "t0k3n", "expirationTimestamp": expires.to_string()}}),
                )
            })
            .expect("PATCH", SECRET_PATH)
            .reply_with(echo)
            .expect("PATCH", STATUS_PATH)
            .reply_with(|body| with_status(link_json(), body))
            .expect("POST", EVENTS_PATH)
            .reply_with(echo)
            .run();
        let action = reconcile(link(), context(client)).await.unwrap();
        assert_eq!(action, Action::requeue(RESYNC));
        let seen = server.done().await;

        let sa = body(&seen, &format!("PATCH {SA_PATH}"));
        assert_eq!(sa["metadata"]["ownerReferences"][0]["uid"], "link-uid");
        assert_eq!(sa["metadata"]["ownerReferences"][0]["controller"], true);

        // The ServiceAccount may request its own tokens, and nothing more.
        let role = body(&seen, &format!("PATCH {ROLE_PATH}"));
        assert_eq!(
            role["rules"],
            json!([{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                "resourceNames": ["xcc-upstream-workload-3c"], "verbs": ["create"]}])
        );
        let binding = body(&seen, &format!("PATCH {BINDING_PATH}"));
        assert_eq!(binding["roleRef"]["name"], "xcc-upstream-workload-3c-token");
        assert_eq!(binding["subjects"][0]["name"], "xcc-upstream-workload-3c");
        assert_eq!(binding["metadata"]["ownerReferences"][0]["uid"], "link-uid");

        let secret = body(&seen, &format!("PATCH {SECRET_PATH}"));
        assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], "link-uid");
        assert_eq!(
            secret["metadata"]["annotations"][SERVICE_ACCOUNT_UID_ANNOTATION],
            "uid-of-written"
        );
        let config =
            xcc_kube::wire::decode_base64(secret["data"][KUBECONFIG_KEY].as_str().unwrap())
                .unwrap();
        let config: Value = xcc_kube::yaml::from_slice(&config).unwrap();
        assert_eq!(
            config["clusters"][0]["cluster"]["server"],
            "https://services.example:6443"
        );
        assert_eq!(
            config["clusters"][0]["cluster"]["certificate-authority-data"],
            xcc_kube::wire::encode_base64(CA)
        );
        assert_eq!(config["users"][0]["user"]["token"], "t0k3n");
        assert_eq!(
            config["contexts"][0]["context"]["namespace"],
            "services-toolkit"
        );

        let status = &body(&seen, &format!("PATCH {STATUS_PATH}"))["status"];
        assert_eq!(status["serviceAccount"]["name"], "xcc-upstream-workload-3c");
        assert_eq!(status["observedGeneration"], 1);
        let conditions = status["conditions"].as_array().unwrap();
        let ready = conditions
            .iter()
            .find(|c| c["type"] == "ServiceAccountReady")
            .unwrap();
        assert_eq!(ready["status"], "True");
        let ready = conditions.iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(
            (&ready["status"], &ready["reason"]),
            (&json!("True"), &json!(Reason::Linked))
        );
        assert_eq!(ready["observedGeneration"], 1);
    }

    #[tokio::test]
    async fn a_service_account_of_someone_else_is_left_alone() {
        let (client, server) = Scenario::new()
            .expect("GET", SA_PATH)
            .reply((
                200,
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "xcc-upstream-workload-3c", "namespace": "services-toolkit", "uid": "theirs"}}),
            ))
            .expect("PATCH", STATUS_PATH)
            .reply_with(|body| with_status(link_json(), body))
            .expect("POST", EVENTS_PATH)
            .reply_with(echo)
            .run();
        reconcile(link(), context(client)).await.unwrap();
        let seen = server.done().await;
        assert!(!lines(&seen).contains(&format!("PATCH {SA_PATH}")));
        let status = &body(&seen, &format!("PATCH {STATUS_PATH}"))["status"];
        assert!(status.get("serviceAccount").is_none());
        for condition in status["conditions"].as_array().unwrap() {
            assert_eq!(condition["status"], "False");
            assert_eq!(condition["reason"], Reason::ServiceAccountConflict.as_str());
        }
    }

    #[test]
    fn a_token_is_kept_until_a_third_of_its_life_remains_and_only_for_its_service_account() {
        let config = kubeconfig("https://x:6443", CA, "sa", "t0k3n", "ns").unwrap();
        let secret = |sa_uid: &str| -> Secret {
            serde_json::from_value(json!({
                "metadata": {"name": "l-kubeconfig", "annotations": {
                    ISSUED_ANNOTATION: ts(1_000),
                    EXPIRES_ANNOTATION: ts(1_000 + 3_000),
                    SERVICE_ACCOUNT_UID_ANNOTATION: sa_uid,
                }},
                "data": {KUBECONFIG_KEY: xcc_kube::wire::encode_base64(&config)},
            }))
            .unwrap()
        };
        let kept = still_valid(&secret("u1"), "u1", 2_999).unwrap();
        assert_eq!(kept.token, "t0k3n");
        assert_eq!(kept.renew_at(), 3_000);
        assert!(still_valid(&secret("u1"), "u1", 3_000).is_none());
        assert!(still_valid(&secret("u1"), "u2", 1_500).is_none());
    }
}

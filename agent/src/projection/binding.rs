//! APIExportRoleBinding: binds `spec.clusterRoleRef` to the ServiceAccount of the
//! UpstreamClusterLink `spec.upstreamClusterLinkRef`.
//!
//! The APIExportRoleBinding is cluster-scoped and names a ClusterRole, so the agent applies
//! ClusterRoleBinding `xcc-apiexport-<name>`, owned by it (deleting it removes the binding). The
//! ClusterRoleBinding goes too when the link is gone, and is replaced when `clusterRoleRef`
//! changes (a roleRef cannot be updated). One of that name the binding does not own is left
//! alone (`Conflict`). A missing link or ClusterRole says so in `Ready`.

use std::{sync::Arc, time::Duration};

use super::{
    Error, Verdict,
    api::{APIExportRoleBinding, ProjectionStatus, UpstreamClusterLink},
    publish, reason_of,
};
use crate::sink::{self, Counted};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{controller::Action, events::Recorder},
};

mod plan;

use plan::{Next, Observed, Read};

/// Longest wait between two reconciles (a ClusterRole created later is not watched).
const RESYNC: Duration = Duration::from_secs(300);
/// Requeue while the ClusterRole is missing.
const ROLE_MISSING_REQUEUE: Duration = Duration::from_secs(30);

pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub counted: Counted,
}

/// The ClusterRoleBinding of APIExportRoleBinding `binding`.
pub fn cluster_role_binding_name(binding: &str) -> String {
    format!("xcc-apiexport-{binding}")
}

pub async fn reconcile(
    binding: Arc<APIExportRoleBinding>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let Some(uid) = binding.uid() else {
        return Ok(Action::await_change());
    };
    if binding.metadata.deletion_timestamp.is_some() {
        // Going: its ClusterRoleBinding goes with it.
        return Ok(Action::await_change());
    }
    let generation = binding.meta().generation;
    let (verdict, requeue) = ensure(&binding, &uid, &ctx).await?;
    let old = binding.status.clone().unwrap_or_default();
    let mut status = ProjectionStatus {
        observed_generation: generation,
        conditions: old.conditions.clone(),
    };
    verdict.set(&mut status.conditions, "Ready", generation);
    let api: Api<APIExportRoleBinding> = Api::all(ctx.client.clone());
    sink::write_status(&api, binding.as_ref(), &status, &ctx.counted).await?;
    if reason_of(&old.conditions, "Ready") != Some(&*verdict.reason) {
        tracing::info!(binding = %binding.name_any(), ready = verdict.ready, reason = %verdict.reason, message = %verdict.message, "APIExportRoleBinding status");
        publish(&ctx.recorder, binding.as_ref(), "Bind", &verdict).await;
    }
    Ok(Action::requeue(requeue))
}

pub fn error_policy(binding: Arc<APIExportRoleBinding>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(binding = %binding.name_any(), error = %xcc_kube::bounded(&error), "APIExportRoleBinding reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Reads what [`plan::next`] asks for until it has a plan, then performs it: the
/// ClusterRoleBinding deleted (withdrawn or to be replaced) and applied. `Ready` and when to look
/// again.
async fn ensure(
    binding: &APIExportRoleBinding,
    uid: &str,
    ctx: &Context,
) -> Result<(Verdict, Duration), Error> {
    let name = cluster_role_binding_name(&binding.name_any());
    let crb_api: Api<ClusterRoleBinding> = Api::all(ctx.client.clone());
    let link_ref = &binding.spec.upstream_cluster_link_ref;
    let mut seen = Observed::default();
    let plan = loop {
        match plan::next(binding, uid, &seen)? {
            Next::Read(Read::ClusterRoleBinding) => {
                seen.cluster_role_binding = Some(crb_api.get_opt(&name).await?);
            }
            Next::Read(Read::Link) => {
                let links =
                    Api::<UpstreamClusterLink>::namespaced(ctx.client.clone(), &link_ref.namespace);
                seen.link = Some(links.get_opt(&link_ref.name).await?);
            }
            Next::Read(Read::ClusterRole) => {
                let roles = Api::<ClusterRole>::all(ctx.client.clone());
                let role = &binding.spec.cluster_role_ref.name;
                seen.cluster_role = Some(roles.get_opt(role).await?.is_some());
            }
            Next::Done(plan) => break plan,
        }
    };
    if plan.delete
        && let Some(Some(crb)) = &seen.cluster_role_binding
    {
        sink::delete_exact(&crb_api, &name, crb.uid(), None, &ctx.counted).await?;
    }
    if let Some(desired) = plan.apply {
        match sink::apply_whole(&crb_api, &name, desired, &ctx.counted).await {
            Ok(_) => {}
            // Forbidden: the agent may not bind this role (escalation check, or RBAC narrowed).
            Err(kube::Error::Api(error)) if error.code == 403 || error.code == 422 => {
                return Ok(plan::refused(binding, &xcc_kube::bounded(&error)));
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok((plan.verdict, plan.requeue))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::api::Reason;
    use crate::projection::testing::{body, lines};
    use kube::runtime::events::Reporter;
    use serde_json::{Value, json};
    use xcc_kube::scenario::{Request, Scenario, echo, not_found, with_status};

    const CRB_PATH: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/xcc-apiexport-fish-sauce-cluster-1-a";
    const LINK_PATH: &str = "/apis/projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1/namespaces/project-alpha/upstreamclusterlinks/fish-sauce";
    const STATUS_PATH: &str = "/apis/projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1/apiexportrolebindings/fish-sauce-cluster-1-a/status";
    const ROLE_PATH: &str = "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-1-a";
    const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

    fn binding() -> Arc<APIExportRoleBinding> {
        let text =
            include_str!("../../../manifests/examples/projection-apiexport-role-binding.yaml");
        let mut binding: APIExportRoleBinding = xcc_kube::yaml::from_str(text).unwrap();
        binding.metadata.uid = Some("binding-uid".into());
        binding.metadata.generation = Some(2);
        Arc::new(binding)
    }

    fn binding_json() -> Value {
        serde_json::to_value(binding().as_ref()).unwrap()
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
            counted: Counted {
                metrics: crate::sync_metrics::SyncMetrics::register(
                    &mut prometheus_client::registry::Registry::default(),
                ),
                reconciler: "test",
            },
        })
    }

    fn ready(seen: &[Request]) -> Value {
        let status = body(seen, &format!("PATCH {STATUS_PATH}"))["status"].clone();
        assert_eq!(status["observedGeneration"], 2);
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone()
    }

    #[tokio::test]
    async fn a_binding_without_its_link_says_so() {
        let (client, server) = Scenario::new()
            .expect("GET", CRB_PATH)
            .reply(not_found())
            .expect("GET", LINK_PATH)
            .reply(not_found())
            .expect("PATCH", STATUS_PATH)
            .reply_with(|body| with_status(binding_json(), body))
            .expect("POST", EVENTS_PATH)
            .reply_with(echo)
            .run();
        reconcile(binding(), context(client)).await.unwrap();
        let seen = server.done().await;
        let ready = ready(&seen);
        assert_eq!(ready["status"], "False");
        assert_eq!(
            ready["reason"],
            Reason::UpstreamClusterLinkNotFound.as_str()
        );
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("project-alpha/fish-sauce")
        );
        assert!(
            !lines(&seen)
                .iter()
                .any(|l| l.starts_with("PATCH /apis/rbac"))
        );
    }

    fn link() -> (u16, Value) {
        (
            200,
            json!({"apiVersion": "projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1",
                   "kind": "UpstreamClusterLink",
                   "metadata": {"name": "fish-sauce", "namespace": "project-alpha", "uid": "l"},
                   "spec": {"downstream": {"name": "w"}},
                   "status": {"serviceAccount": {"name": "xcc-upstream-fish-sauce"}}}),
        )
    }

    #[tokio::test]
    async fn a_binding_without_its_cluster_role_says_so() {
        let (client, server) = Scenario::new()
            .expect("GET", CRB_PATH)
            .reply(not_found())
            .expect("GET", LINK_PATH)
            .reply(link())
            .expect("GET", ROLE_PATH)
            .reply(not_found())
            .expect("PATCH", STATUS_PATH)
            .reply_with(|body| with_status(binding_json(), body))
            .expect("POST", EVENTS_PATH)
            .reply_with(echo)
            .run();
        let action = reconcile(binding(), context(client)).await.unwrap();
        let seen = server.done().await;
        assert_eq!(action, Action::requeue(ROLE_MISSING_REQUEUE));
        let ready = ready(&seen);
        assert_eq!(ready["reason"], Reason::ClusterRoleNotFound.as_str());
    }

    #[tokio::test]
    async fn a_binding_binds_the_cluster_role_to_the_links_service_account() {
        let (client, server) = Scenario::new()
            .expect("GET", CRB_PATH)
            .reply(not_found())
            .expect("GET", LINK_PATH)
            .reply(link())
            .expect("GET", ROLE_PATH)
            .reply((
                200,
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                       "metadata": {"name": "cluster-1-a"}, "rules": []}),
            ))
            .expect("PATCH", CRB_PATH)
            .reply_with(echo)
            .expect("PATCH", STATUS_PATH)
            .reply_with(|body| with_status(binding_json(), body))
            .expect("POST", EVENTS_PATH)
            .reply_with(echo)
            .run();
        reconcile(binding(), context(client)).await.unwrap();
        let seen = server.done().await;
        let crb = body(&seen, &format!("PATCH {CRB_PATH}"));
        assert_eq!(crb["roleRef"]["name"], "cluster-1-a");
        assert_eq!(crb["roleRef"]["kind"], "ClusterRole");
        assert_eq!(
            crb["subjects"],
            json!([{"kind": "ServiceAccount", "name": "xcc-upstream-fish-sauce", "namespace": "project-alpha"}])
        );
        assert_eq!(crb["metadata"]["ownerReferences"][0]["uid"], "binding-uid");
        let ready = ready(&seen);
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["reason"], Reason::Bound.as_str());
    }
}

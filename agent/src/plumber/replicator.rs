//! The Replicator reconciler: a Replicator's objects ([`super::desired`]) applied to this
//! cluster and to each target, each cluster on its own with its own deadline and status
//! entries, so a silent target is `Unreachable` while the others are `applied`.
//!
//! - An object that exists without our origin annotation is someone else's: `Conflict`, left as
//!   is (a namespace that was already there is `existing`: used, never deleted).
//! - Drift is reverted from a watch: the process's shared metadata watches of the replicated
//!   kinds on every cluster in use wake the Replicator when an object of it changes to a
//!   resourceVersion this reconciler did not leave, or is deleted.
//! - Deletion (finalizer) removes what it made, in reverse order, everywhere; a silent target
//!   is not waited for beyond [`CLUSTER_DEADLINE`], and what was left there is recorded in the
//!   status and in a Warning Event (`LeftBehind`).

mod clusters;
mod execute;
mod observe;
mod plan;
mod watch;

use std::{sync::Arc, time::Duration};

use dashmap::DashMap;

use kube::{
    Api, Client, ResourceExt,
    runtime::{
        controller::Action,
        events::Recorder,
        finalizer::{Event as FinalizerEvent, finalizer},
        reflector::ObjectRef,
    },
};
use tokio::sync::mpsc::UnboundedSender;
use xcc_kube::{PeerClients, status::Verdict};

use super::{
    Registry,
    api::{Reason, Replicator},
    certs::Bundle,
    desired::{self, Kinds},
};
use xcc_sync::Core;

use crate::{sink::Counted, sources::Sources};

/// Finalizer on every Replicator: its objects are removed everywhere before it goes.
pub const FINALIZER: &str = "plumber.xcc.test/cleanup";

/// How long one cluster may take for all of a Replicator's objects: a target that stops
/// answering mid-way is `Unreachable` after this, before the prober (one probe interval and
/// deadline) may have noticed.
pub const CLUSTER_DEADLINE: Duration = Duration::from_secs(6);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl xcc_sync::kit::ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(error) => error.metric_label(),
            Error::Finalizer(error) => error.metric_label(),
        }
    }
}

/// `(cluster identity, kind, namespace, name)` of a replicated object.
type Key = (String, String, String, String);

pub struct Context {
    client: Client,
    peers: PeerClients,
    sources: Sources,
    registry: Registry,
    recorder: Recorder,
    counted: Counted,
    wake: UnboundedSender<ObjectRef<Replicator>>,
    /// The resourceVersion each of our writes (or checks) left; "" once we deleted it.
    written: Arc<DashMap<Key, String>>,
    /// The drift watch of each kind on each cluster in use, by client identity and
    /// `group/version/kind`.
    watched: DashMap<(String, String), tokio::task::AbortHandle>,
    /// Kinds of `resources[]` found by discovery here.
    kinds: tokio::sync::Mutex<Kinds>,
    /// Certificates made for each Replicator (by UID) that are not in this cluster's
    /// `ca-secret` yet (or cannot be, when that Secret is someone else's): made once, not at
    /// every reconcile.
    made: DashMap<String, Bundle>,
}

impl Context {
    pub fn new(
        core: Core,
        registry: Registry,
        recorder: Recorder,
        wake: UnboundedSender<ObjectRef<Replicator>>,
    ) -> Context {
        Context {
            client: core.client,
            peers: core.peers,
            sources: core.sources,
            registry,
            recorder,
            counted: Counted {
                metrics: core.metrics,
                reconciler: "plumber-replicator",
            },
            wake,
            written: Arc::default(),
            watched: DashMap::new(),
            kinds: tokio::sync::Mutex::default(),
            made: DashMap::new(),
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        for handle in self.watched.iter() {
            handle.abort();
        }
    }
}

pub async fn reconcile(replicator: Arc<Replicator>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<Replicator> = Api::all(ctx.client.clone());
    let result = finalizer(&api, FINALIZER, replicator, |event| async {
        match event {
            FinalizerEvent::Apply(r) => apply(&api, &r, &ctx).await,
            FinalizerEvent::Cleanup(r) => cleanup(&api, &r, &ctx).await,
        }
    })
    .await;
    xcc_kube::finalizers::finalized(result).map_err(|e| Error::Finalizer(Box::new(e)))
}

pub fn error_policy(replicator: Arc<Replicator>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(replicator = %replicator.name_any(), error = %xcc_kube::bounded(&error), "Replicator reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Applies `replicator` on every cluster it names: observe (kinds, certificates, clusters) →
/// the objects wanted → each cluster's writes → the status.
async fn apply(
    api: &Api<Replicator>,
    replicator: &Replicator,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = replicator.name_any();
    let origin = desired::origin(&name);
    let kinds = observe::resolve_kinds(replicator, ctx).await;
    let objects = observe::certificates(replicator, ctx, &origin)
        .await
        .and_then(|certs| desired::objects(replicator, &name, certs.as_ref(), &kinds));
    let objects = match objects {
        Ok(objects) => objects,
        Err(why) => {
            let verdict = Verdict::not(Reason::InvalidSpec, why);
            execute::write_status(api, replicator, ctx, Vec::new(), verdict).await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };
    if !ctx.registry.read() {
        // The detector reads the Secret at start; it wakes every Replicator when it has.
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let clusters = clusters::resolve(replicator, ctx, &[]);
    let in_use = clusters.iter().map(|c| c.name().to_string()).collect();
    let stale = plan::stale_clusters(replicator, &in_use);
    let mut applied =
        execute::apply_everywhere(ctx, &clusters, &objects, &origin, replicator).await;
    if !stale.is_empty() {
        let objects = observe::without_shared_namespace(replicator, ctx, &objects).await?;
        let left =
            execute::remove_everywhere(replicator, ctx, &objects, &origin, &stale, true).await;
        applied.extend(left);
    }
    let verdict = plan::verdict(&applied);
    let requeue = plan::requeue(verdict.ready);
    execute::write_status(api, replicator, ctx, applied, verdict).await?;
    Ok(Action::requeue(requeue))
}

/// Removes `replicator`'s objects from every cluster of its status; what could not be removed
/// is written to the status before the finalizer goes.
async fn cleanup(
    api: &Api<Replicator>,
    replicator: &Replicator,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = replicator.name_any();
    let origin = desired::origin(&name);
    ctx.made.remove(&replicator.uid().unwrap_or_default());
    let kinds = observe::resolve_kinds(replicator, ctx).await;
    // The Secrets' names are all that matter for deletion.
    let objects = match desired::objects(replicator, &name, Some(&plan::names_only()), &kinds) {
        Ok(objects) => objects,
        // A spec that never made objects has nothing to remove beyond what it names.
        Err(why) => {
            tracing::info!(replicator = %name, %why, "Replicator removed; its spec named nothing to remove");
            return Ok(Action::await_change());
        }
    };
    let in_status = plan::clusters_in_status(replicator);
    let objects = observe::without_shared_namespace(replicator, ctx, &objects).await?;
    let left =
        execute::remove_everywhere(replicator, ctx, &objects, &origin, &in_status, false).await;
    match plan::left_behind(&left) {
        Some(verdict) => {
            let note = &verdict.message;
            tracing::warn!(replicator = %name, %note, "Replicator deleted with objects left behind");
            execute::write_status(api, replicator, ctx, left, verdict).await?;
        }
        None => {
            tracing::info!(replicator = %name, "Replicator deleted; its objects are removed everywhere")
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::{
        clusters::Cluster,
        execute::{apply_one, key},
        observe::without_shared_namespace,
        plan::verdict,
    };
    use crate::{
        plumber::{
            api::{ApplyState, ApplyStatus},
            desired::Object,
        },
        sink::ORIGIN_ANNOTATION,
    };
    use serde_json::Value;
    use serde_json::json;
    use xcc_kube::scenario::{Running, Scenario};

    /// The test Deployment's apply status on `cluster` (also read by the plan's tests).
    pub(super) fn e(cluster: &str, status: ApplyState) -> ApplyStatus {
        ApplyStatus {
            cluster: cluster.into(),
            kind: "Deployment".into(),
            name: "nginx".into(),
            apply_status: status,
            message: Some("why".into()),
        }
    }

    const NGINX: &str = "/api/v1/namespaces/test-ns/configmaps/nginx";

    /// `METHOD path?query` of each request.
    async fn lines(server: Running) -> Vec<String> {
        server
            .done()
            .await
            .iter()
            .map(|r| format!("{} {}", r.method, r.uri()))
            .collect()
    }

    fn context(client: Client) -> Context {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::sync_metrics::SyncMetrics::register(&mut registry);
        let (wake, _) = tokio::sync::mpsc::unbounded_channel();
        Context {
            client: client.clone(),
            peers: PeerClients::default(),
            sources: Sources::default(),
            registry: Registry::default(),
            recorder: Recorder::new(
                client,
                kube::runtime::events::Reporter {
                    controller: "test".into(),
                    instance: None,
                },
            ),
            counted: Counted {
                metrics,
                reconciler: "test",
            },
            wake,
            written: Arc::default(),
            watched: DashMap::new(),
            kinds: tokio::sync::Mutex::default(),
            made: DashMap::new(),
        }
    }

    fn cluster(client: Client) -> Cluster {
        Cluster {
            name: "v1262-cluster.kubernetes-admin2".into(),
            client,
            identity: "plumber-system/kubeconfig#secondary1@u/1".into(),
            server: Some("https://127.0.0.1:6444/".into()),
        }
    }

    fn app() -> Replicator {
        serde_json::from_value(json!({
            "apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "Replicator",
            "metadata": {"name": "app"},
            "spec": {"replicationNamespace": "test-ns", "configMapName": "nginx",
                     "configMapData": {"a": "1"}}
        }))
        .unwrap()
    }

    fn config_map() -> Object {
        desired::objects(&app(), "app", None, &Kinds::new())
            .unwrap()
            .remove(1)
    }

    /// Applies the ConfigMap of Replicator `app` (made with `origin`) to a target answered by
    /// `client`; the context is returned with what it remembered.
    async fn apply_config_map(
        client: Client,
        origin: &str,
    ) -> ((ApplyState, Option<String>), Context) {
        let ctx = context(client.clone());
        let applied = apply_one(
            &ctx,
            &cluster(client),
            &config_map(),
            origin,
            &app(),
            &mut None,
        )
        .await
        .unwrap();
        (applied, ctx)
    }

    fn current(origin: Option<&str>, data: &str, rv: &str) -> Value {
        let mut cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "nginx", "namespace": "test-ns", "resourceVersion": rv,
                         "managedFields": [{"manager": "kubectl-create", "operation": "Update"}]},
            "data": {"a": data},
        });
        if let Some(origin) = origin {
            cm["metadata"]["annotations"] = json!({ORIGIN_ANNOTATION: origin});
        }
        cm
    }

    #[tokio::test]
    async fn someone_elses_object_is_a_conflict_and_not_written() {
        let (client, server) = Scenario::new()
            .expect("GET", NGINX)
            .reply((200, current(None, "theirs", "5")))
            .run();
        let ((status, message), _) = apply_config_map(client, &desired::origin("app")).await;
        assert_eq!(status, ApplyState::Conflict);
        let message = message.unwrap();
        assert!(
            message.contains("kubectl-create") && message.contains("no origin annotation"),
            "{message}"
        );
        let seen = lines(server).await;
        assert_eq!(seen.len(), 1, "only read: {seen:?}");
        assert!(seen[0].starts_with("GET /api/v1/namespaces/test-ns/configmaps/nginx"));
    }

    #[tokio::test]
    async fn an_object_the_original_made_is_adopted_with_a_forced_apply() {
        let mut theirs = current(None, "1", "5");
        theirs["metadata"]["managedFields"] =
            json!([{"manager": "plumberctl", "operation": "Apply"}]);
        theirs["metadata"]["ownerReferences"] = json!([{"apiVersion": "plumber.jnytnai0613.github.io/v1",
            "kind": "Replicator", "name": "app", "uid": "u", "controller": true}]);
        let origin = desired::origin("app");
        let (client, server) = Scenario::new()
            .expect("GET", NGINX)
            .reply((200, theirs))
            .expect("PATCH", NGINX)
            .reply((200, current(Some(&origin), "1", "6")))
            .run();
        let ((status, message), _) = apply_config_map(client, &origin).await;
        assert_eq!((status, message), (ApplyState::Applied, None));
        let seen = lines(server).await;
        assert!(
            seen[1].starts_with("PATCH /api/v1/namespaces/test-ns/configmaps/nginx?")
                && seen[1].contains("force=true"),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn our_drifted_object_is_put_back_and_its_new_version_remembered() {
        let origin = desired::origin("app");
        let (client, server) = Scenario::new()
            .expect("GET", NGINX)
            .reply((200, current(Some(&origin), "edited", "5")))
            .expect("PATCH", NGINX)
            .reply((200, current(Some(&origin), "1", "6")))
            .run();
        let ((status, _), ctx) = apply_config_map(client.clone(), &origin).await;
        assert_eq!(status, ApplyState::Applied);
        let seen = lines(server).await;
        assert!(
            seen[1].starts_with("PATCH /api/v1/namespaces/test-ns/configmaps/nginx?")
                && seen[1].contains("force=true")
                && seen[1].contains("fieldManager=xcc-agent"),
            "{seen:?}"
        );
        let written = ctx
            .written
            .get(&key(&cluster(client), &config_map()))
            .map(|rv| rv.clone());
        assert_eq!(
            written.as_deref(),
            Some("6"),
            "the watch event of our write wakes nothing"
        );
    }

    #[tokio::test]
    async fn an_up_to_date_object_is_not_written_and_a_new_one_is_applied_unforced() {
        let origin = desired::origin("app");
        let (client, server) = Scenario::new()
            .expect("GET", NGINX)
            .reply((200, current(Some(&origin), "1", "5")))
            .run();
        let ((status, _), _) = apply_config_map(client, &origin).await;
        assert_eq!(status, ApplyState::Applied);
        assert_eq!(lines(server).await.len(), 1);

        let missing = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404});
        let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409, "message": "Apply failed with 1 conflict: conflict with \"kubectl\""});
        let (client, server) = Scenario::new()
            .expect("GET", NGINX)
            .reply((404, missing))
            .expect("PATCH", NGINX)
            .reply((409, conflict))
            .run();
        let ((status, message), _) = apply_config_map(client, &origin).await;
        assert_eq!(status, ApplyState::Conflict);
        assert!(message.unwrap().contains("made meanwhile"));
        let seen = lines(server).await;
        assert!(
            seen[1].starts_with("PATCH") && !seen[1].contains("force=true"),
            "{seen:?}"
        );
    }

    /// The kinds of Replicator `app` (into `test-ns`) that are removed when the cluster's
    /// Replicators are `app` and `other`, which replicates into `other_namespace`.
    async fn removed_beside(other_namespace: &str) -> Vec<String> {
        let rep = |name: &str, ns: &str| {
            json!({"apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "Replicator",
                   "metadata": {"name": name}, "spec": {"replicationNamespace": ns}})
        };
        let list = json!({"apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "ReplicatorList",
                   "metadata": {"resourceVersion": "1"},
                   "items": [rep("app", "test-ns"), rep("other", other_namespace)]});
        let mine: Replicator = serde_json::from_value(json!({
            "apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "Replicator",
            "metadata": {"name": "app"},
            "spec": {"replicationNamespace": "test-ns", "configMapName": "nginx"}
        }))
        .unwrap();
        let objects = desired::objects(&mine, "app", None, &Kinds::new()).unwrap();
        let (client, server) = Scenario::new()
            .expect("GET", "/apis/plumber.jnytnai0613.github.io/v1/replicators")
            .reply((200, list))
            .run();
        let removed = without_shared_namespace(&mine, &context(client), &objects)
            .await
            .unwrap();
        server.done().await;
        removed.iter().map(|o| o.kind().to_string()).collect()
    }

    #[tokio::test]
    async fn a_namespace_another_replicator_uses_is_not_deleted() {
        assert_eq!(removed_beside("test-ns").await, ["ConfigMap"]);
        assert_eq!(
            removed_beside("elsewhere").await,
            ["Namespace", "ConfigMap"]
        );
    }

    #[test]
    fn one_silent_target_is_unreachable_and_a_conflict_outranks_it() {
        let synced = verdict(&[e("a", ApplyState::Applied), e("b", ApplyState::Existing)]);
        assert!(synced.ready);
        assert_eq!(synced.reason, Reason::Synced);
        let silent = verdict(&[e("a", ApplyState::Applied), e("b", ApplyState::Unreachable)]);
        assert!(!silent.ready);
        assert_eq!(silent.reason, Reason::Unreachable);
        assert!(
            silent
                .message
                .starts_with("b: Deployment nginx Unreachable"),
            "{}",
            silent.message
        );
        let conflict = verdict(&[
            e("b", ApplyState::Unreachable),
            e("c", ApplyState::Conflict),
        ]);
        assert_eq!(conflict.reason, Reason::Conflict);
    }
}

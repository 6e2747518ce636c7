//! Secret replication (Services Toolkit's `replication.apiresources.multicluster.x-tanzu.vmware.com`).
//!
//! ```text
//!  service cluster                                workload cluster
//!  ┌───────────────────────────────────┐          ┌──────────────────────────────────────────┐
//!  │ SecretExport ─► Role (get/list/   │  read    │ SecretImport ─► peer client (kubeconfig  │
//!  │   watch on exactly that Secret)   │◄─────────┤   Secret, cached) ─► watch + get of the  │
//!  │   + RoleBinding to its SA         │  only    │   remote Secret ─► local writer (SSA,    │
//!  └───────────────────────────────────┘          │   origin annotation) ─► local Secret     │
//!                                                 └──────────────────────────────────────────┘
//! ```
//!
//! The same agent runs both halves; each cluster only acts on the kinds it holds. Both
//! reconcilers are woken by one metadata-only watch of the local Secrets (a kubeconfig Secret
//! changed, an exported Secret appeared, an imported copy was edited or deleted), by their own
//! objects, and — for imports — by a watch of the one remote Secret each import reads.

pub mod api;
mod export;
mod import;
mod monitors;
pub mod reconciler;

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::{
    Api, CustomResourceExt, Resource, ResourceExt,
    runtime::{
        events::{Recorder, Reporter},
        reflector::{ObjectRef, Store},
    },
};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use xcc_sync::kit::Loop;

use crate::sources::{SecretChange, Typed};
use api::{Reason, ReplicationStatus, SecretExport, SecretImport};
use xcc_kube::PeerClients;

/// Finalizer on SecretExports and SecretImports: the agent removes what it made (the Role and
/// RoleBinding of an export, the local copy of an import) before the object goes.
pub const FINALIZER: &str = "replication.xcc.test/cleanup";

/// The CRDs of this module.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    vec![
        SecretExport::crd(),
        SecretImport::crd(),
        api::ClusterResourceImportMonitor::crd(),
        api::ResourceImportMonitorBinding::crd(),
        api::ClusterResourceExportMonitor::crd(),
        api::ResourceExportMonitorBinding::crd(),
    ]
}

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

/// The result of a reconcile run through kube's `finalizer()`. A stale trigger may clean up an
/// object whose finalizer was already removed (the object is gone): that is success, not an
/// error to retry and log.
pub fn finalized(
    result: Result<kube::runtime::controller::Action, kube::runtime::finalizer::Error<Error>>,
) -> Result<kube::runtime::controller::Action, Error> {
    xcc_kube::finalizers::finalized(result).map_err(|e| Error::Finalizer(Box::new(e)))
}

/// The objects this reconciler asked to add [`FINALIZER`] to, by UID, with the resourceVersion
/// they had then and when. An object handed over again at that version predates the finalizer (a
/// wake came before the watch delivered the new version): it waits a moment for the new version,
/// which is on its way, instead of asking the API server to add the finalizer a second time
/// (which fails). If no new version comes (the first request failed), it asks again after
/// [`FINALIZER_WAIT`].
#[derive(Default)]
pub struct FinalizerAsked(std::sync::Mutex<HashMap<String, (String, std::time::Instant)>>);

/// How long an object that predates the finalizer it was given waits for its new version.
const FINALIZER_WAIT: Duration = Duration::from_secs(5);

impl FinalizerAsked {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, std::time::Instant)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long `object` waits, if it is the version the finalizer was asked for from; an
    /// object that carries the finalizer, or has moved on, is forgotten.
    pub fn stale<K: Resource>(&self, object: &K) -> Option<Duration> {
        let uid = object.uid().unwrap_or_default();
        let has = object.finalizers().iter().any(|f| f == FINALIZER);
        let mut asked = self.lock();
        if let Some((version, when)) = asked.get(&uid)
            && !has
            && object.meta().deletion_timestamp.is_none()
            && object.resource_version().as_ref() == Some(version)
            && when.elapsed() < FINALIZER_WAIT
        {
            return Some(FINALIZER_WAIT - when.elapsed());
        }
        asked.remove(&uid);
        None
    }

    /// Notes that the finalizer is being asked for on `object` as it is, if it lacks it.
    pub fn asking<K: Resource>(&self, object: &K) {
        if object.finalizers().iter().any(|f| f == FINALIZER)
            || object.meta().deletion_timestamp.is_some()
        {
            return;
        }
        if let (Some(uid), Some(version)) = (object.uid(), object.resource_version()) {
            self.lock()
                .insert(uid, (version, std::time::Instant::now()));
        }
    }
}

pub use xcc_kube::status::Verdict;

/// When to look again at an object with `verdict` without being woken: soon when something is
/// wrong, rarely otherwise (watches deliver every change; this is a backstop).
pub fn requeue(verdict: &Verdict) -> Duration {
    if verdict.ready {
        Duration::from_secs(600)
    } else {
        Duration::from_secs(30)
    }
}

/// The status `verdict` gives an object whose status was `old`.
pub fn next_status(
    old: Option<&ReplicationStatus>,
    generation: Option<i64>,
    verdict: &Verdict,
) -> ReplicationStatus {
    let mut status = old.cloned().unwrap_or_default();
    status.observed_generation = generation;
    verdict.set(&mut status.conditions, "Ready", generation);
    verdict.set_peer(&mut status.conditions, generation);
    status
}

fn ready_reason(status: Option<&ReplicationStatus>) -> Option<&str> {
    xcc_kube::status::reason_of(&status?.conditions, "Ready")
}

/// Writes the status `verdict` gives `obj` through the one status writer (nothing when it
/// would not change), counted in `counted`. Returns whether the Ready reason changed.
pub async fn write_status<K>(
    api: &Api<K>,
    obj: &K,
    old: Option<&ReplicationStatus>,
    verdict: &Verdict,
    counted: &crate::sink::Counted,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let status = next_status(old, obj.meta().generation, verdict);
    crate::sink::write_status(api, obj, &status, counted).await?;
    Ok(ready_reason(old) != Some(&*verdict.reason))
}

/// Runs both reconcilers until `stop` is cancelled.
pub async fn run(core: xcc_sync::Core, stop: CancellationToken) {
    let xcc_sync::Core {
        client,
        instance,
        peers,
        local_secrets,
        metrics,
        ..
    } = core;
    warn_if_no_crds(&client).await;
    let (import_tx, import_rx) = tokio::sync::mpsc::unbounded_channel();
    let (export_tx, export_rx) = tokio::sync::mpsc::unbounded_channel();
    let (import_ctx, export_ctx) = contexts(
        &client,
        peers.clone(),
        instance,
        &local_secrets,
        &metrics,
        import_tx.clone(),
    );

    // One watch of each kind, shared with the monitors that generate them; the Roles and
    // RoleBindings of exports (only those: by their label) wake the export that owns them.
    let import_kind = Typed::<SecretImport>::new();
    let export_kind = Typed::<SecretExport>::new();
    let roles = Typed::<Role>::labelled(export::EXPORT_SELECTOR);
    let role_bindings = Typed::<RoleBinding>::labelled(export::EXPORT_SELECTOR);
    let imports = Loop::of(&import_ctx.counted, &import_kind).concurrency(CONCURRENT_RECONCILES);
    let exports = Loop::of(&export_ctx.counted, &export_kind)
        .concurrency(CONCURRENT_RECONCILES)
        .owned(roles.subscribe())
        .owned(role_bindings.subscribe());
    let secret_wakes = xcc_sync::task::spawn_owned(local_secret_triggers(
        local_secrets.changes(),
        imports.store(),
        exports.store(),
        import_tx.clone(),
        export_tx,
    ));
    let reach_wakes =
        xcc_sync::task::spawn_owned(reach_triggers(peers, imports.store(), import_tx));
    let imports = imports.wake_on(channel_stream(import_rx)).run(
        import::reconcile,
        import::error_policy,
        import_ctx,
        stop.clone(),
    );
    let exports = exports.wake_on(channel_stream(export_rx)).run(
        export::reconcile,
        export::error_policy,
        export_ctx,
        stop.clone(),
    );
    let import_monitors = monitors::run::<monitors::Import>(
        client.clone(),
        import_kind.subscribe(),
        metrics.clone(),
        stop.clone(),
    );
    let export_monitors = monitors::run::<monitors::Export>(
        client.clone(),
        export_kind.subscribe(),
        metrics.clone(),
        stop,
    );
    // Every subscriber is taken: the watches may start.
    let watches = [
        xcc_sync::task::spawn_owned(import_kind.run(Api::all(client.clone()), metrics.clone())),
        xcc_sync::task::spawn_owned(export_kind.run(Api::all(client.clone()), metrics.clone())),
        xcc_sync::task::spawn_owned(roles.run(Api::all(client.clone()), metrics.clone())),
        xcc_sync::task::spawn_owned(role_bindings.run(Api::all(client), metrics)),
    ];
    tracing::info!("secret replication running (SecretExport, SecretImport, monitors)");
    futures::join!(imports, exports, import_monitors, export_monitors);
    for watch in watches {
        watch.abort();
    }
    secret_wakes.abort();
    reach_wakes.abort();
}

/// Says when the replication CRDs are not installed: the reconcilers wait for them.
async fn warn_if_no_crds(client: &kube::Client) {
    if let Err(kube::Error::Api(s)) = Api::<SecretImport>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
        && s.code == 404
    {
        tracing::warn!(
            "the replication CRDs are not installed (manifests/crds); secret replication waits for them"
        );
    }
}

/// The contexts of the two reconcilers; imports are woken for remote changes through
/// `import_tx`.
fn contexts(
    client: &kube::Client,
    peers: PeerClients,
    instance: Option<String>,
    local_secrets: &crate::sources::LocalSecrets,
    metrics: &xcc_sync::metrics::SyncMetrics,
    import_tx: UnboundedSender<ObjectRef<SecretImport>>,
) -> (Arc<import::Context>, Arc<export::Context>) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "xcc-agent".into(),
            instance,
        },
    );
    let import_ctx = Arc::new(import::Context {
        client: client.clone(),
        peers,
        recorder: recorder.clone(),
        remote: crate::wakers::Wakers::new(import_tx),
        seen: Default::default(),
        list_first: Default::default(),
        finalizer_asked: Default::default(),
        local: local_secrets.store(),
        written: Default::default(),
        local_listed: local_secrets.listed(),
        said: Default::default(),
        counted: crate::sink::Counted {
            metrics: metrics.clone(),
            reconciler: "secret-import",
        },
    });
    let export_ctx = Arc::new(export::Context {
        client: client.clone(),
        recorder,
        counted: crate::sink::Counted {
            metrics: metrics.clone(),
            reconciler: "secret-export",
        },
    });
    (import_ctx, export_ctx)
}

/// Wakes every import whose service cluster's API server turned silent or answers again: a
/// silent server ends no watch, so nothing else would tell the import.
async fn reach_triggers(
    peers: PeerClients,
    imports: Store<SecretImport>,
    import_tx: UnboundedSender<ObjectRef<SecretImport>>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut changes = peers.reach_changes();
    loop {
        let server = match changes.recv().await {
            Ok(server) => Some(server),
            // Fell behind: every import is looked at again.
            Err(RecvError::Lagged(_)) => None,
            Err(RecvError::Closed) => return,
        };
        for import in imports.state() {
            let namespace = import.namespace().unwrap_or_default();
            let behind = peers.server_of(&namespace, &import.spec.remote_kubeconfig.name);
            if server.is_none() || behind.is_some() && behind == server {
                let _ = import_tx.send(ObjectRef::from_obj(import.as_ref()));
            }
        }
    }
}

/// At most this many objects of a kind are reconciled at once. Unbounded, a thousand new
/// imports open a thousand connections to each API server at once (one per request in flight),
/// and the TLS handshakes cost more than the requests; a few dozen keep the connections reused.
const CONCURRENT_RECONCILES: u16 = 32;

fn channel_stream<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Wakes the imports and exports that name a local Secret that changed (from the process's one
/// watch of local Secrets): an import's kubeconfig Secret or copy, an export's Secret. The
/// shared store is updated before the change arrives here.
async fn local_secret_triggers(
    changes: impl futures::Stream<Item = SecretChange>,
    imports: Store<SecretImport>,
    exports: Store<SecretExport>,
    import_tx: UnboundedSender<ObjectRef<SecretImport>>,
    export_tx: UnboundedSender<ObjectRef<SecretExport>>,
) {
    let mut changes = std::pin::pin!(changes);
    while let Some(change) = changes.next().await {
        let named = |namespace: Option<String>, names: [&str; 2]| {
            change.key().map_or(
                // Missed changes: everything is looked at again.
                matches!(change, SecretChange::Missed),
                |(ns, name)| {
                    namespace.as_deref() == Some(ns.as_str()) && names.contains(&name.as_str())
                },
            )
        };
        for import in imports.state() {
            let names = [
                import.spec.secret.name.as_str(),
                import.spec.remote_kubeconfig.name.as_str(),
            ];
            if named(import.namespace(), names) {
                let _ = import_tx.send(ObjectRef::from_obj(import.as_ref()));
            }
        }
        for export in exports.state() {
            let name = export.spec.secret.name.as_str();
            if named(export.namespace(), [name, name]) {
                let _ = export_tx.send(ObjectRef::from_obj(export.as_ref()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_records_generation_and_reason() {
        let verdict = Verdict::not(Reason::Conflict, "Secret project-1/dumbo is not ours");
        let status = next_status(None, Some(3), &verdict);
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!(status.conditions.len(), 1);
        let ready = &status.conditions[0];
        assert_eq!(
            (
                ready.type_.as_str(),
                ready.status.as_str(),
                ready.reason.as_str()
            ),
            ("Ready", "False", "Conflict")
        );
        assert_eq!(ready_reason(Some(&status)), Some("Conflict"));
        // The same verdict again changes nothing (no write, no new Event).
        assert_eq!(next_status(Some(&status), Some(3), &verdict), status);
    }

    #[test]
    fn a_finalizer_on_an_object_already_gone_is_not_an_error() {
        use kube::runtime::finalizer::Error as F;
        let status = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..kube::core::Status::failure("x", "y")
            }))
        };
        assert!(finalized(Err(F::RemoveFinalizer(status(404)))).is_ok());
        assert!(finalized(Err(F::AddFinalizer(status(404)))).is_ok());
        assert!(finalized(Err(F::RemoveFinalizer(status(409)))).is_err());
        assert!(finalized(Err(F::CleanupFailed(Error::Kube(status(404))))).is_err());
        // Adding the finalizer to an older version: wait for the newer one, no retry storm.
        assert!(finalized(Err(F::AddFinalizer(status(422)))).is_ok());
    }

    #[test]
    fn an_object_older_than_its_finalizer_waits_for_the_newer_version() {
        let object = |version: &str, finalizers: &[&str]| {
            let mut secret = k8s_openapi::api::core::v1::Secret::default();
            secret.metadata.uid = Some("u1".into());
            secret.metadata.resource_version = Some(version.into());
            secret.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
            secret
        };
        let asked = FinalizerAsked::default();
        assert_eq!(asked.stale(&object("1", &[])), None, "never asked");
        asked.asking(&object("1", &[]));
        let wait = asked
            .stale(&object("1", &[]))
            .expect("the same version again is stale");
        assert!(wait <= FINALIZER_WAIT);
        // The new version, with the finalizer: current, and the note is forgotten.
        assert_eq!(asked.stale(&object("2", &[FINALIZER])), None);
        assert_eq!(asked.stale(&object("1", &[])), None);
        // Someone removed the finalizer later: a newer version without it is not stale.
        asked.asking(&object("3", &[]));
        assert_eq!(asked.stale(&object("4", &[])), None);
        // An object that has the finalizer is never noted.
        asked.asking(&object("5", &[FINALIZER]));
        assert_eq!(asked.stale(&object("5", &[])), None);
    }

    #[test]
    fn crds_serve_the_services_toolkit_group() {
        for crd in crds() {
            assert_eq!(
                crd.spec.group,
                "replication.apiresources.multicluster.x-tanzu.vmware.com"
            );
            assert_eq!(crd.spec.versions[0].name, "v1alpha1");
            let cluster_scoped = crd.spec.names.kind.starts_with("Cluster");
            assert_eq!(
                crd.spec.scope,
                if cluster_scoped {
                    "Cluster"
                } else {
                    "Namespaced"
                },
                "{}",
                crd.spec.names.kind
            );
        }
    }
}

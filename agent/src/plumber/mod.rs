//! plumber (`plumber.jnytnai0613.github.io/v1`): push replication of an app to target clusters.
//!
//! ```text
//!  this cluster (primary)                                   target clusters
//!  ┌─────────────────────────────────────────────┐          ┌──────────────────────────────┐
//!  │ Secret kubeconfig/config ─► ClusterDetector │  probe   │                              │
//!  │   (one per context, primary|secondary,      ├─────────►│ /version (shared prober)     │
//!  │    Running|Unknown)      │ Registry         │          │                              │
//!  │ Replicator ─► objects ───┴► SSA here and ───┼─────────►│ namespace, ConfigMap, ...    │
//!  │   status.applied[] per cluster and object   │◄─watch───┤ (metadata; drift wakes it)   │
//!  └─────────────────────────────────────────────┘          └──────────────────────────────┘
//! ```
//!
//! The same engine as the other reconcilers with source and sink swapped: the source is local
//! (the Replicator), the sinks are this cluster and each target, all written with server-side
//! apply under the agent's field manager and the origin annotation `plumber/replicator/<name>`.
//! Clients for targets come from the one peer-client cache behind the trust gate; health from
//! its prober; drift from the process's shared watches ([`crate::sources::Sources`]).

pub mod api;
pub mod certs;
pub mod contexts;
pub mod desired;
pub mod detector;
pub mod reconciler;
pub mod replicator;

use std::sync::{Arc, Mutex};

use kube::{Api, CustomResourceExt, runtime::reflector::ObjectRef};
use tokio_util::sync::CancellationToken;
use xcc_kube::PeerClient;

use xcc_sync::{Core, kit::Loop};

use crate::{sink::Counted, sources::Typed};
use api::{ClusterDetector, Replicator};

/// The CRDs of this module.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    vec![Replicator::crd(), ClusterDetector::crd()]
}

/// One context of the kubeconfig Secret, as the Replicator uses it.
#[derive(Clone, Debug)]
pub struct Target {
    /// The ClusterDetector name (`<cluster>.<user>`).
    pub detector: String,
    pub context: String,
    /// The cluster this agent runs in.
    pub primary: bool,
    /// Its client, or why the trust rules refused its credentials (bounded).
    pub client: Result<PeerClient, String>,
}

impl Target {
    fn same(&self, other: &Target) -> bool {
        let id = |t: &Target| {
            t.client
                .as_ref()
                .map(|p| p.identity.clone())
                .map_err(Clone::clone)
        };
        self.detector == other.detector
            && self.context == other.context
            && self.primary == other.primary
            && id(self) == id(other)
    }
}

/// The contexts the detector last read, shared with the Replicator. `None` until the first
/// read, so that a Replicator does not call a target unknown before it was looked for.
#[derive(Clone)]
pub struct Registry {
    targets: Arc<Mutex<Option<Vec<Target>>>>,
    /// The ClusterDetector name of this cluster when no context of the Secret is it.
    local: Arc<Mutex<String>>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            targets: Arc::default(),
            local: Arc::new(Mutex::new(detector::local_entry().detector())),
            changed: tokio::sync::watch::channel(0).0,
        }
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<Target>>> {
        self.targets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the contexts; announces a change.
    pub fn set(&self, targets: Vec<Target>) {
        let mut current = self.lock();
        let same = current.as_ref().is_some_and(|c| {
            c.len() == targets.len() && c.iter().zip(&targets).all(|(a, b)| a.same(b))
        });
        if !same {
            *current = Some(targets);
            drop(current);
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// The target named `name`: a ClusterDetector name or a context name. `Err(())` when the
    /// Secret was not read yet.
    pub fn find(&self, name: &str) -> Result<Option<Target>, ()> {
        let current = self.lock();
        let targets = current.as_ref().ok_or(())?;
        Ok(targets
            .iter()
            .find(|t| t.detector == name)
            .or_else(|| targets.iter().find(|t| t.context == name))
            .cloned())
    }

    /// The primary's ClusterDetector name: its context's, or the one the detector gave this
    /// cluster (`kubernetes.kubernetes-admin`, the original's, unless that names another
    /// cluster). Replicator status names this cluster so.
    pub fn primary(&self) -> String {
        let from_context = self.lock().as_ref().and_then(|targets| {
            targets
                .iter()
                .find(|t| t.primary)
                .map(|t| t.detector.clone())
        });
        from_context.unwrap_or_else(|| self.local.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// Names this cluster's detector when no context of the Secret is it.
    pub fn set_local(&self, name: String) {
        *self.local.lock().unwrap_or_else(|e| e.into_inner()) = name;
    }

    /// The identities of the clients of every context now.
    pub fn identities(&self) -> std::collections::BTreeSet<String> {
        self.lock()
            .iter()
            .flatten()
            .filter_map(|t| t.client.as_ref().ok().map(|p| p.identity.clone()))
            .collect()
    }

    /// Whether the Secret was read at least once.
    pub fn read(&self) -> bool {
        self.lock().is_some()
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// Runs the ClusterDetector loop and the Replicator controller until `stop` is cancelled.
pub async fn run(core: Core, namespace: String, stop: CancellationToken) {
    let registry = Registry::default();
    let detector = detector::Detector::new(
        core.client.clone(),
        namespace.clone(),
        core.peers.clone(),
        registry.clone(),
        Counted {
            metrics: core.metrics.clone(),
            reconciler: "plumber-detector",
        },
    );
    let detecting = xcc_sync::task::spawn_owned(
        detector.run(core.local_secrets.clone(), stop.clone().cancelled_owned()),
    );

    let kind = Typed::<Replicator>::new();
    let counted = Counted {
        metrics: core.metrics.clone(),
        reconciler: "plumber-replicator",
    };
    let replicators = Loop::of(&counted, &kind).concurrency(32);
    let (wake_tx, wake_rx) = tokio::sync::mpsc::unbounded_channel();
    let waking = xcc_sync::task::spawn_owned(wake_all(
        registry.clone(),
        core.peers.clone(),
        replicators.store(),
        wake_tx.clone(),
    ));
    let recorder = core.recorder();
    let ctx = Arc::new(replicator::Context::new(
        core.clone(),
        registry,
        recorder,
        wake_tx,
    ));
    let replicators = replicators
        .wake_on(futures::stream::poll_fn({
            let mut rx = wake_rx;
            move |cx| rx.poll_recv(cx)
        }))
        .run(replicator::reconcile, replicator::error_policy, ctx, stop);
    let watch =
        xcc_sync::task::spawn_owned(kind.run(Api::all(core.client.clone()), core.metrics.clone()));
    tracing::info!("plumber running (ClusterDetector, Replicator)");
    replicators.await;
    watch.abort();
    waking.abort();
    let _ = detecting.await;
}

/// Wakes every Replicator when the contexts change or a server turns silent or answers again
/// (a silent server ends no watch, so nothing else would say so).
async fn wake_all(
    registry: Registry,
    peers: xcc_kube::PeerClients,
    store: kube::runtime::reflector::Store<Replicator>,
    wake: tokio::sync::mpsc::UnboundedSender<ObjectRef<Replicator>>,
) {
    let mut contexts = registry.subscribe();
    let mut reach = peers.reach_changes();
    loop {
        tokio::select! {
            changed = contexts.changed() => if changed.is_err() { return },
            received = reach.recv() => if let Err(tokio::sync::broadcast::error::RecvError::Closed) = received { return },
        }
        for replicator in store.state() {
            let _ = wake.send(ObjectRef::from_obj(replicator.as_ref()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_serve_plumbers_group_with_its_scopes_and_short_names() {
        let crds = crds();
        let rep = &crds[0];
        assert_eq!(rep.spec.group, "plumber.jnytnai0613.github.io");
        assert_eq!(rep.spec.scope, "Cluster");
        assert_eq!(
            rep.spec.names.short_names.as_deref(),
            Some(&["rep".to_string()][..])
        );
        let cd = &crds[1];
        assert_eq!(cd.spec.scope, "Namespaced");
        let columns: Vec<_> = cd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(
            columns,
            [
                "CONTEXT",
                "CLUSTER",
                "USER",
                "CLUSTERSTATUS",
                "REASON",
                "AGE"
            ]
        );
    }

    #[test]
    fn a_target_is_found_by_detector_or_context_name_once_the_secret_was_read() {
        let registry = Registry::default();
        assert!(registry.find("x").is_err());
        let target = |detector: &str, context: &str, primary| Target {
            detector: detector.into(),
            context: context.into(),
            primary,
            client: Err("refused".into()),
        };
        let mut changes = registry.subscribe();
        registry.set(vec![
            target("kubernetes.kubernetes-admin", "primary", true),
            target("v1262-cluster.kubernetes-admin2", "secondary1", false),
        ]);
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert_eq!(
            registry.find("secondary1").unwrap().unwrap().detector,
            "v1262-cluster.kubernetes-admin2"
        );
        assert!(
            registry
                .find("v1262-cluster.kubernetes-admin2")
                .unwrap()
                .is_some()
        );
        assert!(registry.find("nope").unwrap().is_none());
        assert_eq!(registry.primary(), "kubernetes.kubernetes-admin");
        // The same contexts again: no change announced.
        registry.set(vec![
            target("kubernetes.kubernetes-admin", "primary", true),
            target("v1262-cluster.kubernetes-admin2", "secondary1", false),
        ]);
        assert!(!changes.has_changed().unwrap());
    }
}

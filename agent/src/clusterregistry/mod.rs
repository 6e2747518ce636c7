//! Cluster groups and resource sync (the cluster-registry API, `clusterregistry.k8s.cisco.com`).
//!
//! ```text
//!  Cluster ──► cluster reconciler: local or peer (kube-system UID); peer Secret ─► PeerClients
//!                │  liveness (GET kube-system, ≥ 5 s apart, backoff) ─► status, peer table
//!                ▼
//!  ResourceSyncRule ──► engine: one watch per (cluster, kind), shared by every rule of that kind
//!                        (local cluster + each peer) ─► decide(key) ─► SSA / delete, local only
//! ```
//!
//! Every copy carries the annotation and label [`OWNER_ANNOTATION`] naming the cluster the object
//! originates from; that is what makes it a copy. Objects without it were made here and are never
//! touched. See [`decide`] for the rules.

mod access;
pub mod api;
mod builtin;
mod churn;
pub(crate) mod clusters;
#[cfg(test)]
mod convergence;
mod decide;
mod engine;
mod feature;
mod grants;
mod links;
pub mod reconciler;
mod rules;
mod template;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, CustomResourceExt, ResourceExt,
    api::{ApiResource, GroupVersionKind},
};
use tokio_util::sync::CancellationToken;
use xcc_sync::kit::Loop;

use api::{Cluster, ClusterFeature, ResourceSyncRule};
use xcc_kube::PeerClient;

use crate::sources::{Detail, SourceId};

/// Annotation and label on every copy: the ID of the cluster the object originates from. Kept
/// when the source already has it, so the origin survives intermediaries.
pub const OWNER_ANNOTATION: &str = "cluster-registry.k8s.cisco.com/resource-owner-cluster-id";
/// `"true"` on a source: do not copy it. On a copy: leave it alone.
pub const SYNC_DISABLED_ANNOTATION: &str = "cluster-registry.k8s.cisco.com/resource-sync-disabled";
/// `"true"` on a peer's Cluster: do not read from that cluster.
pub const CLUSTER_DISABLED_ANNOTATION: &str = "cluster-registry.k8s.cisco.com/cluster-disabled";
/// On a copy that a rule stores under another kind, namespace or name than its source: the
/// source's key, `apiVersion/Kind/namespace/name` (namespace empty when cluster-scoped).
pub const SOURCE_ANNOTATION: &str = "xcc.test/sync-source";
/// The type of peer kubeconfig Secrets (data key `kubeconfig`).
pub const SECRET_TYPE: &str = "k8s.cisco.com/cluster-registry-secret";
/// Namespace of a peer Secret whose `secretRef` names none.
pub const DEFAULT_SECRET_NAMESPACE: &str = "cluster-registry";

/// The CRDs of this module.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    vec![
        Cluster::crd(),
        ClusterFeature::crd(),
        ResourceSyncRule::crd(),
    ]
}

/// Whether `cluster` carries [`CLUSTER_DISABLED_ANNOTATION`]`=true`.
pub fn disabled(cluster: &Cluster) -> bool {
    cluster
        .annotations()
        .get(CLUSTER_DISABLED_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// A peer as the cluster reconciler last saw it.
#[derive(Clone)]
pub struct PeerState {
    /// Its cluster ID (`spec.clusterID`).
    pub id: String,
    /// Its client, when its Secret gave one.
    pub client: Option<PeerClient>,
    /// The last liveness check passed.
    pub live: bool,
}

/// Peers by Cluster name.
pub type PeerTable = BTreeMap<String, PeerState>;

/// The UID of this cluster's kube-system namespace; retried until the API server answers.
pub(crate) async fn local_cluster_id(client: &Client, stop: &CancellationToken) -> Option<String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut backoff = xcc_kube::Backoff::local();
    let mut outage = xcc_sync::outage::Outage::new(
        "the read of namespace kube-system (the cluster ID)",
        xcc_sync::outage::local_server(),
    );
    loop {
        match namespaces.get("kube-system").await {
            Ok(ns) => {
                outage.recovered();
                return ns.uid();
            }
            Err(error) => {
                let delay = backoff.next().unwrap_or(Duration::from_secs(5));
                outage.failed(&error);
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = stop.cancelled() => return None,
                }
            }
        }
    }
}

/// What of resource sync runs besides the Cluster reconciler and the rules.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The built-in rules that form the group ([`core`]).
    pub group_sync: bool,
    /// Publish the ClusterFeature the original cluster-registry-controller reads peers by
    /// ([`feature`]).
    pub core_resources_source: bool,
    /// The ServiceAccount the peers read this cluster with ([`grants`]).
    pub reader: grants::Reader,
}

/// Says when the cluster-registry CRDs are not installed: resource sync waits for them.
async fn warn_if_no_crds(client: &Client) {
    if let Err(kube::Error::Api(s)) = Api::<Cluster>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
        && s.code == 404
    {
        tracing::warn!(
            "the cluster-registry CRDs are not installed (manifests/crds); resource sync waits for them"
        );
    }
}

/// Runs the Cluster reconciler and the resource sync engine until `stop` is cancelled.
pub async fn run(core: xcc_sync::Core, settings: Settings, stop: CancellationToken) {
    let Settings {
        group_sync,
        core_resources_source,
        reader,
    } = settings;
    let client = core.client.clone();
    let Some(local_id) = local_cluster_id(&client, &stop).await else {
        return;
    };
    warn_if_no_crds(&client).await;
    let recorder = core.recorder();
    let (table_tx, table_rx) = tokio::sync::watch::channel(PeerTable::new());
    // Clusters are read from the one local watch of the kind, which group sync reads too.
    let view = core.sources.view(
        SourceId::local(GroupVersionKind::gvk(api::GROUP, "v1alpha1", "Cluster")),
        client.clone(),
        &ApiResource::erase::<Cluster>(&()),
        Detail::Full,
    );
    let (clusters_store, clusters_changes, clusters_feed) = view.typed::<Cluster>();
    let clusters_feed = xcc_sync::task::spawn_owned(clusters_feed);
    let secrets = clusters::secret_triggers(&core.local_secrets, clusters_store.clone());
    let ctx = Arc::new(clusters::Context {
        client: client.clone(),
        local_id: local_id.clone(),
        peers: core.peers.clone(),
        recorder: recorder.clone(),
        table: table_tx,
        clusters: clusters_store.clone(),
        checks: Default::default(),
        counted: crate::sink::Counted {
            metrics: core.metrics.clone(),
            reconciler: "clusters",
        },
    });
    // A live agent checks every peer every few seconds: each reconcile is counted (the count
    // shows it is working even when nothing is written) and logged at TRACE.
    let clusters = Loop::new(&ctx.counted, clusters_changes, clusters_store.clone())
        .wake_on(secrets)
        .routine()
        .run(
            clusters::reconcile,
            clusters::error_policy,
            ctx,
            stop.clone(),
        );
    let grants = xcc_sync::task::spawn_owned(grants::run(
        core.clone(),
        reader,
        clusters_store.clone(),
        group_sync,
        stop.clone(),
    ));
    let engine = engine::Engine::new(
        &core,
        local_id.clone(),
        recorder,
        clusters_store,
        table_rx,
        group_sync,
    );
    let published = core_resources_source.then(|| {
        xcc_sync::task::spawn_owned(feature::publish(
            client.clone(),
            core.sources.clone(),
            crate::sink::Counted {
                metrics: core.metrics.clone(),
                reconciler: "resource-sync",
            },
            stop.clone(),
        ))
    });
    tracing::info!(cluster_id = %local_id, "resource sync running (Cluster, ClusterFeature, ResourceSyncRule)");
    futures::join!(clusters, engine.run(stop));
    // It returns on the same stop.
    let _ = grants.await;
    if let Some(published) = published {
        // It returns on the same stop.
        let _ = published.await;
    }
    clusters_feed.abort();
}

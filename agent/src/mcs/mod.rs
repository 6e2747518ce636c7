//! The Multi-Cluster Services API (KEP-1645): ServiceExport, ServiceImport and the cluster IDs of
//! the About API (KEP-2149), over the cluster group.
//!
//! ```text
//!  local ServiceExport + Service + EndpointSlices ─► ExportedService (mcs.xcc.test, one per export,
//!        │  status: Valid, Conflict, Ready, PeersRead        in the Service's namespace, its name)
//!        ▼                                                        │ peers watch only this kind
//!  every member: local + peers' ExportedServices ─► merge ─► ServiceImport, derived Service
//!                                                             (xcc-mcs-<hash>), EndpointSlices
//! ```
//!
//! - **ClusterSet**: the cluster group of resource sync (the local Cluster CR, found by the
//!   kube-system UID, and the peer Clusters with their kubeconfig Secrets through the same trust
//!   gate, [`clusterregistry::clusters::open_peer`](crate::clusterregistry::clusters::open_peer)).
//!   MCS reads the Cluster CRs itself, so it runs with `--resource-sync=false` too (the Cluster
//!   CRD must then be installed, or the set is this cluster alone).
//! - **Cluster ID**: ClusterProperty `cluster.clusterset.k8s.io`, read if present, else written
//!   once: the name of this cluster's own Cluster CR if it is a DNS label, else the kube-system
//!   UID. `clusterset.k8s.io` is written if absent (`--mcs-clusterset`).
//! - **Publication**: per valid export, one `ExportedService` in the exported Service's
//!   namespace, under its name, in this cluster: cluster ID, the export's creation time,
//!   headlessness, ports, session affinity, traffic policies, IP families, exported labels and
//!   annotations, and the endpoints (per address family and set of ports).
//! - **Import** (every member, the exporting one too): the merge of [`plan::merge`]; the
//!   ServiceImport (`spec.ips` = the derived Service's `clusterIPs`), the derived selectorless
//!   Service [`plan::derived_name`], one EndpointSlice per source cluster and address family
//!   (labels `kubernetes.io/service-name=<derived>`, `multicluster.kubernetes.io/service-name`,
//!   `multicluster.kubernetes.io/source-cluster`, managed by `mcs.xcc.test`). A namespace absent
//!   here: nothing is created, an Event on the Namespace says so once; the import appears when
//!   the namespace does. Hand edits are put back, deletions recreated.
//! - **Faults**: a peer whose kubeconfig is refused is not read; condition `PeersRead=False` on
//!   every local ServiceExport names it. A peer that stops answering keeps its endpoints for
//!   `--mcs-stale-after` (default 2m, at most 1h), then they are withdrawn.
//! - **Data planes** (`--mcs-data-plane`, or per export the annotation
//!   `mcs.xcc.test/data-plane`): `flat` publishes the pods' addresses; `gateway` a NodePort
//!   Service of the agent's own and the nodes' addresses, or a LoadBalancer's address
//!   ([`gateway`]).
//!
//! The reconciler is one level-triggered loop: any change of a kind it watches wakes it; a pass
//! computes everything and writes only what differs from the stores (and not again while a
//! store has not caught up with the agent's own last write).

pub mod api;
mod clusterset;
pub mod gateway;
mod pass;
pub mod plan;
pub mod publication;
pub mod reconciler;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, atomic::AtomicBool},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    core::v1::{Namespace, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    CustomResourceExt as _,
    api::{ApiResource, GroupVersionKind},
};
use tokio::sync::Notify;

use crate::sources::{Detail, View};
use clusterset::{Forwarder, Peer, forward, local_view};

/// The reconciler's name in metrics.
const NAME: &str = "mcs";
/// The longest a pass waits for a change before it looks again (peers' stale periods).
const TICK: Duration = Duration::from_secs(1);
/// How often the peers are looked up again without a change of Clusters or Secrets.
const REDISCOVER: Duration = Duration::from_secs(30);

/// What the flags set.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The ClusterSet's name (`clusterset.k8s.io`) when none is written.
    pub clusterset: String,
    /// How long a failing peer's endpoints are kept.
    pub stale_after: Duration,
    /// This cluster's exports' data plane.
    pub data_plane: reconciler::DataPlane,
}

/// The local watches.
struct Local {
    exports: View,
    services: View,
    slices: View,
    imports: View,
    publications: View,
    namespaces: View,
    clusters: View,
    /// The nodes, watched once an export uses the gateway data plane.
    nodes: Option<View>,
    _forwarders: Vec<Forwarder>,
}

impl Local {
    fn open(core: &xcc_sync::Core, wake: &Arc<Notify>, rediscover: &Arc<AtomicBool>) -> Local {
        let crd = |crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition| {
            let version = &crd.spec.versions[0].name;
            let gvk = GroupVersionKind::gvk(&crd.spec.group, version, &crd.spec.names.kind);
            let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
            local_view(core, gvk, &resource, Detail::Full)
        };
        let exports = crd(api::service_export_crd());
        let imports = crd(api::ServiceImport::crd());
        let publications = crd(publication::ExportedService::crd());
        let clusters = crd(crate::clusterregistry::api::Cluster::crd());
        let services = local_view(
            core,
            GroupVersionKind::gvk("", "v1", "Service"),
            &ApiResource::erase::<Service>(&()),
            Detail::Full,
        );
        let slices = local_view(
            core,
            GroupVersionKind::gvk("discovery.k8s.io", "v1", "EndpointSlice"),
            &ApiResource::erase::<EndpointSlice>(&()),
            Detail::Full,
        );
        let namespaces = local_view(
            core,
            GroupVersionKind::gvk("", "v1", "Namespace"),
            &ApiResource::erase::<Namespace>(&()),
            Detail::Metadata,
        );
        let mut forwarders: Vec<Forwarder> = [
            &exports,
            &services,
            &slices,
            &imports,
            &publications,
            &namespaces,
        ]
        .into_iter()
        .map(|v| forward(v, wake.clone(), None))
        .collect();
        forwarders.push(forward(&clusters, wake.clone(), Some(rediscover.clone())));
        Local {
            exports,
            services,
            slices,
            imports,
            publications,
            namespaces,
            clusters,
            nodes: None,
            _forwarders: forwarders,
        }
    }

    /// The nodes' view, opened on first use.
    fn nodes(&mut self, core: &xcc_sync::Core, wake: &Arc<Notify>) -> &View {
        if self.nodes.is_none() {
            let view = local_view(
                core,
                GroupVersionKind::gvk("", "v1", "Node"),
                &ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&()),
                Detail::Full,
            );
            self._forwarders.push(forward(&view, wake.clone(), None));
            self.nodes = Some(view);
        }
        self.nodes.as_ref().expect("opened above")
    }
}

/// The reconciler's state between passes.
struct Mcs {
    core: xcc_sync::Core,
    settings: Settings,
    /// This cluster's kube-system UID.
    uid: String,
    /// This cluster's ID.
    id: String,
    counted: xcc_sync::sink::Counted,
    recorder: kube::runtime::events::Recorder,
    wake: Arc<Notify>,
    rediscover: Arc<AtomicBool>,
    discovered: Option<Instant>,
    local: Local,
    peers: BTreeMap<String, Peer>,
    refused: BTreeMap<String, String>,
    /// Imports whose namespace is absent, already said in an Event.
    absent: BTreeSet<(String, String)>,
    /// This agent's writes whose echo the stores have not shown yet, by kind/namespace/name.
    echoes: std::sync::Mutex<std::collections::HashMap<String, pass::Echo>>,
}

/// Runs the MCS reconciler until `stop` is raised.
pub async fn run(
    core: xcc_sync::Core,
    settings: Settings,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Some(uid) = crate::clusterregistry::local_cluster_id(&core.client, &mut stop).await else {
        return;
    };
    let wake = Arc::new(Notify::new());
    let rediscover = Arc::new(AtomicBool::new(true));
    let local = Local::open(&core, &wake, &rediscover);
    let counted = xcc_sync::sink::Counted {
        metrics: core.metrics.clone(),
        reconciler: NAME,
    };
    let Some(id) = own_id(&core, &local, &uid, &settings, &counted, &mut stop).await else {
        return;
    };
    tracing::info!(cluster_id = %id, clusterset = %settings.clusterset, "multi-cluster services running");
    let secrets = secret_changes(&core, &wake, &rediscover);
    let mut mcs = Mcs {
        counted,
        recorder: core.recorder(),
        core,
        settings,
        uid,
        id,
        wake,
        rediscover,
        discovered: None,
        local,
        peers: BTreeMap::new(),
        refused: BTreeMap::new(),
        absent: BTreeSet::new(),
        echoes: std::sync::Mutex::default(),
    };
    loop {
        mcs.core.metrics.queue_depth(NAME, 0);
        let woke = tokio::select! {
            () = mcs.wake.notified() => true,
            () = tokio::time::sleep(TICK) => false,
            _ = stop.wait_for(|s| *s) => break,
        };
        // Without a change, a pass is due only while a peer fails (its stale period runs) or
        // when the peers are to be looked up again.
        let due = mcs.discovered.is_none_or(|at| at.elapsed() >= REDISCOVER);
        if !woke && !due && !mcs.peers.values().any(|p| p.failing() && !p.withdrawn) {
            continue;
        }
        mcs.core.metrics.queue_depth(NAME, 1);
        mcs.discover().await;
        let started = Instant::now();
        let result = mcs.pass().await;
        mcs.core
            .metrics
            .reconciled(NAME, result.is_ok(), started.elapsed());
        if let Err(error) = result {
            mcs.counted.failed(&error);
            tracing::debug!(error = %xcc_kube::bounded(&error), "multi-cluster services: a pass failed; the next one retries");
            mcs.wake.notify_one();
            // sleep: the pace of retries after a failed pass.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    secrets.abort();
}

/// This cluster's ID, retried until the API server answers (and the CRD is served).
async fn own_id(
    core: &xcc_sync::Core,
    local: &Local,
    uid: &str,
    settings: &Settings,
    counted: &xcc_sync::sink::Counted,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<String> {
    let mut backoff = xcc_kube::Backoff::local();
    let mut outage = xcc_sync::outage::Outage::new(
        "the read or write of ClusterProperty cluster.clusterset.k8s.io (the cluster ID)",
        xcc_sync::outage::local_server(),
    );
    loop {
        let candidate = async || {
            clusterset::chosen_id(
                clusterset::own_cluster_name(&local.clusters, uid).await,
                uid,
            )
        };
        match clusterset::cluster_id(&core.client, candidate, &settings.clusterset, counted).await {
            Ok(id) => {
                outage.recovered();
                return Some(id);
            }
            Err(error) => {
                outage.failed(&error);
                let delay = backoff.next().unwrap_or(Duration::from_secs(5));
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stop.wait_for(|s| *s) => return None,
                }
            }
        }
    }
}

/// Wakes the reconciler, peers to be looked up again, at every change of a local Secret.
fn secret_changes(
    core: &xcc_sync::Core,
    wake: &Arc<Notify>,
    rediscover: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    use futures::StreamExt as _;
    let changes = core.local_secrets.changes();
    let (wake, rediscover) = (wake.clone(), rediscover.clone());
    tokio::spawn(async move {
        let mut changes = std::pin::pin!(changes);
        while changes.next().await.is_some() {
            rediscover.store(true, std::sync::atomic::Ordering::Release);
            wake.notify_one();
        }
    })
}

impl Mcs {
    /// Looks the peers up again when Clusters or Secrets changed, or every [`REDISCOVER`].
    async fn discover(&mut self) {
        let due = self.discovered.is_none_or(|at| at.elapsed() >= REDISCOVER);
        if !self
            .rediscover
            .swap(false, std::sync::atomic::Ordering::AcqRel)
            && !due
        {
            return;
        }
        self.discovered = Some(Instant::now());
        // While the local API server does not answer, no Secret can be read: the peers stay as
        // they were (the watches say the outage), and are looked up at the next change.
        if !matches!(
            self.local.clusters.health(),
            crate::sources::Health::Synced { .. }
        ) {
            self.rediscover
                .store(true, std::sync::atomic::Ordering::Release);
            return;
        }
        let found = clusterset::discover(&self.core, &self.local.clusters, &self.uid).await;
        self.peers.retain(|name, peer| {
            found
                .clients
                .get(name)
                .is_some_and(|c| c.identity == peer.identity)
        });
        for (name, client) in &found.clients {
            if !self.peers.contains_key(name) {
                tracing::debug!(peer = %name, "multi-cluster services: reading the peer's exports");
                let peer = clusterset::open(&self.core, name, client, &self.wake);
                self.peers.insert(name.clone(), peer);
            }
        }
        if found.refused != self.refused {
            for (name, why) in &found.refused {
                if !self.refused.contains_key(name) {
                    tracing::warn!(peer = %name, reason = %why, "multi-cluster services: the peer's exports are not imported");
                }
            }
            self.refused = found.refused;
        }
    }
}

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
//! The reconciler is one level-triggered loop over typed caches of its watches ([`watched`]):
//! each change marks the service it concerns, and a pass looks at those services only (every
//! service after a relist, a change of peers, Namespaces or Clusters, and every five minutes),
//! up to 32 at once, each computed whole and written only where it differs from the stores (and
//! not again while a store has not caught up with the agent's own last write).

pub mod api;
mod clusterset;
pub mod gateway;
mod pass;
pub mod plan;
pub mod publication;
pub mod reconciler;
mod watched;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    core::v1::{Namespace, Node, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    CustomResourceExt as _, ResourceExt as _,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};
use tokio_util::sync::CancellationToken;

use crate::sources::Detail;
use api::{LABEL_SERVICE_NAME, ServiceExport, ServiceImport};
use clusterset::{Peer, local_view};
use plan::{LABEL_IMPORT, LABEL_KUBE_SERVICE_NAME, LABEL_MANAGED_BY, MANAGED_BY};
use publication::ExportedService;
use watched::{Concerns, Key, Pending, Watched, own_key};

/// The reconciler's name in metrics.
const NAME: &str = "mcs";
/// The longest a pass waits for a change before it looks again (peers' stale periods).
const TICK: Duration = Duration::from_secs(1);
/// How often the peers are looked up again without a change of Clusters or Secrets.
const REDISCOVER: Duration = Duration::from_secs(30);
/// How often every service is looked at again without a change (what no watch says: a label
/// removed by hand from a derived Service, for instance).
const RESYNC: Duration = Duration::from_secs(300);
/// How many services a pass works on at once (their writes in flight).
const IN_FLIGHT: usize = 32;

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

/// The service a Service concerns: the one it derives from (derived and gateway Services), else
/// its own name.
fn service_key(object: &DynamicObject) -> Option<Key> {
    let labels = object.labels();
    let name = labels
        .get(LABEL_IMPORT)
        .or_else(|| labels.get(gateway::LABEL_GATEWAY_FOR))
        .cloned()
        .unwrap_or_else(|| object.name_any());
    Some((object.namespace().unwrap_or_default(), name))
}

/// Whether an EndpointSlice is one the agent writes for an import.
fn is_mcs_slice(labels: &BTreeMap<String, String>) -> bool {
    labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY)
}

/// The service an EndpointSlice concerns: the imported one (the agent's slices), else the
/// Service it belongs to (none: no service-name label).
fn slice_key(object: &DynamicObject) -> Option<Key> {
    let labels = object.labels();
    let name = if is_mcs_slice(labels) {
        labels.get(LABEL_SERVICE_NAME)
    } else {
        labels.get(LABEL_KUBE_SERVICE_NAME)
    }?;
    Some((object.namespace().unwrap_or_default(), name.clone()))
}

/// The local watches, read as typed caches, with the EndpointSlices indexed by service.
struct Local {
    exports: Watched<ServiceExport>,
    services: Watched<Service>,
    slices: Watched<EndpointSlice>,
    imports: Watched<ServiceImport>,
    publications: Watched<ExportedService>,
    namespaces: Watched<watched::Present>,
    clusters: Watched<crate::clusterregistry::api::Cluster>,
    /// The nodes, watched once an export uses the gateway data plane.
    nodes: Option<Watched<Node>>,
    /// The nodes as a list, as of the last refresh.
    node_list: Vec<Node>,
    /// The slices of each Service (not the agent's), by the Service's key.
    own_slices: HashMap<Key, Vec<Arc<EndpointSlice>>>,
    /// The agent's slices of each import, by the import's key.
    mcs_slices: HashMap<Key, Vec<Arc<EndpointSlice>>>,
}

impl Local {
    fn open(core: &xcc_sync::Core, pending: &Arc<Pending>) -> Local {
        let crd = |crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition| {
            let version = &crd.spec.versions[0].name;
            let gvk = GroupVersionKind::gvk(&crd.spec.group, version, &crd.spec.names.kind);
            let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
            local_view(core, gvk, &resource, Detail::Full)
        };
        let view = |group: &str, kind: &str, resource: ApiResource, detail: Detail| {
            local_view(
                core,
                GroupVersionKind::gvk(group, "v1", kind),
                &resource,
                detail,
            )
        };
        let by_name = Concerns::Key(own_key);
        Local {
            exports: Watched::new(crd(api::service_export_crd()), pending, by_name),
            imports: Watched::new(crd(ServiceImport::crd()), pending, by_name),
            publications: Watched::new(crd(ExportedService::crd()), pending, by_name),
            clusters: Watched::new(
                crd(crate::clusterregistry::api::Cluster::crd()),
                pending,
                Concerns::Peers,
            ),
            services: Watched::new(
                view(
                    "",
                    "Service",
                    ApiResource::erase::<Service>(&()),
                    Detail::Full,
                ),
                pending,
                Concerns::Key(service_key),
            ),
            slices: Watched::new(
                view(
                    "discovery.k8s.io",
                    "EndpointSlice",
                    ApiResource::erase::<EndpointSlice>(&()),
                    Detail::Full,
                ),
                pending,
                Concerns::Key(slice_key),
            ),
            namespaces: Watched::new(
                view(
                    "",
                    "Namespace",
                    ApiResource::erase::<Namespace>(&()),
                    Detail::Metadata,
                ),
                pending,
                Concerns::All,
            ),
            nodes: None,
            node_list: Vec::new(),
            own_slices: HashMap::new(),
            mcs_slices: HashMap::new(),
        }
    }

    /// Brings every cache up to its store.
    fn refresh(&mut self) {
        self.exports.refresh();
        self.services.refresh();
        self.imports.refresh();
        self.publications.refresh();
        self.namespaces.refresh();
        self.clusters.refresh();
        if self.slices.refresh() {
            self.own_slices.clear();
            self.mcs_slices.clear();
            for (key, slice) in self.slices.iter() {
                let labels = slice.labels();
                let (index, name) = if is_mcs_slice(labels) {
                    (&mut self.mcs_slices, labels.get(LABEL_SERVICE_NAME))
                } else {
                    (&mut self.own_slices, labels.get(LABEL_KUBE_SERVICE_NAME))
                };
                if let Some(name) = name {
                    index
                        .entry((key.0.clone(), name.clone()))
                        .or_default()
                        .push(slice.clone());
                }
            }
        }
    }

    /// Brings the nodes' cache up to its store; the nodes are watched from now on if `gateway`.
    fn refresh_nodes(&mut self, core: &xcc_sync::Core, pending: &Arc<Pending>, gateway: bool) {
        if gateway && self.nodes.is_none() {
            let view = local_view(
                core,
                GroupVersionKind::gvk("", "v1", "Node"),
                &ApiResource::erase::<Node>(&()),
                Detail::Full,
            );
            self.nodes = Some(Watched::new(view, pending, Concerns::Nodes));
        }
        if let Some(nodes) = &mut self.nodes
            && nodes.refresh()
        {
            self.node_list = nodes.iter().map(|(_, n)| (**n).clone()).collect();
        }
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
    pending: Arc<Pending>,
    discovered: Option<Instant>,
    resynced: Instant,
    local: Local,
    peers: BTreeMap<String, Peer>,
    refused: BTreeMap<String, String>,
    /// Imports whose namespace is absent, already said in an Event.
    absent: std::sync::Mutex<BTreeSet<Key>>,
    /// This agent's writes whose echo the stores have not shown yet, by kind/namespace/name.
    echoes: std::sync::Mutex<HashMap<String, pass::Echo>>,
}

/// Runs the MCS reconciler until `stop` is cancelled.
pub async fn run(core: xcc_sync::Core, settings: Settings, stop: CancellationToken) {
    let Some(uid) = crate::clusterregistry::local_cluster_id(&core.client, &stop).await else {
        return;
    };
    let pending = Arc::new(Pending::default());
    let local = Local::open(&core, &pending);
    let counted = xcc_sync::sink::Counted {
        metrics: core.metrics.clone(),
        reconciler: NAME,
    };
    let Some(id) = own_id(&core, &local, &uid, &settings, &counted, &stop).await else {
        return;
    };
    tracing::info!(cluster_id = %id, clusterset = %settings.clusterset, "multi-cluster services running");
    let secrets = secret_changes(&core, &pending);
    let mut mcs = Mcs {
        counted,
        recorder: core.recorder(),
        core,
        settings,
        uid,
        id,
        pending,
        discovered: None,
        resynced: Instant::now(),
        local,
        peers: BTreeMap::new(),
        refused: BTreeMap::new(),
        absent: std::sync::Mutex::default(),
        echoes: std::sync::Mutex::default(),
    };
    loop {
        mcs.core.metrics.queue_depth(NAME, 0);
        tokio::select! {
            () = mcs.pending.notified() => {},
            () = tokio::time::sleep(TICK) => {},
            () = stop.cancelled() => break,
        }
        mcs.discover().await;
        let stale = mcs.settings.stale_after;
        if mcs
            .peers
            .values_mut()
            .fold(false, |any, p| p.update(stale) | any)
        {
            mcs.pending.all();
        }
        if mcs.resynced.elapsed() >= RESYNC {
            mcs.resynced = Instant::now();
            mcs.pending.all();
        }
        let dirty = mcs.pending.take();
        if dirty.is_empty() {
            continue;
        }
        mcs.core.metrics.queue_depth(
            NAME,
            if dirty.all {
                mcs.local.exports.iter().count().max(1)
            } else {
                dirty.keys.len().max(1)
            },
        );
        let started = Instant::now();
        let result = mcs.pass(dirty).await;
        mcs.core
            .metrics
            .reconciled(NAME, result.is_ok(), started.elapsed());
        if let Err(error) = result {
            mcs.counted.failed(&error);
            tracing::debug!(error = %xcc_kube::bounded(&error), "multi-cluster services: a pass failed; the next one retries");
            // sleep: the pace of retries after a failed pass.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    drop(secrets);
}

/// This cluster's ID, retried until the API server answers (and the CRD is served).
async fn own_id(
    core: &xcc_sync::Core,
    local: &Local,
    uid: &str,
    settings: &Settings,
    counted: &xcc_sync::sink::Counted,
    stop: &CancellationToken,
) -> Option<String> {
    let mut backoff = xcc_kube::Backoff::local();
    let mut outage = xcc_sync::outage::Outage::new(
        "the read or write of ClusterProperty cluster.clusterset.k8s.io (the cluster ID)",
        xcc_sync::outage::local_server(),
    );
    loop {
        let candidate = async || {
            clusterset::chosen_id(
                clusterset::own_cluster_name(local.clusters.view(), uid).await,
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
                    () = stop.cancelled() => return None,
                }
            }
        }
    }
}

/// Looks the peers up again at every change of a local Secret.
fn secret_changes(core: &xcc_sync::Core, pending: &Arc<Pending>) -> xcc_sync::task::Owned<()> {
    use futures::StreamExt as _;
    let changes = core.local_secrets.changes();
    let pending = pending.clone();
    xcc_sync::task::spawn_owned(async move {
        let mut changes = std::pin::pin!(changes);
        while changes.next().await.is_some() {
            pending.rediscover();
        }
    })
}

impl Mcs {
    /// Looks the peers up again when Clusters or Secrets changed, or every [`REDISCOVER`];
    /// everything is looked at again when the peers or their faults changed.
    async fn discover(&mut self) {
        let due = self.discovered.is_none_or(|at| at.elapsed() >= REDISCOVER);
        if !self.pending.take_rediscover() && !due {
            return;
        }
        self.discovered = Some(Instant::now());
        // While the local API server does not answer, no Secret can be read: the peers stay as
        // they were (the watches say the outage), and are looked up at the next change.
        if !matches!(
            self.local.clusters.view().health(),
            crate::sources::Health::Synced { .. }
        ) {
            self.pending.rediscover_later();
            return;
        }
        let found = clusterset::discover(&self.core, self.local.clusters.view(), &self.uid).await;
        let before = self.peers.len();
        self.peers.retain(|name, peer| {
            found
                .clients
                .get(name)
                .is_some_and(|c| c.identity == peer.identity)
        });
        let mut changed = self.peers.len() != before;
        for (name, client) in &found.clients {
            if !self.peers.contains_key(name) {
                tracing::debug!(peer = %name, "multi-cluster services: reading the peer's exports");
                let peer = clusterset::open(&self.core, name, client, &self.pending);
                self.peers.insert(name.clone(), peer);
                changed = true;
            }
        }
        if found.refused != self.refused {
            for (name, why) in &found.refused {
                if !self.refused.contains_key(name) {
                    tracing::warn!(peer = %name, reason = %why, "multi-cluster services: the peer's exports are not imported");
                }
            }
            self.refused = found.refused;
            changed = true;
        }
        if changed {
            self.pending.all();
        }
    }
}

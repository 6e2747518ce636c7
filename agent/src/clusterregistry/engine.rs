//! The resource sync engine: compiles the ResourceSyncRules, resolves their kinds with discovery,
//! keeps one watch-fed store per (cluster, kind) — the local cluster and every peer with a
//! client — shared by all rules of that kind, and reconciles one object key at a time with
//! [`decide`](super::decide::decide), writing only to the local cluster. Copies that rules move
//! to another key are indexed by the source they name ([`Links`](super::links::Links)), so that
//! the source's key finds them again.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DynamicObject},
    core::GroupVersionKind as KubeGvk,
    runtime::{
        events::{Event as KubeEvent, EventType, Recorder},
        reflector::{ObjectRef, Store},
    },
};
use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use xcc_kube::status::Verdict;

use super::{
    PeerTable,
    access::Access,
    api::{Cluster, GroupVersionKind, ResourceSyncRule, RuleReason},
    builtin, churn,
    decide::{Action, Key, LocalView, PeerView, decide},
    links::Links,
    rules::{self, RuleSet},
};
use crate::{
    sink,
    sources::{Change, Detail, LOCAL, SourceId, Sources, View},
    sync_metrics::SyncMetrics,
};

/// This reconciler's name in metrics.
const RECONCILER: &str = "resource-sync";

/// How long a failed write waits before it is tried again.
const RETRY: Duration = Duration::from_secs(5);
/// How many keys are reconciled (and written) at once.
const CONCURRENT_WRITES: usize = 32;
/// Every key of every kind is looked at again this often (a backstop: watches see changes).
const RESYNC: Duration = Duration::from_secs(300);
/// After a start, how long a key waits for every peer to be checked and listed before it is
/// decided from the peers heard so far. Without it, a restart decides a key from the first peer
/// that lists and then again from a peer that lists later and wins (two originals of one object):
/// two writes where none is due.
const SETTLE: Duration = Duration::from_secs(15);

/// What a source wakes the engine for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Wake {
    /// One object key.
    Key(Key),
    /// Every key of a kind (after a full list).
    Kind(GroupVersionKind),
    /// The rules or the peers changed.
    Topology,
}

#[derive(Clone)]
struct Kind {
    resource: ApiResource,
    namespaced: bool,
}

/// A view of one kind in one cluster (the process's shared watch of it), and the task that turns
/// its changes into wakes of this engine.
struct Source {
    identity: String,
    view: View,
    task: tokio::task::AbortHandle,
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where a source watches: a kind in the local cluster or in a peer's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Place {
    /// `None`: the local cluster; otherwise a peer's Cluster name.
    cluster: Option<String>,
    gvk: GroupVersionKind,
}

impl Place {
    fn local(gvk: &GroupVersionKind) -> Place {
        Place {
            cluster: None,
            gvk: gvk.clone(),
        }
    }

    fn peer(name: &str, gvk: &GroupVersionKind) -> Place {
        Place {
            cluster: Some(name.to_string()),
            gvk: gvk.clone(),
        }
    }
}

/// How a source is read: the client, and who it is (with the watch's field selector, if any).
struct Reader {
    client: Client,
    identity: String,
}

/// A peer the engine reads from: live, its Cluster present and not disabled.
struct LivePeer {
    name: String,
    client: Client,
    identity: String,
}

/// What one peer holds for one key.
struct PeerHolding {
    name: String,
    /// Its cluster ID.
    id: String,
    live: bool,
    /// Its source holds a complete list that covers the local object's type.
    listed: bool,
    features: Vec<Value>,
    object: Option<Value>,
}

pub struct Engine {
    client: Client,
    local_id: String,
    recorder: Recorder,
    clusters: Store<Cluster>,
    table: tokio::sync::watch::Receiver<PeerTable>,
    kinds: HashMap<GroupVersionKind, Kind>,
    rules: HashMap<GroupVersionKind, Vec<RuleSet>>,
    /// Per rule kind, the kinds its copies are written as.
    targets: HashMap<GroupVersionKind, BTreeSet<GroupVersionKind>>,
    sources: HashMap<Place, Source>,
    links: Arc<Mutex<Links>>,
    /// What each rule last reported (reason, message), so that it is said once.
    reported: HashMap<String, (String, String)>,
    /// Whether the built-in rules that form the group run ([`builtin`]).
    group_sync: bool,
    /// What the agent may do here and read on each peer (SelfSubjectAccessReviews).
    access: Access,
    wake_tx: UnboundedSender<Wake>,
    wake_rx: UnboundedReceiver<Wake>,
    /// The process's watches, shared with the other reconcilers.
    registry: Sources,
    metrics: SyncMetrics,
    /// When this engine started ([`SETTLE`]).
    started: Instant,
    /// Writes per object in the last minute ([`churn`]).
    churn: std::sync::Mutex<churn::ChurnGuard>,
}

fn feature_gvk() -> GroupVersionKind {
    GroupVersionKind {
        group: super::api::GROUP.into(),
        version: "v1alpha1".into(),
        kind: "ClusterFeature".into(),
    }
}

fn key_of(gvk: &GroupVersionKind, object: &DynamicObject) -> Key {
    Key {
        gvk: gvk.clone(),
        namespace: object.namespace(),
        name: object.name_any(),
    }
}

fn to_value(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}

impl Engine {
    pub fn new(
        core: &xcc_sync::Core,
        local_id: String,
        recorder: Recorder,
        clusters: Store<Cluster>,
        table: tokio::sync::watch::Receiver<PeerTable>,
        group_sync: bool,
    ) -> Engine {
        let (wake_tx, wake_rx) = tokio::sync::mpsc::unbounded_channel();
        Engine {
            client: core.client.clone(),
            local_id,
            recorder,
            clusters,
            table,
            kinds: HashMap::new(),
            rules: HashMap::new(),
            targets: HashMap::new(),
            sources: HashMap::new(),
            links: Arc::default(),
            reported: HashMap::new(),
            group_sync,
            access: Access::default(),
            wake_tx,
            wake_rx,
            registry: core.sources.clone(),
            metrics: core.metrics.clone(),
            started: Instant::now(),
            churn: Default::default(),
        }
    }

    pub async fn run(mut self, mut stop: tokio::sync::watch::Receiver<bool>) {
        // The rules come from the same shared source as the built-in rule that copies them.
        let rule_view = self.registry.view(
            SourceId::local(KubeGvk::gvk(
                &ResourceSyncRule::group(&()),
                &ResourceSyncRule::version(&()),
                &ResourceSyncRule::kind(&()),
            )),
            self.client.clone(),
            &ApiResource::erase::<ResourceSyncRule>(&()),
            Detail::Full,
        );
        let mut rule_events = std::pin::pin!(rule_view.changes());
        let mut resync = tokio::time::interval(RESYNC);
        // The keys held back while the peers settle are looked at again when the wait ends.
        let settled = self.wake_tx.clone();
        let settling = tokio::spawn(async move {
            tokio::time::sleep(SETTLE).await;
            let _ = settled.send(Wake::Topology);
        });
        let _settling = AbortOnDrop(settling.abort_handle());
        let mut table = self.table.clone();
        let mut pending = BTreeSet::new();
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                change = rule_events.next() => match change {
                    Some(_) => {
                        pending.insert(Wake::Topology);
                    }
                    None => break,
                },
                changed = table.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    pending.insert(Wake::Topology);
                }
                _ = resync.tick() => {
                    pending.insert(Wake::Topology);
                    pending.extend(self.kinds.keys().cloned().map(Wake::Kind));
                }
                Some(wake) = self.wake_rx.recv() => {
                    pending.insert(wake);
                }
            }
            while let Ok(wake) = self.wake_rx.try_recv() {
                pending.insert(wake);
            }
            if pending.remove(&Wake::Topology) {
                self.refresh(&rules_of(&rule_view)).await;
            }
            let mut keys = BTreeSet::new();
            for wake in std::mem::take(&mut pending) {
                match wake {
                    Wake::Key(key) => {
                        keys.insert(key);
                    }
                    Wake::Kind(gvk) => {
                        // Rules that write copies as this kind look again too.
                        for (rule_gvk, targets) in &self.targets {
                            if *rule_gvk != gvk && targets.contains(&gvk) {
                                keys.extend(self.keys(rule_gvk));
                            }
                        }
                        keys.extend(self.keys(&gvk));
                    }
                    Wake::Topology => {}
                }
            }
            // Keys are independent: their writes go out together, a few dozen at a time.
            self.metrics.queue_depth(RECONCILER, keys.len());
            let this = &self;
            futures::stream::iter(keys)
                .for_each_concurrent(CONCURRENT_WRITES, |key| async move {
                    let started = Instant::now();
                    let ok = this.reconcile(&key).await;
                    this.metrics.reconciled(RECONCILER, ok, started.elapsed());
                })
                .await;
            self.metrics.queue_depth(RECONCILER, 0);
        }
    }

    /// Every key of `gvk` held by any cluster, or named as a source by a local copy.
    fn keys(&self, gvk: &GroupVersionKind) -> BTreeSet<Key> {
        let mut keys: BTreeSet<Key> = self
            .sources
            .iter()
            .filter(|(place, _)| place.gvk == *gvk)
            .flat_map(|(_, source)| source.view.store().state())
            .map(|o| key_of(gvk, &o))
            .collect();
        let links = self.links.lock().expect("links lock");
        keys.extend(links.copies.keys().filter(|k| k.gvk == *gvk).cloned());
        keys
    }

    /// Recompiles the rules, resolves their kinds, and starts and stops sources to match.
    async fn refresh(&mut self, rule_objects: &[ResourceSyncRule]) {
        let mut rules: HashMap<GroupVersionKind, Vec<RuleSet>> = HashMap::new();
        let mut all_targets: HashMap<GroupVersionKind, BTreeSet<GroupVersionKind>> = HashMap::new();
        let mut objects = rule_objects.to_vec();
        objects.sort_by_key(|r| r.name_any());
        let peers = self.peers();
        // (peer, kind) pairs whose objects this agent may not list and watch: not read.
        let mut unreadable: BTreeSet<Place> = BTreeSet::new();
        let mut denied = false;
        for rule in &objects {
            let name = rule.name_any();
            let compiled = match RuleSet::compile(&name, &rule.spec) {
                Ok(compiled) => compiled,
                Err(error) => {
                    self.report(rule, false, error.reason(), error.to_string())
                        .await;
                    continue;
                }
            };
            if let Err(error) = self.resolve(&compiled.gvk).await {
                let gvk = &compiled.gvk;
                let message = format!(
                    "spec.groupVersionKind: the API server does not serve {}/{} {}: {error}",
                    gvk.group, gvk.version, gvk.kind
                );
                self.report(rule, false, RuleReason::UnknownKind, message)
                    .await;
                continue;
            }
            let targets = compiled.targets();
            let mut unknown = None;
            for target in &targets {
                if let Err(error) = self.resolve(target).await {
                    unknown = Some((target, error));
                    break;
                }
            }
            if let Some((gvk, error)) = unknown {
                let message = format!(
                    "spec.rules[].mutations.groupVersionKind: the API server does not serve \
                     {}/{} {}: {error}",
                    gvk.group, gvk.version, gvk.kind
                );
                self.report(rule, false, RuleReason::UnknownKind, message)
                    .await;
                continue;
            }
            let resource = self.kinds[&compiled.gvk].resource.clone();
            // Copies are written as the target kinds; the rule's own kind is watched here too.
            let mut needs = vec![(resource.clone(), Access::READ)];
            needs.extend(
                targets
                    .iter()
                    .map(|t| (self.kinds[t].resource.clone(), Access::WRITE)),
            );
            let mut forbidden = None;
            for (resource, verbs) in needs {
                if let Some(missing) = self
                    .access
                    .missing("local", &self.client, &resource, verbs)
                    .await
                {
                    forbidden = Some((missing, resource.plural));
                    break;
                }
            }
            if let Some((missing, plural)) = forbidden {
                denied = true;
                let message = format!(
                    "this agent may not {missing} {plural} here; grant it with a ClusterRole \
                     labelled cluster-registry.k8s.cisco.com/controller-aggregated: \"true\""
                );
                self.report(rule, false, RuleReason::MissingPermission, message)
                    .await;
                continue;
            }
            // Every peer is asked at once; a silent one costs one deadline (see `Access`).
            let access = &self.access;
            let answers = futures::future::join_all(peers.iter().map(|peer| {
                let resource = &resource;
                async move {
                    let missing = access
                        .missing(&peer.identity, &peer.client, resource, Access::READ)
                        .await;
                    (&peer.name, missing)
                }
            }))
            .await;
            let mut refused = Vec::new();
            for (peer, missing) in answers {
                if let Some(missing) = missing {
                    refused.push(format!("{peer} ({missing})"));
                    unreadable.insert(Place::peer(peer, &compiled.gvk));
                }
            }
            if refused.is_empty() {
                let message = format!(
                    "copying matching {} objects from the peer clusters",
                    compiled.gvk.kind
                );
                self.report(rule, true, RuleReason::Ready, message).await;
            } else {
                denied = true;
                let message = format!(
                    "the peer kubeconfig may not read {} on {}; grant it there with a \
                     ClusterRole labelled cluster-registry.k8s.cisco.com/reader-aggregated: \
                     \"true\". Copying from the other peers",
                    resource.plural,
                    refused.join(", ")
                );
                self.report(rule, false, RuleReason::MissingPermission, message)
                    .await;
            }
            all_targets
                .entry(compiled.gvk.clone())
                .or_default()
                .extend(targets);
            rules
                .entry(compiled.gvk.clone())
                .or_default()
                .push(compiled);
        }
        if self.group_sync {
            for rule in builtin::core_rules() {
                if self.resolve(&rule.gvk).await.is_err() {
                    tracing::debug!(rule = %rule.name, "kind not served; built-in rule waits");
                    continue;
                }
                all_targets
                    .entry(rule.gvk.clone())
                    .or_default()
                    .extend(rule.targets());
                rules.entry(rule.gvk.clone()).or_default().push(rule);
            }
        }
        if denied {
            // Permissions are checked again soon, so that a fix takes effect by itself.
            self.access
                .recheck_later(self.wake_tx.clone(), Wake::Topology);
        }
        self.reported
            .retain(|name, _| objects.iter().any(|r| r.name_any() == *name));
        let features = rules.values().flatten().any(RuleSet::uses_features);
        if features && self.resolve(&feature_gvk()).await.is_err() {
            tracing::warn!("ClusterFeature is not served; rules with clusterFeatureMatch wait");
        }
        let mut wanted: BTreeMap<Place, Reader> = BTreeMap::new();
        let mut kinds: Vec<GroupVersionKind> = rules.keys().cloned().collect();
        if features {
            kinds.push(feature_gvk());
        }
        // Here: the rules' kinds and the kinds their copies are written as.
        let local_kinds = rules.keys().chain(all_targets.values().flatten());
        for gvk in local_kinds.filter(|g| self.kinds.contains_key(*g)) {
            wanted.insert(
                Place::local(gvk),
                Reader {
                    client: self.client.clone(),
                    identity: LOCAL.to_string(),
                },
            );
        }
        for gvk in kinds.iter().filter(|g| self.kinds.contains_key(*g)) {
            let fields = peer_field_selector(gvk, rules.get(gvk).map(Vec::as_slice));
            for peer in &peers {
                let place = Place::peer(&peer.name, gvk);
                if unreadable.contains(&place) {
                    continue;
                }
                // The selector is part of the identity: when a rule widens the kind, the
                // source is restarted unfiltered.
                let identity = match &fields {
                    Some(fields) => format!("{}?fieldSelector={fields}", peer.identity),
                    None => peer.identity.clone(),
                };
                wanted.insert(
                    place,
                    Reader {
                        client: peer.client.clone(),
                        identity,
                    },
                );
            }
        }
        let before = self.sources.len();
        self.sources.retain(|place, source| {
            wanted
                .get(place)
                .is_some_and(|reader| reader.identity == source.identity)
        });
        let mut changed = self.sources.len() != before;
        for (place, reader) in wanted {
            if self.sources.contains_key(&place) {
                continue;
            }
            let kind = self.kinds[&place.gvk].clone();
            let source = self.start_source(&place, reader, kind);
            self.sources.insert(place, source);
            changed = true;
        }
        if changed {
            tracing::debug!(
                sources = self.sources.len(),
                "resource sync watches changed"
            );
        }
        self.rules = rules;
        self.targets = all_targets;
        // Rules or peers changed: every key of every kind may decide differently now.
        let gvks: Vec<GroupVersionKind> = self.rules.keys().cloned().collect();
        for gvk in gvks {
            let _ = self.wake_tx.send(Wake::Kind(gvk));
        }
    }

    /// Live peers (the Cluster reconciler's last check passed), whose Cluster exists and is not
    /// disabled. A peer that is not live is neither checked nor
    /// listed: a peer answering errors gets only the Cluster reconciler's backed-off checks,
    /// and its copies are kept (nothing is decided about a peer without a source).
    fn peers(&self) -> Vec<LivePeer> {
        let table = self.table.borrow();
        self.clusters
            .state()
            .iter()
            .filter(|c| c.spec.cluster_id != self.local_id)
            .filter(|c| !super::disabled(c))
            .filter_map(|c| {
                let name = c.name_any();
                let state = table.get(&name).filter(|state| state.live)?;
                let peer = state.client.clone()?;
                Some(LivePeer {
                    name,
                    client: peer.client,
                    identity: peer.identity,
                })
            })
            .collect()
    }

    async fn resolve(&mut self, gvk: &GroupVersionKind) -> Result<(), kube::Error> {
        if self.kinds.contains_key(gvk) {
            return Ok(());
        }
        let (resource, capabilities) = kube::discovery::pinned_kind(
            &self.client,
            &KubeGvk::gvk(&gvk.group, &gvk.version, &gvk.kind),
        )
        .await?;
        let namespaced = capabilities.scope == kube::discovery::Scope::Namespaced;
        self.kinds.insert(
            gvk.clone(),
            Kind {
                resource,
                namespaced,
            },
        );
        Ok(())
    }

    fn start_source(&self, place: &Place, reader: Reader, kind: Kind) -> Source {
        let Place { cluster, gvk } = place.clone();
        let Reader { client, identity } = reader;
        let id = SourceId {
            cluster: cluster.clone().unwrap_or_else(|| LOCAL.into()),
            identity: match &cluster {
                Some(_) => identity.clone(),
                None => LOCAL.into(),
            },
            gvk: KubeGvk::gvk(&gvk.group, &gvk.version, &gvk.kind),
            fields: identity
                .split_once("?fieldSelector=")
                .map(|(_, fields)| fields.to_string()),
        };
        let view = self.registry.view(id, client, &kind.resource, Detail::Full);
        let changes = view.changes();
        let store = view.store().clone();
        let wake = self.wake_tx.clone();
        // Local objects are indexed by the source they name.
        let links = cluster.is_none().then(|| self.links.clone());
        let task = tokio::spawn(async move {
            let mut changes = std::pin::pin!(changes);
            let source_of = |o: &DynamicObject| {
                o.annotations()
                    .get(super::SOURCE_ANNOTATION)
                    .and_then(|a| Key::parse(a))
            };
            // Records what a local object names as its source, and wakes the sources concerned.
            let relink = |key: &Key, source: Option<Key>| {
                if let Some(links) = &links {
                    let sources = links.lock().expect("links lock").update(key, source);
                    for source in sources {
                        let _ = wake.send(Wake::Key(source));
                    }
                }
            };
            while let Some(change) = changes.next().await {
                let woken = match change {
                    Change::Applied(o) => {
                        let key = key_of(&gvk, &o);
                        relink(&key, source_of(&o));
                        Wake::Key(key)
                    }
                    Change::Deleted(o) => {
                        let key = key_of(&gvk, &o);
                        relink(&key, None);
                        Wake::Key(key)
                    }
                    // A new list (or missed changes): the index of this kind is built again from
                    // the store, and every key of the kind is looked at.
                    Change::Listed | Change::Missed => {
                        if let Some(links) = &links {
                            let mut links = links.lock().expect("links lock");
                            links.forget(&gvk);
                            for o in store.state() {
                                if let Some(source) = source_of(&o) {
                                    links.update(&key_of(&gvk, &o), Some(source));
                                }
                            }
                        }
                        Wake::Kind(gvk.clone())
                    }
                };
                // A ClusterFeature change can change which peers every rule reads from.
                let woken = if gvk == feature_gvk() {
                    Wake::Topology
                } else {
                    woken
                };
                if wake.send(woken).is_err() {
                    return;
                }
            }
        });
        Source {
            identity,
            view,
            task: task.abort_handle(),
        }
    }

    /// The local object under `key`, with its `apiVersion` and `kind` (listed objects carry
    /// neither); `None` when there is none or its kind is not watched here.
    fn local_object(&self, key: &Key) -> Option<Value> {
        let source = self.sources.get(&Place::local(&key.gvk))?;
        self.object(source, key)
    }

    fn object(&self, source: &Source, key: &Key) -> Option<Value> {
        let kind = self.kinds.get(&key.gvk)?;
        let mut reference = ObjectRef::<DynamicObject>::new_with(&key.name, kind.resource.clone());
        if let Some(namespace) = &key.namespace {
            reference = reference.within(namespace);
        }
        source.view.store().get(&reference).map(|o| {
            let mut value = to_value(&o);
            value["apiVersion"] = Value::String(kind.resource.api_version.clone());
            value["kind"] = Value::String(kind.resource.kind.clone());
            value
        })
    }

    /// An API for the objects of `key`'s kind in its namespace.
    fn api(&self, key: &Key) -> Option<Api<DynamicObject>> {
        let resource = &self.kinds.get(&key.gvk)?.resource;
        Some(match &key.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        })
    }

    /// Decides and writes what `key` needs; false when a write failed (it is retried).
    async fn reconcile(&self, key: &Key) -> bool {
        let gvk = &key.gvk;
        // Rules are kept only for kinds discovery resolved.
        let Some(rules) = self.rules.get(gvk) else {
            return true;
        };
        // Nothing is decided before the local lists are complete: a copy could overwrite an
        // object not seen yet.
        let local_kinds = std::iter::once(gvk).chain(self.targets.get(gvk).into_iter().flatten());
        for local_kind in local_kinds {
            match self.sources.get(&Place::local(local_kind)) {
                Some(source) if source.view.listed() => {}
                _ => return true,
            }
        }
        if self.started.elapsed() < SETTLE && self.unsettled(gvk) {
            return true;
        }
        let at_key = self.local_object(key);
        let moved: Vec<Value> = {
            let links = self.links.lock().expect("links lock");
            links
                .copies
                .get(key)
                .into_iter()
                .flatten()
                .cloned()
                .collect::<Vec<_>>()
        }
        .iter()
        .filter_map(|copy| self.local_object(copy))
        .filter(|o| Key::source_of(o).as_ref() == Some(key))
        .collect();
        let table = self.table.borrow().clone();
        let local_type = self
            .local_object(key)
            .and_then(|o| o.get("type").and_then(Value::as_str).map(str::to_string));
        let holdings: Vec<PeerHolding> = self
            .sources
            .iter()
            .filter(|(place, _)| place.cluster.is_some() && place.gvk == *gvk)
            .filter_map(|(place, source)| {
                let name = place.cluster.as_ref()?;
                let state = table.get(name)?;
                let feature_source = self.sources.get(&Place::peer(name, &feature_gvk()));
                let features = feature_source
                    .map(|f| f.view.store().state().iter().map(|o| to_value(o)).collect())
                    .unwrap_or_default();
                // Features not listed yet are unknown too: which rules read the peer is not
                // known.
                let features_listed = feature_source.is_none_or(|f| f.view.listed());
                Some(PeerHolding {
                    name: name.clone(),
                    id: state.id.clone(),
                    live: state.live,
                    // A source filtered by type says nothing of objects of another type: their
                    // absence there is no deletion.
                    listed: source.view.listed()
                        && features_listed
                        && filter_covers(&source.identity, local_type.as_deref()),
                    features,
                    object: self.object(source, key),
                })
            })
            .collect();
        let peers: Vec<PeerView<'_>> = holdings
            .iter()
            .map(|holding| PeerView {
                name: &holding.name,
                id: &holding.id,
                live: holding.live,
                listed: holding.listed,
                features: &holding.features,
                object: holding.object.as_ref(),
            })
            .collect();
        let get = |k: &Key| self.local_object(k);
        let namespaced = |g: &GroupVersionKind| self.kinds.get(g).is_none_or(|k| k.namespaced);
        // Not held across the writes below (the view's lookups are not Sync).
        let decision = {
            let local = LocalView {
                at_key: at_key.as_ref(),
                moved: &moved,
                get: &get,
                namespaced: &namespaced,
            };
            decide(
                &self.local_id,
                key,
                &local,
                &peers,
                rules,
                &self.clusters.state(),
            )
        };
        if let Some(target) = decision.target.filter(|t| t != key) {
            self.links
                .lock()
                .expect("links lock")
                .routes
                .insert(target, key.clone());
        }
        let mut failed = false;
        for action in decision.actions {
            if let Err(error) = self.act(key, action).await {
                tracing::warn!(kind = %gvk.kind, namespace = ?key.namespace, name = %key.name, %error, "cannot write the copy; retrying");
                if let Some(rule) = self.rule_object(gvk) {
                    let note = format!(
                        "cannot write the copy of {} {}: {error}",
                        gvk.kind,
                        key.to_annotation()
                    );
                    self.event(&rule, EventType::Warning, "WriteFailed", note)
                        .await;
                }
                failed = true;
            }
        }
        if failed {
            let wake = self.wake_tx.clone();
            let retry = Wake::Key(key.clone());
            tokio::spawn(async move {
                tokio::time::sleep(RETRY).await;
                let _ = wake.send(retry);
            });
        }
        !failed
    }

    /// Carries out one action of the decision for `key`.
    async fn act(&self, key: &Key, action: Action) -> Result<(), kube::Error> {
        let kind = &key.gvk.kind;
        let namespace = key.namespace.as_deref().unwrap_or_default();
        let name = &key.name;
        match action {
            Action::Keep(why) => {
                tracing::trace!(%kind, %namespace, %name, why, "nothing to write");
                Ok(())
            }
            // Not retried early: the same inputs fail the same way. A change to the object or the
            // rule wakes this key, and the resync looks again.
            Action::Invalid { rule, message } => {
                tracing::warn!(%rule, %kind, %namespace, %name, %message, "cannot make the copy; nothing written");
                let reference = ResourceSyncRule::new(&rule, Default::default()).object_ref(&());
                let note = format!("cannot copy {kind} {namespace}/{name}: {message}");
                self.event(&reference, EventType::Warning, "TemplateFailed", note)
                    .await;
                Ok(())
            }
            Action::Apply { desired, from } => {
                let target = Key::of(&desired).expect("a placed copy has a key");
                let Some(api) = self.api(&target) else {
                    return Ok(());
                };
                sink::apply_whole(&api, &target.name, desired, &self.counted()).await?;
                self.guard(&target).await;
                if target == *key {
                    tracing::info!(%kind, %namespace, %name, %from, "copied from peer");
                } else {
                    tracing::info!(%kind, %namespace, %name, %from, to = %target.to_annotation(), "copied from peer");
                }
                Ok(())
            }
            Action::Delete(local) => {
                let Some(copy) = Key::of(&local) else {
                    return Ok(());
                };
                let Some(api) = self.api(&copy) else {
                    return Ok(());
                };
                let field = |f: &str| local["metadata"][f].as_str().map(String::from);
                let deleted = sink::delete_exact(
                    &api,
                    &copy.name,
                    field("uid"),
                    field("resourceVersion"),
                    &self.counted(),
                )
                .await?;
                if deleted {
                    tracing::info!(%kind, %namespace, %name, copy = %copy.to_annotation(), "copy deleted");
                    self.guard(&copy).await;
                }
                Ok(())
            }
        }
    }

    /// Whether some peer may still hold objects of `gvk` this engine has not seen: a Cluster not
    /// checked yet, or a live peer whose list of the kind has not arrived.
    fn unsettled(&self, gvk: &GroupVersionKind) -> bool {
        let table = self.table.borrow();
        self.clusters
            .state()
            .iter()
            .filter(|c| c.spec.cluster_id != self.local_id && !super::disabled(c))
            .any(|c| {
                let name = c.name_any();
                match table.get(&name) {
                    None => true,
                    Some(state) if !state.live => false,
                    Some(_) => self
                        .sources
                        .get(&Place::peer(&name, gvk))
                        .is_none_or(|source| !source.view.listed()),
                }
            })
    }

    /// Counts a write of `target`; one written more than [`churn::LIMIT`] times within a minute
    /// is reported (metric, warning, Warning Event on the object).
    async fn guard(&self, target: &Key) {
        let writes = self
            .churn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(target, Instant::now());
        let Some(writes) = writes else { return };
        let kind = &target.gvk.kind;
        let namespace = target.namespace.as_deref().unwrap_or_default();
        let name = &target.name;
        self.metrics.churning(RECONCILER, kind);
        tracing::warn!(%kind, %namespace, %name, writes, "object written again and again by resource sync");
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(rules::api_version(&target.gvk)),
            kind: Some(kind.clone()),
            namespace: target.namespace.clone(),
            name: Some(name.clone()),
            ..Default::default()
        };
        let note = format!(
            "resource sync wrote this object {writes} times within a minute: its sources or \
             another writer keep changing it (see the agent's log for where each copy came from)"
        );
        self.event(&reference, EventType::Warning, "Churn", note)
            .await;
    }

    /// Where this engine's writes are counted.
    fn counted(&self) -> sink::Counted {
        sink::Counted {
            metrics: self.metrics.clone(),
            reconciler: RECONCILER,
        }
    }

    /// A reference to the first rule of `gvk`, for Events.
    fn rule_object(
        &self,
        gvk: &GroupVersionKind,
    ) -> Option<k8s_openapi::api::core::v1::ObjectReference> {
        let name = &self
            .rules
            .get(gvk)?
            .iter()
            .find(|r| !builtin::is_core(r))?
            .name;
        Some(ResourceSyncRule::new(name, Default::default()).object_ref(&()))
    }

    async fn event(
        &self,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let event = KubeEvent {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Sync".into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, reference).await {
            tracing::debug!(%error, "could not publish an Event");
        }
    }

    /// Says once (log, Event, status) whether `rule` can work.
    async fn report(
        &mut self,
        rule: &ResourceSyncRule,
        ok: bool,
        reason: RuleReason,
        message: String,
    ) {
        let name = rule.name_any();
        let said = (reason.to_string(), message.clone());
        let verdict = if ok {
            Verdict::ok(reason.clone(), message.clone())
        } else {
            Verdict::not(reason.clone(), message.clone())
        };
        let mut status = rule.status.clone().unwrap_or_default();
        let generation = rule.metadata.generation;
        status.observed_generation = generation;
        verdict.set(&mut status.conditions, "Ready", generation);
        let api = Api::<ResourceSyncRule>::all(self.client.clone());
        if let Err(error) = sink::write_status(&api, rule, &status, &self.counted()).await {
            tracing::debug!(rule = %name, %error, "could not write the status");
        }
        if self.reported.get(&name) == Some(&said) {
            return;
        }
        self.reported.insert(name.clone(), said);
        if ok {
            tracing::info!(rule = %name, "ResourceSyncRule active");
        } else {
            tracing::warn!(rule = %name, %reason, %message, "ResourceSyncRule cannot work");
            self.event(
                &rule.object_ref(&()),
                EventType::Warning,
                reason.as_str(),
                message,
            )
            .await;
        }
    }
}

/// The rules in the shared source's store (objects that do not parse as rules are logged and
/// left out: the API server validated them against the CRD, so this means a newer schema).
fn rules_of(view: &View) -> Vec<ResourceSyncRule> {
    view.store()
        .state()
        .iter()
        .filter_map(|o| {
            let mut value = to_value(o);
            value["apiVersion"] = Value::String(ResourceSyncRule::api_version(&()).into_owned());
            value["kind"] = Value::String(ResourceSyncRule::kind(&()).into_owned());
            serde_json::from_value(value)
                .inspect_err(|error| {
                    tracing::warn!(rule = %o.name_any(), %error, "cannot read this ResourceSyncRule");
                })
                .ok()
        })
        .collect()
}

/// The field selector of a peer's watch of `gvk`, when the rules reading that kind only want
/// objects of one API-defined type: the built-in rule for peer Secrets wants those of type
/// [`super::SECRET_TYPE`], so unless a ResourceSyncRule also reads Secrets, a peer is asked for
/// those alone (`type=...`), not for every Secret it holds. Local watches are never filtered: a
/// local object of any type must be seen to win over a copy.
fn peer_field_selector(gvk: &GroupVersionKind, rules: Option<&[RuleSet]>) -> Option<String> {
    let secrets = gvk.group.is_empty() && gvk.version == "v1" && gvk.kind == "Secret";
    let rules = rules?;
    (secrets && !rules.is_empty() && rules.iter().all(builtin::is_core))
        .then(|| format!("type={}", super::SECRET_TYPE))
}

/// Whether a peer source whose identity carries a `type=` field selector lists objects of
/// `local_type` (the type of the local object under the key, if any).
fn filter_covers(identity: &str, local_type: Option<&str>) -> bool {
    match identity.split_once("?fieldSelector=type=") {
        Some((_, wanted)) => local_type.is_none_or(|t| t == wanted),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filtered_peer_source_decides_nothing_about_other_types() {
        let filtered =
            "cluster-registry/second@u/1?fieldSelector=type=k8s.cisco.com/cluster-registry-secret";
        assert!(filter_covers(
            filtered,
            Some("k8s.cisco.com/cluster-registry-secret")
        ));
        assert!(filter_covers(filtered, None));
        assert!(!filter_covers(filtered, Some("Opaque")));
        assert!(filter_covers("cluster-registry/second@u/1", Some("Opaque")));
    }

    fn secret_gvk() -> GroupVersionKind {
        GroupVersionKind {
            group: String::new(),
            version: "v1".into(),
            kind: "Secret".into(),
        }
    }

    #[test]
    fn peers_are_asked_only_for_peer_secrets_unless_a_rule_reads_secrets() {
        let core: Vec<RuleSet> = builtin::core_rules()
            .into_iter()
            .filter(|r| r.gvk == secret_gvk())
            .collect();
        assert_eq!(
            peer_field_selector(&secret_gvk(), Some(&core)).as_deref(),
            Some("type=k8s.cisco.com/cluster-registry-secret")
        );
        let spec = serde_json::from_value(serde_json::json!({
            "groupVersionKind": {"version": "v1", "kind": "Secret"},
            "rules": [{"match": [{"objectKey": {"name": "test-secret", "namespace": "cluster-registry"}}]}],
        }))
        .unwrap();
        let mut with_user_rule = core.clone();
        with_user_rule.push(RuleSet::compile("test-secret-sink", &spec).unwrap());
        assert_eq!(
            peer_field_selector(&secret_gvk(), Some(&with_user_rule)),
            None
        );
        let clusters = builtin::core_rules().into_iter().next().unwrap();
        assert_eq!(
            peer_field_selector(&clusters.gvk.clone(), Some(&[clusters])),
            None
        );
        assert_eq!(peer_field_selector(&secret_gvk(), None), None);
    }
}

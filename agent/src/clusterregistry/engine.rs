//! The resource sync engine: compiles the ResourceSyncRules, resolves their kinds with discovery,
//! keeps one watch-fed store per (cluster, kind) — the local cluster and every peer with a
//! client — shared by all rules of that kind, and reconciles one object key at a time with
//! [`decide`](super::decide::decide), writing only to the local cluster.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::StreamExt;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
    },
    core::GroupVersionKind as KubeGvk,
    runtime::{
        WatchStreamExt,
        events::{Event as KubeEvent, EventType, Recorder},
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use xcc_kube::{ConditionStatus, set_condition};

use super::{
    PeerTable,
    access::Access,
    api::{Cluster, GroupVersionKind, ResourceSyncRule},
    core,
    decide::{Action, PeerView, decide},
    rules::RuleSet,
};
use crate::{
    peers::WatchBackoff,
    sink::{FIELD_MANAGER, up_to_date},
};

/// How long a failed write waits before it is tried again.
const RETRY: Duration = Duration::from_secs(5);
/// How many keys are reconciled (and written) at once.
const CONCURRENT_WRITES: usize = 32;
/// Every key of every kind is looked at again this often (a backstop: watches see changes).
const RESYNC: Duration = Duration::from_secs(300);

/// What a source wakes the engine for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Wake {
    /// One object key of a kind.
    Key(GroupVersionKind, Option<String>, String),
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

/// A watch-fed store of one kind in one cluster.
struct Source {
    identity: String,
    store: Store<DynamicObject>,
    listed: Arc<AtomicBool>,
    task: tokio::task::AbortHandle,
}

impl Drop for Source {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What one peer holds for one key: name, ID, live, listed, ClusterFeatures, object.
type PeerData = (String, String, bool, bool, Vec<Value>, Option<Value>);

/// `None`: the local cluster; otherwise a peer's Cluster name.
type SourceKey = (Option<String>, GroupVersionKind);

pub struct Engine {
    client: Client,
    local_id: String,
    recorder: Recorder,
    clusters: Store<Cluster>,
    table: tokio::sync::watch::Receiver<PeerTable>,
    kinds: HashMap<GroupVersionKind, Kind>,
    rules: HashMap<GroupVersionKind, Vec<RuleSet>>,
    sources: HashMap<SourceKey, Source>,
    /// What each rule last reported (reason, message), so that it is said once.
    reported: HashMap<String, (String, String)>,
    /// Whether the built-in rules that form the group run ([`core`]).
    group_sync: bool,
    /// What the agent may do here and read on each peer (SelfSubjectAccessReviews).
    access: Access,
    wake_tx: UnboundedSender<Wake>,
    wake_rx: UnboundedReceiver<Wake>,
}

fn feature_gvk() -> GroupVersionKind {
    GroupVersionKind {
        group: super::api::GROUP.into(),
        version: "v1alpha1".into(),
        kind: "ClusterFeature".into(),
    }
}

fn to_value(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}

impl Engine {
    pub fn new(
        client: Client,
        local_id: String,
        recorder: Recorder,
        clusters: Store<Cluster>,
        table: tokio::sync::watch::Receiver<PeerTable>,
        group_sync: bool,
    ) -> Engine {
        let (wake_tx, wake_rx) = tokio::sync::mpsc::unbounded_channel();
        Engine {
            client,
            local_id,
            recorder,
            clusters,
            table,
            kinds: HashMap::new(),
            rules: HashMap::new(),
            sources: HashMap::new(),
            reported: HashMap::new(),
            group_sync,
            access: Access::default(),
            wake_tx,
            wake_rx,
        }
    }

    pub async fn run(mut self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let (rule_writer, rule_store) = {
            let writer = reflector::store::Writer::<ResourceSyncRule>::default();
            let store = writer.as_reader();
            (writer, store)
        };
        let rule_events = reflector::reflector(
            rule_writer,
            watcher(
                Api::<ResourceSyncRule>::all(self.client.clone()),
                watcher::Config::default(),
            )
            .backoff(WatchBackoff::default()),
        );
        let mut rule_events = std::pin::pin!(rule_events);
        let mut resync = tokio::time::interval(RESYNC);
        let mut table = self.table.clone();
        let mut pending = BTreeSet::new();
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                event = rule_events.next() => match event {
                    Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)) => {
                        pending.insert(Wake::Topology);
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => tracing::debug!(%error, "watch of ResourceSyncRules failed; retrying"),
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
                self.refresh(&rule_store).await;
            }
            let mut keys = BTreeSet::new();
            for wake in std::mem::take(&mut pending) {
                match wake {
                    Wake::Key(gvk, namespace, name) => {
                        keys.insert((gvk, namespace, name));
                    }
                    Wake::Kind(gvk) => {
                        for (namespace, name) in self.keys(&gvk) {
                            keys.insert((gvk.clone(), namespace, name));
                        }
                    }
                    Wake::Topology => {}
                }
            }
            // Keys are independent: their writes go out together, a few dozen at a time.
            let this = &self;
            futures::stream::iter(keys)
                .for_each_concurrent(CONCURRENT_WRITES, |(gvk, namespace, name)| async move {
                    this.reconcile(&gvk, namespace.as_deref(), &name).await
                })
                .await;
        }
    }

    /// Every key of `gvk` held by any cluster.
    fn keys(&self, gvk: &GroupVersionKind) -> BTreeSet<(Option<String>, String)> {
        self.sources
            .iter()
            .filter(|((_, g), _)| g == gvk)
            .flat_map(|(_, source)| source.store.state())
            .map(|o| (o.namespace(), o.name_any()))
            .collect()
    }

    /// Recompiles the rules, resolves their kinds, and starts and stops sources to match.
    async fn refresh(&mut self, rule_store: &Store<ResourceSyncRule>) {
        let mut rules: HashMap<GroupVersionKind, Vec<RuleSet>> = HashMap::new();
        let mut objects = rule_store.state();
        objects.sort_by_key(|r| r.name_any());
        let peers = self.peers();
        // (peer, kind) pairs whose objects this agent may not list and watch: not read.
        let mut unreadable: BTreeSet<SourceKey> = BTreeSet::new();
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
                self.report(rule, false, "UnknownKind", message).await;
                continue;
            }
            let resource = self.kinds[&compiled.gvk].resource.clone();
            if let Some(missing) = self
                .access
                .missing("local", &self.client, &resource, Access::WRITE)
                .await
            {
                denied = true;
                let message = format!(
                    "this agent may not {missing} {} here; grant it with a ClusterRole labelled \
                     cluster-registry.k8s.cisco.com/controller-aggregated: \"true\"",
                    resource.plural
                );
                self.report(rule, false, "MissingPermission", message).await;
                continue;
            }
            let mut refused = Vec::new();
            for (peer, client, identity) in &peers {
                if let Some(missing) = self
                    .access
                    .missing(identity, client, &resource, Access::READ)
                    .await
                {
                    refused.push(format!("{peer} ({missing})"));
                    unreadable.insert((Some(peer.clone()), compiled.gvk.clone()));
                }
            }
            if refused.is_empty() {
                let message = format!(
                    "copying matching {} objects from the peer clusters",
                    compiled.gvk.kind
                );
                self.report(rule, true, "Ready", message).await;
            } else {
                denied = true;
                let message = format!(
                    "the peer kubeconfig may not read {} on {}; grant it there with a \
                     ClusterRole labelled cluster-registry.k8s.cisco.com/reader-aggregated: \
                     \"true\". Copying from the other peers",
                    resource.plural,
                    refused.join(", ")
                );
                self.report(rule, false, "MissingPermission", message).await;
            }
            rules
                .entry(compiled.gvk.clone())
                .or_default()
                .push(compiled);
        }
        if self.group_sync {
            for rule in core::core_rules() {
                if self.resolve(&rule.gvk).await.is_err() {
                    tracing::debug!(rule = %rule.name, "kind not served; built-in rule waits");
                    continue;
                }
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
        let mut wanted: BTreeMap<SourceKey, (Client, String)> = BTreeMap::new();
        let mut kinds: Vec<GroupVersionKind> = rules.keys().cloned().collect();
        if features {
            kinds.push(feature_gvk());
        }
        for gvk in kinds.iter().filter(|g| self.kinds.contains_key(*g)) {
            if *gvk != feature_gvk() {
                wanted.insert(
                    (None, gvk.clone()),
                    (self.client.clone(), "local".to_string()),
                );
            }
            for (name, client, identity) in &peers {
                if unreadable.contains(&(Some(name.clone()), gvk.clone())) {
                    continue;
                }
                wanted.insert(
                    (Some(name.clone()), gvk.clone()),
                    (client.clone(), identity.clone()),
                );
            }
        }
        let before = self.sources.len();
        self.sources.retain(|key, source| {
            wanted
                .get(key)
                .is_some_and(|(_, identity)| *identity == source.identity)
        });
        let mut changed = self.sources.len() != before;
        for (key, (client, identity)) in wanted {
            if self.sources.contains_key(&key) {
                continue;
            }
            let kind = self.kinds[&key.1].clone();
            let source = self.start_source(&key, client, identity, kind);
            self.sources.insert(key, source);
            changed = true;
        }
        if changed {
            tracing::debug!(
                sources = self.sources.len(),
                "resource sync watches changed"
            );
        }
        self.rules = rules;
        // Rules or peers changed: every key of every kind may decide differently now.
        let gvks: Vec<GroupVersionKind> = self.rules.keys().cloned().collect();
        for gvk in gvks {
            let _ = self.wake_tx.send(Wake::Kind(gvk));
        }
    }

    /// Peers with a client, whose Cluster exists and is not disabled: (name, client, identity).
    fn peers(&self) -> Vec<(String, Client, String)> {
        let table = self.table.borrow();
        self.clusters
            .state()
            .iter()
            .filter(|c| c.spec.cluster_id != self.local_id)
            .filter(|c| !super::disabled(c))
            .filter_map(|c| {
                let name = c.name_any();
                let peer = table.get(&name)?.client.clone()?;
                Some((name, peer.client, peer.identity))
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

    fn start_source(
        &self,
        key: &SourceKey,
        client: Client,
        identity: String,
        kind: Kind,
    ) -> Source {
        let (cluster, gvk) = key.clone();
        let writer = reflector::store::Writer::<DynamicObject>::new(kind.resource.clone());
        let store = writer.as_reader();
        let listed = Arc::new(AtomicBool::new(false));
        let api = Api::<DynamicObject>::all_with(client, &kind.resource);
        let events = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()).backoff(WatchBackoff::default()),
        );
        let wake = self.wake_tx.clone();
        let done = listed.clone();
        let task = tokio::spawn(async move {
            let where_ = cluster.as_deref().unwrap_or("local").to_string();
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                let woken = match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                        Wake::Key(gvk.clone(), o.namespace(), o.name_any())
                    }
                    Ok(watcher::Event::InitDone) => {
                        done.store(true, Ordering::Release);
                        Wake::Kind(gvk.clone())
                    }
                    Ok(_) => continue,
                    Err(error) => {
                        tracing::debug!(cluster = %where_, kind = %gvk.kind, %error, "watch failed; retrying");
                        continue;
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
            store,
            listed,
            task: task.abort_handle(),
        }
    }

    async fn reconcile(&self, gvk: &GroupVersionKind, namespace: Option<&str>, name: &str) {
        let (Some(kind), Some(rules)) = (self.kinds.get(gvk), self.rules.get(gvk)) else {
            return;
        };
        let Some(local_source) = self.sources.get(&(None, gvk.clone())) else {
            return;
        };
        if !local_source.listed.load(Ordering::Acquire) {
            return;
        }
        let mut key = ObjectRef::<DynamicObject>::new_with(name, kind.resource.clone());
        if let Some(namespace) = namespace {
            key = key.within(namespace);
        }
        // Listed objects carry no apiVersion and kind: the copy needs them.
        let get = |source: &Source| {
            source.store.get(&key).map(|o| {
                let mut value = to_value(&o);
                value["apiVersion"] = Value::String(kind.resource.api_version.clone());
                value["kind"] = Value::String(kind.resource.kind.clone());
                value
            })
        };
        let local = get(local_source);
        let table = self.table.borrow().clone();
        let peer_data: Vec<PeerData> = self
            .sources
            .iter()
            .filter(|((cluster, g), _)| cluster.is_some() && g == gvk)
            .filter_map(|((cluster, _), source)| {
                let name = cluster.as_ref()?;
                let state = table.get(name)?;
                let features = self
                    .sources
                    .get(&(Some(name.clone()), feature_gvk()))
                    .map(|f| f.store.state().iter().map(|o| to_value(o)).collect())
                    .unwrap_or_default();
                Some((
                    name.clone(),
                    state.id.clone(),
                    state.live,
                    source.listed.load(Ordering::Acquire),
                    features,
                    get(source),
                ))
            })
            .collect();
        let peers: Vec<PeerView<'_>> = peer_data
            .iter()
            .map(|(name, id, live, listed, features, object)| PeerView {
                name,
                id,
                live: *live,
                listed: *listed,
                features,
                object: object.as_ref(),
            })
            .collect();
        let action = decide(
            &self.local_id,
            local.as_ref(),
            &peers,
            rules,
            kind.namespaced,
            &self.clusters.state(),
        );
        let api = match namespace {
            Some(ns) => {
                Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, &kind.resource)
            }
            None => Api::<DynamicObject>::all_with(self.client.clone(), &kind.resource),
        };
        let namespace = namespace.unwrap_or_default();
        let result = match action {
            Action::Keep(why) => {
                tracing::trace!(kind = %gvk.kind, %namespace, %name, why, "nothing to write");
                return;
            }
            // Not retried early: the same inputs fail the same way. A change to the object or the
            // rule wakes this key, and the resync looks again.
            Action::Invalid { rule, message } => {
                tracing::warn!(%rule, kind = %gvk.kind, %namespace, %name, %message, "cannot make the copy; nothing written");
                let reference = ResourceSyncRule::new(&rule, Default::default()).object_ref(&());
                let note = format!("cannot copy {} {namespace}/{name}: {message}", gvk.kind);
                self.event(&reference, EventType::Warning, "TemplateFailed", note)
                    .await;
                return;
            }
            Action::Apply { desired, from } => {
                let result = write(&api, name, desired).await;
                if result.is_ok() {
                    tracing::info!(kind = %gvk.kind, %namespace, %name, from = %from, "copied from peer");
                }
                result
            }
            Action::Delete => {
                let local = local.expect("a delete has a local object");
                let preconditions = Preconditions {
                    uid: local["metadata"]["uid"].as_str().map(String::from),
                    resource_version: local["metadata"]["resourceVersion"]
                        .as_str()
                        .map(String::from),
                };
                let params = DeleteParams {
                    preconditions: Some(preconditions),
                    ..Default::default()
                };
                match api.delete(name, &params).await {
                    Ok(_) => {
                        tracing::info!(kind = %gvk.kind, %namespace, %name, "source deleted; copy deleted");
                        Ok(())
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
                    Err(e) => Err(e),
                }
            }
        };
        if let Err(error) = result {
            tracing::warn!(kind = %gvk.kind, %namespace, %name, %error, "cannot write the copy; retrying");
            if let Some(rule) = self.rule_object(gvk) {
                let note = format!("cannot write {} {namespace}/{name}: {error}", gvk.kind);
                self.event(&rule, EventType::Warning, "WriteFailed", note)
                    .await;
            }
            let wake = self.wake_tx.clone();
            let retry = Wake::Key(
                gvk.clone(),
                (!namespace.is_empty()).then(|| namespace.to_string()),
                name.to_string(),
            );
            tokio::spawn(async move {
                tokio::time::sleep(RETRY).await;
                let _ = wake.send(retry);
            });
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
            .find(|r| !core::is_core(r))?
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
    async fn report(&mut self, rule: &ResourceSyncRule, ok: bool, reason: &str, message: String) {
        let name = rule.name_any();
        let said = (reason.to_string(), message.clone());
        let old = rule.status.as_ref();
        let mut status = old.cloned().unwrap_or_default();
        let generation = rule.metadata.generation;
        status.observed_generation = generation;
        let truth = if ok {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        set_condition(
            &mut status.conditions,
            "Ready",
            truth,
            reason,
            message.clone(),
            generation,
        );
        if Some(&status) != old {
            let patch = json!({
                "apiVersion": ResourceSyncRule::api_version(&()),
                "kind": "ResourceSyncRule",
                "status": status,
            });
            if let Err(error) = Api::<ResourceSyncRule>::all(self.client.clone())
                .patch_status(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(patch),
                )
                .await
            {
                tracing::debug!(rule = %name, %error, "could not write the status");
            }
        }
        if self.reported.get(&name) == Some(&said) {
            return;
        }
        self.reported.insert(name.clone(), said);
        if ok {
            tracing::info!(rule = %name, "ResourceSyncRule active");
        } else {
            tracing::warn!(rule = %name, reason, %message, "ResourceSyncRule cannot work");
            self.event(&rule.object_ref(&()), EventType::Warning, reason, message)
                .await;
        }
    }
}

/// Server-side applies `desired` (its `status` separately); when fields another manager set
/// survive the apply (someone added a key to a copy), the copy is replaced as a whole.
async fn write(
    api: &Api<DynamicObject>,
    name: &str,
    mut desired: Value,
) -> Result<(), kube::Error> {
    let status = desired.as_object_mut().and_then(|o| o.remove("status"));
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let applied = api.patch(name, &params, &Patch::Apply(&desired)).await?;
    let current = to_value(&applied);
    if !up_to_date(&current, &desired) {
        let mut replacement = desired.clone();
        replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        let replacement: DynamicObject =
            serde_json::from_value(replacement).map_err(kube::Error::SerdeError)?;
        api.replace(name, &PostParams::default(), &replacement)
            .await?;
    }
    if let Some(status) = status
        && current.get("status") != Some(&status)
    {
        let patch = json!({
            "apiVersion": desired["apiVersion"],
            "kind": desired["kind"],
            "status": status,
        });
        api.patch_status(name, &params, &Patch::Apply(patch))
            .await?;
    }
    Ok(())
}

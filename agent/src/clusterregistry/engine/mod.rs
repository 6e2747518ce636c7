//! The resource sync engine: compiles the ResourceSyncRules, resolves their kinds with discovery,
//! keeps one watch-fed store per (cluster, kind) — the local cluster and every peer with a
//! client — shared by all rules of that kind, and reconciles one object key at a time with
//! [`decide`](super::decide::decide), writing only to the local cluster. Copies that rules move
//! to another key are indexed by the source they name ([`Links`](super::links::Links)), so that
//! the source's key finds them again.
//!
//! ```text
//!  rules, peers ─► refresh: admit each rule ─► plan::wanted ─► plan::diff ─► watches
//!  watches ─► queue (Wake: key, kind, topology) ─► reconcile(key): observe ─► decide ─► write
//! ```
//!
//! - [`queue`]: the wakes, as a set, and the keys a batch of them stands for;
//! - [`plan`]: which watches the rules and peers need, and how that differs from those held;
//! - [`watches`]: the watches held and the tasks that turn their changes into wakes;
//! - `refresh`: the rules admitted (compiled, kinds served, permissions), the watches changed;
//! - `reconcile`: one key, observed, decided and written;
//! - `report`: a rule's status and the Events.

mod plan;
mod queue;
mod reconcile;
mod refresh;
mod report;
mod watches;

use std::{
    collections::{BTreeSet, HashMap},
    sync::Mutex,
    time::{Duration, Instant},
};

use futures::StreamExt;
use kube::{
    Client, Resource, ResourceExt,
    api::{ApiResource, DynamicObject},
    core::GroupVersionKind as KubeGvk,
    runtime::{events::Recorder, reflector::Store},
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{
    PeerTable,
    access::Access,
    api::{Cluster, GroupVersionKind, ResourceSyncRule},
    churn,
    decide::Key,
    rules::RuleSet,
};
use crate::{
    sources::{Detail, SourceId, Sources, View},
    sync_metrics::SyncMetrics,
};
pub(super) use plan::is_secret;
use queue::{Wake, WakeQueue};
use watches::{Kind, Watches};

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

/// How the engine reaches the local cluster and says what it does.
struct Io {
    client: Client,
    recorder: Recorder,
    /// The process's watches, shared with the other reconcilers.
    registry: Sources,
    metrics: SyncMetrics,
}

/// The group as the Cluster reconciler sees it.
struct Group {
    local_id: String,
    clusters: Store<Cluster>,
    table: tokio::sync::watch::Receiver<PeerTable>,
    /// Whether the built-in rules that form the group run ([`super::builtin`]).
    group_sync: bool,
    /// When this engine started ([`SETTLE`]).
    started: Instant,
}

/// The rules admitted at the last refresh, and the kinds discovery resolved.
#[derive(Default)]
struct Catalog {
    kinds: HashMap<GroupVersionKind, Kind>,
    rules: HashMap<GroupVersionKind, Vec<RuleSet>>,
    /// Per rule kind, the kinds its copies are written as.
    targets: HashMap<GroupVersionKind, BTreeSet<GroupVersionKind>>,
}

/// What the engine remembers so as not to ask, say or write too often.
#[derive(Default)]
struct Memory {
    /// What the agent may do here and read on each peer (SelfSubjectAccessReviews).
    access: Access,
    /// What each rule last reported (reason, message), so that it is said once.
    reported: HashMap<String, (String, String)>,
    /// Writes per object in the last minute ([`churn`]).
    churn: Mutex<churn::ChurnGuard>,
}

pub struct Engine {
    io: Io,
    group: Group,
    catalog: Catalog,
    watches: Watches,
    queue: WakeQueue,
    memory: Memory,
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

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
        Engine {
            io: Io {
                client: core.client.clone(),
                recorder,
                registry: core.sources.clone(),
                metrics: core.metrics.clone(),
            },
            group: Group {
                local_id,
                clusters,
                table,
                group_sync,
                started: Instant::now(),
            },
            catalog: Catalog::default(),
            watches: Watches::default(),
            queue: WakeQueue::default(),
            memory: Memory::default(),
        }
    }

    pub async fn run(mut self, stop: CancellationToken) {
        // The rules come from the same shared source as the built-in rule that copies them.
        let rule_view = self.io.registry.view(
            SourceId::local(KubeGvk::gvk(
                &ResourceSyncRule::group(&()),
                &ResourceSyncRule::version(&()),
                &ResourceSyncRule::kind(&()),
            )),
            self.io.client.clone(),
            &ApiResource::erase::<ResourceSyncRule>(&()),
            Detail::Full,
        );
        let mut rule_events = std::pin::pin!(rule_view.changes());
        let mut resync = tokio::time::interval(RESYNC);
        // The keys held back while the peers settle are looked at again when the wait ends.
        let _settling = AbortOnDrop(self.queue.wake_after(Wake::Topology, SETTLE));
        let mut table = self.group.table.clone();
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                change = rule_events.next() => match change {
                    Some(_) => self.queue.push(Wake::Topology),
                    None => break,
                },
                changed = table.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    self.queue.push(Wake::Topology);
                }
                _ = resync.tick() => {
                    self.queue.push(Wake::Topology);
                    for gvk in self.catalog.kinds.keys() {
                        self.queue.push(Wake::Kind(gvk.clone()));
                    }
                }
                () = self.queue.arrival() => {}
            }
            let batch = self.queue.take();
            if batch.topology {
                self.refresh(&rules_of(&rule_view)).await;
            }
            let keys = queue::keys_to_look_at(batch.wakes, &self.catalog.targets, |gvk| {
                self.watches.keys(gvk)
            });
            self.reconcile_all(keys).await;
        }
    }

    /// Reconciles `keys`: they are independent, so their writes go out together, a few dozen at
    /// a time.
    async fn reconcile_all(&self, keys: BTreeSet<Key>) {
        self.io.metrics.queue_depth(RECONCILER, keys.len());
        futures::stream::iter(keys)
            .for_each_concurrent(CONCURRENT_WRITES, |key| async move {
                let started = Instant::now();
                let ok = self.reconcile(&key).await;
                self.io
                    .metrics
                    .reconciled(RECONCILER, ok, started.elapsed());
            })
            .await;
        self.io.metrics.queue_depth(RECONCILER, 0);
    }

    async fn resolve(&mut self, gvk: &GroupVersionKind) -> Result<(), kube::Error> {
        if self.catalog.kinds.contains_key(gvk) {
            return Ok(());
        }
        let (resource, capabilities) = kube::discovery::pinned_kind(
            &self.io.client,
            &KubeGvk::gvk(&gvk.group, &gvk.version, &gvk.kind),
        )
        .await?;
        let namespaced = capabilities.scope == kube::discovery::Scope::Namespaced;
        self.catalog.kinds.insert(
            gvk.clone(),
            Kind {
                resource,
                namespaced,
            },
        );
        Ok(())
    }

    /// The local object under `key` ([`Watches::local_object`]).
    fn local_object(&self, key: &Key) -> Option<Value> {
        self.watches.local_object(&self.catalog.kinds, key)
    }
}

/// The rules in the shared source's store (objects that do not parse as rules are logged and
/// left out: the API server validated them against the CRD, so this means a newer schema).
pub(super) fn rules_of(view: &View) -> Vec<ResourceSyncRule> {
    view.store()
        .state()
        .iter()
        .filter_map(|o| {
            let mut value = to_value(o);
            value["apiVersion"] = Value::String(ResourceSyncRule::api_version(&()).into_owned());
            value["kind"] = Value::String(ResourceSyncRule::kind(&()).into_owned());
            serde_json::from_value(value)
                .inspect_err(|error| {
                    tracing::warn!(rule = %o.name_any(), error = %xcc_kube::bounded(&error), "cannot read this ResourceSyncRule");
                })
                .ok()
        })
        .collect()
}

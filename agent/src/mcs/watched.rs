//! What the MCS reconciler reads between passes: each watched kind as a typed cache (an object is
//! read from its JSON once per resourceVersion, not once per pass), and the services a change
//! concerns, so that a pass looks only at those.
//!
//! Every change of a watched kind marks what it concerns in [`Pending`]: the exported service's
//! key (`namespace/name`) when the object names one (an export, a Service or its derived or
//! gateway Service, a slice, a publication, an import), everything when it may concern any (a
//! relist, a Namespace, a Cluster, a peer's ClusterProperty), the gateway exports for a Node.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use kube::{ResourceExt as _, api::DynamicObject};
use tokio::sync::Notify;

use crate::sources::{Change, View};

/// `namespace/name` of an exported service.
pub type Key = (String, String);

/// What the next pass must look at.
#[derive(Debug, Default)]
pub struct Dirty {
    /// Every service.
    pub all: bool,
    /// The exports that use the gateway data plane (the nodes changed).
    pub nodes: bool,
    /// These services.
    pub keys: BTreeSet<Key>,
}

impl Dirty {
    /// Whether nothing is to be looked at.
    pub fn is_empty(&self) -> bool {
        !self.all && !self.nodes && self.keys.is_empty()
    }
}

/// The changes not yet handled by a pass, and the wake-up of the reconciler's loop.
#[derive(Default)]
pub struct Pending {
    notify: Notify,
    dirty: Mutex<Dirty>,
    rediscover: AtomicBool,
}

impl Pending {
    fn update(&self, f: impl FnOnce(&mut Dirty)) {
        f(&mut self.dirty.lock().unwrap_or_else(PoisonError::into_inner));
        self.notify.notify_one();
    }

    /// Service `key` is to be looked at.
    pub fn key(&self, key: Key) {
        self.update(|d| {
            d.keys.insert(key);
        });
    }

    /// Every service is to be looked at.
    pub fn all(&self) {
        self.update(|d| d.all = true);
    }

    /// The peers are to be looked up again (and then everything, if they changed).
    pub fn rediscover(&self) {
        self.rediscover.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// The peers are to be looked up again at the next change or tick, not at once (the
    /// reconciler's own loop, when it cannot look them up now: waking itself would spin).
    pub fn rediscover_later(&self) {
        self.rediscover.store(true, Ordering::Release);
    }

    /// Whether the peers are to be looked up again; clears it.
    pub fn take_rediscover(&self) -> bool {
        self.rediscover.swap(false, Ordering::AcqRel)
    }

    /// What is to be looked at; clears it.
    pub fn take(&self) -> Dirty {
        std::mem::take(&mut *self.dirty.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Waits for the next change.
    pub async fn notified(&self) {
        self.notify.notified().await;
    }
}

/// What a change of a kind concerns.
#[derive(Clone, Copy)]
pub enum Concerns {
    /// The service this function names (none: nothing).
    Key(fn(&DynamicObject) -> Option<Key>),
    /// Every service.
    All,
    /// Every service, the peers looked up again first.
    Peers,
    /// The exports that use the gateway data plane.
    Nodes,
}

/// Marks in `pending` what each change of `view` concerns, after raising `changed`.
fn forward(
    view: &View,
    pending: Arc<Pending>,
    concerns: Concerns,
    changed: Arc<AtomicBool>,
) -> xcc_sync::task::Owned<()> {
    use futures::StreamExt as _;
    let changes = view.changes();
    xcc_sync::task::spawn_owned(async move {
        let mut changes = std::pin::pin!(changes);
        while let Some(change) = changes.next().await {
            changed.store(true, Ordering::Release);
            let object = match &change {
                Change::Applied(o) | Change::Deleted(o) => Some(o),
                Change::Listed | Change::Missed => None,
            };
            match (concerns, object) {
                (Concerns::Key(key_of), Some(object)) => {
                    if let Some(key) = key_of(object) {
                        pending.key(key);
                    }
                }
                (Concerns::Nodes, Some(_)) => pending.update(|d| d.nodes = true),
                (Concerns::Peers, _) => {
                    pending.rediscover();
                    pending.all();
                }
                _ => pending.all(),
            }
        }
    })
}

/// The key of an object: its own namespace and name.
pub fn own_key(object: &DynamicObject) -> Option<Key> {
    Some((object.namespace().unwrap_or_default(), object.name_any()))
}

/// An object of a kind watched in metadata only, of which only the presence counts.
#[derive(Clone, Copy, Debug, serde::Deserialize)]
pub struct Present {}

/// A watched kind read as `K`, by `namespace/name`.
pub struct Watched<K> {
    view: View,
    changed: Arc<AtomicBool>,
    objects: HashMap<Key, Entry<K>>,
    _forwarder: xcc_sync::task::Owned<()>,
}

struct Entry<K> {
    version: Option<String>,
    /// `None`: the object does not read as `K` (said once per version).
    object: Option<Arc<K>>,
}

impl<K: serde::de::DeserializeOwned> Watched<K> {
    /// `view`, each change marked in `pending` as `concerns` says.
    pub fn new(view: View, pending: &Arc<Pending>, concerns: Concerns) -> Watched<K> {
        let changed = Arc::new(AtomicBool::new(true));
        let forwarder = forward(&view, pending.clone(), concerns, changed.clone());
        Watched {
            view,
            changed,
            objects: HashMap::new(),
            _forwarder: forwarder,
        }
    }

    /// The shared watch.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// Brings the cache up to the store, when the store changed since; returns whether it did.
    pub fn refresh(&mut self) -> bool {
        if !self.changed.swap(false, Ordering::AcqRel) {
            return false;
        }
        let state = self.view.store().state();
        let mut next = HashMap::with_capacity(state.len());
        for object in state {
            let key = (object.namespace().unwrap_or_default(), object.name_any());
            let version = object.resource_version();
            let entry = match self.objects.remove(&key) {
                Some(entry) if entry.version == version && version.is_some() => entry,
                _ => Entry {
                    object: read(&object),
                    version,
                },
            };
            next.insert(key, entry);
        }
        self.objects = next;
        true
    }

    /// The object `key`, as of the last refresh.
    pub fn get(&self, key: &Key) -> Option<&Arc<K>> {
        self.objects.get(key).and_then(|e| e.object.as_ref())
    }

    /// Every object, as of the last refresh.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Arc<K>)> {
        self.objects
            .iter()
            .filter_map(|(k, e)| e.object.as_ref().map(|o| (k, o)))
    }
}

/// `object` read as `K`; an object that does not read is said in a warning and left out.
fn read<K: serde::de::DeserializeOwned>(object: &DynamicObject) -> Option<Arc<K>> {
    match serde_json::to_value(object).and_then(serde_json::from_value) {
        Ok(typed) => Some(Arc::new(typed)),
        Err(error) => {
            let kind = object.types.as_ref().map_or("", |t| t.kind.as_str());
            tracing::warn!(
                %kind,
                namespace = %object.namespace().unwrap_or_default(),
                name = %object.name_any(),
                error = %xcc_kube::bounded(&error),
                "multi-cluster services: object left out, it does not read as its kind"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_takes_what_was_marked_and_leaves_nothing_behind() {
        let pending = Pending::default();
        pending.key(("team-a".into(), "web".into()));
        pending.key(("team-a".into(), "web".into()));
        pending.key(("team-b".into(), "db".into()));
        let dirty = pending.take();
        assert!(!dirty.all);
        assert_eq!(
            dirty.keys.into_iter().collect::<Vec<_>>(),
            [
                ("team-a".to_string(), "web".to_string()),
                ("team-b".to_string(), "db".to_string())
            ]
        );
        assert!(pending.take().is_empty());
        pending.all();
        assert!(pending.take().all);
    }
}

//! The engine's watches: per (cluster, kind) a view of the process's shared watch, the task that
//! turns its changes into wakes, and the index of local copies by the source they name.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};

use futures::{Stream, StreamExt};
use kube::{
    Client, ResourceExt,
    api::{ApiResource, DynamicObject},
    core::GroupVersionKind as KubeGvk,
    runtime::reflector::{ObjectRef, Store},
};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::{
    key_of,
    plan::{Diff, Place, feature_gvk},
    queue::Wake,
    to_value,
};
use crate::{
    clusterregistry::{SOURCE_ANNOTATION, api::GroupVersionKind, decide::Key, links::Links},
    sources::{Change, Detail, LOCAL, SourceId, Sources, View},
};

/// A kind as discovery resolved it.
#[derive(Clone)]
pub struct Kind {
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// A view of one kind in one cluster (the process's shared watch of it), and the task that turns
/// its changes into wakes of this engine.
pub struct Source {
    pub identity: String,
    pub view: View,
    task: tokio::task::AbortHandle,
}

impl Drop for Source {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The sources the engine reads, and the local copies indexed by the source they name.
#[derive(Default)]
pub struct Watches {
    pub sources: HashMap<Place, Source>,
    pub links: Arc<Links>,
}

impl Watches {
    /// Every key of `gvk` held by any cluster, or named as a source by a local copy.
    pub fn keys(&self, gvk: &GroupVersionKind) -> BTreeSet<Key> {
        let mut keys: BTreeSet<Key> = self
            .sources
            .iter()
            .filter(|(place, _)| place.gvk == *gvk)
            .flat_map(|(_, source)| source.view.store().state())
            .map(|o| key_of(gvk, &o))
            .collect();
        keys.extend(
            self.links
                .copies
                .iter()
                .map(|entry| entry.key().clone())
                .filter(|k| k.gvk == *gvk),
        );
        keys
    }

    /// The local copies that name `key` as their source.
    pub fn copies_of(&self, key: &Key) -> Vec<Key> {
        self.links
            .copies
            .get(key)
            .map(|copies| copies.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The local object under `key`, with its `apiVersion` and `kind` (listed objects carry
    /// neither); `None` when there is none or its kind is not watched here.
    pub fn local_object(
        &self,
        kinds: &HashMap<GroupVersionKind, Kind>,
        key: &Key,
    ) -> Option<Value> {
        let source = self.sources.get(&Place::local(&key.gvk))?;
        object(kinds, source, key)
    }

    /// Carries out `diff`: stops the watches it names, and starts the others with the client
    /// `client_of` gives for their place. True when anything changed.
    pub fn change(
        &mut self,
        diff: Diff,
        kinds: &HashMap<GroupVersionKind, Kind>,
        client_of: impl Fn(&Place) -> Option<Client>,
        start: &Starter<'_>,
    ) -> bool {
        let changed = !diff.is_empty();
        for place in diff.stop {
            self.sources.remove(&place);
        }
        for (place, identity) in diff.start {
            let (Some(client), Some(kind)) = (client_of(&place), kinds.get(&place.gvk)) else {
                continue;
            };
            let source = start.source(&place, client, identity, kind, &self.links);
            self.sources.insert(place, source);
        }
        changed
    }
}

/// The object under `key` in `source`, with its `apiVersion` and `kind`.
pub fn object(
    kinds: &HashMap<GroupVersionKind, Kind>,
    source: &Source,
    key: &Key,
) -> Option<Value> {
    let kind = kinds.get(&key.gvk)?;
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

/// What starting a source needs: the process's watches and where to send wakes.
pub struct Starter<'a> {
    pub registry: &'a Sources,
    pub wake: UnboundedSender<Wake>,
}

impl Starter<'_> {
    /// A view of `place`'s kind read by `client` as `identity` (with the watch's field selector,
    /// if any), and its task ([`forward`]).
    fn source(
        &self,
        place: &Place,
        client: Client,
        identity: String,
        kind: &Kind,
        links: &Arc<Links>,
    ) -> Source {
        let Place {
            cluster,
            gvk,
            namespace,
        } = place.clone();
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
            namespace,
        };
        let view = self.registry.view(id, client, &kind.resource, Detail::Full);
        // Local objects are indexed by the source they name.
        let links = cluster.is_none().then(|| links.clone());
        let task = tokio::spawn(forward(
            view.changes(),
            view.store().clone(),
            gvk,
            links,
            self.wake.clone(),
        ));
        Source {
            identity,
            view,
            task: task.abort_handle(),
        }
    }
}

/// Turns the changes of a source of `gvk` into wakes: each change wakes its key; a list wakes the
/// kind; a ClusterFeature change wakes the topology. With `links` (a local source), what each
/// object names as its source is recorded, and the sources concerned are woken.
async fn forward(
    changes: impl Stream<Item = Change>,
    store: Store<DynamicObject>,
    gvk: GroupVersionKind,
    links: Option<Arc<Links>>,
    wake: UnboundedSender<Wake>,
) {
    let mut changes = std::pin::pin!(changes);
    let source_of = |o: &DynamicObject| {
        o.annotations()
            .get(SOURCE_ANNOTATION)
            .and_then(|a| Key::parse(a))
    };
    // Records what a local object names as its source, and wakes the sources concerned.
    let relink = |key: &Key, source: Option<Key>| {
        if let Some(links) = &links {
            let sources = links.update(key, source);
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
                    let listed = store
                        .state()
                        .into_iter()
                        .filter_map(|o| Some((key_of(&gvk, &o), source_of(&o)?)));
                    links.relist(&gvk, listed);
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
}

//! A reconciler's handle on a shared watch ([`View`]), and the same as a typed store for
//! kube-runtime `Controller`s.

use std::sync::{Arc, atomic::Ordering};

use futures::{Stream, StreamExt};
use kube::{
    ResourceExt,
    api::DynamicObject,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};

use super::{
    Change, Detail, broadcast_stream,
    typed::{TYPED_BUFFER, TypedKind},
    watch::Shared,
};

/// A reconciler's handle on a source. Dropping the last view of a source stops its watch.
pub struct View {
    pub(super) shared: Arc<Shared>,
    pub(super) detail: Detail,
}

impl Drop for View {
    fn drop(&mut self) {
        if self.detail == Detail::Full {
            self.shared
                .full_views
                .send_modify(|n| *n = n.saturating_sub(1));
        }
    }
}

impl View {
    /// The objects as last listed and watched (metadata only unless this view, or another one
    /// of the same source, asked for whole objects).
    pub fn store(&self) -> &Store<DynamicObject> {
        &self.shared.state.store
    }

    /// Whether the store holds a complete list in the detail this view asked for.
    pub fn listed(&self) -> bool {
        self.shared.state.listed.load(Ordering::Acquire) >= self.detail as u8
    }

    /// What the watch knows of its cluster now: listing, synced, or failing since when and why
    /// (a reconciler's stale policy for a peer that stops answering reads it).
    pub fn health(&self) -> super::Health {
        self.shared
            .state
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Every change from now on, in order; it starts with `Listed` when the store already holds
    /// a list this view can use, and says `Missed` when the subscriber fell behind.
    pub fn changes(&self) -> impl Stream<Item = Change> + Send + use<> {
        let receiver = self.shared.state.changes.subscribe();
        let first = self.listed().then_some(Change::Listed);
        futures::stream::iter(first).chain(broadcast_stream(receiver, &self.shared.state.id))
    }
}

impl View {
    /// This view as a typed kind for kube-runtime `Controller`s (`for_shared_stream`): a typed
    /// store and a subscriber, fed from this view's changes instead of a second watch. The
    /// returned future runs the feed (and keeps the view) until dropped. An object that does not
    /// read as `K` is logged and left out, as a typed watch would.
    pub fn typed<K>(
        self,
    ) -> (
        Store<K>,
        reflector::ReflectHandle<K>,
        impl Future<Output = ()> + Send + use<K>,
    )
    where
        K: TypedKind,
    {
        let (reader, writer) = reflector::store_shared(TYPED_BUFFER);
        let handle = writer
            .subscribe()
            .expect("a store made by store_shared hands out subscribers");
        let store = self.store().clone();
        let kind = self.shared.state.id.gvk.kind.clone();
        let read = move |object: &DynamicObject| -> Option<K> {
            match serde_json::to_value(object).and_then(serde_json::from_value) {
                Ok(typed) => Some(typed),
                Err(error) => {
                    tracing::warn!(%kind, name = %object.name_any(), error = %xcc_kube::bounded(&error), "object left out: it does not read as its kind");
                    None
                }
            }
        };
        let events = self
            .changes()
            .flat_map(move |change| {
                let events: Vec<watcher::Event<K>> = match change {
                    Change::Applied(object) => read(&object)
                        .map(watcher::Event::Apply)
                        .into_iter()
                        .collect(),
                    Change::Deleted(object) => read(&object)
                        .map(watcher::Event::Delete)
                        .into_iter()
                        .collect(),
                    // The whole store again, as a relist.
                    Change::Listed | Change::Missed => std::iter::once(watcher::Event::Init)
                        .chain(
                            store
                                .state()
                                .iter()
                                .filter_map(|object| read(object))
                                .map(watcher::Event::InitApply),
                        )
                        .chain(std::iter::once(watcher::Event::InitDone))
                        .collect(),
                };
                futures::stream::iter(events.into_iter().map(Ok::<_, watcher::Error>))
            })
            .reflect_shared(writer);
        let feed = async move {
            let _view = self;
            events.for_each(|_| std::future::ready(())).await;
        };
        (reader, handle, feed)
    }
}

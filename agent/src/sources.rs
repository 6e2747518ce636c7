//! Watch sources shared by every reconciler of the process: one watch per (cluster, kind), with
//! a metadata-only variant. A reconciler asks [`Sources`] for a [`View`] of a kind in a cluster
//! instead of opening its own watch; views of the same kind in the same cluster share one watch
//! and one store.
//!
//! ```text
//!   API server ──one watch──► store (read by every view)
//!                             └─► broadcast: Applied / Deleted / Listed ──► each view's changes()
//! ```
//!
//! - **Detail**: a source watches metadata only (`PartialObjectMeta`: no Secret data crosses the
//!   wire) while every view asks for that; the first view that needs whole objects upgrades it to
//!   a full watch (one relist), and it goes back to metadata when the last such view is dropped.
//!   A view counts as listed only once a list in the detail it asked for is in the store.
//! - **Order**: the store is updated before a change is announced. A subscriber that falls behind
//!   gets [`Change::Missed`] and must look at the whole store again.
//! - **Health**: each source says whether it is synced, still listing, or reconnecting since when
//!   and why ([`Health`]); the agent exports that per cluster and kind ([`SyncMetrics`]).
//! - **Lifetime**: a source lives while a view of it does; the last view dropped stops its watch.
//! - **Retries**: every watch retries on [`xcc_kube::Backoff`]: the local schedule for the agent's
//!   own cluster, the jittered peer schedule for the others.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, AtomicU8, Ordering},
    },
    time::SystemTime,
};

use futures::{Stream, StreamExt, stream::BoxStream};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject},
    core::{GroupVersionKind, PartialObjectMeta},
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use tokio::sync::{broadcast, watch};
use xcc_kube::PeerClients;

use crate::sync_metrics::SyncMetrics;

/// The cluster name of the agent's own cluster in a [`SourceId`].
pub const LOCAL: &str = "local";

/// Changes a burst may queue per subscriber before it is told to look at everything again.
const CAPACITY: usize = 4096;

/// How much of each object a view needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Detail {
    /// Metadata only (names, labels, annotations, owners, UID, resourceVersion).
    Metadata = 1,
    /// The whole object.
    Full = 2,
}

/// One watch: a kind in a cluster, as seen through one client, optionally filtered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceId {
    /// [`LOCAL`] or the peer's Cluster name (for logs and metrics).
    pub cluster: String,
    /// Who the client is: [`LOCAL`], or the peer client's identity (the Secret it was built
    /// from). Two clients of one cluster are two sources.
    pub identity: String,
    pub gvk: GroupVersionKind,
    /// A field selector (`type=...`), when the source watches only part of the kind.
    pub fields: Option<String>,
}

impl SourceId {
    /// The agent's own cluster, kind `gvk`, unfiltered.
    pub fn local(gvk: GroupVersionKind) -> SourceId {
        SourceId {
            cluster: LOCAL.into(),
            identity: LOCAL.into(),
            gvk,
            fields: None,
        }
    }

    fn is_local(&self) -> bool {
        self.identity == LOCAL
    }
}

/// A change of a source's objects, as subscribers see it.
#[derive(Clone, Debug)]
pub enum Change {
    Applied(Arc<DynamicObject>),
    Deleted(Arc<DynamicObject>),
    /// A full list is now in the store (after a start, a broken watch or a change of detail).
    Listed,
    /// This subscriber fell behind and missed changes: it must look at everything again.
    Missed,
}

/// What a source knows of its cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// The first list has not arrived yet.
    Listing { since: SystemTime },
    /// Listed and watching.
    Synced { since: SystemTime },
    /// The watch failed; it retries with backoff. `error` is bounded.
    Reconnecting { since: SystemTime, error: String },
}

impl Health {
    /// The metric value: 0 listing, 1 synced, 2 reconnecting.
    pub fn code(&self) -> i64 {
        match self {
            Health::Listing { .. } => 0,
            Health::Synced { .. } => 1,
            Health::Reconnecting { .. } => 2,
        }
    }
}

/// State shared by a source's task and its views.
struct State {
    id: SourceId,
    store: Store<DynamicObject>,
    /// The detail of the list in the store (0: none yet).
    listed: AtomicU8,
    changes: broadcast::Sender<Change>,
    health: Mutex<Health>,
}

impl State {
    fn set_health(&self, health: Health, metrics: Option<&SyncMetrics>) {
        if let Some(metrics) = metrics {
            metrics.watch_state(&self.id.cluster, &self.id.gvk.kind, health.code());
        }
        *self.health.lock().unwrap_or_else(|e| e.into_inner()) = health;
    }
}

/// One running watch, kept alive by its views.
struct Shared {
    state: Arc<State>,
    /// How many views need whole objects.
    full_views: watch::Sender<usize>,
    task: tokio::task::AbortHandle,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The process's sources, one per [`SourceId`].
#[derive(Clone, Default)]
pub struct Sources {
    running: Arc<Mutex<HashMap<SourceId, Weak<Shared>>>>,
    metrics: Option<SyncMetrics>,
}

impl Sources {
    pub fn new(metrics: Option<SyncMetrics>) -> Sources {
        Sources {
            running: Arc::default(),
            metrics,
        }
    }

    /// A view of `resource` as `id` names it, through `client`, starting the watch if no view of
    /// it exists yet (or upgrading it to whole objects if `detail` asks for them).
    pub fn view(
        &self,
        id: SourceId,
        client: Client,
        resource: &ApiResource,
        detail: Detail,
    ) -> View {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.retain(|_, shared| shared.strong_count() > 0);
        let shared = match running.get(&id).and_then(Weak::upgrade) {
            Some(shared) => shared,
            None => {
                let shared = Arc::new(self.start(id.clone(), client, resource, detail));
                running.insert(id, Arc::downgrade(&shared));
                shared
            }
        };
        if detail == Detail::Full {
            shared.full_views.send_modify(|n| *n += 1);
        }
        View { shared, detail }
    }

    /// Every source running now, with its health.
    #[cfg(test)]
    fn health(&self) -> Vec<(SourceId, Health)> {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running
            .values()
            .filter_map(Weak::upgrade)
            .map(|s| {
                let health = s.state.health.lock().unwrap_or_else(|e| e.into_inner());
                (s.state.id.clone(), health.clone())
            })
            .collect()
    }

    fn start(
        &self,
        id: SourceId,
        client: Client,
        resource: &ApiResource,
        detail: Detail,
    ) -> Shared {
        let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
        let (changes, _) = broadcast::channel(CAPACITY);
        let state = Arc::new(State {
            id: id.clone(),
            store: writer.as_reader(),
            listed: AtomicU8::new(0),
            changes,
            health: Mutex::new(Health::Listing {
                since: SystemTime::now(),
            }),
        });
        let (full_views, wanted) = watch::channel(usize::from(detail == Detail::Full));
        let apis = Apis {
            full: Api::all_with(client.clone(), resource),
            metadata: Api::all_with(client, resource),
        };
        let task = tokio::spawn(run_source(
            state.clone(),
            writer,
            apis,
            wanted,
            self.metrics.clone(),
        ));
        tracing::debug!(cluster = %id.cluster, kind = %id.gvk.kind, fields = ?id.fields, "watch started");
        Shared {
            state,
            full_views,
            task: task.abort_handle(),
        }
    }
}

/// Lists and watches one source until aborted, switching between metadata and whole objects as
/// its views ask.
async fn run_source(
    state: Arc<State>,
    mut writer: reflector::store::Writer<DynamicObject>,
    apis: Apis,
    mut wanted: watch::Receiver<usize>,
    metrics: Option<SyncMetrics>,
) {
    let metrics = metrics.as_ref();
    let id = &state.id;
    state.set_health(
        Health::Listing {
            since: SystemTime::now(),
        },
        metrics,
    );
    loop {
        let detail = if *wanted.borrow_and_update() > 0 {
            Detail::Full
        } else {
            Detail::Metadata
        };
        // A list in the new detail replaces what the store holds; until then, views that need
        // more than the store has are not listed.
        state
            .listed
            .fetch_min(Detail::Metadata as u8, Ordering::AcqRel);
        let mut events = events(&apis, id, detail);
        loop {
            let event = tokio::select! {
                changed = wanted.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let now = if *wanted.borrow() > 0 { Detail::Full } else { Detail::Metadata };
                    if now != detail {
                        tracing::debug!(cluster = %id.cluster, kind = %id.gvk.kind, ?now, "watch detail changed; listing again");
                        break;
                    }
                    continue;
                }
                event = events.next() => event,
            };
            let Some(event) = event else { return };
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    let since = match &*state.health.lock().unwrap_or_else(|e| e.into_inner()) {
                        Health::Reconnecting { since, .. } => *since,
                        _ => SystemTime::now(),
                    };
                    let error = xcc_kube::bounded(&error);
                    tracing::debug!(cluster = %id.cluster, kind = %id.gvk.kind, %error, "watch failed; retrying");
                    if let Some(metrics) = metrics {
                        metrics.watch_error(&id.cluster, &id.gvk.kind);
                    }
                    state.set_health(Health::Reconnecting { since, error }, metrics);
                    continue;
                }
            };
            writer.apply_watcher_event(&event);
            let change = match event {
                watcher::Event::Apply(object) => Change::Applied(Arc::new(object)),
                watcher::Event::Delete(object) => Change::Deleted(Arc::new(object)),
                watcher::Event::InitDone => {
                    state.listed.store(detail as u8, Ordering::Release);
                    Change::Listed
                }
                // Emitted before every list attempt, failed ones included: no contact yet.
                watcher::Event::Init | watcher::Event::InitApply(_) => continue,
            };
            if let Some(metrics) = metrics {
                metrics.watch_contact(&id.cluster, &id.gvk.kind);
            }
            let synced = matches!(
                *state.health.lock().unwrap_or_else(|e| e.into_inner()),
                Health::Synced { .. }
            );
            if !synced {
                state.set_health(
                    Health::Synced {
                        since: SystemTime::now(),
                    },
                    metrics,
                );
            }
            // No subscriber is fine: views read the store when they start.
            let _ = state.changes.send(change);
        }
    }
}

/// A source's kind, as whole objects and as metadata.
struct Apis {
    full: Api<DynamicObject>,
    metadata: Api<PartialObjectMeta<DynamicObject>>,
}

/// The watch events of the kind in `detail`, with metadata-only objects as `DynamicObject`s
/// without content.
fn events(
    apis: &Apis,
    id: &SourceId,
    detail: Detail,
) -> BoxStream<'static, Result<watcher::Event<DynamicObject>, watcher::Error>> {
    let mut config = watcher::Config::default();
    if let Some(fields) = &id.fields {
        config = config.fields(fields);
    }
    let backoff = if id.is_local() {
        xcc_kube::Backoff::local()
    } else {
        xcc_kube::Backoff::peer()
    };
    match detail {
        Detail::Full => watcher(apis.full.clone(), config).backoff(backoff).boxed(),
        Detail::Metadata => watcher(apis.metadata.clone(), config)
            .backoff(backoff)
            .map(|event| event.map(|event| map_event(event, without_content)))
            .boxed(),
    }
}

fn without_content(meta: PartialObjectMeta<DynamicObject>) -> DynamicObject {
    DynamicObject {
        types: meta.types,
        metadata: meta.metadata,
        data: serde_json::Value::Object(Default::default()),
    }
}

fn map_event<A, B>(event: watcher::Event<A>, f: impl Fn(A) -> B) -> watcher::Event<B> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(f(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(f(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(f(o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// A reconciler's handle on a source. Dropping the last view of a source stops its watch.
pub struct View {
    shared: Arc<Shared>,
    detail: Detail,
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
                    tracing::warn!(%kind, name = %object.name_any(), %error, "object left out: it does not read as its kind");
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

fn broadcast_stream<T>(
    receiver: broadcast::Receiver<T>,
    id: &SourceId,
) -> impl Stream<Item = T> + Send + use<T>
where
    T: Clone + Send + 'static + From<Lagged>,
{
    let kind = id.gvk.kind.clone();
    futures::stream::unfold(receiver, move |mut receiver| {
        let kind = kind.clone();
        async move {
            let item = match receiver.recv().await {
                Ok(item) => item,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(%kind, missed, "a subscriber fell behind; it looks again");
                    T::from(Lagged)
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            Some((item, receiver))
        }
    })
}

/// A subscriber fell behind its broadcast.
pub struct Lagged;

impl From<Lagged> for Change {
    fn from(_: Lagged) -> Change {
        Change::Missed
    }
}

/// A change of a local Secret, as Secret replication and the Cluster reconciler see it.
#[derive(Clone, Debug)]
pub enum SecretChange {
    Applied(Arc<PartialObjectMeta<Secret>>),
    Deleted(Arc<PartialObjectMeta<Secret>>),
    /// A full list arrived (after a start or a broken watch); reconcilers relist their own
    /// kinds at the same time.
    Listed,
    /// This subscriber fell behind and missed changes: it must look at everything again.
    Missed,
}

impl From<Lagged> for SecretChange {
    fn from(_: Lagged) -> SecretChange {
        SecretChange::Missed
    }
}

impl SecretChange {
    /// `(namespace, name)` of the Secret that changed, if one did.
    pub fn key(&self) -> Option<(String, String)> {
        match self {
            SecretChange::Applied(s) | SecretChange::Deleted(s) => {
                Some((s.namespace().unwrap_or_default(), s.name_any()))
            }
            SecretChange::Listed | SecretChange::Missed => None,
        }
    }
}

pub fn secret_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "Secret")
}

/// The metadata of every local Secret, as a typed store and a feed of changes, on the process's
/// one watch of local Secrets (a metadata view of it; the resource sync engine may make that
/// watch carry whole Secrets, which this view does not need).
#[derive(Clone)]
pub struct LocalSecrets {
    store: Store<PartialObjectMeta<Secret>>,
    listed: Arc<AtomicBool>,
    changes: broadcast::Sender<SecretChange>,
}

impl LocalSecrets {
    /// Subscribes to the local Secret source of `sources`. A deleted Secret's peer client is
    /// dropped from `peers` here, for every reconciler at once.
    pub fn start(
        sources: &Sources,
        client: Client,
        peers: PeerClients,
    ) -> (LocalSecrets, tokio::task::JoinHandle<()>) {
        let view = sources.view(
            SourceId::local(secret_gvk()),
            client,
            &ApiResource::erase::<Secret>(&()),
            Detail::Metadata,
        );
        let mut writer = reflector::store::Writer::<PartialObjectMeta<Secret>>::default();
        let listed = Arc::new(AtomicBool::new(false));
        let (changes, _) = broadcast::channel(CAPACITY);
        let source = LocalSecrets {
            store: writer.as_reader(),
            listed: listed.clone(),
            changes: changes.clone(),
        };
        let task = tokio::spawn(async move {
            let mut feed = std::pin::pin!(view.changes());
            while let Some(change) = feed.next().await {
                let change = match change {
                    Change::Applied(object) => {
                        let secret = typed_meta(&object);
                        writer.apply_watcher_event(&watcher::Event::Apply(secret.clone()));
                        SecretChange::Applied(Arc::new(secret))
                    }
                    Change::Deleted(object) => {
                        let secret = typed_meta(&object);
                        writer.apply_watcher_event(&watcher::Event::Delete(secret.clone()));
                        peers.forget(&secret.namespace().unwrap_or_default(), &secret.name_any());
                        SecretChange::Deleted(Arc::new(secret))
                    }
                    // The typed store is rebuilt from the shared one.
                    Change::Listed | Change::Missed => {
                        writer.apply_watcher_event(&watcher::Event::Init);
                        for object in view.store().state() {
                            writer.apply_watcher_event(&watcher::Event::InitApply(typed_meta(
                                &object,
                            )));
                        }
                        writer.apply_watcher_event(&watcher::Event::InitDone);
                        listed.store(true, Ordering::Release);
                        if matches!(change, Change::Listed) {
                            SecretChange::Listed
                        } else {
                            SecretChange::Missed
                        }
                    }
                };
                // No subscriber yet is fine: they read the store when they start.
                let _ = changes.send(change);
            }
        });
        (source, task)
    }

    /// The Secrets' metadata, as last listed and watched.
    pub fn store(&self) -> Store<PartialObjectMeta<Secret>> {
        self.store.clone()
    }

    /// Set once the store holds the first full list.
    pub fn listed(&self) -> Arc<AtomicBool> {
        self.listed.clone()
    }

    /// Every change from now on, in order; `Missed` when the subscriber fell behind.
    pub fn changes(&self) -> impl Stream<Item = SecretChange> + Send + use<> {
        broadcast_stream(self.changes.subscribe(), &SourceId::local(secret_gvk()))
    }
}

/// The metadata of a Secret from the shared source.
fn typed_meta(object: &DynamicObject) -> PartialObjectMeta<Secret> {
    PartialObjectMeta {
        types: object.types.clone(),
        metadata: object.metadata.clone(),
        ..Default::default()
    }
}

/// A kind kube-runtime Controllers can reconcile from a shared typed store.
pub trait TypedKind:
    kube::Resource<DynamicType: Eq + std::hash::Hash + Clone + Default>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> TypedKind for K where
    K: kube::Resource<DynamicType: Eq + std::hash::Hash + Clone + Default>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// How many changes of a typed kind may wait for its slowest subscriber before the watch waits.
const TYPED_BUFFER: usize = 1024;

/// One watch of a typed kind of the agent's own cluster, shared by the kube-runtime
/// `Controller`s that reconcile it or are woken by it (`for_shared_stream`, `owns_shared_stream`,
/// `watches_shared_stream`): the Secret replication reconcilers and the monitors that generate
/// their objects, for instance, read one watch of SecretImports instead of two.
///
/// Every subscriber must be taken ([`Typed::subscribe`]) before the watch runs ([`Typed::run`]),
/// and must be polled: the watch waits for the slowest one (at most [`TYPED_BUFFER`] behind).
pub struct Typed<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    reader: Store<K>,
    writer: reflector::store::Writer<K>,
}

impl<K: TypedKind> Typed<K> {
    pub fn new() -> Typed<K> {
        let (reader, writer) = reflector::store_shared(TYPED_BUFFER);
        Typed { reader, writer }
    }

    /// The store every subscriber reads.
    pub fn store(&self) -> Store<K> {
        self.reader.clone()
    }

    /// A stream of every object applied from now on, for one Controller.
    pub fn subscribe(&self) -> reflector::ReflectHandle<K> {
        self.writer
            .subscribe()
            .expect("a store made by store_shared hands out subscribers")
    }

    /// Runs the watch until the future is dropped: retries on the local schedule, and reports
    /// its state in the sync metrics under cluster [`LOCAL`].
    pub async fn run(self, api: Api<K>, metrics: SyncMetrics) {
        let kind = K::kind(&K::DynamicType::default()).to_string();
        let events = watcher(api, watcher::Config::default())
            .backoff(xcc_kube::Backoff::local())
            .reflect_shared(self.writer);
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            let since = SystemTime::now();
            let health = match event {
                Ok(
                    watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_),
                ) => {
                    metrics.watch_contact(LOCAL, &kind);
                    Health::Synced { since }
                }
                Ok(_) => continue,
                Err(error) => {
                    let error = xcc_kube::bounded(&error);
                    tracing::debug!(%kind, %error, "watch failed; retrying");
                    metrics.watch_error(LOCAL, &kind);
                    Health::Reconnecting { since, error }
                }
            };
            metrics.watch_state(LOCAL, &kind, health.code());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    /// How long to wait for a view to list.
    const LIST_WAIT: Duration = Duration::from_secs(5);

    fn secret(namespace: &str, name: &str) -> Arc<PartialObjectMeta<Secret>> {
        let mut meta = PartialObjectMeta::<Secret>::default();
        meta.metadata.namespace = Some(namespace.into());
        meta.metadata.name = Some(name.into());
        Arc::new(meta)
    }

    #[tokio::test]
    async fn every_subscriber_sees_every_change_and_a_laggard_is_told_to_relist() {
        let (changes, _) = broadcast::channel(2);
        let source = LocalSecrets {
            store: reflector::store::<PartialObjectMeta<Secret>>().0,
            listed: Arc::default(),
            changes,
        };
        let mut first = std::pin::pin!(source.changes());
        let mut second = std::pin::pin!(source.changes());
        source
            .changes
            .send(SecretChange::Applied(secret("project-1", "energy-source")))
            .unwrap();
        for subscriber in [&mut first, &mut second] {
            let change = subscriber.next().await.unwrap();
            assert_eq!(
                change.key(),
                Some(("project-1".to_string(), "energy-source".to_string()))
            );
        }
        // Three changes into a channel of two: the second subscriber missed one.
        for name in ["a", "b", "c"] {
            source
                .changes
                .send(SecretChange::Deleted(secret("project-1", name)))
                .unwrap();
        }
        assert!(matches!(second.next().await.unwrap(), SecretChange::Missed));
    }

    /// A mocked API server answering lists and watches of Secrets; counts the requests by
    /// whether they ask for metadata only.
    struct Server {
        requests: Arc<Mutex<Vec<String>>>,
    }

    fn secret_json(name: &str, with_data: bool) -> serde_json::Value {
        let mut secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "project-1", "resourceVersion": "1"},
        });
        if with_data {
            secret["data"] = json!({"password": "MQ=="});
        }
        secret
    }

    fn mock() -> (Client, Server) {
        let (service, mut handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = requests.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let uri = request.uri().to_string();
                let metadata = request
                    .headers()
                    .get("accept")
                    .and_then(|a| a.to_str().ok())
                    .is_some_and(|a| a.contains("PartialObjectMetadata"));
                let watch = uri.contains("watch=true");
                seen.lock().unwrap().push(format!(
                    "{} {}",
                    if watch { "watch" } else { "list" },
                    if metadata { "meta" } else { "full" }
                ));
                if watch {
                    // A watch that never answers (dropped with its source).
                    tokio::spawn(async move {
                        let _send = send;
                        std::future::pending::<()>().await;
                    });
                    continue;
                }
                let items = if metadata {
                    vec![
                        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                                "metadata": {"name": "dumbo", "namespace": "project-1", "resourceVersion": "1"}}),
                    ]
                } else {
                    vec![secret_json("dumbo", true)]
                };
                let list = json!({
                    "apiVersion": "v1", "kind": "SecretList",
                    "metadata": {"resourceVersion": "1"},
                    "items": items,
                });
                send.send_response(
                    http::Response::builder()
                        .body(kube::client::Body::from(serde_json::to_vec(&list).unwrap()))
                        .unwrap(),
                );
            }
        });
        (Client::new(service, "default"), Server { requests })
    }

    async fn wait_listed(view: &View) {
        tokio::time::timeout(LIST_WAIT, async {
            while !view.listed() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the view lists");
    }

    #[tokio::test]
    async fn views_of_one_kind_share_one_watch_which_carries_content_only_while_asked() {
        let (client, server) = mock();
        let sources = Sources::default();
        let resource = ApiResource::erase::<Secret>(&());
        let id = SourceId::local(secret_gvk());
        let meta = sources.view(id.clone(), client.clone(), &resource, Detail::Metadata);
        wait_listed(&meta).await;
        let second = sources.view(id.clone(), client.clone(), &resource, Detail::Metadata);
        assert!(
            second.listed(),
            "a second view uses the running watch's list"
        );
        let stored = meta.store().state();
        assert_eq!(stored.len(), 1);
        assert!(stored[0].data.get("data").is_none(), "metadata only");
        assert_eq!(sources.health().len(), 1, "one source for both views");

        // A view that needs whole objects upgrades the one watch; it is not listed before.
        let full = sources.view(id.clone(), client.clone(), &resource, Detail::Full);
        wait_listed(&full).await;
        assert!(meta.listed(), "metadata views stay listed meanwhile");
        assert_eq!(full.store().state()[0].data["data"]["password"], "MQ==");
        assert_eq!(sources.health().len(), 1);
        drop(full);
        tokio::time::timeout(LIST_WAIT, async {
            while server
                .requests
                .lock()
                .unwrap()
                .iter()
                .filter(|r| r.as_str() == "list meta")
                .count()
                < 2
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("back to metadata once no view needs content");
        drop((meta, second));
        assert!(sources.health().is_empty(), "the last view stops the watch");
        let requests = server.requests.lock().unwrap().clone();
        assert_eq!(
            requests
                .iter()
                .filter(|r| r.starts_with("list full"))
                .count(),
            1,
            "{requests:?}"
        );
    }

    #[tokio::test]
    async fn a_typed_view_feeds_a_controller_store_from_the_shared_watch() {
        let (client, server) = mock();
        let sources = Sources::default();
        let resource = ApiResource::erase::<Secret>(&());
        let id = SourceId::local(secret_gvk());
        let other = sources.view(id.clone(), client.clone(), &resource, Detail::Full);
        let view = sources.view(id, client, &resource, Detail::Full);
        let (store, mut handle, feed) = view.typed::<Secret>();
        let feed = tokio::spawn(feed);
        tokio::time::timeout(LIST_WAIT, store.wait_until_ready())
            .await
            .expect("the typed store is filled from the list")
            .unwrap();
        let typed = store.state();
        assert_eq!(typed.len(), 1);
        assert_eq!(
            typed[0].data.as_ref().unwrap()["password"].0,
            b"1".to_vec(),
            "whole typed objects"
        );
        let announced = tokio::time::timeout(LIST_WAIT, handle.next())
            .await
            .expect("the subscriber hears of it")
            .unwrap();
        assert_eq!(announced.metadata.name.as_deref(), Some("dumbo"));
        assert_eq!(sources.health().len(), 1, "no second watch");
        let requests = server.requests.lock().unwrap().clone();
        assert_eq!(
            requests.iter().filter(|r| r.starts_with("list")).count(),
            1,
            "{requests:?}"
        );
        feed.abort();
        drop(other);
    }
}

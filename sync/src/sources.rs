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
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, AtomicU8, Ordering},
    },
    time::SystemTime,
};

use dashmap::DashMap;
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

use crate::metrics::SyncMetrics;

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
    /// The `state` label of a watch that is listing or synced; a failed one's is its error's.
    fn state(&self) -> &'static str {
        match self {
            Health::Listing { .. } => "listing",
            Health::Synced { .. } => "synced",
            Health::Reconnecting { .. } => "failing",
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
    /// Every reconciler asks for views at once: a concurrent map (a source is started under its
    /// entry's guard, which is synchronous, so two views of one id share one watch).
    running: Arc<DashMap<SourceId, Weak<Shared>>>,
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
        self.running.retain(|_, shared| shared.strong_count() > 0);
        let mut running = self.running.entry(id.clone()).or_default();
        let shared = match running.upgrade() {
            Some(shared) => shared,
            None => {
                let shared = Arc::new(self.start(id, client, resource, detail));
                *running = Arc::downgrade(&shared);
                shared
            }
        };
        drop(running);
        if detail == Detail::Full {
            shared.full_views.send_modify(|n| *n += 1);
        }
        View { shared, detail }
    }

    /// Every source running now, with its health.
    #[cfg(test)]
    fn health(&self) -> Vec<(SourceId, Health)> {
        self.running
            .iter()
            .filter_map(|running| running.upgrade())
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
    let id = &state.id;
    let mut tracker = Tracker::new(
        &id.cluster,
        &id.gvk.kind,
        id.is_local(),
        metrics.as_ref(),
        &state.health,
    );
    tracker.listing();
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
                    tracker.failed(&error);
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
            tracker.answered();
            // No subscriber is fine: views read the store when they start.
            let _ = state.changes.send(change);
        }
    }
}

/// How long a watch may fail before it says so at WARN: a single failure (an API server
/// restarting, a new CRD's storage still initializing, a watch expired) heals within a retry or
/// two and is logged at DEBUG only.
const WARN_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// The health of one watch, kept in its metric, its [`Health`] and its log lines.
///
/// - Every failure counts in `xcc_sync_watch_errors` and makes the watch reconnecting (state 2)
///   since the outage began; it is synced (state 1) again once the server answers with a list
///   or an event. With [`relisting`] under the watch, every failure is followed by a list, so
///   a watch that recovers always says so, also when its kind has no objects.
/// - The log says why a watch cannot list or watch at WARN once per outage, when it has lasted
///   [`WARN_AFTER`], and once at INFO when it listed again; every other failure is at DEBUG.
///   An outage ends when the watch has listed and then gone the backoff's quiet period without
///   a failure (so a kind that lists but may not be watched warns once, not at every list).
struct Tracker<'a> {
    cluster: &'a str,
    kind: &'a str,
    metrics: Option<&'a SyncMetrics>,
    health: &'a Mutex<Health>,
    /// How long after a list without a failure an outage is over.
    quiet: std::time::Duration,
    outage: Option<Outage>,
}

struct Outage {
    since: tokio::time::Instant,
    began: SystemTime,
    /// When the watch last listed or heard of a change since the last failure.
    answered: Option<tokio::time::Instant>,
    warned: bool,
    told_listed: bool,
}

impl<'a> Tracker<'a> {
    fn new(
        cluster: &'a str,
        kind: &'a str,
        local: bool,
        metrics: Option<&'a SyncMetrics>,
        health: &'a Mutex<Health>,
    ) -> Tracker<'a> {
        let quiet = if local {
            xcc_kube::Backoff::local().quiet()
        } else {
            xcc_kube::Backoff::peer().quiet()
        };
        Tracker {
            cluster,
            kind,
            metrics,
            health,
            quiet,
            outage: None,
        }
    }

    fn set(&self, health: Health) {
        self.set_as(health.state(), health);
    }

    fn set_as(&self, state: &'static str, health: Health) {
        if let Some(metrics) = self.metrics {
            metrics.watch_state(self.cluster, self.kind, state);
        }
        *self.health.lock().unwrap_or_else(|e| e.into_inner()) = health;
    }

    /// The first list has not arrived yet.
    fn listing(&self) {
        self.set(Health::Listing {
            since: SystemTime::now(),
        });
    }

    /// A list or watch request failed; the watch retries on its backoff.
    fn failed(&mut self, error: &watcher::Error) {
        let now = tokio::time::Instant::now();
        if self
            .outage
            .as_ref()
            .and_then(|o| o.answered)
            .is_some_and(|at| now.duration_since(at) >= self.quiet)
        {
            self.outage = None;
        }
        let outage = self.outage.get_or_insert_with(|| Outage {
            since: now,
            began: SystemTime::now(),
            answered: None,
            warned: false,
            told_listed: false,
        });
        outage.answered = None;
        let state = crate::metrics::failed_watch_state(error);
        let error = xcc_kube::bounded(error);
        let failing = now.duration_since(outage.since);
        let (cluster, kind) = (self.cluster, self.kind);
        if !outage.warned && failing >= WARN_AFTER {
            outage.warned = true;
            tracing::warn!(%cluster, %kind, %error, failing_for = ?failing, "watch cannot list or watch; retrying");
        } else {
            tracing::debug!(%cluster, %kind, %error, "watch failed; retrying");
        }
        if let Some(metrics) = self.metrics {
            metrics.watch_error(cluster, kind);
        }
        let since = outage.began;
        self.set_as(state, Health::Reconnecting { since, error });
    }

    /// The server answered with a list or a change.
    fn answered(&mut self) {
        if let Some(metrics) = self.metrics {
            metrics.watch_contact(self.cluster, self.kind);
        }
        if let Some(outage) = &mut self.outage
            && outage.answered.is_none()
        {
            let now = tokio::time::Instant::now();
            outage.answered = Some(now);
            if outage.warned && !outage.told_listed {
                outage.told_listed = true;
                let after = now.duration_since(outage.since);
                tracing::info!(cluster = %self.cluster, kind = %self.kind, ?after, "watch listed again");
            }
        }
        let synced = matches!(
            *self.health.lock().unwrap_or_else(|e| e.into_inner()),
            Health::Synced { .. }
        );
        if !synced {
            self.set(Health::Synced {
                since: SystemTime::now(),
            });
        }
    }
}

type WatchEvents<K> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// A watcher that starts over with a list after every failure: `watch` makes a new one.
///
/// kube-runtime's watcher retries a watch that failed to start (or broke) from the
/// resourceVersion it had listed, and says nothing when that retry works: a kind without
/// objects would look failed until its next change. A new list after a failure costs one list
/// (the watcher relists after an expired watch anyway) and ends in `InitDone`, so the source
/// knows it is back. Put the backoff around it: the new watcher is polled after the delay.
pub fn relisting<K: Send + 'static>(
    watch: impl Fn() -> WatchEvents<K> + Send + 'static,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {
    let events = watch();
    futures::stream::unfold((watch, events), |(watch, mut events)| async move {
        let event = events.next().await?;
        if event.is_err() {
            events = watch();
        }
        Some((event, (watch, events)))
    })
}

/// A source's kind, as whole objects and as metadata.
struct Apis {
    full: Api<DynamicObject>,
    metadata: Api<PartialObjectMeta<DynamicObject>>,
}

/// The watch events of the kind in `detail`, with metadata-only objects as `DynamicObject`s
/// without content; a list after every failure, on the source's backoff.
fn events(apis: &Apis, id: &SourceId, detail: Detail) -> WatchEvents<DynamicObject> {
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
        Detail::Full => {
            let api = apis.full.clone();
            relisting(move || watcher(api.clone(), config.clone()).boxed())
                .backoff(backoff)
                .boxed()
        }
        Detail::Metadata => {
            let api = apis.metadata.clone();
            relisting(move || {
                watcher(api.clone(), config.clone())
                    .map(|event| event.map(|event| map_event(event, without_content)))
                    .boxed()
            })
            .backoff(backoff)
            .boxed()
        }
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

impl<K: TypedKind> Default for Typed<K> {
    fn default() -> Typed<K> {
        Typed::new()
    }
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

    /// Runs the watch until the future is dropped: lists again after a failure, retries on the
    /// local schedule, and reports its state in the sync metrics under cluster [`LOCAL`].
    pub async fn run(self, api: Api<K>, metrics: SyncMetrics) {
        let kind = K::kind(&K::DynamicType::default()).to_string();
        let health = Mutex::new(Health::Listing {
            since: SystemTime::now(),
        });
        let mut tracker = Tracker::new(LOCAL, &kind, true, Some(&metrics), &health);
        tracker.listing();
        let events = relisting(move || watcher(api.clone(), watcher::Config::default()).boxed())
            .backoff(xcc_kube::Backoff::local())
            .reflect_shared(self.writer);
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(
                    watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_),
                ) => tracker.answered(),
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Err(error) => tracker.failed(&error),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;
    use xcc_kube::scenario::{self, Request, Running, Scenario};

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

    /// Whether `request` asks for metadata only.
    fn for_metadata(request: &Request) -> bool {
        request
            .header("accept")
            .is_some_and(|a| a.contains("PartialObjectMetadata"))
    }

    /// `list` or `watch`, then `meta` or `full`: what `request` asks for.
    fn asks(request: &Request) -> String {
        format!(
            "{} {}",
            if request.is_watch() { "watch" } else { "list" },
            if for_metadata(request) {
                "meta"
            } else {
                "full"
            }
        )
    }

    /// A mocked API server answering lists of Secrets (as whole objects or as metadata, as
    /// asked) and accepting watches that never send anything.
    fn mock() -> (Client, Running) {
        mock_failing(0, 0)
    }

    /// [`mock`], whose first `lists` lists answer 404 (a kind not served yet) and whose first
    /// `watches` watches answer 429 (a new kind's watch cache still initializing).
    fn mock_failing(lists: usize, watches: usize) -> (Client, Running) {
        let path = "/api/v1/secrets";
        let mut scenario = Scenario::new().in_any_order();
        for _ in 0..lists {
            scenario =
                scenario
                    .expect("GET", path)
                    .when(|r| !r.is_watch())
                    .reply(scenario::status(
                        404,
                        "NotFound",
                        "the server could not find the requested resource",
                    ));
        }
        for _ in 0..watches {
            scenario =
                scenario
                    .expect("GET", path)
                    .when(Request::is_watch)
                    .reply(scenario::status(
                        429,
                        "TooManyRequests",
                        "storage is (re)initializing",
                    ));
        }
        scenario
            .always("GET", path)
            .when(Request::is_watch)
            .hang()
            .always("GET", path)
            .reply_to(|request| {
                let items = if for_metadata(request) {
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
                (200, list)
            })
            .run()
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
            while count(&server, "list meta") < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("back to metadata once no view needs content");
        drop((meta, second));
        assert!(sources.health().is_empty(), "the last view stops the watch");
        assert_eq!(count(&server, "list full"), 1, "{:?}", requests(&server));
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
        assert_eq!(
            count(&server, "list meta") + count(&server, "list full"),
            1,
            "{:?}",
            requests(&server)
        );
        feed.abort();
        drop(other);
    }

    /// Waits until `done` holds.
    async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        tokio::time::timeout(LIST_WAIT, async {
            while !done() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{what}"));
    }

    /// How many requests asked for `what` (see [`asks`]).
    fn count(server: &Running, what: &str) -> usize {
        server.count(|r| asks(r) == what)
    }

    fn requests(server: &Running) -> Vec<String> {
        server.seen().iter().map(asks).collect()
    }

    fn metrics_text(registry: &prometheus_client::registry::Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[tokio::test]
    async fn a_watch_that_fails_to_start_after_its_list_lists_again_and_is_synced() {
        // The list works; the watch from its resourceVersion answers 429 once, as a new CRD's
        // watch cache does while it initializes. No object ever changes.
        let (client, server) = mock_failing(0, 1);
        let mut registry = prometheus_client::registry::Registry::with_prefix("xcc");
        let sources = Sources::new(Some(SyncMetrics::register(&mut registry)));
        let view = sources.view(
            SourceId::local(secret_gvk()),
            client,
            &ApiResource::erase::<Secret>(&()),
            Detail::Metadata,
        );
        wait_until("the watch lists again after its failed start", || {
            count(&server, "list meta") == 2
                && matches!(sources.health()[0].1, Health::Synced { .. })
        })
        .await;
        assert!(view.listed());
        let text = metrics_text(&registry);
        for line in [
            r#"xcc_sync_watch_state{cluster="local",kind="Secret",state="synced"} 1"#,
            r#"xcc_sync_watch_errors_total{cluster="local",kind="Secret"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
    }

    #[tokio::test]
    async fn a_typed_watch_of_a_kind_not_served_yet_is_synced_once_it_lists_and_watches() {
        // Two lists answer 404 (the CRD not served yet), then the first watch answers 429.
        let (client, server) = mock_failing(2, 1);
        let mut registry = prometheus_client::registry::Registry::with_prefix("xcc");
        let metrics = SyncMetrics::register(&mut registry);
        let typed = Typed::<Secret>::new();
        let store = typed.store();
        let mut subscriber = typed.subscribe();
        let run = tokio::spawn(typed.run(Api::all(client), metrics));
        let drain = tokio::spawn(async move { while subscriber.next().await.is_some() {} });
        let synced = r#"xcc_sync_watch_state{cluster="local",kind="Secret",state="synced"} 1"#;
        wait_until("the typed watch is synced after three failures", || {
            count(&server, "list full") == 4 && metrics_text(&registry).contains(synced)
        })
        .await;
        let text = metrics_text(&registry);
        assert!(
            text.contains(r#"xcc_sync_watch_errors_total{cluster="local",kind="Secret"} 3"#),
            "{text}"
        );
        assert_eq!(store.state().len(), 1);
        run.abort();
        drain.abort();
    }

    use xcc_kube::testing::Lines;

    #[tokio::test(start_paused = true)]
    async fn a_failing_watch_warns_once_per_outage_and_says_when_it_listed_again() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || writer.clone())
            .finish();
        let _log = tracing::subscriber::set_default(subscriber);
        let health = Mutex::new(Health::Listing {
            since: SystemTime::now(),
        });
        let mut tracker = Tracker::new(LOCAL, "Secret", true, None, &health);
        let fail = |tracker: &mut Tracker| tracker.failed(&watcher::Error::NoResourceVersion);
        let warned = "watch cannot list or watch";
        let listed_again = "watch listed again";

        // A short outage: DEBUG only.
        fail(&mut tracker);
        tokio::time::advance(Duration::from_secs(1)).await;
        tracker.answered();
        assert!(matches!(*health.lock().unwrap(), Health::Synced { .. }));
        assert_eq!(lines.matching(warned), 0);
        assert_eq!(lines.matching("watch failed; retrying"), 1);

        // A long one (it lists, but its watch keeps failing): one WARN, one INFO.
        tokio::time::advance(tracker.quiet).await;
        for _ in 0..8 {
            fail(&mut tracker);
            tokio::time::advance(Duration::from_secs(3)).await;
            tracker.answered();
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        fail(&mut tracker);
        assert!(matches!(
            *health.lock().unwrap(),
            Health::Reconnecting { .. }
        ));
        assert_eq!(lines.matching(warned), 1);
        assert_eq!(lines.matching(" WARN "), 1);
        assert_eq!(lines.matching(listed_again), 1);

        // Back for the quiet period: the next failure starts a new outage, which warns again.
        tracker.answered();
        tokio::time::advance(tracker.quiet).await;
        fail(&mut tracker);
        assert_eq!(lines.matching(warned), 1);
        tokio::time::advance(WARN_AFTER).await;
        fail(&mut tracker);
        assert_eq!(lines.matching(warned), 2);
    }
}

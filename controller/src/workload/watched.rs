//! A watch-fed store on a workload cluster that knows its own health. The watch is opened by
//! the core ([`xcc_sync::sources::watch`]): a new list after every failure, on the peer backoff.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicBool, Ordering},
};

use futures::StreamExt;
use kube::{
    Api,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};

use xcc_kube::bounded;
use xcc_sync::{
    outage::{Outage, WATCH_WARN_AFTER},
    sources::{self, Schedule},
};

/// What a watch knows of its own health, shared with its task, as its consumer sees it: healthy
/// once the consumer has put a full list in its store, until the next failure. Not the core's
/// [`xcc_sync::sources::WatchHealth`]: that one turns synced as the list arrives, a moment
/// before the consumer has stored it, and a reader here must never take an empty or old store
/// for a listed one (a Service not yet in the store would read as deleted).
#[derive(Default)]
pub(super) struct WatchHealth {
    /// Listed, and no error since.
    healthy: AtomicBool,
    /// The last error, bounded; cleared by the next full list.
    last_error: Mutex<Option<String>>,
    /// What the log says of its outages (made at the first failure, which names the watch).
    outage: Mutex<Option<Outage>>,
}

impl WatchHealth {
    /// Whether the store holds a full list, with no failure since.
    pub(super) fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Why the watch last failed, until it lists again.
    pub(super) fn error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The consumer has stored a full list.
    pub(super) fn listed(&self) {
        if let Some(outage) = self
            .outage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            outage.recovered();
        }
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.healthy.store(true, Ordering::Release);
    }

    /// The watch of `what` failed with `error`: logged once per outage (its [`Outage`]).
    /// Whether it was healthy until now.
    pub(super) fn failed(&self, what: &str, error: &watcher::Error) -> bool {
        let first = self.healthy.swap(false, Ordering::AcqRel);
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(format!("watch of {what} failed: {}", bounded(error)));
        self.outage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(|| {
                Outage::new(format!("the watch of {what}"), "its API server")
                    .warn_after(WATCH_WARN_AFTER)
                    .quiet(xcc_kube::Backoff::peer().quiet())
            })
            .failed(error);
        first
    }
}

/// One watch-fed store on a workload cluster; the watch stops when this is dropped.
pub(super) struct Watched<K: kube::Resource + 'static>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    pub(super) store: Store<K>,
    pub(super) health: Arc<WatchHealth>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: kube::Resource + 'static> Drop for Watched<K>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a reflector of `api` with `config`; `changed` is called (with the store as it is
/// then) after each object applied or deleted, when the watch lists (again) and when it first
/// fails, so that whoever reads the store is told to look again.
pub(super) fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    what: String,
    changed: impl Fn(&Store<K>) + Send + 'static,
) -> Watched<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let health = Arc::new(WatchHealth::default());
    let stream = sources::watch(api, config, Schedule::Peer).reflect(writer);
    let task_health = health.clone();
    let task_store = store.clone();
    let changed = move || changed(&task_store);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    task_health.listed();
                    changed();
                }
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => changed(),
                Ok(_) => {}
                Err(e) => {
                    if task_health.failed(&what, &e) {
                        changed();
                    }
                }
            }
        }
    });
    Watched {
        store,
        health,
        task,
    }
}

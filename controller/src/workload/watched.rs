//! A watch-fed store on a workload cluster that knows its own health.

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

/// What a watch knows of its own health, shared with its task.
#[derive(Default)]
pub(super) struct WatchHealth {
    /// Listed, and no error since.
    pub(super) healthy: AtomicBool,
    /// The last error, bounded; cleared by the next full list.
    pub(super) last_error: Mutex<Option<String>>,
}

impl WatchHealth {
    pub(super) fn error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
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

/// Starts a reflector of `api` with `config`; `changed` is called with each object applied or
/// deleted, when the watch lists (again) and when it first fails, so that whoever reads the
/// store is told to look again.
pub(super) fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    what: String,
    changed: impl Fn() + Send + 'static,
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
    let stream =
        reflector::reflector(writer, watcher(api, config)).backoff(xcc_kube::Backoff::peer());
    let task_health = health.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    task_health.healthy.store(true, Ordering::Release);
                    *task_health
                        .last_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = None;
                    changed();
                }
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => changed(),
                Ok(_) => {}
                Err(e) => {
                    let first = task_health.healthy.swap(false, Ordering::AcqRel);
                    *task_health
                        .last_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("watch of {what} failed: {}", bounded(&e)));
                    if first {
                        tracing::warn!(error = %e, "watch of {what} failed; retrying");
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

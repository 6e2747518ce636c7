//! The records this controller writes on a workload cluster (the EndpointSlices of namespace
//! `xcc-dns`): one watch per cluster keeps them as compact [`Print`]s, and wakes the GatewayDNS
//! a slice names when someone else changes it.

use std::sync::{Arc, Mutex, atomic::Ordering};

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api, Client, ResourceExt,
    api::ListParams,
    runtime::{WatchStreamExt, reflector::ObjectRef, watcher},
};

use xcc_kube::bounded;

use super::{CALL_TIMEOUT, Workloads, watched::WatchHealth};
use crate::desired::{Print, SLICE_NAMESPACE, Slices};

/// Deletes EndpointSlice `name` through `slices` within [`CALL_TIMEOUT`]: `Ok(true)` deleted,
/// `Ok(false)` already gone, otherwise why not.
pub(crate) async fn delete_slice(
    slices: &Api<k8s_openapi::api::discovery::v1::EndpointSlice>,
    name: &str,
) -> Result<bool, String> {
    match tokio::time::timeout(CALL_TIMEOUT, slices.delete(name, &Default::default())).await {
        Ok(Ok(_)) => Ok(true),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(false),
        Ok(Err(e)) => Err(format!("cannot delete EndpointSlice {name}: {e}")),
        Err(_) => Err(format!("timed out deleting EndpointSlice {name}")),
    }
}

/// The EndpointSlices of namespace `xcc-dns` on one cluster, as [`Print`]s (a few dozen bytes
/// each, never the objects): what the writes compare with, without a LIST on the path of every
/// change. The watch stops when this is dropped.
pub(super) struct SliceWatch {
    state: Arc<Mutex<SliceState>>,
    health: Arc<WatchHealth>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SliceWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Default)]
struct SliceState {
    slices: Slices,
    /// Changes with every change of the slices this controller did not make itself (and with
    /// every list); never the same for two watches. 0 until listed.
    generation: u64,
}

/// A number no other slice store had or will have.
pub(super) fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// (namespace of the GatewayDNS, cluster, slice name).
pub(super) type SliceKey = (String, String, String);

impl Workloads {
    /// Runs `decide` on the EndpointSlices in `xcc-dns` of `cluster`, from a watch of that
    /// namespace started on first use (a changed or deleted slice wakes the GatewayDNS it names,
    /// so a write decided on a store a moment behind is looked at again); on a LIST until the
    /// watch has listed. Also gives the store's generation (`None`: not from the store).
    pub async fn with_slices<T>(
        &self,
        namespace: &str,
        cluster: &str,
        client: &Client,
        decide: impl FnOnce(&Slices) -> T,
    ) -> Result<(Option<u64>, T), String> {
        let (state, health) = {
            match self
                .clusters
                .get_mut(&(namespace.to_string(), cluster.to_string()))
            {
                Some(mut entry) => {
                    let watch = entry.slices.get_or_insert_with(|| {
                        self.start_slice_watch(client.clone(), namespace, cluster)
                    });
                    (Some(watch.state.clone()), watch.health.clone())
                }
                None => (None, Arc::default()),
            }
        };
        if let Some(state) = state
            && health.healthy.load(Ordering::Acquire)
        {
            let state = state.lock().unwrap_or_else(|e| e.into_inner());
            return Ok((Some(state.generation), decide(&state.slices)));
        }
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), SLICE_NAMESPACE);
        match tokio::time::timeout(CALL_TIMEOUT, api.list(&ListParams::default())).await {
            Ok(Ok(list)) => {
                let slices: Slices = list
                    .items
                    .iter()
                    .map(|s| (s.name_any(), Print::of(s)))
                    .collect();
                Ok((None, decide(&slices)))
            }
            Ok(Err(e)) => Err(format!("cannot list EndpointSlices: {}", bounded(&e))),
            Err(_) => Err("timed out listing EndpointSlices".into()),
        }
    }

    /// The generation of `cluster`'s slice store, while its watch has listed and is healthy.
    pub fn slice_generation(&self, namespace: &str, cluster: &str) -> Option<u64> {
        let entry = self
            .clusters
            .get(&(namespace.to_string(), cluster.to_string()))?;
        let watch = entry.slices.as_ref()?;
        if !watch.health.healthy.load(Ordering::Acquire) {
            return None;
        }
        let generation = watch
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .generation;
        (generation != 0).then_some(generation)
    }

    /// This controller is about to write `slice` on `cluster` (`None`: to delete slice `name`).
    pub fn writing(
        &self,
        namespace: &str,
        cluster: &str,
        name: &str,
        slice: Option<&EndpointSlice>,
    ) {
        let key = (namespace.to_string(), cluster.to_string(), name.to_string());
        match slice {
            Some(slice) => {
                self.written.insert(key, Print::of(slice));
            }
            None => {
                self.written.remove(&key);
            }
        }
    }

    fn start_slice_watch(&self, client: Client, namespace: &str, cluster: &str) -> SliceWatch {
        let (trigger, namespace) = (self.trigger.clone(), namespace.to_string());
        let (written, cluster_name) = (self.written.clone(), cluster.to_string());
        let own_namespace = namespace.clone();
        let what = format!("EndpointSlices {SLICE_NAMESPACE}/* on cluster {cluster}");
        let state: Arc<Mutex<SliceState>> = Arc::default();
        let health = Arc::new(WatchHealth::default());
        let stream = watcher(
            Api::<EndpointSlice>::namespaced(client, SLICE_NAMESPACE),
            watcher::Config::default(),
        )
        .backoff(xcc_kube::Backoff::peer());
        let (task_state, task_health) = (state.clone(), health.clone());
        // Only slices that name a GatewayDNS of this namespace wake anything.
        let wake = move |slice: &EndpointSlice| {
            if let Some(reference) = slice.annotations().get(crate::desired::REF_ANNOTATION)
                && let Some((ns, name)) = reference.split_once('/')
                && ns == namespace
            {
                let _ = trigger.send(ObjectRef::new(name).within(ns));
            }
        };
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut listing: Slices = Slices::new();
            let state = |f: &mut dyn FnMut(&mut SliceState)| {
                f(&mut task_state.lock().unwrap_or_else(|e| e.into_inner()));
            };
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Init) => listing.clear(),
                    Ok(watcher::Event::InitApply(slice)) => {
                        listing.insert(slice.name_any(), Print::of(&slice));
                    }
                    Ok(watcher::Event::InitDone) => {
                        // The (re)list itself wakes nobody: the next reconcile reads the store.
                        let mut listed = std::mem::take(&mut listing);
                        listed.shrink_to_fit();
                        state(&mut |s| {
                            s.slices = std::mem::take(&mut listed);
                            s.generation = next_generation();
                        });
                        task_health.healthy.store(true, Ordering::Release);
                        *task_health
                            .last_error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner()) = None;
                    }
                    Ok(watcher::Event::Apply(slice)) => {
                        let (name, print) = (slice.name_any(), Print::of(&slice));
                        // What this controller just wrote wakes nobody: the reconcile that
                        // wrote it knows.
                        let own = slice.metadata.deletion_timestamp.is_none()
                            && written
                                .get(&(own_namespace.clone(), cluster_name.clone(), name.clone()))
                                .is_some_and(|want| crate::desired::same_content(&print, &want));
                        let mut print = Some(print);
                        state(&mut |s| {
                            if let Some(print) = print.take() {
                                s.slices.insert(name.clone(), print);
                            }
                            if !own {
                                s.generation = next_generation();
                            }
                        });
                        if !own {
                            wake(&slice);
                        }
                    }
                    Ok(watcher::Event::Delete(slice)) => {
                        let name = slice.name_any();
                        state(&mut |s| {
                            s.slices.remove(&name);
                            s.generation = next_generation();
                        });
                        wake(&slice);
                    }
                    Err(e) => {
                        let first = task_health.healthy.swap(false, Ordering::AcqRel);
                        *task_health
                            .last_error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner()) =
                            Some(format!("watch of {what} failed: {}", bounded(&e)));
                        if first {
                            tracing::warn!(error = %e, "watch of {what} failed; retrying");
                        }
                    }
                }
            }
        });
        SliceWatch {
            state,
            health,
            task,
        }
    }
}

//! The records this controller writes on a workload cluster (the EndpointSlices of namespace
//! `xcc-dns`): one watch per cluster keeps them as compact [`Print`]s, and wakes the GatewayDNS
//! a slice names when someone else changes it.

use std::sync::{Arc, Mutex, atomic::Ordering};

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api, Client, ResourceExt,
    api::ListParams,
    runtime::{reflector::ObjectRef, watcher},
};

use dashmap::DashMap;
use tokio::sync::mpsc::UnboundedSender;
use xcc_kube::bounded;
use xcc_sync::sources::{self, Schedule};

use super::{CALL_TIMEOUT, Workloads, watched::WatchHealth};
use crate::{
    desired::{Print, SLICE_NAMESPACE, Slices},
    gatewaydns::GatewayDNS,
};

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
            && health.healthy()
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
        if !watch.health.healthy() {
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
        let state: Arc<Mutex<SliceState>> = Arc::default();
        let health = Arc::new(WatchHealth::default());
        let mut feed = SliceFeed {
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
            state: state.clone(),
            health: health.clone(),
            written: self.written.clone(),
            trigger: self.trigger.clone(),
            listing: Slices::new(),
        };
        let stream = sources::watch(
            Api::<EndpointSlice>::namespaced(client, SLICE_NAMESPACE),
            watcher::Config::default(),
            Schedule::Peer,
        );
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                feed.event(event);
            }
        });
        SliceWatch {
            state,
            health,
            task,
        }
    }
}

/// What the slice watch of one cluster keeps, and whom it tells: a slice someone else changed
/// wakes the GatewayDNS it names.
struct SliceFeed {
    /// The namespace of the GatewayDNS whose slices these are.
    namespace: String,
    cluster: String,
    state: Arc<Mutex<SliceState>>,
    health: Arc<WatchHealth>,
    /// What this controller last wrote to each slice.
    written: Arc<DashMap<SliceKey, Print>>,
    trigger: UnboundedSender<ObjectRef<GatewayDNS>>,
    /// The list going on.
    listing: Slices,
}

impl SliceFeed {
    fn event(&mut self, event: Result<watcher::Event<EndpointSlice>, watcher::Error>) {
        match event {
            Ok(watcher::Event::Init) => self.listing.clear(),
            Ok(watcher::Event::InitApply(slice)) => {
                self.listing.insert(slice.name_any(), Print::of(&slice));
            }
            Ok(watcher::Event::InitDone) => self.listed(),
            Ok(watcher::Event::Apply(slice)) => self.applied(&slice),
            Ok(watcher::Event::Delete(slice)) => {
                let name = slice.name_any();
                self.update(|s| {
                    s.slices.remove(&name);
                    s.generation = next_generation();
                });
                self.wake(&slice);
            }
            Err(e) => {
                let what = format!(
                    "EndpointSlices {SLICE_NAMESPACE}/* on cluster {}",
                    self.cluster
                );
                self.health.failed(&what, &e);
            }
        }
    }

    /// A (re)list is complete: it becomes the store. It wakes nobody: the next reconcile reads
    /// the store.
    fn listed(&mut self) {
        let mut listed = std::mem::take(&mut self.listing);
        listed.shrink_to_fit();
        self.update(|s| {
            s.slices = listed;
            s.generation = next_generation();
        });
        self.health.listed();
    }

    fn applied(&self, slice: &EndpointSlice) {
        let (name, print) = (slice.name_any(), Print::of(slice));
        // What this controller just wrote wakes nobody: the reconcile that wrote it knows.
        let own = slice.metadata.deletion_timestamp.is_none()
            && self
                .written
                .get(&(self.namespace.clone(), self.cluster.clone(), name.clone()))
                .is_some_and(|want| crate::desired::same_content(&print, &want));
        self.update(|s| {
            s.slices.insert(name, print);
            if !own {
                s.generation = next_generation();
            }
        });
        if !own {
            self.wake(slice);
        }
    }

    fn update(&self, change: impl FnOnce(&mut SliceState)) {
        change(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Wakes the GatewayDNS `slice` names, if it is one of this namespace.
    fn wake(&self, slice: &EndpointSlice) {
        if let Some(reference) = slice.annotations().get(crate::desired::REF_ANNOTATION)
            && let Some((ns, name)) = reference.split_once('/')
            && ns == self.namespace
        {
            let _ = self.trigger.send(ObjectRef::new(name).within(ns));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::sync::mpsc::error::TryRecvError;

    fn slice(name: &str, reference: &str, address: &str) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": SLICE_NAMESPACE,
                         "annotations": {crate::desired::REF_ANNOTATION: reference}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address]}],
        }))
        .unwrap()
    }

    #[test]
    fn a_slice_someone_else_changed_wakes_its_gateway_and_one_this_controller_wrote_does_not() {
        let (trigger, mut woken) = tokio::sync::mpsc::unbounded_channel();
        let written: Arc<DashMap<SliceKey, Print>> = Arc::default();
        let mut feed = SliceFeed {
            namespace: "dev-team".into(),
            cluster: "a".into(),
            state: Arc::default(),
            health: Arc::default(),
            written: written.clone(),
            trigger,
            listing: Slices::new(),
        };
        let generation = |feed: &SliceFeed| feed.state.lock().unwrap().generation;
        let name = "dev-team-a-gateway";
        feed.event(Ok(watcher::Event::Init));
        feed.event(Ok(watcher::Event::InitApply(slice(
            name,
            "dev-team/gw",
            "10.0.0.1",
        ))));
        assert_eq!(generation(&feed), 0, "not listed yet");
        feed.event(Ok(watcher::Event::InitDone));
        let listed = generation(&feed);
        assert_ne!(listed, 0);
        assert!(feed.health.healthy());
        assert_eq!(
            woken.try_recv(),
            Err(TryRecvError::Empty),
            "a list wakes nobody"
        );

        // What this controller wrote is stored, and wakes nobody.
        let mine = slice(name, "dev-team/gw", "10.0.0.2");
        let key = ("dev-team".to_string(), "a".to_string(), name.to_string());
        written.insert(key, Print::of(&mine));
        feed.event(Ok(watcher::Event::Apply(mine.clone())));
        assert_eq!(generation(&feed), listed);
        assert_eq!(feed.state.lock().unwrap().slices[name], Print::of(&mine));
        assert_eq!(woken.try_recv(), Err(TryRecvError::Empty));

        // Someone else's change wakes the GatewayDNS the slice names.
        feed.event(Ok(watcher::Event::Apply(slice(
            name,
            "dev-team/gw",
            "10.0.0.3",
        ))));
        assert_ne!(generation(&feed), listed);
        assert_eq!(
            woken.try_recv(),
            Ok(ObjectRef::new("gw").within("dev-team"))
        );

        // A slice of another namespace's GatewayDNS goes from the store and wakes nobody here.
        let before = generation(&feed);
        feed.event(Ok(watcher::Event::Delete(slice(
            "other",
            "other-team/gw",
            "10.0.0.4",
        ))));
        assert_ne!(generation(&feed), before);
        assert_eq!(woken.try_recv(), Err(TryRecvError::Empty));

        feed.event(Err(watcher::Error::NoResourceVersion));
        assert!(!feed.health.healthy());
        let error = feed.health.error().unwrap();
        assert!(error.contains("on cluster a"), "{error}");
    }
}

//! Workload clusters as the controller sees them: a client per cluster, built from its Cluster
//! API kubeconfig Secret and rebuilt when that Secret changes, and one watch per gateway Service,
//! shared by every GatewayDNS that names it, which triggers their reconcile the moment the
//! Service changes (the original polled every 30 s).

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use dashmap::{DashMap, mapref::entry::Entry};
use futures::StreamExt;
use k8s_openapi::api::{
    core::v1::{ConfigMap, Secret, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, ResourceExt,
    api::ListParams,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio::sync::mpsc::UnboundedSender;

use xcc_kube::{
    Announcement, KubeconfigError, PROBE_DEADLINE, PeerClient, PeerClients, Reach,
    announcement::{ANNOUNCEMENT_NAME, ANNOUNCEMENT_NAMESPACE},
    bounded,
};

use crate::{
    desired::{Observation, Print, SLICE_NAMESPACE, Slices},
    gatewaydns::GatewayDNS,
    health::Tracker,
};

/// Key of the kubeconfig Secret, Cluster API's convention.
pub const KUBECONFIG_KEY: &str = "value";
/// Longest wait for one call to a workload cluster, so a dead cluster cannot stall a reconcile.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Reads a cluster's announcement ConfigMap; `Ok(None)` when there is none.
pub async fn read_announcement(client: &Client) -> Result<Option<Announcement>, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ANNOUNCEMENT_NAMESPACE);
    match tokio::time::timeout(CALL_TIMEOUT, api.get_opt(ANNOUNCEMENT_NAME)).await {
        Ok(Ok(found)) => Ok(found.as_ref().map(Announcement::read)),
        Ok(Err(e)) => Err(format!(
            "cannot read ConfigMap {ANNOUNCEMENT_NAMESPACE}/{ANNOUNCEMENT_NAME} (the xcc-agent announcement): {}",
            bounded(&e)
        )),
        Err(_) => Err(format!(
            "timed out reading ConfigMap {ANNOUNCEMENT_NAMESPACE}/{ANNOUNCEMENT_NAME}"
        )),
    }
}

/// `<cluster>-kubeconfig`.
pub fn kubeconfig_secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

struct ClusterEntry {
    /// The client, built by the trust gate; its identity names the Secret version.
    peer: PeerClient,
    /// The resourceVersion of the kubeconfig Secret it was built from: while the Secret watch
    /// shows that version, the client is used without reading the Secret again.
    secret_version: Option<String>,
    services: HashMap<String, ServiceWatch>,
    /// Started by the first write to this cluster.
    slices: Option<SliceWatch>,
}

/// Why a workload cluster has no client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The trust rules refuse its kubeconfig (exec, a file path, ...).
    Rejected(String),
    /// No Secret, an unreadable or invalid one, or the management cluster did not answer.
    Unavailable(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Rejected(why) | ClientError::Unavailable(why) => f.write_str(why),
        }
    }
}

impl From<ClientError> for Observation {
    fn from(error: ClientError) -> Observation {
        match error {
            ClientError::Rejected(why) => Observation::KubeconfigRejected(why),
            ClientError::Unavailable(why) => Observation::Unreachable(why),
        }
    }
}

/// What a watch knows of its own health, shared with its task.
#[derive(Default)]
struct WatchHealth {
    /// Listed, and no error since.
    healthy: AtomicBool,
    /// The last error, bounded; cleared by the next full list.
    last_error: Mutex<Option<String>>,
}

impl WatchHealth {
    fn error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// One watch-fed store on a workload cluster; the watch stops when this is dropped.
struct Watched<K: kube::Resource + 'static>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    store: Store<K>,
    health: Arc<WatchHealth>,
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
fn watch<K>(
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

/// The gateway Service of one cluster, its EndpointSlices (whether it has ready endpoints),
/// and who wants to hear of their changes.
struct ServiceWatch {
    service: Watched<Service>,
    endpoints: Watched<EndpointSlice>,
    subscribers: Arc<Mutex<HashSet<ObjectRef<GatewayDNS>>>>,
}

/// Ready endpoints in `slices`; an endpoint whose `ready` is unset counts as ready, as the API
/// asks consumers to read it.
pub fn ready_endpoints<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>) -> u32 {
    let ready = slices
        .into_iter()
        .flat_map(|slice| slice.endpoints.iter())
        .filter(|endpoint| {
            endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true)
        })
        .count();
    u32::try_from(ready).unwrap_or(u32::MAX)
}

/// The EndpointSlices of namespace `xcc-dns` on one cluster, as [`Print`]s (a few dozen bytes
/// each, never the objects): what the writes compare with, without a LIST on the path of every
/// change. The watch stops when this is dropped.
struct SliceWatch {
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
fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A cluster's announcement (`Ok(None)`: nothing announced; `Err`: it could not be read) and
/// when it was read.
type CachedAnnouncement = (Instant, Result<Option<Announcement>, String>);

/// Clients and Service watches for every workload cluster, keyed by (namespace, cluster). The
/// reconciles of every GatewayDNS, the prober and the slice watches use it at once: its maps are
/// concurrent maps, and no entry is held while anything is awaited or another entry is read.
pub struct Workloads {
    management: Client,
    peers: PeerClients,
    clusters: DashMap<(String, String), ClusterEntry>,
    trigger: UnboundedSender<ObjectRef<GatewayDNS>>,
    /// What each cluster's xcc-agent announced, and when that was read.
    announcements: DashMap<(String, String), CachedAnnouncement>,
    announcement_ttl: Duration,
    /// The last content this controller wrote (or is writing) to each slice, keyed by
    /// (namespace, cluster, slice): a watch event that shows just that wakes nobody, since the
    /// reconcile that wrote it knows. Recorded before the write, so the event cannot overtake it.
    written: Arc<DashMap<SliceKey, Print>>,
    /// Clients that could not be built, with the Secret version they were refused at.
    failed: DashMap<(String, String), (String, ClientError)>,
    /// What the management cluster's Cluster and Secret watches say.
    pub index: Arc<crate::index::Index>,
}

/// A cluster as the prober sees it: (namespace, cluster), its server, who to wake.
type Probed = ((String, String), String, Vec<ObjectRef<GatewayDNS>>);

/// (namespace of the GatewayDNS, cluster, slice name).
type SliceKey = (String, String, String);

impl Workloads {
    pub fn new(
        management: Client,
        peers: PeerClients,
        trigger: UnboundedSender<ObjectRef<GatewayDNS>>,
        announcement_ttl: Duration,
    ) -> Self {
        Workloads {
            management,
            peers,
            clusters: DashMap::new(),
            trigger,
            announcements: DashMap::new(),
            announcement_ttl,
            written: Arc::default(),
            failed: DashMap::new(),
            index: Arc::default(),
        }
    }

    /// What wakes a GatewayDNS.
    pub fn trigger(&self) -> UnboundedSender<ObjectRef<GatewayDNS>> {
        self.trigger.clone()
    }

    /// How long a cluster's announcement is trusted before it is read again.
    pub fn announcement_ttl(&self) -> Duration {
        self.announcement_ttl
    }

    /// What the xcc-agent of `cluster` announced (`Ok(None)`: no agent announced itself there),
    /// read with one `get` of ConfigMap `xcc-dns/xcc-agent` and cached for the TTL, so that
    /// every GatewayDNS of the namespace shares one read and a newly installed agent is seen
    /// within the TTL. A failed read is cached too, so that a cluster that refuses it is not
    /// asked on every reconcile (and counts as not announced meanwhile).
    pub async fn announcement(
        &self,
        namespace: &str,
        cluster: &str,
        client: &Client,
    ) -> Result<Option<Announcement>, String> {
        let key = (namespace.to_string(), cluster.to_string());
        let fresh = self
            .announcements
            .get(&key)
            .filter(|cached| cached.0.elapsed() < self.announcement_ttl)
            .map(|cached| cached.1.clone());
        if let Some(cached) = fresh {
            return cached;
        }
        let found = read_announcement(client).await;
        self.announcements
            .insert(key, (Instant::now(), found.clone()));
        found
    }

    /// The client of `cluster` in `namespace`, (re)built from its kubeconfig Secret by the
    /// process's one trust gate and peer cache.
    pub async fn client(&self, namespace: &str, cluster: &str) -> Result<Client, ClientError> {
        self.peer(namespace, cluster).await.map(|peer| peer.client)
    }

    async fn peer(&self, namespace: &str, cluster: &str) -> Result<PeerClient, ClientError> {
        let name = kubeconfig_secret_name(cluster);
        let key = (namespace.to_string(), cluster.to_string());
        // What the metadata-only Secret watch knows: no read while the version is the one the
        // client (or the refusal) was built from.
        match self.index.secret_version(namespace, &name) {
            Some(None) => {
                self.clusters.remove(&key);
                return Err(ClientError::Unavailable(format!(
                    "kubeconfig Secret {namespace}/{name} (key {KUBECONFIG_KEY:?}) not found"
                )));
            }
            Some(Some(version)) => {
                let built = self
                    .clusters
                    .get(&key)
                    .filter(|entry| entry.secret_version.as_ref() == Some(&version))
                    .map(|entry| entry.peer.clone());
                if let Some(peer) = built {
                    return Ok(peer);
                }
                let refused = self
                    .failed
                    .get(&key)
                    .filter(|failed| failed.0 == version)
                    .map(|failed| failed.1.clone());
                if let Some(error) = refused {
                    return Err(error);
                }
            }
            None => {}
        }
        self.read_peer(namespace, cluster, &name).await
    }

    async fn read_peer(
        &self,
        namespace: &str,
        cluster: &str,
        name: &str,
    ) -> Result<PeerClient, ClientError> {
        let secrets: Api<Secret> = Api::namespaced(self.management.clone(), namespace);
        let name = name.to_string();
        let unavailable = |why: String| Err(ClientError::Unavailable(why));
        let secret = match tokio::time::timeout(CALL_TIMEOUT, secrets.get_opt(&name)).await {
            Ok(Ok(Some(secret))) => secret,
            Ok(Ok(None)) => {
                return unavailable(format!(
                    "kubeconfig Secret {namespace}/{name} (key {KUBECONFIG_KEY:?}) not found"
                ));
            }
            Ok(Err(e)) => {
                return unavailable(format!(
                    "cannot read Secret {namespace}/{name}: {}",
                    bounded(&e)
                ));
            }
            Err(_) => return unavailable(format!("timed out reading Secret {namespace}/{name}")),
        };
        let key = (namespace.to_string(), cluster.to_string());
        let peer = match self.peers.client_for(&secret).await {
            Ok(peer) => peer,
            Err(error) => {
                // Its watches go with the client; the records already published stay.
                self.clusters.remove(&key);
                let error = match error {
                    KubeconfigError::Rejected { .. } => ClientError::Rejected(error.to_string()),
                    _ => ClientError::Unavailable(error.to_string()),
                };
                if let Some(version) = secret.metadata.resource_version.clone() {
                    self.failed.insert(key, (version, error.clone()));
                }
                return Err(error);
            }
        };
        let secret_version = secret.metadata.resource_version.clone();
        match self.clusters.entry(key.clone()) {
            Entry::Occupied(mut same) if same.get().peer.identity == peer.identity => {
                same.get_mut().secret_version = secret_version;
            }
            entry => {
                tracing::info!(%namespace, %cluster, "built a client for the workload cluster");
                // A new kubeconfig: the old client and its watches go.
                entry.insert(ClusterEntry {
                    peer: peer.clone(),
                    secret_version,
                    services: HashMap::new(),
                    slices: None,
                });
            }
        }
        self.failed.remove(&key);
        Ok(peer)
    }

    /// Why the client of `cluster` does not verify its peer, if it does not
    /// (`--allow-insecure-peers`).
    pub fn insecure(&self, namespace: &str, cluster: &str) -> Option<String> {
        self.clusters
            .get(&(namespace.to_string(), cluster.to_string()))
            .and_then(|entry| entry.peer.insecure_message())
            .map(|why| format!("cluster {cluster}: {why}"))
    }

    /// What the gateway Service `service` (`ns/name`) of `cluster` looks like now, for `gateway`,
    /// which is subscribed to its changes from here on. `client` is the cluster's client as
    /// this reconcile found it (one kubeconfig read per cluster and reconcile).
    pub async fn observe(
        &self,
        namespace: &str,
        cluster: &str,
        service: &str,
        gateway: &ObjectRef<GatewayDNS>,
        client: Result<Client, ClientError>,
    ) -> Observation {
        let client = match client {
            Ok(client) => client,
            Err(error) => return error.into(),
        };
        let Some((svc_ns, svc_name)) = service.split_once('/') else {
            return Observation::ServiceNotFound;
        };
        let (store, health) = {
            let Some(mut entry) = self
                .clusters
                .get_mut(&(namespace.to_string(), cluster.to_string()))
            else {
                return Observation::Unreachable("client was replaced; retrying".into());
            };
            let watch = entry
                .services
                .entry(service.to_string())
                .or_insert_with(|| self.start_watch(client.clone(), svc_ns, svc_name, cluster));
            watch
                .subscribers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(gateway.clone());
            (watch.service.store.clone(), watch.service.health.clone())
        };
        if health.healthy.load(Ordering::Acquire) {
            let found = store.state().into_iter().find(|s| s.name_any() == svc_name);
            return crate::desired::observe(found.as_deref());
        }
        if let Some(error) = health.error() {
            return Observation::Unreachable(error);
        }
        // The watch has not listed yet: ask directly.
        let api: Api<Service> = Api::namespaced(client, svc_ns);
        match tokio::time::timeout(CALL_TIMEOUT, api.get_opt(svc_name)).await {
            Ok(Ok(found)) => crate::desired::observe(found.as_ref()),
            Ok(Err(e)) => {
                Observation::Unreachable(format!("cannot read Service {service}: {}", bounded(&e)))
            }
            Err(_) => Observation::Unreachable(format!("timed out reading Service {service}")),
        }
    }

    fn start_watch(
        &self,
        client: Client,
        svc_ns: &str,
        svc_name: &str,
        cluster: &str,
    ) -> ServiceWatch {
        let subscribers: Arc<Mutex<HashSet<ObjectRef<GatewayDNS>>>> = Arc::default();
        let (task_subscribers, trigger) = (subscribers.clone(), self.trigger.clone());
        let wake = Arc::new(move || {
            let subscribers = task_subscribers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            for gateway in subscribers {
                let _ = trigger.send(gateway);
            }
        });
        let wake_too = wake.clone();
        let service = watch(
            Api::namespaced(client.clone(), svc_ns),
            watcher::Config::default().fields(&format!("metadata.name={svc_name}")),
            format!("Service {svc_ns}/{svc_name} on cluster {cluster}"),
            move || wake(),
        );
        let endpoints = watch(
            Api::namespaced(client, svc_ns),
            watcher::Config::default().labels(&format!("kubernetes.io/service-name={svc_name}")),
            format!("EndpointSlices of Service {svc_ns}/{svc_name} on cluster {cluster}"),
            move || wake_too(),
        );
        ServiceWatch {
            service,
            endpoints,
            subscribers,
        }
    }

    /// Ready endpoints behind `service` on `cluster`, once its EndpointSlice watch has listed.
    pub fn ready_endpoints(&self, namespace: &str, cluster: &str, service: &str) -> Option<u32> {
        let entry = self
            .clusters
            .get(&(namespace.to_string(), cluster.to_string()))?;
        let watch = entry.services.get(service)?;
        watch
            .endpoints
            .health
            .healthy
            .load(Ordering::Acquire)
            .then(|| ready_endpoints(watch.endpoints.store.state().iter().map(|s| &**s)))
    }

    /// Whether the prober found `cluster`'s API server silent.
    pub fn silent(&self, namespace: &str, cluster: &str) -> Option<String> {
        let server = self
            .clusters
            .get(&(namespace.to_string(), cluster.to_string()))?
            .peer
            .server
            .clone();
        match self.peers.reach(&server) {
            Reach::Silent { error } => Some(format!("its API server does not answer: {error}")),
            _ => None,
        }
    }

    /// Asks every workload cluster's API server for its version every `interval`, forever,
    /// tells `tracker`, and wakes the GatewayDNS of a cluster that turned silent or counts
    /// towards being re-admitted.
    pub async fn probe_forever(&self, interval: Duration, tracker: &Tracker) {
        // Servers the last round found silent.
        let mut silent: HashSet<String> = HashSet::new();
        loop {
            // A pause after each round, not a fixed tick: a round that waited on a silent
            // server must not be followed at once by the next, or two checks would count
            // towards re-admission a moment apart.
            tokio::time::sleep(interval).await;
            self.peers.probe_all(PROBE_DEADLINE.min(interval)).await;
            let now = std::time::SystemTime::now();
            let clusters: Vec<Probed> = self
                .clusters
                .iter()
                .map(|entry| {
                    let (key, entry) = entry.pair();
                    let subscribers = entry
                        .services
                        .values()
                        .flat_map(|w| {
                            w.subscribers
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .iter()
                                .cloned()
                                .collect::<Vec<_>>()
                        })
                        .collect();
                    (key.clone(), entry.peer.server.clone(), subscribers)
                })
                .collect();
            for ((namespace, cluster), server, subscribers) in clusters {
                let reach = self.peers.reach(&server);
                let seen = match reach {
                    Reach::Unknown => continue,
                    Reach::Answers => tracker.probed(&namespace, &cluster, true, now),
                    Reach::Silent { .. } => tracker.probed(&namespace, &cluster, false, now),
                };
                let back = match reach {
                    Reach::Silent { .. } => {
                        silent.insert(server.clone());
                        false
                    }
                    _ => silent.remove(&server),
                };
                if back {
                    // The first answer after a silence: its watches may sit in a backoff of up
                    // to half a minute; new ones list at once (the next reconcile starts them).
                    if let Some(mut entry) =
                        self.clusters.get_mut(&(namespace.clone(), cluster.clone()))
                    {
                        tracing::info!(%namespace, %cluster, "workload cluster answers again; restarting its watches");
                        entry.services.clear();
                        entry.slices = None;
                    }
                }
                let counts = seen.was_down && seen.streak <= crate::health::MAX_READMIT_AFTER;
                if seen.unreachable_since.is_some() || counts {
                    for gateway in subscribers {
                        let _ = self.trigger.send(gateway);
                    }
                }
            }
        }
    }

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

    /// What `cluster`'s announcement cache holds, while it is fresh.
    pub fn cached_announcement(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> Option<Result<Option<Announcement>, String>> {
        self.announcements
            .get(&(namespace.to_string(), cluster.to_string()))
            .filter(|cached| cached.0.elapsed() < self.announcement_ttl)
            .map(|cached| cached.1.clone())
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

    /// Forgets `gateway`'s interest in every Service except those in `keep` (cluster, service),
    /// and stops watches nobody needs any more.
    pub fn retain(
        &self,
        namespace: &str,
        gateway: &ObjectRef<GatewayDNS>,
        keep: &BTreeSet<(String, String)>,
    ) {
        for mut entry in self.clusters.iter_mut() {
            let ((ns, cluster), entry) = entry.pair_mut();
            if ns != namespace {
                continue;
            }
            entry.services.retain(|service, watch| {
                let mut subscribers = watch.subscribers.lock().unwrap_or_else(|e| e.into_inner());
                if !keep.contains(&(cluster.clone(), service.clone())) {
                    subscribers.remove(gateway);
                }
                !subscribers.is_empty()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use xcc_kube::scenario::{self, Scenario};

    fn status(code: u16, reason: &str) -> (u16, serde_json::Value) {
        scenario::status(code, reason, &format!("{reason} by the test"))
    }

    fn workloads(client: Client, ttl: Duration) -> Workloads {
        let (trigger, _) = tokio::sync::mpsc::unbounded_channel();
        Workloads::new(
            client,
            PeerClients::new(xcc_kube::PeerTrust::default()),
            trigger,
            ttl,
        )
    }

    fn slice(name: &str, ready: &[Option<bool>]) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": SLICE_NAMESPACE},
            "addressType": "IPv4",
            "endpoints": ready.iter().enumerate().map(|(i, ready)| json!({
                "addresses": [format!("10.0.0.{i}")],
                "conditions": {"ready": ready},
            })).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn ready_endpoints_count_an_unset_ready_as_ready_over_every_slice() {
        let slices = [
            slice("a", &[Some(true), None, Some(false)]),
            slice("b", &[Some(false)]),
            slice("c", &[None]),
        ];
        assert_eq!(ready_endpoints(&slices), 3);
        assert_eq!(ready_endpoints(&slices[1..2]), 0);
        assert_eq!(ready_endpoints(&[]), 0);
    }

    #[test]
    fn a_refused_kubeconfig_and_an_unavailable_one_are_told_apart() {
        assert_eq!(kubeconfig_secret_name("cluster-a"), "cluster-a-kubeconfig");
        let rejected = ClientError::Rejected("exec is refused".into());
        assert_eq!(rejected.to_string(), "exec is refused");
        assert_eq!(
            Observation::from(rejected),
            Observation::KubeconfigRejected("exec is refused".into())
        );
        assert_eq!(
            Observation::from(ClientError::Unavailable("no Secret".into())),
            Observation::Unreachable("no Secret".into())
        );
        assert_ne!(next_generation(), next_generation());
    }

    #[tokio::test]
    async fn an_announcement_is_read_once_per_ttl_and_a_refused_read_is_cached_too() {
        const ANNOUNCEMENT: &str = "/api/v1/namespaces/xcc-dns/configmaps/xcc-agent";
        let (client, server) = Scenario::new()
            .always("GET", ANNOUNCEMENT)
            .reply((
                200,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "xcc-agent", "namespace": "xcc-dns"}}),
            ))
            .run();
        let asked = || server.count(|r| r.method == "GET" && r.path == ANNOUNCEMENT);
        let cached = workloads(client.clone(), Duration::from_secs(3600));
        assert!(cached.cached_announcement("ns", "a").is_none());
        let first = cached.announcement("ns", "a", &client).await;
        assert!(matches!(first, Ok(Some(_))), "{first:?}");
        let again = cached.announcement("ns", "a", &client).await;
        assert!(matches!(again, Ok(Some(_))), "{again:?}");
        assert_eq!(asked(), 1, "one read within the TTL");
        assert!(matches!(
            cached.cached_announcement("ns", "a"),
            Some(Ok(Some(_)))
        ));
        // Another cluster is another read.
        cached.announcement("ns", "b", &client).await.unwrap();
        assert_eq!(asked(), 2);
        // With no TTL every call reads.
        let uncached = workloads(client.clone(), Duration::ZERO);
        uncached.announcement("ns", "a", &client).await.unwrap();
        uncached.announcement("ns", "a", &client).await.unwrap();
        assert_eq!(asked(), 4);
        server.done().await;

        let (refusing, server) = Scenario::new()
            .always("GET", ANNOUNCEMENT)
            .reply(status(403, "Forbidden"))
            .run();
        let cached = workloads(refusing.clone(), Duration::from_secs(3600));
        let error = cached.announcement("ns", "a", &refusing).await.unwrap_err();
        assert!(error.contains("xcc-dns/xcc-agent"), "{error}");
        assert!(cached.announcement("ns", "a", &refusing).await.is_err());
        assert_eq!(server.done().await.len(), 1, "a refusal is cached as well");
    }

    #[tokio::test]
    async fn slices_of_a_cluster_without_a_client_entry_are_listed_and_not_from_a_store() {
        let (client, server) = Scenario::new()
            .expect(
                "GET",
                "/apis/discovery.k8s.io/v1/namespaces/xcc-dns/endpointslices",
            )
            .reply((
                200,
                json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
                       "metadata": {"resourceVersion": "7"},
                       "items": [{"metadata": {"name": "dev-team-a-gateway",
                                               "namespace": "xcc-dns"},
                                  "addressType": "IPv4",
                                  "endpoints": [{"addresses": ["10.0.0.1"]}]}]}),
            ))
            .run();
        let workloads = workloads(client.clone(), Duration::ZERO);
        let (generation, names) = workloads
            .with_slices("dev-team", "a", &client, |slices| {
                slices.keys().cloned().collect::<Vec<_>>()
            })
            .await
            .unwrap();
        assert_eq!(generation, None, "no store: read by a LIST");
        assert_eq!(names, ["dev-team-a-gateway"]);
        assert_eq!(server.done().await.len(), 1);
        assert_eq!(workloads.slice_generation("dev-team", "a"), None);
        assert_eq!(workloads.ready_endpoints("dev-team", "a", "ns/svc"), None);
    }
}

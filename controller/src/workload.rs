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

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::{
    Api, Client, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio::sync::mpsc::UnboundedSender;

use xcc_kube::{
    Announcement, KubeconfigError, PeerClient, PeerClients,
    announcement::{ANNOUNCEMENT_NAME, ANNOUNCEMENT_NAMESPACE},
    bounded,
};

use crate::{desired::Observation, gatewaydns::GatewayDNS};

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
    services: HashMap<String, ServiceWatch>,
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

struct ServiceWatch {
    store: Store<Service>,
    healthy: Arc<AtomicBool>,
    last_error: Arc<Mutex<Option<String>>>,
    subscribers: Arc<Mutex<HashSet<ObjectRef<GatewayDNS>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ServiceWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A cluster's announcement (`Ok(None)`: nothing announced; `Err`: it could not be read) and
/// when it was read.
type CachedAnnouncement = (Instant, Result<Option<Announcement>, String>);

/// Clients and Service watches for every workload cluster, keyed by (namespace, cluster).
pub struct Workloads {
    management: Client,
    peers: PeerClients,
    clusters: Mutex<HashMap<(String, String), ClusterEntry>>,
    trigger: UnboundedSender<ObjectRef<GatewayDNS>>,
    /// What each cluster's xcc-agent announced, and when that was read.
    announcements: Mutex<HashMap<(String, String), CachedAnnouncement>>,
    announcement_ttl: Duration,
}

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
            clusters: Mutex::new(HashMap::new()),
            trigger,
            announcements: Mutex::new(HashMap::new()),
            announcement_ttl,
        }
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
        if let Some((read_at, cached)) = self
            .announcements
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            && read_at.elapsed() < self.announcement_ttl
        {
            return cached.clone();
        }
        let found = read_announcement(client).await;
        self.announcements
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (Instant::now(), found.clone()));
        found
    }

    /// The client of `cluster` in `namespace`, (re)built from its kubeconfig Secret by the
    /// process's one trust gate and peer cache.
    pub async fn client(&self, namespace: &str, cluster: &str) -> Result<Client, ClientError> {
        self.peer(namespace, cluster).await.map(|peer| peer.client)
    }

    async fn peer(&self, namespace: &str, cluster: &str) -> Result<PeerClient, ClientError> {
        let secrets: Api<Secret> = Api::namespaced(self.management.clone(), namespace);
        let name = kubeconfig_secret_name(cluster);
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
                self.lock().remove(&key);
                return Err(match error {
                    KubeconfigError::Rejected { .. } => ClientError::Rejected(error.to_string()),
                    _ => ClientError::Unavailable(error.to_string()),
                });
            }
        };
        let mut clusters = self.lock();
        if clusters
            .get(&key)
            .is_none_or(|entry| entry.peer.identity != peer.identity)
        {
            tracing::info!(%namespace, %cluster, "built a client for the workload cluster");
            // A new kubeconfig: the old client and its watches go.
            clusters.insert(
                key,
                ClusterEntry {
                    peer: peer.clone(),
                    services: HashMap::new(),
                },
            );
        }
        Ok(peer)
    }

    /// Why the client of `cluster` does not verify its peer, if it does not
    /// (`--allow-insecure-peers`).
    pub fn insecure(&self, namespace: &str, cluster: &str) -> Option<String> {
        self.lock()
            .get(&(namespace.to_string(), cluster.to_string()))
            .and_then(|entry| entry.peer.insecure_message())
            .map(|why| format!("cluster {cluster}: {why}"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), ClusterEntry>> {
        self.clusters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the gateway Service `service` (`ns/name`) of `cluster` looks like now, for `gateway`,
    /// which is subscribed to its changes from here on.
    pub async fn observe(
        &self,
        namespace: &str,
        cluster: &str,
        service: &str,
        gateway: &ObjectRef<GatewayDNS>,
    ) -> Observation {
        let client = match self.client(namespace, cluster).await {
            Ok(client) => client,
            Err(error) => return error.into(),
        };
        let Some((svc_ns, svc_name)) = service.split_once('/') else {
            return Observation::ServiceNotFound;
        };
        let (store, healthy, last_error) = {
            let mut clusters = self.lock();
            let Some(entry) = clusters.get_mut(&(namespace.to_string(), cluster.to_string()))
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
            (
                watch.store.clone(),
                watch.healthy.clone(),
                watch.last_error.clone(),
            )
        };
        if healthy.load(Ordering::Acquire) {
            let found = store.state().into_iter().find(|s| s.name_any() == svc_name);
            return crate::desired::observe(found.as_deref());
        }
        if let Some(error) = last_error.lock().unwrap_or_else(|e| e.into_inner()).clone() {
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
        let api: Api<Service> = Api::namespaced(client, svc_ns);
        let (store, writer) = reflector::store();
        let healthy = Arc::new(AtomicBool::new(false));
        let last_error = Arc::new(Mutex::new(None));
        let subscribers: Arc<Mutex<HashSet<ObjectRef<GatewayDNS>>>> = Arc::default();
        let config = watcher::Config::default().fields(&format!("metadata.name={svc_name}"));
        let stream =
            reflector::reflector(writer, watcher(api, config)).backoff(xcc_kube::Backoff::peer());
        let (task_healthy, task_error, task_subscribers, trigger) = (
            healthy.clone(),
            last_error.clone(),
            subscribers.clone(),
            self.trigger.clone(),
        );
        let what = format!("Service {svc_ns}/{svc_name} on cluster {cluster}");
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let changed = match event {
                    Ok(watcher::Event::InitDone) => {
                        task_healthy.store(true, Ordering::Release);
                        *task_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
                        true
                    }
                    Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => true,
                    Ok(_) => false,
                    Err(e) => {
                        let first = task_healthy.swap(false, Ordering::AcqRel);
                        *task_error.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(format!("watch of {what} failed: {}", bounded(&e)));
                        if first {
                            tracing::warn!(error = %e, "watch of {what} failed; retrying");
                        }
                        first
                    }
                };
                if changed {
                    let subscribers = task_subscribers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone();
                    for gateway in subscribers {
                        let _ = trigger.send(gateway);
                    }
                }
            }
        });
        ServiceWatch {
            store,
            healthy,
            last_error,
            subscribers,
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
        let mut clusters = self.lock();
        for ((ns, cluster), entry) in clusters.iter_mut() {
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

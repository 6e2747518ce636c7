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
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::{
    Api, Client, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use tokio::sync::mpsc::UnboundedSender;

use crate::{desired::Observation, gatewaydns::GatewayDNS};

/// Key of the kubeconfig Secret, Cluster API's convention.
pub const KUBECONFIG_KEY: &str = "value";
/// Longest wait for one read on a workload cluster, so a dead cluster cannot stall a reconcile.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `<cluster>-kubeconfig`.
pub fn kubeconfig_secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

struct ClusterEntry {
    /// uid/resourceVersion of the Secret the client was built from.
    version: String,
    client: Client,
    services: HashMap<String, ServiceWatch>,
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

/// Clients and Service watches for every workload cluster, keyed by (namespace, cluster).
pub struct Workloads {
    management: Client,
    clusters: Mutex<HashMap<(String, String), ClusterEntry>>,
    trigger: UnboundedSender<ObjectRef<GatewayDNS>>,
}

impl Workloads {
    pub fn new(management: Client, trigger: UnboundedSender<ObjectRef<GatewayDNS>>) -> Self {
        Workloads {
            management,
            clusters: Mutex::new(HashMap::new()),
            trigger,
        }
    }

    /// The client of `cluster` in `namespace`, (re)built from its kubeconfig Secret.
    pub async fn client(&self, namespace: &str, cluster: &str) -> Result<Client, String> {
        let secrets: Api<Secret> = Api::namespaced(self.management.clone(), namespace);
        let name = kubeconfig_secret_name(cluster);
        let secret = match tokio::time::timeout(CALL_TIMEOUT, secrets.get_opt(&name)).await {
            Ok(Ok(Some(secret))) => secret,
            Ok(Ok(None)) => {
                return Err(format!(
                    "kubeconfig Secret {namespace}/{name} (key {KUBECONFIG_KEY:?}) not found"
                ));
            }
            Ok(Err(e)) => return Err(format!("cannot read Secret {namespace}/{name}: {e}")),
            Err(_) => return Err(format!("timed out reading Secret {namespace}/{name}")),
        };
        let version = format!(
            "{}/{}",
            secret.uid().unwrap_or_default(),
            secret.resource_version().unwrap_or_default()
        );
        let key = (namespace.to_string(), cluster.to_string());
        if let Some(entry) = self.lock().get(&key)
            && entry.version == version
        {
            return Ok(entry.client.clone());
        }
        let client = xcc_kube::client_from_secret(&secret, KUBECONFIG_KEY)
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(%namespace, %cluster, "built a client for the workload cluster");
        // A new kubeconfig: the old client and its watches go.
        self.lock().insert(
            key,
            ClusterEntry {
                version,
                client: client.clone(),
                services: HashMap::new(),
            },
        );
        Ok(client)
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
            Err(why) => return Observation::Unreachable(why),
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
            Ok(Err(e)) => Observation::Unreachable(format!("cannot read Service {service}: {e}")),
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
        let stream = reflector::reflector(writer, watcher(api, config)).default_backoff();
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
                            Some(format!("watch of {what} failed: {e}"));
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

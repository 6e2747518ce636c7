//! The client of each workload cluster, built from its Cluster API kubeconfig Secret by the
//! process's one trust gate, rebuilt when that Secret changes, and the prober that tells
//! whether its API server answers.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, runtime::reflector::ObjectRef};

use xcc_kube::{KubeconfigError, PROBE_DEADLINE, PeerClient, Reach, bounded};

use super::{CALL_TIMEOUT, ClusterEntry, KUBECONFIG_KEY, Workloads};
use crate::{desired::Observation, gatewaydns::GatewayDNS, health::Tracker};

/// `<cluster>-kubeconfig`.
pub fn kubeconfig_secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
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

/// A cluster as the prober sees it: (namespace, cluster), its server, who to wake.
type Probed = ((String, String), String, Vec<ObjectRef<GatewayDNS>>);

impl Workloads {
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
                    nodes: None,
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
}

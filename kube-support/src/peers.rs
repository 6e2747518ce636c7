//! Peer clients: one `kube::Client` per peer cluster, keyed by the kubeconfig Secret that defines
//! the peer (`namespace/name`). A client is rebuilt only when what it connects with changes
//! (server, CA, TLS settings, credentials: its [`PeerClient::identity`]), never because the
//! Secret was written again with the same kubeconfig (group sync rewrites peer Secrets, and a
//! rebuilt client restarts every watch made with it). It is dropped with [`PeerClients::forget`]
//! when the Secret goes. One cache serves every reconciler of a process; each client is built by the gate
//! in [`crate::trust`], so every peer of every component passes the same trust rules.
//!
//! The cache also knows whether each peer's API server answers ([`Reach`]): a prober
//! ([`PeerClients::probe_forever`]) asks every server in use for its `/version` at a steady
//! pace, all servers at once and each with a deadline, and announces every change
//! ([`PeerClients::reach_changes`]). A reconciler whose peer is known to be silent says so at
//! once instead of spending its own deadline on it, and one whose peer goes silent is woken
//! even though a silent server never ends a watch.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use dashmap::DashMap;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use tokio::sync::broadcast;

use crate::{
    KubeconfigError,
    trust::{PeerClient, PeerTrust, build, kubeconfig_key, screen_secret, secret_name},
};

/// Whether a peer's API server answers, as the last probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Not probed yet.
    Unknown,
    /// It answered (a refusal counts: the server is there).
    Answers,
    /// No answer within the deadline, or no connection.
    Silent {
        /// Why, bounded text.
        error: String,
    },
}

/// How often every peer server is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(5);
/// How long one probe may take.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(3);

/// The process's peer clients and what the prober knows of their servers (cheap to clone: every
/// clone shares them).
#[derive(Clone)]
pub struct PeerClients {
    trust: PeerTrust,
    /// Every reconciler of the process reads and fills it at once: a concurrent map, whose
    /// guards live for one statement (a client is built outside them).
    cache: Arc<DashMap<String, Cached>>,
    /// The last probe of each server in use, keyed by its URL: read by every reconciler,
    /// written by the prober.
    reach: Arc<DashMap<String, Reach>>,
    /// The URL of every server whose [`Reach`] changed between answering and silent.
    changes: broadcast::Sender<String>,
    /// How many clients were built: each one restarts whatever was made with the previous one.
    built: Arc<std::sync::atomic::AtomicU64>,
}

/// A client and the last version of its Secret (`@uid/resourceVersion`) found to give it, so
/// that an unchanged Secret is not screened again.
#[derive(Clone)]
struct Cached {
    peer: PeerClient,
    seen: String,
}

impl Default for PeerClients {
    fn default() -> Self {
        PeerClients::new(PeerTrust::default())
    }
}

impl PeerClients {
    /// No clients yet; each will be built under the trust rules `trust`.
    pub fn new(trust: PeerTrust) -> PeerClients {
        PeerClients {
            trust,
            cache: Arc::default(),
            reach: Arc::default(),
            changes: broadcast::channel(256).0,
            built: Arc::default(),
        }
    }

    /// The client for the peer that `secret` defines; built on first use and whenever what it
    /// connects with changed since. A refused kubeconfig drops the client built from an earlier
    /// one.
    pub async fn client_for(&self, secret: &Secret) -> Result<PeerClient, KubeconfigError> {
        let key = secret_name(secret);
        let seen = version(secret);
        let cached = self.cache.get(&key).map(|cached| cached.clone());
        if let Some(cached) = &cached
            && cached.seen == seen
        {
            return Ok(cached.peer.clone());
        }
        let screened = match screen_secret(secret, kubeconfig_key(secret), self.trust) {
            Ok(screened) => screened,
            Err(error) => {
                self.cache.remove(&key);
                return Err(error);
            }
        };
        if let Some(cached) = cached
            && cached.peer.identity == screened.identity
        {
            // Written again with the same connection: the same client, and its watches go on.
            self.cache.insert(
                key,
                Cached {
                    peer: cached.peer.clone(),
                    seen,
                },
            );
            return Ok(cached.peer);
        }
        match build(screened).await {
            Ok(peer) => {
                self.cache.insert(
                    key.clone(),
                    Cached {
                        peer: peer.clone(),
                        seen,
                    },
                );
                self.built
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!(secret = %key, identity = %peer.identity, "built a peer client");
                Ok(peer)
            }
            Err(error) => {
                self.cache.remove(&key);
                Err(error)
            }
        }
    }

    /// The client already built from version `resource_version` of kubeconfig Secret
    /// `namespace/name`, if any: what a caller that knows the Secret did not change uses instead
    /// of reading it again.
    pub fn cached(
        &self,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Option<PeerClient> {
        self.cache
            .get(&format!("{namespace}/{name}"))
            .filter(|cached| cached.seen.ends_with(&format!("/{resource_version}")))
            .map(|cached| cached.peer.clone())
    }

    /// How many peer clients were built since start (a steady group builds none).
    pub fn built(&self) -> u64 {
        self.built.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The kubeconfig Secret `namespace/name` is gone (or unusable): drop its client.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.cache.remove(&format!("{namespace}/{name}"));
    }

    /// The URL of the server behind kubeconfig Secret `namespace/name`, if its client is built.
    pub fn server_of(&self, namespace: &str, name: &str) -> Option<String> {
        self.cache
            .get(&format!("{namespace}/{name}"))
            .map(|cached| cached.peer.server.clone())
    }

    /// What the last probe found of `server`.
    pub fn reach(&self, server: &str) -> Reach {
        self.reach
            .get(server)
            .map_or(Reach::Unknown, |reach| reach.clone())
    }

    /// URLs of servers that turned silent or answer again, as the prober finds them. A receiver
    /// that falls behind gets `Lagged` and should treat every server as changed.
    pub fn reach_changes(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    /// Probes every server in use every `interval` until `stop` resolves; `after_round` sees
    /// what each round found (for metrics).
    pub async fn probe_forever(
        &self,
        interval: Duration,
        stop: impl Future<Output = ()>,
        after_round: impl Fn(&BTreeMap<String, Reach>),
    ) {
        let mut stop = std::pin::pin!(stop);
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {
                    self.probe_all(PROBE_DEADLINE).await;
                    let found: BTreeMap<String, Reach> = self
                        .reach
                        .iter()
                        .map(|entry| (entry.key().clone(), entry.value().clone()))
                        .collect();
                    after_round(&found);
                }
                () = &mut stop => return,
            }
        }
    }

    /// One round: every server in use asked for its version at once, each given `deadline`.
    /// Servers no longer in use are forgotten. Returns when the slowest has answered or run out
    /// of time, so a silent server costs one deadline per round and never delays another's probe.
    pub async fn probe_all(&self, deadline: Duration) {
        let servers: BTreeMap<String, Client> = self
            .cache
            .iter()
            .map(|cached| (cached.peer.server.clone(), cached.peer.client.clone()))
            .collect();
        let probes = servers.into_iter().map(|(server, client)| async move {
            let reach = match tokio::time::timeout(deadline, client.apiserver_version()).await {
                // Any answer, a refusal too (an expired token): the server is there, and what
                // it refuses is for the reconcilers to say.
                Ok(Ok(_) | Err(kube::Error::Api(_))) => Reach::Answers,
                Ok(Err(error)) => Reach::Silent {
                    error: crate::bounded(&error),
                },
                Err(_) => Reach::Silent {
                    error: format!("no answer within {deadline:?}"),
                },
            };
            (server, reach)
        });
        let found: BTreeMap<String, Reach> = futures::future::join_all(probes)
            .await
            .into_iter()
            .collect();
        let mut changed = Vec::new();
        {
            // One entry at a time: a reader meanwhile sees each server's last or new probe.
            let reach = &self.reach;
            for (server, now) in &found {
                let before = reach.insert(server.clone(), now.clone());
                let was_silent = matches!(before, Some(Reach::Silent { .. }));
                let is_silent = matches!(now, Reach::Silent { .. });
                if was_silent != is_silent {
                    changed.push(server.clone());
                    match now {
                        Reach::Silent { error } => {
                            tracing::warn!(%server, %error, "peer API server does not answer")
                        }
                        _ => tracing::info!(%server, "peer API server answers again"),
                    }
                }
            }
            reach.retain(|server, _| found.contains_key(server));
        }
        for server in changed {
            // No receiver is not an error: nobody needs waking.
            let _ = self.changes.send(server);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.cache.len()
    }
}

/// `@uid/resourceVersion` of `secret`.
fn version(secret: &Secret) -> String {
    use kube::ResourceExt;
    format!(
        "@{}/{}",
        secret.uid().unwrap_or_default(),
        secret.resource_version().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{self, Running, Scenario};
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;
    use serde_json::json;

    const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: 'https://127.0.0.1:6443'}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
";

    fn secret(key: &str, uid: &str, resource_version: &str, text: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("energy-source".into()),
                namespace: Some("project-1".into()),
                uid: Some(uid.into()),
                resource_version: Some(resource_version.into()),
                ..Default::default()
            },
            data: Some([(key.to_string(), ByteString(text.as_bytes().to_vec()))].into()),
            ..Default::default()
        }
    }

    /// A client whose API server answers `/version` when `answers`, and otherwise accepts the
    /// request and never answers; its [`Running`] counts the requests it gets.
    fn server(answers: bool) -> (Client, Running) {
        server_with(if answers { 200 } else { 0 })
    }

    /// [`server`] answering with HTTP `status`, or never when `status` is 0.
    fn server_with(status: u16) -> (Client, Running) {
        let version = Scenario::new().always("GET", "/version");
        match status {
            0 => version.hang(),
            300.. => version.reply(scenario::status(status, "Failure", "no")),
            _ => version.reply((
                200,
                json!({"major": "1", "minor": "34", "gitVersion": "v1.34.0", "gitCommit": "",
                       "gitTreeState": "", "buildDate": "", "goVersion": "", "compiler": "",
                       "platform": ""}),
            )),
        }
        .run()
    }

    fn insert(peers: &PeerClients, secret: &str, server: &str, client: Client) {
        peers.cache.insert(
            format!("project-1/{secret}"),
            Cached {
                peer: PeerClient {
                    client,
                    identity: format!("project-1/{secret}@{server}"),
                    server: server.into(),
                    tls: crate::PeerTls::Verified,
                },
                seen: "@uid/1".into(),
            },
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_server_is_found_in_one_deadline_and_slows_no_other_probe() {
        let peers = PeerClients::default();
        let (healthy, answering) = server(true);
        let (blackhole, silent) = server(false);
        insert(&peers, "healthy", "https://healthy:6443/", healthy);
        insert(&peers, "silent", "https://silent:6443/", blackhole.clone());
        // Two Secrets naming the same server: probed once.
        insert(&peers, "silent-too", "https://silent:6443/", blackhole);
        let mut changes = peers.reach_changes();

        let started = tokio::time::Instant::now();
        peers.probe_all(PROBE_DEADLINE).await;
        assert_eq!(started.elapsed(), PROBE_DEADLINE);
        assert_eq!(peers.reach("https://healthy:6443/"), Reach::Answers);
        assert!(matches!(
            peers.reach("https://silent:6443/"),
            Reach::Silent { error } if error.contains("no answer within 3s")
        ));
        assert_eq!(silent.seen().len(), 1);
        assert_eq!(
            peers.server_of("project-1", "silent-too").as_deref(),
            Some("https://silent:6443/")
        );
        // Only the turn to silent is announced; a first "answers" is no change.
        assert_eq!(
            changes.try_recv().ok().as_deref(),
            Some("https://silent:6443/")
        );
        assert!(changes.try_recv().is_err());

        // Still silent: nothing new to announce. Its Secrets gone: forgotten.
        peers.probe_all(PROBE_DEADLINE).await;
        assert!(changes.try_recv().is_err());
        peers.forget("project-1", "silent");
        peers.forget("project-1", "silent-too");
        peers.probe_all(PROBE_DEADLINE).await;
        assert_eq!(peers.reach("https://silent:6443/"), Reach::Unknown);
        // Each asked for `/version` only.
        answering.done().await;
        silent.done().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_refuses_or_fails_still_answers() {
        // An expired token (401) or an internal error (500) is an answer: what it means for an
        // object is for its reconciler to say, not a reason to call the server silent.
        let peers = PeerClients::default();
        let mut servers = Vec::new();
        for (secret, status) in [("expired", 401), ("broken", 500)] {
            let (client, server) = server_with(status);
            servers.push(server);
            insert(&peers, secret, &format!("https://{secret}:6443/"), client);
        }
        peers.probe_all(PROBE_DEADLINE).await;
        assert_eq!(peers.reach("https://expired:6443/"), Reach::Answers);
        assert_eq!(peers.reach("https://broken:6443/"), Reach::Answers);
        for server in servers {
            assert_eq!(server.done().await.len(), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_answers_again_is_announced() {
        let peers = PeerClients::default();
        let (blackhole, _silent) = server(false);
        insert(&peers, "peer", "https://peer:6443/", blackhole);
        let mut changes = peers.reach_changes();
        peers.probe_all(PROBE_DEADLINE).await;
        assert_eq!(
            changes.recv().await.ok().as_deref(),
            Some("https://peer:6443/")
        );
        let (healthy, _answering) = server(true);
        insert(&peers, "peer", "https://peer:6443/", healthy);
        peers.probe_all(PROBE_DEADLINE).await;
        assert_eq!(peers.reach("https://peer:6443/"), Reach::Answers);
        assert_eq!(
            changes.recv().await.ok().as_deref(),
            Some("https://peer:6443/")
        );
    }

    #[tokio::test]
    async fn a_client_is_rebuilt_only_when_what_it_connects_with_changes() {
        let peers = PeerClients::default();
        let first = peers
            .client_for(&secret("kubeconfig", "a", "1", KUBECONFIG))
            .await
            .unwrap();
        let cached = peers
            .cached("project-1", "energy-source", "1")
            .map(|p| p.identity);
        assert_eq!(cached.as_deref(), Some(first.identity.as_str()));
        assert!(peers.cached("project-1", "energy-source", "2").is_none());
        // The Secret written again (new resourceVersion, another key, deleted and made again
        // with another UID), the same kubeconfig: the same client, not a new one.
        for (key, uid, version) in [
            ("kubeconfig", "a", "1"),
            ("value", "a", "2"),
            ("value", "b", "3"),
        ] {
            let again = peers
                .client_for(&secret(key, uid, version, KUBECONFIG))
                .await
                .unwrap();
            assert_eq!(first.identity, again.identity, "{key} {uid} {version}");
            assert_eq!(peers.built(), 1, "rebuilt for {key} {uid} {version}");
        }
        assert!(peers.cached("project-1", "energy-source", "3").is_some());
        // Another server, CA or token: another client.
        let mut identities = vec![first.identity.clone()];
        for (version, changed) in [
            KUBECONFIG.replace("127.0.0.1:6443", "127.0.0.1:6444"),
            KUBECONFIG.replace("{server: ", "{certificate-authority-data: Zm9v, server: "),
            KUBECONFIG.replace("token: abc", "token: abd"),
        ]
        .into_iter()
        .enumerate()
        {
            let rebuilt = peers
                .client_for(&secret("kubeconfig", "b", &format!("1{version}"), &changed))
                .await
                .unwrap();
            assert!(!identities.contains(&rebuilt.identity), "{changed}");
            identities.push(rebuilt.identity);
        }
        assert_eq!(peers.built(), 4);
        assert_eq!(peers.len(), 1);
        peers.forget("project-1", "energy-source");
        assert_eq!(peers.len(), 0);
    }

    #[tokio::test]
    async fn a_refused_kubeconfig_drops_the_old_client() {
        let peers = PeerClients::default();
        peers
            .client_for(&secret("kubeconfig", "a", "1", KUBECONFIG))
            .await
            .unwrap();
        let hostile = KUBECONFIG.replace("{token: abc}", "{exec: {command: touch}}");
        let err = peers
            .client_for(&secret("kubeconfig", "a", "2", &hostile))
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "KubeconfigRejected");
        assert_eq!(peers.len(), 0);
    }

    #[tokio::test]
    async fn a_secret_without_a_kubeconfig_names_the_key_it_wanted() {
        let peers = PeerClients::default();
        let err = peers
            .client_for(&secret("other", "a", "1", KUBECONFIG))
            .await
            .expect_err("an error");
        assert_eq!(err.reason(), "KubeconfigMissing");
        assert!(err.to_string().contains("kubeconfig"), "{err}");
    }
}

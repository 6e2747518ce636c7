//! Peer clients: one `kube::Client` per peer cluster, keyed by the local kubeconfig Secret that
//! defines the peer (`namespace/name`). A client is reused while the Secret's `resourceVersion`
//! stays the same, rebuilt when it changes, and dropped with [`PeerClients::forget`] when the
//! Secret goes. Every sync rule that reads from a peer asks this cache; none builds its own.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::core::v1::Secret;
use kube::{Client, ResourceExt};
use xcc_kube::KubeconfigError;

/// Data keys a kubeconfig Secret may use, in the order they are tried: `kubeconfig` (the usual
/// name, cluster-registry's), `value` (Cluster API's `<cluster>-kubeconfig`), `config`.
pub const KUBECONFIG_KEYS: [&str; 3] = ["kubeconfig", "value", "config"];

/// A peer's client, and which version of its kubeconfig Secret it was built from.
#[derive(Clone)]
pub struct PeerClient {
    pub client: Client,
    /// `namespace/name@resourceVersion` of the kubeconfig Secret: changes when the client does.
    pub identity: String,
}

#[derive(Clone, Default)]
pub struct PeerClients {
    cache: Arc<Mutex<HashMap<String, PeerClient>>>,
}

/// The key of `secret` holding the kubeconfig: the first of [`KUBECONFIG_KEYS`] present, or the
/// first one (so that the error names it) when none is.
pub fn kubeconfig_key(secret: &Secret) -> &'static str {
    let data = secret.data.as_ref();
    let string_data = secret.string_data.as_ref();
    KUBECONFIG_KEYS
        .into_iter()
        .find(|k| {
            data.is_some_and(|d| d.contains_key(*k))
                || string_data.is_some_and(|d| d.contains_key(*k))
        })
        .unwrap_or(KUBECONFIG_KEYS[0])
}

fn secret_key(secret: &Secret) -> String {
    format!(
        "{}/{}",
        secret.namespace().unwrap_or_default(),
        secret.name_any()
    )
}

impl PeerClients {
    /// The client for the peer that `secret` defines; built on first use and whenever the
    /// Secret changed since.
    pub async fn client_for(&self, secret: &Secret) -> Result<PeerClient, KubeconfigError> {
        let key = secret_key(secret);
        let identity = format!("{key}@{}", secret.resource_version().unwrap_or_default());
        if let Some(cached) = self.lock().get(&key)
            && cached.identity == identity
        {
            return Ok(cached.clone());
        }
        let client = xcc_kube::client_from_secret(secret, kubeconfig_key(secret)).await?;
        let peer = PeerClient { client, identity };
        self.lock().insert(key.clone(), peer.clone());
        tracing::debug!(secret = %key, "built a peer client");
        Ok(peer)
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
        let key = format!("{namespace}/{name}");
        let identity = format!("{key}@{resource_version}");
        self.lock()
            .get(&key)
            .filter(|cached| cached.identity == identity)
            .cloned()
    }

    /// The kubeconfig Secret `namespace/name` is gone (or unusable): drop its client.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.lock().remove(&format!("{namespace}/{name}"));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PeerClient>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Backoff of the sync watches (of peers and of the local objects rules read): 250 ms doubling
/// to at most 5 s, back to 250 ms after any success. kube's default (0.8 s doubling to 30 s) is
/// kinder to a struggling API server but leaves a returning peer unnoticed for up to half a
/// minute; these watches are few (one per import) and light (one object each).
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    const MIN: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(5);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff { next: Self::MIN }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (delay * 2).min(Self::MAX);
        Some(delay)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
";

    fn secret(key: &str, resource_version: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("energy-source".into()),
                namespace: Some("project-1".into()),
                resource_version: Some(resource_version.into()),
                ..Default::default()
            },
            data: Some([(key.to_string(), ByteString(KUBECONFIG.as_bytes().to_vec()))].into()),
            ..Default::default()
        }
    }

    #[test]
    fn backoff_doubles_to_five_seconds_and_resets() {
        use kube::runtime::utils::Backoff;
        let mut backoff = WatchBackoff::default();
        let delays: Vec<u64> = backoff
            .by_ref()
            .take(7)
            .map(|d| d.as_millis() as u64)
            .collect();
        assert_eq!(delays, [250, 500, 1000, 2000, 4000, 5000, 5000]);
        backoff.reset();
        assert_eq!(backoff.next(), Some(Duration::from_millis(250)));
    }

    #[test]
    fn the_kubeconfig_key_is_the_first_present() {
        assert_eq!(kubeconfig_key(&secret("value", "1")), "value");
        assert_eq!(kubeconfig_key(&secret("config", "1")), "config");
        assert_eq!(kubeconfig_key(&secret("other", "1")), "kubeconfig");
    }

    #[tokio::test]
    async fn a_client_is_reused_until_its_secret_changes() {
        let peers = PeerClients::default();
        let first = peers.client_for(&secret("kubeconfig", "1")).await.unwrap();
        let cached = peers
            .cached("project-1", "energy-source", "1")
            .map(|p| p.identity);
        assert_eq!(cached.as_deref(), Some(first.identity.as_str()));
        assert!(peers.cached("project-1", "energy-source", "2").is_none());
        let again = peers.client_for(&secret("kubeconfig", "1")).await.unwrap();
        assert_eq!(first.identity, again.identity);
        let changed = peers.client_for(&secret("value", "2")).await.unwrap();
        assert_ne!(first.identity, changed.identity);
        assert_eq!(peers.len(), 1);
        peers.forget("project-1", "energy-source");
        assert_eq!(peers.len(), 0);
    }

    #[tokio::test]
    async fn a_secret_without_a_kubeconfig_names_the_key_it_wanted() {
        let peers = PeerClients::default();
        let err = peers
            .client_for(&secret("other", "1"))
            .await
            .err()
            .expect("an error");
        assert_eq!(err.reason(), "KubeconfigMissing");
        assert!(err.to_string().contains("kubeconfig"), "{err}");
    }
}

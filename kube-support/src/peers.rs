//! Peer clients: one `kube::Client` per peer cluster, keyed by the kubeconfig Secret that defines
//! the peer (`namespace/name`). A client is reused while the Secret's UID and `resourceVersion`
//! stay the same, rebuilt when they change, and dropped with [`PeerClients::forget`] when the
//! Secret goes. One cache serves every reconciler of a process; each client is built by the gate
//! in [`crate::trust`], so every peer of every component passes the same trust rules.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use k8s_openapi::api::core::v1::Secret;

use crate::{
    KubeconfigError,
    trust::{PeerClient, PeerTrust, kubeconfig_key, peer_client, secret_name},
};

#[derive(Clone, Default)]
pub struct PeerClients {
    trust: PeerTrust,
    cache: Arc<Mutex<HashMap<String, PeerClient>>>,
}

impl PeerClients {
    pub fn new(trust: PeerTrust) -> PeerClients {
        PeerClients {
            trust,
            cache: Arc::default(),
        }
    }

    /// The client for the peer that `secret` defines; built on first use and whenever the
    /// Secret changed since. A refused kubeconfig drops the client built from an earlier one.
    pub async fn client_for(&self, secret: &Secret) -> Result<PeerClient, KubeconfigError> {
        let key = secret_name(secret);
        if let Some(cached) = self.lock().get(&key)
            && cached.identity.ends_with(&version(secret))
        {
            return Ok(cached.clone());
        }
        match peer_client(secret, kubeconfig_key(secret), self.trust).await {
            Ok(peer) => {
                self.lock().insert(key.clone(), peer.clone());
                tracing::debug!(secret = %key, "built a peer client");
                Ok(peer)
            }
            Err(error) => {
                self.lock().remove(&key);
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
        self.lock()
            .get(&format!("{namespace}/{name}"))
            .filter(|cached| cached.identity.ends_with(&format!("/{resource_version}")))
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

/// `@uid/resourceVersion`: the end of the identity of a client built from `secret`.
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
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

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

    #[tokio::test]
    async fn a_client_is_reused_until_its_secret_changes() {
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
        let again = peers
            .client_for(&secret("kubeconfig", "a", "1", KUBECONFIG))
            .await
            .unwrap();
        assert_eq!(first.identity, again.identity);
        let changed = peers
            .client_for(&secret("value", "a", "2", KUBECONFIG))
            .await
            .unwrap();
        assert_ne!(first.identity, changed.identity);
        // Deleted and made again under the same name: another UID, another client.
        let recreated = peers
            .client_for(&secret("value", "b", "2", KUBECONFIG))
            .await
            .unwrap();
        assert_ne!(changed.identity, recreated.identity);
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

//! Watch sources shared by the reconcilers of the process. A reconciler asks for a view of a
//! kind instead of opening its own watch: today the metadata of the local Secrets, which Secret
//! replication (kubeconfig Secrets, copies, exported Secrets) and the Cluster reconciler (peer
//! kubeconfig Secrets) both follow. One metadata-only watch serves both: no Secret data crosses
//! the wire for it, and the API server holds one watch instead of one per reconciler.
//!
//! ```text
//!   API server ──watch (metadata)──► store (read by any reconciler)
//!                                    └─► broadcast: Applied / Deleted / Listed ──► each subscriber
//! ```
//!
//! The store is updated before a change is announced. A subscriber that falls behind the
//! broadcast gets `Missed`: it must then look at everything again.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use tokio::sync::broadcast;
use xcc_kube::PeerClients;

/// A change of a local Secret, as subscribers see it.
#[derive(Clone, Debug)]
pub enum SecretChange {
    Applied(Arc<PartialObjectMeta<Secret>>),
    Deleted(Arc<PartialObjectMeta<Secret>>),
    /// A full list arrived (after a start or a broken watch); reconcilers relist their own
    /// kinds at the same time.
    Listed,
    /// This subscriber fell behind and missed changes: it must look at everything again.
    Missed,
}

impl SecretChange {
    /// `(namespace, name)` of the Secret that changed, if one did.
    pub fn key(&self) -> Option<(String, String)> {
        match self {
            SecretChange::Applied(s) | SecretChange::Deleted(s) => {
                Some((s.namespace().unwrap_or_default(), s.name_any()))
            }
            SecretChange::Listed | SecretChange::Missed => None,
        }
    }
}

/// Changes a burst may queue per subscriber before it is told to look at everything again.
const CAPACITY: usize = 4096;

/// The metadata of every local Secret: a store and a feed of changes.
#[derive(Clone)]
pub struct LocalSecrets {
    store: Store<PartialObjectMeta<Secret>>,
    listed: Arc<AtomicBool>,
    changes: broadcast::Sender<SecretChange>,
}

impl LocalSecrets {
    /// Starts the one watch. A deleted Secret's peer client is dropped from `peers` here, for
    /// every reconciler at once.
    pub fn start(
        client: Client,
        peers: PeerClients,
    ) -> (LocalSecrets, tokio::task::JoinHandle<()>) {
        let (store, writer) = reflector::store::<PartialObjectMeta<Secret>>();
        let listed = Arc::new(AtomicBool::new(false));
        let (changes, _) = broadcast::channel(CAPACITY);
        let source = LocalSecrets {
            store,
            listed: listed.clone(),
            changes: changes.clone(),
        };
        let api = Api::<PartialObjectMeta<Secret>>::all(client);
        let events = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()).backoff(xcc_kube::Backoff::local()),
        );
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                let change = match event {
                    Ok(watcher::Event::Apply(secret)) => SecretChange::Applied(Arc::new(secret)),
                    Ok(watcher::Event::Delete(secret)) => {
                        peers.forget(&secret.namespace().unwrap_or_default(), &secret.name_any());
                        SecretChange::Deleted(Arc::new(secret))
                    }
                    Ok(watcher::Event::InitDone) => {
                        listed.store(true, Ordering::Release);
                        SecretChange::Listed
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                    Err(error) => {
                        tracing::warn!(%error, "watch of local Secrets failed; retrying");
                        continue;
                    }
                };
                // No subscriber yet is fine: they read the store when they start.
                let _ = changes.send(change);
            }
        });
        (source, task)
    }

    /// The Secrets' metadata, as last listed and watched.
    pub fn store(&self) -> Store<PartialObjectMeta<Secret>> {
        self.store.clone()
    }

    /// Set once the store holds the first full list.
    pub fn listed(&self) -> Arc<AtomicBool> {
        self.listed.clone()
    }

    /// Every change from now on, in order; `Missed` when the subscriber fell behind.
    pub fn changes(&self) -> impl futures::Stream<Item = SecretChange> + Send + use<> {
        let receiver = self.changes.subscribe();
        futures::stream::unfold(receiver, |mut receiver| async move {
            let change = match receiver.recv().await {
                Ok(change) => change,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "a Secret subscriber fell behind; it looks again");
                    SecretChange::Missed
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            Some((change, receiver))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(namespace: &str, name: &str) -> Arc<PartialObjectMeta<Secret>> {
        let mut meta = PartialObjectMeta::<Secret>::default();
        meta.metadata.namespace = Some(namespace.into());
        meta.metadata.name = Some(name.into());
        Arc::new(meta)
    }

    #[tokio::test]
    async fn every_subscriber_sees_every_change_and_a_laggard_is_told_to_relist() {
        let (changes, _) = broadcast::channel(2);
        let source = LocalSecrets {
            store: reflector::store::<PartialObjectMeta<Secret>>().0,
            listed: Arc::default(),
            changes,
        };
        let mut first = std::pin::pin!(source.changes());
        let mut second = std::pin::pin!(source.changes());
        source
            .changes
            .send(SecretChange::Applied(secret("project-1", "energy-source")))
            .unwrap();
        for subscriber in [&mut first, &mut second] {
            let change = subscriber.next().await.unwrap();
            assert_eq!(
                change.key(),
                Some(("project-1".to_string(), "energy-source".to_string()))
            );
        }
        // Three changes into a channel of two: the second subscriber missed one.
        for name in ["a", "b", "c"] {
            source
                .changes
                .send(SecretChange::Deleted(secret("project-1", name)))
                .unwrap();
        }
        assert!(matches!(second.next().await.unwrap(), SecretChange::Missed));
    }
}

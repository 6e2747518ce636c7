//! The local Secrets' metadata as a typed store and a feed of changes, on the process's one
//! watch of local Secrets.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Client, ResourceExt,
    api::{ApiResource, DynamicObject},
    core::{GroupVersionKind, PartialObjectMeta},
    runtime::{
        reflector::{self, Store},
        watcher,
    },
};
use tokio::sync::broadcast;
use xcc_kube::PeerClients;

use super::{CAPACITY, Change, Detail, Lagged, SourceId, Sources, broadcast_stream};

/// A change of a local Secret, as Secret replication and the Cluster reconciler see it.
#[derive(Clone, Debug)]
pub enum SecretChange {
    /// A Secret was created or changed.
    Applied(Arc<PartialObjectMeta<Secret>>),
    /// A Secret was deleted.
    Deleted(Arc<PartialObjectMeta<Secret>>),
    /// A full list arrived (after a start or a broken watch); reconcilers relist their own
    /// kinds at the same time.
    Listed,
    /// This subscriber fell behind and missed changes: it must look at everything again.
    Missed,
}

impl From<Lagged> for SecretChange {
    fn from(_: Lagged) -> SecretChange {
        SecretChange::Missed
    }
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

/// The group, version and kind of a Secret (`v1`, core group).
pub fn secret_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "Secret")
}

/// The metadata of every local Secret, as a typed store and a feed of changes, on the process's
/// one watch of local Secrets (a metadata view of it; the resource sync engine may make that
/// watch carry whole Secrets, which this view does not need).
#[derive(Clone)]
pub struct LocalSecrets {
    store: Store<PartialObjectMeta<Secret>>,
    listed: Arc<AtomicBool>,
    changes: broadcast::Sender<SecretChange>,
}

impl LocalSecrets {
    /// Subscribes to the local Secret source of `sources`. A deleted Secret's peer client is
    /// dropped from `peers` here, for every reconciler at once.
    pub fn start(
        sources: &Sources,
        client: Client,
        peers: PeerClients,
    ) -> (LocalSecrets, crate::task::Owned<()>) {
        let view = sources.view(
            SourceId::local(secret_gvk()),
            client,
            &ApiResource::erase::<Secret>(&()),
            Detail::Metadata,
        );
        let mut writer = reflector::store::Writer::<PartialObjectMeta<Secret>>::default();
        let listed = Arc::new(AtomicBool::new(false));
        let (changes, _) = broadcast::channel(CAPACITY);
        let source = LocalSecrets {
            store: writer.as_reader(),
            listed: listed.clone(),
            changes: changes.clone(),
        };
        let task = crate::task::spawn_owned(async move {
            let mut feed = std::pin::pin!(view.changes());
            while let Some(change) = feed.next().await {
                let change = match change {
                    Change::Applied(object) => {
                        let secret = typed_meta(&object);
                        writer.apply_watcher_event(&watcher::Event::Apply(secret.clone()));
                        SecretChange::Applied(Arc::new(secret))
                    }
                    Change::Deleted(object) => {
                        let secret = typed_meta(&object);
                        writer.apply_watcher_event(&watcher::Event::Delete(secret.clone()));
                        peers.forget(&secret.namespace().unwrap_or_default(), &secret.name_any());
                        SecretChange::Deleted(Arc::new(secret))
                    }
                    // The typed store is rebuilt from the shared one.
                    Change::Listed | Change::Missed => {
                        writer.apply_watcher_event(&watcher::Event::Init);
                        for object in view.store().state() {
                            writer.apply_watcher_event(&watcher::Event::InitApply(typed_meta(
                                &object,
                            )));
                        }
                        writer.apply_watcher_event(&watcher::Event::InitDone);
                        listed.store(true, Ordering::Release);
                        if matches!(change, Change::Listed) {
                            SecretChange::Listed
                        } else {
                            SecretChange::Missed
                        }
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
    pub fn changes(&self) -> impl Stream<Item = SecretChange> + Send + use<> {
        broadcast_stream(self.changes.subscribe(), &SourceId::local(secret_gvk()))
    }
}

/// The metadata of a Secret from the shared source.
fn typed_meta(object: &DynamicObject) -> PartialObjectMeta<Secret> {
    PartialObjectMeta {
        types: object.types.clone(),
        metadata: object.metadata.clone(),
        ..Default::default()
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

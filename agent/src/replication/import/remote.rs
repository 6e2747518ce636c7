//! An import's watch of its one remote Secret: what it holds (listing, known, unknown), kept
//! before each event wakes the import, so that a reconcile takes the remote Secret from it instead
//! of reading it while the watch is listed and connected.

use std::time::Instant;

use dashmap::DashMap;

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    runtime::{reflector::ObjectRef, watcher},
};
use xcc_sync::{sources::Schedule, wakers::WakeWatch};

use super::{Context, copy::Remote};
use crate::replication::api::SecretImport;
use xcc_kube::PeerClient;

/// What an import's watch of its remote Secret holds, for the watch named `identity`.
#[derive(Clone, Debug)]
pub struct Seen {
    pub(super) identity: String,
    pub(super) state: SeenState,
}

#[derive(Clone, Debug)]
pub(super) enum SeenState {
    /// Listing since the instant given: the object the list has delivered so far.
    Listing(Option<Box<Secret>>, Instant),
    /// The watch is current: the remote Secret as it is (`None`: there is none).
    Known(Option<Box<Secret>>),
    /// The watch failed and is retrying: only a read tells.
    Unknown,
}

impl Context {
    /// The remote Secret as the import's current watch `identity` holds it, when that watch is
    /// listed and connected: a wake by that watch then costs no read of the service cluster.
    pub(super) fn known_remote(
        &self,
        import: &ObjectRef<SecretImport>,
        identity: &str,
    ) -> Option<Remote> {
        let seen = self.seen.get(import)?;
        match seen.value() {
            Seen {
                identity: id,
                state: SeenState::Known(known),
            } if id == identity => Some(match known {
                Some(secret) => Remote::Found(secret.clone()),
                None => Remote::NotFound,
            }),
            _ => None,
        }
    }

    /// Since when the import's current watch `identity` has been listing, if it is.
    pub(super) fn listing_since(
        &self,
        import: &ObjectRef<SecretImport>,
        identity: &str,
    ) -> Option<Instant> {
        let seen = self.seen.get(import)?;
        match seen.value() {
            Seen {
                identity: id,
                state: SeenState::Listing(_, since),
            } if id == identity => Some(*since),
            _ => None,
        }
    }

    /// Whether watches through `server` stream their first list.
    pub(super) fn streams_lists(&self, server: &str) -> bool {
        !self.list_first.contains(server)
    }

    /// Names the watch of remote Secret `namespace/name` through `peer` (and how it lists).
    pub(super) fn remote_identity(&self, peer: &PeerClient, namespace: &str, name: &str) -> String {
        let listing = if self.streams_lists(&peer.server) {
            "streamed"
        } else {
            "listed"
        };
        format!("{} {namespace}/{name} {listing}", peer.identity)
    }

    pub(super) fn forget_remote(&self, import: &ObjectRef<SecretImport>) {
        self.seen.remove(import);
    }
}

/// Wakes `import` on every change of the one remote Secret it reads (the exported Role allows
/// nothing wider: `resourceNames` admits a watch only with a `metadata.name` field selector), and
/// on every failure of that watch, so that the status says RemoteUnreachable while the service
/// cluster is away and recovers as soon as it is back.
pub(super) fn watch_remote(
    ctx: &Context,
    import: ObjectRef<SecretImport>,
    peer: &PeerClient,
    namespace: &str,
    name: &str,
) {
    let api: Api<Secret> = Api::namespaced(peer.client.clone(), namespace);
    let streamed = ctx.streams_lists(&peer.server);
    let mut config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    if streamed {
        // One request instead of a list and a watch.
        config = config.streaming_lists();
    }
    let identity = ctx.remote_identity(peer, namespace, name);
    {
        // A watch about to start is listing: a reconcile leaves it that time.
        let mut seen = ctx.seen.entry(import.clone()).or_insert_with(|| Seen {
            identity: identity.clone(),
            state: SeenState::Listing(None, Instant::now()),
        });
        if seen.identity != identity {
            *seen = Seen {
                identity: identity.clone(),
                state: SeenState::Listing(None, Instant::now()),
            };
        }
    }
    let seen = ctx.seen.clone();
    let (key, id) = (import.clone(), identity.clone());
    let (list_first, server) = (ctx.list_first.clone(), peer.server.clone());
    let watch = WakeWatch::new(
        api,
        config,
        Schedule::Peer,
        format!("remote Secret {namespace}/{name}"),
    )
    .inspect(move |event| {
            if streamed && refuses_streamed_lists(event) {
                // The failure wakes the import, whose reconcile then starts a listing watch.
                tracing::info!(%server, "the service cluster does not stream lists; its watches list first");
                list_first.insert(server.clone());
            }
            record(&seen, &key, &id, event)
        });
    ctx.remote.ensure(import, identity, watch);
}

/// Whether a watch's failure says that its API server does not stream lists: it rejects the
/// request's `sendInitialEvents` (older servers reject its `resourceVersionMatch` in a watch).
fn refuses_streamed_lists(event: &Result<watcher::Event<Secret>, watcher::Error>) -> bool {
    matches!(
        event,
        Err(watcher::Error::WatchStartFailed(kube::Error::Api(status)))
            if status.code == 400 || status.code == 422
    )
}

/// Keeps what the watch `identity` of `import`'s remote Secret holds, before its event wakes the
/// import.
fn record(
    seen: &DashMap<ObjectRef<SecretImport>, Seen>,
    import: &ObjectRef<SecretImport>,
    identity: &str,
    event: &Result<watcher::Event<Secret>, watcher::Error>,
) {
    let mut entry = seen.entry(import.clone()).or_insert_with(|| Seen {
        identity: identity.to_string(),
        state: SeenState::Unknown,
    });
    if entry.identity != identity {
        *entry = Seen {
            identity: identity.to_string(),
            state: SeenState::Unknown,
        };
    }
    entry.state = match (
        event,
        std::mem::replace(&mut entry.state, SeenState::Unknown),
    ) {
        (Ok(watcher::Event::Init), SeenState::Listing(_, since)) => SeenState::Listing(None, since),
        (Ok(watcher::Event::Init), _) => SeenState::Listing(None, Instant::now()),
        (Ok(watcher::Event::InitApply(secret)), SeenState::Listing(_, since)) => {
            SeenState::Listing(Some(Box::new(secret.clone())), since)
        }
        (Ok(watcher::Event::InitDone), SeenState::Listing(listed, _)) => SeenState::Known(listed),
        (Ok(watcher::Event::Apply(secret)), _) => SeenState::Known(Some(Box::new(secret.clone()))),
        (Ok(watcher::Event::Delete(_)), _) => SeenState::Known(None),
        // Out of order (never from kube's watcher) or failed: only a read tells.
        _ => SeenState::Unknown,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::import::copy::tests::{api_error, remote};
    use kube::ResourceExt;

    #[test]
    fn a_listed_watch_tells_the_remote_secret_and_a_failed_one_does_not() {
        let seen = DashMap::new();
        let import = ObjectRef::<SecretImport>::new("dumbo").within("project-1");
        let state = |seen: &DashMap<ObjectRef<SecretImport>, Seen>, identity: &str| {
            seen.get(&import)
                .filter(|s| s.identity == identity)
                .map(|s| match &s.state {
                    SeenState::Known(Some(secret)) => {
                        format!("known {}", secret.resource_version().unwrap_or_default())
                    }
                    SeenState::Known(None) => "known absent".to_string(),
                    SeenState::Listing(..) => "listing".to_string(),
                    SeenState::Unknown => "unknown".to_string(),
                })
        };
        let mut newer = remote();
        newer.metadata.resource_version = Some("43".into());
        let events = [
            (Ok(watcher::Event::Init), "listing"),
            (Ok(watcher::Event::InitApply(remote())), "listing"),
            (Ok(watcher::Event::InitDone), "known 42"),
            (Ok(watcher::Event::Apply(newer.clone())), "known 43"),
            (Ok(watcher::Event::Delete(newer)), "known absent"),
            (Err(watcher::Error::NoResourceVersion), "unknown"),
            (Ok(watcher::Event::Init), "listing"),
            (Ok(watcher::Event::InitDone), "known absent"),
        ];
        for (event, want) in events {
            record(&seen, &import, "one", &event);
            assert_eq!(state(&seen, "one").as_deref(), Some(want));
        }
        // A new watch (another kubeconfig) starts from nothing known.
        record(&seen, &import, "two", &Ok(watcher::Event::Init));
        assert_eq!(state(&seen, "one"), None);
        assert_eq!(state(&seen, "two").as_deref(), Some("listing"));
    }

    #[test]
    fn a_watch_rejected_as_invalid_falls_back_to_list_and_watch() {
        let failed = |error: kube::Error| Err(watcher::Error::WatchStartFailed(error));
        // What an API server without streamed lists answers: 422 (or 400 from a proxy).
        assert!(refuses_streamed_lists(&failed(api_error(422))));
        assert!(refuses_streamed_lists(&failed(api_error(400))));
        // A refusal of the Secret itself, an outage, or a failed list say nothing about it.
        assert!(!refuses_streamed_lists(&failed(api_error(403))));
        assert!(!refuses_streamed_lists(&failed(api_error(503))));
        assert!(!refuses_streamed_lists(&Err(
            watcher::Error::InitialListFailed(api_error(422))
        )));
        assert!(!refuses_streamed_lists(&Ok(watcher::Event::Init)));
    }
}

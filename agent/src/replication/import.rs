//! SecretImport: copies one Secret of the service cluster (same namespace, same name) into the
//! local cluster and keeps it current.
//!
//! A watch of that one Secret on the peer wakes the import on every change, so a change there
//! lands here within the watch latency, without polling. While that watch is listed and
//! connected, a reconcile takes the remote Secret from it; otherwise (the watch starting, or
//! failing) it reads the Secret afresh (a GET through the peer client), so the status always says
//! what the service cluster answers now.
//! The copy is removed when the import goes (finalizer) or when the service cluster says the
//! Secret is gone (404); never because the service cluster cannot be reached or refuses (403).

use futures::StreamExt as _;
use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::ObjectMeta,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        controller::Action,
        events::{Event as KubeEvent, EventType, Recorder},
        finalizer::{Event as FinalizerEvent, finalizer},
        reflector::{ObjectRef, Store},
        watcher,
    },
};

use super::{Error, FINALIZER, Reason, Verdict, api::SecretImport, finalized, write_status};
use crate::{
    sink::{self, LocalWriter, ORIGIN_ANNOTATION, Written},
    wakers::Wakers,
};
use xcc_kube::{PeerClient, PeerClients};

pub struct Context {
    pub client: Client,
    pub peers: PeerClients,
    pub recorder: Recorder,
    pub remote: Wakers<SecretImport>,
    /// Metadata of every local Secret, from the watch that wakes the imports.
    pub local: Store<PartialObjectMeta<Secret>>,
    /// Per copy (by origin: kubeconfig Secret, namespace, name): the remote Secret's resourceVersion it was last written from
    /// and the local resourceVersion that write left. While both still hold, the copy is current
    /// and a reconcile writes nothing and reads nothing locally: the wakes that follow an
    /// import's own writes (its status, its copy) cost one read of the remote Secret only.
    pub written: Mutex<HashMap<String, (String, String)>>,
    /// Set once `local` holds the first full list.
    pub local_listed: Arc<std::sync::atomic::AtomicBool>,
    /// Per import (by uid): what its status was last given.
    pub said: Mutex<HashMap<String, Said>>,
    /// Where the copies' writes are counted.
    pub counted: crate::sink::Counted,
    /// The imports given the finalizer a moment ago.
    pub finalizer_asked: super::FinalizerAsked,
    /// Per import: what its watch of the remote Secret holds ([`Seen`]).
    pub seen: Arc<Mutex<HashMap<ObjectRef<SecretImport>, Seen>>>,
    /// Peer API servers (by URL) that refused a streamed list (`sendInitialEvents`, Kubernetes
    /// 1.32 and 1.34 on by default): their watches list first, one request more.
    pub list_first: Arc<Mutex<HashSet<String>>>,
}

/// What an import's watch of its remote Secret holds, for the watch named `identity`.
#[derive(Clone, Debug)]
pub struct Seen {
    identity: String,
    state: SeenState,
}

#[derive(Clone, Debug)]
enum SeenState {
    /// Listing since the instant given: the object the list has delivered so far.
    Listing(Option<Box<Secret>>, Instant),
    /// The watch is current: the remote Secret as it is (`None`: there is none).
    Known(Option<Box<Secret>>),
    /// The watch failed and is retrying: only a read tells.
    Unknown,
}

/// What an import's status was last set to.
#[derive(Debug, PartialEq, Eq)]
pub struct Said {
    generation: Option<i64>,
    verdict: Verdict,
}

impl Context {
    fn local_meta(&self, namespace: &str, name: &str) -> Option<Arc<PartialObjectMeta<Secret>>> {
        self.local.get(&ObjectRef::new(name).within(namespace))
    }

    /// Whether the metadata watch has delivered its first full list.
    fn local_ready(&self) -> bool {
        self.local_listed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The remote Secret as the import's current watch `identity` holds it, when that watch is
    /// listed and connected: a wake by that watch then costs no read of the service cluster.
    fn known_remote(&self, import: &ObjectRef<SecretImport>, identity: &str) -> Option<Remote> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match seen.get(import) {
            Some(Seen {
                identity: id,
                state: SeenState::Known(known),
            }) if id == identity => Some(match known {
                Some(secret) => Remote::Found(secret.clone()),
                None => Remote::NotFound,
            }),
            _ => None,
        }
    }

    /// Since when the import's current watch `identity` has been listing, if it is.
    fn listing_since(&self, import: &ObjectRef<SecretImport>, identity: &str) -> Option<Instant> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match seen.get(import) {
            Some(Seen {
                identity: id,
                state: SeenState::Listing(_, since),
            }) if id == identity => Some(*since),
            _ => None,
        }
    }

    /// Whether watches through `server` stream their first list.
    fn streams_lists(&self, server: &str) -> bool {
        !self
            .list_first
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(server)
    }

    /// Names the watch of remote Secret `namespace/name` through `peer` (and how it lists).
    fn remote_identity(&self, peer: &PeerClient, namespace: &str, name: &str) -> String {
        let listing = if self.streams_lists(&peer.server) {
            "streamed"
        } else {
            "listed"
        };
        format!("{} {namespace}/{name} {listing}", peer.identity)
    }

    fn forget_remote(&self, import: &ObjectRef<SecretImport>) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(import);
    }

    fn said(&self) -> std::sync::MutexGuard<'_, HashMap<String, Said>> {
        self.said.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn written(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, String)>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the local copy `namespace/name` is the one written from `origin` at remote
    /// version `remote_version`, untouched since.
    fn current(&self, origin: &str, namespace: &str, name: &str, remote_version: &str) -> bool {
        let Some(local) = self.local_meta(namespace, name) else {
            return false;
        };
        self.written().get(origin).is_some_and(|(remote, written)| {
            remote == remote_version && local.resource_version().as_deref() == Some(written)
        })
    }
}

/// The local copy of `remote`: same type and data, named `namespace/name`, annotated with its
/// origin. Nothing else of the remote object (labels, annotations, owners) is carried over.
pub fn desired_secret(remote: &Secret, namespace: &str, name: &str, origin: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            annotations: Some([(ORIGIN_ANNOTATION.to_string(), origin.to_string())].into()),
            ..Default::default()
        },
        type_: remote.type_.clone(),
        // Always present, so that a key removed at the source is removed here.
        data: Some(remote.data.clone().unwrap_or_default()),
        immutable: None,
        string_data: None,
    }
}

/// Whether a local copy of `namespace/source` with origin `previous` (not ours) was left by a
/// SecretImport that no longer writes it: the origin names the same Secret, and no other import
/// (`claims`: the origins the other imports of the namespace write) would write it.
pub fn orphaned_copy(previous: &str, namespace: &str, source: &str, claims: &[String]) -> bool {
    previous.ends_with(&format!("/{namespace}/{source}"))
        && !claims.iter().any(|claim| claim == previous)
}

/// What the service cluster answered for the remote Secret.
#[derive(Debug)]
pub enum Remote {
    Found(Box<Secret>),
    NotFound,
    Forbidden(String),
    Unreachable(String),
}

/// Longest wait for the service cluster's answer, so that a peer that accepts connections and
/// never answers holds up neither this import nor the others.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(5);

pub fn classify(result: Result<Option<Secret>, kube::Error>) -> Remote {
    match result {
        Ok(Some(secret)) => Remote::Found(Box::new(secret)),
        Ok(None) => Remote::NotFound,
        Err(kube::Error::Api(status)) if status.code == 401 || status.code == 403 => {
            Remote::Forbidden(xcc_kube::bounded(&status.message))
        }
        Err(error) => Remote::Unreachable(xcc_kube::bounded(&error)),
    }
}

pub async fn reconcile(import: Arc<SecretImport>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = import.namespace().unwrap_or_default();
    if let Some(wait) = ctx.finalizer_asked.stale(&*import) {
        return Ok(Action::requeue(wait));
    }
    // A new import: its watch of the remote Secret starts listing while the finalizer is being
    // written, so that the reconcile which follows finds the remote Secret already listed.
    if import.metadata.deletion_timestamp.is_none()
        && !import.finalizers().iter().any(|f| f == FINALIZER)
        && let Ok(peer) = peer_of(&import, &ctx).await
        && !matches!(
            ctx.peers.reach(&peer.server),
            xcc_kube::Reach::Silent { .. }
        )
    {
        let key = ObjectRef::from_obj(&*import);
        watch_remote(&ctx, key, &peer, &namespace, &import.spec.secret.name);
    }
    let api: Api<SecretImport> = Api::namespaced(ctx.client.clone(), &namespace);
    ctx.finalizer_asked.asking(&*import);
    finalized(
        finalizer(&api, FINALIZER, import, |event| async {
            match event {
                FinalizerEvent::Apply(import) => apply(&api, &import, &ctx).await,
                FinalizerEvent::Cleanup(import) => cleanup(&import, &ctx).await,
            }
        })
        .await,
    )
}

pub fn error_policy(import: Arc<SecretImport>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.counted.failed(error);
    tracing::warn!(
        namespace = %import.namespace().unwrap_or_default(),
        import = %import.name_any(),
        %error,
        "SecretImport reconcile failed"
    );
    Action::requeue(Duration::from_secs(5))
}

async fn apply(
    api: &Api<SecretImport>,
    import: &SecretImport,
    ctx: &Context,
) -> Result<Action, Error> {
    let namespace = import.namespace().unwrap_or_default();
    let spec_changed = import
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .is_some_and(|seen| Some(seen) != import.metadata.generation);
    if spec_changed {
        sweep_orphans(&namespace, ctx).await?;
    }
    let verdict = match replicate(import, ctx).await {
        Outcome::Settled(verdict) => verdict,
        Outcome::AwaitList(wait) => return Ok(Action::requeue(wait)),
    };
    let name = import.name_any();
    // The object a wake hands over can predate this reconciler's own last status write (a wake
    // by the copy it just wrote races the status event): what was last written is remembered,
    // so it is neither written nor announced twice.
    let said = Said {
        generation: import.metadata.generation,
        verdict: verdict.clone(),
    };
    let key = import.uid().unwrap_or_default();
    let reason_changed = if ctx.said().get(&key) == Some(&said) {
        false
    } else {
        let changed = write_status(api, import, import.status.as_ref(), &verdict).await?;
        ctx.said().insert(key, said);
        changed
    };
    if reason_changed {
        if verdict.ready {
            tracing::info!(%namespace, import = %name, secret = %import.spec.secret.name, "Secret replicated");
        } else {
            tracing::info!(%namespace, import = %name, reason = %verdict.reason, message = %verdict.message, "SecretImport not ready");
        }
        if verdict.reason == Reason::Conflict || verdict.reason == Reason::KubeconfigRejected {
            let event = KubeEvent {
                type_: EventType::Warning,
                reason: verdict.reason.to_string(),
                note: Some(verdict.message.clone()),
                action: "Replicate".into(),
                secondary: None,
            };
            if let Err(error) = ctx.recorder.publish(&event, &import.object_ref(&())).await {
                tracing::debug!(%namespace, import = %name, %error, "could not publish an Event");
            }
        }
    }
    Ok(Action::requeue(super::requeue(&verdict)))
}

/// What one look at an import settles.
#[derive(Debug)]
enum Outcome {
    /// The status to give it.
    Settled(Verdict),
    /// Nothing yet: the import's own watch of the remote Secret is listing, and the end of that
    /// list wakes the import (or, at the latest, this long from now it reads the Secret itself).
    AwaitList(Duration),
}

/// How long a reconcile leaves the first list of an import's remote watch to finish before it
/// reads the remote Secret itself: the list costs the service cluster one request, a read a
/// second.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(2);

async fn replicate(import: &SecretImport, ctx: &Context) -> Outcome {
    let namespace = import.namespace().unwrap_or_default();
    let key = ObjectRef::from_obj(import);
    let local: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let kubeconfig_name = &import.spec.remote_kubeconfig.name;
    let source = &import.spec.secret.name;
    let peer = match peer_of(import, ctx).await {
        Ok(peer) => peer,
        Err(verdict) => return Outcome::Settled(verdict),
    };
    watch_remote(ctx, key.clone(), &peer, &namespace, source);
    // A server the prober found silent is not asked again here: the import says so at once and
    // keeps its copy, and no reconcile slot waits out a deadline on it.
    if let xcc_kube::Reach::Silent { error } = ctx.peers.reach(&peer.server) {
        return Outcome::Settled(
            Verdict::not(
                Reason::RemoteUnreachable,
                unreachable_message(&namespace, kubeconfig_name, &error),
            )
            .through(&peer),
        );
    }
    let identity = ctx.remote_identity(&peer, &namespace, source);
    if let Some(since) = ctx.listing_since(&key, &identity) {
        let waited = since.elapsed();
        if waited < FIRST_LIST_WAIT {
            return Outcome::AwaitList(FIRST_LIST_WAIT - waited);
        }
    }
    Outcome::Settled(copy_from(import, ctx, &peer, local).await.through(&peer))
}

/// The client for the import's service cluster, from its kubeconfig Secret (through the peer
/// cache), or the verdict that says why there is none; then the import's remote watch is
/// stopped, and its copy left alone.
async fn peer_of(import: &SecretImport, ctx: &Context) -> Result<PeerClient, Verdict> {
    let namespace = import.namespace().unwrap_or_default();
    let key = ObjectRef::from_obj(import);
    let kubeconfig_name = &import.spec.remote_kubeconfig.name;
    let cached = ctx
        .local_meta(&namespace, kubeconfig_name)
        .and_then(|m| m.resource_version())
        .and_then(|version| ctx.peers.cached(&namespace, kubeconfig_name, &version));
    if let Some(peer) = cached {
        return Ok(peer);
    }
    let local: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let secret = match local.get_opt(kubeconfig_name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            ctx.peers.forget(&namespace, kubeconfig_name);
            ctx.remote.stop(&key);
            ctx.forget_remote(&key);
            return Err(Verdict::not(
                Reason::KubeconfigMissing,
                format!(
                    "Secret {namespace}/{kubeconfig_name} (spec.remoteKubeconfig) does not exist; \
                     create it with a kubeconfig for the service cluster under key \"kubeconfig\""
                ),
            ));
        }
        Err(error) => {
            return Err(Verdict::not(
                Reason::WriteFailed,
                format!("cannot read Secret {namespace}/{kubeconfig_name}: {error}"),
            ));
        }
    };
    ctx.peers.client_for(&secret).await.map_err(|error| {
        // Whatever the cause (a refused kubeconfig among them), the copy is left alone.
        ctx.remote.stop(&key);
        ctx.forget_remote(&key);
        Verdict::not(error.reason(), error.to_string())
    })
}

fn unreachable_message(namespace: &str, kubeconfig_name: &str, error: &str) -> String {
    format!(
        "cannot reach the service cluster through Secret {namespace}/{kubeconfig_name}: {error}; \
         the local copy is kept"
    )
}

/// Brings the local copy of the import's Secret in line with the service cluster's, read
/// through `peer`.
async fn copy_from(
    import: &SecretImport,
    ctx: &Context,
    peer: &PeerClient,
    local: Api<Secret>,
) -> Verdict {
    let namespace = import.namespace().unwrap_or_default();
    let kubeconfig_name = &import.spec.remote_kubeconfig.name;
    let source = &import.spec.secret.name;
    let origin = sink::origin(kubeconfig_name, &namespace, source);
    let read = Api::<Secret>::namespaced(peer.client.clone(), &namespace);
    let watched = ctx.known_remote(
        &ObjectRef::from_obj(import),
        &ctx.remote_identity(peer, &namespace, source),
    );
    let remote = match watched {
        Some(remote) => remote,
        None => match tokio::time::timeout(REMOTE_TIMEOUT, read.get_opt(source)).await {
            Ok(result) => classify(result),
            Err(_) => Remote::Unreachable(format!("no answer within {REMOTE_TIMEOUT:?}")),
        },
    };
    if let Remote::Found(remote) = &remote
        && ctx.current(
            &origin,
            &namespace,
            source,
            &remote.resource_version().unwrap_or_default(),
        )
    {
        return Verdict::ok(
            Reason::Replicated,
            format!("Secret {namespace}/{source} is a copy of the service cluster's"),
        );
    }
    // The metadata watch has every local Secret: when it has none of that name, there is none
    // (the write that follows is not forced, so one made meanwhile is never overwritten).
    let known_absent = ctx.local_ready() && ctx.local_meta(&namespace, source).is_none();
    let current = match if known_absent {
        Ok(None)
    } else {
        local.get_opt(source).await
    } {
        Ok(current) => current,
        Err(error) => {
            return Verdict::not(
                Reason::WriteFailed,
                format!("cannot read the local Secret {namespace}/{source}: {error}"),
            );
        }
    };
    let writer = LocalWriter::new(local, ctx.counted.clone());
    match remote {
        Remote::Unreachable(error) => Verdict::not(
            Reason::RemoteUnreachable,
            unreachable_message(&namespace, kubeconfig_name, &error),
        ),
        Remote::Forbidden(message) => Verdict::not(
            Reason::Forbidden,
            format!(
                "the service cluster refuses to let the kubeconfig of Secret \
                 {namespace}/{kubeconfig_name} read Secret {namespace}/{source} ({message}); \
                 is there a SecretExport for it? The local copy is kept"
            ),
        ),
        Remote::NotFound => {
            let removed = match &current {
                Some(current) => writer.delete(current, &origin).await,
                None => Ok(false),
            };
            match removed {
                Ok(removed) => {
                    if removed {
                        tracing::info!(%namespace, secret = %source, "source Secret gone; local copy deleted");
                    }
                    Verdict::not(
                        Reason::SecretNotFound,
                        format!(
                            "Secret {namespace}/{source} does not exist on the service cluster"
                        ),
                    )
                }
                Err(error) => Verdict::not(
                    Reason::WriteFailed,
                    format!("cannot delete the local copy {namespace}/{source}: {error}"),
                ),
            }
        }
        Remote::Found(remote) => {
            let desired = desired_secret(&remote, &namespace, source, &origin);
            // A Secret's type cannot change in place: a copy of the wrong type is replaced.
            let mut current = current;
            if let Some(copy) = &current
                && copy.type_ != desired.type_
                && sink::ownership(Some(copy), &origin) == sink::Ownership::Ours
            {
                match writer.delete(copy, &origin).await {
                    Ok(_) => current = None,
                    Err(error) => {
                        return Verdict::not(
                            Reason::WriteFailed,
                            format!("cannot replace the local copy {namespace}/{source}: {error}"),
                        );
                    }
                }
            }
            // A copy written for this Secret through another kubeconfig Secret that no other
            // import uses any more (this import's spec.remoteKubeconfig was changed) is adopted.
            let mut adopt = false;
            if let Some(copy) = &current
                && let sink::Ownership::Foreign {
                    origin: Some(previous),
                } = sink::ownership(Some(copy), &origin)
            {
                let imports: Api<SecretImport> = Api::namespaced(ctx.client.clone(), &namespace);
                let claims = match imports.list(&Default::default()).await {
                    Ok(list) => list
                        .items
                        .iter()
                        .filter(|other| other.name_any() != import.name_any())
                        .map(|other| {
                            sink::origin(
                                &other.spec.remote_kubeconfig.name,
                                &namespace,
                                &other.spec.secret.name,
                            )
                        })
                        .collect(),
                    Err(_) => vec![previous.clone()],
                };
                if orphaned_copy(&previous, &namespace, source, &claims) {
                    tracing::info!(%namespace, secret = %source, %previous, "adopting a copy no other SecretImport claims");
                    adopt = true;
                }
            }
            let written = if adopt {
                writer.adopt(&desired).await
            } else {
                writer.apply(&desired, current.as_ref()).await
            };
            if let Ok(Written::Applied(version) | Written::Unchanged(version)) = &written {
                ctx.written().insert(
                    origin.clone(),
                    (
                        remote.resource_version().unwrap_or_default(),
                        version.clone().unwrap_or_default(),
                    ),
                );
            }
            match written {
                Ok(Written::Applied(_) | Written::Unchanged(_)) => Verdict::ok(
                    Reason::Replicated,
                    format!("Secret {namespace}/{source} is a copy of the service cluster's"),
                ),
                Ok(Written::Conflict { origin: other }) => Verdict::not(
                    Reason::Conflict,
                    match other {
                        None => format!(
                            "Secret {namespace}/{source} exists here and was not created by a \
                             SecretImport; it is left as is. Delete or rename it to replicate"
                        ),
                        Some(other) => format!(
                            "Secret {namespace}/{source} is already a copy from {other}; it is \
                             left as is"
                        ),
                    },
                ),
                Err(error) => Verdict::not(
                    Reason::WriteFailed,
                    format!("cannot write Secret {namespace}/{source}: {error}"),
                ),
            }
        }
    }
}

/// After an import's spec changed: deletes the copies in `namespace` that no import writes any
/// more and no import names (the one an import wrote under its previous `spec.secret.name`). A
/// copy of a Secret some import still names is left to that import, which adopts it, so that a
/// changed `spec.remoteKubeconfig` never makes the Secret disappear for a moment.
async fn sweep_orphans(namespace: &str, ctx: &Context) -> Result<(), kube::Error> {
    let imports = Api::<SecretImport>::namespaced(ctx.client.clone(), namespace)
        .list(&Default::default())
        .await?;
    let claimed = |name: &str, origin: &str| {
        imports.items.iter().any(|i| {
            i.spec.secret.name == name
                || sink::origin(
                    &i.spec.remote_kubeconfig.name,
                    namespace,
                    &i.spec.secret.name,
                ) == origin
        })
    };
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    for copy in ctx.local.state() {
        let name = copy.name_any();
        let Some(origin) = copy.annotations().get(ORIGIN_ANNOTATION) else {
            continue;
        };
        if copy.namespace().as_deref() != Some(namespace) || claimed(&name, origin) {
            continue;
        }
        if sink::delete_exact(
            &api,
            &name,
            copy.uid(),
            copy.resource_version(),
            &ctx.counted,
        )
        .await?
        {
            tracing::info!(%namespace, secret = %name, %origin, "no SecretImport writes this copy any more; deleted")
        }
    }
    Ok(())
}

/// The import is being deleted: remove the local copy if it is ours, whatever the service
/// cluster's state.
async fn cleanup(import: &SecretImport, ctx: &Context) -> Result<Action, Error> {
    let namespace = import.namespace().unwrap_or_default();
    ctx.remote.stop(&ObjectRef::from_obj(import));
    ctx.forget_remote(&ObjectRef::from_obj(import));
    ctx.said().remove(&import.uid().unwrap_or_default());
    let source = &import.spec.secret.name;
    let origin = sink::origin(&import.spec.remote_kubeconfig.name, &namespace, source);
    let local: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(current) = local.get_opt(source).await?
        && LocalWriter::new(local, ctx.counted.clone())
            .delete(&current, &origin)
            .await?
    {
        tracing::info!(%namespace, secret = %source, import = %import.name_any(), "SecretImport deleted; local copy deleted");
    }
    Ok(Action::await_change())
}

/// Wakes `import` on every change of the one remote Secret it reads (the exported Role allows
/// nothing wider: `resourceNames` admits a watch only with a `metadata.name` field selector), and
/// on every failure of that watch, so that the status says RemoteUnreachable while the service
/// cluster is away and recovers as soon as it is back.
fn watch_remote(
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
        let mut seen = ctx.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.get(&import).is_none_or(|s| s.identity != identity) {
            let listing = Seen {
                identity: identity.clone(),
                state: SeenState::Listing(None, Instant::now()),
            };
            seen.insert(import.clone(), listing);
        }
    }
    let seen = ctx.seen.clone();
    let (key, id) = (import.clone(), identity.clone());
    let (list_first, server) = (ctx.list_first.clone(), peer.server.clone());
    let events = watcher(api, config)
        .backoff(xcc_kube::Backoff::peer())
        .inspect(move |event| {
            if streamed && refuses_streamed_lists(event) {
                // The failure wakes the import, whose reconcile then starts a listing watch.
                tracing::info!(%server, "the service cluster does not stream lists; its watches list first");
                list_first
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(server.clone());
            }
            record(&seen, &key, &id, event)
        });
    ctx.remote.ensure(
        import,
        identity,
        format!("remote Secret {namespace}/{name}"),
        events,
    );
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
    seen: &Mutex<HashMap<ObjectRef<SecretImport>, Seen>>,
    import: &ObjectRef<SecretImport>,
    identity: &str,
    event: &Result<watcher::Event<Secret>, watcher::Error>,
) {
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    let entry = seen.entry(import.clone()).or_insert_with(|| Seen {
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
    use k8s_openapi::ByteString;
    use kube::core::Status;

    fn remote() -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("dumbo".into()),
                namespace: Some("project-1".into()),
                uid: Some("remote-uid".into()),
                resource_version: Some("42".into()),
                labels: Some([("team".to_string(), "a".to_string())].into()),
                owner_references: Some(vec![Default::default()]),
                ..Default::default()
            },
            type_: Some("kubernetes.io/basic-auth".into()),
            data: Some([("password".to_string(), ByteString(b"s3cret".to_vec()))].into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_listed_watch_tells_the_remote_secret_and_a_failed_one_does_not() {
        let seen = Mutex::new(HashMap::new());
        let import = ObjectRef::<SecretImport>::new("dumbo").within("project-1");
        let state = |seen: &Mutex<HashMap<ObjectRef<SecretImport>, Seen>>, identity: &str| {
            let seen = seen.lock().unwrap();
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
    fn the_copy_has_the_data_and_type_and_our_origin_only() {
        let copy = desired_secret(
            &remote(),
            "project-1",
            "dumbo",
            "energy-source/project-1/dumbo",
        );
        assert_eq!(copy.metadata.name.as_deref(), Some("dumbo"));
        assert_eq!(copy.metadata.namespace.as_deref(), Some("project-1"));
        assert_eq!(
            copy.annotations()
                .get(ORIGIN_ANNOTATION)
                .map(String::as_str),
            Some("energy-source/project-1/dumbo")
        );
        assert_eq!(copy.type_.as_deref(), Some("kubernetes.io/basic-auth"));
        assert_eq!(copy.data, remote().data);
        // Nothing server-managed or owner-related crosses clusters.
        assert_eq!(copy.metadata.uid, None);
        assert_eq!(copy.metadata.resource_version, None);
        assert_eq!(copy.metadata.owner_references, None);
        assert_eq!(copy.metadata.labels, None);
    }

    #[test]
    fn a_source_without_data_gives_an_empty_data_map() {
        let mut empty = remote();
        empty.data = None;
        let copy = desired_secret(&empty, "project-1", "dumbo", "o");
        assert_eq!(copy.data, Some(Default::default()));
        let json = serde_json::to_value(&copy).unwrap();
        assert_eq!(json["data"], serde_json::json!({}));
    }

    fn respond(object: &impl serde::Serialize) -> http::Response<kube::client::Body> {
        http::Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(
                serde_json::to_vec(object).unwrap(),
            ))
            .unwrap()
    }

    /// The reconcile's reads and writes against a mocked local API server, with a service
    /// cluster that refuses connections. The first look waits for the import's own watch to list
    /// (one local read: the kubeconfig Secret); once that watch has failed, a look reads the
    /// remote Secret itself, says the service cluster is unreachable, and neither writes nor
    /// deletes the copy.
    #[tokio::test]
    async fn an_unreachable_service_cluster_never_deletes_the_copy() {
        let (service, mut handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let client = Client::new(service, "default");
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let ctx = Context {
            client: client.clone(),
            peers: PeerClients::default(),
            recorder: Recorder::new(
                client.clone(),
                kube::runtime::events::Reporter {
                    controller: "test".into(),
                    instance: None,
                },
            ),
            remote: Wakers::new(tx),
            seen: Default::default(),
            list_first: Default::default(),
            finalizer_asked: Default::default(),
            local: kube::runtime::reflector::store::<PartialObjectMeta<Secret>>().0,
            written: Default::default(),
            local_listed: Default::default(),
            said: Default::default(),
            counted: crate::sink::Counted {
                metrics: crate::sync_metrics::SyncMetrics::register(&mut Default::default()),
                reconciler: "secret-import",
            },
        };
        let mut import = SecretImport::new(
            "small-postgres-23.status.binding.name",
            crate::replication::api::SecretImportSpec {
                secret: crate::replication::api::LocalRef {
                    name: "dumbo".into(),
                },
                remote_kubeconfig: crate::replication::api::LocalRef {
                    name: "energy-source".into(),
                },
            },
        );
        import.metadata.namespace = Some("project-1".into());
        // Port 1 on the loopback: nothing listens, connections are refused at once.
        let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: s\n  cluster: \
            {server: 'https://127.0.0.1:1'}\nusers:\n- name: u\n  \
            user: {token: t}\ncontexts:\n- name: c\n  context: {cluster: s, user: u}\n\
            current-context: c\n";
        let mut kubeconfig_secret = remote();
        kubeconfig_secret.metadata.name = Some("energy-source".into());
        kubeconfig_secret.data = Some(
            [(
                "kubeconfig".to_string(),
                ByteString(kubeconfig.as_bytes().to_vec()),
            )]
            .into(),
        );
        let copy = desired_secret(
            &remote(),
            "project-1",
            "dumbo",
            "energy-source/project-1/dumbo",
        );

        // Answers `answers` in turn and tells which requests they answered.
        async fn serve(
            handle: &mut tower_test::mock::Handle<
                http::Request<kube::client::Body>,
                http::Response<kube::client::Body>,
            >,
            answers: Vec<http::Response<kube::client::Body>>,
        ) -> Vec<String> {
            let mut seen = Vec::new();
            for answer in answers {
                let (request, send) = handle.next_request().await.expect("a request");
                seen.push(format!("{} {}", request.method(), request.uri().path()));
                send.send_response(answer);
            }
            seen
        }
        let kubeconfig_read = "GET /api/v1/namespaces/project-1/secrets/energy-source";
        // Bounded, so that a reconciler that stops asking fails the test instead of hanging it.
        let bound = Duration::from_secs(30);

        let server =
            tokio::time::timeout(bound, serve(&mut handle, vec![respond(&kubeconfig_secret)]));
        let (outcome, seen) = tokio::join!(replicate(&import, &ctx), server);
        assert!(matches!(outcome, Outcome::AwaitList(_)), "{outcome:?}");
        assert_eq!(seen.expect("the kubeconfig read"), [kubeconfig_read]);

        let key = ObjectRef::from_obj(&import);
        let failed = async {
            while ctx
                .seen
                .lock()
                .unwrap()
                .get(&key)
                .is_none_or(|s| !matches!(s.state, SeenState::Unknown))
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(bound, failed)
            .await
            .expect("the remote watch fails against a closed port");

        let server = tokio::time::timeout(
            bound,
            serve(
                &mut handle,
                vec![respond(&kubeconfig_secret), respond(&copy)],
            ),
        );
        let (outcome, seen) = tokio::join!(replicate(&import, &ctx), server);
        let Outcome::Settled(verdict) = outcome else {
            panic!("a failed watch is not waited for: {outcome:?}");
        };
        assert_eq!(verdict.reason, Reason::RemoteUnreachable, "{verdict:?}");
        assert!(verdict.message.contains("the local copy is kept"));
        assert_eq!(
            seen.expect("the reconciler made both requests"),
            [
                kubeconfig_read,
                "GET /api/v1/namespaces/project-1/secrets/dumbo"
            ]
        );
        let more = tokio::time::timeout(Duration::from_millis(300), handle.next_request()).await;
        assert!(
            !matches!(more, Ok(Some(_))),
            "no write or delete may follow"
        );
    }

    #[test]
    fn a_copy_is_adopted_only_when_no_other_import_writes_it() {
        let previous = "old-kubeconfig/project-1/dumbo";
        assert!(orphaned_copy(previous, "project-1", "dumbo", &[]));
        assert!(!orphaned_copy(
            previous,
            "project-1",
            "dumbo",
            &[previous.to_string()]
        ));
        // A copy of another Secret, or from another namespace, is never adopted.
        assert!(!orphaned_copy(previous, "project-1", "other", &[]));
        assert!(!orphaned_copy(previous, "project-2", "dumbo", &[]));
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            ..Status::failure(&format!("code {code}"), "Forbidden")
        }))
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

    #[test]
    fn only_a_404_means_the_source_is_gone() {
        assert!(matches!(classify(Ok(None)), Remote::NotFound));
        assert!(matches!(classify(Ok(Some(remote()))), Remote::Found(_)));
        assert!(matches!(
            classify(Err(api_error(403))),
            Remote::Forbidden(_)
        ));
        assert!(matches!(
            classify(Err(api_error(401))),
            Remote::Forbidden(_)
        ));
        assert!(matches!(
            classify(Err(api_error(503))),
            Remote::Unreachable(_)
        ));
        assert!(matches!(
            classify(Err(kube::Error::LinesCodecMaxLineLengthExceeded)),
            Remote::Unreachable(_)
        ));
    }
}

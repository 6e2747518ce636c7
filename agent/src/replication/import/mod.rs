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

//!
//! - [`copy`]: the copy, as observe → plan (pure) → execute;
//! - [`remote`]: the import's watch of its remote Secret, and what it holds.

mod copy;
mod remote;

use std::{sync::Arc, time::Duration};

use dashmap::{DashMap, DashSet};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, Resource, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        controller::Action,
        events::{Event as KubeEvent, EventType, Recorder},
        finalizer::{Event as FinalizerEvent, finalizer},
        reflector::{ObjectRef, Store},
    },
};

use super::{Error, FINALIZER, Reason, Verdict, api::SecretImport, finalized, write_status};
use crate::{
    sink::{self, LocalWriter, ORIGIN_ANNOTATION},
    wakers::Wakers,
};
use remote::{Seen, watch_remote};
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
    pub written: DashMap<String, (String, String)>,
    /// Set once `local` holds the first full list.
    pub local_listed: Arc<std::sync::atomic::AtomicBool>,
    /// Per import (by uid): what its status was last given.
    pub said: DashMap<String, Said>,
    /// Where the copies' writes are counted.
    pub counted: crate::sink::Counted,
    /// The imports given the finalizer a moment ago.
    pub finalizer_asked: super::FinalizerAsked,
    /// Per import: what its watch of the remote Secret holds ([`Seen`]). Written by the watches'
    /// tasks while reconciles read it: a concurrent map.
    pub seen: Arc<DashMap<ObjectRef<SecretImport>, Seen>>,
    /// Peer API servers (by URL) that refused a streamed list (`sendInitialEvents`, Kubernetes
    /// 1.32 and 1.34 on by default): their watches list first, one request more.
    pub list_first: Arc<DashSet<String>>,
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

    /// Whether the local copy `namespace/name` is the one written from `origin` at remote
    /// version `remote_version`, untouched since.
    fn current(&self, origin: &str, namespace: &str, name: &str, remote_version: &str) -> bool {
        let Some(local) = self.local_meta(namespace, name) else {
            return false;
        };
        self.written.get(origin).is_some_and(|entry| {
            let (remote, written) = entry.value();
            remote == remote_version && local.resource_version().as_deref() == Some(written)
        })
    }
}

/// Longest wait for the service cluster's answer, so that a peer that accepts connections and
/// never answers holds up neither this import nor the others.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(5);
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

pub fn error_policy(import: Arc<SecretImport>, error: &Error, _: Arc<Context>) -> Action {
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
    let reason_changed = if ctx.said.get(&key).is_some_and(|last| *last == said) {
        false
    } else {
        let changed =
            write_status(api, import, import.status.as_ref(), &verdict, &ctx.counted).await?;
        ctx.said.insert(key, said);
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
    Outcome::Settled(
        copy::copy_from(import, ctx, &peer, local)
            .await
            .through(&peer),
    )
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
    ctx.said.remove(&import.uid().unwrap_or_default());
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

#[cfg(test)]
mod tests {
    use super::*;
    use copy::tests::remote;
    use k8s_openapi::ByteString;
    use remote::SeenState;
    use serde_json::{Value, json};
    use xcc_kube::scenario::{Scenario, echo};

    /// The reconciler's context on `client` (a mocked local API server).
    fn context(client: Client) -> Context {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        Context {
            client: client.clone(),
            peers: PeerClients::default(),
            recorder: Recorder::new(
                client,
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
        }
    }

    /// Import `project-1/dumbo` of Secret `dumbo` through kubeconfig Secret `energy-source`.
    fn import() -> SecretImport {
        let mut import = SecretImport::new(
            "dumbo",
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
        import
    }

    const ORIGIN: &str = "energy-source/project-1/dumbo";
    const SECRET: &str = "/api/v1/namespaces/project-1/secrets/dumbo";

    fn json_of(object: &impl serde::Serialize) -> (u16, Value) {
        (200, serde_json::to_value(object).unwrap())
    }

    /// A local Secret `project-1/dumbo` of `type_` with `origin`, uid `local-uid`, version 5.
    fn local(origin: &str, type_: &str) -> Secret {
        let mut secret = remote();
        secret.metadata.uid = Some("local-uid".into());
        secret.metadata.resource_version = Some("5".into());
        secret.type_ = Some(type_.into());
        secret.metadata.annotations =
            Some([(ORIGIN_ANNOTATION.to_string(), origin.to_string())].into());
        secret
    }

    /// A peer client whose watch of the remote Secret already holds `remote()`: a look takes it
    /// from there and asks the service cluster nothing (its client has no server).
    fn watched_peer(ctx: &Context, import: &SecretImport) -> PeerClient {
        let (client, _) = Scenario::new().run();
        let peer = PeerClient {
            client,
            identity: "project-1/energy-source@f".into(),
            server: "https://service.example".into(),
            tls: xcc_kube::PeerTls::Verified,
        };
        let identity = ctx.remote_identity(&peer, "project-1", "dumbo");
        ctx.seen.insert(
            ObjectRef::from_obj(import),
            Seen {
                identity,
                state: SeenState::Known(Some(Box::new(remote()))),
            },
        );
        peer
    }

    /// The reconcile's reads against a mocked local API server, with a service cluster that
    /// refuses connections. The first look waits for the import's own watch to list (one local
    /// read: the kubeconfig Secret); once that watch has failed, a look reads the remote Secret
    /// itself, says the service cluster is unreachable, and neither writes nor deletes the copy
    /// (the scenario fails on any request it does not expect).
    #[tokio::test]
    async fn an_unreachable_service_cluster_never_deletes_the_copy() {
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
        let copy = desired_copy();
        let kubeconfig_read = "/api/v1/namespaces/project-1/secrets/energy-source";
        // Bounded, so that a reconciler that stops asking fails the test instead of hanging it.
        let bound = Duration::from_secs(30);
        let (client, server) = Scenario::new()
            .expect("GET", kubeconfig_read)
            .reply(json_of(&kubeconfig_secret))
            .expect("GET", kubeconfig_read)
            .reply(json_of(&kubeconfig_secret))
            .expect("GET", SECRET)
            .reply(json_of(&copy))
            .waiting(bound)
            .run();
        let ctx = context(client);
        let import = import();

        let outcome = replicate(&import, &ctx).await;
        assert!(matches!(outcome, Outcome::AwaitList(_)), "{outcome:?}");
        let lines = |seen: Vec<xcc_kube::scenario::Request>| -> Vec<String> {
            seen.iter().map(|r| r.line()).collect()
        };
        assert_eq!(
            lines(server.seen()),
            [format!("GET {kubeconfig_read}")],
            "the kubeconfig read"
        );

        let key = ObjectRef::from_obj(&import);
        let failed = async {
            while ctx
                .seen
                .get(&key)
                .is_none_or(|s| !matches!(s.state, SeenState::Unknown))
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(bound, failed)
            .await
            .expect("the remote watch fails against a closed port");

        let outcome = replicate(&import, &ctx).await;
        let Outcome::Settled(verdict) = outcome else {
            panic!("a failed watch is not waited for: {outcome:?}");
        };
        assert_eq!(verdict.reason, Reason::RemoteUnreachable, "{verdict:?}");
        assert!(verdict.message.contains("the local copy is kept"));
        assert_eq!(
            lines(server.done().await),
            [
                format!("GET {kubeconfig_read}"),
                format!("GET {kubeconfig_read}"),
                format!("GET {SECRET}"),
            ]
        );
    }

    fn desired_copy() -> Secret {
        copy::desired_secret(&remote(), "project-1", "dumbo", ORIGIN)
    }

    /// A Secret's type cannot change in place: a copy of ours of another type is deleted (on
    /// its uid and version) and made again, and the versions the write joined are remembered.
    #[tokio::test]
    async fn a_copy_of_another_type_is_deleted_and_made_again() {
        let (client, server) = Scenario::new()
            .expect("GET", SECRET)
            .reply(json_of(&local(ORIGIN, "Opaque")))
            .expect("DELETE", SECRET)
            .check(|body| {
                assert_eq!(body["preconditions"]["uid"], "local-uid");
                assert_eq!(body["preconditions"]["resourceVersion"], "5");
            })
            .reply(json_of(&local(ORIGIN, "Opaque")))
            .expect("POST", "/api/v1/namespaces/project-1/secrets")
            .check(|body| {
                assert_eq!(body["type"], "kubernetes.io/basic-auth");
                assert_eq!(body["metadata"]["annotations"][ORIGIN_ANNOTATION], ORIGIN);
            })
            .reply_with(echo)
            .run();
        let ctx = context(client.clone());
        let import = import();
        let peer = watched_peer(&ctx, &import);
        let verdict =
            copy::copy_from(&import, &ctx, &peer, Api::namespaced(client, "project-1")).await;
        assert!(verdict.ready, "{verdict:?}");
        assert_eq!(verdict.reason, Reason::Replicated);
        server.done().await;
        assert_eq!(
            ctx.written.get(ORIGIN).map(|entry| entry.value().clone()),
            Some(("42".to_string(), "7".to_string()))
        );
    }

    /// A copy written through another kubeconfig Secret that no other import of the namespace
    /// uses any more is adopted: applied over, whoever it names.
    #[tokio::test]
    async fn a_copy_no_other_import_claims_is_adopted() {
        let imports = "/apis/replication.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1/\
                       namespaces/project-1/secretimports";
        let previous = "old-kubeconfig/project-1/dumbo";
        let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {},
                          "items": [serde_json::to_value(import()).unwrap()]});
        let (client, server) = Scenario::new()
            .expect("GET", SECRET)
            .reply(json_of(&local(previous, "kubernetes.io/basic-auth")))
            .expect("GET", imports)
            .reply((200, list))
            .expect("PATCH", SECRET)
            .check(|body| {
                assert_eq!(body["metadata"]["annotations"][ORIGIN_ANNOTATION], ORIGIN);
            })
            .reply_with(echo)
            .run();
        let ctx = context(client.clone());
        let import = import();
        let peer = watched_peer(&ctx, &import);
        let verdict =
            copy::copy_from(&import, &ctx, &peer, Api::namespaced(client, "project-1")).await;
        assert!(verdict.ready, "{verdict:?}");
        server.done().await;
    }

    /// A copy another import still writes is not touched: the import says Conflict.
    #[tokio::test]
    async fn a_copy_another_import_writes_is_left_alone() {
        let imports = "/apis/replication.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1/\
                       namespaces/project-1/secretimports";
        let previous = "old-kubeconfig/project-1/dumbo";
        let mut other = import();
        other.metadata.name = Some("other".into());
        other.spec.remote_kubeconfig.name = "old-kubeconfig".into();
        let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {},
                          "items": [serde_json::to_value(import()).unwrap(),
                                    serde_json::to_value(other).unwrap()]});
        let (client, server) = Scenario::new()
            .expect("GET", SECRET)
            .reply(json_of(&local(previous, "kubernetes.io/basic-auth")))
            .expect("GET", imports)
            .reply((200, list))
            .run();
        let ctx = context(client.clone());
        let import = import();
        let peer = watched_peer(&ctx, &import);
        let verdict =
            copy::copy_from(&import, &ctx, &peer, Api::namespaced(client, "project-1")).await;
        assert_eq!(verdict.reason, Reason::Conflict, "{verdict:?}");
        assert!(verdict.message.contains(previous), "{verdict:?}");
        server.done().await;
    }
}

//! The Replicator reconciler: a Replicator's objects ([`super::desired`]) applied to this
//! cluster and to each target, each cluster on its own with its own deadline and status
//! entries, so a silent target is `Unreachable` while the others are `applied`.
//!
//! - An object that exists without our origin annotation is someone else's: `Conflict`, left as
//!   is (a namespace that was already there is `existing`: used, never deleted).
//! - Drift is reverted from a watch: the process's shared metadata watches of the replicated
//!   kinds on every cluster in use wake the Replicator when an object of it changes to a
//!   resourceVersion this reconciler did not leave, or is deleted.
//! - Deletion (finalizer) removes what it made, in reverse order, everywhere; a silent target
//!   is not waited for beyond [`CLUSTER_DEADLINE`], and what was left there is recorded in the
//!   status and in a Warning Event (`LeftBehind`).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
    core::GroupVersionKind,
    runtime::{
        controller::Action,
        events::{Event as KubeEvent, EventType, Recorder},
        finalizer::{Event as FinalizerEvent, finalizer},
        reflector::ObjectRef,
    },
};
use tokio::sync::mpsc::UnboundedSender;
use xcc_kube::{
    PeerClients, Reach,
    status::{Verdict, reason_of},
};

use super::{
    Registry,
    api::{ApplyState, ApplyStatus, Reason, Replicator, ReplicatorStatus, SyncState},
    certs::{self, Bundle},
    contexts,
    desired::{self, Kinds, Object},
};
use xcc_sync::Core;

use crate::{
    sink::{Counted, FIELD_MANAGER, ORIGIN_ANNOTATION},
    sources::{Change, Detail, SourceId, Sources},
};

/// Finalizer on every Replicator: its objects are removed everywhere before it goes.
pub const FINALIZER: &str = "plumber.xcc.test/cleanup";

/// How long one cluster may take for all of a Replicator's objects: a target that stops
/// answering mid-way is `Unreachable` after this, before the prober (one probe interval and
/// deadline) may have noticed.
pub const CLUSTER_DEADLINE: Duration = Duration::from_secs(6);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl xcc_sync::kit::ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(error) => error.metric_label(),
            Error::Finalizer(error) => error.metric_label(),
        }
    }
}

/// `(cluster identity, kind, namespace, name)` of a replicated object.
type Key = (String, String, String, String);

pub struct Context {
    client: Client,
    peers: PeerClients,
    sources: Sources,
    registry: Registry,
    recorder: Recorder,
    counted: Counted,
    wake: UnboundedSender<ObjectRef<Replicator>>,
    /// The resourceVersion each of our writes (or checks) left; "" once we deleted it.
    written: Arc<Mutex<HashMap<Key, String>>>,
    /// The drift watch of each kind on each cluster in use, by client identity and
    /// `group/version/kind`.
    watched: Mutex<HashMap<(String, String), tokio::task::AbortHandle>>,
    /// Kinds of `resources[]` found by discovery here.
    kinds: tokio::sync::Mutex<Kinds>,
    /// Certificates made for each Replicator (by UID) that are not in this cluster's
    /// `ca-secret` yet (or cannot be, when that Secret is someone else's): made once, not at
    /// every reconcile.
    made: Mutex<HashMap<String, Bundle>>,
}

impl Context {
    pub fn new(
        core: Core,
        registry: Registry,
        recorder: Recorder,
        wake: UnboundedSender<ObjectRef<Replicator>>,
    ) -> Context {
        Context {
            client: core.client,
            peers: core.peers,
            sources: core.sources,
            registry,
            recorder,
            counted: Counted {
                metrics: core.metrics,
                reconciler: "plumber-replicator",
            },
            wake,
            written: Arc::default(),
            watched: Mutex::default(),
            kinds: tokio::sync::Mutex::default(),
            made: Mutex::default(),
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        for handle in self
            .watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            handle.abort();
        }
    }
}

/// One cluster a Replicator writes to.
#[derive(Clone)]
struct Cluster {
    /// Its name in the status: the ClusterDetector name (or as `targetCluster` names it).
    name: String,
    client: Client,
    /// [`crate::sources::LOCAL`] or the peer client's identity.
    identity: String,
    /// The peer's server URL (for its reach); `None` for this cluster.
    server: Option<String>,
}

/// A cluster, or why it cannot be written.
enum Resolved {
    Ready(Cluster),
    Failed { name: String, why: String },
}

pub async fn reconcile(replicator: Arc<Replicator>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<Replicator> = Api::all(ctx.client.clone());
    let result = finalizer(&api, FINALIZER, replicator, |event| async {
        match event {
            FinalizerEvent::Apply(r) => apply(&api, &r, &ctx).await,
            FinalizerEvent::Cleanup(r) => cleanup(&api, &r, &ctx).await,
        }
    })
    .await;
    xcc_kube::finalizers::finalized(result).map_err(|e| Error::Finalizer(Box::new(e)))
}

pub fn error_policy(replicator: Arc<Replicator>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.counted.failed(error);
    tracing::warn!(replicator = %replicator.name_any(), %error, "Replicator reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// The primary and every target of `replicator` (deduplicated, the primary not twice).
fn resolve(replicator: &Replicator, ctx: &Context, extra: &[String]) -> Vec<Resolved> {
    let primary = ctx.registry.primary();
    let mut out = vec![Resolved::Ready(Cluster {
        name: primary.clone(),
        client: ctx.client.clone(),
        identity: crate::sources::LOCAL.into(),
        server: None,
    })];
    let mut seen = BTreeSet::from([primary]);
    for name in replicator.spec.target_cluster.iter().chain(extra) {
        if !seen.insert(name.clone()) {
            continue;
        }
        let secret = format!("{}/{}", contexts::NAMESPACE, contexts::SECRET);
        match ctx.registry.find(name) {
            Err(()) => out.push(Resolved::Failed {
                name: name.clone(),
                why: format!("the kubeconfig Secret {secret} was not read yet"),
            }),
            Ok(None) => out.push(Resolved::Failed {
                name: name.clone(),
                why: format!(
                    "no ClusterDetector or context named {name:?} in the kubeconfig Secret {secret}"
                ),
            }),
            Ok(Some(target)) if target.primary => {}
            Ok(Some(target)) => match target.client {
                Ok(peer) => out.push(Resolved::Ready(Cluster {
                    name: name.clone(),
                    client: peer.client,
                    identity: peer.identity,
                    server: Some(peer.server),
                })),
                Err(why) => out.push(Resolved::Failed {
                    name: name.clone(),
                    why,
                }),
            },
        }
    }
    out
}

/// The kinds of `resources[]`, found by discovery on this cluster (cached).
async fn resolve_kinds(replicator: &Replicator, ctx: &Context) -> Kinds {
    let mut kinds = ctx.kinds.lock().await;
    for manifest in &replicator.spec.resources {
        let text = |k: &str| {
            manifest
                .0
                .get(k)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let (Some(api_version), Some(kind)) = (text("apiVersion"), text("kind")) else {
            continue;
        };
        let key = (api_version.clone(), kind.clone());
        if kinds.contains_key(&key) {
            continue;
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        match kube::discovery::pinned_kind(&ctx.client, &gvk).await {
            Ok((resource, caps)) => {
                let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
                kinds.insert(key, (resource, namespaced));
            }
            Err(error) => {
                tracing::debug!(%api_version, %kind, %error, "kind of resources[] not found");
            }
        }
    }
    kinds.clone()
}

/// The certificates to use: those in the primary's `ca-secret`/`cli-secret` when they are ours
/// and still serve the hosts, else new ones.
async fn certificates(
    replicator: &Replicator,
    ctx: &Context,
    origin: &str,
) -> Result<Option<Bundle>, String> {
    if !desired::secure(replicator) {
        return Ok(None);
    }
    let hosts = desired::hosts(replicator);
    let secrets: Api<Secret> =
        Api::namespaced(ctx.client.clone(), &replicator.spec.replication_namespace);
    let read = |s: Option<Secret>| {
        s.filter(|s| s.annotations().get(ORIGIN_ANNOTATION).map(String::as_str) == Some(origin))
    };
    let ca = read(secrets.get_opt(certs::CA_SECRET).await.ok().flatten());
    let client = read(secrets.get_opt(certs::CLIENT_SECRET).await.ok().flatten());
    if let (Some(ca), Some(client)) = (ca, client) {
        let text = |s: &Secret| -> BTreeMap<String, String> {
            s.data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                .collect()
        };
        let found = Bundle {
            hosts: ca
                .annotations()
                .get(certs::HOSTS_ANNOTATION)
                .map(|h| h.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
            not_after: ca
                .annotations()
                .get(certs::NOT_AFTER_ANNOTATION)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            ca: text(&ca),
            client: text(&client),
        };
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        if found.serves(&hosts, now) && found.ca.len() == 3 && found.client.len() == 2 {
            return Ok(Some(found));
        }
    }
    let uid = replicator.uid().unwrap_or_default();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let mut made = ctx.made.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(bundle) = made.get(&uid).filter(|b| b.serves(&hosts, now)) {
        return Ok(Some(bundle.clone()));
    }
    tracing::info!(replicator = %replicator.name_any(), ?hosts, "new Ingress certificates");
    let bundle = certs::generate(&hosts)
        .map_err(|e| format!("cannot make the Ingress certificates: {e}"))?;
    made.insert(uid, bundle.clone());
    Ok(Some(bundle))
}

fn entry(
    cluster: &str,
    object: &Object,
    status: ApplyState,
    message: Option<String>,
) -> ApplyStatus {
    ApplyStatus {
        cluster: cluster.to_string(),
        kind: object.kind().to_string(),
        name: object.name.clone(),
        apply_status: status,
        message,
    }
}

fn api_for(client: &Client, object: &Object) -> Api<DynamicObject> {
    let namespace = object.body["metadata"]["namespace"].as_str();
    match (object.namespaced, namespace) {
        (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, &object.resource),
        _ => Api::all_with(client.clone(), &object.resource),
    }
}

fn key(cluster: &Cluster, object: &Object) -> Key {
    (
        cluster.identity.clone(),
        object.kind().to_string(),
        object.body["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        object.name.clone(),
    )
}

/// Whether an error means the cluster did not answer (rather than refused).
fn silent(error: &kube::Error) -> bool {
    !matches!(error, kube::Error::Api(_))
}

/// Applies one object on one cluster; its status and message. `selector` carries, from the
/// Deployment to the Service of the same cluster, the selector of a Deployment found there with
/// another one (kept: it cannot change).
async fn apply_one(
    ctx: &Context,
    cluster: &Cluster,
    object: &Object,
    origin: &str,
    replicator: &Replicator,
    selector: &mut Option<serde_json::Map<String, serde_json::Value>>,
) -> Result<(ApplyState, Option<String>), kube::Error> {
    let api = api_for(&cluster.client, object);
    let current = api.get_opt(&object.name).await?;
    let mut adjusted = None;
    if object.kind() == "Deployment"
        && let Some(found) = current
            .as_ref()
            .and_then(|c| c.data.pointer("/spec/selector"))
        && let Some((body, labels)) = desired::keep_selector(replicator, &object.body, found)
    {
        tracing::debug!(replicator = %replicator.name_any(), cluster = %cluster.name, ?labels, "Deployment found with another selector: kept");
        adjusted = Some(body);
        *selector = Some(labels);
    }
    if object.kind() == "Service"
        && replicator.spec.deployment_name.is_some()
        && let Some(labels) = selector.as_ref()
    {
        let mut body = object.body.clone();
        body["spec"]["selector"] = serde_json::Value::Object(labels.clone());
        adjusted = Some(body);
    }
    let body = adjusted.as_ref().unwrap_or(&object.body);
    let remember = |rv: Option<String>| {
        ctx.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key(cluster, object), rv.unwrap_or_default());
    };
    if let Some(current) = &current {
        let theirs = current.annotations().get(ORIGIN_ANNOTATION);
        let adopt = theirs.is_none()
            && desired::made_by_original(
                &serde_json::to_value(current).unwrap_or_default(),
                &replicator.name_any(),
            );
        if theirs.map(String::as_str) != Some(origin) && !adopt {
            if object.kind() == "Namespace" {
                return Ok((ApplyState::Existing, None));
            }
            let managers: BTreeSet<String> = current
                .managed_fields()
                .iter()
                .filter_map(|m| m.manager.clone())
                .collect();
            let owner = theirs.map_or("no origin annotation".to_string(), |o| {
                format!("origin {o}")
            });
            return Ok((
                ApplyState::Conflict,
                Some(xcc_kube::bounded(&format!(
                    "{} {} exists and is not this Replicator's ({owner}; field managers: {}); left as is",
                    object.kind(),
                    object.name,
                    managers.into_iter().collect::<Vec<_>>().join(", ")
                ))),
            ));
        }
        if adopt {
            tracing::info!(replicator = %replicator.name_any(), cluster = %cluster.name, kind = object.kind(), object = %object.name, "adopting an object the original plumber controller made");
        }
        let as_json = serde_json::to_value(current).unwrap_or_default();
        if desired::holds(&as_json, body) {
            remember(current.resource_version());
            return Ok((ApplyState::Applied, None));
        }
        // Ours, and changed by someone: put it back, taking the fields they took.
        let written = api
            .patch(
                &object.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await?;
        ctx.counted.wrote("apply");
        remember(written.resource_version());
        return Ok((ApplyState::Applied, None));
    }
    // Not forced: if someone made it since the read, their fields conflict and stay theirs.
    match api
        .patch(
            &object.name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(body),
        )
        .await
    {
        Ok(written) => {
            ctx.counted.wrote("apply");
            remember(written.resource_version());
            Ok((ApplyState::Applied, None))
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok((
            ApplyState::Conflict,
            Some(xcc_kube::bounded(&format!(
                "{} {} was made meanwhile by someone else: {}",
                object.kind(),
                object.name,
                s.message
            ))),
        )),
        Err(e) => Err(e),
    }
}

/// Every object on one cluster, within [`CLUSTER_DEADLINE`]; one entry per object.
async fn apply_cluster(
    ctx: &Context,
    cluster: &Cluster,
    objects: &[Object],
    origin: &str,
    replicator: &Replicator,
) -> Vec<ApplyStatus> {
    if let Some(server) = &cluster.server
        && let Reach::Silent { error } = ctx.peers.reach(server)
    {
        let why = format!("the API server does not answer: {error}");
        return objects
            .iter()
            .map(|o| entry(&cluster.name, o, ApplyState::Unreachable, Some(why.clone())))
            .collect();
    }
    ensure_watched(ctx, cluster, objects);
    let deadline = tokio::time::Instant::now() + CLUSTER_DEADLINE;
    let mut out = Vec::new();
    let mut unreachable: Option<String> = None;
    let mut selector = None;
    for object in objects {
        if let Some(why) = &unreachable {
            out.push(entry(
                &cluster.name,
                object,
                ApplyState::Unreachable,
                Some(why.clone()),
            ));
            continue;
        }
        let one = apply_one(ctx, cluster, object, origin, replicator, &mut selector);
        match tokio::time::timeout_at(deadline, one).await {
            Ok(Ok((status, message))) => out.push(entry(&cluster.name, object, status, message)),
            Ok(Err(error)) if silent(&error) => {
                let why = xcc_kube::bounded(&error);
                out.push(entry(
                    &cluster.name,
                    object,
                    ApplyState::Unreachable,
                    Some(why.clone()),
                ));
                unreachable = Some(why);
            }
            Ok(Err(error)) => out.push(entry(
                &cluster.name,
                object,
                ApplyState::Failed,
                Some(xcc_kube::bounded(&error)),
            )),
            Err(_) => {
                let why = format!("no answer within {CLUSTER_DEADLINE:?}");
                out.push(entry(
                    &cluster.name,
                    object,
                    ApplyState::Unreachable,
                    Some(why.clone()),
                ));
                unreachable = Some(why);
            }
        }
    }
    out
}

/// Removes our objects from one cluster, in reverse order; returns what was left behind.
async fn cleanup_cluster(
    ctx: &Context,
    cluster: &Cluster,
    objects: &[Object],
    origin: &str,
) -> Vec<ApplyStatus> {
    if let Some(server) = &cluster.server
        && let Reach::Silent { error } = ctx.peers.reach(server)
    {
        let why = format!("the API server does not answer: {error}");
        return objects
            .iter()
            .rev()
            .map(|o| entry(&cluster.name, o, ApplyState::LeftBehind, Some(why.clone())))
            .collect();
    }
    let deadline = tokio::time::Instant::now() + CLUSTER_DEADLINE;
    let mut left = Vec::new();
    let mut silent_since: Option<String> = None;
    for object in objects.iter().rev() {
        if let Some(why) = &silent_since {
            left.push(entry(
                &cluster.name,
                object,
                ApplyState::LeftBehind,
                Some(why.clone()),
            ));
            continue;
        }
        let api = api_for(&cluster.client, object);
        let removal = async {
            let Some(current) = api.get_opt(&object.name).await? else {
                return Ok::<_, kube::Error>(());
            };
            if current
                .annotations()
                .get(ORIGIN_ANNOTATION)
                .map(String::as_str)
                != Some(origin)
            {
                // Not ours (a namespace that was there, someone else's object): never deleted.
                return Ok(());
            }
            ctx.written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key(cluster, object), String::new());
            crate::sink::delete_exact(&api, &object.name, current.uid(), None, &ctx.counted)
                .await?;
            Ok(())
        };
        match tokio::time::timeout_at(deadline, removal).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                let why = xcc_kube::bounded(&error);
                left.push(entry(
                    &cluster.name,
                    object,
                    ApplyState::LeftBehind,
                    Some(why.clone()),
                ));
                if silent(&error) {
                    silent_since = Some(why);
                }
            }
            Err(_) => {
                let why = format!("no answer within {CLUSTER_DEADLINE:?}");
                left.push(entry(
                    &cluster.name,
                    object,
                    ApplyState::LeftBehind,
                    Some(why.clone()),
                ));
                silent_since = Some(why);
            }
        }
    }
    left
}

/// Watches (metadata, shared) of the replicated kinds on `cluster` (the namespace aside), which
/// wake the Replicator an object belongs to when it drifts or goes. Watches through clients that
/// are no longer current (the kubeconfig Secret changed) are stopped.
fn ensure_watched(ctx: &Context, cluster: &Cluster, objects: &[Object]) {
    let mut watched = ctx.watched.lock().unwrap_or_else(|e| e.into_inner());
    let current = ctx.registry.identities();
    watched.retain(|(identity, _), handle| {
        let keep = identity == crate::sources::LOCAL || current.contains(identity);
        if !keep {
            handle.abort();
        }
        keep
    });
    for object in objects.iter().filter(|o| o.kind() != "Namespace") {
        let resource = object.resource.clone();
        let slot = (
            cluster.identity.clone(),
            format!("{}/{}/{}", resource.group, resource.version, resource.kind),
        );
        if watched.contains_key(&slot) {
            continue;
        }
        let gvk = GroupVersionKind::gvk(&resource.group, &resource.version, &resource.kind);
        let id = if cluster.server.is_none() {
            SourceId::local(gvk)
        } else {
            SourceId {
                cluster: cluster.name.clone(),
                identity: cluster.identity.clone(),
                gvk,
                fields: None,
            }
        };
        let view = ctx
            .sources
            .view(id, cluster.client.clone(), &resource, Detail::Metadata);
        let written = ctx.written.clone();
        let wake = ctx.wake.clone();
        let identity = cluster.identity.clone();
        let handle = tokio::spawn(async move {
            let mut changes = std::pin::pin!(view.changes());
            while let Some(change) = changes.next().await {
                let (object, deleted) = match change {
                    Change::Applied(o) => (o, false),
                    Change::Deleted(o) => (o, true),
                    Change::Listed | Change::Missed => continue,
                };
                let Some(name) = object
                    .annotations()
                    .get(ORIGIN_ANNOTATION)
                    .and_then(|o| desired::replicator_of(o))
                else {
                    continue;
                };
                let key = (
                    identity.clone(),
                    resource.kind.clone(),
                    object.namespace().unwrap_or_default(),
                    object.name_any(),
                );
                let last = written
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&key)
                    .cloned();
                let ours = match (&last, deleted) {
                    (Some(rv), true) => rv.is_empty(),
                    (Some(rv), false) => Some(rv) == object.resource_version().as_ref(),
                    (None, _) => false,
                };
                if !ours {
                    tracing::debug!(replicator = name, kind = %resource.kind, object = %object.name_any(), deleted, "replicated object changed; reconciling");
                    let _ = wake.send(ObjectRef::new(name));
                }
            }
        })
        .abort_handle();
        watched.insert(slot, handle);
    }
}

/// The Ready condition's status, reason and message for `entries`.
fn verdict(entries: &[ApplyStatus]) -> Verdict {
    let bad: Vec<&ApplyStatus> = entries
        .iter()
        .filter(|e| e.apply_status != ApplyState::Applied && e.apply_status != ApplyState::Existing)
        .collect();
    if bad.is_empty() {
        let clusters: BTreeSet<&str> = entries.iter().map(|e| e.cluster.as_str()).collect();
        return Verdict::ok(
            Reason::Synced,
            format!("every object applied on {} cluster(s)", clusters.len()),
        );
    }
    let rank = |s: &ApplyState| match s {
        ApplyState::Failed => 0,
        ApplyState::Conflict => 1,
        ApplyState::LeftBehind => 2,
        _ => 3,
    };
    let worst = bad
        .iter()
        .min_by_key(|e| rank(&e.apply_status))
        .expect("not empty");
    let reason = match worst.apply_status {
        ApplyState::Failed => Reason::ApplyFailed,
        ApplyState::Conflict => Reason::Conflict,
        ApplyState::LeftBehind => Reason::LeftBehind,
        _ => Reason::Unreachable,
    };
    let mut by_cluster: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for e in &bad {
        by_cluster
            .entry(e.cluster.as_str())
            .or_default()
            .push(format!("{} {} {}", e.kind, e.name, e.apply_status));
    }
    let summary = by_cluster
        .iter()
        .map(|(c, list)| format!("{c}: {}", list.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    let first = worst.message.clone().unwrap_or_default();
    Verdict::not(reason, xcc_kube::bounded(&format!("{summary} ({first})")))
}

/// Writes the status (nothing when unchanged); publishes an Event when the reason changes.
async fn write_status(
    api: &Api<Replicator>,
    replicator: &Replicator,
    ctx: &Context,
    applied: Vec<ApplyStatus>,
    verdict: Verdict,
) -> Result<(), kube::Error> {
    let old = replicator.status.clone().unwrap_or_default();
    let generation = replicator.meta().generation;
    let mut status = ReplicatorStatus {
        applied,
        synced: SyncState::from_bool(verdict.ready),
        observed_generation: generation,
        conditions: old.conditions.clone(),
    };
    verdict.set(&mut status.conditions, "Ready", generation);
    crate::sink::write_status(api, replicator, &status, &ctx.counted).await?;
    if reason_of(&old.conditions, "Ready") != Some(&*verdict.reason) {
        let Verdict {
            ready,
            reason: why,
            message,
            ..
        } = verdict;
        tracing::info!(replicator = %replicator.name_any(), ready, reason = %why, %message, "Replicator status");
        let event = KubeEvent {
            type_: if ready {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: why.into(),
            note: Some(message),
            action: "Replicate".into(),
            secondary: None,
        };
        if let Err(error) = ctx
            .recorder
            .publish(&event, &replicator.object_ref(&()))
            .await
        {
            tracing::debug!(replicator = %replicator.name_any(), %error, "could not publish an Event");
        }
    }
    Ok(())
}

async fn apply(
    api: &Api<Replicator>,
    replicator: &Replicator,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = replicator.name_any();
    let origin = desired::origin(&name);
    let kinds = resolve_kinds(replicator, ctx).await;
    let certs = match certificates(replicator, ctx, &origin).await {
        Ok(certs) => certs,
        Err(why) => {
            write_status(
                api,
                replicator,
                ctx,
                Vec::new(),
                Verdict::not(Reason::InvalidSpec, why),
            )
            .await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };
    let objects = match desired::objects(replicator, &name, certs.as_ref(), &kinds) {
        Ok(objects) => objects,
        Err(why) => {
            write_status(
                api,
                replicator,
                ctx,
                Vec::new(),
                Verdict::not(Reason::InvalidSpec, why),
            )
            .await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };
    if !ctx.registry.read() {
        // The detector reads the Secret at start; it wakes every Replicator when it has.
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let clusters = resolve(replicator, ctx, &[]);
    let names: BTreeSet<String> = clusters
        .iter()
        .map(|c| match c {
            Resolved::Ready(c) => c.name.clone(),
            Resolved::Failed { name, .. } => name.clone(),
        })
        .collect();
    // Clusters dropped from targetCluster (or left behind before): our objects there go.
    let stale: Vec<String> = replicator
        .status
        .iter()
        .flat_map(|s| &s.applied)
        .map(|e| e.cluster.clone())
        .filter(|c| !names.contains(c))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let work = clusters.iter().map(|c| async {
        match c {
            Resolved::Ready(cluster) => {
                apply_cluster(ctx, cluster, &objects, &origin, replicator).await
            }
            Resolved::Failed { name, why } => objects
                .iter()
                .map(|o| entry(name, o, ApplyState::Failed, Some(xcc_kube::bounded(why))))
                .collect(),
        }
    });
    let mut applied: Vec<ApplyStatus> = futures::future::join_all(work)
        .await
        .into_iter()
        .flatten()
        .collect();
    if !stale.is_empty() {
        let objects = without_shared_namespace(replicator, ctx, &objects).await?;
        applied.extend(remove_everywhere(replicator, ctx, &objects, &origin, &stale, true).await);
    }
    let verdict = verdict(&applied);
    let synced = verdict.ready;
    write_status(api, replicator, ctx, applied, verdict).await?;
    Ok(Action::requeue(if synced {
        Duration::from_secs(300)
    } else {
        Duration::from_secs(10)
    }))
}

/// `objects` without the namespace when another Replicator replicates into it too: deleting it
/// would take that Replicator's objects with it. It stays, with our origin, as that Replicator's
/// `existing` namespace.
async fn without_shared_namespace(
    replicator: &Replicator,
    ctx: &Context,
    objects: &[Object],
) -> Result<Vec<Object>, kube::Error> {
    let namespace = &replicator.spec.replication_namespace;
    let others = Api::<Replicator>::all(ctx.client.clone())
        .list(&Default::default())
        .await?;
    let shared = others.items.iter().any(|other| {
        other.name_any() != replicator.name_any()
            && other.metadata.deletion_timestamp.is_none()
            && &other.spec.replication_namespace == namespace
    });
    if shared {
        tracing::info!(replicator = %replicator.name_any(), %namespace, "namespace kept: another Replicator uses it");
    }
    Ok(objects
        .iter()
        .filter(|o| !(shared && o.kind() == "Namespace"))
        .cloned()
        .collect())
}

/// Removes the objects from `clusters` (by name); what was left behind.
async fn remove_everywhere(
    replicator: &Replicator,
    ctx: &Context,
    objects: &[Object],
    origin: &str,
    clusters: &[String],
    only_these: bool,
) -> Vec<ApplyStatus> {
    let resolved = if only_these {
        let mut probe = replicator.clone();
        probe.spec.target_cluster = Vec::new();
        resolve(&probe, ctx, clusters)
            .into_iter()
            .filter(|c| match c {
                Resolved::Ready(c) => clusters.contains(&c.name),
                Resolved::Failed { .. } => true,
            })
            .collect()
    } else {
        resolve(replicator, ctx, clusters)
    };
    let work = resolved.iter().map(|c| async {
        match c {
            Resolved::Ready(cluster) => cleanup_cluster(ctx, cluster, objects, origin).await,
            Resolved::Failed { name, why } => objects
                .iter()
                .rev()
                .map(|o| {
                    entry(
                        name,
                        o,
                        ApplyState::LeftBehind,
                        Some(xcc_kube::bounded(why)),
                    )
                })
                .collect(),
        }
    });
    futures::future::join_all(work)
        .await
        .into_iter()
        .flatten()
        .collect()
}

async fn cleanup(
    api: &Api<Replicator>,
    replicator: &Replicator,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = replicator.name_any();
    let origin = desired::origin(&name);
    ctx.made
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&replicator.uid().unwrap_or_default());
    let kinds = resolve_kinds(replicator, ctx).await;
    // The Secrets' names are all that matter for deletion.
    let names_only = Bundle {
        hosts: Vec::new(),
        not_after: 0,
        ca: BTreeMap::new(),
        client: BTreeMap::new(),
    };
    let objects = match desired::objects(replicator, &name, Some(&names_only), &kinds) {
        Ok(objects) => objects,
        // A spec that never made objects has nothing to remove beyond what it names.
        Err(why) => {
            tracing::info!(replicator = %name, %why, "Replicator removed; its spec named nothing to remove");
            return Ok(Action::await_change());
        }
    };
    let in_status: Vec<String> = replicator
        .status
        .iter()
        .flat_map(|s| &s.applied)
        .map(|e| e.cluster.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let objects = without_shared_namespace(replicator, ctx, &objects).await?;
    let left = remove_everywhere(replicator, ctx, &objects, &origin, &in_status, false).await;
    if !left.is_empty() {
        let message = verdict(&left).message;
        let note = xcc_kube::bounded(&format!("Replicator deleted; left behind: {message}"));
        tracing::warn!(replicator = %name, %note, "Replicator deleted with objects left behind");
        write_status(
            api,
            replicator,
            ctx,
            left,
            Verdict::not(Reason::LeftBehind, note.clone()),
        )
        .await?;
    } else {
        tracing::info!(replicator = %name, "Replicator deleted; its objects are removed everywhere");
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use serde_json::json;
    use xcc_kube::scenario::{Running, Scenario};

    fn e(cluster: &str, status: ApplyState) -> ApplyStatus {
        ApplyStatus {
            cluster: cluster.into(),
            kind: "Deployment".into(),
            name: "nginx".into(),
            apply_status: status,
            message: Some("why".into()),
        }
    }

    const NGINX: &str = "/api/v1/namespaces/test-ns/configmaps/nginx";

    /// `METHOD path?query` of each request.
    async fn lines(server: Running) -> Vec<String> {
        server
            .done()
            .await
            .iter()
            .map(|r| format!("{} {}", r.method, r.uri()))
            .collect()
    }

    fn context(client: Client) -> Context {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::sync_metrics::SyncMetrics::register(&mut registry);
        let (wake, _) = tokio::sync::mpsc::unbounded_channel();
        Context {
            client: client.clone(),
            peers: PeerClients::default(),
            sources: Sources::default(),
            registry: Registry::default(),
            recorder: Recorder::new(
                client,
                kube::runtime::events::Reporter {
                    controller: "test".into(),
                    instance: None,
                },
            ),
            counted: Counted {
                metrics,
                reconciler: "test",
            },
            wake,
            written: Arc::default(),
            watched: Mutex::default(),
            kinds: tokio::sync::Mutex::default(),
            made: Mutex::default(),
        }
    }

    fn cluster(client: Client) -> Cluster {
        Cluster {
            name: "v1262-cluster.kubernetes-admin2".into(),
            client,
            identity: "plumber-system/kubeconfig#secondary1@u/1".into(),
            server: Some("https://127.0.0.1:6444/".into()),
        }
    }

    fn app() -> Replicator {
        serde_json::from_value(json!({
            "apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "Replicator",
            "metadata": {"name": "app"},
            "spec": {"replicationNamespace": "test-ns", "configMapName": "nginx",
                     "configMapData": {"a": "1"}}
        }))
        .unwrap()
    }

    fn config_map() -> Object {
        desired::objects(&app(), "app", None, &Kinds::new())
            .unwrap()
            .remove(1)
    }

    fn current(origin: Option<&str>, data: &str, rv: &str) -> Value {
        let mut cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "nginx", "namespace": "test-ns", "resourceVersion": rv,
                         "managedFields": [{"manager": "kubectl-create", "operation": "Update"}]},
            "data": {"a": data},
        });
        if let Some(origin) = origin {
            cm["metadata"]["annotations"] = json!({ORIGIN_ANNOTATION: origin});
        }
        cm
    }

    #[tokio::test]
    async fn someone_elses_object_is_a_conflict_and_not_written() {
        let (client, server) = Scenario::new()
            .expect("GET", NGINX)
            .reply((200, current(None, "theirs", "5")))
            .run();
        let ctx = context(client.clone());
        let (status, message) = apply_one(
            &ctx,
            &cluster(client),
            &config_map(),
            &desired::origin("app"),
            &app(),
            &mut None,
        )
        .await
        .unwrap();
        assert_eq!(status, ApplyState::Conflict);
        let message = message.unwrap();
        assert!(
            message.contains("kubectl-create") && message.contains("no origin annotation"),
            "{message}"
        );
        let seen = lines(server).await;
        assert_eq!(seen.len(), 1, "only read: {seen:?}");
        assert!(seen[0].starts_with("GET /api/v1/namespaces/test-ns/configmaps/nginx"));
    }

    #[tokio::test]
    async fn an_object_the_original_made_is_adopted_with_a_forced_apply() {
        let mut theirs = current(None, "1", "5");
        theirs["metadata"]["managedFields"] =
            json!([{"manager": "plumberctl", "operation": "Apply"}]);
        theirs["metadata"]["ownerReferences"] = json!([{"apiVersion": "plumber.jnytnai0613.github.io/v1",
            "kind": "Replicator", "name": "app", "uid": "u", "controller": true}]);
        let origin = desired::origin("app");
        let (client, server) = Scenario::new()
            .expect("GET", NGINX)
            .reply((200, theirs))
            .expect("PATCH", NGINX)
            .reply((200, current(Some(&origin), "1", "6")))
            .run();
        let ctx = context(client.clone());
        let (status, message) = apply_one(
            &ctx,
            &cluster(client),
            &config_map(),
            &origin,
            &app(),
            &mut None,
        )
        .await
        .unwrap();
        assert_eq!((status, message), (ApplyState::Applied, None));
        let seen = lines(server).await;
        assert!(
            seen[1].starts_with("PATCH /api/v1/namespaces/test-ns/configmaps/nginx?")
                && seen[1].contains("force=true"),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn our_drifted_object_is_put_back_and_its_new_version_remembered() {
        let origin = desired::origin("app");
        let (client, server) = Scenario::new()
            .expect("GET", NGINX)
            .reply((200, current(Some(&origin), "edited", "5")))
            .expect("PATCH", NGINX)
            .reply((200, current(Some(&origin), "1", "6")))
            .run();
        let ctx = context(client.clone());
        let target = cluster(client);
        let object = config_map();
        let (status, _) = apply_one(&ctx, &target, &object, &origin, &app(), &mut None)
            .await
            .unwrap();
        assert_eq!(status, ApplyState::Applied);
        let seen = lines(server).await;
        assert!(
            seen[1].starts_with("PATCH /api/v1/namespaces/test-ns/configmaps/nginx?")
                && seen[1].contains("force=true")
                && seen[1].contains("fieldManager=xcc-agent"),
            "{seen:?}"
        );
        let written = ctx
            .written
            .lock()
            .unwrap()
            .get(&key(&target, &object))
            .cloned();
        assert_eq!(
            written.as_deref(),
            Some("6"),
            "the watch event of our write wakes nothing"
        );
    }

    #[tokio::test]
    async fn an_up_to_date_object_is_not_written_and_a_new_one_is_applied_unforced() {
        let origin = desired::origin("app");
        let (client, server) = Scenario::new()
            .expect("GET", NGINX)
            .reply((200, current(Some(&origin), "1", "5")))
            .run();
        let ctx = context(client.clone());
        let (status, _) = apply_one(
            &ctx,
            &cluster(client),
            &config_map(),
            &origin,
            &app(),
            &mut None,
        )
        .await
        .unwrap();
        assert_eq!(status, ApplyState::Applied);
        assert_eq!(lines(server).await.len(), 1);

        let missing = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404});
        let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409, "message": "Apply failed with 1 conflict: conflict with \"kubectl\""});
        let (client, server) = Scenario::new()
            .expect("GET", NGINX)
            .reply((404, missing))
            .expect("PATCH", NGINX)
            .reply((409, conflict))
            .run();
        let ctx = context(client.clone());
        let (status, message) = apply_one(
            &ctx,
            &cluster(client),
            &config_map(),
            &origin,
            &app(),
            &mut None,
        )
        .await
        .unwrap();
        assert_eq!(status, ApplyState::Conflict);
        assert!(message.unwrap().contains("made meanwhile"));
        let seen = lines(server).await;
        assert!(
            seen[1].starts_with("PATCH") && !seen[1].contains("force=true"),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn a_namespace_another_replicator_uses_is_not_deleted() {
        let rep = |name: &str, ns: &str| {
            json!({"apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "Replicator",
                   "metadata": {"name": name}, "spec": {"replicationNamespace": ns}})
        };
        let list = |items: Vec<Value>| {
            json!({"apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "ReplicatorList",
                   "metadata": {"resourceVersion": "1"}, "items": items})
        };
        let mine: Replicator = serde_json::from_value(json!({
            "apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "Replicator",
            "metadata": {"name": "app"},
            "spec": {"replicationNamespace": "test-ns", "configMapName": "nginx"}
        }))
        .unwrap();
        let objects = desired::objects(&mine, "app", None, &Kinds::new()).unwrap();
        let replicators = "/apis/plumber.jnytnai0613.github.io/v1/replicators";
        let (client, server) = Scenario::new()
            .expect("GET", replicators)
            .reply((
                200,
                list(vec![rep("app", "test-ns"), rep("other", "test-ns")]),
            ))
            .run();
        let kept = without_shared_namespace(&mine, &context(client), &objects)
            .await
            .unwrap();
        server.done().await;
        assert_eq!(
            kept.iter().map(|o| o.kind()).collect::<Vec<_>>(),
            ["ConfigMap"]
        );
        let (client, server) = Scenario::new()
            .expect("GET", replicators)
            .reply((
                200,
                list(vec![rep("app", "test-ns"), rep("other", "elsewhere")]),
            ))
            .run();
        let all = without_shared_namespace(&mine, &context(client), &objects)
            .await
            .unwrap();
        server.done().await;
        assert_eq!(
            all.iter().map(|o| o.kind()).collect::<Vec<_>>(),
            ["Namespace", "ConfigMap"]
        );
    }

    #[test]
    fn one_silent_target_is_unreachable_and_a_conflict_outranks_it() {
        let synced = verdict(&[e("a", ApplyState::Applied), e("b", ApplyState::Existing)]);
        assert!(synced.ready);
        assert_eq!(synced.reason, Reason::Synced);
        let silent = verdict(&[e("a", ApplyState::Applied), e("b", ApplyState::Unreachable)]);
        assert!(!silent.ready);
        assert_eq!(silent.reason, Reason::Unreachable);
        assert!(
            silent
                .message
                .starts_with("b: Deployment nginx Unreachable"),
            "{}",
            silent.message
        );
        let conflict = verdict(&[
            e("b", ApplyState::Unreachable),
            e("c", ApplyState::Conflict),
        ]);
        assert_eq!(conflict.reason, Reason::Conflict);
    }
}

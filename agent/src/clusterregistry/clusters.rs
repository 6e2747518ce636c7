//! The Cluster reconciler: tells the local Cluster from the peers (by the UID of kube-system),
//! builds each peer's client from its Secret, checks that the peer answers (at most every 5 s,
//! backing off while it does not), and writes what it found into the status and the peer table
//! the sync engine reads.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use dashmap::DashMap;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        controller::Action,
        reflector::{ObjectRef, Store},
    },
};
use xcc_kube::{
    ConditionStatus, KubeconfigError, remove_condition, set_condition,
    trust::{INSECURE_PEER_CONDITION, INSECURE_PEER_REASON},
};

use super::{
    CLUSTER_DISABLED_ANNOTATION, DEFAULT_SECRET_NAMESPACE, PeerState, PeerTable, SECRET_TYPE,
    api::{Cluster, ClusterReason, ClusterState, ClusterStatus, ClusterType},
};
use crate::{
    sink::{self, Counted},
    sources::{LocalSecrets, SecretChange},
};
use xcc_kube::{PeerClient, PeerClients};

/// Liveness checks of one peer are at least this far apart.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// Longest wait between checks of a failing peer.
const MAX_CHECK_BACKOFF: Duration = Duration::from_secs(60);
/// How long a liveness check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(4);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
}

impl xcc_sync::kit::ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(error) => error.metric_label(),
        }
    }
}

/// The last liveness check of a peer.
pub struct Check {
    identity: String,
    /// Not checked again before this.
    next: Instant,
    failures: u32,
    /// The UID of kube-system there, or why it could not be read.
    result: Result<String, String>,
}

pub struct Context {
    pub client: Client,
    pub local_id: String,
    pub peers: PeerClients,
    pub recorder: Recorder,
    pub table: tokio::sync::watch::Sender<PeerTable>,
    pub clusters: Store<Cluster>,
    pub checks: DashMap<String, Check>,
    /// Where status writes are counted (reconciler `clusters`).
    pub counted: Counted,
}

/// The delay before the next check after `failures` failures in a row (0: healthy).
pub fn check_delay(failures: u32) -> Duration {
    if failures == 0 {
        return CHECK_INTERVAL;
    }
    CHECK_INTERVAL
        .saturating_mul(2u32.saturating_pow(failures - 1))
        .min(MAX_CHECK_BACKOFF)
}

/// What the reconciler found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// `status.state`, in cluster-registry's words.
    pub state: ClusterState,
    /// Reason of the Ready condition: the state, or a finer cause (`KubeconfigRejected`).
    pub reason: ClusterReason,
    pub local: bool,
    pub message: String,
    /// Why the peer's identity is not verified (`--allow-insecure-peers`), if it is not.
    pub insecure: Option<String>,
}

impl Found {
    fn peer(state: ClusterState, message: impl Into<String>) -> Found {
        Found {
            reason: ClusterReason::from(&state),
            state,
            local: false,
            message: message.into(),
            insecure: None,
        }
    }

    fn through(mut self, peer: &PeerClient) -> Found {
        self.insecure = peer.insecure_message();
        self
    }
}

async fn liveness(ctx: &Context, name: &str, peer: &PeerClient) -> Result<String, String> {
    let now = Instant::now();
    // The guard goes at the end of this statement, before the check awaits.
    let due = ctx
        .checks
        .get(name)
        .filter(|check| check.identity == peer.identity && now < check.next)
        .map(|check| check.result.clone());
    if let Some(result) = due {
        return result;
    }
    let namespaces: Api<Namespace> = Api::all(peer.client.clone());
    let result = match tokio::time::timeout(CHECK_TIMEOUT, namespaces.get("kube-system")).await {
        Ok(Ok(ns)) => Ok(ns.uid().unwrap_or_default()),
        Ok(Err(error)) => Err(xcc_kube::bounded(&error)),
        Err(_) => Err(format!("no answer within {CHECK_TIMEOUT:?}")),
    };
    let failures = match &result {
        Ok(_) => 0,
        Err(_) => ctx
            .checks
            .get(name)
            .filter(|old| old.identity == peer.identity)
            .map_or(1, |old| old.failures + 1),
    };
    ctx.checks.insert(
        name.to_string(),
        Check {
            identity: peer.identity.clone(),
            next: now + check_delay(failures),
            failures,
            result: result.clone(),
        },
    );
    result
}

/// Examines a peer Cluster; returns what it found and the client to read it with.
async fn examine_peer(cluster: &Cluster, ctx: &Context) -> (Found, Option<PeerClient>) {
    let name = cluster.name_any();
    let (peer, at) = match open_peer(cluster, &ctx.client, &ctx.peers).await {
        Ok(opened) => opened,
        Err(found) => return (found, None),
    };
    match liveness(ctx, &name, &peer).await {
        Ok(uid) if uid == cluster.spec.cluster_id => (
            Found::peer(
                ClusterState::Ready,
                format!("reachable with the kubeconfig of Secret {at}"),
            )
            .through(&peer),
            Some(peer),
        ),
        Ok(uid) => {
            let message = format!(
                "the kubeconfig of Secret {at} reaches the cluster with ID {uid}, not spec.clusterID {}: fix the Secret or the Cluster",
                cluster.spec.cluster_id
            );
            (Found::peer(ClusterState::InvalidAuthInfo, message), None)
        }
        Err(error) => {
            let message = format!(
                "cannot reach the API server with the kubeconfig of Secret {at}: {error}; retrying with backoff"
            );
            (
                Found::peer(ClusterState::Failed, message).through(&peer),
                Some(peer),
            )
        }
    }
}

/// The client of peer Cluster `cluster` (built from its kubeconfig Secret through the trust gate)
/// and the Secret's `namespace/name`, or what stops it (disabled, no Secret, kubeconfig
/// refused): the one way every reconciler finds a peer of the group.
pub(crate) async fn open_peer(
    cluster: &Cluster,
    client: &Client,
    peers: &PeerClients,
) -> Result<(PeerClient, String), Found> {
    let name = cluster.name_any();
    if super::disabled(cluster) {
        let message = format!(
            "annotation {CLUSTER_DISABLED_ANNOTATION}=true: nothing is read from this cluster; remove the annotation to read from it again"
        );
        return Err(Found::peer(ClusterState::Disabled, message));
    }
    let (secret, at) = peer_secret(cluster, &name, client, peers).await?;
    match peers.client_for(&secret).await {
        Ok(peer) => Ok((peer, at)),
        Err(error @ KubeconfigError::Rejected { .. }) => {
            // Nothing was run, read or sent; the copies from this peer stay as they are.
            let mut found = Found::peer(
                ClusterState::InvalidAuthInfo,
                format!("{error}; nothing is read from cluster {name} until the Secret is fixed"),
            );
            found.reason = ClusterReason::KubeconfigRejected;
            Err(found)
        }
        Err(error) => {
            let message = format!(
                "Secret {at}: {error}; it must hold a kubeconfig for cluster {name} under key kubeconfig"
            );
            Err(Found::peer(ClusterState::InvalidAuthInfo, message))
        }
    }
}

/// The kubeconfig Secret of peer Cluster `name` and its `namespace/name`, or what is wrong
/// with its reference.
async fn peer_secret(
    cluster: &Cluster,
    name: &str,
    client: &Client,
    peers: &PeerClients,
) -> Result<(Secret, String), Found> {
    let Some(secret_ref) = cluster
        .spec
        .auth_info
        .as_ref()
        .and_then(|a| a.secret_ref.as_ref())
        .filter(|r| !r.name.is_empty())
    else {
        let message = format!(
            "spec.authInfo.secretRef is not set: name a Secret of type {SECRET_TYPE} whose key kubeconfig reads cluster {name}"
        );
        return Err(Found::peer(ClusterState::MissingAuthInfo, message));
    };
    let namespace = secret_ref
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| DEFAULT_SECRET_NAMESPACE.to_string());
    let at = format!("{namespace}/{}", secret_ref.name);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    match secrets.get_opt(&secret_ref.name).await {
        Ok(Some(secret)) => Ok((secret, at)),
        Ok(None) => {
            peers.forget(&namespace, &secret_ref.name);
            let message = format!(
                "Secret {at} not found: copy it from cluster {name} (it holds a kubeconfig that reads that cluster)"
            );
            Err(Found::peer(ClusterState::MissingAuthInfo, message))
        }
        Err(error) => {
            let message = format!("cannot read Secret {at}: {error}");
            Err(Found::peer(ClusterState::MissingAuthInfo, message))
        }
    }
}

/// Condition status `True` for `b`, else `False`.
fn truth(b: bool) -> ConditionStatus {
    if b {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    }
}

/// Conditions `LocalCluster` and, on the local Cluster, `LocalConflict` (`conflict`: more than
/// one Cluster has this cluster's ID).
fn set_role_conditions(
    conditions: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    found: &Found,
    conflict: bool,
    generation: Option<i64>,
) {
    set_condition(
        conditions,
        "LocalCluster",
        truth(found.local),
        if found.local {
            ClusterReason::LocalCluster
        } else {
            ClusterReason::PeerCluster
        }
        .as_str(),
        "",
        generation,
    );
    if found.local {
        set_condition(
            conditions,
            "LocalConflict",
            truth(conflict),
            if conflict {
                ClusterReason::LocalConflict
            } else {
                ClusterReason::NoConflict
            }
            .as_str(),
            if conflict {
                "more than one Cluster has this cluster's ID as spec.clusterID"
            } else {
                ""
            },
            generation,
        );
    }
}

/// The status `found` gives a Cluster whose status was `old`.
pub fn next_status(
    old: Option<&ClusterStatus>,
    generation: Option<i64>,
    found: &Found,
    conflict: bool,
    synced: bool,
) -> ClusterStatus {
    let mut status = old.cloned().unwrap_or_default();
    status.state = Some(found.state.to_string());
    status.type_ = Some(
        if found.local {
            ClusterType::Local
        } else {
            ClusterType::Peer
        }
        .to_string(),
    );
    status.message = Some(found.message.clone());
    status.observed_generation = generation;
    let conditions = &mut status.conditions;
    set_role_conditions(conditions, found, conflict, generation);
    set_condition(
        conditions,
        "Ready",
        truth(found.state == ClusterState::Ready),
        found.reason.as_str(),
        found.message.clone(),
        generation,
    );
    match &found.insecure {
        Some(why) => set_condition(
            conditions,
            INSECURE_PEER_CONDITION,
            ConditionStatus::True,
            INSECURE_PEER_REASON,
            why.clone(),
            generation,
        ),
        None => remove_condition(conditions, INSECURE_PEER_CONDITION),
    }
    set_condition(
        conditions,
        "ClustersSynced",
        truth(synced),
        if synced {
            ClusterReason::Synced
        } else {
            ClusterReason::NotSynced
        }
        .as_str(),
        if synced {
            ""
        } else if found.local {
            "not every peer cluster is reachable"
        } else {
            "this cluster is not reachable"
        },
        generation,
    );
    status
}

pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = cluster.name_any();
    let local = cluster.spec.cluster_id == ctx.local_id;
    let (found, synced, conflict) = if local {
        ctx.table.send_if_modified(|t| t.remove(&name).is_some());
        let conflict = ctx
            .clusters
            .state()
            .iter()
            .filter(|c| c.spec.cluster_id == ctx.local_id)
            .count()
            > 1;
        let table = ctx.table.borrow();
        let live_clusters = ctx.clusters.state();
        let synced = live_clusters
            .iter()
            .filter(|c| c.spec.cluster_id != ctx.local_id)
            .filter(|c| !super::disabled(c))
            .all(|c| table.get(&c.name_any()).is_some_and(|p| p.live));
        let found = Found {
            state: ClusterState::Ready,
            reason: ClusterReason::Ready,
            local: true,
            message: "this cluster (spec.clusterID is the UID of namespace kube-system)".into(),
            insecure: None,
        };
        (found, synced, conflict)
    } else {
        let (found, client) = examine_peer(&cluster, &ctx).await;
        let live = found.state == ClusterState::Ready;
        let state = PeerState {
            id: cluster.spec.cluster_id.clone(),
            client,
            live,
        };
        ctx.table.send_if_modified(|t| {
            let changed = t.get(&name).is_none_or(|old| {
                old.id != state.id
                    || old.live != state.live
                    || old.client.as_ref().map(|c| &c.identity)
                        != state.client.as_ref().map(|c| &c.identity)
            });
            t.insert(name.clone(), state);
            changed
        });
        (found, live, false)
    };
    // Forget the peers whose Cluster is gone.
    let names: Vec<String> = ctx.clusters.state().iter().map(|c| c.name_any()).collect();
    ctx.table.send_if_modified(|t| {
        let before = t.len();
        t.retain(|n, _| names.contains(n));
        t.len() != before
    });

    let old = cluster.status.as_ref();
    let status = next_status(old, cluster.metadata.generation, &found, conflict, synced);
    if Some(&status) != old {
        if old.and_then(|s| s.state.as_deref()) != Some(found.state.as_str()) {
            tracing::info!(cluster = %name, state = %found.state, message = %found.message, "Cluster state");
        }
        warn_of_trust(&ctx, &cluster, old, &status).await;
        let api = Api::<Cluster>::all(ctx.client.clone());
        sink::write_status(&api, cluster.as_ref(), &status, &ctx.counted).await?;
    }
    let next = if local {
        CHECK_INTERVAL
    } else {
        match found.state {
            ClusterState::Ready | ClusterState::Failed => ctx
                .checks
                .get(&name)
                .map_or(CHECK_INTERVAL, |c| {
                    c.next.saturating_duration_since(Instant::now())
                })
                .max(Duration::from_millis(100)),
            _ => Duration::from_secs(30),
        }
    };
    Ok(Action::requeue(next))
}

pub fn error_policy(_: Arc<Cluster>, _: &Error, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(5))
}

/// A Warning Event when the Cluster's kubeconfig is newly refused, or newly accepted without
/// TLS verification.
async fn warn_of_trust(
    ctx: &Context,
    cluster: &Cluster,
    old: Option<&ClusterStatus>,
    new: &ClusterStatus,
) {
    let condition = |status: Option<&ClusterStatus>, type_: &str| {
        status
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let mut events = Vec::new();
    if let Some((reason, message)) = condition(Some(new), "Ready")
        && reason == ClusterReason::KubeconfigRejected.as_str()
        && condition(old, "Ready").map(|c| c.0) != Some(reason)
    {
        events.push((ClusterReason::KubeconfigRejected.as_str(), message));
    }
    if let Some((_, message)) = condition(Some(new), INSECURE_PEER_CONDITION)
        && condition(old, INSECURE_PEER_CONDITION).is_none()
    {
        events.push((INSECURE_PEER_CONDITION, message));
    }
    for (reason, note) in events {
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "Connect".into(),
            secondary: None,
        };
        if let Err(error) = ctx.recorder.publish(&event, &cluster.object_ref(&())).await {
            tracing::debug!(cluster = %cluster.name_any(), %error, "could not publish an Event");
        }
    }
}

/// Wakes the Clusters whose `secretRef` names a local Secret that changed (from the process's
/// one watch of local Secrets); all of them when changes were missed.
pub fn secret_triggers(
    secrets: &LocalSecrets,
    clusters: Store<Cluster>,
) -> impl Stream<Item = ObjectRef<Cluster>> + Send + use<> {
    secrets.changes().flat_map(move |change| {
        let key = change.key();
        let missed = matches!(change, SecretChange::Missed);
        let woken: Vec<ObjectRef<Cluster>> = clusters
            .state()
            .iter()
            .filter(|c| {
                missed
                    || c.spec
                        .auth_info
                        .as_ref()
                        .and_then(|a| a.secret_ref.as_ref())
                        .is_some_and(|r| {
                            key.as_ref().is_some_and(|(namespace, name)| {
                                r.name == *name
                                    && r.namespace
                                        .as_deref()
                                        .filter(|n| !n.is_empty())
                                        .unwrap_or(DEFAULT_SECRET_NAMESPACE)
                                        == namespace
                            })
                        })
            })
            .map(|c| ObjectRef::from_obj(c.as_ref()))
            .collect();
        futures::stream::iter(woken)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_back_off_from_five_seconds_to_a_minute() {
        let delays: Vec<u64> = (0..7).map(|f| check_delay(f).as_secs()).collect();
        assert_eq!(delays, [5, 5, 10, 20, 40, 60, 60]);
    }

    #[test]
    fn status_names_state_type_and_synced() {
        let found = Found::peer(ClusterState::Failed, "cannot reach the API server");
        let status = next_status(None, Some(2), &found, false, false);
        assert_eq!(status.state.as_deref(), Some("Failed"));
        assert_eq!(status.type_.as_deref(), Some("Peer"));
        assert_eq!(status.observed_generation, Some(2));
        let condition = |t: &str| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.status.clone())
        };
        assert_eq!(condition("Ready").as_deref(), Some("False"));
        assert_eq!(condition("ClustersSynced").as_deref(), Some("False"));
        assert_eq!(condition("LocalCluster").as_deref(), Some("False"));
        assert_eq!(condition("LocalConflict"), None);
        assert_eq!(condition(INSECURE_PEER_CONDITION), None);
        // Nothing new: the same status, so no write.
        assert_eq!(
            next_status(Some(&status), Some(2), &found, false, false),
            status
        );
    }

    #[test]
    fn a_refused_kubeconfig_and_an_insecure_peer_show_in_conditions() {
        let mut found = Found::peer(
            ClusterState::InvalidAuthInfo,
            "kubeconfig ... is refused: exec",
        );
        found.reason = ClusterReason::KubeconfigRejected;
        let status = next_status(None, Some(1), &found, false, false);
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "KubeconfigRejected")
        );
        assert_eq!(status.state.as_deref(), Some("InvalidAuthInfo"));

        let mut found = Found::peer(ClusterState::Ready, "reachable");
        found.insecure = Some("not verified".into());
        let insecure = next_status(Some(&status), Some(1), &found, false, true);
        let condition = insecure
            .conditions
            .iter()
            .find(|c| c.type_ == INSECURE_PEER_CONDITION)
            .unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("True", INSECURE_PEER_REASON)
        );
        // Verified again: the condition goes.
        found.insecure = None;
        let verified = next_status(Some(&insecure), Some(1), &found, false, true);
        assert!(
            verified
                .conditions
                .iter()
                .all(|c| c.type_ != INSECURE_PEER_CONDITION)
        );
    }
}

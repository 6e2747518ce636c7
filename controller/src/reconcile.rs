//! The GatewayDNS reconciler: observe the selected clusters' gateway Services, write the desired
//! EndpointSlices to every cluster of the namespace, and say what happened in the status.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, SystemTime},
};

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams},
    runtime::{
        controller::Action,
        events::{Event as KubeEvent, EventType, Recorder},
        finalizer::{Event as Finalizer, finalizer},
        reflector::ObjectRef,
    },
};
use xcc_kube::{ConditionStatus, set_condition};
use xcc_sync::kit::ReconcileError;

use crate::{
    desired::{self, ClusterInfo, HealthView, Observation, Plan, gateway_ref},
    gatewaydns::{ClusterGatewayStatus, GatewayDNS, GatewayDNSStatus, GatewayHealth, GatewayState},
    health,
    settings::{self, InvalidField, Settings},
    workload::{ClientError, Workloads},
};

mod recovery;
mod status;
mod writes;

use recovery::recover_last_addresses;
pub use status::Details;
use status::{MixedFleet, WriteReport, truncate, update_status};
pub use writes::ClusterOutcome;
use writes::{up_to_date, wait_for_writes, write_job};

/// Field manager of every write.
pub const FIELD_MANAGER: &str = "xcc-controller";
/// Condition: some cluster of the namespace is not sent some slices (no xcc-agent announced).
pub const WITHHELD_CONDITION: &str = "RecordsWithheld";
/// Condition: slices the original XCC cannot read are left on a cluster without an xcc-agent.
pub const KEPT_CONDITION: &str = "UnreadableSlicesKept";
/// Finalizer that withdraws a deleted GatewayDNS's records everywhere.
pub const FINALIZER: &str = "connectivity.tanzu.vmware.com/xcc-controller";

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub zone: String,
    pub workloads: Workloads,
    pub recorder: Recorder,
    /// Cluster API `Cluster` (`cluster.x-k8s.io/v1beta1`).
    pub clusters: ApiResource,
    /// Backstop resync of every GatewayDNS (Service watches do the real work).
    pub resync: Duration,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Reachability of every workload cluster (the prober and the reconciles feed it).
    pub health: Arc<crate::health::Tracker>,
    /// One write lane per (namespace, cluster, GatewayDNS), all within one bound.
    pub writes: crate::queue::Queues<Lane, ClusterOutcome>,
    /// Every selected cluster's entry of each GatewayDNS (the status lists only some).
    pub details: Arc<Details>,
}

/// A write lane: (namespace, workload cluster, GatewayDNS reference).
pub type Lane = (String, String, String);

/// When a GatewayDNS whose wanted slice name is held by a slice it does not own looks again.
pub const TAKEN_RECHECK: Duration = Duration::from_secs(2);

/// How long a reconcile waits for its writes before it reports the rest as pending (they go on;
/// the GatewayDNS is looked at again when they are done).
pub const WRITE_PATIENCE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API error on the management cluster: {0}")]
    Kube(#[from] kube::Error),
    #[error(
        "cannot list Cluster API Clusters in namespace {namespace} (is Cluster API installed?): {source}"
    )]
    Clusters {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Clusters { .. } => "clusters",
            Error::Finalizer(_) => "finalizer",
        }
    }
}

pub async fn reconcile(gateway: Arc<GatewayDNS>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result = reconcile_timed(gateway, &ctx).await;
    ctx.metrics.reconciled(
        started.elapsed(),
        result.as_ref().err().map(Error::metric_label),
    );
    result
}

async fn reconcile_timed(gateway: Arc<GatewayDNS>, ctx: &Arc<Context>) -> Result<Action, Error> {
    let namespace = gateway.namespace().unwrap_or_default();
    let api: Api<GatewayDNS> = Api::namespaced(ctx.client.clone(), &namespace);
    let result = finalizer(&api, FINALIZER, gateway, |event| async {
        match event {
            Finalizer::Apply(gateway) => apply(&gateway, ctx).await,
            Finalizer::Cleanup(gateway) => cleanup(&gateway, ctx).await,
        }
    })
    .await;
    // A GatewayDNS already gone when its finalizer is removed (a stale wake, or the replica that
    // led before a rollover removed it first) is done, not a failure to retry and warn about.
    xcc_kube::finalizers::finalized(result).map_err(|e| Error::Finalizer(Box::new(e)))
}

pub fn error_policy(gateway: Arc<GatewayDNS>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(gateway = %gateway_ref(&gateway), kind = error.metric_label(), error = %xcc_kube::bounded(&error), "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn list_clusters(ctx: &Context, namespace: &str) -> Result<Vec<ClusterInfo>, Error> {
    // The Cluster watch's view, once it has listed: no request at all.
    if let Some(clusters) = ctx.workloads.index.clusters(namespace) {
        return Ok(clusters);
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &ctx.clusters);
    // resourceVersion 0: served from the API server's watch cache at once. A consistent LIST
    // waits until that cache has caught up with etcd, which after a write elsewhere takes up to
    // the server's 100 ms progress-notify tick: that wait was the whole of the propagation delay.
    // The Cluster watch wakes this GatewayDNS again when a Cluster changes, so a list a moment
    // behind is corrected by the next reconcile.
    let list = api
        .list(&ListParams::default().match_any())
        .await
        .map_err(|source| Error::Clusters {
            namespace: namespace.to_string(),
            source,
        })?;
    Ok(list
        .items
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| ClusterInfo {
            name: c.name_any(),
            labels: c.labels().clone(),
        })
        .collect())
}

async fn apply(gateway: &GatewayDNS, ctx: &Arc<Context>) -> Result<Action, Error> {
    let namespace = gateway.namespace().unwrap_or_default();
    let reference = gateway_ref(gateway);
    let api: Api<GatewayDNS> = Api::namespaced(ctx.client.clone(), &namespace);
    let settings = match settings::read(&gateway.spec) {
        Ok(settings) => settings,
        Err(invalid) => {
            tracing::warn!(gateway = %reference, %invalid, "GatewayDNS not applied: invalid field");
            invalid_spec(&api, gateway, &invalid, ctx).await?;
            return Ok(Action::requeue(ctx.resync));
        }
    };
    let (previous, restarted) = previous_entries(gateway, ctx);
    let mut view = gateway.clone();
    view.status.get_or_insert_default().clusters = previous.to_vec();
    let (clusters, all) = tokio::try_join!(list_clusters(ctx, &namespace), async {
        // From the watch cache, as the Clusters: a GatewayDNS created or changed wakes this one.
        Ok(api.list(&ListParams::default().match_any()).await?.items)
    })?;
    let peers = workload_clients(ctx, &namespace, &clusters).await;
    let selected: Vec<&ClusterInfo> = clusters
        .iter()
        .filter(|c| desired::selects(&gateway.spec.cluster_selector, &c.labels))
        .collect();
    let observations = observe_selected(ctx, gateway, &selected, &peers).await;
    if restarted {
        let entries = &mut view.status.get_or_insert_default().clusters;
        recover_last_addresses(entries, &observations, &peers, &namespace, &reference).await;
    }
    let (views, recheck) = health_views(&view, &namespace, &settings, &observations, ctx);
    let plan = desired::plan_with_health(
        &view,
        &all,
        &clusters,
        &ctx.zone,
        &settings.global,
        |name| {
            observations
                .get(name)
                .cloned()
                .unwrap_or_else(|| Observation::Unreachable("not observed".into()))
        },
        |name| views.get(name).cloned().unwrap_or_default(),
    );
    let allowed = allowed_namespaces(ctx, gateway).await?;
    let guests = guest_targets(ctx, &allowed).await?;
    let dropped = dropped_targets(ctx, gateway, &allowed).await;
    let (outcomes, pending, mut plan) =
        write_everywhere(ctx, gateway, (&clusters, &guests, &dropped), &peers, plan).await;
    let resolved_from = resolved_from(allowed, &dropped, &outcomes, &pending);
    if released_some(&previous, &plan) {
        wake_waiting(ctx, gateway, &all);
    }
    let problems: Vec<String> = outcomes.iter().filter_map(|o| o.problem.clone()).collect();
    let mixed = MixedFleet::from_outcomes(&mut plan, &outcomes);
    let insecure: Vec<String> = selected
        .iter()
        .filter_map(|cluster| ctx.workloads.insecure(&namespace, &cluster.name))
        .collect();
    let report = WriteReport {
        problems,
        pending,
        insecure,
        mixed,
        resolved_from,
    };
    update_status(&api, gateway, &previous, &plan, &report, ctx).await?;
    // A cluster that is sent less than everything is asked again soon: once an xcc-agent
    // announces itself there, it gets the rest within the announcement TTL. An unreachable
    // cluster is looked at again the moment the stale-record policy withdraws it.
    let mut next = ctx.resync;
    if report.mixed.withheld.is_some() || outcomes.iter().any(|o| o.withheld_global) {
        next = next.min(ctx.workloads.announcement_ttl());
    }
    if let Some(recheck) = recheck {
        next = next.min(recheck + Duration::from_millis(50));
    }
    // A wanted name still held by a slice of another GatewayDNS (one that just gave it up, seen
    // by a slice store a moment behind; or a person's) is looked at again soon.
    if outcomes.iter().any(|o| o.taken) {
        next = next.min(TAKEN_RECHECK);
    }
    Ok(Action::requeue(next))
}

/// The namespaces, other than its own, whose clusters `spec.resolveFrom` lets resolve the names
/// of `gateway`: from the Namespace watch, or before it has listed and only when a selector
/// needs their labels, one LIST.
async fn allowed_namespaces(ctx: &Context, gateway: &GatewayDNS) -> Result<Vec<String>, Error> {
    let namespace = gateway.namespace().unwrap_or_default();
    let spec = &gateway.spec;
    let known = ctx
        .workloads
        .index
        .with_namespaces(|all| all.map(|all| spec.resolving_namespaces(&namespace, Some(all))));
    if let Some(allowed) = known {
        return Ok(allowed);
    }
    if !spec.selects_namespaces() {
        return Ok(spec.resolving_namespaces(&namespace, None));
    }
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.client.clone());
    let list = api
        .list_metadata(&ListParams::default().match_any())
        .await?;
    let all: crate::gatewaydns::NamespaceLabels = list
        .items
        .iter()
        .map(|n| (n.name_any(), n.labels().clone()))
        .collect();
    Ok(spec.resolving_namespaces(&namespace, Some(&all)))
}

/// The clusters of the `allowed` namespaces, as (namespace, cluster).
async fn guest_targets(ctx: &Context, allowed: &[String]) -> Result<Vec<Target>, Error> {
    let mut out = Vec::new();
    for other in allowed {
        for cluster in list_clusters(ctx, other).await? {
            out.push((other.clone(), cluster.name));
        }
    }
    Ok(out)
}

/// The clusters of the namespaces the status of `gateway` says have its records
/// (`status.resolvedFrom`) that `spec.resolveFrom` no longer lists, as (namespace, cluster):
/// their records are to be withdrawn, also after a restart of the controller.
async fn dropped_targets(ctx: &Context, gateway: &GatewayDNS, allowed: &[String]) -> Vec<Target> {
    let namespace = gateway.namespace().unwrap_or_default();
    let mut out = Vec::new();
    let before = gateway.status.iter().flat_map(|s| s.resolved_from.iter());
    for other in before.filter(|n| **n != namespace && !allowed.contains(n)) {
        match list_clusters(ctx, other).await {
            Ok(clusters) => out.extend(clusters.into_iter().map(|c| (other.clone(), c.name))),
            Err(e) => {
                tracing::debug!(namespace = %other, error = %e, "cannot list the Clusters to withdraw from")
            }
        }
    }
    out
}

/// `status.resolvedFrom`: the `allowed` namespaces, and those of `dropped` where a withdrawal is
/// still pending or failed.
fn resolved_from(
    allowed: Vec<String>,
    dropped: &[Target],
    outcomes: &[Arc<ClusterOutcome>],
    pending: &[String],
) -> Vec<String> {
    let mut out = allowed;
    for (other, cluster) in dropped {
        let label = format!("{other}/{cluster}");
        let failed = outcomes
            .iter()
            .any(|o| o.cluster == label && o.problem.is_some());
        if failed || pending.contains(&label) {
            out.push(other.clone());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Whether a cluster `gateway` published (or tried to) by its last reconcile is no longer
/// selected: a later GatewayDNS that selects it may publish its name now.
fn released_some(previous: &[ClusterGatewayStatus], plan: &Plan) -> bool {
    previous.iter().any(|before| {
        before.state != GatewayState::Conflict
            && !plan.clusters.iter().any(|c| c.cluster == before.cluster)
    })
}

/// Wakes every GatewayDNS of `all` but `gateway` whose status reports a `Conflict`: the name it
/// waits for may be free now (the older one that kept it is deleted, or no longer selects it).
fn wake_waiting(ctx: &Context, gateway: &GatewayDNS, all: &[GatewayDNS]) {
    let trigger = ctx.workloads.trigger();
    for other in all {
        let waits = other.status.as_ref().is_some_and(|s| {
            s.clusters.iter().any(|c| c.state == GatewayState::Conflict)
                || s.conditions
                    .iter()
                    .any(|c| c.type_ == status::CONFLICT_CONDITION && c.status == "True")
        });
        if waits && gateway_ref(other) != gateway_ref(gateway) {
            let _ = trigger.send(ObjectRef::from_obj(other));
        }
    }
}

/// Every selected cluster's entry as the last reconcile here left it, or as the status lists it
/// (after a restart, told by `true`; a long list is bounded there).
fn previous_entries(gateway: &GatewayDNS, ctx: &Context) -> (Arc<Vec<ClusterGatewayStatus>>, bool) {
    let remembered = ctx.details.of(gateway);
    let restarted = remembered.is_none();
    let previous = remembered.unwrap_or_else(|| {
        Arc::new(
            gateway
                .status
                .as_ref()
                .map(|s| s.clusters.clone())
                .unwrap_or_default(),
        )
    });
    (previous, restarted)
}

/// A workload cluster of another namespace: (namespace, cluster).
type Target = (String, String);

/// The client of each workload cluster, by name.
type Peers = HashMap<String, Result<Client, ClientError>>;

/// One client per cluster of the namespace for the whole reconcile: the kubeconfig Secret is
/// read once, and every cluster's at once.
async fn workload_clients(ctx: &Context, namespace: &str, clusters: &[ClusterInfo]) -> Peers {
    futures::future::join_all(clusters.iter().map(|cluster| async {
        (
            cluster.name.clone(),
            ctx.workloads.client(namespace, &cluster.name).await,
        )
    }))
    .await
    .into_iter()
    .collect()
}

/// The client of `cluster` among `peers`.
fn peer(peers: &Peers, cluster: &str) -> Result<Client, ClientError> {
    peers.get(cluster).cloned().unwrap_or_else(|| {
        Err(ClientError::Unavailable(format!(
            "cluster {cluster} is not known"
        )))
    })
}

/// What the gateway Service of `gateway` looks like on each `selected` cluster, all asked at
/// once (the reconcile is on the path of every address change); `gateway` now hears of changes
/// to those Services, and to no other.
async fn observe_selected(
    ctx: &Context,
    gateway: &GatewayDNS,
    selected: &[&ClusterInfo],
    peers: &Peers,
) -> HashMap<String, Observation> {
    let namespace = gateway.namespace().unwrap_or_default();
    let me = ObjectRef::from_obj(gateway);
    let seen = futures::future::join_all(selected.iter().map(|cluster| {
        ctx.workloads.observe(
            &namespace,
            &cluster.name,
            &gateway.spec,
            &me,
            peer(peers, &cluster.name),
        )
    }))
    .await;
    let mut observations = HashMap::new();
    let mut used = BTreeSet::new();
    let mut nodes_used = BTreeSet::new();
    for (cluster, seen) in selected.iter().zip(seen) {
        observations.insert(cluster.name.clone(), seen);
        used.insert((cluster.name.clone(), gateway.spec.service.clone()));
        if gateway.spec.needs_nodes() {
            nodes_used.insert(cluster.name.clone());
        }
    }
    ctx.workloads.retain(&namespace, &me, &used);
    ctx.workloads.retain_nodes(&namespace, &me, &nodes_used);
    observations
}

/// Writes `plan` to every cluster at once, each in its own lane within the shared bound: one
/// slow or unreachable cluster delays none of the others, and this reconcile waits for it only
/// so long; its write goes on, and the status names it as pending meanwhile. The targets are
/// the clusters of the namespace and those of the other namespaces `spec.resolveFrom` allows
/// (`guests`, as (namespace, cluster)); a cluster of another namespace that is no longer
/// allowed has this GatewayDNS's slices withdrawn. Gives the outcomes, the clusters still
/// pending, and the plan back.
async fn write_everywhere(
    ctx: &Arc<Context>,
    gateway: &GatewayDNS,
    (clusters, guests, dropped): (&[ClusterInfo], &[Target], &[Target]),
    peers: &Peers,
    plan: Plan,
) -> (Vec<Arc<ClusterOutcome>>, Vec<String>, Plan) {
    let namespace = gateway.namespace().unwrap_or_default();
    let reference = gateway_ref(gateway);
    let plan = Arc::new(plan);
    // A cluster whose last write was of this same plan, and whose slices and announcement did
    // not change since, is not asked again: a reconcile that changes nothing costs O(1) per
    // cluster.
    let mut done = Vec::new();
    let mut tickets: Vec<(String, crate::queue::Ticket<ClusterOutcome>)> = Vec::new();
    for cluster in clusters {
        let lane = (namespace.clone(), cluster.name.clone(), reference.clone());
        if let Some(last) = up_to_date(ctx, &lane, &plan) {
            done.push(last);
            continue;
        }
        let job = write_job(
            ctx,
            &namespace,
            &cluster.name,
            peer(peers, &cluster.name),
            &reference,
            &plan,
        );
        tickets.push((cluster.name.clone(), ctx.writes.submit(lane, job)));
    }
    for (other, cluster) in guests {
        let lane = (other.clone(), cluster.clone(), reference.clone());
        if let Some(last) = up_to_date(ctx, &lane, &plan) {
            done.push(last);
            continue;
        }
        let client = ctx.workloads.client(other, cluster).await;
        let job = write_job(ctx, other, cluster, client, &reference, &plan);
        tickets.push((format!("{other}/{cluster}"), ctx.writes.submit(lane, job)));
    }
    // Only a GatewayDNS that reaches (or reached) other namespaces can have lanes there: the
    // others' reconciles do not look through every lane.
    let reached = gateway
        .status
        .as_ref()
        .is_some_and(|s| !s.resolved_from.is_empty());
    if reached || !guests.is_empty() || !dropped.is_empty() {
        tickets.extend(withdraw_disallowed(ctx, (&namespace, &reference), guests, dropped).await);
    }
    // Lanes of clusters that left the namespace go (a write in flight there finishes).
    let known: std::collections::HashSet<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    ctx.writes.retain(|(ns, cluster, r)| {
        ns != &namespace || r != &reference || known.contains(cluster.as_str())
    });
    let (mut outcomes, pending) =
        wait_for_writes(ctx, &ObjectRef::from_obj(gateway), tickets).await;
    outcomes.extend(done);
    let plan = Arc::try_unwrap(plan).unwrap_or_else(|shared| shared.as_ref().clone());
    (outcomes, pending, plan)
}

/// Withdraws the slices of GatewayDNS `reference` (of `namespace`) from every cluster of another
/// namespace that `allowed` does not list and that it wrote to: one it has a lane to, or one of
/// `dropped` (a namespace its status names). An empty plan through that lane; the lane goes
/// once that withdrawal went through, or once the cluster is gone. Gives the tickets of the
/// withdrawals.
async fn withdraw_disallowed(
    ctx: &Arc<Context>,
    (namespace, reference): (&str, &str),
    allowed: &[(String, String)],
    dropped: &[(String, String)],
) -> Vec<(String, crate::queue::Ticket<ClusterOutcome>)> {
    let empty = Arc::new(Plan::default());
    let mut targets: BTreeSet<(String, String)> = dropped.iter().cloned().collect();
    targets.extend(
        ctx.writes
            .keys()
            .into_iter()
            .filter(|(_, _, r)| r == reference)
            .map(|(ns, cluster, _)| (ns, cluster)),
    );
    let mut tickets = Vec::new();
    for (other, cluster) in targets {
        if other == namespace || allowed.iter().any(|(n, c)| *n == other && *c == cluster) {
            continue;
        }
        let lane = (other.clone(), cluster.clone(), reference.to_string());
        let (last, busy) = ctx.writes.last(&lane);
        let withdrawn =
            !busy && last.is_some_and(|o| o.plan_hash == empty.hash && o.problem.is_none());
        let gone = ctx
            .workloads
            .index
            .clusters(&other)
            .is_some_and(|all| !all.iter().any(|c| c.name == cluster));
        if withdrawn || gone {
            ctx.writes.retain(|k| k != &lane);
            continue;
        }
        let client = ctx.workloads.client(&other, &cluster).await;
        let job = write_job(ctx, &other, &cluster, client, reference, &empty);
        tickets.push((format!("{other}/{cluster}"), ctx.writes.submit(lane, job)));
    }
    tickets
}

/// What the health tracking and the stale-record policy say of each selected cluster, and when
/// to look again (the first moment a cluster's time runs out).
fn health_views(
    gateway: &GatewayDNS,
    namespace: &str,
    settings: &Settings,
    observations: &HashMap<String, Observation>,
    ctx: &Context,
) -> (HashMap<String, HealthView>, Option<Duration>) {
    let now = SystemTime::now();
    let old = gateway.status.clone().unwrap_or_default();
    let mut recheck: Option<Duration> = None;
    let mut views = HashMap::new();
    let old_entries: HashMap<&str, &ClusterGatewayStatus> = old
        .clusters
        .iter()
        .map(|c| (c.cluster.as_str(), c))
        .collect();
    for (cluster, observation) in observations {
        let silent = ctx.workloads.silent(namespace, cluster);
        let seen = match (observation, &silent) {
            (Observation::KubeconfigRejected(_), _) => ctx.health.get(namespace, cluster),
            (Observation::Unreachable(_), _) | (_, Some(_)) => {
                ctx.health.unreachable(namespace, cluster, now)
            }
            _ => ctx.health.reachable(namespace, cluster, now),
        };
        let before = old_entries.get(cluster.as_str()).copied();
        let was_withdrawn = before.is_some_and(|c| c.state == GatewayState::Withdrawn);
        let decision = health::decide(&seen, was_withdrawn, settings.stale, now);
        tracing::debug!(%cluster, ?seen, was_withdrawn, ?decision, silent = silent.is_some(), "health");
        if let Some(after) = decision.recheck_in {
            recheck = Some(recheck.map_or(after, |r| r.min(after)));
        }
        let ready = ctx
            .workloads
            .ready_endpoints(namespace, cluster, &gateway.spec.service);
        let unreachable = seen.unreachable_since.is_some()
            || matches!(observation, Observation::KubeconfigRejected(_));
        let state = if unreachable {
            Some(GatewayHealth::Unreachable)
        } else {
            match ready {
                Some(0) => Some(GatewayHealth::NoReadyEndpoints),
                Some(_) => Some(GatewayHealth::Healthy),
                None => None,
            }
        };
        // The status keeps the last-seen time it has while the health stays as it was: a fresh
        // time alone is never a reason to write the status (at any N, a reconcile that finds
        // nothing changed writes nothing). When the status is written for another reason, every
        // entry's time is refreshed then (see `update_status`).
        let last_seen = match (before.and_then(|c| c.last_seen.clone()), seen.last_seen) {
            (Some(kept), Some(_)) if before.and_then(|c| c.health) == state => Some(kept),
            (kept, new) => new.map(time).or(kept),
        };
        let withdrawn_because = match (seen.unreachable_since, settings.stale.withdraw_after) {
            (Some(since), Some(after)) => format!(
                "unreachable since {} (longer than spec.staleRecords.withdrawAfter, {}){}",
                time(since).0,
                humantime::format_duration(after),
                silent.map(|why| format!("; {why}")).unwrap_or_default()
            ),
            _ => format!(
                "reachable again, re-admitted after {} health checks in a row (spec.staleRecords.readmitAfter); {} so far",
                settings.stale.readmit_after, seen.streak
            ),
        };
        views.insert(
            cluster.clone(),
            HealthView {
                health: state,
                ready_endpoints: if unreachable { None } else { ready },
                unreachable_since: seen.unreachable_since.map(time),
                last_seen,
                withdrawn: decision.withdrawn,
                withdrawn_because,
            },
        );
    }
    (views, recheck)
}

/// A status time, to the second (what the API server keeps).
fn time(at: SystemTime) -> Time {
    let seconds = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    Time(
        Timestamp::from_second(i64::try_from(seconds).unwrap_or(i64::MAX))
            .unwrap_or(Timestamp::UNIX_EPOCH),
    )
}

/// A field the controller cannot use: `Ready=False` (reason `InvalidSpec`, the message names
/// the field) and a Warning Event; nothing is written to any cluster, nothing is withdrawn.
async fn invalid_spec(
    api: &Api<GatewayDNS>,
    gateway: &GatewayDNS,
    invalid: &InvalidField,
    ctx: &Context,
) -> Result<(), Error> {
    let old = gateway.status.clone().unwrap_or_default();
    let mut status = GatewayDNSStatus {
        observed_generation: gateway.metadata.generation,
        ..old.clone()
    };
    set_condition(
        &mut status.conditions,
        "Ready",
        ConditionStatus::False,
        "InvalidSpec",
        truncate(invalid.to_string(), 1000),
        gateway.metadata.generation,
    );
    if status == old {
        return Ok(());
    }
    let recorder = ctx.recorder.clone();
    let (reference, note) = (gateway.object_ref(&()), truncate(invalid.to_string(), 1000));
    tokio::spawn(async move {
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: "InvalidSpec".into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &reference).await {
            tracing::debug!(error = %e, "could not publish an Event");
        }
    });
    status::write(api, gateway, &status).await
}

/// A deleted GatewayDNS: withdraw its slices from every cluster that can be reached.
async fn cleanup(gateway: &GatewayDNS, ctx: &Arc<Context>) -> Result<Action, Error> {
    let namespace = gateway.namespace().unwrap_or_default();
    let reference = gateway_ref(gateway);
    ctx.metrics
        .cluster_states(&reference, None::<std::iter::Empty<(&str, &str)>>);
    ctx.workloads
        .retain(&namespace, &ObjectRef::from_obj(gateway), &BTreeSet::new());
    ctx.workloads
        .retain_nodes(&namespace, &ObjectRef::from_obj(gateway), &BTreeSet::new());
    let clusters = match list_clusters(ctx, &namespace).await {
        Ok(clusters) => clusters,
        // Without Cluster API there is nothing we could have written.
        Err(Error::Clusters {
            source: kube::Error::Api(s),
            ..
        }) if s.code == 404 => Vec::new(),
        Err(e) => return Err(e),
    };
    // Every cluster it may have written to: those of its namespace, those of the namespaces
    // `spec.resolveFrom` allows, and those it still has a lane to.
    let mut targets: BTreeSet<(String, String)> = clusters
        .iter()
        .map(|c| (namespace.clone(), c.name.clone()))
        .collect();
    let allowed = allowed_namespaces(ctx, gateway).await.unwrap_or_default();
    targets.extend(guest_targets(ctx, &allowed).await.unwrap_or_default());
    targets.extend(dropped_targets(ctx, gateway, &allowed).await);
    targets.extend(
        ctx.writes
            .keys()
            .into_iter()
            .filter(|(_, _, r)| r == &reference)
            .map(|(ns, cluster, _)| (ns, cluster)),
    );
    // Through each cluster's lane, after any write of this GatewayDNS still going on there.
    let empty = Arc::new(Plan::default());
    let mut tickets = Vec::new();
    for (ns, cluster) in targets {
        let client = ctx.workloads.client(&ns, &cluster).await;
        let job = write_job(ctx, &ns, &cluster, client, &reference, &empty);
        let lane = (ns, cluster.clone(), reference.clone());
        tickets.push((cluster, ctx.writes.submit(lane, job)));
    }
    for (cluster, ticket) in tickets {
        let Some(outcome) = ticket.done().await else {
            continue;
        };
        if let Some(problem) = &outcome.problem {
            tracing::warn!(gateway = %reference, %problem, "could not withdraw records on deletion");
        }
        for (slice, kind) in &outcome.kept_unreadable {
            tracing::warn!(gateway = %reference, %cluster, %slice, address_type = %kind, "GatewayDNS deleted; its EndpointSlice the original XCC cannot read is left on a cluster with no xcc-agent announced (deleting it would crash an original dns-server)");
        }
    }
    ctx.writes.retain(|(_, _, r)| r != &reference);
    ctx.details.forget(gateway);
    // A later GatewayDNS waiting for a name this one kept takes it over now.
    let api: Api<GatewayDNS> = Api::namespaced(ctx.client.clone(), &namespace);
    match api.list(&ListParams::default().match_any()).await {
        Ok(all) => wake_waiting(ctx, gateway, &all.items),
        Err(e) => tracing::debug!(error = %e, "could not list the GatewayDNS waiting for a name"),
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use xcc_kube::scenario::{Request, Running, Scenario, not_found, with_status};

    const GATEWAYS: &str =
        "/apis/connectivity.tanzu.vmware.com/v1alpha1/namespaces/dev-team/gatewaydns";
    const STATUS: &str = "/apis/connectivity.tanzu.vmware.com/v1alpha1/namespaces/dev-team/gatewaydns/dev-team-gateway-dns/status";

    /// The management cluster: two Cluster API Clusters (one selected) and the gateway, read as
    /// often as asked; status patches and Events accepted. A test adds what it expects once.
    fn management(gateway: &Value) -> Scenario {
        let cluster = |name: &str, contour: &str| {
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                   "metadata": {"name": name, "namespace": "dev-team",
                                "labels": {"hasContour": contour}}})
        };
        let patched = gateway.clone();
        Scenario::new()
            .always(
                "GET",
                "/apis/cluster.x-k8s.io/v1beta1/namespaces/dev-team/clusters",
            )
            .reply((
                200,
                json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "ClusterList",
                       "metadata": {"resourceVersion": "5"},
                       "items": [cluster("cluster-a", "true"), cluster("cluster-b", "false")]}),
            ))
            .always("GET", GATEWAYS)
            .reply((
                200,
                json!({"apiVersion": "connectivity.tanzu.vmware.com/v1alpha1",
                       "kind": "GatewayDNSList", "metadata": {"resourceVersion": "5"},
                       "items": [gateway]}),
            ))
            .always("PATCH", STATUS)
            .reply_to(move |request| with_status(patched.clone(), &request.body))
            .always("POST", "/apis/events.k8s.io/v1/namespaces/dev-team/events")
            .reply_to(|request| (201, request.body.clone()))
    }

    /// A reconciler's context on the management cluster `client`.
    fn context(client: Client) -> Arc<Context> {
        let (trigger, _) = tokio::sync::mpsc::unbounded_channel();
        Arc::new(Context {
            client: client.clone(),
            zone: "xcc.test".into(),
            workloads: Workloads::new(
                client.clone(),
                xcc_kube::PeerClients::default(),
                trigger,
                Duration::from_secs(30),
            ),
            recorder: Recorder::new(
                client,
                kube::runtime::events::Reporter {
                    controller: "test".into(),
                    instance: None,
                },
            ),
            clusters: ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                "cluster.x-k8s.io",
                "v1beta1",
                "Cluster",
            )),
            resync: Duration::from_secs(300),
            metrics: Arc::new(crate::metrics::Metrics::new()),
            health: Arc::default(),
            writes: crate::queue::Queues::new(8),
            details: Arc::default(),
        })
    }

    /// Reconciles `gateway` against `scenario` and returns the requests the management
    /// cluster received and the last status written.
    async fn reconcile_on(gateway: Value, scenario: Scenario) -> (Vec<String>, Value) {
        let (client, server): (Client, Running) = scenario.run();
        let gateway: GatewayDNS = serde_json::from_value(gateway).unwrap();
        reconcile(Arc::new(gateway), context(client)).await.unwrap();
        let seen = server.done().await;
        let status = seen
            .iter()
            .rev()
            .find(|r| r.method == "PATCH" && r.path == STATUS)
            .map(|r| r.body["status"].clone())
            .expect("a status was written");
        (seen.iter().map(Request::line).collect(), status)
    }

    #[tokio::test]
    async fn a_selected_cluster_without_a_kubeconfig_is_named_in_the_status_and_nothing_is_written_elsewhere()
     {
        let gateway = json!({
            "apiVersion": "connectivity.tanzu.vmware.com/v1alpha1", "kind": "GatewayDNS",
            "metadata": {"name": "dev-team-gateway-dns", "namespace": "dev-team", "uid": "g-1",
                         "generation": 3, "resourceVersion": "4", "finalizers": [FINALIZER]},
            "spec": {"clusterSelector": {"matchLabels": {"hasContour": "true"}},
                     "service": "projectcontour/envoy", "resolutionType": "loadBalancer"},
        });
        // Every cluster of the namespace gets the slices, so both kubeconfigs are looked for.
        let scenario = management(&gateway)
            .in_any_order()
            .expect(
                "GET",
                "/api/v1/namespaces/dev-team/secrets/cluster-a-kubeconfig",
            )
            .reply(not_found())
            .expect(
                "GET",
                "/api/v1/namespaces/dev-team/secrets/cluster-b-kubeconfig",
            )
            .reply(not_found());
        let (seen, status) = reconcile_on(gateway, scenario).await;

        assert_eq!(status["observedGeneration"], 3, "{status}");
        let clusters = status["clusters"].as_array().expect("per-cluster entries");
        assert_eq!(clusters.len(), 1, "only the selected cluster: {status}");
        assert_eq!(clusters[0]["cluster"], "cluster-a");
        assert_eq!(clusters[0]["state"], "Unreachable", "{status}");
        let message = clusters[0]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("dev-team/cluster-a-kubeconfig")
                && message.contains("last records are kept"),
            "{message}"
        );
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .expect("a Ready condition");
        assert_eq!(ready["status"], "False", "{status}");
        assert_eq!(ready["observedGeneration"], 3);
        // The management cluster is only read, apart from the status and Events: no slice, no
        // Secret and no other object is written there.
        let writes: Vec<&String> = seen
            .iter()
            .filter(|r| !r.starts_with("GET "))
            .filter(|r| !r.ends_with("/status") && !r.ends_with("/events"))
            .collect();
        assert!(writes.is_empty(), "{seen:?}");
        assert!(
            seen.iter()
                .any(|r| r.ends_with("/secrets/cluster-a-kubeconfig")),
            "the kubeconfig of the selected cluster is looked for: {seen:?}"
        );
    }

    #[tokio::test]
    async fn a_field_the_controller_cannot_use_is_named_in_the_ready_condition_and_nothing_is_written()
     {
        let gateway = json!({
            "apiVersion": "connectivity.tanzu.vmware.com/v1alpha1", "kind": "GatewayDNS",
            "metadata": {"name": "dev-team-gateway-dns", "namespace": "dev-team", "uid": "g-1",
                         "generation": 4, "resourceVersion": "4", "finalizers": [FINALIZER]},
            "spec": {"service": "projectcontour/envoy",
                     "staleRecords": {"withdrawAfter": "soon"}},
        });
        let (seen, status) = reconcile_on(gateway.clone(), management(&gateway)).await;
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .expect("Ready");
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "InvalidSpec");
        assert_eq!(ready["observedGeneration"], 4);
        let message = ready["message"].as_str().unwrap();
        assert!(
            message.starts_with("spec.staleRecords.withdrawAfter: \"soon\""),
            "{message}"
        );
        // Not even the clusters were listed: nothing is decided on a spec that cannot be read.
        assert!(!seen.iter().any(|r| r.contains("/clusters")), "{seen:?}");
    }
}

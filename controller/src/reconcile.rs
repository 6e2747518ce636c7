//! The GatewayDNS reconciler: observe the selected clusters' gateway Services, write the desired
//! EndpointSlices to every cluster of the namespace, and say what happened in the status.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, SystemTime},
};

use dashmap::DashMap;

use k8s_openapi::{
    api::discovery::v1::EndpointSlice, apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams},
    runtime::{
        controller::Action,
        events::{Event as KubeEvent, EventType, Recorder},
        finalizer::{Event as Finalizer, finalizer},
        reflector::ObjectRef,
    },
};
use xcc_kube::{
    ConditionStatus, remove_condition, set_condition,
    trust::{INSECURE_PEER_CONDITION, INSECURE_PEER_REASON},
};

use crate::workload::CALL_TIMEOUT;
use crate::{
    desired::{self, ClusterInfo, HealthView, Observation, Plan, SLICE_NAMESPACE, gateway_ref},
    gatewaydns::{ClusterGatewayStatus, GatewayDNS, GatewayDNSStatus, GatewayHealth, GatewayState},
    health,
    settings::{self, InvalidField, Settings},
    workload::{ClientError, Workloads},
};

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

/// Clusters listed in full in a status; beyond, only those that need attention, this many.
pub const STATUS_CLUSTERS: usize = 20;

/// Per GatewayDNS (namespace, name): its uid and every selected cluster's entry, as of its last
/// reconcile. What the bounded status leaves out, and what the next reconcile starts from.
/// Concurrent reconciles and the admin API use it: a concurrent map.
#[derive(Default)]
pub struct Details(DashMap<(String, String), Detail>);

/// A GatewayDNS's uid and entries.
type Detail = (String, Arc<Vec<ClusterGatewayStatus>>);

impl Details {
    /// The entries of `gateway` as its last reconcile left them, if this process made one.
    fn of(&self, gateway: &GatewayDNS) -> Option<Arc<Vec<ClusterGatewayStatus>>> {
        let key = (gateway.namespace().unwrap_or_default(), gateway.name_any());
        let found = self.0.get(&key)?;
        let (uid, entries) = found.value();
        (Some(uid) == gateway.metadata.uid.as_ref()).then(|| entries.clone())
    }

    fn put(&self, gateway: &GatewayDNS, entries: Vec<ClusterGatewayStatus>) {
        let key = (gateway.namespace().unwrap_or_default(), gateway.name_any());
        let uid = gateway.metadata.uid.clone().unwrap_or_default();
        self.0.insert(key, (uid, Arc::new(entries)));
    }

    fn forget(&self, gateway: &GatewayDNS) {
        self.0
            .remove(&(gateway.namespace().unwrap_or_default(), gateway.name_any()));
    }

    /// Every entry of GatewayDNS `namespace/name`, as JSON (`None`: not reconciled here).
    pub fn json(&self, namespace: &str, name: &str) -> Option<String> {
        let entries = self
            .0
            .get(&(namespace.to_string(), name.to_string()))?
            .1
            .clone();
        serde_json::to_string_pretty(&serde_json::json!({ "clusters": entries.as_slice() })).ok()
    }
}

/// The entries a status lists of `all` (sorted by cluster), the count per state, and how many
/// are left out: all of them up to [`STATUS_CLUSTERS`], else the first that need attention.
fn bounded_entries(
    all: &[ClusterGatewayStatus],
) -> (
    Vec<ClusterGatewayStatus>,
    std::collections::BTreeMap<String, u32>,
    u32,
) {
    let mut counts = std::collections::BTreeMap::new();
    for entry in all {
        *counts.entry(entry.state.to_string()).or_insert(0u32) += 1;
    }
    let listed: Vec<ClusterGatewayStatus> = if all.len() <= STATUS_CLUSTERS {
        all.to_vec()
    } else {
        all.iter()
            .filter(|c| {
                c.state != GatewayState::Published
                    || c.health.is_some_and(|h| h != GatewayHealth::Healthy)
                    || !c.withheld_from.is_empty()
            })
            .take(STATUS_CLUSTERS)
            .cloned()
            .collect()
    };
    let left_out = u32::try_from(all.len() - listed.len()).unwrap_or(u32::MAX);
    (listed, counts, left_out)
}

/// A write lane: (namespace, workload cluster, GatewayDNS reference).
pub type Lane = (String, String, String);

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

impl Error {
    pub fn label(&self) -> &'static str {
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
    ctx.metrics
        .reconciled(started.elapsed(), result.as_ref().err().map(Error::label));
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
    tracing::warn!(gateway = %gateway_ref(&gateway), kind = error.label(), %error, "reconcile failed; retrying");
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
    let me = ObjectRef::from_obj(gateway);
    let api: Api<GatewayDNS> = Api::namespaced(ctx.client.clone(), &namespace);
    let settings = match settings::read(&gateway.spec) {
        Ok(settings) => settings,
        Err(invalid) => {
            tracing::warn!(gateway = %reference, %invalid, "GatewayDNS not applied: invalid field");
            invalid_spec(&api, gateway, &invalid, ctx).await?;
            return Ok(Action::requeue(ctx.resync));
        }
    };
    // Every selected cluster's entry as the last reconcile here left it, or as the status
    // lists it (after a restart; a long list is bounded there).
    let remembered = ctx.details.of(gateway);
    let restarted = remembered.is_none();
    let previous: Arc<Vec<ClusterGatewayStatus>> = remembered.unwrap_or_else(|| {
        Arc::new(
            gateway
                .status
                .as_ref()
                .map(|s| s.clusters.clone())
                .unwrap_or_default(),
        )
    });
    let mut view = gateway.clone();
    view.status.get_or_insert_default().clusters = previous.to_vec();
    let gateway_before = gateway;
    let (clusters, all) = tokio::try_join!(list_clusters(ctx, &namespace), async {
        // From the watch cache, as the Clusters: a GatewayDNS created or changed wakes this one.
        Ok(api.list(&ListParams::default().match_any()).await?.items)
    })?;
    // One client per cluster of the namespace for the whole reconcile: the kubeconfig Secret is
    // read once, and every cluster's at once.
    let peers: HashMap<String, Result<Client, ClientError>> =
        futures::future::join_all(clusters.iter().map(|cluster| async {
            (
                cluster.name.clone(),
                ctx.workloads.client(&namespace, &cluster.name).await,
            )
        }))
        .await
        .into_iter()
        .collect();
    let peer = |cluster: &str| {
        peers.get(cluster).cloned().unwrap_or_else(|| {
            Err(ClientError::Unavailable(format!(
                "cluster {cluster} is not known"
            )))
        })
    };

    // The reconcile is on the path of every address change: independent calls go out together.
    let selected: Vec<&ClusterInfo> = clusters
        .iter()
        .filter(|c| desired::selects(&gateway.spec.cluster_selector, &c.labels))
        .collect();
    let seen = futures::future::join_all(selected.iter().map(|cluster| {
        ctx.workloads.observe(
            &namespace,
            &cluster.name,
            &gateway.spec.service,
            &me,
            peer(&cluster.name),
        )
    }))
    .await;
    let mut observations = HashMap::new();
    let mut used = BTreeSet::new();
    for (cluster, seen) in selected.iter().zip(seen) {
        observations.insert(cluster.name.clone(), seen);
        used.insert((cluster.name.clone(), gateway.spec.service.clone()));
    }
    ctx.workloads.retain(&namespace, &me, &used);
    if restarted {
        let entries = &mut view.status.get_or_insert_default().clusters;
        recover_last_addresses(entries, &observations, &peers, &namespace, &reference).await;
    }
    let gateway = &view;
    let (views, recheck) = health_views(gateway, &namespace, &settings, &observations, ctx);
    let plan = desired::plan_with_health(
        gateway,
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

    // Every cluster at once, each in its own lane within the shared bound: one slow or
    // unreachable cluster delays none of the others, and this reconcile waits for it only so
    // long; its write goes on, and the status names it as pending meanwhile.
    let plan = Arc::new(plan);
    // A cluster whose last write was of this same plan, and whose slices and announcement did
    // not change since, is not asked again: a reconcile that changes nothing costs O(1) per
    // cluster.
    let mut done = Vec::new();
    let mut tickets: Vec<(String, crate::queue::Ticket<ClusterOutcome>)> = Vec::new();
    for cluster in &clusters {
        let lane = (namespace.clone(), cluster.name.clone(), reference.clone());
        if let Some(last) = up_to_date(ctx, &lane, &plan) {
            done.push(last);
            continue;
        }
        let job = write_job(
            ctx,
            &namespace,
            &cluster.name,
            peer(&cluster.name),
            &reference,
            &plan,
        );
        tickets.push((cluster.name.clone(), ctx.writes.submit(lane, job)));
    }
    // Lanes of clusters that left the namespace go (a write in flight there finishes).
    let known: std::collections::HashSet<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    ctx.writes.retain(|(ns, cluster, r)| {
        ns != &namespace || r != &reference || known.contains(cluster.as_str())
    });
    let (mut outcomes, pending) = wait_for_writes(ctx, &me, tickets).await;
    outcomes.extend(done);
    let mut plan = Arc::try_unwrap(plan).unwrap_or_else(|shared| shared.as_ref().clone());
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
    };
    update_status(&api, gateway_before, &previous, &plan, &report, ctx).await?;
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
    Ok(Action::requeue(next))
}

/// Clusters that cannot be asked now and whose last addresses `entries` does not have.
fn without_last_addresses(
    entries: &[ClusterGatewayStatus],
    observations: &HashMap<String, Observation>,
) -> Vec<String> {
    let mut missing: Vec<String> = observations
        .iter()
        .filter(|(_, seen)| {
            matches!(
                seen,
                Observation::Unreachable(_) | Observation::KubeconfigRejected(_)
            )
        })
        .map(|(cluster, _)| cluster)
        .filter(|cluster| {
            !entries
                .iter()
                .any(|e| &e.cluster == *cluster && !e.addresses.is_empty())
        })
        .cloned()
        .collect();
    missing.sort();
    missing
}

/// The entry of `cluster` as its slices in another cluster show it (the slices this GatewayDNS
/// wrote there, `reference`): its host name and its addresses in the order the status lists
/// them (IPv4, IPv6, host names). `None` when no such slice has an address.
fn entry_from_slices(
    cluster: &str,
    reference: &str,
    slices: &[EndpointSlice],
) -> Option<ClusterGatewayStatus> {
    let ours: Vec<&EndpointSlice> = slices
        .iter()
        .filter(|s| {
            s.annotations()
                .get(desired::REF_ANNOTATION)
                .map(String::as_str)
                == Some(reference)
        })
        .collect();
    let addresses: Vec<String> = ours
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    if addresses.is_empty() {
        return None;
    }
    let hostname = ours
        .iter()
        .find_map(|s| s.annotations().get(desired::HOSTNAME_ANNOTATION).cloned())
        .unwrap_or_default();
    Some(ClusterGatewayStatus {
        cluster: cluster.to_string(),
        hostname,
        state: GatewayState::Unreachable,
        addresses,
        ..Default::default()
    })
}

/// Clusters asked for the slices of a cluster that cannot be asked itself, at most.
const RECOVERY_DONORS: usize = 3;

/// After a restart the status lists only some clusters (see `update_status`), so a selected
/// cluster that cannot be asked right now may have no last addresses: it would leave the
/// global name, and its own slices would only be kept, until it answers again. Its slices are
/// in every other cluster of the namespace: its last addresses are read back from the first of
/// a few reachable clusters that holds them. This runs in the first reconcile of a GatewayDNS
/// after the controller starts only (later ones have the entries of the one before), and asks
/// nothing when every such cluster is listed.
async fn recover_last_addresses(
    entries: &mut Vec<ClusterGatewayStatus>,
    observations: &HashMap<String, Observation>,
    peers: &HashMap<String, Result<Client, ClientError>>,
    namespace: &str,
    reference: &str,
) {
    let missing = without_last_addresses(entries, observations);
    if missing.is_empty() {
        return;
    }
    // Selected clusters that answered this reconcile first, by name: they are known to answer.
    let mut donors: Vec<(&String, &Client)> = peers
        .iter()
        .filter(|(name, _)| {
            observations.get(*name).is_some_and(|seen| {
                !matches!(
                    seen,
                    Observation::Unreachable(_) | Observation::KubeconfigRejected(_)
                )
            })
        })
        .filter_map(|(name, client)| Some((name, client.as_ref().ok()?)))
        .collect();
    donors.sort_by(|a, b| a.0.cmp(b.0));
    donors.truncate(RECOVERY_DONORS);
    let donors = &donors;
    let recovered = futures::future::join_all(missing.iter().map(|cluster| async move {
        for (donor, client) in donors {
            let api: Api<EndpointSlice> = Api::namespaced((*client).clone(), SLICE_NAMESPACE);
            let names = desired::slice_names(namespace, cluster);
            let read = futures::future::join_all(
                names
                    .iter()
                    .map(|name| tokio::time::timeout(CALL_TIMEOUT, api.get_opt(name))),
            )
            .await;
            let slices: Vec<EndpointSlice> = read
                .into_iter()
                .filter_map(|r| r.ok()?.ok()?)
                .collect();
            if let Some(entry) = entry_from_slices(cluster, reference, &slices) {
                tracing::info!(
                    %cluster, %donor, gateway = %reference,
                    "last addresses of an unreachable cluster read back from another cluster's slices"
                );
                return Some(entry);
            }
        }
        None
    }))
    .await;
    for entry in recovered.into_iter().flatten() {
        entries.retain(|e| e.cluster != entry.cluster);
        entries.push(entry);
    }
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
    let patch = serde_json::json!({
        "apiVersion": "connectivity.tanzu.vmware.com/v1alpha1",
        "kind": "GatewayDNS",
        "status": status,
    });
    api.patch_status(
        &gateway.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// What one cluster of the namespace got.
#[derive(Debug, Default)]
pub struct ClusterOutcome {
    pub cluster: String,
    /// Wanted slices not sent: the cluster announced no agent that reads them.
    pub withheld: Vec<String>,
    /// Owned slices the cluster cannot read, left as they are.
    pub kept_unreadable: Vec<(String, String)>,
    /// Why the cluster's announcement could not be read (it counts as none).
    pub announcement_error: Option<String>,
    /// What went wrong writing; `None`: the cluster is as planned.
    pub problem: Option<String>,
    /// The global name was not sent (no xcc-agent announced `global`).
    pub withheld_global: bool,
    /// What was written: the plan's hash, the generation of the cluster's slice store the
    /// writes were decided on, and the announcement read.
    pub plan_hash: u64,
    pub store_generation: Option<u64>,
    pub announcement: Option<Result<Option<xcc_kube::Announcement>, String>>,
}

/// What the status says about a fleet where some clusters may run the original XCC: the
/// `RecordsWithheld` and `UnreadableSlicesKept` conditions (absent when there is nothing to say).
#[derive(Debug, Default)]
struct MixedFleet {
    withheld: Option<String>,
    kept: Option<String>,
}

impl MixedFleet {
    /// Sums up `outcomes`, and names on each selected cluster's entry the clusters that are not
    /// sent all of its addresses.
    fn from_outcomes<O: std::borrow::Borrow<ClusterOutcome>>(
        plan: &mut Plan,
        outcomes: &[O],
    ) -> MixedFleet {
        let mut withheld_lines = Vec::new();
        let mut kept_lines = Vec::new();
        for outcome in outcomes.iter().map(|o| o.borrow()) {
            for name in &outcome.withheld {
                let Some(source) = plan.sources.get(name).cloned() else {
                    continue;
                };
                if let Some(entry) = plan.clusters.iter_mut().find(|c| c.cluster == source)
                    && !entry.withheld_from.contains(&outcome.cluster)
                {
                    entry.withheld_from.push(outcome.cluster.clone());
                }
            }
            if !outcome.withheld.is_empty() {
                let why = match &outcome.announcement_error {
                    Some(error) => format!("its xcc-agent announcement cannot be read: {error}"),
                    None => "no xcc-agent is announced there (ConfigMap xcc-dns/xcc-agent), and the original XCC dns-server cannot read them".to_string(),
                };
                withheld_lines.push(format!(
                    "cluster {} is not sent {}: {why}",
                    outcome.cluster,
                    outcome.withheld.join(", ")
                ));
            }
            for (name, kind) in &outcome.kept_unreadable {
                kept_lines.push(format!(
                    "EndpointSlice {SLICE_NAMESPACE}/{name} ({kind}) on cluster {} is left as it is: no xcc-agent is announced there, and the original XCC dns-server crashes when a slice it cannot read is deleted; delete it by hand where no original dns-server runs",
                    outcome.cluster
                ));
            }
        }
        for entry in &mut plan.clusters {
            if entry.withheld_from.is_empty() {
                continue;
            }
            entry.withheld_from.sort();
            let note = format!(
                "IPv6 addresses not sent to {} (no xcc-agent announced there)",
                entry.withheld_from.join(", ")
            );
            entry.message = if entry.message.is_empty() {
                note
            } else {
                format!("{}; {note}", entry.message)
            };
        }
        let join = |lines: Vec<String>| (!lines.is_empty()).then(|| lines.join("; "));
        MixedFleet {
            withheld: join(withheld_lines),
            kept: join(kept_lines),
        }
    }
}

/// The last outcome of `lane`, if it wrote `plan` without a problem and nothing it was decided on
/// changed since (the cluster's slices, its announcement).
fn up_to_date(ctx: &Context, lane: &Lane, plan: &Plan) -> Option<Arc<ClusterOutcome>> {
    let (namespace, cluster, _) = lane;
    let (last, busy) = ctx.writes.last(lane);
    let last = last?;
    let fresh = !busy
        && last.problem.is_none()
        && last.plan_hash == plan.hash
        && last.store_generation.is_some()
        && last.store_generation == ctx.workloads.slice_generation(namespace, cluster)
        && last.announcement.is_some()
        && ctx.workloads.cached_announcement(namespace, cluster) == last.announcement;
    fresh.then_some(last)
}

/// The write of `plan` to `cluster`, to be run by its lane.
fn write_job(
    ctx: &Arc<Context>,
    namespace: &str,
    cluster: &str,
    client: Result<Client, ClientError>,
    reference: &str,
    plan: &Arc<Plan>,
) -> crate::queue::Job<ClusterOutcome> {
    let (ctx, plan) = (ctx.clone(), plan.clone());
    let (namespace, cluster, reference) = (
        namespace.to_string(),
        cluster.to_string(),
        reference.to_string(),
    );
    Box::pin(
        async move { write_cluster(&ctx, &namespace, &cluster, client, &reference, &plan).await },
    )
}

/// Waits up to [`WRITE_PATIENCE`] for the writes of `tickets` (cluster, ticket): the outcomes
/// of those done, and the clusters whose write is still going on. When those finish,
/// `gateway` is woken to report them.
async fn wait_for_writes(
    ctx: &Context,
    gateway: &ObjectRef<GatewayDNS>,
    tickets: Vec<(String, crate::queue::Ticket<ClusterOutcome>)>,
) -> (Vec<Arc<ClusterOutcome>>, Vec<String>) {
    let deadline = tokio::time::Instant::now() + WRITE_PATIENCE;
    let mut pending: BTreeSet<String> = tickets.iter().map(|(c, _)| c.clone()).collect();
    let mut waiting: futures::stream::FuturesUnordered<_> = tickets
        .into_iter()
        .map(|(cluster, ticket)| async move { (cluster, ticket.done().await) })
        .collect();
    let mut outcomes = Vec::new();
    while let Ok(Some((cluster, outcome))) =
        tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut waiting)).await
    {
        // `None`: the lane was dropped (the cluster left) before it wrote.
        if let Some(outcome) = outcome {
            pending.remove(&cluster);
            outcomes.push(outcome);
        }
    }
    if !waiting.is_empty() {
        tracing::info!(gateway = %gateway, pending = waiting.len(), "writes still going on; reported as pending");
        let (trigger, gateway) = (ctx.workloads.trigger(), gateway.clone());
        tokio::spawn(async move {
            while futures::StreamExt::next(&mut waiting).await.is_some() {}
            let _ = trigger.send(gateway);
        });
    }
    (outcomes, pending.into_iter().collect())
}

/// Brings the slices of `gateway` on one cluster to the plan, as far as that cluster reads them
/// (see [`desired::cluster_writes`]). Never touches a slice it does not own; an unreachable
/// cluster is reported, not fatal.
async fn write_cluster(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    client: Result<Client, ClientError>,
    reference: &str,
    plan: &Plan,
) -> ClusterOutcome {
    let mut outcome = ClusterOutcome {
        cluster: cluster.to_string(),
        plan_hash: plan.hash,
        ..Default::default()
    };
    if let Err(problem) = write_cluster_into(
        ctx,
        namespace,
        cluster,
        client,
        reference,
        plan,
        &mut outcome,
    )
    .await
    {
        outcome.problem = Some(problem);
    }
    outcome
}

async fn write_cluster_into(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    client: Result<Client, ClientError>,
    reference: &str,
    plan: &Plan,
    outcome: &mut ClusterOutcome,
) -> Result<(), String> {
    let client = client.map_err(|e| format!("cluster {cluster}: {e}"))?;
    // Both reads are cached (the announcement for its TTL, the slices by this cluster's watch):
    // a reconcile that finds nothing to change asks the cluster nothing. A missing namespace
    // shows in the first write (404).
    let agent = ctx
        .workloads
        .announcement(namespace, cluster, &client)
        .await;
    outcome.announcement = Some(agent.clone());
    // Unknown counts as "not announced": withholding is safe, sending is not.
    let agent = match agent {
        Ok(agent) => agent,
        Err(error) => {
            tracing::warn!(%cluster, gateway = %reference, %error, "cannot read the xcc-agent announcement; sending only what the original XCC reads");
            outcome.announcement_error = Some(error);
            None
        }
    };
    let (generation, writes) = ctx
        .workloads
        .with_slices(namespace, cluster, &client, |existing| {
            desired::cluster_writes_in(plan, existing, reference, agent.as_ref(), cluster)
        })
        .await
        .map_err(|e| format!("cluster {cluster}: {e}"))?;
    outcome.store_generation = generation;
    let slices: Api<EndpointSlice> = Api::namespaced(client, SLICE_NAMESPACE);
    outcome.withheld_global = writes.withheld_global;
    if !writes.withheld.is_empty() {
        tracing::debug!(%cluster, gateway = %reference, withheld = ?writes.withheld, "no xcc-agent announced: slices the original XCC cannot read are withheld");
    }
    for (name, kind) in &writes.kept_unreadable {
        tracing::warn!(%cluster, slice = %name, address_type = %kind, gateway = %reference, "EndpointSlice the original XCC cannot read left as it is (no xcc-agent announced there)");
    }
    outcome.withheld = writes.withheld;
    outcome.kept_unreadable = writes.kept_unreadable;
    let mut problems: Vec<String> = writes
        .foreign
        .iter()
        .map(|name| format!(
            "EndpointSlice {SLICE_NAMESPACE}/{name} exists and does not belong to this GatewayDNS; left as it is"
        ))
        .collect();
    for want in &writes.apply {
        let name = want.name_any();
        ctx.workloads.writing(namespace, cluster, &name, Some(want));
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match tokio::time::timeout(
            CALL_TIMEOUT,
            slices.patch(&name, &params, &Patch::Apply(want)),
        )
        .await
        {
            Ok(Ok(_)) => {
                tracing::info!(%cluster, slice = %name, gateway = %reference, "EndpointSlice written")
            }
            Ok(Err(kube::Error::Api(e))) if e.code == 404 => {
                // Nothing else can be written there either.
                return Err(format!(
                    "cluster {cluster}: namespace {SLICE_NAMESPACE} does not exist (install xcc-agent there)"
                ));
            }
            Ok(Err(e)) => problems.push(format!("cannot write EndpointSlice {name}: {e}")),
            Err(_) => {
                // A cluster that does not answer would hold its place in the write bound for
                // every further call: the next reconcile tries again.
                problems.push(format!("timed out writing EndpointSlice {name}"));
                return Err(format!("cluster {cluster}: {}", problems.join("; ")));
            }
        }
    }
    for name in &writes.delete {
        ctx.workloads.writing(namespace, cluster, name, None);
        match crate::workload::delete_slice(&slices, name).await {
            Ok(true) => {
                tracing::info!(%cluster, slice = %name, gateway = %reference, "EndpointSlice withdrawn")
            }
            Ok(false) => {}
            Err(problem) => problems.push(problem),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("cluster {cluster}: {}", problems.join("; ")))
    }
}

/// Reason of `Ready` and `RecordsWritten` while writes to some clusters are still going on.
pub const WRITES_PENDING: &str = "WritesPending";

/// The first few of `lines`, joined, and how many more there are.
fn some_of(lines: &[String]) -> String {
    let mut message = lines[..lines.len().min(STATUS_CLUSTERS)].join("; ");
    if lines.len() > STATUS_CLUSTERS {
        message.push_str(&format!("; and {} more", lines.len() - STATUS_CLUSTERS));
    }
    truncate(message, 4000)
}

/// Names the clusters whose write is still going on (the first few, and how many more).
fn pending_message(pending: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut message = format!(
        "writes to {} cluster(s) still going on: {}",
        pending.len(),
        pending[..pending.len().min(SHOWN)].join(", ")
    );
    if pending.len() > SHOWN {
        message.push_str(&format!(" and {} more", pending.len() - SHOWN));
    }
    message
}

/// What the writes of a reconcile came to, for the status.
struct WriteReport {
    /// What went wrong, per cluster.
    problems: Vec<String>,
    /// Clusters whose write is still going on.
    pending: Vec<String>,
    /// Clusters whose client does not verify its peer, and why.
    insecure: Vec<String>,
    mixed: MixedFleet,
}

async fn update_status(
    api: &Api<GatewayDNS>,
    gateway: &GatewayDNS,
    previous: &[ClusterGatewayStatus],
    plan: &Plan,
    report: &WriteReport,
    ctx: &Context,
) -> Result<(), Error> {
    let WriteReport {
        problems,
        pending,
        insecure,
        mixed,
    } = report;
    ctx.metrics.cluster_states(
        &gateway_ref(gateway),
        Some(
            plan.clusters
                .iter()
                .map(|c| (c.cluster.as_str(), c.state.as_str())),
        ),
    );
    let old = gateway.status.clone().unwrap_or_default();
    let (listed, cluster_counts, clusters_not_listed) = bounded_entries(&plan.clusters);
    let mut status = GatewayDNSStatus {
        observed_generation: gateway.metadata.generation,
        conditions: old.conditions.clone(),
        summary: None,
        clusters: listed,
        cluster_counts,
        clusters_not_listed,
    };
    let selected = plan.clusters.len();
    let published = plan
        .clusters
        .iter()
        .filter(|c| c.state == GatewayState::Published)
        .count();
    status.summary = Some(format!("{published}/{selected} published"));
    // A refused kubeconfig is named first: it needs a person, the other states may pass.
    let failing = plan
        .clusters
        .iter()
        .find(|c| c.state == GatewayState::KubeconfigRejected)
        .or_else(|| {
            plan.clusters
                .iter()
                .find(|c| c.state != GatewayState::Published)
        });
    let (ready, reason, message) = if selected == 0 {
        (
            ConditionStatus::False,
            "NoClustersSelected".to_string(),
            "no Cluster API Cluster in this namespace matches clusterSelector".to_string(),
        )
    } else if let Some(c) = failing {
        (
            ConditionStatus::False,
            c.state.to_string(),
            c.message.clone(),
        )
    } else if !problems.is_empty() {
        (
            ConditionStatus::False,
            "WriteFailed".to_string(),
            some_of(problems),
        )
    } else if !pending.is_empty() {
        (
            ConditionStatus::False,
            WRITES_PENDING.to_string(),
            pending_message(pending),
        )
    } else {
        (
            ConditionStatus::True,
            "Published".to_string(),
            format!("{published} gateway(s) published on every cluster of the namespace"),
        )
    };
    set_condition(
        &mut status.conditions,
        "Ready",
        ready,
        &reason,
        message.clone(),
        gateway.metadata.generation,
    );
    let writes = if !problems.is_empty() {
        (ConditionStatus::False, "WriteFailed", some_of(problems))
    } else if !pending.is_empty() {
        (
            ConditionStatus::False,
            WRITES_PENDING,
            pending_message(pending),
        )
    } else {
        (ConditionStatus::True, "Written", String::new())
    };
    set_condition(
        &mut status.conditions,
        "RecordsWritten",
        writes.0,
        writes.1,
        writes.2,
        gateway.metadata.generation,
    );
    if insecure.is_empty() {
        remove_condition(&mut status.conditions, INSECURE_PEER_CONDITION);
    } else {
        set_condition(
            &mut status.conditions,
            INSECURE_PEER_CONDITION,
            ConditionStatus::True,
            INSECURE_PEER_REASON,
            insecure.join("; "),
            gateway.metadata.generation,
        );
    }
    for (type_, reason, message) in [
        (WITHHELD_CONDITION, "NoAgentAnnounced", &mixed.withheld),
        (KEPT_CONDITION, "OriginalMayRun", &mixed.kept),
    ] {
        match message {
            Some(message) => set_condition(
                &mut status.conditions,
                type_,
                ConditionStatus::True,
                reason,
                truncate(message.clone(), 4000),
                gateway.metadata.generation,
            ),
            None => remove_condition(&mut status.conditions, type_),
        }
    }
    let changed = status != old;
    let mut every = plan.clusters.clone();
    if changed {
        // Written anyway: every reachable cluster's last-seen time is brought up to date.
        let namespace = gateway.namespace().unwrap_or_default();
        for entry in every.iter_mut().chain(status.clusters.iter_mut()) {
            if entry
                .health
                .is_some_and(|h| h != GatewayHealth::Unreachable)
                && let Some(seen) = ctx.health.get(&namespace, &entry.cluster).last_seen
            {
                entry.last_seen = Some(time(seen));
            }
        }
    }
    // Events from every entry, listed in the status or not.
    announce(ctx, gateway, (previous, &old), (&every, &status));
    ctx.details.put(gateway, every);
    if !changed {
        return Ok(());
    }
    let patch = serde_json::json!({
        "apiVersion": "connectivity.tanzu.vmware.com/v1alpha1",
        "kind": "GatewayDNS",
        "status": status,
    });
    api.patch_status(
        &gateway.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// Events for what changed: a cluster published, withdrawn or failing, and write problems.
fn announce(
    ctx: &Context,
    gateway: &GatewayDNS,
    (old_entries, old): (&[ClusterGatewayStatus], &GatewayDNSStatus),
    (new_entries, new): (&[ClusterGatewayStatus], &GatewayDNSStatus),
) {
    let mut events = Vec::new();
    let before: HashMap<&str, &ClusterGatewayStatus> = old_entries
        .iter()
        .map(|c| (c.cluster.as_str(), c))
        .collect();
    let after: std::collections::HashSet<&str> =
        new_entries.iter().map(|c| c.cluster.as_str()).collect();
    for c in new_entries {
        let before = before.get(c.cluster.as_str());
        if before.is_some_and(|b| b.state == c.state && b.addresses == c.addresses) {
            continue;
        }
        if c.state == GatewayState::Published {
            events.push((
                EventType::Normal,
                "Published".to_string(),
                format!("{} → {}", c.hostname, c.addresses.join(", ")),
            ));
        } else {
            events.push((EventType::Warning, c.state.to_string(), c.message.clone()));
        }
    }
    for c in old_entries {
        if !after.contains(c.cluster.as_str()) {
            events.push((
                EventType::Normal,
                "Withdrawn".to_string(),
                format!(
                    "cluster {} is no longer selected; {} withdrawn",
                    c.cluster, c.hostname
                ),
            ));
        }
    }
    let find = |s: &GatewayDNSStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == "RecordsWritten")
            .map(|c| c.message.clone())
    };
    if let Some(msg) = find(new).filter(|m| !m.is_empty() && Some(m) != find(old).as_ref()) {
        events.push((EventType::Warning, "WriteFailed".to_string(), msg));
    }
    let insecure = |s: &GatewayDNSStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == INSECURE_PEER_CONDITION)
            .map(|c| c.message.clone())
    };
    if let Some(msg) = insecure(new).filter(|m| Some(m) != insecure(old).as_ref()) {
        events.push((EventType::Warning, INSECURE_PEER_CONDITION.to_string(), msg));
    }
    let message_of = |s: &GatewayDNSStatus, type_: &str| {
        s.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.message.clone())
    };
    for (type_, kind) in [
        (WITHHELD_CONDITION, EventType::Normal),
        (KEPT_CONDITION, EventType::Warning),
    ] {
        if let Some(msg) =
            message_of(new, type_).filter(|m| Some(m) != message_of(old, type_).as_ref())
        {
            events.push((kind, type_.to_string(), msg));
        }
    }
    if events.is_empty() {
        return;
    }
    // Off the reconcile's path: the next change of this GatewayDNS need not wait for them.
    let (reference, recorder) = (gateway.object_ref(&()), ctx.recorder.clone());
    tokio::spawn(async move {
        for (type_, reason, note) in events {
            let event = KubeEvent {
                type_,
                reason,
                note: Some(truncate(note, 1000)),
                action: "Reconcile".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::debug!(error = %e, "could not publish an Event");
            }
        }
    });
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// A deleted GatewayDNS: withdraw its slices from every cluster that can be reached.
async fn cleanup(gateway: &GatewayDNS, ctx: &Arc<Context>) -> Result<Action, Error> {
    let namespace = gateway.namespace().unwrap_or_default();
    let reference = gateway_ref(gateway);
    ctx.metrics
        .cluster_states(&reference, None::<std::iter::Empty<(&str, &str)>>);
    ctx.workloads
        .retain(&namespace, &ObjectRef::from_obj(gateway), &BTreeSet::new());
    let clusters = match list_clusters(ctx, &namespace).await {
        Ok(clusters) => clusters,
        // Without Cluster API there is nothing we could have written.
        Err(Error::Clusters {
            source: kube::Error::Api(s),
            ..
        }) if s.code == 404 => Vec::new(),
        Err(e) => return Err(e),
    };
    // Through each cluster's lane, after any write of this GatewayDNS still going on there.
    let empty = Arc::new(Plan::default());
    let mut tickets = Vec::new();
    for cluster in &clusters {
        let client = ctx.workloads.client(&namespace, &cluster.name).await;
        let lane = (namespace.clone(), cluster.name.clone(), reference.clone());
        let job = write_job(ctx, &namespace, &cluster.name, client, &reference, &empty);
        tickets.push((cluster.name.clone(), ctx.writes.submit(lane, job)));
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
    ctx.writes
        .retain(|(ns, _, r)| ns != &namespace || r != &reference);
    ctx.details.forget(gateway);
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gatewaydns::ClusterGatewayStatus;

    fn copy_of(cluster: &str, kind: &str, addresses: &[&str], reference: &str) -> EndpointSlice {
        let name = match kind {
            "IPv4" => format!("dev-team-{cluster}-gateway"),
            "IPv6" => format!("dev-team-{cluster}-gateway-ipv6"),
            _ => format!("dev-team-{cluster}-gateway-fqdn"),
        };
        let mut slice = EndpointSlice {
            address_type: kind.into(),
            endpoints: vec![k8s_openapi::api::discovery::v1::Endpoint {
                addresses: addresses.iter().map(|a| a.to_string()).collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        slice.metadata.name = Some(name);
        slice.metadata.annotations = Some(
            [
                (desired::REF_ANNOTATION.to_string(), reference.to_string()),
                (
                    desired::HOSTNAME_ANNOTATION.to_string(),
                    format!("*.gateway.{cluster}.dev-team.clusters.xcc.test"),
                ),
            ]
            .into(),
        );
        slice
    }

    #[test]
    fn a_cluster_that_cannot_be_asked_and_is_not_listed_needs_its_addresses_read_back() {
        let observations: HashMap<String, Observation> = [
            ("a".to_string(), Observation::Unreachable("down".into())),
            (
                "b".to_string(),
                Observation::KubeconfigRejected("exec".into()),
            ),
            ("c".to_string(), Observation::Unreachable("down".into())),
            ("d".to_string(), Observation::NoAddress),
        ]
        .into();
        // `c` is listed with its addresses; `b` is listed without any (it never had one).
        let entries = vec![
            ClusterGatewayStatus {
                cluster: "c".into(),
                addresses: vec!["10.0.0.3".into()],
                ..Default::default()
            },
            ClusterGatewayStatus {
                cluster: "b".into(),
                ..Default::default()
            },
        ];
        assert_eq!(without_last_addresses(&entries, &observations), ["a", "b"]);
        assert!(without_last_addresses(&entries, &HashMap::new()).is_empty());
    }

    #[test]
    fn last_addresses_are_read_from_the_slices_this_gateway_wrote_elsewhere() {
        let ours = "dev-team/gateway-dns";
        let slices = vec![
            copy_of("a", "IPv4", &["10.0.0.1", "10.0.0.2"], ours),
            copy_of("a", "IPv6", &["fd00::1"], ours),
            copy_of("a", "FQDN", &["lb.example.com"], "other/gateway-dns"),
        ];
        let entry = entry_from_slices("a", ours, &slices).expect("addresses found");
        assert_eq!(entry.cluster, "a");
        assert_eq!(entry.addresses, ["10.0.0.1", "10.0.0.2", "fd00::1"]);
        assert_eq!(entry.hostname, "*.gateway.a.dev-team.clusters.xcc.test");
        assert_eq!(entry.state, GatewayState::Unreachable);
        // Slices of another GatewayDNS, or none at all, give nothing to go on.
        assert!(entry_from_slices("a", ours, &slices[2..]).is_none());
        assert!(entry_from_slices("a", ours, &[]).is_none());
    }

    #[test]
    fn the_status_names_where_each_gateway_was_withheld_and_what_was_kept() {
        let mut plan = Plan {
            clusters: ["cluster-a", "cluster-b"]
                .map(|c| ClusterGatewayStatus {
                    cluster: c.into(),
                    state: GatewayState::Published,
                    ..Default::default()
                })
                .to_vec(),
            sources: [(
                "dev-team-cluster-a-gateway-ipv6".to_string(),
                "cluster-a".to_string(),
            )]
            .into(),
            ..Default::default()
        };
        let outcomes = [
            ClusterOutcome {
                cluster: "cluster-a".into(),
                ..Default::default()
            },
            ClusterOutcome {
                cluster: "cluster-c".into(),
                withheld: vec!["dev-team-cluster-a-gateway-ipv6".into()],
                announcement_error: Some("forbidden".into()),
                ..Default::default()
            },
            ClusterOutcome {
                cluster: "cluster-b".into(),
                withheld: vec!["dev-team-cluster-a-gateway-ipv6".into()],
                kept_unreadable: vec![("dev-team-old-gateway-ipv6".into(), "IPv6".into())],
                ..Default::default()
            },
        ];
        let mixed = MixedFleet::from_outcomes(&mut plan, &outcomes);
        assert_eq!(plan.clusters[0].withheld_from, ["cluster-b", "cluster-c"]);
        assert_eq!(
            plan.clusters[0].message,
            "IPv6 addresses not sent to cluster-b, cluster-c (no xcc-agent announced there)"
        );
        assert!(plan.clusters[1].withheld_from.is_empty());
        let withheld = mixed.withheld.unwrap();
        assert!(
            withheld.contains("cluster cluster-c is not sent dev-team-cluster-a-gateway-ipv6: its xcc-agent announcement cannot be read: forbidden"),
            "{withheld}"
        );
        assert!(
            withheld.contains("cluster cluster-b is not sent"),
            "{withheld}"
        );
        let kept = mixed.kept.unwrap();
        assert!(
            kept.contains("xcc-dns/dev-team-old-gateway-ipv6 (IPv6) on cluster cluster-b"),
            "{kept}"
        );

        // Nothing withheld, nothing kept: no conditions to set.
        let calm = MixedFleet::from_outcomes(&mut Plan::default(), &outcomes[..1]);
        assert!(calm.withheld.is_none() && calm.kept.is_none());
    }

    #[test]
    fn a_status_lists_every_cluster_of_a_small_fleet_and_only_those_needing_attention_of_a_big_one()
    {
        let entry = |i: usize, state: GatewayState| ClusterGatewayStatus {
            cluster: format!("c-{i:04}"),
            state,
            health: Some(GatewayHealth::Healthy),
            ..Default::default()
        };
        let small: Vec<_> = (0..STATUS_CLUSTERS)
            .map(|i| entry(i, GatewayState::Published))
            .collect();
        let (listed, counts, left_out) = bounded_entries(&small);
        assert_eq!(listed, small);
        assert_eq!(counts["Published"], 20);
        assert_eq!(left_out, 0);

        // 1,000 clusters: 30 unreachable, one published without ready endpoints.
        let mut big: Vec<_> = (0..1000)
            .map(|i| {
                entry(
                    i,
                    if i % 33 == 5 {
                        GatewayState::Unreachable
                    } else {
                        GatewayState::Published
                    },
                )
            })
            .collect();
        big[2].health = Some(GatewayHealth::NoReadyEndpoints);
        let (listed, counts, left_out) = bounded_entries(&big);
        let names: Vec<&str> = listed.iter().map(|c| c.cluster.as_str()).collect();
        assert_eq!(names.len(), STATUS_CLUSTERS);
        assert_eq!(&names[..3], ["c-0002", "c-0005", "c-0038"]);
        assert_eq!(counts["Unreachable"], 31);
        assert_eq!(counts["Published"], 969);
        assert_eq!(left_out, 980);
        // Its size does not grow with the fleet.
        let status = GatewayDNSStatus {
            clusters: listed,
            cluster_counts: counts,
            clusters_not_listed: left_out,
            ..Default::default()
        };
        assert!(serde_json::to_vec(&status).unwrap().len() < 4096);
    }

    /// The management cluster, mocked: two Cluster API Clusters (one selected), the gateway, no
    /// kubeconfig Secret for either cluster; records every request and the status written.
    struct Management {
        client: Client,
        /// `METHOD path` of every request.
        seen: Arc<std::sync::Mutex<Vec<String>>>,
        /// The last status written.
        status: Arc<std::sync::Mutex<Option<serde_json::Value>>>,
    }

    fn management(gateway: serde_json::Value) -> Management {
        use serde_json::json;
        let (service, mut handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let seen: Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let status: Arc<std::sync::Mutex<Option<serde_json::Value>>> = Default::default();
        let (log, written) = (seen.clone(), status.clone());
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (method, path) = (
                    request.method().to_string(),
                    request.uri().path().to_string(),
                );
                log.lock().unwrap().push(format!("{method} {path}"));
                let body = request
                    .into_body()
                    .collect_bytes()
                    .await
                    .unwrap_or_default();
                let cluster = |name: &str, contour: &str| {
                    json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                           "metadata": {"name": name, "namespace": "dev-team",
                                        "labels": {"hasContour": contour}}})
                };
                let (code, answer) = match (method.as_str(), path.as_str()) {
                    ("GET", "/apis/cluster.x-k8s.io/v1beta1/namespaces/dev-team/clusters") => (
                        200,
                        json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "ClusterList",
                               "metadata": {"resourceVersion": "5"},
                               "items": [cluster("cluster-a", "true"), cluster("cluster-b", "false")]}),
                    ),
                    (
                        "GET",
                        "/apis/connectivity.tanzu.vmware.com/v1alpha1/namespaces/dev-team/gatewaydns",
                    ) => (
                        200,
                        json!({"apiVersion": "connectivity.tanzu.vmware.com/v1alpha1",
                               "kind": "GatewayDNSList", "metadata": {"resourceVersion": "5"},
                               "items": [gateway.clone()]}),
                    ),
                    ("PATCH", p) if p.ends_with("/gatewaydns/dev-team-gateway-dns/status") => {
                        let patch: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        *written.lock().unwrap() = Some(patch["status"].clone());
                        let mut object = gateway.clone();
                        object["status"] = patch["status"].clone();
                        (200, object)
                    }
                    ("POST", p) if p.ends_with("/events") => {
                        (201, serde_json::from_slice(&body).unwrap_or(json!({})))
                    }
                    _ => (
                        404,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "NotFound", "code": 404, "message": "not found"}),
                    ),
                };
                send.send_response(
                    http::Response::builder()
                        .status(code)
                        .body(kube::client::Body::from(
                            serde_json::to_vec(&answer).unwrap(),
                        ))
                        .unwrap(),
                );
            }
        });
        Management {
            client: Client::new(service, "default"),
            seen,
            status,
        }
    }

    #[tokio::test]
    async fn a_selected_cluster_without_a_kubeconfig_is_named_in_the_status_and_nothing_is_written_elsewhere()
     {
        let gateway = serde_json::json!({
            "apiVersion": "connectivity.tanzu.vmware.com/v1alpha1", "kind": "GatewayDNS",
            "metadata": {"name": "dev-team-gateway-dns", "namespace": "dev-team", "uid": "g-1",
                         "generation": 3, "resourceVersion": "4", "finalizers": [FINALIZER]},
            "spec": {"clusterSelector": {"matchLabels": {"hasContour": "true"}},
                     "service": "projectcontour/envoy", "resolutionType": "loadBalancer"},
        });
        let Management {
            client,
            seen,
            status,
        } = management(gateway.clone());
        let (trigger, _) = tokio::sync::mpsc::unbounded_channel();
        let ctx = Arc::new(Context {
            client: client.clone(),
            zone: "xcc.test".into(),
            workloads: Workloads::new(
                client.clone(),
                xcc_kube::PeerClients::default(),
                trigger,
                Duration::from_secs(30),
            ),
            recorder: Recorder::new(
                client.clone(),
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
        });
        let gateway: GatewayDNS = serde_json::from_value(gateway).unwrap();
        reconcile(Arc::new(gateway), ctx).await.unwrap();

        let status = status
            .lock()
            .unwrap()
            .clone()
            .expect("a status was written");
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
        let seen = seen.lock().unwrap().clone();
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
        let gateway = serde_json::json!({
            "apiVersion": "connectivity.tanzu.vmware.com/v1alpha1", "kind": "GatewayDNS",
            "metadata": {"name": "dev-team-gateway-dns", "namespace": "dev-team", "uid": "g-1",
                         "generation": 4, "resourceVersion": "4", "finalizers": [FINALIZER]},
            "spec": {"service": "projectcontour/envoy",
                     "staleRecords": {"withdrawAfter": "soon"}},
        });
        let Management {
            client,
            seen,
            status,
        } = management(gateway.clone());
        let (trigger, _) = tokio::sync::mpsc::unbounded_channel();
        let ctx = Arc::new(Context {
            client: client.clone(),
            zone: "xcc.test".into(),
            workloads: Workloads::new(
                client.clone(),
                xcc_kube::PeerClients::default(),
                trigger,
                Duration::from_secs(30),
            ),
            recorder: Recorder::new(
                client.clone(),
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
        });
        let gateway: GatewayDNS = serde_json::from_value(gateway).unwrap();
        reconcile(Arc::new(gateway), ctx).await.unwrap();
        let status = status.lock().unwrap().clone().expect("a status");
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
        let seen = seen.lock().unwrap().clone();
        assert!(!seen.iter().any(|r| r.contains("/clusters")), "{seen:?}");
    }
}

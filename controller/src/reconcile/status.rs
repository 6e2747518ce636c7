//! What a GatewayDNS status says: the bounded list of clusters, the counts, the conditions of a
//! mixed fleet and of pending writes, and the Events of what changed.

use std::{collections::HashMap, sync::Arc};

use dashmap::DashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::events::{Event as KubeEvent, EventType},
};
use xcc_kube::{
    ConditionStatus, remove_condition, set_condition,
    trust::{INSECURE_PEER_CONDITION, INSECURE_PEER_REASON},
};

use crate::{
    desired::{Plan, SLICE_NAMESPACE, gateway_ref},
    gatewaydns::{ClusterGatewayStatus, GatewayDNS, GatewayDNSStatus, GatewayHealth, GatewayState},
};

use super::{
    ClusterOutcome, Context, Error, FIELD_MANAGER, KEPT_CONDITION, WITHHELD_CONDITION, time,
};

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
    pub(super) fn of(&self, gateway: &GatewayDNS) -> Option<Arc<Vec<ClusterGatewayStatus>>> {
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

    pub(super) fn forget(&self, gateway: &GatewayDNS) {
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

/// What the status says about a fleet where some clusters may run the original XCC: the
/// `RecordsWithheld` and `UnreadableSlicesKept` conditions (absent when there is nothing to say).
#[derive(Debug, Default)]
pub(super) struct MixedFleet {
    pub(super) withheld: Option<String>,
    pub(super) kept: Option<String>,
}

impl MixedFleet {
    /// Sums up `outcomes`, and names on each selected cluster's entry the clusters that are not
    /// sent all of its addresses.
    pub(super) fn from_outcomes<O: std::borrow::Borrow<ClusterOutcome>>(
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
pub(super) struct WriteReport {
    /// What went wrong, per cluster.
    pub(super) problems: Vec<String>,
    /// Clusters whose write is still going on.
    pub(super) pending: Vec<String>,
    /// Clusters whose client does not verify its peer, and why.
    pub(super) insecure: Vec<String>,
    pub(super) mixed: MixedFleet,
    /// The other namespaces whose clusters have (or may still have) its records.
    pub(super) resolved_from: Vec<String>,
}

/// Publishes what `plan` and the writes in `report` came to: the cluster-state metrics, the
/// Events of what changed, the entries the bounded status leaves out, and the status itself
/// when it changed.
pub(super) async fn update_status(
    api: &Api<GatewayDNS>,
    gateway: &GatewayDNS,
    previous: &[ClusterGatewayStatus],
    plan: &Plan,
    report: &WriteReport,
    ctx: &Context,
) -> Result<(), Error> {
    ctx.metrics.cluster_states(
        &gateway_ref(gateway),
        Some(
            plan.clusters
                .iter()
                .map(|c| (c.cluster.as_str(), c.state.as_str())),
        ),
    );
    let old = gateway.status.clone().unwrap_or_default();
    let mut status = next_status(gateway, &old, plan, report);
    let changed = status != old;
    let mut every = plan.clusters.clone();
    if changed {
        // Written anyway: every reachable cluster's last-seen time is brought up to date.
        let namespace = gateway.namespace().unwrap_or_default();
        refresh_last_seen(
            ctx,
            &namespace,
            every.iter_mut().chain(status.clusters.iter_mut()),
        );
    }
    // Events from every entry, listed in the status or not.
    announce(ctx, gateway, (previous, &old), (&every, &status));
    ctx.details.put(gateway, every);
    if !changed {
        return Ok(());
    }
    write(api, gateway, &status).await
}

/// The status `plan` and `report` call for, starting from the conditions of `old`.
fn next_status(
    gateway: &GatewayDNS,
    old: &GatewayDNSStatus,
    plan: &Plan,
    report: &WriteReport,
) -> GatewayDNSStatus {
    let generation = gateway.metadata.generation;
    let (listed, cluster_counts, clusters_not_listed) = bounded_entries(&plan.clusters);
    let published = plan
        .clusters
        .iter()
        .filter(|c| c.state == GatewayState::Published)
        .count();
    let mut status = GatewayDNSStatus {
        observed_generation: generation,
        conditions: old.conditions.clone(),
        summary: Some(format!("{published}/{} published", plan.clusters.len())),
        clusters: listed,
        cluster_counts,
        clusters_not_listed,
        resolved_from: report.resolved_from.clone(),
    };
    let conditions = &mut status.conditions;
    let (ready, reason, message) = ready_condition(plan, report, published);
    set_condition(conditions, "Ready", ready, &reason, message, generation);
    let (written, reason, message) = records_written(report);
    set_condition(
        conditions,
        "RecordsWritten",
        written,
        reason,
        message,
        generation,
    );
    set_fleet_conditions(conditions, report, generation);
    match conflict_message(plan) {
        Some(message) => set_condition(
            conditions,
            CONFLICT_CONDITION,
            ConditionStatus::True,
            NAME_CONFLICT,
            message,
            generation,
        ),
        None => remove_condition(conditions, CONFLICT_CONDITION),
    }
    status
}

/// Condition: an older GatewayDNS publishes the name of some cluster this one selects.
pub const CONFLICT_CONDITION: &str = "Conflict";
/// Its reason (and that of the Event when it appears or changes).
pub const NAME_CONFLICT: &str = "NameConflict";

/// The message of [`CONFLICT_CONDITION`]: every cluster whose name an older GatewayDNS keeps,
/// and which one (`None`: none).
fn conflict_message(plan: &Plan) -> Option<String> {
    let lines: Vec<String> = plan
        .clusters
        .iter()
        .filter(|c| c.state == GatewayState::Conflict)
        .map(|c| c.message.clone())
        .collect();
    (!lines.is_empty()).then(|| some_of(&lines))
}

/// Condition `Ready`: (status, reason, message).
fn ready_condition(
    plan: &Plan,
    WriteReport {
        problems, pending, ..
    }: &WriteReport,
    published: usize,
) -> (ConditionStatus, String, String) {
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
    if plan.clusters.is_empty() {
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
    }
}

/// Condition `RecordsWritten`: (status, reason, message).
fn records_written(
    WriteReport {
        problems, pending, ..
    }: &WriteReport,
) -> (ConditionStatus, &'static str, String) {
    if !problems.is_empty() {
        (ConditionStatus::False, "WriteFailed", some_of(problems))
    } else if !pending.is_empty() {
        (
            ConditionStatus::False,
            WRITES_PENDING,
            pending_message(pending),
        )
    } else {
        (ConditionStatus::True, "Written", String::new())
    }
}

/// The conditions that are there only while they hold: a client that does not verify its peer,
/// gateways withheld from clusters with no agent announced, records kept for the original.
fn set_fleet_conditions(
    conditions: &mut Vec<Condition>,
    WriteReport {
        insecure, mixed, ..
    }: &WriteReport,
    generation: Option<i64>,
) {
    let insecure = (!insecure.is_empty()).then(|| insecure.join("; "));
    for (type_, reason, message) in [
        (INSECURE_PEER_CONDITION, INSECURE_PEER_REASON, insecure),
        (
            WITHHELD_CONDITION,
            "NoAgentAnnounced",
            mixed.withheld.as_ref().map(|m| truncate(m.clone(), 4000)),
        ),
        (
            KEPT_CONDITION,
            "OriginalMayRun",
            mixed.kept.as_ref().map(|m| truncate(m.clone(), 4000)),
        ),
    ] {
        match message {
            Some(message) => set_condition(
                conditions,
                type_,
                ConditionStatus::True,
                reason,
                message,
                generation,
            ),
            None => remove_condition(conditions, type_),
        }
    }
}

/// Brings the last-seen time of every reachable cluster among `entries` up to date.
fn refresh_last_seen<'a>(
    ctx: &Context,
    namespace: &str,
    entries: impl Iterator<Item = &'a mut ClusterGatewayStatus>,
) {
    for entry in entries {
        if entry
            .health
            .is_some_and(|h| h != GatewayHealth::Unreachable)
            && let Some(seen) = ctx.health.get(namespace, &entry.cluster).last_seen
        {
            entry.last_seen = Some(time(seen));
        }
    }
}

/// Writes `status` as the GatewayDNS's whole status: a forced server-side apply of the status
/// subresource under [`FIELD_MANAGER`].
pub(super) async fn write(
    api: &Api<GatewayDNS>,
    gateway: &GatewayDNS,
    status: &GatewayDNSStatus,
) -> Result<(), Error> {
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

/// An Event to publish: (type, reason, note).
type Announced = (EventType, String, String);

/// Events for what changed: a cluster published, withdrawn or failing, and write problems.
fn announce(
    ctx: &Context,
    gateway: &GatewayDNS,
    (old_entries, old): (&[ClusterGatewayStatus], &GatewayDNSStatus),
    (new_entries, new): (&[ClusterGatewayStatus], &GatewayDNSStatus),
) {
    let mut events = cluster_events(old_entries, new_entries);
    events.extend(condition_events(old, new));
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

/// A cluster whose entry changed, published or not, and one no longer selected.
fn cluster_events(
    old_entries: &[ClusterGatewayStatus],
    new_entries: &[ClusterGatewayStatus],
) -> Vec<Announced> {
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
    events
}

/// A condition whose message changed: write problems, an insecure peer, a mixed fleet.
fn condition_events(old: &GatewayDNSStatus, new: &GatewayDNSStatus) -> Vec<Announced> {
    let message_of = |s: &GatewayDNSStatus, type_: &str| {
        s.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.message.clone())
    };
    let mut events = Vec::new();
    for (type_, kind, reason) in [
        ("RecordsWritten", EventType::Warning, "WriteFailed"),
        (
            INSECURE_PEER_CONDITION,
            EventType::Warning,
            INSECURE_PEER_CONDITION,
        ),
        (WITHHELD_CONDITION, EventType::Normal, WITHHELD_CONDITION),
        (KEPT_CONDITION, EventType::Warning, KEPT_CONDITION),
        (CONFLICT_CONDITION, EventType::Warning, NAME_CONFLICT),
    ] {
        // RecordsWritten's message is empty while every write went through.
        let records = type_ == "RecordsWritten";
        if let Some(msg) = message_of(new, type_)
            .filter(|m| !(records && m.is_empty()) && Some(m) != message_of(old, type_).as_ref())
        {
            events.push((kind, reason.to_string(), msg));
        }
    }
    events
}

pub(super) fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_name_kept_by_an_older_gateway_is_a_conflict_condition_that_goes_when_it_is_free() {
        let mut gateway = GatewayDNS::new(
            "later",
            serde_json::from_value(serde_json::json!({"service": "projectcontour/envoy"})).unwrap(),
        );
        gateway.metadata.generation = Some(7);
        let entry = |cluster: &str, state, message: &str| ClusterGatewayStatus {
            cluster: cluster.into(),
            state,
            message: message.into(),
            ..Default::default()
        };
        let report = WriteReport {
            problems: Vec::new(),
            pending: Vec::new(),
            insecure: Vec::new(),
            mixed: MixedFleet::default(),
            resolved_from: Vec::new(),
        };
        let mut plan = Plan {
            clusters: vec![
                entry(
                    "cluster-a",
                    GatewayState::Conflict,
                    "GatewayDNS dev-team/first (older) already publishes *.gateway.cluster-a.dev-team.clusters.xcc.test for cluster cluster-a; this one does not",
                ),
                entry("cluster-b", GatewayState::Published, ""),
            ],
            ..Default::default()
        };
        let status = next_status(&gateway, &GatewayDNSStatus::default(), &plan, &report);
        let conflict = status
            .conditions
            .iter()
            .find(|c| c.type_ == CONFLICT_CONDITION)
            .expect("a Conflict condition");
        assert_eq!(
            (conflict.status.as_str(), conflict.reason.as_str()),
            ("True", NAME_CONFLICT)
        );
        assert_eq!(conflict.observed_generation, Some(7));
        assert!(
            conflict.message.contains("dev-team/first"),
            "{}",
            conflict.message
        );
        let events = condition_events(&GatewayDNSStatus::default(), &status);
        assert!(
            events.iter().any(|(_, reason, note)| reason == NAME_CONFLICT && note.contains("dev-team/first")),
            "{events:?}"
        );
        // The name is free: the condition goes.
        plan.clusters[0] = entry("cluster-a", GatewayState::Published, "");
        let after = next_status(&gateway, &status, &plan, &report);
        assert!(
            after
                .conditions
                .iter()
                .all(|c| c.type_ != CONFLICT_CONDITION)
        );
    }
}

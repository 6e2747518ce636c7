//! The writes of one plan to one cluster, in its lane: what the cluster reads, what it already
//! has, what is written, and what came of it.

use std::{collections::BTreeSet, sync::Arc};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
    runtime::reflector::ObjectRef,
};

use crate::workload::CALL_TIMEOUT;
use crate::{
    desired::{self, Plan, SLICE_NAMESPACE},
    gatewaydns::GatewayDNS,
    workload::ClientError,
};

use xcc_kube::Announcement;

use super::{Context, FIELD_MANAGER, Lane, WRITE_PATIENCE};

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
    /// A wanted slice name is held by a slice this GatewayDNS does not own.
    pub taken: bool,
    /// What was written: the plan's hash, the generation of the cluster's slice store the
    /// writes were decided on, and the announcement read.
    pub plan_hash: u64,
    pub store_generation: Option<u64>,
    pub announcement: Option<Result<Option<xcc_kube::Announcement>, String>>,
}

/// The last outcome of `lane`, if it wrote `plan` without a problem and nothing it was decided on
/// changed since (the cluster's slices, its announcement).
pub(super) fn up_to_date(ctx: &Context, lane: &Lane, plan: &Plan) -> Option<Arc<ClusterOutcome>> {
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
pub(super) fn write_job(
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

/// How a target cluster is named in the outcomes of GatewayDNS `reference`: by its name in
/// the GatewayDNS's namespace, as `namespace/name` in another one (`spec.resolveFrom`), which
/// never equals a selected cluster's name.
fn target_label(namespace: &str, cluster: &str, reference: &str) -> String {
    match reference.split_once('/') {
        Some((own, _)) if own != namespace => format!("{namespace}/{cluster}"),
        _ => cluster.to_string(),
    }
}

/// Waits up to [`WRITE_PATIENCE`] for the writes of `tickets` (cluster, ticket): the outcomes
/// of those done, and the clusters whose write is still going on. When those finish,
/// `gateway` is woken to report them.
pub(super) async fn wait_for_writes(
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
        cluster: target_label(namespace, cluster, reference),
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
    let agent = read_agent(ctx, namespace, cluster, &client, reference, outcome).await;
    let (generation, writes) = ctx
        .workloads
        .with_slices(namespace, cluster, &client, |existing| {
            let target = target_label(namespace, cluster, reference);
            desired::cluster_writes_in(plan, existing, reference, agent.as_ref(), &target)
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
    outcome.taken = !writes.foreign.is_empty();
    let mut problems: Vec<String> = writes
        .foreign
        .iter()
        .map(|name| format!(
            "EndpointSlice {SLICE_NAMESPACE}/{name} exists and does not belong to this GatewayDNS; left as it is"
        ))
        .collect();
    apply_slices(
        ctx,
        (namespace, cluster, reference),
        &slices,
        &writes.apply,
        &mut problems,
    )
    .await?;
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

/// What the xcc-agent of `cluster` announced, noted in `outcome`; unknown counts as "not
/// announced": withholding is safe, sending is not.
async fn read_agent(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    client: &Client,
    reference: &str,
    outcome: &mut ClusterOutcome,
) -> Option<Announcement> {
    let agent = ctx.workloads.announcement(namespace, cluster, client).await;
    outcome.announcement = Some(agent.clone());
    match agent {
        Ok(agent) => agent,
        Err(error) => {
            tracing::warn!(%cluster, gateway = %reference, error = %xcc_kube::bounded(&error), "cannot read the xcc-agent announcement; sending only what the original XCC reads");
            outcome.announcement_error = Some(error);
            None
        }
    }
}

/// Writes each of `apply` through `slices` (a server-side apply each), adding to `problems` what
/// could not be written; `Err` ends the cluster's write (no namespace, or no answer).
async fn apply_slices(
    ctx: &Context,
    (namespace, cluster, reference): (&str, &str, &str),
    slices: &Api<EndpointSlice>,
    apply: &[EndpointSlice],
    problems: &mut Vec<String>,
) -> Result<(), String> {
    for want in apply {
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
    Ok(())
}

//! The GatewayDNS reconciler: observe the selected clusters' gateway Services, write the desired
//! EndpointSlices to every cluster of the namespace, and say what happened in the status.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};

use k8s_openapi::api::{core::v1::Namespace, discovery::v1::EndpointSlice};
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

use crate::{
    desired::{
        self, ClusterInfo, Observation, Plan, SLICE_NAMESPACE, gateway_ref, is_owned, same_content,
    },
    gatewaydns::{GatewayDNS, GatewayDNSStatus, GatewayState},
    workload::Workloads,
};

/// Field manager of every write.
pub const FIELD_MANAGER: &str = "xcc-controller";
/// Finalizer that withdraws a deleted GatewayDNS's records everywhere.
pub const FINALIZER: &str = "connectivity.tanzu.vmware.com/xcc-controller";
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

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
}

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

async fn reconcile_timed(gateway: Arc<GatewayDNS>, ctx: &Context) -> Result<Action, Error> {
    let namespace = gateway.namespace().unwrap_or_default();
    let api: Api<GatewayDNS> = Api::namespaced(ctx.client.clone(), &namespace);
    finalizer(&api, FINALIZER, gateway, |event| async {
        match event {
            Finalizer::Apply(gateway) => apply(&gateway, ctx).await,
            Finalizer::Cleanup(gateway) => cleanup(&gateway, ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

pub fn error_policy(gateway: Arc<GatewayDNS>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(gateway = %gateway_ref(&gateway), kind = error.label(), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn list_clusters(ctx: &Context, namespace: &str) -> Result<Vec<ClusterInfo>, Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &ctx.clusters);
    let list = api
        .list(&ListParams::default())
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

async fn apply(gateway: &GatewayDNS, ctx: &Context) -> Result<Action, Error> {
    let namespace = gateway.namespace().unwrap_or_default();
    let reference = gateway_ref(gateway);
    let me = ObjectRef::from_obj(gateway);
    let api: Api<GatewayDNS> = Api::namespaced(ctx.client.clone(), &namespace);
    let (clusters, all) = tokio::try_join!(list_clusters(ctx, &namespace), async {
        Ok(api.list(&ListParams::default()).await?.items)
    })?;

    // The reconcile is on the path of every address change: independent calls go out together.
    let selected: Vec<&ClusterInfo> = clusters
        .iter()
        .filter(|c| desired::selects(&gateway.spec.cluster_selector, &c.labels))
        .collect();
    let seen = futures::future::join_all(selected.iter().map(|cluster| {
        ctx.workloads
            .observe(&namespace, &cluster.name, &gateway.spec.service, &me)
    }))
    .await;
    let mut observations = HashMap::new();
    let mut used = BTreeSet::new();
    for (cluster, seen) in selected.iter().zip(seen) {
        observations.insert(cluster.name.clone(), seen);
        used.insert((cluster.name.clone(), gateway.spec.service.clone()));
    }
    ctx.workloads.retain(&namespace, &me, &used);
    let plan = desired::plan(gateway, &all, &clusters, &ctx.zone, |name| {
        observations
            .get(name)
            .cloned()
            .unwrap_or_else(|| Observation::Unreachable("not observed".into()))
    });

    // Every cluster at once: one slow or unreachable cluster delays none of the others.
    let writes = clusters
        .iter()
        .map(|cluster| write_cluster(ctx, &namespace, &cluster.name, &reference, &plan));
    let problems: Vec<String> = futures::future::join_all(writes)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    let insecure: Vec<String> = selected
        .iter()
        .filter_map(|cluster| ctx.workloads.insecure(&namespace, &cluster.name))
        .collect();
    update_status(&api, gateway, &plan, &problems, &insecure, ctx).await?;
    Ok(Action::requeue(ctx.resync))
}

/// Brings the slices of `gateway` on one cluster to the plan. Never touches a slice it does not
/// own; an unreachable cluster is reported, not fatal.
async fn write_cluster(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    reference: &str,
    plan: &Plan,
) -> Result<(), String> {
    let client = ctx
        .workloads
        .client(namespace, cluster)
        .await
        .map_err(|e| format!("cluster {cluster}: {e}"))?;
    let timed = |what: String| move |_| format!("cluster {cluster}: timed out {what}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match tokio::time::timeout(CALL_TIMEOUT, namespaces.get_opt(SLICE_NAMESPACE))
        .await
        .map_err(timed("reading namespaces".into()))?
    {
        Ok(Some(_)) => {}
        Ok(None) => {
            return Err(format!(
                "cluster {cluster}: namespace {SLICE_NAMESPACE} does not exist (install xcc-agent there)"
            ));
        }
        Err(e) => return Err(format!("cluster {cluster}: {e}")),
    }
    let slices: Api<EndpointSlice> = Api::namespaced(client, SLICE_NAMESPACE);
    let existing = tokio::time::timeout(CALL_TIMEOUT, slices.list(&ListParams::default()))
        .await
        .map_err(timed("listing EndpointSlices".into()))?
        .map_err(|e| format!("cluster {cluster}: cannot list EndpointSlices: {e}"))?
        .items;
    let by_name: HashMap<String, &EndpointSlice> =
        existing.iter().map(|s| (s.name_any(), s)).collect();
    let mut problems = Vec::new();
    for want in &plan.slices {
        let name = want.name_any();
        match by_name.get(&name) {
            Some(have) if !is_owned(have, reference) => problems.push(format!(
                "EndpointSlice {SLICE_NAMESPACE}/{name} exists and does not belong to this GatewayDNS; left as it is"
            )),
            Some(have) if same_content(have, want) => {}
            _ => {
                let params = PatchParams::apply(FIELD_MANAGER).force();
                match tokio::time::timeout(CALL_TIMEOUT, slices.patch(&name, &params, &Patch::Apply(want))).await {
                    Ok(Ok(_)) => tracing::info!(%cluster, slice = %name, gateway = %reference, "EndpointSlice written"),
                    Ok(Err(e)) => problems.push(format!("cannot write EndpointSlice {name}: {e}")),
                    Err(_) => problems.push(format!("timed out writing EndpointSlice {name}")),
                }
            }
        }
    }
    for have in existing.iter().filter(|s| is_owned(s, reference)) {
        let name = have.name_any();
        if plan.should_delete(&name) {
            match tokio::time::timeout(CALL_TIMEOUT, slices.delete(&name, &Default::default()))
                .await
            {
                Ok(Ok(_)) => {
                    tracing::info!(%cluster, slice = %name, gateway = %reference, "EndpointSlice withdrawn")
                }
                Ok(Err(kube::Error::Api(s))) if s.code == 404 => {}
                Ok(Err(e)) => problems.push(format!("cannot delete EndpointSlice {name}: {e}")),
                Err(_) => problems.push(format!("timed out deleting EndpointSlice {name}")),
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("cluster {cluster}: {}", problems.join("; ")))
    }
}

async fn update_status(
    api: &Api<GatewayDNS>,
    gateway: &GatewayDNS,
    plan: &Plan,
    problems: &[String],
    insecure: &[String],
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
    let mut status = GatewayDNSStatus {
        observed_generation: gateway.metadata.generation,
        conditions: old.conditions.clone(),
        summary: None,
        clusters: plan.clusters.clone(),
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
            problems.join("; "),
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
    let writes = if problems.is_empty() {
        (ConditionStatus::True, "Written", String::new())
    } else {
        (ConditionStatus::False, "WriteFailed", problems.join("; "))
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
    if status == old {
        return Ok(());
    }
    announce(ctx, gateway, &old, &status).await;
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
async fn announce(
    ctx: &Context,
    gateway: &GatewayDNS,
    old: &GatewayDNSStatus,
    new: &GatewayDNSStatus,
) {
    let mut events = Vec::new();
    for c in &new.clusters {
        let before = old.clusters.iter().find(|o| o.cluster == c.cluster);
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
    for c in &old.clusters {
        if !new.clusters.iter().any(|n| n.cluster == c.cluster) {
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
    let reference = gateway.object_ref(&());
    for (type_, reason, note) in events {
        let event = KubeEvent {
            type_,
            reason,
            note: Some(truncate(note, 1000)),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            tracing::debug!(error = %e, "could not publish an Event");
        }
    }
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
async fn cleanup(gateway: &GatewayDNS, ctx: &Context) -> Result<Action, Error> {
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
    let empty = Plan::default();
    for cluster in &clusters {
        if let Err(problem) =
            write_cluster(ctx, &namespace, &cluster.name, &reference, &empty).await
        {
            tracing::warn!(gateway = %reference, %problem, "could not withdraw records on deletion");
        }
    }
    Ok(Action::await_change())
}

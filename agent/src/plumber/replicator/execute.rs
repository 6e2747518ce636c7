//! The Replicator's writes: each [`plan::Step`] performed on one cluster within
//! [`CLUSTER_DEADLINE`], removals in reverse order, and the status with its Event.

use std::future::Future;

use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
    runtime::events::{Event as KubeEvent, EventType},
};
use serde_json::{Map, Value};
use xcc_kube::{
    Reach,
    status::{Verdict, reason_of},
};

use super::{
    CLUSTER_DEADLINE, Context, Key,
    clusters::{self, Cluster, Resolved},
    plan::{self, Attempt, Pass, Step},
    watch,
};
use crate::{
    plumber::{
        api::{ApplyState, ApplyStatus, Replicator, ReplicatorStatus, SyncState},
        desired::Object,
    },
    sink::FIELD_MANAGER,
};

fn api_for(client: &Client, object: &Object) -> Api<DynamicObject> {
    let namespace = object.body["metadata"]["namespace"].as_str();
    match (object.namespaced, namespace) {
        (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, &object.resource),
        _ => Api::all_with(client.clone(), &object.resource),
    }
}

pub(super) fn key(cluster: &Cluster, object: &Object) -> Key {
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
pub(super) async fn apply_one(
    ctx: &Context,
    cluster: &Cluster,
    object: &Object,
    origin: &str,
    replicator: &Replicator,
    selector: &mut Option<Map<String, Value>>,
) -> Result<(ApplyState, Option<String>), kube::Error> {
    let api = api_for(&cluster.client, object);
    let current = api.get_opt(&object.name).await?;
    let found = current
        .as_ref()
        .map(|c| serde_json::to_value(c).unwrap_or_default());
    let (adjusted, kept) = plan::adjust(replicator, object, found.as_ref(), selector.as_ref());
    if let Some(labels) = kept {
        tracing::debug!(replicator = %replicator.name_any(), cluster = %cluster.name, ?labels, "Deployment found with another selector: kept");
        *selector = Some(labels);
    }
    let body = adjusted.as_ref().unwrap_or(&object.body);
    let remember = |rv: Option<String>| {
        ctx.written
            .insert(key(cluster, object), rv.unwrap_or_default());
    };
    match plan::step(object, body, found.as_ref(), origin, &replicator.name_any()) {
        Step::UseExisting => Ok((ApplyState::Existing, None)),
        Step::LeaveAlone(why) => Ok((ApplyState::Conflict, Some(why))),
        Step::Keep => {
            remember(current.and_then(|c| c.resource_version()));
            Ok((ApplyState::Applied, None))
        }
        Step::PutBack { adopt } => {
            if adopt {
                tracing::info!(replicator = %replicator.name_any(), cluster = %cluster.name, kind = object.kind(), object = %object.name, "adopting an object the original plumber controller made");
            }
            // Taking back the fields someone took.
            let written = api
                .patch(
                    &object.name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await?;
            ctx.counted.wrote("apply");
            remember(written.resource_version());
            Ok((ApplyState::Applied, None))
        }
        // Not forced: if someone made it since the read, their fields conflict and stay theirs.
        Step::Create => match api
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
                Some(plan::made_meanwhile(object, &s.message)),
            )),
            Err(e) => Err(e),
        },
    }
}

/// Runs `one` on each object of one cluster in `pass`'s order, within [`CLUSTER_DEADLINE`];
/// once the cluster is silent the rest are not tried. The status entries of the pass.
async fn each_object<'a, F, Fut>(
    cluster: &Cluster,
    objects: &'a [Object],
    pass: Pass,
    one: F,
) -> Vec<ApplyStatus>
where
    F: Fn(&'a Object) -> Fut,
    Fut: Future<Output = Result<Option<(ApplyState, Option<String>)>, kube::Error>>,
{
    let deadline = tokio::time::Instant::now() + CLUSTER_DEADLINE;
    let mut out = Vec::new();
    let mut silent_since: Option<String> = None;
    for object in pass.order(objects) {
        let attempt = match &silent_since {
            Some(why) => Attempt::Silent(why.clone()),
            None => match tokio::time::timeout_at(deadline, one(object)).await {
                Ok(Ok(done)) => Attempt::Done(done),
                Ok(Err(error)) if silent(&error) => Attempt::Silent(xcc_kube::bounded(&error)),
                Ok(Err(error)) => Attempt::Refused(xcc_kube::bounded(&error)),
                Err(_) => Attempt::Silent(format!("no answer within {CLUSTER_DEADLINE:?}")),
            },
        };
        if let Attempt::Silent(why) = &attempt {
            silent_since = Some(why.clone());
        }
        out.extend(pass.entry(&cluster.name, object, &attempt));
    }
    out
}

/// Why `cluster` is known not to answer (from the prober), if it is.
fn known_silent(ctx: &Context, cluster: &Cluster) -> Option<Attempt> {
    let server = cluster.server.as_ref()?;
    match ctx.peers.reach(server) {
        Reach::Silent { error } => Some(Attempt::Silent(format!(
            "the API server does not answer: {error}"
        ))),
        _ => None,
    }
}

/// Every object on one cluster; one entry per object.
pub(super) async fn apply_cluster(
    ctx: &Context,
    cluster: &Cluster,
    objects: &[Object],
    origin: &str,
    replicator: &Replicator,
) -> Vec<ApplyStatus> {
    if let Some(silent) = known_silent(ctx, cluster) {
        return Pass::Apply.not_tried(&cluster.name, objects, &silent);
    }
    watch::ensure_watched(ctx, cluster, objects);
    let selector = &tokio::sync::Mutex::new(None);
    each_object(cluster, objects, Pass::Apply, |object| async move {
        let mut selector = selector.lock().await;
        apply_one(ctx, cluster, object, origin, replicator, &mut selector)
            .await
            .map(Some)
    })
    .await
}

/// Removes our objects from one cluster, in reverse order; returns what was left behind.
async fn cleanup_cluster(
    ctx: &Context,
    cluster: &Cluster,
    objects: &[Object],
    origin: &str,
) -> Vec<ApplyStatus> {
    if let Some(silent) = known_silent(ctx, cluster) {
        return Pass::Remove.not_tried(&cluster.name, objects, &silent);
    }
    each_object(cluster, objects, Pass::Remove, |object| async move {
        let api = api_for(&cluster.client, object);
        let Some(current) = api.get_opt(&object.name).await? else {
            return Ok(None);
        };
        if !plan::ours_to_delete(&serde_json::to_value(&current).unwrap_or_default(), origin) {
            return Ok(None);
        }
        ctx.written.insert(key(cluster, object), String::new());
        crate::sink::delete_exact(&api, &object.name, current.uid(), None, &ctx.counted).await?;
        Ok(None)
    })
    .await
}

/// Every object on each cluster of `resolved` (concurrently); one entry per object.
pub(super) async fn apply_everywhere(
    ctx: &Context,
    resolved: &[Resolved],
    objects: &[Object],
    origin: &str,
    replicator: &Replicator,
) -> Vec<ApplyStatus> {
    let work = resolved.iter().map(|c| async {
        match c {
            Resolved::Ready(cluster) => {
                apply_cluster(ctx, cluster, objects, origin, replicator).await
            }
            Resolved::Failed { name, why } => {
                let why = Attempt::Refused(xcc_kube::bounded(why));
                Pass::Apply.not_tried(name, objects, &why)
            }
        }
    });
    futures::future::join_all(work)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Removes the objects from `clusters` (by name); what was left behind. `only_these`: from
/// those clusters alone (dropped targets), not from the Replicator's others.
pub(super) async fn remove_everywhere(
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
        clusters::resolve(&probe, ctx, clusters)
            .into_iter()
            .filter(|c| match c {
                Resolved::Ready(c) => clusters.contains(&c.name),
                Resolved::Failed { .. } => true,
            })
            .collect()
    } else {
        clusters::resolve(replicator, ctx, clusters)
    };
    let work = resolved.iter().map(|c| async {
        match c {
            Resolved::Ready(cluster) => cleanup_cluster(ctx, cluster, objects, origin).await,
            Resolved::Failed { name, why } => {
                let why = Attempt::Refused(xcc_kube::bounded(why));
                Pass::Remove.not_tried(name, objects, &why)
            }
        }
    });
    futures::future::join_all(work)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Writes the status (nothing when unchanged); publishes an Event when the reason changes.
pub(super) async fn write_status(
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

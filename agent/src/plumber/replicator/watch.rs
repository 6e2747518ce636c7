//! The drift watches: the process's shared metadata watches of the replicated kinds on each
//! cluster in use wake the Replicator an object belongs to when it changes to a resourceVersion
//! the reconciler did not leave, or is deleted.

use dashmap::mapref::entry::Entry;
use futures::StreamExt;
use kube::{ResourceExt, core::GroupVersionKind, runtime::reflector::ObjectRef};

use super::{Context, clusters::Cluster};
use crate::{
    plumber::desired::{self, Object},
    sink::ORIGIN_ANNOTATION,
    sources::{Change, Detail, SourceId},
};

/// Watches (metadata, shared) of the replicated kinds on `cluster` (the namespace aside), which
/// wake the Replicator an object belongs to when it drifts or goes. Watches through clients that
/// are no longer current (the kubeconfig Secret changed) are stopped.
pub fn ensure_watched(ctx: &Context, cluster: &Cluster, objects: &[Object]) {
    let current = ctx.registry.identities();
    ctx.watched.retain(|(identity, _), handle| {
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
        // The vacant entry is held (no await below) so that two reconciles never both start a
        // watch of the same kind on the same cluster.
        let Entry::Vacant(vacant) = ctx.watched.entry(slot) else {
            continue;
        };
        let gvk = GroupVersionKind::gvk(&resource.group, &resource.version, &resource.kind);
        let id = if cluster.server.is_none() {
            SourceId::local(gvk)
        } else {
            SourceId {
                cluster: cluster.name.clone(),
                identity: cluster.identity.clone(),
                gvk,
                fields: None,
                namespace: None,
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
                let last = written.get(&key).map(|rv| rv.clone());
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
        vacant.insert(handle);
    }
}

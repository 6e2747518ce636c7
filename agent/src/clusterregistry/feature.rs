//! The ClusterFeature the original cluster-registry-controller looks for on a peer before its
//! core rules read Clusters, peer Secrets and ResourceSyncRules from it
//! (`controllers/core_syncers.go`: a cluster feature selector for
//! `cluster-registry-core-resources-source`). The original creates it on its own cluster when its
//! `--core-resources-source-enabled` setting is on (the default); so does xcc-agent, under the same
//! name, label and feature name, with the same setting, so that an original member reads the xcc
//! members of a mixed group (and what reaches the group through them).
//!
//! The object is written with server-side apply through the one writer ([`crate::sink`]) when it
//! is missing or differs from what it should be (deleted or edited by hand), never otherwise: a
//! steady cluster sees no writes.

use std::time::Duration;

use futures::StreamExt;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::api::{ClusterFeature, GROUP};
use crate::{
    sink,
    sources::{Detail, SourceId, Sources},
};

/// The original's name of the ClusterFeature.
pub const CORE_FEATURE_NAME: &str = "cluster-registry-core-resources";
/// `spec.featureName` the original's core rules select peers by.
pub const CORE_FEATURE: &str = "cluster-registry-core-resources-source";
/// The original's label on it.
pub const CORE_SYNC_LABEL: &str = "cluster-registry-controller.k8s.cisco.com/core-sync-resource";

/// The ClusterFeature as it should be.
pub fn desired() -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1alpha1"),
        "kind": "ClusterFeature",
        "metadata": {
            "name": CORE_FEATURE_NAME,
            "labels": {CORE_SYNC_LABEL: "true"},
        },
        "spec": {"featureName": CORE_FEATURE},
    })
}

/// Whether `current` (the object under [`CORE_FEATURE_NAME`], if any) needs a write.
fn needs_write(current: Option<&Value>) -> bool {
    current.is_none_or(|current| !sink::up_to_date(current, &desired()))
}

/// Keeps the ClusterFeature on this cluster until `stop` is cancelled: written at start when
/// missing, and again whenever the local watch sees it deleted or changed.
pub async fn publish(
    client: Client,
    sources: Sources,
    counted: sink::Counted,
    stop: CancellationToken,
) {
    let gvk = GroupVersionKind::gvk(GROUP, "v1alpha1", "ClusterFeature");
    let resource = ApiResource::erase::<ClusterFeature>(&());
    let view = sources.view(
        SourceId::local(gvk),
        client.clone(),
        &resource,
        Detail::Full,
    );
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut changes = std::pin::pin!(view.changes());
    let mut backoff = xcc_kube::Backoff::local();
    let mut retry: Option<Duration> = None;
    let mut outage = xcc_sync::outage::Outage::new(
        format!("the write of ClusterFeature {CORE_FEATURE_NAME}"),
        xcc_sync::outage::local_server(),
    );
    loop {
        let wait = async move {
            match retry {
                Some(delay) => tokio::time::sleep(delay).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            change = changes.next() => if change.is_none() { return },
            () = wait => {}
        }
        // Nothing is decided before the list is complete: the object may be there already.
        if !view.listed() {
            continue;
        }
        let current = view
            .store()
            .state()
            .into_iter()
            .find(|o| o.metadata.name.as_deref() == Some(CORE_FEATURE_NAME))
            .and_then(|o| serde_json::to_value(&*o).ok());
        if !needs_write(current.as_ref()) {
            retry = None;
            continue;
        }
        match sink::apply_whole(&api, CORE_FEATURE_NAME, desired(), &counted).await {
            Ok(_) => {
                outage.recovered();
                tracing::info!(
                    name = CORE_FEATURE_NAME,
                    feature = CORE_FEATURE,
                    "published the ClusterFeature the original cluster-registry-controller reads \
                     peers by"
                );
                backoff = xcc_kube::Backoff::local();
                retry = None;
            }
            Err(error) => {
                let delay = backoff.next().unwrap_or(Duration::from_secs(30));
                outage.failed(&error);
                retry = Some(delay);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feature_is_the_originals_and_is_written_only_when_it_differs() {
        let want = desired();
        assert_eq!(want["metadata"]["name"], "cluster-registry-core-resources");
        assert_eq!(
            want["metadata"]["labels"]["cluster-registry-controller.k8s.cisco.com/core-sync-resource"],
            "true"
        );
        assert_eq!(
            want["spec"]["featureName"],
            "cluster-registry-core-resources-source"
        );
        let feature: ClusterFeature = serde_json::from_value(want.clone()).unwrap();
        assert_eq!(feature.spec.feature_name, CORE_FEATURE);

        assert!(needs_write(None));
        let mut written = want.clone();
        written["metadata"]["uid"] = json!("u");
        written["metadata"]["resourceVersion"] = json!("7");
        written["metadata"]["labels"]["team"] = json!("kept");
        assert!(!needs_write(Some(&written)));
        let mut edited = written.clone();
        edited["spec"]["featureName"] = json!("something-else");
        assert!(needs_write(Some(&edited)));
        let mut unlabelled = written;
        unlabelled["metadata"]["labels"] = json!({});
        assert!(needs_write(Some(&unlabelled)));
    }
}

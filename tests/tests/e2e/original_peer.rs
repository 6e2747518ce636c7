//! What the original cluster-registry-controller needs from an xcc member of a mixed group
//! (issue 25), shown by acting as the original does (its module is not served here; what it reads
//! is in the reference's behaviour notes):
//! - its remote-cluster controller, with the reader ServiceAccount's token of our manifests,
//!   lists and watches namespaces and lists nodes; writes are still refused;
//! - its core rules read only from peers with the ClusterFeature `cluster-registry-core-resources`
//!   (label `cluster-registry-controller.k8s.cisco.com/core-sync-resource: "true"`, featureName
//!   `cluster-registry-core-resources-source`): every xcc member has it, and a ResourceSyncRule
//!   that selects peers by that feature, as the original's core rules do, syncs from xcc members.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::{
    Api, Client,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch, PatchParams,
        PostParams, WatchEvent, WatchParams,
    },
};
use xcc_e2e::{Testbed, client_for, require_testbed};

use crate::resource_sync::{TEST_SECRET, apply_namespaced, group, wait_for, wait_secret};

const FEATURE_NAME: &str = "cluster-registry-core-resources";
const FEATURE: &str = "cluster-registry-core-resources-source";
const FEATURE_LABEL: &str = "cluster-registry-controller.k8s.cisco.com/core-sync-resource";

/// The reference's rule for `test-secret`, reading only from peers with the core feature, as the
/// original's core rules select their sources.
const RULE_BY_CORE_FEATURE: &str = "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1
kind: ResourceSyncRule
metadata:
  name: test-secret-from-core-sources
spec:
  groupVersionKind:
    kind: Secret
    version: v1
  clusterFeatureMatch:
  - featureName: cluster-registry-core-resources-source
  rules:
  - match:
    - objectKey:
      name: test-secret
      namespace: cluster-registry
";

async fn client_of(kubeconfig: &str) -> Client {
    client_for(kubeconfig, true).await.unwrap()
}

fn status_code<T>(result: Result<T, kube::Error>) -> Option<u16> {
    match result {
        Err(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_xcc_member_gives_the_original_what_it_reads_from_a_peer() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["first", "second"])
        .await
        .unwrap();
    let members = group(&binaries, &bed).await;
    let features = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "clusterregistry.k8s.cisco.com",
        "v1alpha1",
        "ClusterFeature",
    ));

    for (cluster, member) in bed.clusters.iter().zip(&members) {
        // The core-resources ClusterFeature, published by the agent with the original's name,
        // label and featureName.
        let api: Api<DynamicObject> = Api::all_with(cluster.client.clone(), &features);
        let feature = wait_for(
            &format!("on {}: ClusterFeature {FEATURE_NAME}", cluster.name),
            Duration::from_secs(30),
            || async { api.get_opt(FEATURE_NAME).await.ok().flatten() },
        )
        .await;
        assert_eq!(
            feature
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(FEATURE_LABEL)),
            Some(&"true".to_string()),
            "{feature:?}"
        );
        assert_eq!(feature.data["spec"]["featureName"], FEATURE);

        // The original's remote-cluster controller, with the reader token: list and watch
        // namespaces (the cluster ID from kube-system), list nodes.
        let reader = client_of(&member.reader).await;
        let namespaces: Api<Namespace> = Api::all(reader.clone());
        let listed = namespaces.list(&ListParams::default()).await.unwrap();
        assert!(
            listed
                .items
                .iter()
                .any(|n| n.metadata.name.as_deref() == Some("kube-system")),
            "kube-system listed"
        );
        let version = listed.metadata.resource_version.clone().unwrap_or_default();
        let mut watch = namespaces
            .watch(&WatchParams::default().timeout(2), &version)
            .await
            .expect("the reader may watch namespaces")
            .boxed();
        // A change to watch: a namespace made by the admin.
        let made = format!("seen-by-reader-{}", cluster.name);
        Api::<Namespace>::all(cluster.client.clone())
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some(made.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let event = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("a watch event within 5 s")
            .expect("the watch stream")
            .expect("a watch event, not an error");
        assert!(
            matches!(&event, WatchEvent::Added(ns) if ns.metadata.name.as_deref() == Some(made.as_str())),
            "{event:?}"
        );
        Api::<Node>::all(reader.clone())
            .list(&ListParams::default())
            .await
            .expect("the reader may list nodes");

        // Writes still refused.
        let created = namespaces
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some("planted".into()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await;
        assert_eq!(status_code(created), Some(403), "create a namespace");
        let patched = namespaces
            .patch(
                &made,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {"x": "y"}}})),
            )
            .await;
        assert_eq!(status_code(patched), Some(403), "patch a namespace");
        let deleted = namespaces.delete(&made, &Default::default()).await;
        assert_eq!(status_code(deleted), Some(403), "delete a namespace");
        let node = Node {
            metadata: ObjectMeta {
                name: Some("planted".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let created = Api::<Node>::all(reader.clone())
            .create(&PostParams::default(), &node)
            .await;
        assert_eq!(status_code(created), Some(403), "create a node");
        let feature_patch = Api::<DynamicObject>::all_with(reader.clone(), &features)
            .patch(
                FEATURE_NAME,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"featureName": "other"}})),
            )
            .await;
        assert_eq!(
            status_code(feature_patch),
            Some(403),
            "patch the ClusterFeature"
        );
    }

    // A rule that selects its sources by the core feature, as the original's core rules do:
    // the Secret made on the second reaches the first.
    let [first, second] = [&bed.clusters[0], &bed.clusters[1]];
    apply_namespaced(second, TEST_SECRET).await;
    first.apply_yaml(RULE_BY_CORE_FEATURE).await.unwrap();
    wait_secret(first, "test-secret", Some(&members[1].id)).await;

    // Deleted by hand, the feature comes back: the agent keeps it.
    let api: Api<DynamicObject> = Api::all_with(second.client.clone(), &features);
    let uid = api.get(FEATURE_NAME).await.unwrap().metadata.uid;
    api.delete(FEATURE_NAME, &Default::default()).await.unwrap();
    wait_for(
        "the ClusterFeature published again",
        Duration::from_secs(30),
        || async {
            api.get_opt(FEATURE_NAME)
                .await
                .ok()
                .flatten()
                .filter(|f| f.metadata.uid != uid)
        },
    )
    .await;
}

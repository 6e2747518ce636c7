//! The reference's cluster-group walkthroughs, each as a test on three real API servers: form a
//! group of two by exchanging Cluster and Secret, attach a third with one more exchange, then
//! "sync everywhere", "sync to a set of clusters" and "sync from a set of clusters" with the
//! reference's YAML unchanged. Every cluster starts as its installation leaves it: its own
//! Cluster and the Secret with a kubeconfig that reads it; everything else arrives by sync.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::events::v1::Event;
use kube::{Api, ResourceExt, api::DeleteParams};
use xcc_e2e::{Binaries, Cluster, Testbed, require_testbed};

use crate::resource_sync::{
    Member, NAMES, OWNER, REGISTRY_NS, TEST_FEATURE, TEST_RULE, TEST_SECRET, apply_namespaced,
    clusters_api, install_member, rules_api, secrets, wait_for, wait_gone, wait_secret, wait_state,
};

/// The reference's "copy/paste Cluster and secret" step between `a` and `b`, both ways:
/// `kubectl get -o yaml` on one cluster, `kubectl apply -f -` on the other. The fields the source
/// API server wrote (uid, resourceVersion, ...) are dropped on the way, as a real copy needs:
/// an API server refuses to create an object that carries a resourceVersion.
pub(crate) async fn exchange(a: &Cluster, b: &Cluster) {
    for (from, to) in [(a, b), (b, a)] {
        // Fully qualified: the test bed also serves Cluster API's `clusters`.
        for kind in ["clusters.clusterregistry.k8s.cisco.com", "secret"] {
            let mut args = vec!["get", kind, from.name.as_str(), "-o", "yaml"];
            if kind == "secret" {
                args.extend(["-n", REGISTRY_NS]);
            }
            let yaml = from.kubectl(&args).await.unwrap();
            let mut object: serde_json::Value = xcc_kube::yaml::from_str(&yaml).unwrap();
            if let Some(metadata) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                for field in [
                    "uid",
                    "resourceVersion",
                    "creationTimestamp",
                    "generation",
                    "managedFields",
                ] {
                    metadata.remove(field);
                }
            }
            if let Some(object) = object.as_object_mut() {
                object.remove("status");
            }
            to.apply_yaml(&xcc_kube::yaml::to_string(&object).unwrap())
                .await
                .unwrap();
        }
    }
}

/// Three members, each as installed (nothing of the others), with their agents running.
async fn members(binaries: &Binaries, bed: &Testbed) -> Vec<Member> {
    let mut running = Vec::new();
    for cluster in &bed.clusters {
        running.push(install_member(binaries, cluster).await);
    }
    running
}

/// Every cluster sees every one of `names`: itself Local, the others Peer, all Ready and Synced.
async fn wait_group(clusters: &[&Cluster], names: &[&str]) {
    for cluster in clusters {
        for name in names {
            let type_ = if *name == cluster.name {
                "Local"
            } else {
                "Peer"
            };
            wait_state(cluster, name, "Ready", type_, "True").await;
        }
    }
}

/// The group of three, formed the reference's way: first ⇄ second, then first ⇄ third.
async fn formed_group(binaries: &Binaries, bed: &Testbed) -> Vec<Member> {
    let running = members(binaries, bed).await;
    let [first, second, third] = [0, 1, 2].map(|i| &bed.clusters[i]);
    exchange(first, second).await;
    exchange(first, third).await;
    wait_group(&[first, second, third], &NAMES).await;
    running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_two_forms_and_a_third_joins_with_one_exchange() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &NAMES).await.unwrap();
    let _running = members(&binaries, &bed).await;
    let [first, second, third] = [0, 1, 2].map(|i| &bed.clusters[i]);
    let first_id = first.kube_system_uid().await.unwrap();

    // Alone, each cluster is Local and Ready; nothing else is known.
    wait_state(third, "third", "Ready", "Local", "True").await;

    // A group of two: one exchange.
    exchange(first, second).await;
    wait_group(&[first, second], &["first", "second"]).await;

    // A third member: one exchange with the first only. The second learns the third's Cluster
    // and Secret from the first, the third learns the second's, and all three are Synced.
    exchange(first, third).await;
    wait_group(&[first, second, third], &NAMES).await;
    for (cluster, peer) in [(second, "third"), (third, "second")] {
        let copy = clusters_api(cluster).get(peer).await.unwrap();
        assert_eq!(
            copy.annotations().get(OWNER),
            Some(&first_id),
            "{peer}'s Cluster on {} comes from the first",
            cluster.name
        );
        let secret = secrets(cluster).get(peer).await.unwrap();
        assert_eq!(
            secret.type_.as_deref(),
            Some("k8s.cisco.com/cluster-registry-secret")
        );
        assert_eq!(secret.annotations().get(OWNER), Some(&first_id));
    }
    // The exchanged objects themselves were applied by hand: local, never overwritten.
    let by_hand = clusters_api(third).get("first").await.unwrap();
    assert!(by_hand.annotations().get(OWNER).is_none());
}

/// "Sync everywhere": the Secret on the third cluster, the rule on the first only; the rule
/// itself and the Secret appear on every cluster, and a changed or deleted copy comes back.
async fn sync_everywhere(bed: &Testbed) {
    let [first, second, third] = [0, 1, 2].map(|i| &bed.clusters[i]);
    let third_id = third.kube_system_uid().await.unwrap();
    let first_id = first.kube_system_uid().await.unwrap();
    apply_namespaced(third, TEST_SECRET).await;
    first.apply_yaml(TEST_RULE).await.unwrap();
    for cluster in [second, third] {
        let rule = wait_for(
            &format!("on {}: ResourceSyncRule test-secret-sink", cluster.name),
            Duration::from_secs(60),
            || async { rules_api(cluster).get_opt("test-secret-sink").await.ok()? },
        )
        .await;
        assert_eq!(rule.annotations().get(OWNER), Some(&first_id));
    }
    for cluster in [first, second] {
        wait_secret(cluster, "test-secret", Some(&third_id)).await;
    }
    secrets(second)
        .delete("test-secret", &DeleteParams::default())
        .await
        .unwrap();
    wait_secret(second, "test-secret", Some(&third_id)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_everywhere_from_a_rule_on_one_cluster() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &NAMES).await.unwrap();
    let _running = formed_group(&binaries, &bed).await;
    sync_everywhere(&bed).await;

    // A rule the agent has no permission for says so (status and Event) and harms no other.
    let first = &bed.clusters[0];
    first.apply_yaml(ACCOUNTS_RULE).await.unwrap();
    let message = rule_not_ready(first, "accounts", "MissingPermission").await;
    assert!(
        message.contains("serviceaccounts") && message.contains("controller-aggregated"),
        "{message}"
    );
    let events: Api<Event> = Api::all(first.client.clone());
    wait_for(
        "on first: a MissingPermission Event for rule accounts",
        Duration::from_secs(30),
        || async {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("MissingPermission")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("accounts")
                })
                .map(drop)
        },
    )
    .await;
    // Allowed to write here, but the peers' reader may not read them: the peers are named.
    first.apply_yaml(ACCOUNTS_WRITE).await.unwrap();
    let message = rule_not_ready(first, "accounts", "MissingPermission").await;
    let message = wait_for(
        "on first: rule accounts names the peers",
        Duration::from_secs(90),
        || {
            let message = message.clone();
            async move {
                let now = rule_not_ready(first, "accounts", "MissingPermission").await;
                (now != message || now.contains("reader-aggregated")).then_some(now)
            }
        },
    )
    .await;
    assert!(
        message.contains("second (list, watch)") && message.contains("third (list, watch)"),
        "{message}"
    );
    let second = &bed.clusters[1];
    secrets(second)
        .delete("test-secret", &DeleteParams::default())
        .await
        .unwrap();
    let third_id = bed.clusters[2].kube_system_uid().await.unwrap();
    wait_secret(second, "test-secret", Some(&third_id)).await;
}

/// A rule for a kind our manifests do not let the agent write (ServiceAccounts).
const ACCOUNTS_RULE: &str = "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1
kind: ResourceSyncRule
metadata: {name: accounts}
spec:
  groupVersionKind: {version: v1, kind: ServiceAccount}
  rules:
  - match:
    - namespaces: [team-a]
";

/// Write access to ServiceAccounts here, through the aggregated write-side ClusterRole.
const ACCOUNTS_WRITE: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: sync-serviceaccounts-write
  labels: {cluster-registry.k8s.cisco.com/controller-aggregated: \"true\"}
rules:
- apiGroups: [\"\"]
  resources: [serviceaccounts]
  verbs: [get, list, watch, create, patch, update, delete]
";

/// The message of rule `name`'s Ready=False condition with `reason`, once it has one.
async fn rule_not_ready(cluster: &Cluster, name: &str, reason: &str) -> String {
    wait_for(
        &format!("on {}: rule {name} Ready=False {reason}", cluster.name),
        Duration::from_secs(60),
        || async {
            let rule = rules_api(cluster).get_opt(name).await.ok()??;
            let condition = rule.data["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")?
                .clone();
            (condition["status"] == "False" && condition["reason"] == reason).then(|| {
                condition["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_to_a_set_of_clusters() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &NAMES).await.unwrap();
    let running = formed_group(&binaries, &bed).await;
    sync_everywhere(&bed).await;
    let [first, second, third] = [0, 1, 2].map(|i| &bed.clusters[i]);
    let third_id = third.kube_system_uid().await.unwrap();

    // 1. The annotation on the first cluster's rule. 2. Delete the rule on the second: it is
    // not recreated. 3. Delete the Secret on the second: it is not recreated either. Each step
    // waits until the agents heard it.
    let since = SystemTime::now();
    first
        .kubectl(&[
            "annotate",
            "resourcesyncrule",
            "test-secret-sink",
            "cluster-registry.k8s.cisco.com/resource-sync-disabled=true",
        ])
        .await
        .unwrap();
    running[0]
        .agent
        .heard(("local", "ResourceSyncRule"), since)
        .await
        .unwrap();
    let since = SystemTime::now();
    rules_api(second)
        .delete("test-secret-sink", &DeleteParams::default())
        .await
        .unwrap();
    running[1]
        .agent
        .heard(("local", "ResourceSyncRule"), since)
        .await
        .unwrap();
    let since = SystemTime::now();
    secrets(second)
        .delete("test-secret", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(second, "test-secret").await;
    // The agents that read the second's Secrets heard the deletion (the second's own agent
    // heard its rule go, above; only it writes to the second): only now may nothing have come
    // back.
    for member in [&running[0], &running[2]] {
        member
            .agent
            .heard(("second", "Secret"), since)
            .await
            .unwrap();
    }
    assert!(
        rules_api(second)
            .get_opt("test-secret-sink")
            .await
            .unwrap()
            .is_none(),
        "the rule came back to the second cluster"
    );
    assert!(
        secrets(second)
            .get_opt("test-secret")
            .await
            .unwrap()
            .is_none(),
        "the Secret came back to the second cluster"
    );
    // The first cluster still syncs it: a deleted copy there comes back.
    secrets(first)
        .delete("test-secret", &DeleteParams::default())
        .await
        .unwrap();
    wait_secret(first, "test-secret", Some(&third_id)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_from_a_set_of_clusters() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &NAMES).await.unwrap();
    let running = formed_group(&binaries, &bed).await;
    sync_everywhere(&bed).await;
    let [first, _, third] = [0, 1, 2].map(|i| &bed.clusters[i]);
    let third_id = third.kube_system_uid().await.unwrap();

    // 1. clusterFeatureMatch on the first cluster's rule: no cluster has the feature, so a
    // deleted copy on the first cluster is not recreated.
    let since = SystemTime::now();
    first
        .kubectl(&[
            "patch",
            "resourcesyncrule",
            "test-secret-sink",
            "--type=merge",
            "-p",
            r#"{"spec":{"clusterFeatureMatch":[{"featureName":"test-secret-feature"}]}}"#,
        ])
        .await
        .unwrap();
    running[0]
        .agent
        .heard(("local", "ResourceSyncRule"), since)
        .await
        .unwrap();
    let mark = running[0].agent.mark("resource-sync").await.unwrap();
    secrets(first)
        .delete("test-secret", &DeleteParams::default())
        .await
        .unwrap();
    // The first's agent handled the deletion before nothing may have come back.
    running[0]
        .agent
        .handled(("local", "Secret"), &mark)
        .await
        .unwrap();
    assert!(
        secrets(first)
            .get_opt("test-secret")
            .await
            .unwrap()
            .is_none(),
        "recreated without a ClusterFeature"
    );
    // 2. The ClusterFeature on the third cluster. 3. The Secret comes back from there.
    third.apply_yaml(TEST_FEATURE).await.unwrap();
    wait_secret(first, "test-secret", Some(&third_id)).await;
}

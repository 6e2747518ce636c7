//! Every match field and every mutation of a ResourceSyncRule end to end, on two real API
//! servers: objects made on `first`, rules on `second`. The mutations that move a copy away from
//! its source's key (`/metadata/name` and `/metadata/namespace` overrides, `groupVersionKind`)
//! are followed through drift, a local object holding the key, the source's change and deletion,
//! and an agent restart.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind},
};
use serde_json::Value;
use xcc_e2e::{Cluster, Testbed, require_testbed};

use crate::resource_sync::{NAMES, OWNER, group, start_agent, wait_for};

const SOURCE: &str = "xcc.test/sync-source";

/// A namespaced kind with a status subresource and any fields: Widget and Gadget.
fn crd(group: &str, kind: &str, plural: &str) -> String {
    let singular = kind.to_lowercase();
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.{group}}}
spec:
  group: {group}
  names: {{kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"
    )
}

/// The agents' access to Widgets and Gadgets.
const EXAMPLES_RBAC: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: sync-examples-read
  labels: {cluster-registry.k8s.cisco.com/reader-aggregated: \"true\"}
rules:
- apiGroups: [a.example.com, b.example.com]
  resources: [widgets, gadgets]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: sync-examples-write
  labels: {cluster-registry.k8s.cisco.com/controller-aggregated: \"true\"}
rules:
- apiGroups: [a.example.com, b.example.com]
  resources: [widgets, gadgets, widgets/status, gadgets/status]
  verbs: [get, list, watch, create, patch, update, delete]
";

/// One ConfigMap rule using every match field, and one mutation per entry.
const CONFIGMAP_RULE: &str = "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1
kind: ResourceSyncRule
metadata:
  name: every-field
spec:
  groupVersionKind: {version: v1, kind: ConfigMap}
  rules:
  - match:
    - objectKey: {name: keyed, namespace: team-a}
    mutations:
      annotations:
        add: {note: keyed}
        remove: [drop-me]
      labels:
        add: {copied: \"yes\"}
        remove: [drop-me]
  - match:
    - namespaces: [team-a]
      labels:
      - matchExpressions: [{key: tier, operator: In, values: [gold]}]
      annotations:
      - matchAnnotations: {sync: \"yes\"}
    mutations:
      overrides:
      - {type: replace, path: /data/from, value: '{{ .Cluster.GetName }}'}
      - {type: replace, path: /data/count, value: '{{ len .Object.data }}'}
  - match:
    - content:
      - {key: .data.mode, value: move}
    mutations:
      overrides:
      - {type: replace, path: /metadata/name, value: '{{ .Object.metadata.name }}-moved'}
      - {type: replace, path: /metadata/namespace, value: team-b}
      - {type: remove, path: /data/secret}
";

/// Widgets written as Gadgets, status included.
const WIDGET_RULE: &str = "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1
kind: ResourceSyncRule
metadata:
  name: widgets-as-gadgets
spec:
  groupVersionKind: {group: a.example.com, version: v1, kind: Widget}
  rules:
  - mutations:
      groupVersionKind: {group: b.example.com, version: v1, kind: Gadget}
      syncStatus: true
";

fn configmaps(cluster: &Cluster, namespace: &str) -> Api<ConfigMap> {
    Api::namespaced(cluster.client.clone(), namespace)
}

fn kind(cluster: &Cluster, group: &str, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind));
    Api::namespaced_with(cluster.client.clone(), "team-a", &resource)
}

async fn configmap(cluster: &Cluster, namespace: &str, name: &str) -> Option<ConfigMap> {
    configmaps(cluster, namespace).get_opt(name).await.ok()?
}

fn data(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

async fn wait_configmap(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    check: impl Fn(&ConfigMap) -> bool,
) -> ConfigMap {
    let what = format!("on {}: ConfigMap {namespace}/{name}", cluster.name);
    wait_for(&what, Duration::from_secs(60), || async {
        configmap(cluster, namespace, name).await.filter(&check)
    })
    .await
}

async fn wait_no_configmap(cluster: &Cluster, namespace: &str, name: &str) {
    let what = format!("on {}: ConfigMap {namespace}/{name} deleted", cluster.name);
    wait_for(&what, Duration::from_secs(60), || async {
        matches!(configmaps(cluster, namespace).get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

async fn wait_gadget(cluster: &Cluster, check: impl Fn(&Value) -> bool) -> Value {
    wait_for("on second: Gadget w1", Duration::from_secs(60), || async {
        let gadget = kind(cluster, "b.example.com", "Gadget")
            .get_opt("w1")
            .await
            .ok()??;
        let value = serde_json::to_value(gadget).ok()?;
        check(&value).then_some(value)
    })
    .await
}

/// resourceVersions of everything the rules write on `cluster`.
async fn versions(cluster: &Cluster) -> Vec<String> {
    let mut out = Vec::new();
    for namespace in ["team-a", "team-b"] {
        for cm in configmaps(cluster, namespace)
            .list(&Default::default())
            .await
            .unwrap()
        {
            out.push(format!(
                "{namespace}/{} {:?}",
                cm.name_any(),
                cm.resource_version()
            ));
        }
    }
    for gadget in kind(cluster, "b.example.com", "Gadget")
        .list(&Default::default())
        .await
        .unwrap()
    {
        out.push(format!(
            "gadget {} {:?}",
            gadget.name_any(),
            gadget.resource_version()
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_match_field_and_mutation_including_moved_copies() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &NAMES[..2]).await.unwrap();
    let mut members = group(&binaries, &bed).await;
    let [first, second] = [0, 1].map(|i| &bed.clusters[i]);
    let first_id = members[0].id.clone();
    for cluster in &bed.clusters {
        for yaml in [
            crd("a.example.com", "Widget", "widgets"),
            crd("b.example.com", "Gadget", "gadgets"),
            EXAMPLES_RBAC.to_string(),
        ] {
            cluster.apply_yaml(&yaml).await.unwrap();
        }
        cluster
            .kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd",
                "--all",
            ])
            .await
            .unwrap();
    }
    second
        .kubectl(&["create", "namespace", "team-b"])
        .await
        .unwrap();

    let objects = "apiVersion: v1
kind: ConfigMap
metadata:
  name: keyed
  namespace: team-a
  labels: {drop-me: x, keep: here}
  annotations: {drop-me: x, kept: here}
data: {a: '1'}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: gold
  namespace: team-a
  labels: {tier: gold}
  annotations: {sync: 'yes'}
data: {a: '1', b: '2'}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: silver
  namespace: team-a
  labels: {tier: silver}
  annotations: {sync: 'yes'}
data: {a: '1'}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: mover, namespace: team-a}
data: {mode: move, secret: s3cret}
---
apiVersion: a.example.com/v1
kind: Widget
metadata: {name: w1, namespace: team-a}
spec: {size: 3}
";
    first.apply_yaml(objects).await.unwrap();
    first
        .kubectl(&[
            "-n",
            "team-a",
            "patch",
            "widgets.a.example.com",
            "w1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Ready"}}"#,
        ])
        .await
        .unwrap();
    second.apply_yaml(CONFIGMAP_RULE).await.unwrap();
    second.apply_yaml(WIDGET_RULE).await.unwrap();

    // objectKey; annotations and labels added and removed; the owner on every copy.
    let keyed = wait_configmap(second, "team-a", "keyed", |_| true).await;
    assert_eq!(keyed.annotations().get(OWNER), Some(&first_id));
    assert_eq!(keyed.labels().get(OWNER), Some(&first_id));
    assert_eq!(
        keyed.annotations().get("note").map(String::as_str),
        Some("keyed")
    );
    assert_eq!(
        keyed.annotations().get("kept").map(String::as_str),
        Some("here")
    );
    assert!(!keyed.annotations().contains_key("drop-me"));
    assert_eq!(
        keyed.labels().get("copied").map(String::as_str),
        Some("yes")
    );
    assert_eq!(keyed.labels().get("keep").map(String::as_str), Some("here"));
    assert!(!keyed.labels().contains_key("drop-me"));

    // namespaces + label expression + annotation selector; templates over cluster and object.
    let gold = wait_configmap(second, "team-a", "gold", |_| true).await;
    assert_eq!(data(&gold)["from"], "first");
    assert_eq!(data(&gold)["count"], "2");

    // content match; the copy renamed, moved to another namespace, a field removed.
    let moved = wait_configmap(second, "team-b", "mover-moved", |_| true).await;
    assert_eq!(
        data(&moved),
        BTreeMap::from([("mode".into(), "move".into())])
    );
    assert_eq!(moved.annotations().get(OWNER), Some(&first_id));
    assert_eq!(
        moved.annotations().get(SOURCE).map(String::as_str),
        Some("v1/ConfigMap/team-a/mover")
    );

    // groupVersionKind and syncStatus: the Widget arrives as a Gadget, with its status.
    let gadget = wait_gadget(second, |g| g["status"]["phase"] == "Ready").await;
    assert_eq!(gadget["spec"]["size"], 3);
    assert_eq!(gadget["metadata"]["annotations"][OWNER], first_id.as_str());
    assert_eq!(
        gadget["metadata"]["annotations"][SOURCE],
        "a.example.com/v1/Widget/team-a/w1"
    );

    // What no entry matches is not copied, and nothing lands under the sources' own keys.
    for (namespace, name) in [("team-a", "silver"), ("team-a", "mover")] {
        assert!(
            configmap(second, namespace, name).await.is_none(),
            "{name} copied"
        );
    }
    assert!(
        kind(second, "a.example.com", "Widget")
            .get_opt("w1")
            .await
            .unwrap()
            .is_none(),
        "a Widget written on second"
    );

    // Drift of a moved copy is reverted, as is its deletion.
    second
        .kubectl(&[
            "-n",
            "team-b",
            "patch",
            "configmap",
            "mover-moved",
            "--type=merge",
            "-p",
            r#"{"data":{"mode":"edited","extra":"x"}}"#,
        ])
        .await
        .unwrap();
    wait_configmap(second, "team-b", "mover-moved", |c| {
        data(c).len() == 1 && data(c)["mode"] == "move"
    })
    .await;
    configmaps(second, "team-b")
        .delete("mover-moved", &DeleteParams::default())
        .await
        .unwrap();
    wait_configmap(second, "team-b", "mover-moved", |_| true).await;

    // A local object under the key a copy moves to wins; once it is deleted the copy comes.
    second
        .apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: blocked-moved, namespace: team-b}\ndata: {mode: local}\n")
        .await
        .unwrap();
    let mark = members[1].agent.mark("resource-sync").await.unwrap();
    first
        .apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: blocked, namespace: team-a}\ndata: {mode: move}\n")
        .await
        .unwrap();
    // The second's agent handled the new source before the local object may be found intact.
    members[1]
        .agent
        .handled(("first", "ConfigMap"), &mark)
        .await
        .unwrap();
    let local = configmap(second, "team-b", "blocked-moved").await.unwrap();
    assert_eq!(
        data(&local)["mode"],
        "local",
        "a local object was overwritten"
    );
    assert!(local.annotations().get(OWNER).is_none());
    configmaps(second, "team-b")
        .delete("blocked-moved", &DeleteParams::default())
        .await
        .unwrap();
    wait_configmap(second, "team-b", "blocked-moved", |c| {
        data(c)["mode"] == "move" && c.annotations().get(OWNER) == Some(&first_id)
    })
    .await;

    // A changed source changes the copy of another kind.
    let mark = members[1].agent.mark("resource-sync").await.unwrap();
    first
        .kubectl(&[
            "-n",
            "team-a",
            "patch",
            "widgets.a.example.com",
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":4}}"#,
        ])
        .await
        .unwrap();
    wait_gadget(second, |g| g["spec"]["size"] == 4).await;

    // Converged: the second's agent handled the echo of its write, and wrote once.
    members[1]
        .agent
        .handled(("local", "Gadget"), &mark)
        .await
        .unwrap();
    let before = versions(second).await;
    assert_eq!(
        members[1].agent.writes_since(&mark).await.unwrap(),
        1.0,
        "writes for one changed source"
    );
    assert_eq!(versions(second).await, before, "writes after convergence");

    // A source deleted while the agent is down: its moved copy goes when the agent is back,
    // found by the source it names.
    members[1].agent.process.stop(Duration::from_secs(5));
    configmaps(first, "team-a")
        .delete("blocked", &DeleteParams::default())
        .await
        .unwrap();
    members[1].agent = start_agent(second, "xcc-agent-restarted.log").await;
    wait_no_configmap(second, "team-b", "blocked-moved").await;

    // Deleting the sources deletes the moved copies.
    configmaps(first, "team-a")
        .delete("mover", &DeleteParams::default())
        .await
        .unwrap();
    kind(first, "a.example.com", "Widget")
        .delete("w1", &DeleteParams::default())
        .await
        .unwrap();
    wait_no_configmap(second, "team-b", "mover-moved").await;
    wait_for(
        "on second: Gadget w1 deleted",
        Duration::from_secs(60),
        || async {
            matches!(
                kind(second, "b.example.com", "Gadget").get_opt("w1").await,
                Ok(None)
            )
            .then_some(())
        },
    )
    .await;
    // The others stay.
    assert!(configmap(second, "team-a", "keyed").await.is_some());
}

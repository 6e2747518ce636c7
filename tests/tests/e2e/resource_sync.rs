//! Cluster groups and resource sync (cluster-registry's API) end to end on three real API
//! servers, each with an xcc-agent running under a kubeconfig minted for our manifests'
//! ServiceAccount, reading its peers with the reader ServiceAccount of our manifests, and the
//! reference's YAML applied unchanged.

use std::{
    collections::BTreeMap,
    future::Future,
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind},
};
use xcc_e2e::{Binaries, Cluster, Process, Testbed, aggregation, require_testbed, xcc::Agent};

pub(crate) const NAMES: [&str; 3] = ["first", "second", "third"];
pub(crate) const REGISTRY_NS: &str = "cluster-registry";
pub(crate) const OWNER: &str = "cluster-registry.k8s.cisco.com/resource-owner-cluster-id";

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub(crate) fn manifest(path: &str) -> String {
    repo().join(path).display().to_string()
}

/// The reference's first example, unchanged (it names no namespace: applied with `-n`).
pub(crate) const TEST_SECRET: &str = "apiVersion: v1
kind: Secret
metadata:
  name: test-secret
data: {}
";

/// The reference's ResourceSyncRule, unchanged (its `name` and `namespace` sit next to
/// `objectKey`, not under it).
pub(crate) const TEST_RULE: &str = "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1
kind: ResourceSyncRule
metadata:
  name: test-secret-sink
spec:
  groupVersionKind:
    kind: Secret
    version: v1
  rules:
  - match:
    - objectKey:
      name: test-secret
      namespace: cluster-registry
";

/// The same rule with the reference's `clusterFeatureMatch` and `resource-sync-disabled` steps.
const TEST_RULE_FEATURE: &str = "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1
kind: ResourceSyncRule
metadata:
  name: test-secret-sink
  annotations:
    cluster-registry.k8s.cisco.com/resource-sync-disabled: \"true\"
spec:
  groupVersionKind:
    kind: Secret
    version: v1
  clusterFeatureMatch:
  - featureName: test-secret-feature
  rules:
  - match:
    - objectKey:
      name: test-secret
      namespace: cluster-registry
";

/// The reference's ClusterFeature, unchanged.
pub(crate) const TEST_FEATURE: &str = "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1
kind: ClusterFeature
metadata:
  name: test-secret-source
spec:
  featureName: test-secret-feature
";

/// ConfigMaps labelled `sync: "yes"` in namespace team-a, marked on the way.
const CONFIGMAP_RULE: &str = "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1
kind: ResourceSyncRule
metadata:
  name: team-a-settings
spec:
  groupVersionKind: {version: v1, kind: ConfigMap}
  rules:
  - match:
    - namespaces: [team-a]
      labels:
      - matchLabels: {sync: \"yes\"}
    mutations:
      labels:
        add: {copied: \"yes\"}
";

/// How a user lets the group read and write ConfigMaps: the two aggregated ClusterRoles.
const CONFIGMAP_RBAC: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: sync-configmaps-read
  labels: {cluster-registry.k8s.cisco.com/reader-aggregated: \"true\"}
rules:
- apiGroups: [\"\"]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: sync-configmaps-write
  labels: {cluster-registry.k8s.cisco.com/controller-aggregated: \"true\"}
rules:
- apiGroups: [\"\"]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, update, delete]
";

pub(crate) fn cluster_yaml(name: &str, id: &str) -> String {
    format!(
        "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}}}\n\
         spec:\n  clusterID: {id}\n  authInfo:\n    secretRef: {{name: {name}, namespace: {REGISTRY_NS}}}\n"
    )
}

pub(crate) fn peer_secret_yaml(name: &str, kubeconfig: &str) -> String {
    let indented: String = kubeconfig.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {REGISTRY_NS}}}\n\
         type: k8s.cisco.com/cluster-registry-secret\nstringData:\n  kubeconfig: |\n{indented}"
    )
}

/// Polls `check` every 100 ms until it gives `Some`; panics with `what` after `timeout`.
pub(crate) async fn wait_for<T, F: Future<Output = Option<T>>>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> F,
) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(started.elapsed() < timeout, "{what}: not after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The cluster-registry objects of `kind` on `cluster`.
pub(crate) fn registry_api(cluster: &Cluster, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "clusterregistry.k8s.cisco.com",
        "v1alpha1",
        kind,
    ));
    Api::all_with(cluster.client.clone(), &resource)
}

pub(crate) fn clusters_api(cluster: &Cluster) -> Api<DynamicObject> {
    registry_api(cluster, "Cluster")
}

pub(crate) fn rules_api(cluster: &Cluster) -> Api<DynamicObject> {
    registry_api(cluster, "ResourceSyncRule")
}

/// `(state, type, ClustersSynced)` of Cluster `name` as `cluster` sees it.
pub(crate) async fn cluster_status(
    cluster: &Cluster,
    name: &str,
) -> Option<(String, String, String)> {
    let object = clusters_api(cluster).get_opt(name).await.ok()??;
    let status = object.data.get("status")?;
    let synced = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "ClustersSynced")?["status"]
        .as_str()?
        .to_string();
    Some((
        status["state"].as_str()?.to_string(),
        status["type"].as_str()?.to_string(),
        synced,
    ))
}

pub(crate) async fn wait_state(
    cluster: &Cluster,
    name: &str,
    state: &str,
    type_: &str,
    synced: &str,
) {
    let what = format!(
        "on {}: Cluster {name} {state} {type_} synced={synced}",
        cluster.name
    );
    wait_for(&what, Duration::from_secs(60), || async {
        cluster_status(cluster, name)
            .await
            .filter(|(s, t, y)| s == state && t == type_ && y == synced)
    })
    .await;
}

pub(crate) fn secrets(cluster: &Cluster) -> Api<Secret> {
    Api::namespaced(cluster.client.clone(), REGISTRY_NS)
}

fn configmaps(cluster: &Cluster) -> Api<ConfigMap> {
    Api::namespaced(cluster.client.clone(), "team-a")
}

pub(crate) async fn wait_secret(cluster: &Cluster, name: &str, owner: Option<&str>) -> Secret {
    let what = format!("on {}: Secret {name} owned by {owner:?}", cluster.name);
    wait_for(&what, Duration::from_secs(60), || async {
        secrets(cluster)
            .get_opt(name)
            .await
            .ok()?
            .filter(|s| s.annotations().get(OWNER).map(String::as_str) == owner)
    })
    .await
}

pub(crate) async fn wait_gone(cluster: &Cluster, name: &str) {
    let what = format!("on {}: Secret {name} deleted", cluster.name);
    wait_for(&what, Duration::from_secs(60), || async {
        matches!(secrets(cluster).get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

fn data(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

/// One member cluster, as its installation leaves it and with its agent running.
pub(crate) struct Member {
    pub _aggregator: Process,
    pub agent: Agent,
    /// Its cluster ID (kube-system UID).
    pub id: String,
    /// A kubeconfig that reads it (the reader ServiceAccount of our manifests).
    pub reader: String,
}

/// Installs one member: role aggregation, CRDs, our manifests, read and write access to
/// ConfigMaps, its own Cluster and its own reader Secret, then its agent.
pub(crate) async fn install_member(binaries: &Binaries, cluster: &Cluster) -> Member {
    install_member_with(binaries, cluster, &["--secret-replication=false"]).await
}

/// [`install_member`], its agent started with `agent_args` (beyond the log filter).
pub(crate) async fn install_member_with(
    binaries: &Binaries,
    cluster: &Cluster,
    agent_args: &[&str],
) -> Member {
    let prepared = prepare_member(binaries, cluster).await;
    prepared.start(start_agent_with(cluster, "xcc-agent.log", agent_args).await)
}

/// A member installed, its agent not started yet.
pub(crate) struct Prepared {
    aggregator: Process,
    id: String,
    reader: String,
}

impl Prepared {
    pub(crate) fn start(self, agent: Agent) -> Member {
        Member {
            _aggregator: self.aggregator,
            agent,
            id: self.id,
            reader: self.reader,
        }
    }
}

/// [`install_member_with`] up to its agent.
pub(crate) async fn prepare_member(binaries: &Binaries, cluster: &Cluster) -> Prepared {
    let aggregator = aggregation::start(binaries, cluster).unwrap();
    cluster
        .install_crds(&repo().join("manifests/crds"))
        .await
        .unwrap();
    for file in [
        "manifests/agent/agent.yaml",
        "manifests/agent/cluster-registry.yaml",
        "manifests/agent/mcs.yaml",
    ] {
        cluster
            .kubectl(&["apply", "-f", &manifest(file)])
            .await
            .unwrap();
    }
    cluster.apply_yaml(CONFIGMAP_RBAC).await.unwrap();
    for ns in [REGISTRY_NS, "team-a"] {
        cluster.kubectl(&["create", "namespace", ns]).await.unwrap();
    }
    let id = cluster.kube_system_uid().await.unwrap();
    let reader = cluster
        .mint_kubeconfig("xcc-dns", "xcc-cluster-reader")
        .await
        .unwrap();
    let reader = cluster.kubeconfig_text(&reader.path).unwrap();
    cluster
        .apply_yaml(&cluster_yaml(&cluster.name, &id))
        .await
        .unwrap();
    cluster
        .apply_yaml(&peer_secret_yaml(&cluster.name, &reader))
        .await
        .unwrap();
    Prepared {
        aggregator,
        id,
        reader,
    }
}

/// Starts `cluster`'s agent (resource sync only) under our manifests' ServiceAccount, logging to
/// `log` in the cluster's directory, and waits until it is ready.
pub(crate) async fn start_agent(cluster: &Cluster, log: &str) -> Agent {
    start_agent_with(cluster, log, &["--secret-replication=false"]).await
}

/// Starts `cluster`'s agent with `extra` arguments beyond the log filter.
pub(crate) async fn start_agent_with(cluster: &Cluster, log: &str, extra: &[&str]) -> Agent {
    let kubeconfig = cluster
        .mint_kubeconfig("xcc-dns", "xcc-agent")
        .await
        .unwrap();
    let mut args = vec!["--log=info,xcc_agent=debug"];
    args.extend_from_slice(extra);
    let mut agent = Agent::start(&kubeconfig.path, &cluster.dir().join(log), &args).unwrap();
    agent.wait_ready(Duration::from_secs(30)).await.unwrap();
    agent
}

/// Every member installed, and every Cluster and peer Secret applied by hand on every cluster.
pub(crate) async fn group(binaries: &Binaries, bed: &Testbed) -> Vec<Member> {
    group_with(binaries, bed, &["--secret-replication=false"]).await
}

/// [`group`], every agent started with `agent_args` (beyond the log filter).
pub(crate) async fn group_with(
    binaries: &Binaries,
    bed: &Testbed,
    agent_args: &[&str],
) -> Vec<Member> {
    let mut members = Vec::new();
    for cluster in &bed.clusters {
        members.push(install_member_with(binaries, cluster, agent_args).await);
    }
    for (i, cluster) in bed.clusters.iter().enumerate() {
        for (j, peer) in bed.clusters.iter().enumerate() {
            if i != j {
                apply_racing_sync(cluster, &cluster_yaml(&peer.name, &members[j].id)).await;
                apply_racing_sync(cluster, &peer_secret_yaml(&peer.name, &members[j].reader)).await;
            }
        }
    }
    members
}

/// `kubectl apply` of an object the running agents may copy in at the same moment (group sync):
/// apply's create then meets AlreadyExists, and a second apply patches what is there.
async fn apply_racing_sync(cluster: &Cluster, yaml: &str) {
    for attempt in 1.. {
        match cluster.apply_yaml(yaml).await {
            Ok(_) => return,
            Err(error) if attempt < 3 && error.to_string().contains("AlreadyExists") => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("{error:#}"),
        }
    }
}

/// resourceVersions of everything the agents write: copies and Cluster statuses.
async fn versions(bed: &Testbed) -> Vec<String> {
    let mut out = Vec::new();
    for cluster in &bed.clusters {
        for s in secrets(cluster).list(&Default::default()).await.unwrap() {
            out.push(format!(
                "{} secret {} {:?}",
                cluster.name,
                s.name_any(),
                s.resource_version()
            ));
        }
        for c in configmaps(cluster).list(&Default::default()).await.unwrap() {
            out.push(format!(
                "{} cm {} {:?}",
                cluster.name,
                c.name_any(),
                c.resource_version()
            ));
        }
        for c in clusters_api(cluster)
            .list(&Default::default())
            .await
            .unwrap()
        {
            out.push(format!(
                "{} cluster {} {:?}",
                cluster.name,
                c.name_any(),
                c.resource_version()
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clusters_sync_by_rules_and_never_lose_or_overwrite() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &NAMES).await.unwrap();
    let running = group(&binaries, &bed).await;
    let [first, second, third] = [0, 1, 2].map(|i| &bed.clusters[i]);
    let third_id = third.kube_system_uid().await.unwrap();
    let first_id = first.kube_system_uid().await.unwrap();

    // Every cluster sees itself as Local and the others as reachable peers.
    for cluster in &bed.clusters {
        for name in NAMES {
            let (type_, synced) = if name == cluster.name {
                ("Local", "True")
            } else {
                ("Peer", "True")
            };
            wait_state(cluster, name, "Ready", type_, synced).await;
        }
    }

    // Sync everywhere: the reference's Secret on the third cluster, its rule everywhere.
    apply_namespaced(third, TEST_SECRET).await;
    for cluster in &bed.clusters {
        cluster.apply_yaml(TEST_RULE).await.unwrap();
    }
    for cluster in [first, second] {
        let copy = wait_secret(cluster, "test-secret", Some(&third_id)).await;
        assert_eq!(copy.labels().get(OWNER), Some(&third_id), "owner label");
        assert_eq!(copy.type_.as_deref(), Some("Opaque"));
    }
    let source = secrets(third).get("test-secret").await.unwrap();
    assert!(
        source.annotations().get(OWNER).is_none(),
        "the source is not copied back"
    );

    // Locally created objects always win; the third cluster copies the first's (by name order).
    for (cluster, value) in [(second, "second"), (first, "first")] {
        cluster
            .apply_yaml(&format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: team-a, labels: {{sync: \"yes\"}}}}\ndata: {{owner: {value}}}\n"
            ))
            .await
            .unwrap();
    }
    for cluster in &bed.clusters {
        cluster.apply_yaml(CONFIGMAP_RULE).await.unwrap();
    }
    let copy = wait_for(
        "on third: ConfigMap settings from first",
        Duration::from_secs(60),
        || async {
            configmaps(third)
                .get_opt("settings")
                .await
                .ok()?
                .filter(|c| c.annotations().get(OWNER) == Some(&first_id))
        },
    )
    .await;
    assert_eq!(data(&copy)["owner"], "first");
    assert_eq!(copy.labels().get("copied").map(String::as_str), Some("yes"));

    // Drift of a copy is reverted: a changed value and an added key. Twice: the second time,
    // with everything before settled, it shows convergence: each of the two agents handled the
    // echo of its revert and wrote what the revert takes (the ConfigMap's changed value: one
    // apply; the Secret's added key, kubectl's field: an apply and a replace), the second
    // nothing (a copy that kept changing would write again here).
    for round in 0..2 {
        let mut marks = Vec::new();
        for member in &running {
            marks.push(member.agent.mark("resource-sync").await.unwrap());
        }
        third
            .kubectl(&[
                "-n",
                "team-a",
                "patch",
                "configmap",
                "settings",
                "--type=merge",
                "-p",
                r#"{"data":{"owner":"edited"}}"#,
            ])
            .await
            .unwrap();
        first
            .kubectl(&[
                "-n",
                REGISTRY_NS,
                "patch",
                "secret",
                "test-secret",
                "--type=merge",
                "-p",
                r#"{"data":{"extra":"eA=="}}"#,
            ])
            .await
            .unwrap();
        wait_for(
            "on third: ConfigMap settings reverted",
            Duration::from_secs(30),
            || async {
                let cm = configmaps(third).get("settings").await.ok()?;
                (data(&cm).get("owner").map(String::as_str) == Some("first")).then_some(())
            },
        )
        .await;
        wait_for(
            "on first: test-secret reverted",
            Duration::from_secs(30),
            || async {
                let s = secrets(first).get("test-secret").await.ok()?;
                s.data.as_ref().is_none_or(|d| d.is_empty()).then_some(())
            },
        )
        .await;
        running[0]
            .agent
            .handled(("local", "Secret"), &marks[0])
            .await
            .unwrap();
        running[2]
            .agent
            .handled(("local", "ConfigMap"), &marks[2])
            .await
            .unwrap();
        if round == 1 {
            let before = versions(&bed).await;
            let mut writes = Vec::new();
            for (member, mark) in running.iter().zip(&marks) {
                writes.push(member.agent.writes_since(mark).await.unwrap());
            }
            assert_eq!(
                writes,
                [2.0, 0.0, 1.0],
                "objects written by each agent for the two reverts"
            );
            assert_eq!(versions(&bed).await, before, "writes after convergence");
        }
    }
    for (cluster, value) in [(first, "first"), (second, "second")] {
        let cm = configmaps(cluster).get("settings").await.unwrap();
        assert_eq!(data(&cm)["owner"], value, "a local object was overwritten");
        assert!(cm.annotations().get(OWNER).is_none());
    }

    // Deleting the source deletes the copies.
    secrets(third)
        .delete("test-secret", &DeleteParams::default())
        .await
        .unwrap();
    for cluster in [first, second] {
        wait_gone(cluster, "test-secret").await;
    }

    // An unreachable cluster deletes nothing, shows Failed, and converges when back.
    apply_namespaced(third, TEST_SECRET).await;
    for cluster in [first, second] {
        wait_secret(cluster, "test-secret", Some(&third_id)).await;
    }
    third.stop();
    for cluster in [first, second] {
        wait_state(cluster, "third", "Failed", "Peer", "False").await;
        wait_state(cluster, cluster.name.as_str(), "Ready", "Local", "False").await;
    }
    let message = clusters_api(first).get("third").await.unwrap().data["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("cannot reach the API server"), "{message}");
    // Both agents wrote that the third is Failed (above): they saw it go, and nothing may have
    // been deleted.
    for cluster in [first, second] {
        assert!(
            secrets(cluster)
                .get_opt("test-secret")
                .await
                .unwrap()
                .is_some(),
            "deleted on {}",
            cluster.name
        );
        assert!(
            configmaps(cluster)
                .get_opt("settings")
                .await
                .unwrap()
                .is_some()
        );
    }
    third.restart().await.unwrap();
    for cluster in [first, second] {
        wait_state(cluster, "third", "Ready", "Peer", "True").await;
    }
    secrets(third)
        .delete("test-secret", &DeleteParams::default())
        .await
        .unwrap();
    for cluster in [first, second] {
        wait_gone(cluster, "test-secret").await;
    }

    // Sync from a set of clusters: the reference's clusterFeatureMatch and ClusterFeature.
    apply_namespaced(third, TEST_SECRET).await;
    wait_secret(first, "test-secret", Some(&third_id)).await;
    let since = SystemTime::now();
    first.apply_yaml(TEST_RULE_FEATURE).await.unwrap();
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
    third.apply_yaml(TEST_FEATURE).await.unwrap();
    wait_secret(first, "test-secret", Some(&third_id)).await;
}

/// `kubectl apply -n cluster-registry` of a manifest without a namespace.
pub(crate) async fn apply_namespaced(cluster: &Cluster, yaml: &str) {
    let file = cluster.dir().join("namespaced.yaml");
    std::fs::write(&file, yaml).unwrap();
    cluster
        .kubectl(&[
            "apply",
            "-n",
            REGISTRY_NS,
            "-f",
            &file.display().to_string(),
        ])
        .await
        .unwrap();
}

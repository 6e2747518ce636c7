//! plumber end to end: three real API servers, the agent on the first (the primary) under our
//! manifests' ServiceAccount (agent.yaml + plumber.yaml), the kubeconfig Secret as `plumberctl`
//! writes it (contexts named as in the reference), and the reference's `replicator-sample`
//! applied unchanged from manifests/examples.

use std::time::{Duration, Instant};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace, Secret, Service},
    events::v1::Event,
    networking::v1::Ingress,
};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use xcc_e2e::{Blackhole, Cluster, Testbed, require_testbed, xcc::Agent};

use crate::resource_sync::{manifest, repo, start_agent_with, wait_for};

const GROUP: &str = "plumber.jnytnai0613.github.io";
const NS: &str = "test-ns";
const SAMPLE: &str = "replicator-sample";
/// The reference's detector names: `<cluster>.<user>` of each context.
const PRIMARY: &str = "kubernetes.kubernetes-admin";
const SECOND: &str = "v1262-cluster.kubernetes-admin2";
const THIRD: &str = "v1252-cluster.kubernetes-admin3";

fn kind(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1", kind))
}

fn replicators(cluster: &Cluster) -> Api<DynamicObject> {
    Api::all_with(cluster.client.clone(), &kind("Replicator"))
}

fn detectors(cluster: &Cluster) -> Api<DynamicObject> {
    Api::namespaced_with(
        cluster.client.clone(),
        "plumber-system",
        &kind("ClusterDetector"),
    )
}

/// One entry of `contexts`/`clusters`/`users` for `cluster` under the names given, taken from
/// its admin kubeconfig (token and CA inline).
fn entries(cluster: &Cluster, context: &str, name: &str, user: &str) -> (Value, Value, Value) {
    let text = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
    let admin: Value = xcc_kube::yaml::from_str(&text).unwrap();
    (
        json!({"name": context, "context": {"cluster": name, "user": user}}),
        json!({"name": name, "cluster": admin["clusters"][0]["cluster"]}),
        json!({"name": user, "user": admin["users"][0]["user"]}),
    )
}

/// The kubeconfig Secret `plumber-system/kubeconfig` (key `config`) with the reference's three
/// contexts, where xcc 0.1 kept it: the agent still reads it for one release (plumberctl's own
/// location is tested by
/// `plumberctls_files_and_secret_register_clusters_and_the_originals_objects_are_adopted`).
fn kubeconfig_secret(primary: &Cluster, second: &Cluster, third: &Cluster) -> String {
    secret_of(&[
        entries(primary, "primary", "kubernetes", "kubernetes-admin"),
        entries(second, "secondary1", "v1262-cluster", "kubernetes-admin2"),
        entries(third, "secondary2", "v1252-cluster", "kubernetes-admin3"),
    ])
}

/// The Secret holding a kubeconfig of `all` (context, cluster, user) entries.
fn secret_of(all: &[(Value, Value, Value)]) -> String {
    let config = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "primary",
        "contexts": all.iter().map(|e| e.0.clone()).collect::<Vec<_>>(),
        "clusters": all.iter().map(|e| e.1.clone()).collect::<Vec<_>>(),
        "users": all.iter().map(|e| e.2.clone()).collect::<Vec<_>>(),
    });
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "kubeconfig", "namespace": "plumber-system"},
        "stringData": {"config": xcc_kube::yaml::to_string(&config).unwrap()},
    });
    xcc_kube::yaml::to_string(&secret).unwrap()
}

struct Bed {
    bed: Testbed,
    _agent: Agent,
}

impl Bed {
    fn cluster(&self, i: usize) -> &Cluster {
        &self.bed.clusters[i]
    }
}

/// Three clusters; CRDs, agent and plumber RBAC on the first; the kubeconfig Secret; the agent
/// (plumber only) started; every detector Running.
async fn setup(binaries: &xcc_e2e::Binaries) -> Bed {
    let bed = Testbed::start_named(binaries, &["primary", "second", "third"])
        .await
        .unwrap();
    let [primary, second, third] = [0, 1, 2].map(|i| &bed.clusters[i]);
    primary
        .install_crds(&repo().join("manifests/crds"))
        .await
        .unwrap();
    for file in ["manifests/agent/agent.yaml", "manifests/agent/plumber.yaml"] {
        primary
            .kubectl(&["apply", "-f", &manifest(file)])
            .await
            .unwrap();
    }
    primary
        .apply_yaml(&kubeconfig_secret(primary, second, third))
        .await
        .unwrap();
    let agent = start_agent_with(
        primary,
        "xcc-agent.log",
        &["--secret-replication=false", "--resource-sync=false"],
    )
    .await;
    for (name, role) in [
        (PRIMARY, "primary"),
        (SECOND, "secondary"),
        (THIRD, "secondary"),
    ] {
        wait_for(
            &format!("ClusterDetector {name} {role} Running"),
            Duration::from_secs(30),
            || async {
                let d = detectors(primary).get_opt(name).await.ok()??;
                (d.labels().get("app.kubernetes.io/role").map(String::as_str) == Some(role)
                    && d.data["status"]["clusterstatus"] == "RUNNING")
                    .then_some(())
            },
        )
        .await;
    }
    Bed { bed, _agent: agent }
}

/// The Replicator's status once it observed its generation and `check` holds.
async fn wait_status(
    cluster: &Cluster,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&Value) -> bool,
) -> (Value, Duration) {
    let started = Instant::now();
    let status = wait_for(what, timeout, || async {
        let r = replicators(cluster).get_opt(name).await.ok()??;
        let status = r.data.get("status")?.clone();
        (status["observedGeneration"].as_i64() == r.metadata.generation && check(&status))
            .then_some(status)
    })
    .await;
    (status, started.elapsed())
}

fn entry<'a>(status: &'a Value, cluster: &str, kind: &str, name: &str) -> Option<&'a str> {
    status["applied"].as_array()?.iter().find_map(|e| {
        (e["cluster"] == cluster && e["kind"] == kind && e["name"] == name)
            .then(|| e["applyStatus"].as_str())
            .flatten()
    })
}

fn ready(status: &Value) -> Option<(&str, &str)> {
    status["conditions"].as_array()?.iter().find_map(|c| {
        (c["type"] == "Ready").then(|| {
            (
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or(""),
            )
        })
    })
}

const OBJECTS: [(&str, &str); 7] = [
    ("Namespace", NS),
    ("ConfigMap", "nginx"),
    ("Deployment", "nginx"),
    ("Service", "nginx"),
    ("Secret", "ca-secret"),
    ("Secret", "cli-secret"),
    ("Ingress", "nginx"),
];

async fn sample_is_on(cluster: &Cluster) {
    let c = cluster.client.clone();
    Api::<Namespace>::all(c.clone()).get(NS).await.unwrap();
    let cm = Api::<ConfigMap>::namespaced(c.clone(), NS)
        .get("nginx")
        .await
        .unwrap();
    assert!(cm.data.unwrap()["default.conf"].contains("listen 80 default_server"));
    let d = Api::<Deployment>::namespaced(c.clone(), NS)
        .get("nginx")
        .await
        .unwrap();
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(3));
    // The original's selector and pod label.
    assert_eq!(
        spec.selector.match_labels.unwrap()["apps"],
        "nginx",
        "selector filled in on {}",
        cluster.name
    );
    assert_eq!(
        spec.template.metadata.unwrap().labels.unwrap()["apps"],
        "nginx"
    );
    let pod = spec.template.spec.unwrap();
    assert_eq!(
        pod.init_containers.unwrap()[0].image.as_deref(),
        Some("alpine")
    );
    assert_eq!(pod.containers[0].image.as_deref(), Some("nginx:latest"));
    let s = Api::<Service>::namespaced(c.clone(), NS)
        .get("nginx")
        .await
        .unwrap();
    assert_eq!(s.spec.unwrap().selector.unwrap()["apps"], "nginx");
    let i = Api::<Ingress>::namespaced(c.clone(), NS)
        .get("nginx")
        .await
        .unwrap();
    assert_eq!(
        i.spec.as_ref().unwrap().ingress_class_name.as_deref(),
        Some("nginx"),
        "the original's class when the spec names none"
    );
    let tls = i.spec.clone().unwrap().tls.unwrap();
    assert_eq!(
        tls[0].hosts.as_deref(),
        Some(&["nginx.example.com".to_string()][..])
    );
    assert_eq!(tls[0].secret_name.as_deref(), Some("ca-secret"));
    let annotations = i.annotations();
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/auth-tls-secret"],
        format!("{NS}/ca-secret")
    );
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/auth-tls-verify-client"],
        "on"
    );
    let secrets = Api::<Secret>::namespaced(c, NS);
    assert_eq!(
        secrets.get("ca-secret").await.unwrap().data.unwrap().len(),
        3
    );
    assert_eq!(
        secrets.get("cli-secret").await.unwrap().data.unwrap().len(),
        2
    );
}

/// `openssl verify` of the server certificate for the host and of the client certificate, both
/// against the CA of `ca-secret`.
async fn certificates_verify(cluster: &Cluster) {
    let secrets = Api::<Secret>::namespaced(cluster.client.clone(), NS);
    let ca = secrets.get("ca-secret").await.unwrap().data.unwrap();
    let cli = secrets.get("cli-secret").await.unwrap().data.unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (file, bytes) in [
        ("ca.crt", &ca["ca.crt"].0),
        ("tls.crt", &ca["tls.crt"].0),
        ("client.crt", &cli["client.crt"].0),
    ] {
        std::fs::write(dir.path().join(file), bytes).unwrap();
    }
    let verify = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .arg("verify")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("openssl runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = verify(&[
        "-CAfile",
        "ca.crt",
        "-purpose",
        "sslserver",
        "-verify_hostname",
        "nginx.example.com",
        "tls.crt",
    ]);
    assert!(ok, "server certificate: {text}");
    let (ok, text) = verify(&["-CAfile", "ca.crt", "-purpose", "sslclient", "client.crt"]);
    assert!(ok, "client certificate: {text}");
    // And the server certificate is not for another host.
    let (ok, _) = verify(&[
        "-CAfile",
        "ca.crt",
        "-verify_hostname",
        "other.example.com",
        "tls.crt",
    ]);
    assert!(
        !ok,
        "the server certificate must not verify for another host"
    );
}

/// The 403 of a call that plumber's RBAC must not allow.
fn forbidden<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) {
    match result {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{what}: {s:?}"),
        other => panic!("the agent may {what}: {other:?}"),
    }
}

/// With plumber.yaml, the agent's ServiceAccount still may not list namespaces or nodes, grant
/// itself roles, delete CRDs, nor write ClusterDetectors outside plumber-system.
async fn plumber_rbac_stays_closed(primary: &Cluster) {
    use k8s_openapi::api::{
        core::v1::Node,
        rbac::v1::{ClusterRole, ClusterRoleBinding, RoleRef},
    };
    let agent = primary
        .mint_kubeconfig("xcc-dns", "xcc-agent")
        .await
        .unwrap()
        .client;
    forbidden(
        "list namespaces",
        Api::<Namespace>::all(agent.clone())
            .list(&ListParams::default())
            .await,
    );
    forbidden(
        "list nodes",
        Api::<Node>::all(agent.clone())
            .list(&ListParams::default())
            .await,
    );
    let mut role = ClusterRole::default();
    role.metadata.name = Some("escalate".into());
    forbidden(
        "create a ClusterRole",
        Api::<ClusterRole>::all(agent.clone())
            .create(&Default::default(), &role)
            .await,
    );
    let binding = ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some("escalate".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "cluster-admin".into(),
        },
        subjects: None,
    };
    forbidden(
        "bind cluster-admin",
        Api::<ClusterRoleBinding>::all(agent.clone())
            .create(&Default::default(), &binding)
            .await,
    );
    let crds = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
    ));
    forbidden(
        "delete a CRD",
        Api::<DynamicObject>::all_with(agent.clone(), &crds)
            .delete(
                "replicators.plumber.jnytnai0613.github.io",
                &Default::default(),
            )
            .await,
    );
    let mut detector = DynamicObject::new("elsewhere", &kind("ClusterDetector"));
    detector.data = json!({"spec": {"context": "a", "cluster": "b", "user": "c"}});
    forbidden(
        "create a ClusterDetector in namespace default",
        Api::<DynamicObject>::namespaced_with(agent, "default", &kind("ClusterDetector"))
            .create(&Default::default(), &detector)
            .await,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plumber_replicates_the_sample_reverts_drift_and_survives_a_dead_target() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = setup(&binaries).await;
    let [primary, second, third] = [0, 1, 2].map(|i| bed.cluster(i));
    plumber_rbac_stays_closed(primary).await;

    // The reference's sample, unchanged.
    let created = Instant::now();
    primary
        .kubectl(&[
            "apply",
            "-f",
            &manifest("manifests/examples/replicator-sample.yaml"),
        ])
        .await
        .unwrap();
    let (status, _) = wait_status(
        primary,
        SAMPLE,
        "the sample synced everywhere",
        Duration::from_secs(30),
        |s| s["synced"] == "synced",
    )
    .await;
    eprintln!(
        "plumber: sample synced to 3 clusters in {:?}",
        created.elapsed()
    );
    assert_eq!(ready(&status), Some(("True", "Synced")), "{status}");
    for cluster in [PRIMARY, SECOND, THIRD] {
        for (kind, name) in OBJECTS {
            assert_eq!(
                entry(&status, cluster, kind, name),
                Some("applied"),
                "{cluster} {kind} {name}: {status}"
            );
        }
    }
    assert_eq!(status["applied"].as_array().unwrap().len(), 21, "{status}");
    for cluster in [primary, second, third] {
        sample_is_on(cluster).await;
    }
    certificates_verify(third).await;
    // Every cluster got the same certificates.
    let ca = |c: &Cluster| {
        let c = c.client.clone();
        async move {
            Api::<Secret>::namespaced(c, NS)
                .get("ca-secret")
                .await
                .unwrap()
                .data
                .unwrap()["ca.crt"]
                .clone()
        }
    };
    assert_eq!(ca(primary).await, ca(second).await);

    // Drift on a target: an edited Deployment and a deleted ConfigMap come back from the watch.
    let deployments = Api::<Deployment>::namespaced(second.client.clone(), NS);
    let edited = Instant::now();
    second
        .kubectl(&["-n", NS, "scale", "deployment", "nginx", "--replicas=1"])
        .await
        .unwrap();
    wait_for(
        "the edited Deployment restored",
        Duration::from_secs(5),
        || async {
            let d = deployments.get("nginx").await.ok()?;
            (d.spec?.replicas == Some(3)).then_some(())
        },
    )
    .await;
    eprintln!(
        "plumber: drift (replicas edited on a target) restored in {:?}",
        edited.elapsed()
    );
    let config_maps = Api::<ConfigMap>::namespaced(third.client.clone(), NS);
    third
        .kubectl(&["-n", NS, "delete", "configmap", "nginx"])
        .await
        .unwrap();
    wait_for(
        "the deleted ConfigMap restored",
        Duration::from_secs(5),
        || async { config_maps.get_opt("nginx").await.ok()?.map(|_| ()) },
    )
    .await;

    // Someone else's object on a target is not overwritten, nor their namespace deleted.
    second
        .kubectl(&["create", "namespace", "team-b"])
        .await
        .unwrap();
    second
        .kubectl(&[
            "-n",
            "team-b",
            "create",
            "configmap",
            "taken",
            "--from-literal=owner=them",
        ])
        .await
        .unwrap();
    primary
        .apply_yaml(&format!(
            "apiVersion: {GROUP}/v1\nkind: Replicator\nmetadata: {{name: other}}\n\
             spec: {{targetCluster: [secondary1], replicationNamespace: team-b, \
             configMapName: taken, configMapData: {{owner: us}}, \
             resources: [{{apiVersion: v1, kind: ConfigMap, metadata: {{name: extra}}, data: {{k: v}}}}]}}\n"
        ))
        .await
        .unwrap();
    let (status, _) = wait_status(
        primary,
        "other",
        "other: Conflict on the second cluster",
        Duration::from_secs(30),
        |s| entry(s, "secondary1", "ConfigMap", "taken") == Some("Conflict"),
    )
    .await;
    assert_eq!(ready(&status).map(|r| r.1), Some("Conflict"), "{status}");
    assert_eq!(
        entry(&status, "secondary1", "Namespace", "team-b"),
        Some("existing")
    );
    assert_eq!(
        entry(&status, PRIMARY, "ConfigMap", "taken"),
        Some("applied")
    );
    // resources[]: any manifest, put in the replication namespace on every cluster.
    assert_eq!(
        entry(&status, "secondary1", "ConfigMap", "extra"),
        Some("applied")
    );
    let extra = Api::<ConfigMap>::namespaced(second.client.clone(), "team-b");
    assert_eq!(extra.get("extra").await.unwrap().data.unwrap()["k"], "v");
    let theirs = Api::<ConfigMap>::namespaced(second.client.clone(), "team-b");
    assert_eq!(
        theirs.get("taken").await.unwrap().data.unwrap()["owner"],
        "them"
    );
    replicators(primary)
        .delete("other", &Default::default())
        .await
        .unwrap();
    wait_for("other deleted", Duration::from_secs(30), || async {
        replicators(primary)
            .get_opt("other")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        theirs.get("taken").await.unwrap().data.unwrap()["owner"],
        "them"
    );
    Api::<Namespace>::all(second.client.clone())
        .get("team-b")
        .await
        .unwrap();
    let primary_cms = Api::<ConfigMap>::namespaced(primary.client.clone(), "team-b");
    assert!(
        primary_cms.get_opt("taken").await.unwrap().is_none(),
        "ours removed"
    );
    assert!(
        extra.get_opt("extra").await.unwrap().is_none(),
        "ours removed"
    );

    // A dead target: Unknown and Unreachable within 15 s; the other target still follows.
    let blackhole = Blackhole::start(third);
    let stopped = Instant::now();
    primary
        .kubectl(&[
            "patch",
            "replicator",
            SAMPLE,
            "--type=merge",
            "-p",
            r#"{"spec":{"configMapData":{"extra":"after the stop"}}}"#,
        ])
        .await
        .unwrap();
    let (status, _) = wait_status(
        primary,
        SAMPLE,
        "third Unreachable, second applied",
        Duration::from_secs(15),
        |s| {
            OBJECTS.iter().all(|(k, n)| {
                entry(s, THIRD, k, n) == Some("Unreachable")
                    && entry(s, SECOND, k, n) == Some("applied")
            })
        },
    )
    .await;
    eprintln!(
        "plumber: dead target Unreachable after {:?}",
        stopped.elapsed()
    );
    assert_eq!(status["synced"], "not synced");
    assert_eq!(ready(&status), Some(("False", "Unreachable")), "{status}");
    let second_cms = Api::<ConfigMap>::namespaced(second.client.clone(), NS);
    assert_eq!(
        second_cms.get("nginx").await.unwrap().data.unwrap()["extra"],
        "after the stop"
    );
    wait_for(
        "ClusterDetector of the dead target Unknown",
        Duration::from_secs(15).saturating_sub(stopped.elapsed()) + Duration::from_secs(1),
        || async {
            let d = detectors(primary).get_opt(THIRD).await.ok()??;
            (d.data["status"]["clusterstatus"] == "UNKNOWN"
                && d.data["status"]["reason"]
                    .as_str()
                    .is_some_and(|r| !r.is_empty()))
            .then_some(())
        },
    )
    .await;
    eprintln!(
        "plumber: dead target's detector Unknown after {:?}",
        stopped.elapsed()
    );

    // Deleting with a dead target finishes within 60 s and says what was left there.
    let deleting = Instant::now();
    replicators(primary)
        .delete(SAMPLE, &Default::default())
        .await
        .unwrap();
    wait_for("the Replicator gone", Duration::from_secs(60), || async {
        replicators(primary)
            .get_opt(SAMPLE)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    eprintln!(
        "plumber: deleted with a dead target in {:?}",
        deleting.elapsed()
    );
    let events = Api::<Event>::all(primary.client.clone());
    let note = wait_for("a LeftBehind Event", Duration::from_secs(10), || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("LeftBehind")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(SAMPLE)
            })?
            .note
    })
    .await;
    assert!(note.contains(THIRD), "{note}");
    for cluster in [primary, second] {
        let cms = Api::<ConfigMap>::namespaced(cluster.client.clone(), NS);
        assert!(
            cms.get_opt("nginx").await.unwrap().is_none(),
            "{}",
            cluster.name
        );
        let ns = Api::<Namespace>::all(cluster.client.clone())
            .get_opt(NS)
            .await
            .unwrap();
        // Ours: deleted (Terminating without a namespace controller on the test bed).
        assert!(
            ns.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
            "{}",
            cluster.name
        );
    }
    drop(blackhole);

    // The detectors follow the Secret: a context removed takes its detector with it; a context
    // whose credentials the trust rules refuse gets a detector saying which field.
    let mut hostile = entries(second, "hostile", "v1262-cluster", "exec-user");
    hostile.2 = json!({"name": "exec-user", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "touch", "args": ["/tmp/xcc-plumber-e2e-exec-ran"]}}});
    let mut remaining = vec![
        entries(primary, "primary", "kubernetes", "kubernetes-admin"),
        entries(second, "secondary1", "v1262-cluster", "kubernetes-admin2"),
    ];
    let edited = Instant::now();
    remaining.push((hostile.0, json!(null), hostile.2));
    let mut config: Value = xcc_kube::yaml::from_str(&secret_of(&remaining)).unwrap();
    // The hostile context reuses the second cluster's entry: no second cluster entry of that name.
    let text: Value =
        xcc_kube::yaml::from_str(config["stringData"]["config"].as_str().unwrap()).unwrap();
    let mut kubeconfig = text.clone();
    kubeconfig["clusters"] = json!(
        text["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| !c.is_null())
            .cloned()
            .collect::<Vec<_>>()
    );
    config["stringData"]["config"] = json!(xcc_kube::yaml::to_string(&kubeconfig).unwrap());
    primary
        .apply_yaml(&xcc_kube::yaml::to_string(&config).unwrap())
        .await
        .unwrap();
    wait_for(
        "the detector of the removed context gone",
        Duration::from_secs(15),
        || async {
            detectors(primary)
                .get_opt(THIRD)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    let reason = wait_for(
        "the hostile context's detector Unknown, naming exec",
        Duration::from_secs(15),
        || async {
            let d = detectors(primary)
                .get_opt("v1262-cluster.exec-user")
                .await
                .ok()??;
            (d.data["status"]["clusterstatus"] == "UNKNOWN")
                .then(|| d.data["status"]["reason"].as_str().map(str::to_string))
                .flatten()
        },
    )
    .await;
    assert!(reason.contains("exec"), "{reason}");
    assert!(
        !std::path::Path::new("/tmp/xcc-plumber-e2e-exec-ran").exists(),
        "nothing was run"
    );
    eprintln!(
        "plumber: detectors followed the Secret in {:?}",
        edited.elapsed()
    );
    let second_detector = detectors(primary).get(SECOND).await.unwrap();
    assert_eq!(second_detector.data["status"]["clusterstatus"], "RUNNING");

    // After the Secret changed (new clients), a Replicator still syncs and its drift is reverted.
    primary
        .apply_yaml(&format!(
            "apiVersion: {GROUP}/v1\nkind: Replicator\nmetadata: {{name: after-edit}}\n\
             spec: {{targetCluster: [secondary1], replicationNamespace: team-c, \
             configMapName: c, configMapData: {{a: '1'}}}}\n"
        ))
        .await
        .unwrap();
    wait_status(
        primary,
        "after-edit",
        "after-edit synced",
        Duration::from_secs(30),
        |s| s["synced"] == "synced",
    )
    .await;
    second
        .kubectl(&[
            "-n",
            "team-c",
            "patch",
            "configmap",
            "c",
            "-p",
            r#"{"data":{"a":"2"}}"#,
        ])
        .await
        .unwrap();
    let cms = Api::<ConfigMap>::namespaced(second.client.clone(), "team-c");
    wait_for(
        "the edited ConfigMap restored",
        Duration::from_secs(5),
        || async {
            let data = cms.get("c").await.ok()?.data?;
            (data["a"] == "1").then_some(())
        },
    )
    .await;
}

/// Benchmark (not in the default run): the sample with 2 targets from creation to synced
/// (bar < 2 s), then 100 Replicators (bar < 20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo test -p xcc-e2e --test e2e plumber -- --ignored --nocapture"]
async fn bench_plumber() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = setup(&binaries).await;
    let primary = bed.cluster(0);
    let created = Instant::now();
    primary
        .kubectl(&[
            "apply",
            "-f",
            &manifest("manifests/examples/replicator-sample.yaml"),
        ])
        .await
        .unwrap();
    let (_, _) = wait_status(
        primary,
        SAMPLE,
        "sample synced",
        Duration::from_secs(30),
        |s| s["synced"] == "synced",
    )
    .await;
    let one = created.elapsed();
    eprintln!(
        "bench plumber: sample (7 objects) to primary + 2 targets synced in {one:?} (bar 2 s)"
    );

    let sample: Value = xcc_kube::yaml::from_str(
        &std::fs::read_to_string(repo().join("manifests/examples/replicator-sample.yaml")).unwrap(),
    )
    .unwrap();
    let api = replicators(primary);
    let started = Instant::now();
    for i in 0..100 {
        let mut r = sample.clone();
        r["metadata"] = json!({"name": format!("bench-{i}")});
        r["spec"]["replicationNamespace"] = json!(format!("bench-{i}"));
        api.patch(
            &format!("bench-{i}"),
            &PatchParams::apply("bench"),
            &Patch::Apply(&r),
        )
        .await
        .unwrap();
    }
    let created_in = started.elapsed();
    wait_for(
        "100 Replicators synced",
        Duration::from_secs(120),
        || async {
            let list = api.list(&ListParams::default()).await.ok()?;
            let synced = list
                .items
                .iter()
                .filter(|r| {
                    r.name_any().starts_with("bench-") && r.data["status"]["synced"] == "synced"
                })
                .count();
            (synced == 100).then_some(())
        },
    )
    .await;
    let hundred = started.elapsed();
    eprintln!(
        "bench plumber: 100 Replicators (700 objects × 3 clusters) synced in {hundred:?} (bar 20 s; creating them took {created_in:?})"
    );
    assert!(one < Duration::from_secs(2), "sample: {one:?}");
    assert!(
        hundred < Duration::from_secs(20),
        "100 Replicators: {hundred:?}"
    );
}

/// The kubeconfig as the original writes it (Go's `clientcmd.Write`: keys sorted, `preferences:
/// {}`, an empty `current-context`): the original controller's own context `primary` (cluster
/// `kubernetes`, user `kubernetes-admin`, no credentials: in a pod it uses its ServiceAccount),
/// and `secondary1` as `plumberctl add` extracts it. plumberctl copies only client
/// certificates; the test bed authenticates by token, so the user holds the token in its place.
fn plumberctl_kubeconfig(primary: &Cluster, second: &Cluster) -> String {
    let cluster = |c: &Cluster| {
        let admin: Value =
            xcc_kube::yaml::from_str(&std::fs::read_to_string(&c.kubeconfig).unwrap()).unwrap();
        (
            admin["clusters"][0]["cluster"].clone(),
            admin["users"][0]["user"]["token"].clone(),
        )
    };
    let (primary_cluster, _) = cluster(primary);
    let (second_cluster, second_token) = cluster(second);
    let config = json!({
        "apiVersion": "v1",
        "clusters": [
            {"cluster": primary_cluster, "name": "kubernetes"},
            {"cluster": second_cluster, "name": "v1262-cluster"},
        ],
        "contexts": [
            {"context": {"cluster": "kubernetes", "user": "kubernetes-admin"}, "name": "primary"},
            {"context": {"cluster": "v1262-cluster", "user": "kubernetes-admin2"}, "name": "secondary1"},
        ],
        "current-context": "",
        "kind": "Config",
        "preferences": {},
        "users": [
            {"name": "kubernetes-admin", "user": {}},
            {"name": "kubernetes-admin2", "user": {"token": second_token}},
        ],
    });
    xcc_kube::yaml::to_string(&config).unwrap()
}

/// Applies `object` as the original controller does: server-side apply, field manager
/// `plumberctl`, forced.
async fn apply_as_original(cluster: &Cluster, object: Value) {
    let gvk = GroupVersionKind::try_from(&kube::api::TypeMeta {
        api_version: object["apiVersion"].as_str().unwrap().into(),
        kind: object["kind"].as_str().unwrap().into(),
    })
    .unwrap();
    let resource = ApiResource::from_gvk(&gvk);
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(cluster.client.clone(), ns, &resource),
        None => Api::all_with(cluster.client.clone(), &resource),
    };
    api.patch(
        &name,
        &PatchParams::apply("plumberctl").force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap();
}

/// The objects the original controller makes for `replicator` on one cluster (its
/// `applyConfigMap`, `applyDeployment`, `applyService`, `applyIngress`): selector and pod label
/// `apps: nginx`, Ingress class `nginx` and `rewrite-target`, and on the primary an owner
/// reference to the Replicator.
async fn make_as_original(cluster: &Cluster, replicator: &DynamicObject, primary: bool) {
    let spec = &replicator.data["spec"];
    Api::<Namespace>::all(cluster.client.clone())
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .unwrap();
    let metadata = |name: &str| {
        let mut m = json!({"name": name, "namespace": NS});
        if primary {
            m["ownerReferences"] = json!([{
                "apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "Replicator",
                "name": replicator.name_any(), "uid": replicator.uid().unwrap(),
                "blockOwnerDeletion": true, "controller": true,
            }]);
        }
        m
    };
    let labels = json!({"apps": "nginx"});
    apply_as_original(
        cluster,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata("nginx"),
               "data": spec["configMapData"]}),
    )
    .await;
    let mut template = spec["deploymentSpec"]["template"].clone();
    template["metadata"] = json!({ "labels": labels });
    apply_as_original(
        cluster,
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata("nginx"),
               "spec": {"selector": {"matchLabels": labels},
                        "replicas": spec["deploymentSpec"]["replicas"],
                        "strategy": spec["deploymentSpec"]["strategy"],
                        "template": template}}),
    )
    .await;
    let mut service = spec["serviceSpec"].clone();
    service["selector"] = labels.clone();
    apply_as_original(
        cluster,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata("nginx"), "spec": service}),
    )
    .await;
    let mut ingress = spec["ingressSpec"].clone();
    ingress["ingressClassName"] = json!("nginx");
    let mut meta = metadata("nginx");
    meta["annotations"] = json!({"nginx.ingress.kubernetes.io/rewrite-target": "/"});
    apply_as_original(
        cluster,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": ingress}),
    )
    .await;
}

/// What must not change when the agent takes a Deployment over: its UID (not recreated), its
/// pod template (no new ReplicaSet: the deployment controller names ReplicaSets by the hash of
/// the template, and starts new pods only for a new one), its selector, its replicas. (Its
/// generation does rise: the API server counts annotation changes, such as the origin
/// annotation, because they are copied to the existing ReplicaSet.)
async fn deployment_identity(cluster: &Cluster) -> (String, Value, Value, Value) {
    let d = Api::<Deployment>::namespaced(cluster.client.clone(), NS)
        .get("nginx")
        .await
        .unwrap();
    let spec = serde_json::to_value(d.spec.as_ref().unwrap()).unwrap();
    (
        d.uid().unwrap(),
        spec["template"].clone(),
        spec["selector"].clone(),
        spec["replicas"].clone(),
    )
}

/// Issue 25, plumber: users keep plumberctl and the original's objects. The Secret and
/// activation file that the original and plumberctl write register clusters (detectors
/// `RUNNING`, the original's names); `kubectl xcc plumber view` lists what plumberctl added and
/// `add` writes where plumberctl reads; status values and printer columns are the original's;
/// objects a running original made (created before the agent starts) are adopted: no
/// Conflict, not recreated, the Deployment's pod template and selector unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plumberctls_files_and_secret_register_clusters_and_the_originals_objects_are_adopted() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["primary", "second"])
        .await
        .unwrap();
    let [primary, second] = [0, 1].map(|i| &bed.clusters[i]);
    primary
        .install_crds(&repo().join("manifests/crds"))
        .await
        .unwrap();
    for file in ["manifests/agent/agent.yaml", "manifests/agent/plumber.yaml"] {
        primary
            .kubectl(&["apply", "-f", &manifest(file)])
            .await
            .unwrap();
    }
    // plumberctl's Secret, written as plumberctl writes it (server-side apply, its field
    // manager, Secret `config` of namespace `kubeconfig`, key `config`).
    apply_as_original(
        primary,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "config", "namespace": "kubeconfig"},
               "data": {"config": base64_of(&plumberctl_kubeconfig(primary, second))}}),
    )
    .await;

    // The sample as a running original left it: the Replicator, and its objects on both
    // clusters (TLS off: the original's certificates are not taken over).
    let mut sample: Value = xcc_kube::yaml::from_str(
        &std::fs::read_to_string(manifest("manifests/examples/replicator-sample.yaml")).unwrap(),
    )
    .unwrap();
    sample["spec"]["targetCluster"] = json!([SECOND]);
    sample["spec"]["ingressSecureEnabled"] = json!(false);
    let replicator = replicators(primary)
        .create(
            &Default::default(),
            &serde_json::from_value(sample).unwrap(),
        )
        .await
        .unwrap();
    make_as_original(primary, &replicator, true).await;
    make_as_original(second, &replicator, false).await;
    let before = [
        deployment_identity(primary).await,
        deployment_identity(second).await,
    ];
    let service_uid = Api::<Service>::namespaced(second.client.clone(), NS)
        .get("nginx")
        .await
        .unwrap()
        .uid();

    let _agent = start_agent_with(
        primary,
        "xcc-agent.log",
        &["--secret-replication=false", "--resource-sync=false"],
    )
    .await;

    // The detectors of plumberctl's Secret, with the original's names, roles and values.
    for (name, context, role) in [
        (PRIMARY, "primary", "primary"),
        (SECOND, "secondary1", "secondary"),
    ] {
        wait_for(
            &format!("ClusterDetector {name} ({context}) {role} RUNNING"),
            Duration::from_secs(30),
            || async {
                let d = detectors(primary).get_opt(name).await.ok()??;
                (d.labels().get("app.kubernetes.io/role").map(String::as_str) == Some(role)
                    && d.data["spec"]["context"] == context
                    && d.data["status"]["clusterstatus"] == "RUNNING")
                    .then_some(())
            },
        )
        .await;
    }

    // The agent processed the Replicator: every object applied on both clusters, the
    // primary's entries named after its context, synced as the original says it.
    let (status, _) = wait_status(
        primary,
        SAMPLE,
        "the original's objects adopted",
        Duration::from_secs(30),
        |s| s["synced"] == "synced",
    )
    .await;
    for cluster in [PRIMARY, SECOND] {
        for (kind, name) in [
            ("ConfigMap", "nginx"),
            ("Deployment", "nginx"),
            ("Service", "nginx"),
            ("Ingress", "nginx"),
        ] {
            assert_eq!(
                entry(&status, cluster, kind, name),
                Some("applied"),
                "{cluster} {kind}: {status}"
            );
        }
    }
    assert!(
        !status.to_string().contains("Conflict") && !status.to_string().contains("\"primary\""),
        "{status}"
    );
    // Adopted (they carry the agent's origin now), not recreated, and the Deployment's pod
    // template and selector are what the original left: no new ReplicaSet.
    let origin = format!("plumber/replicator/{SAMPLE}");
    for (cluster, before) in [primary, second].into_iter().zip(before) {
        let d = Api::<Deployment>::namespaced(cluster.client.clone(), NS)
            .get("nginx")
            .await
            .unwrap();
        assert_eq!(
            d.annotations()["xcc.test/origin"],
            origin,
            "{}",
            cluster.name
        );
        assert_eq!(
            deployment_identity(cluster).await,
            before,
            "Deployment on {}",
            cluster.name
        );
        let i = Api::<Ingress>::namespaced(cluster.client.clone(), NS)
            .get("nginx")
            .await
            .unwrap();
        assert_eq!(i.spec.unwrap().ingress_class_name.as_deref(), Some("nginx"));
    }
    let service = Api::<Service>::namespaced(second.client.clone(), NS)
        .get("nginx")
        .await
        .unwrap();
    assert_eq!(service.uid(), service_uid);
    assert_eq!(service.spec.unwrap().selector.unwrap()["apps"], "nginx");

    // The original's printer columns.
    let table = primary.kubectl(&["get", "replicators"]).await.unwrap();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SYNCED", "AGE"], "{table}");
    assert!(table.contains(" synced "), "{table}");
    let table = primary
        .kubectl(&["-n", "plumber-system", "get", "clusterdetectors"])
        .await
        .unwrap();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "CONTEXT", "CLUSTER", "USER", "CLUSTERSTATUS", "AGE"],
        "{table}"
    );
    assert!(table.contains("RUNNING"), "{table}");

    // plumberctl's activation file (~/.plumber/config.toml, as its docs show it) and the
    // user's kubeconfig: `kubectl xcc plumber view` lists what plumberctl added ...
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = home.path().join("config");
    let admin = |c: &Cluster| -> Value {
        xcc_kube::yaml::from_str(&std::fs::read_to_string(&c.kubeconfig).unwrap()).unwrap()
    };
    let (a, b) = (admin(primary), admin(second));
    std::fs::write(
        &kubeconfig,
        xcc_kube::yaml::to_string(&json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "primary",
            "clusters": [
                {"name": "kubernetes", "cluster": a["clusters"][0]["cluster"]},
                {"name": "v1252-cluster", "cluster": b["clusters"][0]["cluster"]},
            ],
            "users": [
                {"name": "kubernetes-admin", "user": a["users"][0]["user"]},
                {"name": "kubernetes-admin3", "user": b["users"][0]["user"]},
            ],
            "contexts": [
                {"name": "primary", "context": {"cluster": "kubernetes", "user": "kubernetes-admin"}},
                {"name": "secondary2", "context": {"cluster": "v1252-cluster", "user": "kubernetes-admin3"}},
            ],
        }))
        .unwrap(),
    )
    .unwrap();
    std::fs::create_dir_all(home.path().join(".plumber")).unwrap();
    std::fs::write(
        home.path().join(".plumber/config.toml"),
        format!("cluster = 'primary'\npath = '{}'\n", kubeconfig.display()),
    )
    .unwrap();
    let user = crate::cli::User {
        kubeconfig: kubeconfig.clone(),
        home: home.path().to_path_buf(),
    };
    let view = user.run(&["plumber", "view", "-o", "json"]).await;
    let view: Value = serde_json::from_str(view.ok()).unwrap();
    assert_eq!(
        view["contexts"],
        json!([
            {"context": "primary", "cluster": "kubernetes", "user": "kubernetes-admin"},
            {"context": "secondary1", "cluster": "v1262-cluster", "user": "kubernetes-admin2"},
        ])
    );
    // ... and what it adds lands where plumberctl reads: Secret kubeconfig/config, key config,
    // plumberctl's contexts kept as they were.
    user.run(&["plumber", "add", "-c", "secondary2"]).await.ok();
    let secret = Api::<Secret>::namespaced(primary.client.clone(), "kubeconfig")
        .get("config")
        .await
        .unwrap();
    let stored: Value = xcc_kube::yaml::from_slice(&secret.data.unwrap()["config"].0).unwrap();
    let written: Value = xcc_kube::yaml::from_str(&plumberctl_kubeconfig(primary, second)).unwrap();
    let contexts = stored["contexts"].as_array().unwrap();
    for old in written["contexts"].as_array().unwrap() {
        assert!(contexts.contains(old), "{old:?} kept in {stored:?}");
    }
    assert!(
        contexts.iter().any(|c| c["name"] == "secondary2"
            && c["context"]["cluster"] == "v1252-cluster"
            && c["context"]["user"] == "kubernetes-admin3"),
        "{stored:?}"
    );
    assert!(
        Api::<Secret>::namespaced(primary.client.clone(), "plumber-system")
            .get_opt("kubeconfig")
            .await
            .unwrap()
            .is_none(),
        "nothing written to xcc 0.1's location"
    );
    wait_for(
        &format!("ClusterDetector {THIRD} secondary RUNNING after kubectl xcc plumber add"),
        Duration::from_secs(30),
        || async {
            let d = detectors(primary).get_opt(THIRD).await.ok()??;
            (d.data["status"]["clusterstatus"] == "RUNNING").then_some(())
        },
    )
    .await;
}

fn base64_of(text: &str) -> String {
    xcc_kube::wire::encode_base64(text)
}

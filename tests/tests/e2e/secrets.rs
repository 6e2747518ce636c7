//! Secret replication end to end (Services Toolkit's SecretExport / SecretImport) on two real API
//! servers, with an xcc-agent on each running under a kubeconfig minted for our manifest's
//! ServiceAccount, and the documentation's YAML applied unchanged.

use std::{
    future::Future,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::{
    ByteString,
    api::{
        core::v1::{Namespace, Secret},
        events::v1::Event,
        rbac::v1::Role,
    },
};
use kube::{
    Api, ResourceExt,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch, PatchParams,
        PostParams,
    },
};
use xcc_e2e::{Cluster, Kubeconfig, Testbed, require_testbed, xcc::Agent};

pub(crate) const NS: &str = "project-1";
const GROUP: &str = "replication.apiresources.multicluster.x-tanzu.vmware.com";
/// The name of both documentation examples.
const DOC_NAME: &str = "small-postgres-23.status.binding.name";
const ORIGIN: &str = "xcc.test/origin";

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub(crate) fn manifest(path: &str) -> String {
    repo().join(path).display().to_string()
}

pub(crate) fn kind(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1alpha1", kind))
}

/// CRDs and our agent on `cluster`, under the manifest's ServiceAccount.
pub(crate) async fn agent(cluster: &Cluster) -> Agent {
    cluster
        .install_crds(&repo().join("manifests/crds"))
        .await
        .unwrap();
    cluster
        .kubectl(&["apply", "-f", &manifest("manifests/agent/agent.yaml")])
        .await
        .unwrap();
    let kubeconfig = cluster
        .mint_kubeconfig("xcc-dns", "xcc-agent")
        .await
        .unwrap();
    let mut agent = Agent::start(
        &kubeconfig.path,
        &cluster.dir().join("xcc-agent.log"),
        &["--log=info,xcc_agent=debug"],
    )
    .unwrap();
    agent.wait_ready(Duration::from_secs(30)).await.unwrap();
    agent
}

pub(crate) fn secret(name: &str, data: &[(&str, &str)], annotations: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            annotations: (!annotations.is_empty()).then(|| {
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

pub(crate) fn secrets(cluster: &Cluster) -> Api<Secret> {
    Api::namespaced(cluster.client.clone(), NS)
}

/// Creates Secret `secret` in [`NS`] on `cluster`.
pub(crate) async fn create_secret(cluster: &Cluster, secret: &Secret) {
    secrets(cluster)
        .create(&PostParams::default(), secret)
        .await
        .unwrap();
}

/// Waits (at most `timeout`) until Secret `name` of [`NS`] on `cluster` is there and passes
/// `check`; returns it and how long that took.
pub(crate) async fn wait_secret(
    what: &str,
    cluster: &Cluster,
    name: &str,
    timeout: Duration,
    check: impl Fn(&Secret) -> bool,
) -> (Secret, Duration) {
    wait_for(what, timeout, || async {
        secrets(cluster).get_opt(name).await.unwrap().filter(&check)
    })
    .await
}

/// Waits (at most 30 s) until Secret `name` of [`NS`] on `cluster` is gone.
pub(crate) async fn wait_secret_gone(what: &str, cluster: &Cluster, name: &str) {
    wait_for(what, Duration::from_secs(30), || async {
        secrets(cluster)
            .get_opt(name)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}

/// `kubectl apply -f` a manifest of this repository (`path` from its root) on `cluster`.
pub(crate) async fn apply_manifest(cluster: &Cluster, path: &str) {
    cluster
        .kubectl(&["apply", "-f", &manifest(path)])
        .await
        .unwrap();
}

pub(crate) async fn create_namespace(cluster: &Cluster) {
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    if namespaces.get_opt(NS).await.unwrap().is_none() {
        cluster.kubectl(&["create", "namespace", NS]).await.unwrap();
    }
}

pub(crate) fn value(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// Polls `check` every 20 ms until it gives `Some`; panics with `what` after `timeout`.
pub(crate) async fn wait_for<T, F: Future<Output = Option<T>>>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> F,
) -> (T, Duration) {
    let started = Instant::now();
    loop {
        if let Some(found) = check().await {
            return (found, started.elapsed());
        }
        assert!(started.elapsed() < timeout, "{what}: not after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(status, reason, observedGeneration)` of the Ready condition of `kind` `name`.
pub(crate) async fn ready(
    cluster: &Cluster,
    kind_name: &str,
    name: &str,
) -> Option<(String, String, i64)> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), NS, &kind(kind_name));
    let object = api.get_opt(name).await.ok()??;
    let status = object.data.get("status")?;
    let condition = status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    Some((
        condition["status"].as_str()?.to_string(),
        condition["reason"].as_str()?.to_string(),
        status["observedGeneration"].as_i64().unwrap_or(-1),
    ))
}

pub(crate) async fn wait_ready(cluster: &Cluster, kind_name: &str, name: &str, want: (&str, &str)) {
    let what = format!("{kind_name} {NS}/{name} Ready={} reason {}", want.0, want.1);
    wait_for(&what, Duration::from_secs(60), || async {
        ready(cluster, kind_name, name)
            .await
            .filter(|(status, reason, _)| status == want.0 && reason == want.1)
    })
    .await;
}

/// [`NS`] on the workload cluster and in it Secret `energy-source`, the kubeconfig of the
/// replication ServiceAccount that imports name; returns that kubeconfig.
async fn energy_source(workload: &Cluster, replication_sa: &Kubeconfig) -> String {
    create_namespace(workload).await;
    let kubeconfig = std::fs::read_to_string(&replication_sa.path).unwrap();
    create_secret(
        workload,
        &secret("energy-source", &[("kubeconfig", &kubeconfig)], &[]),
    )
    .await;
    kubeconfig
}

pub(crate) fn export_yaml(name: &str, secret: &str) -> String {
    format!(
        "apiVersion: {GROUP}/v1alpha1\nkind: SecretExport\nmetadata: {{name: {name}, namespace: {NS}}}\n\
         spec: {{secret: {{name: {secret}}}, serviceAccount: {{name: upstream-replication-sa}}}}\n"
    )
}

pub(crate) fn import_yaml(name: &str, secret: &str) -> String {
    format!(
        "apiVersion: {GROUP}/v1alpha1\nkind: SecretImport\nmetadata: {{name: {name}, namespace: {NS}}}\n\
         spec: {{secret: {{name: {secret}}}, remoteKubeconfig: {{name: energy-source}}}}\n"
    )
}

fn status_code(error: kube::Error) -> u16 {
    match error {
        kube::Error::Api(status) => status.code,
        other => panic!("expected an API error, got {other}"),
    }
}

// Distinctive values, so that the logs can be searched for them.
const V1: &str = "s3cret-v1-9d1c7e";
const V2: &str = "s3cret-v2-41b0aa";
const PG: &str = "postgres://pg-7c2e11";
const MINE: &str = "workload-own-5f0e2d";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_export_and_import_replicate_and_follow_the_source() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["service", "workload"])
        .await
        .unwrap();
    let (service, workload) = (bed.cluster("service"), bed.cluster("workload"));
    let _service_agent = agent(service).await;
    let _workload_agent = agent(workload).await;

    // Service cluster: the ServiceAccount workload clusters use, three Secrets, the documented
    // export (of pg-binding) and one more for dumbo, the Secret the documented import names.
    let replication_sa = service
        .mint_kubeconfig(NS, "upstream-replication-sa")
        .await
        .unwrap();
    for s in [
        secret("dumbo", &[("password", V1)], &[]),
        secret("pg-binding", &[("uri", PG)], &[]),
        secret("other", &[("token", "not-exported")], &[]),
    ] {
        create_secret(service, &s).await;
    }
    apply_manifest(service, "manifests/examples/secret-export.yaml").await;
    service
        .apply_yaml(&export_yaml("dumbo", "dumbo"))
        .await
        .unwrap();
    wait_ready(service, "SecretExport", DOC_NAME, ("True", "Exported")).await;
    wait_ready(service, "SecretExport", "dumbo", ("True", "Exported")).await;
    let role: Api<Role> = Api::namespaced(service.client.clone(), NS);
    let doc_role = role
        .get(&format!("xcc-secretexport-{DOC_NAME}"))
        .await
        .unwrap();
    assert_eq!(
        doc_role.owner_references()[0].kind,
        "SecretExport",
        "the Role is owned by its export"
    );

    // The replication ServiceAccount reads exactly the exported Secrets: 403 for any other.
    let as_sa: Api<Secret> = Api::namespaced(replication_sa.client.clone(), NS);
    assert_eq!(
        value(&as_sa.get("dumbo").await.unwrap(), "password").as_deref(),
        Some(V1)
    );
    assert_eq!(
        value(&as_sa.get("pg-binding").await.unwrap(), "uri").as_deref(),
        Some(PG)
    );
    assert_eq!(status_code(as_sa.get("other").await.unwrap_err()), 403);
    assert_eq!(
        status_code(as_sa.list(&ListParams::default()).await.unwrap_err()),
        403
    );
    let elsewhere: Api<Secret> = Api::namespaced(replication_sa.client.clone(), "xcc-dns");
    assert_eq!(
        status_code(elsewhere.list(&ListParams::default()).await.unwrap_err()),
        403
    );

    // Workload cluster: the kubeconfig Secret, the documented import (of dumbo) and one of
    // pg-binding.
    let kubeconfig = energy_source(workload, &replication_sa).await;
    apply_manifest(workload, "manifests/examples/secret-import.yaml").await;
    workload
        .apply_yaml(&import_yaml("pg", "pg-binding"))
        .await
        .unwrap();
    let (copy, took) = wait_secret(
        "dumbo copied",
        workload,
        "dumbo",
        Duration::from_secs(60),
        |s| value(s, "password").as_deref() == Some(V1),
    )
    .await;
    eprintln!("dumbo replicated {took:?} after the import was applied");
    assert_eq!(
        copy.annotations().get(ORIGIN).map(String::as_str),
        Some("energy-source/project-1/dumbo")
    );
    wait_ready(workload, "SecretImport", DOC_NAME, ("True", "Replicated")).await;
    let (_, _, generation) = ready(workload, "SecretImport", DOC_NAME).await.unwrap();
    assert_eq!(generation, 1, "observedGeneration");
    wait_secret(
        "pg-binding copied",
        workload,
        "pg-binding",
        Duration::from_secs(30),
        |s| value(s, "uri").as_deref() == Some(PG),
    )
    .await;

    // An update on the service cluster arrives within a second (a watch, not a poll).
    secrets(service)
        .patch(
            "dumbo",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"password": V2}})),
        )
        .await
        .unwrap();
    let (_, took) = wait_secret(
        "dumbo updated",
        workload,
        "dumbo",
        Duration::from_secs(10),
        |s| value(s, "password").as_deref() == Some(V2),
    )
    .await;
    eprintln!("update replicated in {took:?}");
    assert!(took < Duration::from_secs(1), "update took {took:?}");

    // A local Secret the import did not create is never overwritten: Conflict, and an Event.
    create_secret(workload, &secret("taken", &[("value", MINE)], &[])).await;
    create_secret(
        service,
        &secret("taken", &[("value", "from-the-service-cluster")], &[]),
    )
    .await;
    service
        .apply_yaml(&export_yaml("taken", "taken"))
        .await
        .unwrap();
    workload
        .apply_yaml(&import_yaml("taken", "taken"))
        .await
        .unwrap();
    wait_ready(workload, "SecretImport", "taken", ("False", "Conflict")).await;
    let local = secrets(workload).get("taken").await.unwrap();
    assert_eq!(value(&local, "value").as_deref(), Some(MINE));
    assert!(local.annotations().get(ORIGIN).is_none());
    let events: Api<Event> = Api::namespaced(workload.client.clone(), NS);
    let (event, _) = wait_for("Conflict Event", Duration::from_secs(10), || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("Conflict")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("taken")
            })
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    // An import switched to another kubeconfig Secret keeps (adopts) its copy.
    create_secret(
        workload,
        &secret("energy-source-2", &[("kubeconfig", &kubeconfig)], &[]),
    )
    .await;
    workload
        .apply_yaml(&import_yaml("pg", "pg-binding").replace("energy-source", "energy-source-2"))
        .await
        .unwrap();
    wait_secret(
        "pg-binding adopted",
        workload,
        "pg-binding",
        Duration::from_secs(30),
        |s| {
            s.annotations().get(ORIGIN).map(String::as_str)
                == Some("energy-source-2/project-1/pg-binding")
        },
    )
    .await;
    wait_ready(workload, "SecretImport", "pg", ("True", "Replicated")).await;

    // The import is pointed at another Secret (one not exported): the old copy goes, the status
    // says why nothing replaces it; pointed back, the copy returns.
    let pg_to =
        |secret: &str| import_yaml("pg", secret).replace("energy-source", "energy-source-2");
    workload.apply_yaml(&pg_to("other")).await.unwrap();
    wait_secret_gone("pg-binding removed", workload, "pg-binding").await;
    wait_ready(workload, "SecretImport", "pg", ("False", "Forbidden")).await;
    workload.apply_yaml(&pg_to("pg-binding")).await.unwrap();
    wait_ready(workload, "SecretImport", "pg", ("True", "Replicated")).await;

    // The service cluster goes away: nothing is deleted, the status says so.
    service.stop();
    wait_ready(
        workload,
        "SecretImport",
        DOC_NAME,
        ("False", "RemoteUnreachable"),
    )
    .await;
    // That status is the import's own word that it saw the service cluster go: what it copied
    // must still be there.
    let kept = secrets(workload).get("dumbo").await.unwrap();
    assert_eq!(value(&kept, "password").as_deref(), Some(V2));
    assert!(
        secrets(workload)
            .get_opt("pg-binding")
            .await
            .unwrap()
            .is_some()
    );
    service.restart().await.unwrap();
    wait_ready(workload, "SecretImport", DOC_NAME, ("True", "Replicated")).await;

    // Deleting an import removes its copy; deleting the conflicting one leaves the local Secret.
    workload
        .kubectl(&[
            "-n",
            NS,
            "delete",
            "secretimport",
            DOC_NAME,
            "--timeout=30s",
        ])
        .await
        .unwrap();
    assert!(secrets(workload).get_opt("dumbo").await.unwrap().is_none());
    workload
        .kubectl(&["-n", NS, "delete", "secretimport", "taken", "--timeout=30s"])
        .await
        .unwrap();
    let local = secrets(workload).get("taken").await.unwrap();
    assert_eq!(value(&local, "value").as_deref(), Some(MINE));

    // Deleting an export removes its Role and RoleBinding: the ServiceAccount loses access.
    service
        .kubectl(&["-n", NS, "delete", "secretexport", "dumbo", "--timeout=30s"])
        .await
        .unwrap();
    assert!(
        role.get_opt("xcc-secretexport-dumbo")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(status_code(as_sa.get("dumbo").await.unwrap_err()), 403);

    // Secret data never reaches the logs, Events or conditions, plain or base64.
    let leaks = |text: &str| {
        [V1, V2, PG, MINE].iter().any(|v| {
            let base64 = serde_json::to_string(&ByteString(v.as_bytes().to_vec())).unwrap();
            text.contains(v) || text.contains(base64.trim_matches('"'))
        })
    };
    for cluster in [service, workload] {
        let log = std::fs::read_to_string(cluster.dir().join("xcc-agent.log")).unwrap();
        assert!(
            !leaks(&log),
            "{} agent log contains secret data",
            cluster.name
        );
        let events: Api<Event> = Api::namespaced(cluster.client.clone(), NS);
        for event in events.list(&ListParams::default()).await.unwrap() {
            assert!(
                !leaks(&format!("{:?}", event.note)),
                "Event leaks secret data"
            );
        }
        for kind_name in ["SecretImport", "SecretExport"] {
            let api: Api<DynamicObject> =
                Api::namespaced_with(cluster.client.clone(), NS, &kind(kind_name));
            for object in api.list(&ListParams::default()).await.unwrap() {
                assert!(
                    !leaks(&object.data["status"].to_string()),
                    "{kind_name} status leaks secret data"
                );
            }
        }
    }
}

/// A stand-in for a service's instance kind (Services Toolkit's example: sql.tanzu.vmware.com
/// Postgres), with get/list/watch on it granted to our agent as agent.yaml describes.
const POSTGRES: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: postgres.sql.tanzu.vmware.com}
spec:
  group: sql.tanzu.vmware.com
  names: {kind: Postgres, plural: postgres, singular: postgres}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: xcc-agent-postgres}
rules:
- apiGroups: [sql.tanzu.vmware.com]
  resources: [postgres]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: xcc-agent-postgres}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: xcc-agent-postgres}
subjects:
- {kind: ServiceAccount, name: xcc-agent, namespace: xcc-dns}
";

async fn postgres_kind(cluster: &Cluster) {
    cluster.apply_yaml(POSTGRES).await.unwrap();
    cluster
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/postgres.sql.tanzu.vmware.com",
        ])
        .await
        .unwrap();
}

fn postgres_instance(name: &str, secret: &str) -> String {
    format!(
        "apiVersion: sql.tanzu.vmware.com/v1\nkind: Postgres\nmetadata: {{name: {name}, namespace: {NS}}}\n\
         status: {{binding: {{name: {secret}}}}}\n"
    )
}

/// The name of the export and import the monitors generate for instance `big-postgres-7`.
const GENERATED: &str = "big-postgres-7.status.binding.name";

/// Instance `big-postgres-7` (naming Secret `big-pg-binding`) and the documented monitor
/// `monitor` (a manifest's path) on `cluster`.
async fn instance_and_monitor(cluster: &Cluster, monitor: &str) {
    cluster
        .apply_yaml(&postgres_instance("big-postgres-7", "big-pg-binding"))
        .await
        .unwrap();
    apply_manifest(cluster, monitor).await;
}

/// Waits until the `kind_name` generated for `big-postgres-7` is Ready (`reason`) and monitor
/// binding `binding_kind` `cluster1-postgres` Synced; returns the generated object.
async fn wait_generated(
    cluster: &Cluster,
    kind_name: &str,
    reason: &str,
    binding_kind: &str,
) -> DynamicObject {
    wait_ready(cluster, kind_name, GENERATED, ("True", reason)).await;
    wait_ready(
        cluster,
        binding_kind,
        "cluster1-postgres",
        ("True", "Synced"),
    )
    .await;
    get_dynamic(cluster, kind_name, GENERATED).await.unwrap()
}

/// Waits (at most 30 s) until the `kind_name` generated for `big-postgres-7` is gone.
async fn wait_generated_gone(what: &str, cluster: &Cluster, kind_name: &str) {
    wait_for(what, Duration::from_secs(30), || async {
        get_dynamic(cluster, kind_name, GENERATED)
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

async fn get_dynamic(cluster: &Cluster, kind_name: &str, name: &str) -> Option<DynamicObject> {
    Api::<DynamicObject>::namespaced_with(cluster.client.clone(), NS, &kind(kind_name))
        .get_opt(name)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_monitors_generate_exports_and_imports_per_instance() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["service", "workload"])
        .await
        .unwrap();
    let (service, workload) = (bed.cluster("service"), bed.cluster("workload"));
    let _service_agent = agent(service).await;
    let _workload_agent = agent(workload).await;
    postgres_kind(service).await;
    postgres_kind(workload).await;

    // Service cluster: an instance naming its binding Secret, and the documented export monitor.
    let replication_sa = service
        .mint_kubeconfig(NS, "upstream-replication-sa")
        .await
        .unwrap();
    create_secret(service, &secret("big-pg-binding", &[("uri", PG)], &[])).await;
    instance_and_monitor(service, "manifests/examples/postgres-export-monitor.yaml").await;
    let export = wait_generated(
        service,
        "SecretExport",
        "Exported",
        "ResourceExportMonitorBinding",
    )
    .await;
    let binding = get_dynamic(service, "ResourceExportMonitorBinding", "cluster1-postgres")
        .await
        .unwrap();
    let label = |o: &DynamicObject, suffix: &str| {
        o.labels()
            .get(&format!("{GROUP}/{suffix}"))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(label(&export, "secret-owner-kind"), "Postgres");
    assert_eq!(label(&export, "secret-owner-name"), "big-postgres-7");
    assert_eq!(
        label(&export, "monitor-binding-uid"),
        binding.uid().unwrap()
    );
    assert_eq!(export.data["spec"]["secret"]["name"], "big-pg-binding");
    assert_eq!(
        export.data["spec"]["serviceAccount"]["name"],
        "upstream-replication-sa"
    );
    let monitor = Api::<DynamicObject>::all_with(
        service.client.clone(),
        &kind("ClusterResourceExportMonitor"),
    )
    .get("postgres")
    .await
    .unwrap();
    assert_eq!(monitor.data["status"]["conditions"][0]["reason"], "Valid");

    // Workload cluster: the same instance (as projected from the service cluster), the
    // kubeconfig Secret and the documented import monitor.
    energy_source(workload, &replication_sa).await;
    instance_and_monitor(workload, "manifests/examples/postgres-import-monitor.yaml").await;
    wait_secret(
        "big-pg-binding copied",
        workload,
        "big-pg-binding",
        Duration::from_secs(60),
        |s| value(s, "uri").as_deref() == Some(PG),
    )
    .await;
    let import = wait_generated(
        workload,
        "SecretImport",
        "Replicated",
        "ResourceImportMonitorBinding",
    )
    .await;
    assert_eq!(label(&import, "secret-owner-name"), "big-postgres-7");
    assert_eq!(
        import.data["spec"]["remoteKubeconfig"]["name"],
        "energy-source"
    );

    // The instance goes: its import goes, and with it the copy.
    workload
        .kubectl(&["-n", NS, "delete", "postgres", "big-postgres-7"])
        .await
        .unwrap();
    wait_generated_gone("generated import deleted", workload, "SecretImport").await;
    wait_secret_gone("copy deleted", workload, "big-pg-binding").await;

    // The export binding goes: its exports go, and with them the access.
    service
        .kubectl(&[
            "-n",
            NS,
            "delete",
            "resourceexportmonitorbinding",
            "cluster1-postgres",
            "--timeout=30s",
        ])
        .await
        .unwrap();
    wait_generated_gone("generated export deleted", service, "SecretExport").await;
    let as_sa: Api<Secret> = Api::namespaced(replication_sa.client.clone(), NS);
    assert_eq!(
        status_code(as_sa.get("big-pg-binding").await.unwrap_err()),
        403
    );
}

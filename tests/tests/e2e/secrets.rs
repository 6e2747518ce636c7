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
use xcc_e2e::{Cluster, Testbed, require_testbed, xcc::Agent};

const NS: &str = "project-1";
const GROUP: &str = "replication.apiresources.multicluster.x-tanzu.vmware.com";
/// The name of both documentation examples.
const DOC_NAME: &str = "small-postgres-23.status.binding.name";
const ORIGIN: &str = "xcc.test/origin";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn manifest(path: &str) -> String {
    repo().join(path).display().to_string()
}

fn kind(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1alpha1", kind))
}

/// CRDs and our agent on `cluster`, under the manifest's ServiceAccount.
async fn agent(cluster: &Cluster) -> Agent {
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

fn secret(name: &str, data: &[(&str, &str)], annotations: &[(&str, &str)]) -> Secret {
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

fn secrets(cluster: &Cluster) -> Api<Secret> {
    Api::namespaced(cluster.client.clone(), NS)
}

async fn create_namespace(cluster: &Cluster) {
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    if namespaces.get_opt(NS).await.unwrap().is_none() {
        cluster.kubectl(&["create", "namespace", NS]).await.unwrap();
    }
}

fn value(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// Polls `check` every 20 ms until it gives `Some`; panics with `what` after `timeout`.
async fn wait_for<T, F: Future<Output = Option<T>>>(
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
async fn ready(cluster: &Cluster, kind_name: &str, name: &str) -> Option<(String, String, i64)> {
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

async fn wait_ready(cluster: &Cluster, kind_name: &str, name: &str, want: (&str, &str)) {
    let what = format!("{kind_name} {NS}/{name} Ready={} reason {}", want.0, want.1);
    wait_for(&what, Duration::from_secs(60), || async {
        ready(cluster, kind_name, name)
            .await
            .filter(|(status, reason, _)| status == want.0 && reason == want.1)
    })
    .await;
}

fn export_yaml(name: &str, secret: &str) -> String {
    format!(
        "apiVersion: {GROUP}/v1alpha1\nkind: SecretExport\nmetadata: {{name: {name}, namespace: {NS}}}\n\
         spec: {{secret: {{name: {secret}}}, serviceAccount: {{name: upstream-replication-sa}}}}\n"
    )
}

fn import_yaml(name: &str, secret: &str) -> String {
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
        secrets(service)
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
    }
    service
        .kubectl(&[
            "apply",
            "-f",
            &manifest("manifests/examples/secret-export.yaml"),
        ])
        .await
        .unwrap();
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
    create_namespace(workload).await;
    let kubeconfig = std::fs::read_to_string(&replication_sa.path).unwrap();
    secrets(workload)
        .create(
            &PostParams::default(),
            &secret("energy-source", &[("kubeconfig", &kubeconfig)], &[]),
        )
        .await
        .unwrap();
    workload
        .kubectl(&[
            "apply",
            "-f",
            &manifest("manifests/examples/secret-import.yaml"),
        ])
        .await
        .unwrap();
    workload
        .apply_yaml(&import_yaml("pg", "pg-binding"))
        .await
        .unwrap();
    let (copy, took) = wait_for("dumbo copied", Duration::from_secs(60), || async {
        secrets(workload)
            .get_opt("dumbo")
            .await
            .unwrap()
            .filter(|s| value(s, "password").as_deref() == Some(V1))
    })
    .await;
    eprintln!("dumbo replicated {took:?} after the import was applied");
    assert_eq!(
        copy.annotations().get(ORIGIN).map(String::as_str),
        Some("energy-source/project-1/dumbo")
    );
    wait_ready(workload, "SecretImport", DOC_NAME, ("True", "Replicated")).await;
    let (_, _, generation) = ready(workload, "SecretImport", DOC_NAME).await.unwrap();
    assert_eq!(generation, 1, "observedGeneration");
    wait_for("pg-binding copied", Duration::from_secs(30), || async {
        secrets(workload)
            .get_opt("pg-binding")
            .await
            .unwrap()
            .filter(|s| value(s, "uri").as_deref() == Some(PG))
    })
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
    let (_, took) = wait_for("dumbo updated", Duration::from_secs(10), || async {
        secrets(workload)
            .get_opt("dumbo")
            .await
            .unwrap()
            .filter(|s| value(s, "password").as_deref() == Some(V2))
    })
    .await;
    eprintln!("update replicated in {took:?}");
    assert!(took < Duration::from_secs(1), "update took {took:?}");

    // A local Secret the import did not create is never overwritten: Conflict, and an Event.
    secrets(workload)
        .create(
            &PostParams::default(),
            &secret("taken", &[("value", MINE)], &[]),
        )
        .await
        .unwrap();
    secrets(service)
        .create(
            &PostParams::default(),
            &secret("taken", &[("value", "from-the-service-cluster")], &[]),
        )
        .await
        .unwrap();
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

    // The service cluster goes away: nothing is deleted, the status says so.
    service.stop();
    wait_ready(
        workload,
        "SecretImport",
        DOC_NAME,
        ("False", "RemoteUnreachable"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
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

    // Secret data never reaches the logs.
    for cluster in [service, workload] {
        let log = std::fs::read_to_string(cluster.dir().join("xcc-agent.log")).unwrap();
        for secret_value in [V1, V2, PG, MINE] {
            assert!(
                !log.contains(secret_value),
                "{} log contains secret data",
                cluster.name
            );
        }
    }
}

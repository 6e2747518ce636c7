//! API projection, both sides, end to end: two real API servers ("services", "workload"), each
//! agent under our manifests' ServiceAccount (agent.yaml + projection.yaml). A RabbitMQ-like CRD
//! exists on the service cluster only; the reference's DownstreamClusterLink,
//! ClusterAPIGroupImport and APIResourceImport are applied unchanged on the workload cluster,
//! whose kube-apiserver really aggregates to the agent's API server. `kubectl` and kube clients
//! talk to the workload cluster only; the objects must live upstream.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::{
    Api,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams, WatchEvent,
        WatchParams,
    },
};
use serde_json::json;
use xcc_e2e::{Binaries, Blackhole, Cluster, Testbed, free_port, require_testbed, xcc::Agent};

use crate::{
    projection::{publish_root_ca, ready},
    resource_sync::{repo, start_agent_with, wait_for},
    secrets::apply_manifest,
};

const GROUP: &str = "projection.apiresources.multicluster.x-tanzu.vmware.com";
const NS: &str = "services-toolkit";

/// A small `rabbitmqclusters.rabbitmq.com`: status and scale subresources, printer columns.
const RABBITMQ_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: rabbitmqclusters.rabbitmq.com
spec:
  group: rabbitmq.com
  scope: Namespaced
  names:
    kind: RabbitmqCluster
    listKind: RabbitmqClusterList
    plural: rabbitmqclusters
    singular: rabbitmqcluster
    shortNames: [rmq]
  versions:
  - name: v1beta1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Image
      type: string
      jsonPath: .spec.image
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer}
              image: {type: string}
          status:
            type: object
            properties:
              replicas: {type: integer}
";

pub(crate) const RABBIT: &str = "apiVersion: rabbitmq.com/v1beta1
kind: RabbitmqCluster
metadata:
  name: hello
  namespace: team-1
spec:
  replicas: 1
  image: rabbitmq:3.13
";

fn projection(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1alpha1", kind))
}

pub(crate) fn rabbits() -> ApiResource {
    let mut resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "rabbitmq.com",
        "v1beta1",
        "RabbitmqCluster",
    ));
    resource.plural = "rabbitmqclusters".into();
    resource
}

/// `(status, reason)` of condition `type_` of `object`, once its status observed its generation.
fn condition(object: &DynamicObject, type_: &str) -> Option<(String, String)> {
    let status = &object.data["status"];
    if status["observedGeneration"].as_i64() != object.metadata.generation {
        return None;
    }
    let found = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    Some((
        found["status"].as_str()?.to_string(),
        found["reason"].as_str()?.to_string(),
    ))
}

/// The agent's flags when only API projection runs (the test bed gives each agent its own
/// aggregated-server port unless told one).
pub(crate) const PROJECTION_ONLY: [&str; 3] = [
    "--secret-replication=false",
    "--resource-sync=false",
    "--plumber=false",
];

/// Starts the workload agent of `cluster`, API projection only, and the port of its aggregated
/// API server, which the links' Services name too.
pub(crate) async fn start_workload_agent(cluster: &Cluster) -> (Agent, String) {
    let port = free_port().to_string();
    let listen = format!("--projection-proxy-listen=127.0.0.1:{port}");
    let service_port = format!("--projection-proxy-service-port={port}");
    let mut args = PROJECTION_ONLY.to_vec();
    args.extend([
        listen.as_str(),
        service_port.as_str(),
        // A placeholder for the EndpointSlice (Kubernetes refuses loopback endpoints, and the
        // availability check wants one); the egress proxy connects to 127.0.0.1:<port>.
        "--projection-proxy-address=192.0.2.1",
    ]);
    (
        start_agent_with(cluster, "xcc-agent.log", &args).await,
        port,
    )
}

/// Waits (at most `timeout`) until the object `name` of `api` has each of `conditions` True for
/// its current generation.
async fn wait_true(api: &Api<DynamicObject>, name: &str, conditions: &[&str], timeout: Duration) {
    let what = format!("{name}: {} True", conditions.join(", "));
    wait_for(&what, timeout, || async {
        let object = api.get(name).await.ok()?;
        for type_ in conditions {
            if condition(&object, type_)?.0 != "True" {
                return None;
            }
        }
        Some(())
    })
    .await;
}

pub(crate) async fn install(cluster: &Cluster) {
    cluster
        .install_crds(&repo().join("manifests/crds"))
        .await
        .unwrap();
    for file in [
        "manifests/agent/agent.yaml",
        "manifests/agent/projection.yaml",
    ] {
        apply_manifest(cluster, file).await;
    }
}

fn status_code(result: Result<impl Sized, kube::Error>) -> Option<u16> {
    match result {
        Ok(_) => None,
        Err(kube::Error::Api(e)) => Some(e.code),
        Err(other) => panic!("not an API error: {other}"),
    }
}

/// Both clusters with the RabbitMQ-like API projected from "services" to "workload" as the
/// reference describes, every object Ready and `kubectl api-resources` listing it.
pub(crate) struct Projected {
    pub bed: Testbed,
    _services_agent: Agent,
    pub workload_agent: Agent,
    /// The port of the workload agent's aggregated API server.
    pub port: String,
}

impl Projected {
    pub fn services(&self) -> &Cluster {
        &self.bed.clusters[0]
    }

    pub fn workload(&self) -> &Cluster {
        &self.bed.clusters[1]
    }
}

pub(crate) async fn project(binaries: &Binaries) -> Projected {
    let bed = Testbed::start_named(binaries, &["services", "workload"])
        .await
        .unwrap();
    let (services, workload) = (&bed.clusters[0], &bed.clusters[1]);

    // The service cluster: the API, its namespace, the link and what the link may do.
    install(services).await;
    services.apply_yaml(RABBITMQ_CRD).await.unwrap();
    services
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/rabbitmqclusters.rabbitmq.com",
        ])
        .await
        .unwrap();
    publish_root_ca(services).await;
    for ns in ["team-1", "team-2"] {
        services
            .kubectl(&["create", "namespace", ns])
            .await
            .unwrap();
    }
    apply_manifest(
        services,
        "manifests/examples/projection-upstream-cluster-link.yaml",
    )
    .await;
    services
        .kubectl(&[
            "create",
            "clusterrole",
            "rabbitmq-user",
            "--verb=get,list,watch,create,update,patch,delete,deletecollection",
            "--resource=rabbitmqclusters.rabbitmq.com,rabbitmqclusters.rabbitmq.com/status,rabbitmqclusters.rabbitmq.com/scale",
        ])
        .await
        .unwrap();
    services
        .apply_yaml(
            "apiVersion: projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1
kind: APIExportRoleBinding
metadata:
  name: workload-3c-rabbitmq
spec:
  upstreamClusterLinkRef:
    name: workload-3c
    namespace: services-toolkit
  clusterRoleRef:
    name: rabbitmq-user
",
        )
        .await
        .unwrap();
    let services_agent = start_agent_with(services, "xcc-agent.log", &PROJECTION_ONLY).await;
    let upstream_links: Api<DynamicObject> = Api::namespaced_with(
        services.client.clone(),
        NS,
        &projection("UpstreamClusterLink"),
    );
    wait_for(
        "UpstreamClusterLink Ready",
        Duration::from_secs(30),
        || async {
            let link = upstream_links.get("workload-3c").await.ok()?;
            (ready(&link)? == ("True".into(), "Linked".into())).then_some(())
        },
    )
    .await;
    let kubeconfig = Api::<Secret>::namespaced(services.client.clone(), NS)
        .get("workload-3c-kubeconfig")
        .await
        .unwrap()
        .data
        .unwrap()
        .remove("kubeconfig")
        .unwrap();
    // The copy gets a token with ten minutes left (less than an hour): the workload agent must
    // renew it with the service cluster at once, for a day.
    let short = Api::<ServiceAccount>::namespaced(services.client.clone(), NS)
        .create_token_request(
            "xcc-upstream-workload-3c",
            &PostParams::default(),
            &serde_json::from_value(json!({"spec": {"expirationSeconds": 600}})).unwrap(),
        )
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let mut config: serde_json::Value = xcc_kube::yaml::from_slice(&kubeconfig.0).unwrap();
    config["users"][0]["user"]["token"] = short.clone().into();
    let kubeconfig =
        k8s_openapi::ByteString(xcc_kube::yaml::to_string(&config).unwrap().into_bytes());

    // The workload cluster: the copied kubeconfig Secret, then the reference's objects.
    install(workload).await;
    for ns in ["team-1", "team-2"] {
        workload
            .kubectl(&["create", "namespace", ns])
            .await
            .unwrap();
    }
    let pumpkin_seeds: Secret = serde_json::from_value(json!({
        "metadata": {"name": "pumpkin-seeds", "namespace": NS},
        "data": {"kubeconfig": kubeconfig},
    }))
    .unwrap();
    Api::<Secret>::namespaced(workload.client.clone(), NS)
        .create(&PostParams::default(), &pumpkin_seeds)
        .await
        .unwrap();
    apply_manifest(
        workload,
        "manifests/examples/projection-downstream-cluster-link.yaml",
    )
    .await;
    let (workload_agent, port) = start_workload_agent(workload).await;

    let links: Api<DynamicObject> = Api::namespaced_with(
        workload.client.clone(),
        NS,
        &projection("DownstreamClusterLink"),
    );
    let renewed = wait_for(
        "the workload agent renews the copy's short token",
        Duration::from_secs(30),
        || async {
            let secret = Api::<Secret>::namespaced(workload.client.clone(), NS)
                .get("pumpkin-seeds")
                .await
                .ok()?;
            let config: serde_json::Value =
                xcc_kube::yaml::from_slice(&secret.data?.get("kubeconfig")?.0).ok()?;
            let token = config["users"][0]["user"]["token"].as_str()?.to_string();
            (token != short).then_some(token)
        },
    )
    .await;
    let claims: serde_json::Value = serde_json::from_slice(
        &xcc_kube::wire::decode_base64url(renewed.split('.').nth(1).unwrap()).unwrap(),
    )
    .unwrap();
    let lifetime = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
    assert!(lifetime > 80_000, "the renewed token lives {lifetime} s");
    wait_for(
        "DownstreamClusterLink Ready with the renewed token",
        Duration::from_secs(60),
        || async {
            let link = links.get("services-2b").await.ok()?;
            (condition(&link, "Ready")? == ("True".into(), "Ready".into())).then_some(())
        },
    )
    .await;
    let link = links.get("services-2b").await.unwrap();
    for type_ in [
        "ServiceAccountReady",
        "ProxyDeploymentReady",
        "ProxyServiceReady",
        "ProxyConfigMapReady",
        "ProxyServiceAccountReady",
    ] {
        assert_eq!(condition(&link, type_).unwrap().0, "True", "{type_}");
    }
    // The aggregated server acts as its own ServiceAccount, not the agent's.
    let account = link.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "ProxyServiceAccountReady")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        account.contains("acts as ServiceAccount xcc-dns/xcc-projection-proxy,"),
        "{account}"
    );
    assert_eq!(
        link.data["status"]["proxy"]["serviceReference"]["name"],
        "services-2b-proxy"
    );
    assert!(
        link.data["status"]["proxy"]["caBundle"]
            .as_str()
            .is_some_and(|ca| !ca.is_empty())
    );

    // The imports, with the link Ready: the API is listed within 10 s.
    let imported = std::time::Instant::now();
    for file in [
        "manifests/examples/projection-cluster-api-group-import.yaml",
        "manifests/examples/projection-api-resource-import.yaml",
    ] {
        apply_manifest(workload, file).await;
    }
    let imports: Api<DynamicObject> = Api::all_with(
        workload.client.clone(),
        &projection("ClusterAPIGroupImport"),
    );
    wait_true(
        &imports,
        "rabbitmq.com",
        &["APIServicesReady", "Ready"],
        Duration::from_secs(60),
    )
    .await;
    let resource_imports: Api<DynamicObject> = Api::namespaced_with(
        workload.client.clone(),
        "team-1",
        &projection("APIResourceImport"),
    );
    wait_true(
        &resource_imports,
        "rabbitmq.com-import",
        &["ResourcesAvailable", "Ready"],
        Duration::from_secs(30),
    )
    .await;
    wait_for(
        "kubectl api-resources lists rabbitmqclusters",
        Duration::from_secs(30),
        || async {
            let out = workload
                .kubectl(&["api-resources", "--api-group=rabbitmq.com"])
                .await
                .ok()?;
            out.contains("rabbitmqclusters").then_some(())
        },
    )
    .await;
    let listed = imported.elapsed();
    eprintln!(
        "projection: kubectl api-resources lists the imported API {listed:?} after the import"
    );
    assert!(listed <= Duration::from_secs(10), "listed after {listed:?}");

    Projected {
        bed,
        _services_agent: services_agent,
        workload_agent,
        port,
    }
}

#[tokio::test]
async fn a_projected_api_serves_the_service_clusters_objects_on_the_workload_cluster() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let projected = project(&binaries).await;
    let (services, workload) = (projected.services(), projected.workload());
    let (port, workload_agent) = (&projected.port, &projected.workload_agent);
    let links: Api<DynamicObject> = Api::namespaced_with(
        workload.client.clone(),
        NS,
        &projection("DownstreamClusterLink"),
    );
    let imports: Api<DynamicObject> = Api::all_with(
        workload.client.clone(),
        &projection("ClusterAPIGroupImport"),
    );

    // OpenAPI v3 of the imported group only: kubectl explain knows the projected kind.
    wait_for(
        "kubectl explain rabbitmqclusters.spec",
        Duration::from_secs(30),
        || async {
            let out = workload
                .kubectl(&["explain", "rabbitmqclusters.spec"])
                .await
                .ok()?;
            (out.contains("replicas") && out.contains("image")).then_some(())
        },
    )
    .await;

    // Create, read, patch through the workload cluster; the objects live upstream.
    workload.apply_yaml(RABBIT).await.unwrap();
    let upstream: Api<DynamicObject> =
        Api::namespaced_with(services.client.clone(), "team-1", &rabbits());
    let there = upstream.get("hello").await.expect("created upstream");
    let here: Api<DynamicObject> =
        Api::namespaced_with(workload.client.clone(), "team-1", &rabbits());
    let seen = here.get("hello").await.unwrap();
    assert_eq!(seen.metadata.uid, there.metadata.uid);
    let table = workload
        .kubectl(&["get", "rabbitmqclusters", "-n", "team-1"])
        .await
        .unwrap();
    assert!(
        table.contains("REPLICAS") && table.contains("rabbitmq:3.13"),
        "{table}"
    );
    workload
        .kubectl(&[
            "patch",
            "rabbitmqcluster",
            "hello",
            "-n",
            "team-1",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
        ])
        .await
        .unwrap();
    workload
        .kubectl(&[
            "patch",
            "rabbitmqcluster",
            "hello",
            "-n",
            "team-1",
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/spec/image","value":"rabbitmq:4.0"}]"#,
        ])
        .await
        .unwrap();
    let there = upstream.get("hello").await.unwrap();
    assert_eq!(there.data["spec"]["replicas"], 3);
    assert_eq!(there.data["spec"]["image"], "rabbitmq:4.0");

    // get -o yaml, then an edit-style update: the whole object back with a change (PUT), its
    // resourceVersion and uid those of the service cluster.
    let yaml = workload
        .kubectl(&[
            "get",
            "rabbitmqcluster",
            "hello",
            "-n",
            "team-1",
            "-o",
            "yaml",
        ])
        .await
        .unwrap();
    let version = there.metadata.resource_version.clone().unwrap();
    assert!(
        yaml.contains(&format!("resourceVersion: \"{version}\""))
            && yaml.contains(there.metadata.uid.as_deref().unwrap()),
        "{yaml}"
    );
    let edited = workload.dir().join("rabbit-edited.yaml");
    std::fs::write(&edited, yaml.replace("replicas: 3", "replicas: 4")).unwrap();
    workload
        .kubectl(&["replace", "-f", &edited.display().to_string()])
        .await
        .unwrap();
    assert_eq!(
        upstream.get("hello").await.unwrap().data["spec"]["replicas"],
        4
    );
    // The same stale version again: the service cluster's 409 reaches the user.
    let stale = workload
        .kubectl(&["replace", "-f", &edited.display().to_string()])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        stale.contains("Conflict") || stale.contains("modified"),
        "{stale}"
    );

    // The scale and status subresources, and server-side apply.
    workload
        .kubectl(&[
            "scale",
            "rabbitmqcluster",
            "hello",
            "-n",
            "team-1",
            "--replicas=5",
        ])
        .await
        .unwrap();
    workload
        .kubectl(&[
            "patch",
            "rabbitmqcluster",
            "hello",
            "-n",
            "team-1",
            "--subresource=status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"replicas":5}}"#,
        ])
        .await
        .unwrap();
    let applied = workload.dir().join("rabbit-apply.yaml");
    std::fs::write(&applied, RABBIT.replace("replicas: 1", "replicas: 7")).unwrap();
    workload
        .kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=e2e",
            "-f",
            &applied.display().to_string(),
        ])
        .await
        .unwrap();
    let there = upstream.get("hello").await.unwrap();
    assert_eq!(there.data["spec"]["replicas"], 7);
    assert_eq!(there.data["status"]["replicas"], 5);
    assert!(
        there
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|f| f.manager.as_deref() == Some("e2e") && f.operation.as_deref() == Some("Apply")),
        "server-side apply reached the service cluster"
    );

    // An apply that conflicts on many fields: the user reads the service cluster's own answer,
    // every conflict on its line, as kubectl on the service cluster prints it.
    let labels = |value: &str| -> String {
        (0..12)
            .map(|i| format!("    l{i}: {value}\n"))
            .collect::<String>()
    };
    let owned = workload.dir().join("rabbit-labels.yaml");
    std::fs::write(
        &owned,
        RABBIT.replace("replicas: 1", "replicas: 7").replace(
            "  namespace: team-1\n",
            &format!("  namespace: team-1\n  labels:\n{}", labels("mine")),
        ),
    )
    .unwrap();
    let rival = workload.dir().join("rabbit-rival.yaml");
    std::fs::write(
        &rival,
        RABBIT.replace("replicas: 1", "replicas: 7").replace(
            "  namespace: team-1\n",
            &format!("  namespace: team-1\n  labels:\n{}", labels("theirs")),
        ),
    )
    .unwrap();
    let apply = |file: &std::path::Path, manager: &str| {
        [
            "apply".to_string(),
            "--server-side".to_string(),
            format!("--field-manager={manager}"),
            "-f".to_string(),
            file.display().to_string(),
        ]
    };
    let args = apply(&owned, "e2e");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    workload.kubectl(&args).await.unwrap();
    let args = apply(&rival, "rival");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let through = workload.kubectl(&args).await.unwrap_err().to_string();
    let direct = services.kubectl(&args).await.unwrap_err().to_string();
    let conflicts = |text: &str| -> Vec<String> {
        text.lines()
            .map(str::trim)
            .filter(|l| l.starts_with("- .metadata.labels."))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(conflicts(&through).len(), 12, "{through}");
    assert_eq!(
        conflicts(&through),
        conflicts(&direct),
        "{through}\n---\n{direct}"
    );
    assert!(
        through.contains("Apply failed with 12 conflicts"),
        "{through}"
    );

    // Straight to the agent's port: no client certificate means 401 whatever the headers say;
    // nothing is forwarded.
    let forged = tokio::process::Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "X-Remote-User: system:admin",
            "-H",
            "X-Remote-Group: system:masters",
            &format!("https://127.0.0.1:{port}/apis/rabbitmq.com/v1beta1/namespaces/team-1/rabbitmqclusters"),
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&forged.stdout), "401");

    // Hostile requests as the front proxy (its real client certificate) get a clear 4xx and
    // never reach the service cluster; a certificate of another CA of the same name gets 401.
    let rogue = xcc_e2e::certs::ca("xcc-testbed-front-proxy-ca").unwrap();
    xcc_e2e::certs::write_client(workload.dir(), "rogue", "front-proxy-client", &rogue).unwrap();
    let big = workload.dir().join("big.json");
    std::fs::write(&big, format!("{{\"pad\":\"{}\"}}", "x".repeat(4 << 20))).unwrap();
    let upstream_count = || async {
        let metrics = tokio::process::Command::new("curl")
            .args(["-s", &format!("http://{}/metrics", workload_agent.admin)])
            .output()
            .await
            .unwrap();
        String::from_utf8_lossy(&metrics.stdout)
            .lines()
            .find(|l| l.contains("projection_proxy_upstream_seconds_count"))
            .map(str::to_string)
    };
    let before = upstream_count().await;
    let base = "/apis/rabbitmq.com/v1beta1/namespaces/team-1/rabbitmqclusters";
    let big_body = format!("@{}", big.display());
    for (what, cert, method, path, content_type, body, code) in [
        (
            "another CA",
            "rogue",
            "GET",
            base.to_string(),
            "application/json",
            "",
            "401",
        ),
        (
            "bad JSON",
            "front-proxy-client",
            "POST",
            base.to_string(),
            "application/json",
            "{\"spec\": ",
            "400",
        ),
        (
            "bad YAML",
            "front-proxy-client",
            "PATCH",
            format!("{base}/hello"),
            "application/apply-patch+yaml",
            "a: [",
            "400",
        ),
        (
            "protobuf",
            "front-proxy-client",
            "POST",
            base.to_string(),
            "application/vnd.kubernetes.protobuf",
            "k8s",
            "415",
        ),
        (
            "path traversal",
            "front-proxy-client",
            "GET",
            format!("{base}/..%2F..%2F..%2Fapi%2Fv1%2Fsecrets"),
            "application/json",
            "",
            "400",
        ),
        (
            "dot-dot",
            "front-proxy-client",
            "GET",
            format!("{base}/../../../../api/v1/secrets"),
            "application/json",
            "",
            "400",
        ),
        (
            "oversized",
            "front-proxy-client",
            "POST",
            base.to_string(),
            "application/json",
            big_body.as_str(),
            "413",
        ),
    ] {
        let dir = workload.dir();
        let mut args = vec![
            "-sk".to_string(),
            "--path-as-is".into(),
            "-o".into(),
            "/dev/null".into(),
            "-w".into(),
            "%{http_code}".into(),
            "--cert".into(),
            dir.join(format!("{cert}.crt")).display().to_string(),
            "--key".into(),
            dir.join(format!("{cert}.key")).display().to_string(),
            "-X".into(),
            method.into(),
            "-H".into(),
            "X-Remote-User: admin".into(),
            "-H".into(),
            "X-Remote-Group: system:masters".into(),
            "-H".into(),
            format!("Content-Type: {content_type}"),
        ];
        if !body.is_empty() {
            args.extend(["--data-binary".to_string(), body.to_string()]);
        }
        args.push(format!("https://127.0.0.1:{port}{path}"));
        let out = tokio::process::Command::new("curl")
            .args(&args)
            .output()
            .await
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), code, "{what}");
    }
    assert_eq!(
        upstream_count().await,
        before,
        "a refused request reached the service cluster"
    );

    // Requests counted by link, verb and code; upstream latency per link.
    let metrics = tokio::process::Command::new("curl")
        .args(["-s", &format!("http://{}/metrics", workload_agent.admin)])
        .output()
        .await
        .unwrap();
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    for line in [
        r#"projection_proxy_requests_total{link="services-toolkit/services-2b",verb="create",code="201"}"#,
        r#"projection_proxy_requests_total{link="",verb="unknown",code="401"}"#,
        r#"projection_proxy_upstream_seconds_count{link="services-toolkit/services-2b"}"#,
    ] {
        assert!(metrics.contains(line), "{line} not in the metrics");
    }

    // A watch through the workload cluster sees an object created afterwards.
    let listed = here.list(&ListParams::default()).await.unwrap();
    let version = listed.metadata.resource_version.clone().unwrap();
    let mut events = here
        .watch(&WatchParams::default().timeout(60), &version)
        .await
        .unwrap()
        .boxed();
    let second = RABBIT.replace("name: hello", "name: second");
    workload.apply_yaml(&second).await.unwrap();
    let added = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(event) = events.try_next().await.unwrap() {
            if let WatchEvent::Added(object) = event
                && object.metadata.name.as_deref() == Some("second")
            {
                return object;
            }
        }
        panic!("the watch ended");
    })
    .await
    .expect("the watch delivers the new object");
    assert_eq!(added.metadata.namespace.as_deref(), Some("team-1"));

    // A namespace without APIResourceImport: 404, nothing forwarded.
    let other: Api<DynamicObject> =
        Api::namespaced_with(workload.client.clone(), "team-2", &rabbits());
    assert_eq!(
        status_code(other.list(&ListParams::default()).await),
        Some(404)
    );
    // A workload user without RBAC for it: 403 from the workload cluster.
    let nobody = workload.mint_kubeconfig("team-1", "nobody").await.unwrap();
    let theirs: Api<DynamicObject> =
        Api::namespaced_with(nobody.client.clone(), "team-1", &rabbits());
    assert_eq!(status_code(theirs.get("hello").await), Some(403));

    // Delete one, then the rest of the namespace.
    workload
        .kubectl(&["delete", "rabbitmqcluster", "hello", "-n", "team-1"])
        .await
        .unwrap();
    assert_eq!(status_code(upstream.get("hello").await), Some(404));
    workload
        .kubectl(&["delete", "rabbitmqclusters", "--all", "-n", "team-1"])
        .await
        .unwrap();
    assert!(
        upstream
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // A link whose ClusterRole lacks delete: the service cluster's 403 reaches the user.
    workload
        .apply_yaml(&RABBIT.replace("name: hello", "name: third"))
        .await
        .unwrap();
    services
        .kubectl(&[
            "patch",
            "clusterrole",
            "rabbitmq-user",
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/rules/0/verbs","value":["get","list","watch","create"]}]"#,
        ])
        .await
        .unwrap();
    let refused = wait_for(
        "the upstream 403 for delete",
        Duration::from_secs(20),
        || async {
            match here.delete("third", &Default::default()).await {
                Err(kube::Error::Api(e)) if e.code == 403 => Some(e),
                _ => None,
            }
        },
    )
    .await;
    assert!(
        refused.message.contains("xcc-upstream-workload-3c"),
        "the service cluster's refusal, naming the link's identity: {}",
        refused.message
    );
    assert!(upstream.get("third").await.is_ok());

    // A hostile kubeconfig (exec) never becomes a client: the link says so.
    workload
        .apply_yaml(
            "apiVersion: v1
kind: Secret
metadata:
  name: hostile-kubeconfig
  namespace: services-toolkit
stringData:
  kubeconfig: |
    apiVersion: v1
    kind: Config
    clusters: [{name: c, cluster: {server: https://127.0.0.1:1}}]
    users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'touch /tmp/pwned']}}}]
    contexts: [{name: c, context: {cluster: c, user: u}}]
    current-context: c
---
apiVersion: projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1
kind: DownstreamClusterLink
metadata:
  name: hostile
  namespace: services-toolkit
spec:
  proxy:
    TLS:
      secretName: hostile-tls
  upstream:
    kubeconfig:
      secretName: hostile-kubeconfig
    name: hostile
",
        )
        .await
        .unwrap();
    wait_for(
        "a hostile kubeconfig is rejected",
        Duration::from_secs(30),
        || async {
            let link = links.get("hostile").await.ok()?;
            (condition(&link, "ServiceAccountReady")?
                == ("False".into(), "KubeconfigRejected".into())
                && condition(&link, "Ready")?.0 == "False")
                .then_some(())
        },
    )
    .await;

    // A group this cluster serves already is refused and left alone.
    workload
        .apply_yaml(&RABBITMQ_CRD.replace("rabbitmq.com", "local.example.com"))
        .await
        .unwrap();
    workload
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/rabbitmqclusters.local.example.com",
        ])
        .await
        .unwrap();
    workload
        .apply_yaml(
            "apiVersion: projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1
kind: ClusterAPIGroupImport
metadata:
  name: local.example.com
spec:
  downstreamClusterLinkRef:
    name: services-2b
    namespace: services-toolkit
  group: local.example.com
",
        )
        .await
        .unwrap();
    wait_for(
        "an import of a local group is refused",
        Duration::from_secs(30),
        || async {
            let import = imports.get("local.example.com").await.ok()?;
            (condition(&import, "Ready")? == ("False".into(), "GroupServedLocally".into()))
                .then_some(())
        },
    )
    .await;
    let local = workload
        .kubectl(&[
            "get",
            "apiservice",
            "v1beta1.local.example.com",
            "-o",
            "jsonpath={.spec.service}",
        ])
        .await
        .unwrap();
    assert!(
        local.is_empty(),
        "the local APIService was changed: {local}"
    );

    // Deleting the import removes its APIServices (a finalizer: no garbage collector runs here).
    workload
        .kubectl(&[
            "delete",
            "clusterapigroupimport",
            "rabbitmq.com",
            "--timeout=30s",
        ])
        .await
        .unwrap();
    wait_for(
        "the APIService is gone",
        Duration::from_secs(30),
        || async {
            workload
                .kubectl(&["get", "apiservice", "v1beta1.rabbitmq.com"])
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;
}

/// From the start of kubectl's first request whose URL holds `path` to its last answer, as
/// kubectl logs them at `-v=6` (`I1129 16:34:30.609678 ... "Response" verb="GET" url="..."
/// status="503 Service Unavailable" milliseconds=1`).
fn kubectl_requests_took(log: &str, path: &str) -> Duration {
    let answers: Vec<(f64, f64)> = log
        .lines()
        .filter(|line| line.contains("\"Response\"") && line.contains(path))
        .map(|line| {
            // The time of day of the klog header, in seconds.
            let clock = line.split_whitespace().nth(1).unwrap_or_default();
            let at = clock
                .split(':')
                .try_fold(0.0, |sum, part| part.parse::<f64>().map(|p| sum * 60.0 + p))
                .unwrap_or_else(|_| panic!("no time in {line:?}"));
            let ms: f64 = line
                .rsplit_once("milliseconds=")
                .and_then(|(_, ms)| ms.trim().parse().ok())
                .unwrap_or_else(|| panic!("no duration in {line:?}"));
            (at, ms / 1000.0)
        })
        .collect();
    let (Some((first, first_took)), Some((last, _))) = (answers.first(), answers.last()) else {
        panic!("kubectl logged no request for {path}: {log}");
    };
    Duration::from_secs_f64(last - first + first_took)
}

/// The service cluster stopped (SIGSTOP: connections accepted, nothing answers): discovery still
/// lists the group, a request fails with 503 and `Retry-After` within 2 s (timed from the
/// request on an open connection; kubectl's from its first request, by its own log), and a
/// workload namespace is deleted without waiting on the service cluster and without deleting its
/// objects there (the documented choice). After SIGCONT everything works again, nothing restarted.
#[tokio::test]
async fn a_stopped_service_cluster_breaks_neither_discovery_nor_namespace_deletion() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let projected = project(&binaries).await;
    let (services, workload) = (projected.services(), projected.workload());
    let _namespace_controller =
        xcc_e2e::aggregation::start_controllers(&binaries, workload, "namespace").unwrap();
    workload.apply_yaml(RABBIT).await.unwrap();
    let upstream: Api<DynamicObject> =
        Api::namespaced_with(services.client.clone(), "team-1", &rabbits());
    upstream.get("hello").await.expect("created upstream");
    // kubectl with a discovery cache of its own, so that it asks the server.
    let cache = format!(
        "--cache-dir={}",
        workload.dir().join("kubectl-cache").display()
    );
    let path = "/apis/rabbitmq.com/v1beta1/namespaces/team-1/rabbitmqclusters";
    // The client's connection is open before the clock starts: what is timed below is the
    // request, not a TLS handshake with a busy API server.
    let client = workload.client_without_retries().await.unwrap();
    client.apiserver_version().await.unwrap();

    let blackhole = Blackhole::start(services);
    let started = std::time::Instant::now();
    let out = workload
        .kubectl(&["api-resources", "--api-group=rabbitmq.com", &cache])
        .await
        .expect("discovery works while the service cluster is stopped");
    eprintln!(
        "projection: service cluster stopped → api-resources in {:?}",
        started.elapsed()
    );
    assert!(out.contains("rabbitmqclusters"), "{out}");

    let started = std::time::Instant::now();
    let response = client
        .send(
            http::Request::get(path)
                .body(kube::client::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let took = started.elapsed();
    eprintln!(
        "projection: service cluster stopped → {} in {took:?}",
        response.status()
    );
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    assert!(took < Duration::from_secs(2), "503 after {took:?}");
    // kubectl's own times (-v=6): from its first request for the objects to its last answer
    // (client-go retries a 503), not counting its start on a busy machine.
    let refused = workload
        .kubectl(&["get", "rabbitmqclusters", "-n", "team-1", &cache, "-v=6"])
        .await
        .expect_err("kubectl get fails while the service cluster is stopped")
        .to_string();
    assert!(refused.contains("ServiceUnavailable"), "{refused}");
    let took = kubectl_requests_took(&refused, "/rabbitmqclusters");
    assert!(
        took < Duration::from_secs(2),
        "kubectl failed after {took:?}: {refused}"
    );
    eprintln!("projection: service cluster stopped → kubectl get fails in {took:?}");

    // Deleting a workload namespace does not wait for the service cluster.
    let started = std::time::Instant::now();
    workload
        .kubectl(&["delete", "namespace", "team-1", "--timeout=60s"])
        .await
        .expect("the namespace is deleted while the service cluster is stopped");
    eprintln!(
        "projection: namespace deleted in {:?} with the service cluster stopped",
        started.elapsed()
    );

    // Back: the service cluster kept its objects, and the projection serves them again once the
    // namespace and its APIResourceImport are back.
    drop(blackhole);
    assert!(
        upstream.get("hello").await.is_ok(),
        "a workload namespace's deletion keeps the service cluster's objects"
    );
    workload
        .kubectl(&["create", "namespace", "team-1"])
        .await
        .unwrap();
    apply_manifest(
        workload,
        "manifests/examples/projection-api-resource-import.yaml",
    )
    .await;
    wait_for(
        "kubectl get lists the kept object again",
        Duration::from_secs(30),
        || async {
            let out = workload
                .kubectl(&["get", "rabbitmqclusters", "-n", "team-1", &cache])
                .await
                .ok()?;
            out.contains("hello").then_some(())
        },
    )
    .await;
}

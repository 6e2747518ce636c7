//! The test bed itself: isolation, RBAC with minted ServiceAccount kubeconfigs, the aggregation
//! layer, distinct cluster identities.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use xcc_e2e::{Testbed, free_port, require_testbed};

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clusters_are_isolated_and_enforce_rbac() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let started = std::time::Instant::now();
    let bed = Testbed::start(&binaries, 3).await.expect("test bed starts");
    eprintln!(
        "three clusters ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Objects written to one cluster are invisible to the others.
    let on = |i: usize| Api::<ConfigMap>::namespaced(bed.clusters[i].client.clone(), "default");
    on(0)
        .create(&PostParams::default(), &config_map("only-on-0"))
        .await
        .unwrap();
    assert!(on(0).get_opt("only-on-0").await.unwrap().is_some());
    assert!(on(1).get_opt("only-on-0").await.unwrap().is_none());
    assert!(on(2).get_opt("only-on-0").await.unwrap().is_none());

    // Each cluster has its own identity.
    let mut uids = BTreeSet::new();
    for c in &bed.clusters {
        uids.insert(c.kube_system_uid().await.unwrap());
    }
    assert_eq!(uids.len(), 3, "kube-system UIDs are distinct: {uids:?}");

    // A minted ServiceAccount kubeconfig gets exactly what its RBAC grants.
    let c = &bed.clusters[1];
    c.apply_yaml(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: read-configmaps, namespace: default}
rules:
- apiGroups: [\"\"]
  resources: [configmaps]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader-reads, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-configmaps}
subjects:
- {kind: ServiceAccount, name: reader, namespace: default}
",
    )
    .await
    .unwrap();
    Api::<ConfigMap>::namespaced(c.client.clone(), "default")
        .create(&PostParams::default(), &config_map("readable"))
        .await
        .unwrap();
    let reader = c.mint_kubeconfig("default", "reader").await.unwrap();
    let as_reader = Api::<ConfigMap>::namespaced(reader.client.clone(), "default");
    assert!(
        as_reader.get("readable").await.is_ok(),
        "granted: get configmaps"
    );
    match as_reader
        .create(&PostParams::default(), &config_map("nope"))
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403, "{e:?}"),
        other => panic!("create must be forbidden, got {other:?}"),
    }
    let secrets =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(reader.client.clone(), "default");
    match secrets.list(&Default::default()).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403),
        other => panic!(
            "listing secrets must be forbidden, got {:?}",
            other.map(|l| l.items.len())
        ),
    }
    // A token of one cluster means nothing on another.
    let foreign = kube::Client::try_from({
        let mut config = kube::Config::new(bed.clusters[2].url.parse().unwrap());
        config.accept_invalid_certs = true;
        config.auth_info.token = std::fs::read_to_string(&reader.path)
            .unwrap()
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("token: ")
                    .map(|t| t.to_string().into())
            });
        config
    })
    .unwrap();
    match Api::<ConfigMap>::namespaced(foreign, "default")
        .list(&Default::default())
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 401, "{e:?}"),
        other => panic!(
            "a foreign token must be rejected, got {:?}",
            other.map(|l| l.items.len())
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiservice_answers_through_the_aggregation_layer() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start(&binaries, 1).await.expect("test bed starts");
    let cluster = &bed.clusters[0];

    // A tiny HTTPS server with its own self-signed certificate, serving API discovery.
    let port = free_port();
    let server = tokio::spawn(serve_discovery(port));

    cluster
        .apply_yaml(&format!(
            "apiVersion: v1
kind: Service
metadata: {{name: smoke-api, namespace: default}}
spec:
  ports: [{{name: https, port: {port}, protocol: TCP}}]
---
# No selector: the endpoint is written by hand. Its address is only a placeholder (Kubernetes
# refuses loopback endpoints); the API server dials <cluster IP>:{port} through the test bed's
# egress proxy, which connects to 127.0.0.1:{port}.
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: smoke-api-manual
  namespace: default
  labels: {{kubernetes.io/service-name: smoke-api}}
addressType: IPv4
endpoints: [{{addresses: [192.0.2.1], conditions: {{ready: true}}}}]
ports: [{{name: https, port: {port}, protocol: TCP}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1alpha1.smoke.xcc.test}}
spec:
  group: smoke.xcc.test
  version: v1alpha1
  service: {{name: smoke-api, namespace: default, port: {port}}}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 1000
  versionPriority: 15
"
        ))
        .await
        .unwrap();

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let got = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            cluster.client.request_text(
                http::Request::get("/apis/smoke.xcc.test/v1alpha1")
                    .body(Vec::new())
                    .unwrap(),
            ),
        )
        .await;
        match got {
            Ok(Ok(body)) if body.contains("\"groupVersion\":\"smoke.xcc.test/v1alpha1\"") => break,
            other => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the APIService never answered: {other:?}\n{}",
                    cluster
                        .kubectl(&["get", "apiservice", "v1alpha1.smoke.xcc.test", "-o", "yaml"])
                        .await
                        .unwrap_or_default()
                );
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
        }
    }
    server.abort();
}

/// Serves `GET /apis/smoke.xcc.test/v1alpha1` (and anything else as an empty resource list).
async fn serve_discovery(port: u16) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let app = axum::Router::new().fallback(|| async {
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            r#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"smoke.xcc.test/v1alpha1","resources":[]}"#,
        )
    });
    crate::https::serve(
        listener,
        cert.cert.der().clone(),
        cert.signing_key.serialize_der(),
        app,
    )
    .await;
}

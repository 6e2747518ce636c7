//! API projection, service-cluster side, end to end: one real API server, the agent under our
//! manifests' ServiceAccount (agent.yaml + projection.yaml), the reference's UpstreamClusterLink
//! and APIExportRoleBinding applied unchanged. The link's kubeconfig Secret must give a client
//! that can do what the bound ClusterRole allows and nothing more.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams},
};
use serde_json::Value;
use xcc_e2e::{Cluster, Testbed, require_testbed};

use crate::resource_sync::{manifest, start_agent_with, wait_for};

const GROUP: &str = "projection.apiresources.multicluster.x-tanzu.vmware.com";
const NS: &str = "services-toolkit";

fn api(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1alpha1", kind))
}

/// The Ready condition of `object`, once its status observed its generation.
pub(crate) fn ready(object: &DynamicObject) -> Option<(String, String)> {
    let status = &object.data["status"];
    if status["observedGeneration"].as_i64() != object.metadata.generation {
        return None;
    }
    let ready = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    Some((
        ready["status"].as_str()?.to_string(),
        ready["reason"].as_str()?.to_string(),
    ))
}

/// The test bed runs no kube-controller-manager: the root CA ConfigMap it would publish in
/// every namespace is written here, from the test bed's serving CA.
pub(crate) async fn publish_root_ca(cluster: &Cluster) {
    let pem = cluster.serving_ca().unwrap();
    let config_map: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kube-root-ca.crt", "namespace": NS},
        "data": {"ca.crt": pem},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(cluster.client.clone(), NS)
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_link_gives_a_kubeconfig_that_can_do_what_its_cluster_role_allows_and_no_more() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["services"])
        .await
        .unwrap();
    let cluster = &bed.clusters[0];
    crate::projection_workload::install(cluster).await;
    for file in [
        "manifests/examples/projection-upstream-cluster-link.yaml",
        "manifests/examples/projection-apiexport-role-binding.yaml",
    ] {
        cluster
            .kubectl(&["apply", "-f", &manifest(file)])
            .await
            .unwrap();
    }
    publish_root_ca(cluster).await;
    // What the workload cluster may do: read ConfigMaps, nothing else.
    cluster
        .kubectl(&[
            "create",
            "clusterrole",
            "cluster-1-a",
            "--verb=get,list",
            "--resource=configmaps",
        ])
        .await
        .unwrap();
    // The reference's link and binding name different links: a binding to this one.
    cluster
        .apply_yaml(
            "apiVersion: projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1
kind: APIExportRoleBinding
metadata:
  name: workload-3c-cluster-1-a
spec:
  upstreamClusterLinkRef:
    name: workload-3c
    namespace: services-toolkit
  clusterRoleRef:
    name: cluster-1-a
",
        )
        .await
        .unwrap();
    let _agent = start_agent_with(
        cluster,
        "xcc-agent.log",
        &crate::projection_workload::PROJECTION_ONLY,
    )
    .await;

    let links: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), NS, &api("UpstreamClusterLink"));
    let bindings: Api<DynamicObject> =
        Api::all_with(cluster.client.clone(), &api("APIExportRoleBinding"));
    wait_for(
        "UpstreamClusterLink Ready",
        Duration::from_secs(30),
        || async {
            let link = links.get("workload-3c").await.ok()?;
            (ready(&link)? == ("True".into(), "Linked".into())).then_some(())
        },
    )
    .await;
    let link = links.get("workload-3c").await.unwrap();
    assert_eq!(
        link.data["status"]["serviceAccount"]["name"],
        Value::from("xcc-upstream-workload-3c")
    );
    wait_for(
        "APIExportRoleBinding Bound",
        Duration::from_secs(30),
        || async {
            let binding = bindings.get("workload-3c-cluster-1-a").await.ok()?;
            (ready(&binding)? == ("True".into(), "Bound".into())).then_some(())
        },
    )
    .await;
    // The reference's binding names a link that does not exist here, and says so.
    wait_for(
        "the reference's APIExportRoleBinding says its link is missing",
        Duration::from_secs(30),
        || async {
            let binding = bindings.get("fish-sauce-cluster-1-a").await.ok()?;
            (ready(&binding)? == ("False".into(), "UpstreamClusterLinkNotFound".into()))
                .then_some(())
        },
    )
    .await;

    let secret = Api::<Secret>::namespaced(cluster.client.clone(), NS)
        .get("workload-3c-kubeconfig")
        .await
        .unwrap();
    let peer = xcc_kube::trust::peer_client(&secret, "kubeconfig", Default::default())
        .await
        .expect("the link's kubeconfig passes the trust rules");
    let workload = peer.client;
    Api::<ConfigMap>::all(workload.clone())
        .list(&ListParams::default())
        .await
        .expect("the ClusterRole allows listing ConfigMaps");
    Api::<ConfigMap>::namespaced(workload.clone(), NS)
        .get("kube-root-ca.crt")
        .await
        .expect("the ClusterRole allows reading a ConfigMap");
    let forbidden = |what: &str, result: Result<(), kube::Error>| match result {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what}: expected 403, got {other:?}"),
    };
    forbidden(
        "list Secrets",
        Api::<Secret>::all(workload.clone())
            .list(&ListParams::default())
            .await
            .map(|_| ()),
    );
    let planted: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "planted"}})).unwrap();
    forbidden(
        "create a ConfigMap",
        Api::<ConfigMap>::namespaced(workload.clone(), NS)
            .create(&PostParams::default(), &planted)
            .await
            .map(|_| ()),
    );
    forbidden(
        "list UpstreamClusterLinks",
        Api::<DynamicObject>::all_with(workload, &api("UpstreamClusterLink"))
            .list(&ListParams::default())
            .await
            .map(|_| ()),
    );
}

//! `kubectl xcc link` run as a user runs it (the built binary, a kubeconfig with a context per
//! cluster) on two real API servers, "services" and "workload", each with its agent. Refused
//! runs must write nothing on either cluster; a good run leaves both links Ready and the
//! service cluster's kubeconfig copied to the workload cluster; a second run changes nothing.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, PostParams},
};
use serde_json::json;
use xcc_e2e::{Testbed, require_testbed};

use crate::{
    cli::{User, user_kubeconfig},
    projection::{publish_root_ca, ready},
    projection_workload::{PROJECTION_ONLY, install, start_workload_agent},
    resource_sync::{start_agent_with, wait_for},
};

const GROUP: &str = "projection.apiresources.multicluster.x-tanzu.vmware.com";
const NS: &str = "services-toolkit";

fn links(client: &kube::Client, kind: &str, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1alpha1", kind)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_xcc_link_links_a_service_cluster_with_a_workload_cluster() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["services", "workload"])
        .await
        .unwrap();
    let (services, workload) = (&bed.clusters[0], &bed.clusters[1]);
    let home = bed.dir().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let user = User {
        kubeconfig: user_kubeconfig(&bed, bed.dir()),
        home,
    };
    let upstream = links(&services.client, "UpstreamClusterLink", NS);
    let downstream = links(&workload.client, "DownstreamClusterLink", NS);

    // The service cluster: CRDs, RBAC, the root CA (no kube-controller-manager publishes it
    // here) and its agent. The workload cluster has nothing yet.
    install(services).await;
    publish_root_ca(services).await;
    let _services_agent = start_agent_with(services, "xcc-agent.log", &PROJECTION_ONLY).await;
    let link = [
        "link",
        "--service-context",
        "services",
        "--workload-context",
        "workload",
        "--timeout",
        "90s",
    ];

    // Refused before any write: an unknown context; a workload cluster without the CRD.
    user.run(&[
        "link",
        "--service-context",
        "services",
        "--workload-context",
        "nope",
    ])
    .await
    .fails(2, &["\"nope\"", "services", "workload"]);
    user.run(&link).await.fails(
        1,
        &[
            "context \"workload\"",
            "downstreamclusterlinks",
            "is not installed",
            "nothing was changed",
        ],
    );
    assert!(
        upstream
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // The workload cluster: installed, its agent serving the aggregated API.
    install(workload).await;
    let _workload_agent = start_workload_agent(workload).await;

    // A Secret of the name the copy would have, made by someone else: refused, nothing written.
    let secrets = Api::<Secret>::namespaced(workload.client.clone(), NS);
    let theirs: Secret = serde_json::from_value(json!({
        "metadata": {"name": "other-upstream-kubeconfig", "namespace": NS},
        "stringData": {"kubeconfig": "theirs"},
    }))
    .unwrap();
    let theirs = secrets
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let mut other = link.to_vec();
    other.extend(["--name", "other"]);
    user.run(&other).await.fails(
        1,
        &[
            "Secret services-toolkit/other-upstream-kubeconfig on context \"workload\"",
            "not made by kubectl xcc link",
            "nothing was changed",
        ],
    );
    assert!(
        upstream
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        downstream
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(
        secrets
            .get("other-upstream-kubeconfig")
            .await
            .unwrap()
            .resource_version(),
        theirs.resource_version()
    );

    // The link: named after the workload context, both sides Ready, the kubeconfig copied.
    let out = user.run(&link).await;
    let stdout = out.ok();
    for line in [
        "applied UpstreamClusterLink services-toolkit/workload on context \"services\"",
        "wrote the kubeconfig into Secret services-toolkit/workload-upstream-kubeconfig",
        "DownstreamClusterLink services-toolkit/workload on context \"workload\" is Ready",
        "linked: workload projects APIs of services",
        "the workload cluster's agent renews it",
    ] {
        assert!(stdout.contains(line), "{line:?} not in {stdout}");
    }
    let up = upstream.get("workload").await.unwrap();
    assert_eq!(ready(&up), Some(("True".into(), "Linked".into())));
    assert_eq!(up.data["spec"]["downstream"]["name"], "workload");
    let down = downstream.get("workload").await.unwrap();
    assert_eq!(ready(&down), Some(("True".into(), "Ready".into())));
    assert_eq!(
        down.data["spec"]["upstream"]["kubeconfig"]["secretName"],
        "workload-upstream-kubeconfig"
    );
    assert_eq!(
        down.data["spec"]["proxy"]["TLS"]["secretName"],
        "workload-proxy-tls"
    );
    let original = Api::<Secret>::namespaced(services.client.clone(), NS)
        .get("workload-kubeconfig")
        .await
        .unwrap();
    let copy = secrets.get("workload-upstream-kubeconfig").await.unwrap();
    assert_eq!(
        copy.data.as_ref().unwrap()["kubeconfig"],
        original.data.as_ref().unwrap()["kubeconfig"]
    );
    assert_eq!(
        copy.labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("kubectl-xcc")
    );
    assert_eq!(
        copy.annotations().get("xcc.test/token-expires"),
        original.annotations().get("xcc.test/token-expires")
    );
    assert!(
        secrets
            .get_opt("workload-proxy-tls")
            .await
            .unwrap()
            .is_some()
    );

    // Again: nothing changes (same generations, the copy untouched), both still Ready.
    let out = user.run(&link).await;
    assert!(
        out.ok().contains("already holds that kubeconfig"),
        "{out:?}"
    );
    let again = upstream.get("workload").await.unwrap();
    assert_eq!(again.metadata.generation, up.metadata.generation);
    assert_eq!(
        downstream
            .get("workload")
            .await
            .unwrap()
            .metadata
            .generation,
        down.metadata.generation
    );
    assert_eq!(
        secrets
            .get("workload-upstream-kubeconfig")
            .await
            .unwrap()
            .resource_version(),
        copy.resource_version()
    );

    // A namespace where the service cluster's agent may not work (no RoleBinding): not Ready in
    // time, the error says why; the link stays on the service cluster, nothing reaches the
    // workload cluster.
    let mut stuck = link[..5].to_vec();
    stuck.extend(["-n", "team-x", "--name", "stuck", "--timeout", "3s"]);
    user.run(&stuck).await.fails(
        1,
        &[
            "UpstreamClusterLink team-x/stuck on context \"services\" is not Ready after 3s",
            "RoleBinding xcc-agent-projection-link",
            "nothing was written on context \"workload\"",
        ],
    );
    assert!(
        Api::<Namespace>::all(workload.client.clone())
            .get_opt("team-x")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        links(&services.client, "UpstreamClusterLink", "team-x")
            .get_opt("stuck")
            .await
            .unwrap()
            .is_some()
    );

    wait_for(
        "the DownstreamClusterLink stays Ready",
        Duration::from_secs(5),
        || async {
            let down = downstream.get("workload").await.ok()?;
            (ready(&down)? == ("True".into(), "Ready".into())).then_some(())
        },
    )
    .await;
}

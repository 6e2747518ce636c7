//! Who publishes a name, and who may resolve it: two GatewayDNS selecting one cluster (the
//! older keeps its name, the later says so and takes over once the older is gone), and
//! `spec.resolveFrom` (a list of namespaces, or a namespace selector), which lets the clusters of
//! another management-cluster namespace resolve a GatewayDNS's names, and stops them within one
//! reconcile.

use std::time::{Duration, Instant};

use k8s_openapi::{
    ByteString,
    api::{core::v1::Secret, discovery::v1::EndpointSlice, events::v1::Event},
};
use kube::{
    Api,
    api::{ListParams, ObjectMeta, PostParams},
};
use serde_json::Value;
use xcc_e2e::{Cluster, Testbed, require_testbed, xcc::wait_dig};

use crate::xcc_dns::{
    KUARD, agent, controller, envoy, management, manifest, set_lb, wait_answer, walkthrough,
};

const KUARD_B: &str = "kuard.gateway.cluster-b.dev-team.clusters.xcc.test";
/// Well under the controller's 5-minute resync: what passes within it was woken, not polled.
const ONE_RECONCILE: Duration = Duration::from_secs(10);

/// A LoadBalancer Service `projectcontour/edge` on `cluster` with load-balancer address `ip`.
async fn edge(cluster: &Cluster, ip: &str) {
    cluster
        .apply_yaml(
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: projectcontour}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {name: edge, namespace: projectcontour}\n\
             spec:\n  type: LoadBalancer\n  ports: [{name: http, port: 80}]\n",
        )
        .await
        .unwrap();
    cluster
        .kubectl(&[
            "-n",
            "projectcontour",
            "patch",
            "service",
            "edge",
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(r#"{{"status":{{"loadBalancer":{{"ingress":[{{"ip":"{ip}"}}]}}}}}}"#),
        ])
        .await
        .unwrap();
}

/// GatewayDNS `dev-team/name` as JSON.
async fn gatewaydns(mgmt: &Cluster, name: &str) -> Value {
    let json = mgmt
        .kubectl(&["-n", "dev-team", "get", "gatewaydns", name, "-o", "json"])
        .await
        .unwrap();
    serde_json::from_str(&json).unwrap()
}

/// Condition `type_` of `gateway`'s status, if any.
fn condition(gateway: &Value, type_: &str) -> Option<Value> {
    gateway["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Waits (up to `timeout`) until `check` holds of GatewayDNS `dev-team/name`; gives it.
async fn wait_gateway(
    mgmt: &Cluster,
    name: &str,
    timeout: Duration,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let gateway = gatewaydns(mgmt, name).await;
        if check(&gateway) {
            return gateway;
        }
        assert!(
            started.elapsed() < timeout,
            "{name}: {what} not after {timeout:?}: {gateway}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn nxdomain(answer: &xcc_e2e::xcc::DigAnswer) -> bool {
    answer.status == "NXDOMAIN"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gatewaydns_on_one_cluster_the_older_keeps_the_name_the_later_takes_it_over() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    // The walkthrough: dev-team-gateway-dns (the older) publishes cluster-a's envoy.
    let w = walkthrough(&binaries, r#"[{"ip":"10.1.2.3"}]"#).await;
    let (bed, agent_a, agent_b) = (&w.bed, &w.agent_a, &w.agent_b);
    let mgmt = bed.cluster("management");
    let (ca, cb) = (bed.cluster("cluster-a"), bed.cluster("cluster-b"));
    for (cluster, site) in [("cluster-a", "site=a"), ("cluster-b", "site=b")] {
        mgmt.kubectl(&["-n", "dev-team", "label", "cluster", cluster, site])
            .await
            .unwrap();
    }
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "patch",
        "gatewaydns",
        "dev-team-gateway-dns",
        "--type=merge",
        "-p",
        r#"{"spec":{"clusterSelector":{"matchLabels":{"hasContour":null,"site":"a"}}}}"#,
    ])
    .await
    .unwrap();
    edge(ca, "10.9.9.9").await;
    edge(cb, "10.2.0.1").await;

    // Distinct names: a later GatewayDNS selecting cluster-b only; both answer everywhere.
    mgmt.apply_yaml(
        "apiVersion: connectivity.tanzu.vmware.com/v1alpha1\nkind: GatewayDNS\n\
         metadata: {name: later, namespace: dev-team}\n\
         spec:\n  clusterSelector: {matchLabels: {site: b}}\n  service: projectcontour/edge\n  resolutionType: loadBalancer\n",
    )
    .await
    .unwrap();
    for agent in [agent_a, agent_b] {
        wait_answer(agent.dns, KUARD_B, "A", &["10.2.0.1"], ONE_RECONCILE).await;
        wait_answer(agent.dns, KUARD, "A", &["10.1.2.3"], ONE_RECONCILE).await;
    }
    for name in ["dev-team-gateway-dns", "later"] {
        let gateway = wait_gateway(mgmt, name, ONE_RECONCILE, "Ready", |g| {
            condition(g, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .await;
        assert!(condition(&gateway, "Conflict").is_none(), "{gateway}");
    }

    // The later one selects cluster-a too: the same name. The older keeps it; the later says
    // so (a condition naming the older, an Event) and still publishes cluster-b.
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "patch",
        "gatewaydns",
        "later",
        "--type=merge",
        "-p",
        r#"{"spec":{"clusterSelector":{"matchLabels":{"site":null,"hasContour":"true"}}}}"#,
    ])
    .await
    .unwrap();
    let later = wait_gateway(mgmt, "later", ONE_RECONCILE, "Conflict=True", |g| {
        condition(g, "Conflict").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let conflict = condition(&later, "Conflict").unwrap();
    assert_eq!(conflict["reason"], "NameConflict", "{later}");
    assert_eq!(
        conflict["observedGeneration"], later["metadata"]["generation"],
        "{later}"
    );
    let message = conflict["message"].as_str().unwrap();
    assert!(
        message.contains("dev-team/dev-team-gateway-dns")
            && message.contains("*.gateway.cluster-a.dev-team.clusters.xcc.test"),
        "{message}"
    );
    assert_eq!(condition(&later, "Ready").unwrap()["status"], "False");
    let states: Vec<(&str, &str)> = later["status"]["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["cluster"].as_str().unwrap(), c["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [("cluster-a", "Conflict"), ("cluster-b", "Published")],
        "{later}"
    );
    // Decided (the condition is written after the writes): the older's answer stands.
    for agent in [agent_a, agent_b] {
        wait_answer(agent.dns, KUARD, "A", &["10.1.2.3"], Duration::from_secs(1)).await;
        wait_answer(
            agent.dns,
            KUARD_B,
            "A",
            &["10.2.0.1"],
            Duration::from_secs(1),
        )
        .await;
    }
    let slices: Api<EndpointSlice> = Api::namespaced(cb.client.clone(), "xcc-dns");
    let slice = slices.get("dev-team-cluster-a-gateway").await.unwrap();
    assert_eq!(
        slice.metadata.annotations.unwrap()["connectivity.tanzu.vmware.com/gateway-dns-ref"],
        "dev-team/dev-team-gateway-dns"
    );
    let events: Api<Event> = Api::namespaced(mgmt.client.clone(), "dev-team");
    crate::resource_sync::wait_for("NameConflict Event", ONE_RECONCILE, || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("NameConflict")
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("later")
            })
    })
    .await;

    // The older one goes: the later takes the name over within one reconcile.
    let started = Instant::now();
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "delete",
        "gatewaydns",
        "dev-team-gateway-dns",
        "--wait=false",
    ])
    .await
    .unwrap();
    for agent in [agent_a, agent_b] {
        wait_answer(agent.dns, KUARD, "A", &["10.9.9.9"], ONE_RECONCILE).await;
    }
    eprintln!(
        "two GatewayDNS: the later answers for cluster-a {:.2} s after the older is deleted",
        started.elapsed().as_secs_f64()
    );
    wait_gateway(mgmt, "later", ONE_RECONCILE, "Ready, no Conflict", |g| {
        condition(g, "Conflict").is_none()
            && condition(g, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let slice = slices.get("dev-team-cluster-a-gateway").await.unwrap();
    assert_eq!(
        slice.metadata.annotations.unwrap()["connectivity.tanzu.vmware.com/gateway-dns-ref"],
        "dev-team/later"
    );
}

/// Cluster API Cluster `name` in management namespace `namespace`, with its kubeconfig Secret.
async fn register(bed: &Testbed, name: &str, namespace: &str) {
    let mgmt = bed.cluster("management");
    mgmt.apply_yaml(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n---\n\
         apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec: {{}}\n"
    ))
    .await
    .unwrap();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(format!("{name}-kubeconfig")),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        data: Some(
            [(
                "value".to_string(),
                ByteString(std::fs::read(&bed.cluster(name).kubeconfig).unwrap()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    Api::<Secret>::namespaced(mgmt.client.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_another_namespace_resolves_only_while_resolve_from_allows_it() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["management", "cluster-a", "cluster-b"])
        .await
        .unwrap();
    // cluster-a in dev-team (the walkthrough's), cluster-b in namespace ops.
    management(&bed, &["cluster-a"]).await;
    register(&bed, "cluster-b", "ops").await;
    let mgmt = bed.cluster("management");
    let kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let first_controller = controller(&bed, &kubeconfig.path);
    let (ca, cb) = (bed.cluster("cluster-a"), bed.cluster("cluster-b"));
    let agent_a = agent(ca).await;
    let agent_b = agent(cb).await;
    envoy(ca, r#"[{"ip":"10.1.2.3"}]"#).await;
    mgmt.kubectl(&[
        "apply",
        "-f",
        &manifest("manifests/examples/dev-team-gateway-dns.yaml"),
    ])
    .await
    .unwrap();

    // Unset: the namespace's own clusters only. Once it is Ready (every write done), cluster-b
    // has none of its slices and does not resolve the name.
    wait_answer(
        agent_a.dns,
        KUARD,
        "A",
        &["10.1.2.3"],
        Duration::from_secs(30),
    )
    .await;
    wait_gateway(mgmt, "dev-team-gateway-dns", ONE_RECONCILE, "Ready", |g| {
        condition(g, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let slices_b: Api<EndpointSlice> = Api::namespaced(cb.client.clone(), "xcc-dns");
    let names = |list: kube::core::ObjectList<EndpointSlice>| -> Vec<String> {
        list.items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect()
    };
    assert!(
        names(slices_b.list(&ListParams::default()).await.unwrap()).is_empty(),
        "cluster-b (namespace ops) is sent nothing"
    );
    let answer = xcc_e2e::xcc::dig(agent_b.dns, KUARD, "A").await.unwrap();
    assert!(nxdomain(&answer), "{answer:?}");

    // Allowed: cluster-b resolves it, and follows an address change.
    let allow = |value: &str| {
        let patch = format!(r#"{{"spec":{{"resolveFrom":{value}}}}}"#);
        async move {
            mgmt.kubectl(&[
                "-n",
                "dev-team",
                "patch",
                "gatewaydns",
                "dev-team-gateway-dns",
                "--type=merge",
                "-p",
                &patch,
            ])
            .await
            .unwrap();
        }
    };
    allow(r#"{"namespaces":["ops"]}"#).await;
    let took = wait_answer(agent_b.dns, KUARD, "A", &["10.1.2.3"], ONE_RECONCILE).await;
    eprintln!(
        "resolveFrom: cluster-b (namespace ops) resolves {:.2} s after it is allowed",
        took.as_secs_f64()
    );
    set_lb(ca, r#"[{"ip":"10.1.2.4"}]"#).await;
    wait_answer(agent_b.dns, KUARD, "A", &["10.1.2.4"], ONE_RECONCILE).await;

    let gateway = wait_gateway(
        mgmt,
        "dev-team-gateway-dns",
        ONE_RECONCILE,
        "resolvedFrom",
        |g| g["status"]["resolvedFrom"] == serde_json::json!(["ops"]),
    )
    .await;
    assert_eq!(
        condition(&gateway, "Ready").unwrap()["status"],
        "True",
        "{gateway}"
    );

    // No longer allowed: its records leave cluster-b within one reconcile; cluster-a keeps them.
    allow("null").await;
    let took = wait_dig(agent_b.dns, KUARD, "A", ONE_RECONCILE, nxdomain)
        .await
        .unwrap();
    eprintln!(
        "resolveFrom: cluster-b stops resolving {:.2} s after it is no longer allowed",
        took.as_secs_f64()
    );
    assert!(
        names(slices_b.list(&ListParams::default()).await.unwrap()).is_empty(),
        "its slices are deleted from cluster-b"
    );
    wait_answer(
        agent_a.dns,
        KUARD,
        "A",
        &["10.1.2.4"],
        Duration::from_secs(1),
    )
    .await;
    wait_gateway(
        mgmt,
        "dev-team-gateway-dns",
        ONE_RECONCILE,
        "no resolvedFrom",
        |g| g["status"].get("resolvedFrom").is_none(),
    )
    .await;

    // A namespace selector, as NetworkPolicy's: ops resolves while its labels match, and stops
    // within one reconcile once they do not.
    allow(r#"{"namespaceSelector":{"matchLabels":{"xcc.test/resolve":"dev-team"}}}"#).await;
    wait_gateway(
        mgmt,
        "dev-team-gateway-dns",
        ONE_RECONCILE,
        "observed",
        |g| {
            g["status"]["observedGeneration"] == g["metadata"]["generation"]
                && condition(g, "Ready").is_some_and(|c| c["status"] == "True")
        },
    )
    .await;
    let answer = xcc_e2e::xcc::dig(agent_b.dns, KUARD, "A").await.unwrap();
    assert!(nxdomain(&answer), "ops is not labelled: {answer:?}");
    mgmt.kubectl(&["label", "namespace", "ops", "xcc.test/resolve=dev-team"])
        .await
        .unwrap();
    let took = wait_answer(agent_b.dns, KUARD, "A", &["10.1.2.4"], ONE_RECONCILE).await;
    eprintln!(
        "resolveFrom: cluster-b resolves {:.2} s after its namespace is labelled",
        took.as_secs_f64()
    );
    mgmt.kubectl(&["label", "namespace", "ops", "xcc.test/resolve-"])
        .await
        .unwrap();
    let took = wait_dig(agent_b.dns, KUARD, "A", ONE_RECONCILE, nxdomain)
        .await
        .unwrap();
    eprintln!(
        "resolveFrom: cluster-b stops resolving {:.2} s after its namespace's label is removed",
        took.as_secs_f64()
    );
    allow("null").await;
    wait_gateway(
        mgmt,
        "dev-team-gateway-dns",
        ONE_RECONCILE,
        "no resolvedFrom",
        |g| {
            g["status"].get("resolvedFrom").is_none()
                && g["status"]["observedGeneration"] == g["metadata"]["generation"]
        },
    )
    .await;

    // Dropped while no controller runs: the next one withdraws them (the status named ops).
    allow(r#"{"namespaces":["ops"]}"#).await;
    wait_answer(agent_b.dns, KUARD, "A", &["10.1.2.4"], ONE_RECONCILE).await;
    wait_gateway(
        mgmt,
        "dev-team-gateway-dns",
        ONE_RECONCILE,
        "resolvedFrom",
        |g| g["status"]["resolvedFrom"] == serde_json::json!(["ops"]),
    )
    .await;
    drop(first_controller);
    allow("null").await;
    let second_controller = controller(&bed, &kubeconfig.path);
    wait_dig(agent_b.dns, KUARD, "A", Duration::from_secs(30), nxdomain)
        .await
        .unwrap();
    assert!(
        names(slices_b.list(&ListParams::default()).await.unwrap()).is_empty(),
        "its slices are deleted from cluster-b after a restart"
    );
    wait_answer(
        agent_a.dns,
        KUARD,
        "A",
        &["10.1.2.4"],
        Duration::from_secs(1),
    )
    .await;

    // `--uninstall` (controller stopped) also removes what went to another namespace's cluster.
    allow(r#"{"namespaces":["ops"]}"#).await;
    wait_answer(agent_b.dns, KUARD, "A", &["10.1.2.4"], ONE_RECONCILE).await;
    drop(second_controller);
    let out = tokio::process::Command::new(xcc_e2e::xcc::binary("xcc-controller"))
        .arg(format!("--kubeconfig={}", kubeconfig.path.display()))
        .env("XCC_UNINSTALL", "true")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("on cluster ops/cluster-b"), "{stdout}");
    assert!(
        names(slices_b.list(&ListParams::default()).await.unwrap()).is_empty(),
        "--uninstall leaves nothing on cluster-b"
    );
}

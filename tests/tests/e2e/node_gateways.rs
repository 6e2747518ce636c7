//! Node addresses as gateways, at the API level: `resolutionType: nodePort` and `hostPort`,
//! their SRV records, `nodeAddressType`, `nodeNames`, and node churn. The plain test bed runs no
//! node lifecycle controller (nor any kube-controller-manager), so the Node objects here are
//! made by hand and keep exactly the status this test gives them; the answers are asked of
//! cluster-b's agent, for cluster-a's names.

use std::time::{Duration, Instant};

use serde_json::Value;
use xcc_e2e::{
    Cluster, Testbed, require_testbed,
    xcc::{Agent, dig, wait_dig},
};

use crate::xcc_dns::{KUARD, agent, controller, management, wait_answer};

const GATEWAY: &str = "gateway.cluster-a.dev-team.clusters.xcc.test";
const NODES: &str = "nodes.cluster-a.dev-team.clusters.xcc.test";
/// What node churn must take at most to leave the answers.
const CHURN_BOUND: Duration = Duration::from_secs(2);
/// Generous, for a first publication (the controller's start, the watches' first lists).
const FIRST: Duration = Duration::from_secs(30);

/// management, cluster-a and cluster-b, our controller, and an agent on cluster-b.
struct Bed {
    // Fields drop in order: our processes stop before the API servers they talk to.
    _controller: xcc_e2e::Process,
    agent_b: Agent,
    bed: Testbed,
}

async fn bed(binaries: &xcc_e2e::Binaries) -> Bed {
    let bed = Testbed::start_named(binaries, &["management", "cluster-a", "cluster-b"])
        .await
        .unwrap();
    management(&bed, &["cluster-a", "cluster-b"]).await;
    let mgmt = bed.cluster("management");
    mgmt.kubectl(&["-n", "dev-team", "label", "cluster", "cluster-a", "site=a"])
        .await
        .unwrap();
    let kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let controller = controller(&bed, &kubeconfig.path);
    let agent_b = agent(bed.cluster("cluster-b")).await;
    Bed {
        _controller: controller,
        agent_b,
        bed,
    }
}

/// Node `name` on `cluster`, Ready or not, with `addresses` as (type, address).
pub(crate) async fn node(cluster: &Cluster, name: &str, ready: bool, addresses: &[(&str, &str)]) {
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{xcc.test/test: node-gateways}}}}\nspec: {{}}\n"
        ))
        .await
        .unwrap();
    let addresses: Vec<Value> = addresses
        .iter()
        .map(|(t, a)| serde_json::json!({"type": t, "address": a}))
        .collect();
    let status = serde_json::json!({"status": {"addresses": addresses}});
    cluster
        .kubectl(&[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ])
        .await
        .unwrap();
    set_ready(cluster, name, ready).await;
}

/// Sets condition Ready of node `name`.
pub(crate) async fn set_ready(cluster: &Cluster, name: &str, ready: bool) {
    let status = if ready { "True" } else { "False" };
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "Ready", "status": status, "reason": "ByTheTest",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}});
    cluster
        .kubectl(&[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ])
        .await
        .unwrap();
}

/// A GatewayDNS `nodes` of dev-team selecting cluster-a, with `spec` (YAML lines, indented).
async fn gatewaydns(mgmt: &Cluster, spec: &str) {
    mgmt.apply_yaml(&format!(
        "apiVersion: connectivity.tanzu.vmware.com/v1alpha1\nkind: GatewayDNS\n\
         metadata: {{name: nodes, namespace: dev-team}}\n\
         spec:\n  clusterSelector: {{matchLabels: {{site: a}}}}\n  service: projectcontour/envoy\n{spec}"
    ))
    .await
    .unwrap();
}

/// Merges `patch` (JSON) into the spec of GatewayDNS `dev-team/nodes`.
async fn patch_gatewaydns(mgmt: &Cluster, patch: &str) {
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "patch",
        "gatewaydns",
        "nodes",
        "--type=merge",
        "-p",
        &format!(r#"{{"spec":{patch}}}"#),
    ])
    .await
    .unwrap();
}

/// The SRV records `server` answers for `name` (`priority weight port target`), sorted.
async fn srv(server: std::net::SocketAddr, name: &str) -> Vec<String> {
    dig(server, name, "SRV").await.expect("dig runs").data
}

/// Waits until `server` answers `want` SRV records for `name`.
async fn wait_srv(server: std::net::SocketAddr, name: &str, want: &[&str], timeout: Duration) {
    wait_dig(server, name, "SRV", timeout, |answer| answer.data == want)
        .await
        .unwrap();
}

/// Waits until `server` answers the gateway's one SRV record for `service` (`_http._tcp`) with
/// `port`.
async fn wait_port(server: std::net::SocketAddr, service: &str, port: u16) {
    let name = format!("{service}.{GATEWAY}");
    wait_srv(server, &name, &[&format!("0 1 {port} {GATEWAY}.")], FIRST).await;
}

/// GatewayDNS `dev-team/nodes`'s status entry for cluster-a.
async fn entry(mgmt: &Cluster) -> Value {
    let json = mgmt
        .kubectl(&["-n", "dev-team", "get", "gatewaydns", "nodes", "-o", "json"])
        .await
        .unwrap();
    let gateway: Value = serde_json::from_str(&json).unwrap();
    gateway["status"]["clusters"]
        .as_array()
        .and_then(|c| c.iter().find(|e| e["cluster"] == "cluster-a"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Polls cluster-a's status entry until its `state` is `state` (at most `within`); the entry.
async fn wait_state(mgmt: &Cluster, state: &str, within: Duration) -> Value {
    let started = Instant::now();
    loop {
        let a = entry(mgmt).await;
        if a["state"] == state {
            return a;
        }
        assert!(started.elapsed() < within, "{a}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A change made by `change` leaves (or joins) the answer: how long until `server` answers
/// `then` for `name`/`qtype`, printed as `what`, and asserted within [`CHURN_BOUND`].
async fn measured(
    server: std::net::SocketAddr,
    (name, qtype): (&str, &str),
    what: &str,
    then: &[&str],
    change: impl std::future::Future<Output = ()>,
) {
    change.await;
    let took = wait_answer(server, name, qtype, then, Duration::from_secs(10)).await;
    println!("node churn: {what}: the answers changed after {took:?}");
    assert!(took <= CHURN_BOUND, "{what}: {took:?} > {CHURN_BOUND:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_port_answers_the_ready_schedulable_nodes_with_srv_and_node_churn_leaves_at_once() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let b = bed(&binaries).await;
    let (mgmt, ca) = (b.bed.cluster("management"), b.bed.cluster("cluster-a"));
    let dns = b.agent_b.dns;
    node(
        ca,
        "node-1",
        true,
        &[("InternalIP", "10.10.0.1"), ("ExternalIP", "203.0.113.1")],
    )
    .await;
    node(
        ca,
        "node-2",
        true,
        &[("InternalIP", "10.10.0.2"), ("InternalIP", "fd00:10::2")],
    )
    .await;
    node(ca, "node-3", false, &[("InternalIP", "10.10.0.3")]).await;
    ca.apply_yaml(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: projectcontour}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {name: envoy, namespace: projectcontour}\n\
         spec:\n  type: NodePort\n  ports:\n  - {name: http, port: 80, nodePort: 30080}\n\
         \x20 - {name: dns, port: 53, protocol: UDP, nodePort: 30053}\n",
    )
    .await
    .unwrap();
    gatewaydns(mgmt, "  resolutionType: nodePort\n").await;

    // The Ready nodes (node-3 is not), A for IPv4 and AAAA for IPv6; the node ports in SRV.
    wait_answer(dns, KUARD, "A", &["10.10.0.1", "10.10.0.2"], FIRST).await;
    wait_answer(dns, KUARD, "AAAA", &["fd00:10::2"], FIRST).await;
    wait_port(dns, "_http._tcp", 30080).await;
    wait_port(dns, "_dns._udp", 30053).await;
    let a = entry(mgmt).await;
    assert_eq!(a["state"], "Published", "{a}");
    assert_eq!(
        a["ports"],
        serde_json::json!([{"name": "dns", "protocol": "UDP", "port": 30053},
                           {"name": "http", "protocol": "TCP", "port": 30080}]),
        "{a}"
    );
    // The global name answers with the node addresses too.
    wait_answer(
        dns,
        "kuard.gateway.dev-team.global.xcc.test",
        "A",
        &["10.10.0.1", "10.10.0.2"],
        FIRST,
    )
    .await;
    // No node names unless asked.
    let names = xcc_e2e::xcc::dig(dns, NODES, "A").await.unwrap();
    assert_eq!(names.status, "NXDOMAIN", "{names:?}");

    // Cordoned: out of the answers.
    measured(
        dns,
        (KUARD, "A"),
        "node-1 cordoned",
        &["10.10.0.2"],
        async {
            ca.kubectl(&["cordon", "node-1"]).await.unwrap();
        },
    )
    .await;
    measured(
        dns,
        (KUARD, "A"),
        "node-1 uncordoned",
        &["10.10.0.1", "10.10.0.2"],
        async {
            ca.kubectl(&["uncordon", "node-1"]).await.unwrap();
        },
    )
    .await;
    // NotReady: out, both its families.
    measured(
        dns,
        (KUARD, "A"),
        "node-2 NotReady",
        &["10.10.0.1"],
        set_ready(ca, "node-2", false),
    )
    .await;
    wait_answer(dns, KUARD, "AAAA", &[], CHURN_BOUND).await;
    measured(
        dns,
        (KUARD, "A"),
        "node-2 Ready again",
        &["10.10.0.1", "10.10.0.2"],
        set_ready(ca, "node-2", true),
    )
    .await;

    // ExternalIP when asked: only node-1 has one.
    patch_gatewaydns(mgmt, r#"{"nodeAddressType":"ExternalIP"}"#).await;
    wait_answer(dns, KUARD, "A", &["203.0.113.1"], Duration::from_secs(10)).await;
    patch_gatewaydns(mgmt, r#"{"nodeAddressType":null}"#).await;
    wait_answer(
        dns,
        KUARD,
        "A",
        &["10.10.0.1", "10.10.0.2"],
        Duration::from_secs(10),
    )
    .await;

    // Node names, once asked: every Ready node (a cordoned one still is a node), and each.
    patch_gatewaydns(mgmt, r#"{"nodeNames":true}"#).await;
    wait_answer(
        dns,
        NODES,
        "A",
        &["10.10.0.1", "10.10.0.2"],
        Duration::from_secs(10),
    )
    .await;
    wait_answer(
        dns,
        &format!("node-2.{NODES}"),
        "AAAA",
        &["fd00:10::2"],
        CHURN_BOUND,
    )
    .await;
    ca.kubectl(&["cordon", "node-2"]).await.unwrap();
    wait_answer(dns, KUARD, "A", &["10.10.0.1"], CHURN_BOUND).await;
    let names = xcc_e2e::xcc::dig(dns, NODES, "A").await.unwrap();
    assert_eq!(names.data, ["10.10.0.1", "10.10.0.2"], "{names:?}");
    ca.kubectl(&["uncordon", "node-2"]).await.unwrap();
    wait_answer(dns, KUARD, "A", &["10.10.0.1", "10.10.0.2"], CHURN_BOUND).await;

    // Deleted: out of every answer at once.
    measured(dns, (KUARD, "A"), "node-1 deleted", &["10.10.0.2"], async {
        ca.kubectl(&["delete", "node", "node-1", "--wait=false"])
            .await
            .unwrap();
    })
    .await;
    wait_dig(dns, &format!("node-1.{NODES}"), "A", CHURN_BOUND, |a| {
        a.status == "NXDOMAIN"
    })
    .await
    .unwrap();
    wait_answer(dns, NODES, "A", &["10.10.0.2"], CHURN_BOUND).await;

    // A Service that is not of a type with node ports says so.
    ca.kubectl(&[
        "-n",
        "projectcontour",
        "patch",
        "service",
        "envoy",
        "--type=merge",
        "-p",
        r#"{"spec":{"type":"ClusterIP","ports":[{"name":"http","port":80,"nodePort":null},{"name":"dns","port":53,"protocol":"UDP","nodePort":null}]}}"#,
    ])
    .await
    .unwrap();
    let a = wait_state(mgmt, "NotNodePort", Duration::from_secs(10)).await;
    let message = a["message"].as_str().unwrap_or_default();
    assert!(message.contains("type ClusterIP"), "{message}");
    wait_dig(dns, KUARD, "A", Duration::from_secs(10), |a| {
        a.status == "NXDOMAIN"
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_port_answers_only_the_nodes_that_run_a_ready_endpoint() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let b = bed(&binaries).await;
    let (mgmt, ca) = (b.bed.cluster("management"), b.bed.cluster("cluster-a"));
    let dns = b.agent_b.dns;
    for (i, name) in ["node-1", "node-2", "node-3"].iter().enumerate() {
        let ip = format!("10.20.0.{}", i + 1);
        node(ca, name, true, &[("InternalIP", &ip)]).await;
    }
    // A selector-less Service, and its EndpointSlice written by hand: a ready endpoint on
    // node-1, one not ready on node-2, none on node-3; port `http` at 8080 (no pod to read:
    // the host port is that port).
    let slice = |node2_ready: bool| {
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: envoy-1, namespace: projectcontour, labels: {{kubernetes.io/service-name: envoy}}}}\n\
             addressType: IPv4\n\
             ports: [{{name: http, port: 8080, protocol: TCP}}]\n\
             endpoints:\n\
             - {{addresses: [192.168.1.1], nodeName: node-1, conditions: {{ready: true}}}}\n\
             - {{addresses: [192.168.1.2], nodeName: node-2, conditions: {{ready: {node2_ready}}}}}\n"
        )
    };
    ca.apply_yaml(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: projectcontour}}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: envoy, namespace: projectcontour}}\n\
         spec:\n  ports: [{{name: http, port: 80, targetPort: 8080}}]\n---\n{}",
        slice(false)
    ))
    .await
    .unwrap();
    gatewaydns(mgmt, "  resolutionType: hostPort\n").await;
    wait_answer(dns, KUARD, "A", &["10.20.0.1"], FIRST).await;
    wait_port(dns, "_http._tcp", 8080).await;
    // The pod on node-2 turns ready: node-2 joins.
    measured(
        dns,
        (KUARD, "A"),
        "node-2's endpoint ready",
        &["10.20.0.1", "10.20.0.2"],
        async {
            ca.apply_yaml(&slice(true)).await.unwrap();
        },
    )
    .await;
    // node-1 NotReady: it leaves, though its endpoint is still listed ready.
    measured(
        dns,
        (KUARD, "A"),
        "node-1 NotReady",
        &["10.20.0.2"],
        set_ready(ca, "node-1", false),
    )
    .await;
    // Node names are not published: not asked.
    let names = xcc_e2e::xcc::dig(dns, NODES, "A").await.unwrap();
    assert_eq!(names.status, "NXDOMAIN", "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cluster_that_stops_answering_keeps_its_records_until_the_stale_record_policy_withdraws_them()
 {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let b = bed(&binaries).await;
    let (mgmt, ca) = (b.bed.cluster("management"), b.bed.cluster("cluster-a"));
    let dns = b.agent_b.dns;
    node(ca, "node-1", true, &[("InternalIP", "10.30.0.1")]).await;
    ca.apply_yaml(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: projectcontour}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {name: envoy, namespace: projectcontour}\n\
         spec:\n  type: NodePort\n  ports: [{name: http, port: 80, nodePort: 30080}]\n",
    )
    .await
    .unwrap();
    gatewaydns(
        mgmt,
        "  resolutionType: nodePort\n  nodeNames: true\n  staleRecords: {withdrawAfter: 20s, readmitAfter: 1}\n",
    )
    .await;
    wait_answer(dns, KUARD, "A", &["10.30.0.1"], FIRST).await;
    wait_answer(dns, &format!("node-1.{NODES}"), "A", &["10.30.0.1"], FIRST).await;
    let http = format!("_http._tcp.{GATEWAY}");
    let record = format!("0 1 30080 {GATEWAY}.");
    wait_srv(dns, &http, &[&record], FIRST).await;

    // cluster-a's API server goes away: the controller says so, and the records stay.
    ca.stop();
    wait_state(mgmt, "Unreachable", Duration::from_secs(30)).await;
    // Well within withdrawAfter (20 s: wide enough for a slow `kubectl get` on a busy machine to
    // see the state before the withdrawal) of the controller's noticing.
    let kept = xcc_e2e::xcc::dig(dns, KUARD, "A").await.unwrap();
    assert_eq!(kept.data, ["10.30.0.1"], "kept while unreachable");
    assert_eq!(srv(dns, &http).await, std::slice::from_ref(&record));
    // withdrawAfter: every record of it goes, node names and SRV included.
    wait_dig(dns, KUARD, "A", Duration::from_secs(45), |a| {
        a.status == "NXDOMAIN"
    })
    .await
    .unwrap();
    assert_eq!(entry(mgmt).await["state"], "Withdrawn");
    let names = xcc_e2e::xcc::dig(dns, &format!("node-1.{NODES}"), "A")
        .await
        .unwrap();
    assert_eq!(names.status, "NXDOMAIN", "{names:?}");
    assert!(srv(dns, &http).await.is_empty());

    // Back, and readmitted after one good health check.
    ca.restart().await.unwrap();
    wait_answer(dns, KUARD, "A", &["10.30.0.1"], Duration::from_secs(60)).await;
    wait_answer(
        dns,
        &format!("node-1.{NODES}"),
        "A",
        &["10.30.0.1"],
        Duration::from_secs(10),
    )
    .await;
    wait_srv(dns, &http, &[&record], Duration::from_secs(10)).await;
}

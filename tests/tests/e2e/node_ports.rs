//! NodePort and hostPort gateways on real nodes, on clusters with identical pod and Service ranges
//! (the original XCC's premise: no pod routing between clusters at all).
//!
//! `cluster-a` and `cluster-b` have a node each and run `manifests/install/workload` as a user
//! installs it; xcc-controller runs beside the management cluster. One GatewayDNS of namespace
//! `dev-team` selects cluster-a and is edited through the resolution types:
//! - `nodePort`: a pod of cluster-b looks up `web.gateway.cluster-a.dev-team.clusters.xcc.test`
//!   through its own CoreDNS, gets cluster-a's node address, the node port from the SRV record,
//!   and fetches the page from it; cluster-a's pod address gives it nothing. The opt-in node
//!   names answer. The node drained, made NotReady, and (last) deleted each leaves the answers,
//!   measured from the change at cluster-b's agent and printed;
//! - `hostPort`, a DaemonSet and then a Deployment: the address of the node that runs a ready
//!   pod, the host port in SRV, the page fetched from a pod of cluster-b; the Deployment scaled to
//!   0 leaves the answers, back at 1.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use xcc_e2e::{
    BedOptions, Cluster, NetworkMode, Testbed, require_node_testbed,
    xcc::{DigAnswer, wait_dig},
};

use crate::{
    nodes::httpd as web,
    pods::{client_pod, fetch, install_workload, nslookup as nslookup_a, until},
    xcc_dns::{controller, management},
};

const CLUSTERS: [&str; 3] = ["management", "cluster-a", "cluster-b"];
const NODE_CLUSTERS: [&str; 2] = ["cluster-a", "cluster-b"];
const NAME: &str = "web.gateway.cluster-a.dev-team.clusters.xcc.test";
const SRV: &str = "_http._tcp.gateway.cluster-a.dev-team.clusters.xcc.test";
const TARGET: &str = "gateway.cluster-a.dev-team.clusters.xcc.test.";
/// How soon a node that turns NotReady or is cordoned (drained) leaves the answers (issue #37's bound,
/// the same as for an endpoint that turns not ready).
const CHURN_BOUND: Duration = Duration::from_secs(2);
/// The host ports of the hostPort gateways.
const DAEMONSET_PORT: u16 = 18080;
const DEPLOYMENT_PORT: u16 = 18081;

/// The GatewayDNS of namespace dev-team, selecting cluster-a only.
fn gateway_dns(resolution: &str, service: &str) -> String {
    format!(
        "apiVersion: connectivity.tanzu.vmware.com/v1alpha1
kind: GatewayDNS
metadata: {{name: gateway, namespace: dev-team}}
spec:
  clusterSelector:
    matchLabels: {{gateway: 'yes'}}
  service: {service}
  resolutionType: {resolution}
  nodeNames: true
"
    )
}

/// A NodePort Service in front of the agents of `c`, so that the host asks them directly (pod
/// addresses are not routed in this bed) and times changes to the millisecond; returns where.
async fn agent_from_host(c: &Cluster) -> SocketAddr {
    c.apply_yaml(
        "apiVersion: v1
kind: Service
metadata: {name: dns-from-host, namespace: xcc-dns}
spec:
  type: NodePort
  selector: {app.kubernetes.io/name: xcc-agent}
  ports:
  - {name: dns, port: 53, targetPort: dns, protocol: UDP}
",
    )
    .await
    .unwrap();
    let port = c
        .kubectl(&[
            "-n",
            "xcc-dns",
            "get",
            "service",
            "dns-from-host",
            "-o",
            "jsonpath={.spec.ports[0].nodePort}",
        ])
        .await
        .unwrap();
    let node_ip = c.node().unwrap().plan.node_ip;
    SocketAddr::new(node_ip.into(), port.trim().parse().unwrap())
}

/// What `nslookup -type=<qtype> name` in cluster's client pod prints, and whether it succeeded.
async fn nslookup(c: &Cluster, qtype: &str, name: &str) -> (bool, String) {
    let script = format!("nslookup -type={qtype} {name} 2>&1; echo exit=$?");
    match c.exec("default", "client", &["sh", "-c", &script]).await {
        Ok(out) => (out.contains("exit=0"), out),
        Err(e) => (false, e.to_string()),
    }
}

/// The port of the SRV record a pod's lookup of `name` gives (`... service = 0 W PORT target`).
async fn pod_srv_port(c: &Cluster, name: &str) -> Result<u16, String> {
    let (ok, out) = nslookup(c, "srv", name).await;
    let port = out
        .lines()
        .find_map(|l| l.split("service = ").nth(1))
        .and_then(|rdata| rdata.split_whitespace().nth(2)?.parse().ok());
    match port {
        Some(port) if ok => Ok(port),
        _ => Err(out),
    }
}

/// An answer with exactly the addresses `ips`.
fn exactly(ips: &[&str]) -> impl Fn(&DigAnswer) -> bool {
    let want: Vec<String> = ips.iter().map(|s| s.to_string()).collect();
    move |answer| answer.status == "NOERROR" && answer.data == want
}

/// An answer without any address (the name gone, or there without addresses).
fn no_address(answer: &DigAnswer) -> bool {
    matches!(answer.status.as_str(), "NXDOMAIN" | "NOERROR") && answer.data.is_empty()
}

/// Times, at cluster-b's agent, how long after `change` the name answers as `check` wants
/// (at most `within`), prints it as `what`, and returns it.
async fn timed(
    agent: SocketAddr,
    what: &str,
    within: Duration,
    check: impl Fn(&DigAnswer) -> bool,
) -> Duration {
    let took = wait_dig(agent, NAME, "A", within, check)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    eprintln!("{what}: {:.0} ms", took.as_secs_f64() * 1000.0);
    took
}

/// The pid of cluster's kubelet (its node's process whose command is `kubelet`).
fn kubelet_pid(c: &Cluster) -> u32 {
    let node = c.node().unwrap();
    node.pids()
        .into_iter()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "kubelet")
        })
        .expect("the node runs a kubelet")
}

/// `kill -<signal> pid`.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// The node's Ready condition, as its status says.
async fn node_ready(c: &Cluster, node: &str) -> String {
    c.kubectl(&[
        "get",
        "node",
        node,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ])
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[expect(
    clippy::too_many_lines,
    reason = "one story on one expensive test bed, told in order"
)]
async fn node_port_and_host_port_gateways_answer_pods_of_another_cluster() {
    let Some(binaries) = require_node_testbed() else {
        return;
    };
    let bed = Testbed::start_with_options(
        &binaries,
        &CLUSTERS,
        &NODE_CLUSTERS,
        BedOptions {
            network: NetworkMode::IdenticalRanges,
        },
    )
    .await
    .unwrap();
    let (mgmt, ca, cb) = (
        bed.cluster("management"),
        bed.cluster("cluster-a"),
        bed.cluster("cluster-b"),
    );
    let node_a = ca.node().unwrap().plan.clone();
    let node_ip = node_a.node_ip.to_string();
    assert_eq!(node_a.pod_cidr, cb.node().unwrap().plan.pod_cidr);

    management(&bed, &["cluster-a", "cluster-b"]).await;
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "label",
        "cluster",
        "cluster-a",
        "gateway=yes",
    ])
    .await
    .unwrap();
    let kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let _controller = controller(&bed, &kubeconfig.path);
    for c in [ca, cb] {
        install_workload(c).await;
        c.apply_yaml(&client_pod()).await.unwrap();
    }
    ca.apply_yaml(&web(
        "Deployment",
        "web",
        "node-port-page",
        80,
        None,
        "NodePort",
    ))
    .await
    .unwrap();
    let node_port: u16 = ca
        .kubectl(&[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.spec.ports[0].nodePort}",
        ])
        .await
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    ca.wait_rollout("default", "web", Duration::from_secs(60))
        .await
        .unwrap();
    for c in [ca, cb] {
        c.wait_pod_ready("default", "client", Duration::from_secs(60))
            .await
            .unwrap();
    }
    let agent_b = agent_from_host(cb).await;
    // Before the GatewayDNS, cluster-b's agents (asked from the host) know no such name.
    wait_dig(agent_b, NAME, "A", Duration::from_secs(30), |a| {
        a.status == "NXDOMAIN"
    })
    .await
    .unwrap();

    // 1. nodePort: from a pod of cluster-b, the name gives cluster-a's node, the SRV record its
    //    node port, and the page answers there.
    let applied = Instant::now();
    mgmt.apply_yaml(&gateway_dns("nodePort", "default/web"))
        .await
        .unwrap();
    until(
        "cluster-b's pod resolves the nodePort name to cluster-a's node",
        Duration::from_secs(60),
        || async {
            match nslookup_a(cb, NAME).await {
                Ok(ips) if ips == [node_ip.clone()] => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    eprintln!(
        "nodePort name answered in cluster-b's pod {:.2} s after the GatewayDNS was applied",
        applied.elapsed().as_secs_f64()
    );
    assert_eq!(pod_srv_port(cb, SRV).await, Ok(node_port));
    wait_dig(agent_b, SRV, "SRV", Duration::from_secs(5), |a| {
        a.data.len() == 1 && a.data[0].ends_with(&format!(" {node_port} {TARGET}"))
    })
    .await
    .unwrap();
    let url = format!("http://{NAME}:{node_port}/");
    until(
        "cluster-b's pod fetches the page at the node port",
        Duration::from_secs(20),
        || async {
            match fetch(cb, &url).await {
                Ok(page) if page == "node-port-page" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    // cluster-a's pod address is out of cluster-b's reach (the same range is cluster-b's own).
    let web_pod = ca
        .kubectl(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].status.podIP}",
        ])
        .await
        .unwrap();
    let direct = fetch(cb, &format!("http://{}/", web_pod.trim())).await;
    assert_ne!(
        direct.as_deref(),
        Ok("node-port-page"),
        "cluster-a's pod reached from cluster-b"
    );
    // The node names, asked for with `nodeNames: true`.
    for name in [
        "nodes.cluster-a.dev-team.clusters.xcc.test".to_string(),
        format!(
            "{}.nodes.cluster-a.dev-team.clusters.xcc.test",
            node_a.node_name
        ),
    ] {
        until(
            &format!("cluster-b's pod resolves {name}"),
            Duration::from_secs(10),
            || async {
                match nslookup_a(cb, &name).await {
                    Ok(ips) if ips == [node_ip.clone()] => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }

    // 2. Node churn, timed at cluster-b's agent from the change. Drained (cordoned, then its
    //    pods deleted; the agents' PodDisruptionBudget cannot be met on a one-node cluster, so
    //    without eviction), timed from the start of `kubectl drain`.
    let drain = [
        "drain",
        &node_a.node_name,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--force",
        "--disable-eviction",
        "--timeout=120s",
    ];
    let drained = ca.kubectl(&drain);
    let out = timed(
        agent_b,
        "drained node out of the answers",
        Duration::from_secs(30),
        no_address,
    );
    let (drained, took) = tokio::join!(drained, out);
    drained.unwrap();
    assert!(took <= CHURN_BOUND, "drained: {took:?}");
    ca.kubectl(&["uncordon", &node_a.node_name]).await.unwrap();
    timed(
        agent_b,
        "uncordoned node back",
        Duration::from_secs(30),
        exactly(&[&node_ip]),
    )
    .await;

    // NotReady: the kubelet frozen (so that it cannot post Ready again), the condition written
    // as the node lifecycle controller writes it; thawed, the kubelet says Ready again.
    let kubelet = kubelet_pid(ca);
    signal(kubelet, "STOP");
    ca.kubectl(&[
        "patch",
        "node",
        &node_a.node_name,
        "--subresource=status",
        "--type=strategic",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletStopped","message":"frozen by the test"}]}}"#,
    ])
    .await
    .unwrap();
    let took = timed(
        agent_b,
        "NotReady node out of the answers",
        Duration::from_secs(30),
        no_address,
    )
    .await;
    signal(kubelet, "CONT");
    assert!(took <= CHURN_BOUND, "NotReady: {took:?}");
    timed(
        agent_b,
        "node Ready again, back",
        Duration::from_secs(60),
        exactly(&[&node_ip]),
    )
    .await;
    assert_eq!(node_ready(ca, &node_a.node_name).await, "True");

    // 3. hostPort, a DaemonSet: the nodes that run a ready pod; the host port in SRV.
    ca.apply_yaml(&web(
        "DaemonSet",
        "edge",
        "daemonset-page",
        8080,
        Some(DAEMONSET_PORT),
        "ClusterIP",
    ))
    .await
    .unwrap();
    ca.apply_yaml(&web(
        "Deployment",
        "edge-one",
        "deployment-page",
        8081,
        Some(DEPLOYMENT_PORT),
        "ClusterIP",
    ))
    .await
    .unwrap();
    ca.wait_rollout("default", "edge-one", Duration::from_secs(60))
        .await
        .unwrap();
    for (service, port, page) in [
        ("default/edge", DAEMONSET_PORT, "daemonset-page"),
        ("default/edge-one", DEPLOYMENT_PORT, "deployment-page"),
    ] {
        mgmt.apply_yaml(&gateway_dns("hostPort", service))
            .await
            .unwrap();
        wait_dig(agent_b, SRV, "SRV", Duration::from_secs(60), |a| {
            a.data.len() == 1 && a.data[0].ends_with(&format!(" {port} {TARGET}"))
        })
        .await
        .unwrap_or_else(|e| panic!("hostPort {service}: {e}"));
        timed(
            agent_b,
            &format!("hostPort {service} answers"),
            Duration::from_secs(30),
            exactly(&[&node_ip]),
        )
        .await;
        let url = format!("http://{NAME}:{port}/");
        until(
            &format!("cluster-b's pod fetches {url}"),
            Duration::from_secs(30),
            || async {
                match (pod_srv_port(cb, SRV).await, fetch(cb, &url).await) {
                    (Ok(p), Ok(got)) if p == port && got == page => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    // The Deployment without a pod: no node runs one, the name answers no address; back with one.
    ca.kubectl(&["scale", "deployment", "edge-one", "--replicas=0"])
        .await
        .unwrap();
    timed(
        agent_b,
        "hostPort Deployment scaled to 0, out",
        Duration::from_secs(30),
        no_address,
    )
    .await;
    ca.kubectl(&["scale", "deployment", "edge-one", "--replicas=1"])
        .await
        .unwrap();
    timed(
        agent_b,
        "hostPort Deployment scaled to 1, back",
        Duration::from_secs(60),
        exactly(&[&node_ip]),
    )
    .await;

    // 4. The node deleted (last: its kubelet does not register it again): out at once.
    mgmt.apply_yaml(&gateway_dns("nodePort", "default/web"))
        .await
        .unwrap();
    wait_dig(agent_b, SRV, "SRV", Duration::from_secs(30), |a| {
        a.data.len() == 1 && a.data[0].ends_with(&format!(" {node_port} {TARGET}"))
    })
    .await
    .unwrap();
    ca.kubectl(&["delete", "node", &node_a.node_name, "--wait=false"])
        .await
        .unwrap();
    let took = timed(
        agent_b,
        "deleted node out of the answers",
        Duration::from_secs(30),
        no_address,
    )
    .await;
    assert!(took <= CHURN_BOUND, "deleted: {took:?}");
}

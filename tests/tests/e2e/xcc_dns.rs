//! Cross-cluster DNS end to end: the XCC walkthrough on three real API servers, with our
//! controller and agents running under kubeconfigs minted from our manifests' ServiceAccounts.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::{
    ByteString,
    api::{core::v1::Secret, discovery::v1::EndpointSlice},
};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use xcc_e2e::{
    Cluster, Testbed, require_testbed, spawn,
    xcc::{Agent, CoreDns, binary, coredns_patcher, dig, wait_dig},
};

pub(crate) const KUARD: &str = "kuard.gateway.cluster-a.dev-team.clusters.xcc.test";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub(crate) fn manifest(path: &str) -> String {
    repo().join(path).display().to_string()
}

/// Management cluster set up as in the walkthrough: CRDs, our controller's RBAC, namespace
/// dev-team with one Cluster API Cluster (labelled hasContour=true) and kubeconfig Secret per
/// workload cluster.
pub(crate) async fn management(bed: &Testbed, workloads: &[&str]) {
    let mgmt = bed.cluster("management");
    mgmt.install_crds(&repo().join("manifests/crds"))
        .await
        .unwrap();
    mgmt.kubectl(&[
        "apply",
        "-f",
        &manifest("manifests/controller/controller.yaml"),
    ])
    .await
    .unwrap();
    mgmt.kubectl(&["create", "namespace", "dev-team"])
        .await
        .unwrap();
    for name in workloads {
        mgmt.apply_yaml(&format!(
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {{name: {name}, namespace: dev-team}}\nspec: {{}}\n"
        ))
        .await
        .unwrap();
        mgmt.kubectl(&[
            "-n",
            "dev-team",
            "label",
            "cluster",
            name,
            "hasContour=true",
            "--overwrite",
        ])
        .await
        .unwrap();
        let kubeconfig = std::fs::read(&bed.cluster(name).kubeconfig).unwrap();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(format!("{name}-kubeconfig")),
                namespace: Some("dev-team".into()),
                labels: Some(
                    [(
                        "cluster.x-k8s.io/cluster-name".to_string(),
                        name.to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            data: Some([("value".to_string(), ByteString(kubeconfig))].into()),
            ..Default::default()
        };
        Api::<Secret>::namespaced(mgmt.client.clone(), "dev-team")
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
}

/// Our agent on a workload cluster, under the manifests' ServiceAccount.
pub(crate) async fn agent(cluster: &Cluster) -> Agent {
    agent_with(cluster, &[]).await
}

/// The same, with `extra` flags.
pub(crate) async fn agent_with(cluster: &Cluster, extra: &[&str]) -> Agent {
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
        extra,
    )
    .unwrap();
    agent.wait_ready(Duration::from_secs(30)).await.unwrap();
    agent
}

/// The cluster's own CoreDNS, as kubeadm installs it (its `kubernetes` plugin left out: nothing
/// here runs pods), with the Corefile that our patcher, under the ServiceAccount of our Job
/// manifest, made forward the zone to `agent`.
async fn coredns(bed: &Testbed, cluster: &Cluster, agent: &Agent) -> CoreDns {
    cluster
        .apply_yaml(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: coredns, namespace: kube-system}\n\
             data:\n  Corefile: |\n    . {\n        errors\n        cache 30\n        loadbalance\n    }\n",
        )
        .await
        .unwrap();
    cluster
        .kubectl(&[
            "apply",
            "-f",
            &manifest("manifests/coredns-patcher/job.yaml"),
        ])
        .await
        .unwrap();
    let kubeconfig = cluster
        .mint_kubeconfig("xcc-dns", "xcc-coredns-patcher")
        .await
        .unwrap();
    let forward = format!("--forward-to={}", agent.dns);
    // CoreDNS runs here as a process, not as the pods of a Service the patcher would ask.
    let forward = [forward.as_str(), "--coredns-wait=0s"];
    let first = coredns_patcher(&kubeconfig.path, &forward).await.unwrap();
    assert!(first.contains("Corefile updated"), "{first}");
    let again = coredns_patcher(&kubeconfig.path, &forward).await.unwrap();
    assert!(
        again.contains("already up to date"),
        "a second run changes nothing: {again}"
    );
    let corefile = cluster
        .kubectl(&[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "coredns",
            "-o",
            "jsonpath={.data.Corefile}",
        ])
        .await
        .unwrap();
    assert!(
        corefile.contains(&format!(
            "### BEGIN CROSS CLUSTER CONNECTIVITY\nxcc.test {{\n    forward . {}\n    reload\n}}\n### END CROSS CLUSTER CONNECTIVITY",
            agent.dns
        )),
        "{corefile}"
    );
    assert!(
        corefile.starts_with(". {\n    errors"),
        "the rest is kept: {corefile}"
    );
    CoreDns::start(&bed.binaries.coredns, &corefile, cluster.dir())
        .await
        .unwrap()
}

pub(crate) fn controller(bed: &Testbed, kubeconfig: &Path) -> xcc_e2e::Process {
    controller_with_admin(bed, kubeconfig).0
}

/// The controller and the address of its admin server.
pub(crate) fn controller_with_admin(
    bed: &Testbed,
    kubeconfig: &Path,
) -> (xcc_e2e::Process, SocketAddr) {
    let mgmt = bed.cluster("management");
    let admin: SocketAddr = format!("127.0.0.1:{}", xcc_e2e::free_port())
        .parse()
        .unwrap();
    let process = spawn(
        "xcc-controller",
        &binary("xcc-controller"),
        &[
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--admin-listen={admin}"),
            "--log=info,xcc_controller=debug".into(),
        ],
        &mgmt.dir().join("xcc-controller.log"),
    )
    .unwrap();
    (process, admin)
}

/// A fresh controller, before any GatewayDNS, serves the metrics of docs/metrics.md with their
/// documented labels (the per-cluster state has no series before a cluster is selected).
async fn controller_serves_the_documented_metrics(admin: SocketAddr) {
    let page = std::fs::read_to_string(manifest("docs/metrics.md")).unwrap();
    let mut last = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = xcc_e2e::xcc::metrics_text(admin).await {
            match xcc_kube::metrics::check_served(&text, &page, "xcc-controller", |m| {
                m == "xcc_controller_cluster_state"
            }) {
                Ok(()) => return,
                Err(difference) => last = format!("{difference}:\n{text}"),
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the controller's /metrics at {admin}: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(crate) async fn set_lb(cluster: &Cluster, ingress: &str) {
    cluster
        .kubectl(&[
            "-n",
            "projectcontour",
            "patch",
            "service",
            "envoy",
            "--subresource=status",
            "--type=merge",
            "-p",
            &format!(r#"{{"status":{{"loadBalancer":{{"ingress":{ingress}}}}}}}"#),
        ])
        .await
        .unwrap();
}

pub(crate) async fn envoy(cluster: &Cluster, ingress: &str) {
    cluster
        .apply_yaml(
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: projectcontour}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {name: envoy, namespace: projectcontour}\n\
             spec:\n  type: LoadBalancer\n  ports: [{name: http, port: 80}]\n",
        )
        .await
        .unwrap();
    set_lb(cluster, ingress).await;
}

pub(crate) fn a(ips: &[&str]) -> impl Fn(&xcc_e2e::xcc::DigAnswer) -> bool {
    let want: Vec<String> = ips.iter().map(|s| s.to_string()).collect();
    move |answer| answer.status == "NOERROR" && answer.data == want
}

/// Waits (at most `timeout`) until `server` answers exactly `data` to a `qtype` question for
/// `name`; returns how long that took.
pub(crate) async fn wait_answer(
    server: SocketAddr,
    name: &str,
    qtype: &str,
    data: &[&str],
    timeout: Duration,
) -> Duration {
    wait_dig(server, name, qtype, timeout, a(data))
        .await
        .unwrap()
}

fn nxdomain(answer: &xcc_e2e::xcc::DigAnswer) -> bool {
    answer.status == "NXDOMAIN"
}

/// The XCC walkthrough on management + cluster-a + cluster-b: our controller, an agent on each
/// workload cluster, envoy on cluster-a with load-balancer `ingress`, the GatewayDNS of the
/// walkthrough applied verbatim, and cluster-b's agent answering with that address.
pub(crate) struct Walkthrough {
    // Fields drop in order: our processes stop before the API servers they talk to.
    _controller: xcc_e2e::Process,
    pub agent_a: Agent,
    pub agent_b: Agent,
    pub bed: Testbed,
    /// From applying the GatewayDNS to the first answer from cluster-b's agent.
    pub took: Duration,
}

pub(crate) async fn walkthrough(binaries: &xcc_e2e::Binaries, ingress: &str) -> Walkthrough {
    let bed = Testbed::start_named(binaries, &["management", "cluster-a", "cluster-b"])
        .await
        .unwrap();
    management(&bed, &["cluster-a", "cluster-b"]).await;
    let mgmt = bed.cluster("management");
    let kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let (controller, admin) = controller_with_admin(&bed, &kubeconfig.path);
    controller_serves_the_documented_metrics(admin).await;
    let (ca, cb) = (bed.cluster("cluster-a"), bed.cluster("cluster-b"));
    let agent_a = agent(ca).await;
    let agent_b = agent(cb).await;
    envoy(ca, ingress).await;
    let ip: serde_json::Value = serde_json::from_str(ingress).unwrap();
    let ip = ip[0]["ip"].as_str().unwrap().to_string();
    // The GatewayDNS of the walkthrough, verbatim.
    mgmt.kubectl(&[
        "apply",
        "-f",
        &manifest("manifests/examples/dev-team-gateway-dns.yaml"),
    ])
    .await
    .unwrap();
    let took = wait_answer(agent_b.dns, KUARD, "A", &[&ip], Duration::from_secs(30)).await;
    Walkthrough {
        _controller: controller,
        agent_a,
        agent_b,
        bed,
        took,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walkthrough_and_every_change_after_it() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let w = walkthrough(&binaries, r#"[{"ip":"10.1.2.3"}]"#).await;
    let (bed, agent_a, agent_b) = (&w.bed, &w.agent_a, &w.agent_b);
    let mgmt = bed.cluster("management");
    let (ca, cb) = (bed.cluster("cluster-a"), bed.cluster("cluster-b"));
    let took = w.took;
    eprintln!(
        "walkthrough: resolvable from cluster-b {:.2} s after the GatewayDNS",
        took.as_secs_f64()
    );
    // What a pod on cluster-b asks: its cluster's CoreDNS, which forwards the zone to our agent.
    let coredns_b = coredns(bed, cb, agent_b).await;
    wait_answer(
        coredns_b.dns,
        KUARD,
        "A",
        &["10.1.2.3"],
        Duration::from_secs(10),
    )
    .await;
    wait_answer(
        agent_a.dns,
        KUARD,
        "A",
        &["10.1.2.3"],
        Duration::from_secs(5),
    )
    .await;
    // The bare gateway name too, and NODATA (not NXDOMAIN) for a type it lacks.
    wait_answer(
        agent_b.dns,
        "gateway.cluster-a.dev-team.clusters.xcc.test",
        "A",
        &["10.1.2.3"],
        Duration::from_secs(5),
    )
    .await;
    let aaaa = dig(agent_b.dns, KUARD, "AAAA").await.unwrap();
    assert_eq!(
        (aaaa.status.as_str(), aaaa.data.len()),
        ("NOERROR", 0),
        "{aaaa:?}"
    );

    // Status explains cluster-b (no envoy Service there).
    let table = mgmt
        .kubectl(&["-n", "dev-team", "get", "gatewaydns"])
        .await
        .unwrap();
    assert!(table.contains("1/2 published"), "{table}");
    assert!(table.contains("ServiceNotFound"), "{table}");

    // The load-balancer address changes: the new answer follows in well under a second.
    set_lb(ca, r#"[{"ip":"10.1.2.4"}]"#).await;
    let took = wait_answer(
        coredns_b.dns,
        KUARD,
        "A",
        &["10.1.2.4"],
        Duration::from_secs(10),
    )
    .await;
    eprintln!(
        "LB change visible on cluster-b after {:.3} s",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(3), "propagation took {took:?}");

    // IPv6 → AAAA; a load balancer host name → CNAME.
    set_lb(ca, r#"[{"ip":"10.1.2.4"},{"ip":"fd00::4"}]"#).await;
    wait_answer(
        agent_b.dns,
        KUARD,
        "AAAA",
        &["fd00::4"],
        Duration::from_secs(10),
    )
    .await;
    envoy(cb, r#"[{"hostname":"lb-1234.elb.example.com"}]"#).await;
    let kuard_b = "kuard.gateway.cluster-b.dev-team.clusters.xcc.test";
    wait_answer(
        agent_a.dns,
        kuard_b,
        "CNAME",
        &["lb-1234.elb.example.com."],
        Duration::from_secs(10),
    )
    .await;
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "wait",
        "gatewaydns/dev-team-gateway-dns",
        "--for=condition=Ready",
        "--timeout=20s",
    ])
    .await
    .unwrap();

    // A slice made by a person in xcc-dns is never touched.
    cb.apply_yaml(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: by-hand\n  namespace: xcc-dns\n\
         \x20 annotations: {connectivity.tanzu.vmware.com/dns-hostname: manual.xcc.test}\naddressType: IPv4\n\
         endpoints: [{addresses: [10.9.9.9]}]\n",
    )
    .await
    .unwrap();
    wait_answer(
        agent_b.dns,
        "manual.xcc.test",
        "A",
        &["10.9.9.9"],
        Duration::from_secs(10),
    )
    .await;

    // Selector change: cluster-b withdrawn everywhere, then added back.
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "label",
        "cluster",
        "cluster-b",
        "hasContour-",
    ])
    .await
    .unwrap();
    wait_dig(
        agent_a.dns,
        kuard_b,
        "CNAME",
        Duration::from_secs(10),
        nxdomain,
    )
    .await
    .unwrap();
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "label",
        "cluster",
        "cluster-b",
        "hasContour=true",
    ])
    .await
    .unwrap();
    wait_answer(
        agent_a.dns,
        kuard_b,
        "CNAME",
        &["lb-1234.elb.example.com."],
        Duration::from_secs(10),
    )
    .await;

    // Service deleted → withdrawn; restored → back.
    ca.kubectl(&["-n", "projectcontour", "delete", "service", "envoy"])
        .await
        .unwrap();
    wait_dig(agent_b.dns, KUARD, "A", Duration::from_secs(10), nxdomain)
        .await
        .unwrap();
    envoy(ca, r#"[{"ip":"10.1.2.5"}]"#).await;
    wait_answer(
        agent_b.dns,
        KUARD,
        "A",
        &["10.1.2.5"],
        Duration::from_secs(10),
    )
    .await;

    // GatewayDNS deleted → NXDOMAIN everywhere; the person's slice stays.
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "delete",
        "gatewaydns",
        "dev-team-gateway-dns",
        "--timeout=30s",
    ])
    .await
    .unwrap();
    wait_dig(agent_b.dns, KUARD, "A", Duration::from_secs(10), nxdomain)
        .await
        .unwrap();
    wait_dig(coredns_b.dns, KUARD, "A", Duration::from_secs(10), nxdomain)
        .await
        .unwrap();
    wait_dig(agent_a.dns, kuard_b, "A", Duration::from_secs(10), nxdomain)
        .await
        .unwrap();
    let slices = Api::<EndpointSlice>::namespaced(cb.client.clone(), "xcc-dns");
    assert!(
        slices.get_opt("by-hand").await.unwrap().is_some(),
        "a person's slice is never deleted"
    );
    assert_eq!(
        dig(agent_b.dns, "manual.xcc.test", "A").await.unwrap().data,
        ["10.9.9.9"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_keep_answering_while_the_management_cluster_is_down() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["management", "cluster-a"])
        .await
        .unwrap();
    management(&bed, &["cluster-a"]).await;
    let mgmt = bed.cluster("management");
    let controller_kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let _controller = controller(&bed, &controller_kubeconfig.path);
    let ca = bed.cluster("cluster-a");
    let agent_a = agent(ca).await;
    envoy(ca, r#"[{"ip":"10.1.2.3"}]"#).await;
    mgmt.kubectl(&[
        "apply",
        "-f",
        &manifest("manifests/examples/dev-team-gateway-dns.yaml"),
    ])
    .await
    .unwrap();
    wait_answer(
        agent_a.dns,
        KUARD,
        "A",
        &["10.1.2.3"],
        Duration::from_secs(30),
    )
    .await;

    let down = std::time::Instant::now();
    mgmt.stop();
    // sleep: two seconds of the outage itself: the agent reads nothing from the management
    // cluster, so no event of it is there to wait for; its answers must simply hold through
    // it (failover::every_agent_answers_... asks 20,000 times through a longer one).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        dig(agent_a.dns, KUARD, "A").await.unwrap().data,
        ["10.1.2.3"],
        "answers survive"
    );

    mgmt.restart().await.unwrap();
    eprintln!(
        "management cluster down and back in {:.1} s",
        down.elapsed().as_secs_f64()
    );
    // The controller recovers by itself: a change after the restart propagates.
    set_lb(ca, r#"[{"ip":"10.1.2.9"}]"#).await;
    let took = wait_answer(
        agent_a.dns,
        KUARD,
        "A",
        &["10.1.2.9"],
        Duration::from_secs(60),
    )
    .await;
    eprintln!(
        "after the management cluster came back, a change propagated in {:.2} s",
        took.as_secs_f64()
    );
}

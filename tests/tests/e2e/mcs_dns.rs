//! The Multi-Cluster Services names of `clusterset.local` end to end: one real API server with
//! the MCS CRDs, ServiceImports and MCS EndpointSlices written as the MCS reconciler writes them,
//! and one xcc-agent, under our manifests' ServiceAccount plus the clusterset read grant, asked
//! with the real `dig`.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use xcc_e2e::{
    Cluster, Testbed, require_testbed,
    xcc::{Agent, CoreDns, DigAnswer, coredns_patcher, dig},
};

use crate::xcc_dns::manifest;

/// The read grant the clusterset names need, cluster-wide: ServiceImports, and the EndpointSlices
/// that carry the MCS service-name label (RBAC cannot narrow a list to a label).
const CLUSTERSET_READ: &str = "\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: xcc-agent-clusterset-dns}
rules:
- apiGroups: [multicluster.x-k8s.io]
  resources: [serviceimports]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: xcc-agent-clusterset-dns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: xcc-agent-clusterset-dns}
subjects:
- {kind: ServiceAccount, name: xcc-agent, namespace: xcc-dns}
";

/// The ServiceImport CRD, for as long as manifests/crds does not hold it yet: the fields the
/// agent reads, nothing enforced.
const SERVICE_IMPORT_CRD: &str = "\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: serviceimports.multicluster.x-k8s.io}
spec:
  group: multicluster.x-k8s.io
  scope: Namespaced
  names: {kind: ServiceImport, plural: serviceimports, singular: serviceimport}
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
";

/// Two imports as the MCS reconciler writes them: one with ClusterSet IPs (dual-stack, tcp/42 and
/// udp/42), one headless.
const IMPORTS: &str = r#"
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: hello, namespace: demo}
spec:
  type: ClusterSetIP
  ips: [10.96.0.10, "fd00:96::10"]
  ipFamilies: [IPv4, IPv6]
  ports:
  - {name: tcp, protocol: TCP, port: 42}
  - {name: udp, protocol: UDP, port: 42}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: web, namespace: demo}
spec:
  type: Headless
  ports:
  - {name: tcp, protocol: TCP, port: 8080}
"#;

pub(crate) const HELLO: &str = "hello.demo.svc.clusterset.local.";
pub(crate) const WEB: &str = "web.demo.svc.clusterset.local.";

/// Asks until `check` holds (at most `timeout`); returns the answer and how long it took.
async fn until(
    server: SocketAddr,
    name: &str,
    qtype: &str,
    timeout: Duration,
    check: impl Fn(&DigAnswer) -> bool,
) -> (DigAnswer, Duration) {
    let started = Instant::now();
    loop {
        let dug = dig(server, name, qtype).await.unwrap();
        if check(&dug) {
            return (dug, started.elapsed());
        }
        assert!(
            started.elapsed() < timeout,
            "{name} {qtype}: not as expected after {timeout:?}: {dug:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A positive answer, within a few seconds of the objects being written.
async fn answers(agent: &Agent, name: &str, qtype: &str, want: &[&str]) {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    let (dug, _) = until(agent.dns, name, qtype, Duration::from_secs(10), |d| {
        d.data == want
    })
    .await;
    assert_eq!(dug.status, "NOERROR", "{name} {qtype}");
}

/// A negative answer with the zone's SOA in authority.
async fn negative(agent: &Agent, name: &str, qtype: &str, status: &str) {
    let dug = dig(agent.dns, name, qtype).await.unwrap();
    assert_eq!(dug.status, status, "{name} {qtype}: {dug:?}");
    assert!(dug.data.is_empty(), "{name} {qtype}: {dug:?}");
    assert_eq!(dug.authority, ["SOA"], "{name} {qtype}: {dug:?}");
}

/// The MCS slice `name` of service `svc` from cluster `cluster`, with `endpoints` given as
/// `(address, hostname, ready)`.
fn slice(
    name: &str,
    svc: &str,
    cluster: &str,
    port: u16,
    endpoints: &[(&str, &str, bool)],
) -> String {
    let mut yaml = format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}\n  namespace: demo\n  labels:\n    multicluster.kubernetes.io/service-name: {svc}\n    multicluster.kubernetes.io/source-cluster: {cluster}\naddressType: IPv4\nports:\n- {{name: tcp, protocol: TCP, port: {port}}}\nendpoints:\n"
    );
    for (address, hostname, ready) in endpoints {
        yaml.push_str(&format!(
            "- addresses: [\"{address}\"]\n  conditions: {{ready: {ready}}}\n"
        ));
        if !hostname.is_empty() {
            yaml.push_str(&format!("  hostname: {hostname}\n"));
        }
    }
    yaml
}

/// The CRDs, the agent's manifest with the clusterset read grant, and the two imports with the
/// slices of `web` (web-0 and web-1 of c1 ready, web-2 not; one endpoint of c2).
pub(crate) async fn set_up(cluster: &Cluster) {
    set_up_with(cluster, true).await;
}

/// [`set_up`], with or without the clusterset read grant.
async fn set_up_with(cluster: &Cluster, grant: bool) {
    cluster
        .install_crds(&std::path::PathBuf::from(manifest("manifests/crds")))
        .await
        .unwrap();
    let crds = cluster
        .kubectl(&["get", "crd", "-o", "name"])
        .await
        .unwrap();
    if !crds.contains("serviceimports.multicluster.x-k8s.io") {
        cluster.apply_yaml(SERVICE_IMPORT_CRD).await.unwrap();
        cluster
            .kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/serviceimports.multicluster.x-k8s.io",
            ])
            .await
            .unwrap();
    }
    cluster
        .kubectl(&["apply", "-f", &manifest("manifests/agent/agent.yaml")])
        .await
        .unwrap();
    if grant {
        cluster.apply_yaml(CLUSTERSET_READ).await.unwrap();
    }
    cluster
        .kubectl(&["create", "namespace", "demo"])
        .await
        .unwrap();
    cluster.apply_yaml(IMPORTS).await.unwrap();
    cluster
        .apply_yaml(&format!(
            "{}---\n{}",
            slice(
                "web-c1",
                "web",
                "c1",
                8080,
                &[
                    ("10.0.0.1", "web-0", true),
                    ("10.0.0.2", "web-1", true),
                    ("10.0.0.3", "web-2", false)
                ]
            ),
            slice("web-c2", "web", "c2", 30080, &[("10.1.0.5", "", true)])
        ))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterset_names_answer_from_service_imports_and_mcs_slices() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["solo"]).await.unwrap();
    let cluster = bed.cluster("solo");
    set_up(cluster).await;
    let kubeconfig = cluster
        .mint_kubeconfig("xcc-dns", "xcc-agent")
        .await
        .unwrap();
    let mut agent =
        Agent::start(&kubeconfig.path, &cluster.dir().join("xcc-agent.log"), &[]).unwrap();
    agent.wait_ready(Duration::from_secs(30)).await.unwrap();

    // ClusterSetIP: the IPs, and one SRV record for tcp/42 and udp/42.
    answers(&agent, HELLO, "A", &["10.96.0.10"]).await;
    answers(&agent, HELLO, "AAAA", &["fd00:96::10"]).await;
    answers(&agent, HELLO, "SRV", &[&format!("0 100 42 {HELLO}")]).await;
    answers(
        &agent,
        &format!("_udp._udp.{HELLO}"),
        "SRV",
        &[&format!("0 100 42 {HELLO}")],
    )
    .await;
    // The TTL is the clusterset zone's (5 s), not the xcc zone's.
    let ttl = tokio::process::Command::new("dig")
        .args([
            &format!("@{}", agent.dns.ip()),
            "-p",
            &agent.dns.port().to_string(),
        ])
        .args(["+noall", "+answer", HELLO, "A"])
        .output()
        .await
        .unwrap();
    let ttl = String::from_utf8_lossy(&ttl.stdout).to_string();
    assert_eq!(ttl.split_whitespace().nth(1), Some("5"), "{ttl}");

    // Headless: every ready endpoint of both clusters, each by its own name.
    answers(&agent, WEB, "A", &["10.0.0.1", "10.0.0.2", "10.1.0.5"]).await;
    answers(&agent, &format!("web-0.c1.{WEB}"), "A", &["10.0.0.1"]).await;
    answers(&agent, &format!("10-1-0-5.c2.{WEB}"), "A", &["10.1.0.5"]).await;
    answers(
        &agent,
        WEB,
        "SRV",
        &[
            &format!("0 33 30080 10-1-0-5.c2.{WEB}"),
            &format!("0 33 8080 web-0.c1.{WEB}"),
            &format!("0 33 8080 web-1.c1.{WEB}"),
        ],
    )
    .await;

    // NODATA and NXDOMAIN, each with the SOA; SOA and NS at the apex.
    negative(&agent, &format!("web-0.c1.{WEB}"), "AAAA", "NOERROR").await;
    negative(&agent, "demo.svc.clusterset.local.", "A", "NOERROR").await;
    negative(&agent, "svc.clusterset.local.", "A", "NOERROR").await;
    negative(&agent, &format!("web-2.c1.{WEB}"), "A", "NXDOMAIN").await;
    negative(&agent, "nope.demo.svc.clusterset.local.", "A", "NXDOMAIN").await;
    negative(&agent, &format!("_http._tcp.{HELLO}"), "SRV", "NXDOMAIN").await;
    answers(&agent, "clusterset.local.", "NS", &["ns.clusterset.local."]).await;
    let soa = dig(agent.dns, "clusterset.local.", "SOA").await.unwrap();
    assert_eq!(soa.data.len(), 1, "{soa:?}");
    // The xcc zone is served beside it, as before.
    negative(&agent, "nope.xcc.test.", "A", "NXDOMAIN").await;

    // A slice change: web-2 becomes ready. Measured, not judged (the bar is the benchmark's).
    cluster
        .apply_yaml(&slice(
            "web-c1",
            "web",
            "c1",
            8080,
            &[
                ("10.0.0.1", "web-0", true),
                ("10.0.0.2", "web-1", true),
                ("10.0.0.3", "web-2", true),
            ],
        ))
        .await
        .unwrap();
    let (_, took) = until(agent.dns, WEB, "A", Duration::from_secs(10), |d| {
        d.data.len() == 4
    })
    .await;
    println!("MEASURE mcs_dns slice change → answer: {took:?} (after kubectl apply returned)");
    answers(&agent, &format!("web-2.c1.{WEB}"), "A", &["10.0.0.3"]).await;

    // The import goes: its names go.
    cluster
        .kubectl(&["-n", "demo", "delete", "serviceimport", "web"])
        .await
        .unwrap();
    until(agent.dns, WEB, "A", Duration::from_secs(10), |d| {
        d.status == "NXDOMAIN"
    })
    .await;
    negative(&agent, &format!("web-0.c1.{WEB}"), "A", "NXDOMAIN").await;
    answers(&agent, HELLO, "A", &["10.96.0.10"]).await;

    through_coredns(&bed, cluster, &agent).await;
    let mut agent = agent;
    agent.process.stop(Duration::from_secs(5));
}

/// The agent, under the manifests' ServiceAccount, ready.
pub(crate) async fn agent(cluster: &Cluster) -> Agent {
    let kubeconfig = cluster
        .mint_kubeconfig("xcc-dns", "xcc-agent")
        .await
        .unwrap();
    let mut agent =
        Agent::start(&kubeconfig.path, &cluster.dir().join("xcc-agent.log"), &[]).unwrap();
    agent.wait_ready(Duration::from_secs(30)).await.unwrap();
    agent
}

/// The zones the patcher Job of the install forwards (its `DOMAIN_SUFFIX`).
fn job_zones() -> String {
    let job = std::fs::read_to_string(manifest("manifests/coredns-patcher/job.yaml")).unwrap();
    let at = job
        .find("- name: DOMAIN_SUFFIX")
        .expect("the Job sets DOMAIN_SUFFIX");
    job[at..]
        .lines()
        .nth(1)
        .and_then(|l| l.trim().strip_prefix("value: "))
        .expect("DOMAIN_SUFFIX has a value")
        .trim()
        .to_string()
}

/// A Corefile shaped as kubeadm writes it, its `kubernetes` plugin stood in for by `hosts` (no
/// pods here), patched with the zones of the Job: `clusterset.local` reaches the agent, and
/// `cluster.local` is still answered by its own block.
async fn through_coredns(bed: &Testbed, cluster: &Cluster, agent: &Agent) {
    let original = "cluster.local {\n    errors\n    hosts {\n        10.96.0.1 kubernetes.default.svc.cluster.local\n    }\n}\n. {\n    errors\n    cache 30\n}\n";
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: coredns, namespace: kube-system}}\ndata:\n  Corefile: {original:?}\n"
        ))
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
    let zones = job_zones();
    assert_eq!(zones, "xcc.test,clusterset.local");
    let args = [
        format!("--zone={zones}"),
        format!("--forward-to={}", agent.dns),
        "--coredns-wait=0s".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    coredns_patcher(&kubeconfig.path, &args).await.unwrap();
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
    assert!(corefile.starts_with(original), "kept as it was: {corefile}");
    assert!(
        corefile.contains(&format!(
            "clusterset.local {{\n    forward . {}\n    reload\n}}\n",
            agent.dns
        )),
        "{corefile}"
    );
    let coredns = CoreDns::start(&bed.binaries.coredns, &corefile, cluster.dir())
        .await
        .unwrap();
    let dug = dig(coredns.dns, HELLO, "SRV").await.unwrap();
    assert_eq!(dug.data, [format!("0 100 42 {HELLO}")], "{dug:?}");
    let dug = dig(coredns.dns, HELLO, "A").await.unwrap();
    assert_eq!(dug.data, ["10.96.0.10"], "{dug:?}");
    // As the conformance suite asks and reads it: every output line with `=` is an SRV record
    // to it (`.*=\s*\d*\s*\d*\s*(\d*)\s*([a-zA-Z0-9-.]*)`), so there must be exactly one.
    let out = tokio::process::Command::new("nslookup")
        .args([
            &format!("-port={}", coredns.dns.port()),
            "-type=SRV",
            HELLO,
            &coredns.dns.ip().to_string(),
        ])
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    let records: Vec<Vec<&str>> = out
        .lines()
        .filter_map(|l| {
            l.rsplit_once('=')
                .map(|(_, r)| r.split_whitespace().collect())
        })
        .collect();
    assert_eq!(
        records,
        [vec!["0", "100", "42", HELLO]],
        "nslookup's output: {out}"
    );
    let dug = dig(coredns.dns, "nope.demo.svc.clusterset.local.", "A")
        .await
        .unwrap();
    assert_eq!(dug.status, "NXDOMAIN", "{dug:?}");
    let dug = dig(coredns.dns, "kubernetes.default.svc.cluster.local.", "A")
        .await
        .unwrap();
    assert_eq!(dug.data, ["10.96.0.1"], "cluster.local untouched: {dug:?}");
}

/// Without the read grant (the MCS part of the install not applied), the agent serves the xcc
/// zone as ever, answers NXDOMAIN with the SOA for the clusterset names, says why once, and
/// serves them once the grant is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_read_grant_the_zone_is_empty_until_it_comes() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["solo"]).await.unwrap();
    let cluster = bed.cluster("solo");
    set_up_with(cluster, false).await;
    let mut agent = agent(cluster).await;
    let log = cluster.dir().join("xcc-agent.log");
    let said = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        (
            text.matches("cannot be read").count(),
            text.contains("readable; serving the clusterset zone"),
        )
    };
    negative(&agent, HELLO, "A", "NXDOMAIN").await;
    let soa = dig(agent.dns, "xcc.test.", "SOA").await.unwrap();
    assert_eq!(soa.data.len(), 1, "the xcc zone is served: {soa:?}");
    let started = Instant::now();
    while said().0 == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no line says why"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    cluster.apply_yaml(CLUSTERSET_READ).await.unwrap();
    // The feed checks again every 30 s.
    until(agent.dns, HELLO, "A", Duration::from_secs(45), |d| {
        d.data == ["10.96.0.10"]
    })
    .await;
    assert_eq!(said(), (1, true), "said once, and when it changed");
    agent.process.stop(Duration::from_secs(5));
}

//! A fleet where some workload clusters still run the original XCC dns-server, which dies when a
//! slice it cannot read (IPv6) is deleted in its namespace. Two workload clusters side by side:
//! cluster-a runs xcc-agent (which announces itself with ConfigMap xcc-dns/xcc-agent), cluster-b
//! has only the namespace, as a cluster with the original would. A watch on each cluster's
//! EndpointSlices records every event for the whole test, and the assertions are on that record.
//! Also `xcc-controller --uninstall`, the first step back to the original XCC.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::TryStreamExt;
use k8s_openapi::api::{core::v1::ConfigMap, discovery::v1::EndpointSlice};
use kube::{
    Api, ResourceExt,
    api::{ListParams, WatchEvent, WatchParams},
};
use xcc_e2e::{
    Cluster, Testbed, require_testbed, spawn,
    xcc::{Agent, binary},
};

use crate::resource_sync::wait_for;
use crate::secrets::apply_manifest;
use crate::xcc_dns::{KUARD, agent, envoy, management, set_lb, wait_answer};

const GATEWAY: &str = "dev-team-gateway-dns";
const A_IPV6: &str = "dev-team-cluster-a-gateway-ipv6";

/// One event of a slice watch: `ADDED`, `MODIFIED` or `DELETED`, the slice and its addressType.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    event: &'static str,
    name: String,
    address_type: String,
    /// It carries a global name (annotation `xcc.test/global` or `xcc.test/global-hostname`).
    global: bool,
}

/// Every event of the EndpointSlices in `xcc-dns` of one cluster from the moment it is started,
/// re-watching from the last resourceVersion if the API server ends the watch.
struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    async fn start(cluster: &Cluster) -> Recorder {
        let api: Api<EndpointSlice> = Api::namespaced(cluster.client.clone(), "xcc-dns");
        let list = api.list(&ListParams::default()).await.unwrap();
        let mut version = list.metadata.resource_version.clone().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let stream = api
                    .watch(&WatchParams::default().timeout(290), &version)
                    .await
                    .expect("the watch starts");
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.try_next().await.expect("the watch runs") {
                    let (event, slice) = match event {
                        WatchEvent::Added(s) => ("ADDED", s),
                        WatchEvent::Modified(s) => ("MODIFIED", s),
                        WatchEvent::Deleted(s) => ("DELETED", s),
                        WatchEvent::Bookmark(b) => {
                            version = b.metadata.resource_version;
                            continue;
                        }
                        WatchEvent::Error(e) => panic!("the slice watch failed: {e:?}"),
                    };
                    version = slice.resource_version().unwrap_or(version);
                    record.lock().unwrap().push(Seen {
                        event,
                        name: slice.name_any(),
                        address_type: slice.address_type.clone(),
                        // A global name: its own slice (an earlier agent's) or on the
                        // per-cluster slice.
                        global: slice.annotations().contains_key("xcc.test/global")
                            || slice.annotations().contains_key("xcc.test/global-hostname"),
                    });
                }
            }
        });
        Recorder { seen, task }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Proves the record is complete up to now: creates a slice that the original ignores
    /// (IPv4, no host-name annotation, never deleted) and waits until the watch reports it. Every
    /// write made before this call comes before it in the record.
    async fn barrier(&self, cluster: &Cluster, n: u32) {
        let name = format!("barrier-{n}");
        cluster
            .apply_yaml(&format!(
                "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}, namespace: xcc-dns}}\n\
                 addressType: IPv4\nendpoints: [{{addresses: [10.255.0.{n}]}}]\n"
            ))
            .await
            .unwrap();
        wait_for(
            &format!("the watch of {} reports {name}", cluster.name),
            Duration::from_secs(20),
            || async {
                self.seen()
                    .iter()
                    .any(|s| s.event == "ADDED" && s.name == name)
                    .then_some(())
            },
        )
        .await;
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Polls the GatewayDNS (as JSON) until `check` accepts it.
async fn wait_gateway(
    mgmt: &Cluster,
    what: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let text = mgmt
            .kubectl(&["-n", "dev-team", "get", "gatewaydns", GATEWAY, "-o", "json"])
            .await
            .unwrap();
        let gateway: serde_json::Value = serde_json::from_str(&text).unwrap();
        if check(&gateway) {
            return gateway;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "GatewayDNS never showed {what}: {}",
            gateway["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cluster_entry<'a>(gateway: &'a serde_json::Value, cluster: &str) -> &'a serde_json::Value {
    gateway["status"]["clusters"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["cluster"] == cluster))
        .unwrap_or(&serde_json::Value::Null)
}

fn condition<'a>(gateway: &'a serde_json::Value, type_: &str) -> Option<&'a serde_json::Value> {
    gateway["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Waits until an Event with `reason` and `type_` about the GatewayDNS exists.
async fn wait_event(mgmt: &Cluster, reason: &str, type_: &str) {
    let what = format!("a {type_} Event {reason} on the GatewayDNS");
    wait_for(&what, Duration::from_secs(20), || async {
        let text = mgmt
            .kubectl(&[
                "-n",
                "dev-team",
                "get",
                "events.events.k8s.io",
                "-o",
                "json",
            ])
            .await
            .unwrap();
        let events: serde_json::Value = serde_json::from_str(&text).unwrap();
        let found = events["items"].as_array().is_some_and(|all| {
            all.iter().any(|e| {
                e["reason"] == reason && e["type"] == type_ && e["regarding"]["name"] == GATEWAY
            })
        });
        found.then_some(())
    })
    .await;
}

/// Waits until slice `name` exists (or, with `present` false, is gone) on `cluster`.
async fn wait_slice(cluster: &Cluster, name: &str, present: bool) {
    let api: Api<EndpointSlice> = Api::namespaced(cluster.client.clone(), "xcc-dns");
    let what = format!(
        "EndpointSlice xcc-dns/{name} on {} {}",
        cluster.name,
        if present { "made" } else { "deleted" }
    );
    wait_for(&what, Duration::from_secs(30), || async {
        (api.get_opt(name).await.unwrap().is_some() == present).then_some(())
    })
    .await;
}

/// cluster-a with xcc-agent (announced), cluster-b with only the namespace xcc-dns (what the
/// original XCC's install leaves, minus its dns-server), and the controller on management.
struct Fleet {
    // Fields drop in order: our processes stop before the API servers they talk to.
    controller: xcc_e2e::Process,
    agent_a: Agent,
    /// The controller's management kubeconfig (its ServiceAccount in our manifest).
    kubeconfig: std::path::PathBuf,
    bed: Testbed,
}

async fn fleet(binaries: &xcc_e2e::Binaries) -> Fleet {
    let bed = Testbed::start_named(binaries, &["management", "cluster-a", "cluster-b"])
        .await
        .unwrap();
    management(&bed, &["cluster-a", "cluster-b"]).await;
    let (ca, cb) = (bed.cluster("cluster-a"), bed.cluster("cluster-b"));
    let agent_a = agent(ca).await;
    // The agent announces itself under the manifest's Role (patch on that one name, no create).
    let announcement: Api<ConfigMap> = Api::namespaced(ca.client.clone(), "xcc-dns");
    let features = wait_for(
        "xcc-agent announces itself",
        Duration::from_secs(20),
        || async {
            let found = announcement.get_opt("xcc-agent").await.unwrap();
            found
                .and_then(|cm| cm.data)
                .and_then(|data| data.get("features").cloned())
        },
    )
    .await;
    assert_eq!(features, "ipv6,fqdn,global,global-hostname");
    cb.kubectl(&["create", "namespace", "xcc-dns"])
        .await
        .unwrap();
    let kubeconfig = bed
        .cluster("management")
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    // A short announcement TTL, so that the test sees a late agent within seconds (30 s default).
    let controller = spawn(
        "xcc-controller",
        &binary("xcc-controller"),
        &[
            format!("--kubeconfig={}", kubeconfig.path.display()),
            "--admin-listen=127.0.0.1:0".into(),
            "--announcement-ttl=3s".into(),
            "--log=info,xcc_controller=debug".into(),
        ],
        &bed.cluster("management").dir().join("xcc-controller.log"),
    )
    .unwrap();
    Fleet {
        controller,
        agent_a,
        kubeconfig: kubeconfig.path,
        bed,
    }
}

/// A slice as an earlier xcc version (which sent IPv6 everywhere) left it on cluster-b.
const LEFT_BY_AN_EARLIER_VERSION: &str = "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dev-team-cluster-a-gateway-ipv6
  namespace: xcc-dns
  labels:
    kubernetes.io/service-name: dev-team-cluster-a-gateway-ipv6
    endpointslice.kubernetes.io/managed-by: xcc-controller.connectivity.tanzu.vmware.com
  annotations:
    connectivity.tanzu.vmware.com/dns-hostname: '*.gateway.cluster-a.dev-team.clusters.xcc.test'
    connectivity.tanzu.vmware.com/gateway-dns-ref: dev-team/dev-team-gateway-dns
addressType: IPv6
endpoints: [{addresses: ['fd00::99']}]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_reaches_only_the_cluster_whose_agent_announced_it() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let f = fleet(&binaries).await;
    let bed = &f.bed;
    let mgmt = bed.cluster("management");
    let (ca, cb) = (bed.cluster("cluster-a"), bed.cluster("cluster-b"));
    let kuard_b = "kuard.gateway.cluster-b.dev-team.clusters.xcc.test";
    cb.apply_yaml(LEFT_BY_AN_EARLIER_VERSION).await.unwrap();
    // From here on every event on both clusters is recorded.
    let (record_a, record_b) = (Recorder::start(ca).await, Recorder::start(cb).await);

    // IPv4 gateway on cluster-a: both clusters get its slice.
    envoy(ca, r#"[{"ip":"10.1.2.3"}]"#).await;
    apply_manifest(mgmt, "manifests/examples/dev-team-gateway-dns.yaml").await;
    wait_answer(
        f.agent_a.dns,
        KUARD,
        "A",
        &["10.1.2.3"],
        Duration::from_secs(30),
    )
    .await;
    wait_slice(cb, "dev-team-cluster-a-gateway", true).await;
    // The slice an earlier version left on cluster-b is kept, and the status says why.
    let gateway = wait_gateway(mgmt, "UnreadableSlicesKept", |g| {
        condition(g, "UnreadableSlicesKept").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let kept = &condition(&gateway, "UnreadableSlicesKept").unwrap()["message"];
    assert!(
        kept.as_str().unwrap().contains(A_IPV6) && kept.as_str().unwrap().contains("cluster-b"),
        "{kept}"
    );

    // IPv6 added: cluster-a (announced) gets it, cluster-b does not, and the status says so.
    set_lb(ca, r#"[{"ip":"10.1.2.3"},{"ip":"fd00::3"}]"#).await;
    wait_answer(
        f.agent_a.dns,
        KUARD,
        "AAAA",
        &["fd00::3"],
        Duration::from_secs(10),
    )
    .await;
    let gateway = wait_gateway(mgmt, "IPv6 withheld from cluster-b", |g| {
        cluster_entry(g, "cluster-a")["withheldFrom"] == serde_json::json!(["cluster-b"])
            && condition(g, "RecordsWithheld").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let entry = cluster_entry(&gateway, "cluster-a");
    assert_eq!(entry["state"], "Published", "{entry}");
    assert!(
        entry["message"]
            .as_str()
            .unwrap()
            .contains("IPv6 addresses not sent to cluster-b"),
        "{entry}"
    );
    // Both are said in Events on the GatewayDNS too.
    for (reason, type_) in [
        ("UnreadableSlicesKept", "Warning"),
        ("RecordsWithheld", "Normal"),
    ] {
        wait_event(mgmt, reason, type_).await;
    }
    record_b.barrier(cb, 1).await;

    // IPv6 removed: cluster-a's IPv6 slice is deleted, cluster-b's old one stays.
    set_lb(ca, r#"[{"ip":"10.1.2.3"}]"#).await;
    wait_slice(ca, A_IPV6, false).await;
    wait_gateway(mgmt, "nothing withheld", |g| {
        cluster_entry(g, "cluster-a").get("withheldFrom").is_none()
            && condition(g, "RecordsWithheld").is_none()
    })
    .await;
    record_b.barrier(cb, 2).await;

    // A host-name gateway on cluster-b: an FQDN slice, which the original reads, goes to both.
    envoy(cb, r#"[{"hostname":"lb-1234.elb.example.com"}]"#).await;
    wait_answer(
        f.agent_a.dns,
        kuard_b,
        "CNAME",
        &["lb-1234.elb.example.com."],
        Duration::from_secs(10),
    )
    .await;
    wait_slice(cb, "dev-team-cluster-b-gateway-fqdn", true).await;

    // GatewayDNS deleted: the slices the original reads are withdrawn everywhere (it withdraws
    // them too); the IPv6 one on cluster-b stays.
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "delete",
        "gatewaydns",
        GATEWAY,
        "--timeout=30s",
    ])
    .await
    .unwrap();
    for name in [
        "dev-team-cluster-a-gateway",
        "dev-team-cluster-b-gateway-fqdn",
    ] {
        wait_slice(ca, name, false).await;
        wait_slice(cb, name, false).await;
    }
    record_a.barrier(ca, 3).await;
    record_b.barrier(cb, 3).await;
    wait_slice(cb, A_IPV6, true).await;

    let (seen_a, seen_b) = (record_a.seen(), record_b.seen());
    eprintln!("cluster-a saw: {seen_a:#?}\ncluster-b saw: {seen_b:#?}");
    // cluster-b: only slices the original reads were ever created, changed or deleted.
    let unreadable: Vec<&Seen> = seen_b
        .iter()
        .filter(|s| !matches!(s.address_type.as_str(), "IPv4" | "FQDN") || s.global)
        .collect();
    assert!(
        unreadable.is_empty(),
        "cluster-b (no xcc-agent) saw: {unreadable:?}"
    );
    // In order: cluster-a's IPv4 slice, cluster-b's FQDN slice, then both withdrawn (in one
    // reconcile, either order). No MODIFIED is expected, but one would be harmless.
    let events_b: Vec<(&str, &str)> = seen_b
        .iter()
        .filter(|s| !s.name.starts_with("barrier-") && s.event != "MODIFIED")
        .map(|s| (s.event, s.name.as_str()))
        .collect();
    assert_eq!(events_b.len(), 4, "{events_b:?}");
    assert_eq!(
        events_b[..2],
        [
            ("ADDED", "dev-team-cluster-a-gateway"),
            ("ADDED", "dev-team-cluster-b-gateway-fqdn"),
        ],
        "{events_b:?}"
    );
    let mut withdrawn = events_b[2..].to_vec();
    withdrawn.sort();
    assert_eq!(
        withdrawn,
        [
            ("DELETED", "dev-team-cluster-a-gateway"),
            ("DELETED", "dev-team-cluster-b-gateway-fqdn"),
        ]
    );
    // cluster-a: everything, the IPv6 slice created and deleted.
    let ipv6_a: Vec<&'static str> = seen_a
        .iter()
        .filter(|s| s.name == A_IPV6 && s.event != "MODIFIED")
        .map(|s| {
            assert_eq!(s.address_type, "IPv6");
            s.event
        })
        .collect();
    assert_eq!(ipv6_a, ["ADDED", "DELETED"], "{seen_a:#?}");
    // ... and the global name, on cluster-a's own slice (cluster-b never saw it, above).
    assert!(
        seen_a
            .iter()
            .any(|s| s.global && s.event != "DELETED" && s.name == "dev-team-cluster-a-gateway"),
        "{seen_a:#?}"
    );

    // Later cluster-b gets an xcc-agent: within the announcement TTL it is sent IPv6 too, and
    // the slice an earlier version left there is the controller's to update again.
    set_lb(ca, r#"[{"ip":"10.1.2.3"},{"ip":"fd00::3"}]"#).await;
    apply_manifest(mgmt, "manifests/examples/dev-team-gateway-dns.yaml").await;
    wait_gateway(mgmt, "IPv6 withheld from cluster-b again", |g| {
        cluster_entry(g, "cluster-a")["withheldFrom"] == serde_json::json!(["cluster-b"])
    })
    .await;
    let agent_b = agent(cb).await;
    let took = wait_answer(
        agent_b.dns,
        KUARD,
        "AAAA",
        &["fd00::3"],
        Duration::from_secs(20),
    )
    .await;
    eprintln!(
        "cluster-b's agent answered AAAA {:.1} s after it was ready",
        took.as_secs_f64()
    );
    wait_gateway(mgmt, "nothing withheld or kept", |g| {
        cluster_entry(g, "cluster-a").get("withheldFrom").is_none()
            && condition(g, "RecordsWithheld").is_none()
            && condition(g, "UnreadableSlicesKept").is_none()
    })
    .await;
}

/// Runs `xcc-controller --uninstall` (the flag given through its environment variable).
async fn uninstall(kubeconfig: &std::path::Path) -> (bool, String, String) {
    let out = tokio::process::Command::new(binary("xcc-controller"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .env("XCC_UNINSTALL", "true")
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    eprintln!(
        "--uninstall: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    (out.status.success(), stdout, stderr)
}

/// xcc-controller's slices on `cluster` (its managed-by label).
async fn xcc_slices(cluster: &Cluster) -> Vec<String> {
    let api: Api<EndpointSlice> = Api::namespaced(cluster.client.clone(), "xcc-dns");
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels(
            "endpointslice.kubernetes.io/managed-by=xcc-controller.connectivity.tanzu.vmware.com",
        ))
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| s.name_any())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_leaves_nothing_of_xcc_behind() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let mut f = fleet(&binaries).await;
    let bed = &f.bed;
    let mgmt = bed.cluster("management");
    let (ca, cb) = (bed.cluster("cluster-a"), bed.cluster("cluster-b"));
    // A person's slice, which nothing of xcc may delete.
    cb.apply_yaml(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: by-hand\n  namespace: xcc-dns\n\
         \x20 annotations: {connectivity.tanzu.vmware.com/dns-hostname: manual.xcc.test}\naddressType: IPv4\n\
         endpoints: [{addresses: [10.9.9.9]}]\n",
    )
    .await
    .unwrap();
    // And an IPv6 slice an earlier version left on cluster-b, which has no xcc-agent.
    cb.apply_yaml(LEFT_BY_AN_EARLIER_VERSION).await.unwrap();
    envoy(ca, r#"[{"ip":"10.1.2.3"},{"ip":"fd00::3"}]"#).await;
    apply_manifest(mgmt, "manifests/examples/dev-team-gateway-dns.yaml").await;
    wait_slice(ca, A_IPV6, true).await;
    wait_slice(ca, "dev-team-cluster-a-gateway", true).await;
    wait_slice(cb, "dev-team-cluster-a-gateway", true).await;
    wait_gateway(mgmt, "the finalizer", |g| {
        g["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    })
    .await;

    // The controller stops for good; a third cluster, whose API server is gone, joins the
    // namespace.
    f.controller.stop(Duration::from_secs(5));
    let port = xcc_e2e::free_port();
    let dead = std::fs::read_to_string(&ca.kubeconfig)
        .unwrap()
        .replace(&ca.url, &format!("https://127.0.0.1:{port}"));
    mgmt.apply_yaml(
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: cluster-c, namespace: dev-team}\nspec: {}\n",
    )
    .await
    .unwrap();
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("cluster-c-kubeconfig".into()),
            namespace: Some("dev-team".into()),
            ..Default::default()
        },
        data: Some(
            [(
                "value".to_string(),
                k8s_openapi::ByteString(dead.into_bytes()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(mgmt.client.clone(), "dev-team")
        .create(&Default::default(), &secret)
        .await
        .unwrap();

    let (ok, stdout, stderr) = uninstall(&f.kubeconfig).await;
    assert!(!ok, "an unreachable cluster makes the exit status non-zero");
    assert!(
        stderr.contains("cluster dev-team/cluster-c"),
        "the unreachable cluster is named: {stderr}"
    );
    for line in [
        "finalizer removed: GatewayDNS dev-team/dev-team-gateway-dns",
        "deleted: EndpointSlice xcc-dns/dev-team-cluster-a-gateway-ipv6 (IPv6) on cluster dev-team/cluster-a",
        "deleted: EndpointSlice xcc-dns/dev-team-cluster-a-gateway (IPv4) on cluster dev-team/cluster-a",
        "deleted: EndpointSlice xcc-dns/dev-team-cluster-a-gateway (IPv4) on cluster dev-team/cluster-b",
        "left: EndpointSlice xcc-dns/dev-team-cluster-a-gateway-ipv6 (IPv6) on cluster dev-team/cluster-b: no xcc-agent is announced there",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from: {stdout}");
    }
    // The reachable clusters were cleaned all the same; a person's slice is still there.
    assert!(xcc_slices(ca).await.is_empty());
    assert_eq!(
        xcc_slices(cb).await,
        [A_IPV6],
        "only the slice whose deletion would crash an original dns-server"
    );
    let slices_b: Api<EndpointSlice> = Api::namespaced(cb.client.clone(), "xcc-dns");
    assert!(slices_b.get_opt("by-hand").await.unwrap().is_some());

    // Deleting the GatewayDNS completes with no controller running.
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "delete",
        "gatewaydns",
        GATEWAY,
        "--timeout=20s",
    ])
    .await
    .unwrap();

    // With the dead cluster gone, a second run finds nothing left and exits 0.
    mgmt.kubectl(&["-n", "dev-team", "delete", "cluster", "cluster-c"])
        .await
        .unwrap();
    let (ok, stdout, _) = uninstall(&f.kubeconfig).await;
    assert!(ok, "{stdout}");
    assert!(
        stdout.contains(
            "0 finalizer(s) removed, 0 EndpointSlice(s) deleted, 1 left, 0 cluster(s) failed"
        ),
        "{stdout}"
    );
}

//! Cross-cluster DNS that fails over (issue 16), on real API servers: gateway health in the
//! GatewayDNS status, the stale-record policy (a dead cluster's records withdrawn after
//! `withdrawAfter`, back after `readmitAfter` health checks in a row), and agents that keep
//! answering while the management cluster is down.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};
use xcc_e2e::{
    Binaries, Testbed, require_testbed, spawn,
    xcc::{Agent, DigAnswer, binary, dig, wait_dig},
};

use crate::xcc_dns::{a, agent, envoy, management};

/// The gateway address of each workload cluster.
pub(crate) fn gateway_ip(cluster: &str) -> &'static str {
    match cluster {
        "cluster-a" => "10.1.0.1",
        "cluster-b" => "10.2.0.1",
        _ => "10.3.0.1",
    }
}

/// A per-cluster name of `cluster`'s gateway.
pub(crate) fn per_cluster(cluster: &str) -> String {
    format!("kuard.gateway.{cluster}.dev-team.clusters.xcc.test")
}

/// The management cluster and `workloads`, our controller (health checks every second), an
/// agent and an envoy gateway (one ready endpoint) on every workload cluster, and the
/// walkthrough's GatewayDNS with `extra` added to its spec.
pub(crate) struct Fleet {
    // Fields drop in order: our processes stop before the API servers they talk to.
    controller: xcc_e2e::Process,
    pub agents: Vec<(String, Agent)>,
    pub bed: Testbed,
}

impl Fleet {
    pub(crate) async fn start(binaries: &Binaries, workloads: &[&str], extra: &str) -> Fleet {
        let mut names = vec!["management"];
        names.extend_from_slice(workloads);
        let bed = Testbed::start_named(binaries, &names).await.unwrap();
        management(&bed, workloads).await;
        let mgmt = bed.cluster("management");
        let controller = controller(mgmt, "xcc-controller.log").await;
        let mut agents = Vec::new();
        for name in workloads {
            let cluster = bed.cluster(name);
            agents.push((name.to_string(), agent(cluster).await));
            envoy(cluster, &format!(r#"[{{"ip":"{}"}}]"#, gateway_ip(name))).await;
            set_ready(cluster, true).await;
        }
        mgmt.apply_yaml(&format!(
            "apiVersion: connectivity.tanzu.vmware.com/v1alpha1\nkind: GatewayDNS\n\
             metadata: {{name: dev-team-gateway-dns, namespace: dev-team}}\n\
             spec:\n  clusterSelector: {{matchLabels: {{hasContour: 'true'}}}}\n  \
             service: projectcontour/envoy\n  resolutionType: loadBalancer\n{extra}"
        ))
        .await
        .unwrap();
        Fleet {
            controller,
            agents,
            bed,
        }
    }

    /// Stops our controller (SIGTERM); [`Fleet::start_controller`] starts a new one.
    pub(crate) fn stop_controller(&mut self) {
        self.controller.stop(Duration::from_secs(10));
    }

    /// A new controller process, logging to `log` in the management cluster's directory.
    pub(crate) async fn start_controller(&mut self, log: &str) {
        self.controller = controller(self.bed.cluster("management"), log).await;
    }

    pub(crate) fn dns(&self, cluster: &str) -> SocketAddr {
        self.agents
            .iter()
            .find(|(name, _)| name == cluster)
            .map(|(_, agent)| agent.dns)
            .expect("an agent on that cluster")
    }

    /// The status entry of `cluster` in the GatewayDNS.
    pub(crate) async fn entry(&self, cluster: &str) -> Option<serde_json::Value> {
        self.status().await["clusters"]
            .as_array()?
            .iter()
            .find(|c| c["cluster"] == cluster)
            .cloned()
    }

    /// The GatewayDNS status (`null` while it cannot be read).
    pub(crate) async fn status(&self) -> serde_json::Value {
        let mut resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "connectivity.tanzu.vmware.com",
            "v1alpha1",
            "GatewayDNS",
        ));
        // Not the English plural kube would guess ("gatewaydnses").
        resource.plural = "gatewaydns".into();
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.bed.cluster("management").client.clone(),
            "dev-team",
            &resource,
        );
        api.get("dev-team-gateway-dns")
            .await
            .map(|gateway| gateway.data["status"].clone())
            .unwrap_or_default()
    }

    /// Waits until `cluster`'s status entry passes `check`, for as long as the controller makes
    /// progress: fails only when the entry has not changed for `stall` (a busy machine slows
    /// the controller down, it does not stop it); returns how long it took.
    pub(crate) async fn wait_entry_progressing(
        &self,
        cluster: &str,
        stall: Duration,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> Duration {
        let started = Instant::now();
        let mut changed = Instant::now();
        let mut last = None;
        loop {
            let entry = self.entry(cluster).await;
            if entry.as_ref().is_some_and(&check) {
                return started.elapsed();
            }
            if entry != last {
                changed = Instant::now();
                last = entry;
            }
            assert!(
                changed.elapsed() < stall,
                "the status entry of {cluster} did not change for {stall:?} without getting there: {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `cluster`'s status entry passes `check`; returns how long that took.
    pub(crate) async fn wait_entry(
        &self,
        cluster: &str,
        timeout: Duration,
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> Duration {
        let started = Instant::now();
        loop {
            let entry = self.entry(cluster).await;
            if entry.as_ref().is_some_and(&check) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < timeout,
                "the status entry of {cluster} did not get there within {timeout:?}: {entry:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Our controller on `mgmt` (health checks every second), under the manifests' ServiceAccount.
async fn controller(mgmt: &xcc_e2e::Cluster, log: &str) -> xcc_e2e::Process {
    let kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    spawn(
        "xcc-controller",
        &binary("xcc-controller"),
        &[
            format!("--kubeconfig={}", kubeconfig.path.display()),
            "--admin-listen=127.0.0.1:0".into(),
            "--probe-interval=1s".into(),
            "--log=info,xcc_controller=debug".into(),
        ],
        &mgmt.dir().join(log),
    )
    .unwrap()
}

/// One EndpointSlice behind envoy on `cluster` with one endpoint, ready or not.
pub(crate) async fn set_ready(cluster: &xcc_e2e::Cluster, ready: bool) {
    cluster
        .apply_yaml(&format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: envoy-1, namespace: projectcontour, labels: {{kubernetes.io/service-name: envoy}}}}\n\
             addressType: IPv4\n\
             endpoints: [{{addresses: [10.244.0.10], conditions: {{ready: {ready}}}}}]\n\
             ports: [{{name: http, port: 80, protocol: TCP}}]\n"
        ))
        .await
        .unwrap();
}

pub(crate) fn nxdomain(answer: &DigAnswer) -> bool {
    answer.status == "NXDOMAIN"
}

/// Kills cluster-a's API server, and returns how long until its address left cluster-b's
/// per-cluster answer, after proving that the controller saw it go. Then brings it back and
/// waits until it is published again, after the damping count.
pub(crate) async fn kill_and_return(fleet: &Fleet) -> Duration {
    let (ca, dns_b) = (fleet.bed.cluster("cluster-a"), fleet.dns("cluster-b"));
    let name = per_cluster("cluster-a");
    let killed = Instant::now();
    ca.kill9();
    // The controller saw it: the status says Unreachable (since when, and last seen); within
    // the bar of the withdrawal that follows, not a stricter one.
    fleet
        .wait_entry("cluster-a", Duration::from_secs(20), |c| {
            c["health"] == "Unreachable"
                && c["unreachableSince"].is_string()
                && c["lastSeen"].is_string()
        })
        .await;
    wait_dig(dns_b, &name, "A", Duration::from_secs(30), nxdomain)
        .await
        .unwrap();
    let gone = killed.elapsed();
    let entry = fleet.entry("cluster-a").await.unwrap();
    assert_eq!(entry["state"], "Withdrawn", "{entry}");
    // The other cluster's gateway is untouched.
    let b = dig(dns_b, &per_cluster("cluster-b"), "A").await.unwrap();
    assert_eq!(b.data, [gateway_ip("cluster-b")], "{b:?}");

    // It left the global name too (at once: an unreachable cluster is not healthy).
    let global = dig(dns_b, GLOBAL, "A").await.unwrap();
    assert_eq!(global.data, [gateway_ip("cluster-b")], "{global:?}");

    // Seen again, but damped: reachable and still withdrawn for a while (watched while the API
    // server starts: the controller may see it answer before it is fully ready)...
    let (restarted, _) = tokio::join!(
        ca.restart(),
        fleet.wait_entry_progressing("cluster-a", Duration::from_secs(90), |c| {
            c["state"] == "Withdrawn" && c["health"] != "Unreachable"
        })
    );
    restarted.unwrap();
    let still = dig(dns_b, &name, "A").await.unwrap();
    assert!(
        still.status == "NXDOMAIN"
            || fleet
                .entry("cluster-a")
                .await
                .is_some_and(|c| c["state"] == "Published"),
        "answered before the damping count: {still:?}"
    );
    // ...then back after the damping count (each health check passed is progress: the
    // controller reports it as Published once the count is reached).
    fleet
        .wait_entry_progressing("cluster-a", Duration::from_secs(30), |c| {
            c["state"] == "Published"
        })
        .await;
    wait_dig(
        dns_b,
        &name,
        "A",
        Duration::from_secs(30),
        a(&[gateway_ip("cluster-a")]),
    )
    .await
    .unwrap();
    let entry = fleet.entry("cluster-a").await.unwrap();
    assert_eq!(entry["state"], "Published", "{entry}");
    wait_dig(
        dns_b,
        GLOBAL,
        "A",
        Duration::from_secs(30),
        a(&[gateway_ip("cluster-a"), gateway_ip("cluster-b")]),
    )
    .await
    .unwrap();
    gone
}

/// The global name of namespace dev-team.
pub(crate) const GLOBAL: &str = "kuard.gateway.dev-team.global.xcc.test";

/// The TTL of the first answer record for `name`, asked straight from `server`.
async fn ttl_of(server: SocketAddr, name: &str) -> Option<u32> {
    use hickory_proto::{
        op::{Message, Query},
        rr::{Name, RecordType},
    };
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.ok()?;
    let mut msg = Message::query();
    msg.metadata.id = 7;
    msg.add_query(Query::query(Name::from_ascii(name).ok()?, RecordType::A));
    socket.send_to(&msg.to_vec().ok()?, server).await.ok()?;
    let mut buf = [0u8; 1500];
    let (n, _) = tokio::time::timeout(Duration::from_secs(1), socket.recv_from(&mut buf))
        .await
        .ok()?
        .ok()?;
    Message::from_vec(&buf[..n])
        .ok()?
        .answers
        .first()
        .map(|r| r.ttl)
}

/// Marks cluster-a's gateway endpoints not ready; returns how long until cluster `asking`'s
/// agent answers the global name with `then` (after proving the controller saw it), and
/// brings them back until it answers `back`.
async fn endpoints_down_and_up(
    fleet: &Fleet,
    asking: &str,
    then: &[&str],
    back: &[&str],
) -> Duration {
    let ca = fleet.bed.cluster("cluster-a");
    set_ready(ca, false).await;
    let changed = Instant::now();
    fleet
        .wait_entry("cluster-a", Duration::from_secs(5), |c| {
            c["health"] == "NoReadyEndpoints" && c["readyEndpoints"] == 0
        })
        .await;
    wait_dig(
        fleet.dns(asking),
        GLOBAL,
        "A",
        Duration::from_secs(10),
        a(then),
    )
    .await
    .unwrap();
    let took = changed.elapsed();
    // Its own per-cluster name stays: it still names that cluster's gateway.
    let own = dig(fleet.dns(asking), &per_cluster("cluster-a"), "A")
        .await
        .unwrap();
    assert_eq!(own.data, [gateway_ip("cluster-a")], "{own:?}");
    set_ready(ca, true).await;
    wait_dig(
        fleet.dns(asking),
        GLOBAL,
        "A",
        Duration::from_secs(10),
        a(back),
    )
    .await
    .unwrap();
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cluster_leaves_the_answers_after_the_stale_time_and_returns_after_damping() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let fleet = Fleet::start(
        &binaries,
        &["cluster-a", "cluster-b"],
        "  staleRecords: {withdrawAfter: 10s, readmitAfter: 3}\n",
    )
    .await;
    for cluster in ["cluster-a", "cluster-b"] {
        wait_dig(
            fleet.dns("cluster-b"),
            &per_cluster(cluster),
            "A",
            Duration::from_secs(30),
            a(&[gateway_ip(cluster)]),
        )
        .await
        .unwrap();
    }
    fleet
        .wait_entry_progressing("cluster-a", Duration::from_secs(30), |c| {
            c["health"] == "Healthy" && c["readyEndpoints"] == 1
        })
        .await;
    let both = [gateway_ip("cluster-a"), gateway_ip("cluster-b")];
    wait_dig(
        fleet.dns("cluster-b"),
        GLOBAL,
        "A",
        Duration::from_secs(10),
        a(&both),
    )
    .await
    .unwrap();
    // The global name's TTL is its own (5 s by default); the per-cluster name keeps the agent's.
    assert_eq!(ttl_of(fleet.dns("cluster-b"), GLOBAL).await, Some(5));
    assert_eq!(
        ttl_of(fleet.dns("cluster-b"), &per_cluster("cluster-a")).await,
        Some(30)
    );
    // roundRobin: cluster-a's endpoints not ready → out of the global answer; ready → back.
    let left = endpoints_down_and_up(&fleet, "cluster-b", &[gateway_ip("cluster-b")], &both).await;
    eprintln!(
        "endpoints not ready: out of the global answer after {:.2} s",
        left.as_secs_f64()
    );
    assert!(left < Duration::from_secs(2), "{left:?}, bar 2 s");

    let gone = kill_and_return(&fleet).await;
    eprintln!(
        "cluster-a killed: out of cluster-b's answers after {:.1} s",
        gone.as_secs_f64()
    );
    assert!(
        gone < Duration::from_secs(20),
        "withdrawn after {gone:?}, bar 20 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_first_answers_each_clusters_own_gateway_while_it_is_healthy() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let fleet = Fleet::start(
        &binaries,
        &["cluster-a", "cluster-b"],
        "  global: {strategy: localFirst, ttlSeconds: 2}\n",
    )
    .await;
    for cluster in ["cluster-a", "cluster-b"] {
        wait_dig(
            fleet.dns(cluster),
            GLOBAL,
            "A",
            Duration::from_secs(30),
            a(&[gateway_ip(cluster)]),
        )
        .await
        .unwrap();
    }
    assert_eq!(ttl_of(fleet.dns("cluster-a"), GLOBAL).await, Some(2));
    // cluster-a's gateway has no ready endpoint: cluster-a's agent answers cluster-b's; back.
    let left = endpoints_down_and_up(
        &fleet,
        "cluster-a",
        &[gateway_ip("cluster-b")],
        &[gateway_ip("cluster-a")],
    )
    .await;
    assert!(left < Duration::from_secs(2), "{left:?}, bar 2 s");
    let b = dig(fleet.dns("cluster-b"), GLOBAL, "A").await.unwrap();
    assert_eq!(b.data, [gateway_ip("cluster-b")], "{b:?}");

    // The API server refuses bad values of the new fields, naming them.
    let mgmt = fleet.bed.cluster("management");
    for (spec, field) in [
        (
            "staleRecords: {withdrawAfter: soon}",
            "spec.staleRecords.withdrawAfter",
        ),
        (
            "staleRecords: {readmitAfter: 0}",
            "spec.staleRecords.readmitAfter",
        ),
        ("global: {strategy: failover}", "spec.global.failoverOrder"),
        ("global: {strategy: nearest}", "spec.global.strategy"),
        ("global: {ttlSeconds: 99999}", "spec.global.ttlSeconds"),
        (
            "global: {whenNoneHealthy: pray}",
            "spec.global.whenNoneHealthy",
        ),
    ] {
        let refused = mgmt
            .apply_yaml(&format!(
                "apiVersion: connectivity.tanzu.vmware.com/v1alpha1\nkind: GatewayDNS\n\
                 metadata: {{name: bad, namespace: dev-team}}\n\
                 spec: {{service: projectcontour/envoy, {spec}}}\n"
            ))
            .await
            .expect_err(spec)
            .to_string();
        assert!(refused.contains(field), "{spec}: {refused}");
    }

    let took = restart_and_change(&fleet).await;
    eprintln!(
        "cluster-a's API server restarted: its agent answered a slice created once the server answered after {:.2} s",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(2), "{took:?}, bar 2 s");
}

/// A status lists at most 20 clusters, then only those that need attention. A cluster that was
/// published (so not listed) and cannot be reached when the controller starts again keeps its
/// last addresses: the new controller reads them back from its slices in another cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_keeps_the_last_addresses_of_an_unlisted_cluster_it_cannot_reach() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let mut fleet = Fleet::start(&binaries, &["cluster-a", "cluster-b"], "").await;
    let mgmt = fleet.bed.cluster("management");
    // 20 more selected clusters, all on cluster-b's API server: 22 selected.
    let kubeconfig = std::fs::read(&fleet.bed.cluster("cluster-b").kubeconfig).unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(mgmt.client.clone(), "dev-team");
    for v in 0..20 {
        let name = format!("more-{v:02}");
        mgmt.apply_yaml(&format!(
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\n\
             metadata: {{name: {name}, namespace: dev-team, labels: {{hasContour: 'true'}}}}\nspec: {{}}\n"
        ))
        .await
        .unwrap();
        let mut secret = k8s_openapi::api::core::v1::Secret::default();
        secret.metadata.name = Some(format!("{name}-kubeconfig"));
        secret.data = Some(
            [(
                "value".to_string(),
                k8s_openapi::ByteString(kubeconfig.clone()),
            )]
            .into(),
        );
        secrets.create(&Default::default(), &secret).await.unwrap();
    }
    // Every one published: cluster-a is no longer listed, and cluster-b's agent answers for it.
    let started = Instant::now();
    loop {
        let now = fleet.status().await;
        if now["clusterCounts"]["Published"] == 22 && fleet.entry("cluster-a").await.is_none() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "22 clusters never all published: {now}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let a_ip = gateway_ip("cluster-a");
    wait_dig(
        fleet.dns("cluster-b"),
        &per_cluster("cluster-a"),
        "A",
        Duration::from_secs(30),
        a(&[a_ip]),
    )
    .await
    .unwrap();

    // The controller stops; cluster-a's API server stops; a new controller starts.
    fleet.stop_controller();
    fleet.bed.cluster("cluster-a").stop();
    fleet.start_controller("xcc-controller-2.log").await;
    let took = fleet
        .wait_entry("cluster-a", Duration::from_secs(60), |e| {
            e["state"] == "Unreachable"
        })
        .await;
    let entry = fleet.entry("cluster-a").await.unwrap();
    assert_eq!(entry["addresses"], serde_json::json!([a_ip]), "{entry}");
    eprintln!(
        "restarted controller: cluster-a listed as unreachable with its last address after {:.1} s",
        took.as_secs_f64()
    );
    // Its records stay where they were.
    let kept = dig(fleet.dns("cluster-b"), &per_cluster("cluster-a"), "A")
        .await
        .unwrap();
    assert_eq!(kept.data, [a_ip], "{kept:?}");
}

/// Stops cluster-a's API server long enough for its agent's EndpointSlice watch to fail several
/// times in a row, starts it again, and as soon as it answers creates a slice in the agent's
/// namespace (not the controller's: no managed-by label); returns how long until cluster-a's
/// agent answers its name.
async fn restart_and_change(fleet: &Fleet) -> Duration {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let ca = fleet.bed.cluster("cluster-a");
    let name = "kuard.gateway.restart.dev-team.clusters.xcc.test";
    ca.stop();
    // sleep: the outage itself, not a wait for an event: 10 s of connections refused, long
    // enough for a watch's backoff to grow (kube's default schedule reaches 13 s by then).
    tokio::time::sleep(Duration::from_secs(10)).await;
    ca.restart().await.unwrap();
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "restart-probe",
            "namespace": "xcc-dns",
            "annotations": {
                "connectivity.tanzu.vmware.com/dns-hostname":
                    "*.gateway.restart.dev-team.clusters.xcc.test"
            }
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.9.0.1"]}]
    }))
    .unwrap();
    let changed = Instant::now();
    Api::<EndpointSlice>::namespaced(ca.client.clone(), "xcc-dns")
        .create(&Default::default(), &slice)
        .await
        .unwrap();
    wait_dig(
        fleet.dns("cluster-a"),
        name,
        "A",
        Duration::from_secs(40),
        a(&["10.9.0.1"]),
    )
    .await
    .unwrap();
    changed.elapsed()
}

/// Sends `count` A queries for `name` to `server`, `pause` apart; returns (answered with data,
/// SERVFAIL, NXDOMAIN, no answer).
async fn hammer(server: SocketAddr, name: &str, count: usize, pause: Duration) -> [usize; 4] {
    use hickory_proto::{
        op::{Message, Query, ResponseCode},
        rr::{Name, RecordType},
    };
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let name = Name::from_ascii(name).unwrap();
    let mut counts = [0usize; 4];
    let mut buf = [0u8; 1500];
    for i in 0..count {
        let mut msg = Message::query();
        msg.metadata.id = (i % 65536) as u16;
        msg.add_query(Query::query(name.clone(), RecordType::A));
        socket
            .send_to(&msg.to_vec().unwrap(), server)
            .await
            .unwrap();
        let answer = loop {
            match tokio::time::timeout(Duration::from_millis(500), socket.recv_from(&mut buf)).await
            {
                Ok(Ok((n, _))) => match Message::from_vec(&buf[..n]) {
                    Ok(m) if m.metadata.id == msg.metadata.id => break Some(m),
                    _ => continue,
                },
                _ => break None,
            }
        };
        match answer {
            Some(m)
                if m.metadata.response_code == ResponseCode::NoError && !m.answers.is_empty() =>
            {
                counts[0] += 1
            }
            Some(m) if m.metadata.response_code == ResponseCode::ServFail => counts[1] += 1,
            Some(m) if m.metadata.response_code == ResponseCode::NXDomain => counts[2] += 1,
            _ => counts[3] += 1,
        }
        tokio::time::sleep(pause).await;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_agent_answers_every_query_while_the_management_cluster_is_down() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let fleet = Fleet::start(
        &binaries,
        &["cluster-a", "cluster-b"],
        "  staleRecords: {withdrawAfter: 2s, readmitAfter: 1}\n",
    )
    .await;
    let names: Vec<String> = ["cluster-a", "cluster-b"]
        .iter()
        .map(|c| per_cluster(c))
        .collect();
    for dns in [fleet.dns("cluster-a"), fleet.dns("cluster-b")] {
        for (name, cluster) in names.iter().zip(["cluster-a", "cluster-b"]) {
            wait_dig(
                dns,
                name,
                "A",
                Duration::from_secs(30),
                a(&[gateway_ip(cluster)]),
            )
            .await
            .unwrap();
        }
    }
    let mgmt = fleet.bed.cluster("management");
    let port = mgmt
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap();
    mgmt.kill9();
    // It is down for real: nothing listens there any more.
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err(),
        "the management API server still accepts connections"
    );
    // 10,000 queries to each agent, over about 20 s: ten times the stale policy's 2 s, so a
    // controller that withdrew anything it cannot see would show here.
    let mut runs = Vec::new();
    for (cluster, agent) in &fleet.agents {
        for name in &names {
            let (server, name, cluster) = (agent.dns, name.clone(), cluster.clone());
            runs.push(tokio::spawn(async move {
                let counts = hammer(server, &name, 5_000, Duration::from_millis(3)).await;
                (cluster, name, counts)
            }));
        }
    }
    let mut total = 0;
    for run in runs {
        let (cluster, name, [ok, servfail, nx, silent]) = run.await.unwrap();
        eprintln!(
            "management down: {cluster}'s agent, {name}: {ok} answered, {servfail} SERVFAIL, {nx} NXDOMAIN, {silent} unanswered"
        );
        assert_eq!(
            (servfail, nx, silent),
            (0, 0, 0),
            "{cluster}'s agent for {name}"
        );
        total += ok;
    }
    assert_eq!(total, 20_000);
}

/// The acceptance figure (not part of the default run: about 20 s a trial): 20 times, kill -9
/// cluster-a's API server with `withdrawAfter: 10s`, measure until its address has left
/// cluster-b's answers, and bring it back (after the damping count of 3 health checks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: cargo test -p xcc-e2e --test e2e -- --ignored failover_benchmark"]
async fn failover_benchmark() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    const TRIALS: usize = 20;
    let fleet = Fleet::start(
        &binaries,
        &["cluster-a", "cluster-b"],
        "  staleRecords: {withdrawAfter: 10s, readmitAfter: 3}\n",
    )
    .await;
    for cluster in ["cluster-a", "cluster-b"] {
        wait_dig(
            fleet.dns("cluster-b"),
            &per_cluster(cluster),
            "A",
            Duration::from_secs(30),
            a(&[gateway_ip(cluster)]),
        )
        .await
        .unwrap();
    }
    let mut gone = Vec::with_capacity(TRIALS);
    for _ in 0..TRIALS {
        gone.push(kill_and_return(&fleet).await);
    }
    gone.sort();
    let s = |d: Duration| d.as_secs_f64();
    let (p50, p99, max) = (
        crate::measure::percentile(&gone, 50.0),
        crate::measure::percentile(&gone, 99.0),
        gone[TRIALS - 1],
    );
    println!(
        "failover, kill -9 of cluster-a's API server with withdrawAfter 10s → its address out of cluster-b's answers, {TRIALS} trials: p50 {:.1} s, p99 {:.1} s, max {:.1} s (bar: p99 ≤ 20 s)",
        s(p50),
        s(p99),
        s(max)
    );
    assert!(p99 <= Duration::from_secs(20), "p99 {p99:?}");
}

//! Data-path health checks (issue 38) on the plain test bed: `spec.healthCheck` makes every
//! agent probe the gateways from its own cluster and leave one that stops answering out of its
//! answers while its Service stays Ready. The gateways' load-balancer addresses are local
//! addresses of this machine (198.18.38.11 for cluster-a, 198.18.38.12 for cluster-b: the
//! range is routed to the loopback interface while the test runs; an EndpointSlice may not
//! carry 127.0.0.0/8) where this test runs the HTTP listeners the agents (host processes)
//! probe.

use std::{
    net::{IpAddr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hickory_proto::rr::Name;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use xcc_e2e::{
    Testbed, free_port, require_testbed,
    xcc::{Agent, metrics_text, sample_sum},
};

use crate::{
    bench_propagation::ask,
    failover::{GLOBAL, per_cluster, set_ready},
    measure::percentile,
    xcc_dns::{controller, envoy, management},
};

const TRIALS: usize = 20;
/// The bar: a gateway that stops answering leaves the agent's answers within this (p99), and
/// one that answers again is back within it. The default check (every 250 ms, 2 failures or
/// successes in a row) takes 250 to 550 ms.
const BAR: Duration = Duration::from_secs(1);

/// An HTTP gateway on `addr` answering `200` to everything (`503` to connections from the
/// address in `refused`), counting connections; stopped (its socket closed: connections
/// refused) and started again on the same address.
struct Gateway {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    refused: Arc<std::sync::Mutex<Option<IpAddr>>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Gateway {
    fn new(addr: SocketAddr) -> Gateway {
        let mut gateway = Gateway {
            addr,
            accepted: Arc::default(),
            refused: Arc::default(),
            task: None,
        };
        gateway.start();
        gateway
    }

    fn start(&mut self) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind(self.addr).unwrap();
        let listener = socket.listen(64).unwrap();
        let (accepted, refused) = (self.accepted.clone(), self.refused.clone());
        self.task = Some(tokio::spawn(async move {
            while let Ok((mut stream, peer)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::Relaxed);
                let status = if *refused.lock().unwrap() == Some(peer.ip()) {
                    "503 Service Unavailable"
                } else {
                    "200 OK"
                };
                tokio::spawn(async move {
                    let mut buffer = [0u8; 1024];
                    let _ = stream.read(&mut buffer).await;
                    let answer = format!(
                        "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        }));
    }

    /// Closes the listening socket (when this returns, connections are refused).
    async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Answers 503 to the probes from `source` (none: to nobody).
    fn refuse(&self, source: Option<IpAddr>) {
        *self.refused.lock().unwrap() = source;
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

/// The addresses the gateways listen on: a benchmarking range (RFC 2544) made local.
const RANGE: &str = "198.18.38.0/24";

fn ip(last: u8) -> IpAddr {
    IpAddr::from([198, 18, 38, last])
}

/// [`RANGE`] routed to the loopback interface (any of its addresses can be listened on) for as
/// long as this lives.
struct LocalRange;

impl LocalRange {
    fn add() -> LocalRange {
        let status = std::process::Command::new("ip")
            .args(["route", "replace", "local", RANGE, "dev", "lo"])
            .status()
            .expect("ip");
        assert!(
            status.success(),
            "ip route replace local {RANGE} dev lo: {status}"
        );
        LocalRange
    }
}

impl Drop for LocalRange {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args([
                "route", "del", "local", RANGE, "dev", "lo", "table", "local",
            ])
            .status();
    }
}

/// Asks `server` for `name` every 5 ms until the answer is `want` (sorted); how long it took.
async fn until_answer(
    server: SocketAddr,
    name: &str,
    want: &[IpAddr],
    timeout: Duration,
) -> Duration {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let name = Name::from_ascii(format!("{name}.")).unwrap();
    let started = Instant::now();
    let mut id: u16 = 0;
    loop {
        id = id.wrapping_add(1);
        let mut got = ask(&socket, server, &name, id).await;
        got.sort();
        if got == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < timeout,
            "{server} answers {got:?} for {name}, not {want:?}, after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `GET path` on the agent's admin server: the body.
async fn admin_get(agent: &Agent, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(agent.admin).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// Waits until the agent's metric `name` (summed) passes `check`; the metrics text.
async fn until_metric(agent: &Agent, name: &str, check: impl Fn(f64) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = metrics_text(agent.admin).await.unwrap_or_default();
        if check(sample_sum(&text, name, &[])) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{name} on {}:\n{text}",
            agent.admin
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Our agent on `cluster`, under the manifests' ServiceAccount, sending its probes from
/// `source`.
async fn agent_probing_from(cluster: &xcc_e2e::Cluster, source: IpAddr) -> Agent {
    crate::xcc_dns::agent_with(cluster, &[&format!("--probe-source-address={source}")]).await
}

async fn apply_gateway_dns(bed: &Testbed, extra: &str) {
    bed.cluster("management")
        .apply_yaml(&format!(
            "apiVersion: connectivity.tanzu.vmware.com/v1alpha1\nkind: GatewayDNS\n\
             metadata: {{name: dev-team-gateway-dns, namespace: dev-team}}\n\
             spec:\n  clusterSelector: {{matchLabels: {{hasContour: 'true'}}}}\n  \
             service: projectcontour/envoy\n  resolutionType: loadBalancer\n{extra}"
        ))
        .await
        .unwrap();
}

fn report(what: &str, mut times: Vec<Duration>) -> Duration {
    times.sort();
    let (p50, p99, worst) = (
        percentile(&times, 50.0),
        percentile(&times, 99.0),
        times[times.len() - 1],
    );
    println!(
        "{what} over {} trials: p50 {:.0} ms, p99 {:.0} ms, worst {:.0} ms",
        times.len(),
        p50.as_secs_f64() * 1000.0,
        p99.as_secs_f64() * 1000.0,
        worst.as_secs_f64() * 1000.0
    );
    p99
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_stops_answering_leaves_each_agents_answers_within_a_second() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["management", "cluster-a", "cluster-b"])
        .await
        .unwrap();
    management(&bed, &["cluster-a", "cluster-b"]).await;
    let mgmt = bed.cluster("management");
    let kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let _controller = controller(&bed, &kubeconfig.path);
    let _range = LocalRange::add();
    let port = free_port();
    let mut gateways = Vec::new();
    let mut agents = Vec::new();
    // Each cluster's agent probes from an address of its own (198.18.38.1, .2).
    for (i, (name, last)) in [("cluster-a", 11), ("cluster-b", 12)]
        .into_iter()
        .enumerate()
    {
        let cluster = bed.cluster(name);
        agents.push(agent_probing_from(cluster, ip(i as u8 + 1)).await);
        gateways.push(Gateway::new(SocketAddr::new(ip(last), port)));
        envoy(cluster, &format!(r#"[{{"ip":"{}"}}]"#, ip(last))).await;
        set_ready(cluster, true).await;
    }
    let (agent_a, agent_b) = (&agents[0], &agents[1]);
    let both = [ip(11), ip(12)];

    // Without spec.healthCheck: served as before, nothing probed.
    apply_gateway_dns(&bed, "").await;
    for agent in &agents {
        until_answer(agent.dns, GLOBAL, &both, Duration::from_secs(60)).await;
    }
    let text = metrics_text(agent_b.admin).await.unwrap();
    assert_eq!(
        sample_sum(&text, "xcc_agent_gateway_probe_targets", &[]),
        0.0,
        "{text}"
    );
    assert!(!text.contains("xcc_agent_gateway_probes_total{"), "{text}");
    assert_eq!(gateways.iter().map(Gateway::accepted).sum::<u64>(), 0);

    // With it: each agent probes both gateways.
    let check = format!("  healthCheck: {{type: http, port: {port}, path: /healthz}}\n");
    apply_gateway_dns(&bed, &check).await;
    for agent in &agents {
        until_metric(agent, "xcc_agent_gateway_probe_targets", |n| n == 2.0).await;
    }
    until_metric(agent_b, "xcc_agent_gateway_probes_total", |n| n > 0.0).await;
    // Probed: each gateway is connected to (the counters above may move before the second
    // gateway's first probe).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gateways.iter().all(|g| g.accepted() > 0) {
        assert!(
            Instant::now() < deadline,
            "connections per gateway: {:?}",
            gateways.iter().map(Gateway::accepted).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every gateway passes: both answer.
    until_answer(agent_b.dns, GLOBAL, &both, Duration::from_secs(10)).await;

    // cluster-a's gateway stops answering (its Service and endpoints stay Ready): out of every
    // agent's global answer, back when it answers again.
    let (mut out, mut back) = (Vec::new(), Vec::new());
    for _ in 0..TRIALS {
        gateways[0].stop().await;
        out.push(until_answer(agent_b.dns, GLOBAL, &[ip(12)], Duration::from_secs(10)).await);
        until_answer(agent_a.dns, GLOBAL, &[ip(12)], Duration::from_secs(10)).await;
        gateways[0].start();
        back.push(until_answer(agent_b.dns, GLOBAL, &both, Duration::from_secs(10)).await);
        until_answer(agent_a.dns, GLOBAL, &both, Duration::from_secs(10)).await;
    }
    let out_p99 = report("out of cluster-b's answers", out);
    let back_p99 = report("back in cluster-b's answers", back);
    assert!(out_p99 <= BAR, "out after {out_p99:?} (p99)");
    assert!(back_p99 <= BAR, "back after {back_p99:?} (p99)");
    let text = metrics_text(agent_b.admin).await.unwrap();
    let target_a = format!("http://{}:{port}/healthz", ip(11));
    for result in ["ok", "refused"] {
        let probes = sample_sum(
            &text,
            "xcc_agent_gateway_probes_total",
            &[("target", &target_a), ("result", result)],
        );
        assert!(probes > 0.0, "{result}: {text}");
    }
    assert!(text.contains(&format!(
        "xcc_agent_gateway_probe_duration_seconds_count{{target=\"{target_a}\"}}"
    )));

    // cluster-a's gateway fails for cluster-b's probes only (a partition): out of cluster-b's
    // answers, while cluster-a's agent keeps answering with it, every answer.
    gateways[0].refuse(Some(ip(2)));
    let partitioned = Instant::now();
    until_answer(agent_b.dns, GLOBAL, &[ip(12)], Duration::from_secs(10)).await;
    let seen_by_b = partitioned.elapsed();
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let global = Name::from_ascii(format!("{GLOBAL}.")).unwrap();
    let mut lost = 0;
    let mut id: u16 = 0;
    for _ in 0..200 {
        // An answer that does not come within the client's 200 ms (a busy machine) is asked
        // again, up to 3 times; what counts as lost is an answer without both gateways.
        let mut got = Vec::new();
        for _ in 0..3 {
            id = id.wrapping_add(1);
            got = ask(&socket, agent_a.dns, &global, id).await;
            if !got.is_empty() {
                break;
            }
        }
        got.sort();
        lost += usize::from(got != both);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!(
        "partition: out of cluster-b's answers after {:.0} ms; cluster-a's agent lost {lost} of 200 answers",
        seen_by_b.as_secs_f64() * 1000.0
    );
    assert_eq!(
        lost, 0,
        "cluster-a's agent still reaches cluster-a's gateway"
    );
    let b_explained: serde_json::Value =
        serde_json::from_str(&admin_get(agent_b, &format!("/explain?name={GLOBAL}&type=A")).await)
            .unwrap();
    let a_in_b = b_explained["probed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["address"] == ip(11).to_string().as_str())
        .cloned()
        .unwrap_or_default();
    assert_eq!(a_in_b["state"], "down", "{b_explained}");
    assert_eq!(a_in_b["lastError"], "HTTP status 503", "{b_explained}");
    gateways[0].refuse(None);
    until_answer(agent_b.dns, GLOBAL, &both, Duration::from_secs(10)).await;

    // Both fail: the global name keeps its last healthy set (cluster-b's), said by the metric
    // and /explain.
    gateways[0].stop().await;
    until_answer(agent_b.dns, GLOBAL, &[ip(12)], Duration::from_secs(10)).await;
    gateways[1].stop().await;
    until_metric(agent_b, "xcc_agent_gateway_up", |up| up == 0.0).await;
    let text = until_metric(agent_b, "xcc_agent_gateway_fail_open", |n| n > 0.0).await;
    assert!(text.contains("xcc_agent_gateway_fail_open "), "{text}");
    until_answer(agent_b.dns, GLOBAL, &[ip(12)], Duration::from_secs(2)).await;
    until_answer(
        agent_b.dns,
        &per_cluster("cluster-a"),
        &[ip(11)],
        Duration::from_secs(2),
    )
    .await;
    let explained: serde_json::Value =
        serde_json::from_str(&admin_get(agent_b, &format!("/explain?name={GLOBAL}&type=A")).await)
            .unwrap();
    let probed = explained["probed"].as_array().expect("probed gateways");
    assert_eq!(probed.len(), 2, "{explained}");
    for p in probed {
        assert_eq!(p["state"], "down", "{explained}");
        assert_eq!(p["failOpen"], true, "{explained}");
        assert_eq!(p["lastError"], "connection refused", "{explained}");
        assert_eq!(
            p["inAnswer"],
            p["address"] == ip(12).to_string().as_str(),
            "{explained}"
        );
    }
    for gateway in &mut gateways {
        gateway.start();
    }
    until_answer(agent_b.dns, GLOBAL, &both, Duration::from_secs(10)).await;
    until_metric(agent_b, "xcc_agent_gateway_fail_open", |n| n == 0.0).await;

    // The check removed: no more probing.
    apply_gateway_dns(&bed, "").await;
    for agent in &agents {
        until_metric(agent, "xcc_agent_gateway_probe_targets", |n| n == 0.0).await;
    }
    let text = metrics_text(agent_b.admin).await.unwrap();
    assert!(!text.contains("xcc_agent_gateway_probes_total{"), "{text}");
}

//! Fleet benchmark (run by `bench/fleet.sh`, not by the default test run): the GatewayDNS
//! controller with N real workload API servers, an agent on each, one GatewayDNS selecting all,
//! and optionally V "virtual" clusters: Cluster objects whose kubeconfigs point round robin at
//! the N servers. Virtual clusters are not selected (they have no gateway of their own) but, as
//! every cluster of the namespace, each is sent every gateway's slice: they are the receivers
//! that make a change N + V writes.
//!
//! `XCC_FLEET_N` (default 6) and `XCC_FLEET_VIRTUAL` (default 0) choose the size;
//! `XCC_FLEET_RESOLUTION=nodePort` makes the GatewayDNS a `nodePort` one over one Node object per
//! cluster, and each change a change of that node's address on one cluster (a node flapping
//! there). Prints one `fleet` line per figure:
//! - GatewayDNS applied → every agent answers every gateway;
//! - one LB change → every agent answers, p50 / p99 (20 changes);
//! - slice writes per change, and when the last one was made (from the controller's log), and
//!   the writes of the other clusters' slices meanwhile (none: a change in one cluster writes
//!   only its own slice, to the clusters that resolve it);
//! - controller CPU per change, CPU of a reconcile that finds nothing to change (a Cluster
//!   relabelled without changing the selection), and the controller's RSS.

use std::{
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams},
};
use xcc_e2e::{free_port, require_testbed, spawn, xcc::binary};

use crate::measure::{create_all, percentile, rss_mib};
use crate::xcc_dns::{agent, envoy, management};

const CHANGES: usize = 20;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Waits until every agent in `agents` answers `name` with exactly `ip`.
async fn all_answer(agents: &[SocketAddr], name: &str, ip: IpAddr, limit: Duration) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let started = Instant::now();
    let name = Name::from_ascii(name).unwrap();
    let mut id = 0u16;
    for agent in agents {
        loop {
            id = id.wrapping_add(1);
            if crate::bench_propagation::ask(&socket, *agent, &name, id).await == [ip] {
                break;
            }
            assert!(
                started.elapsed() < limit,
                "{agent} never answered {name} with {ip}"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// User + system CPU time of process `pid`.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<u64>().ok())
        .sum();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// `EndpointSlice written` lines for `slice` in the controller's log (all, so far).
fn writes_of(log: &std::path::Path, slice: &str) -> usize {
    let needle = format!("slice={slice} ");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("EndpointSlice written") && l.contains(&needle))
        .count()
}

/// Successful reconciles so far, from the controller's metrics.
async fn reconciles(admin: SocketAddr) -> u64 {
    let text = reqwest_text(admin).await;
    text.lines()
        .find(|l| l.starts_with("xcc_controller_reconciles_total{result=\"ok\"}"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

async fn reqwest_text(admin: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(admin).await else {
        return String::new();
    };
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {admin}\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = stream.read_to_string(&mut out).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: bench/fleet.sh runs it"]
async fn fleet_benchmark() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let n = env_usize("XCC_FLEET_N", 6).max(2);
    let node_port = std::env::var("XCC_FLEET_RESOLUTION").as_deref() == Ok("nodePort");
    let virtual_clusters = env_usize("XCC_FLEET_VIRTUAL", 0);
    let names: Vec<String> = (0..n).map(|i| format!("c-{i:02}")).collect();
    let mut all: Vec<&str> = vec!["management"];
    all.extend(names.iter().map(String::as_str));
    let bed = xcc_e2e::Testbed::start_named(&binaries, &all)
        .await
        .unwrap();
    let workloads: Vec<&str> = names.iter().map(String::as_str).collect();
    management(&bed, &workloads).await;
    let mgmt = bed.cluster("management");
    // Virtual clusters: a Cluster and a kubeconfig Secret each, round robin over the servers.
    if virtual_clusters > 0 {
        let clusters = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "cluster.x-k8s.io",
            "v1beta1",
            "Cluster",
        ));
        let cluster_api: Api<DynamicObject> =
            Api::namespaced_with(mgmt.client.clone(), "dev-team", &clusters);
        let secrets: Api<Secret> = Api::namespaced(mgmt.client.clone(), "dev-team");
        let kubeconfigs: Vec<Vec<u8>> = names
            .iter()
            .map(|c| std::fs::read(&bed.cluster(c).kubeconfig).unwrap())
            .collect();
        let mut objects = Vec::new();
        let mut secret_objects = Vec::new();
        for v in 0..virtual_clusters {
            let name = format!("v-{v:04}");
            let mut object = DynamicObject::new(&name, &clusters).within("dev-team");
            object.data = serde_json::json!({"spec": {}});
            objects.push(object);
            secret_objects.push(Secret {
                metadata: ObjectMeta {
                    name: Some(format!("{name}-kubeconfig")),
                    namespace: Some("dev-team".into()),
                    ..Default::default()
                },
                data: Some(
                    [(
                        "value".to_string(),
                        k8s_openapi::ByteString(kubeconfigs[v % n].clone()),
                    )]
                    .into(),
                ),
                ..Default::default()
            });
        }
        create_all(&secrets, secret_objects).await;
        create_all(&cluster_api, objects).await;
    }
    let kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = mgmt.dir().join("xcc-controller.log");
    let controller = spawn(
        "xcc-controller",
        &binary("xcc-controller"),
        &[
            format!("--kubeconfig={}", kubeconfig.path.display()),
            format!("--admin-listen={admin}"),
            "--log=info".into(),
        ],
        &log,
    )
    .unwrap();
    let mut agents = Vec::new();
    for (i, c) in names.iter().enumerate() {
        let cluster = bed.cluster(c);
        agents.push(agent(cluster).await);
        envoy(cluster, &format!(r#"[{{"ip":"10.2.{i}.1"}}]"#)).await;
        if node_port {
            // Not the LB address: an answer with it is the node's.
            let ip = format!("10.4.{i}.1");
            crate::node_gateways::node(cluster, "node-0", true, &[("InternalIP", &ip)]).await;
        }
    }
    let dns: Vec<SocketAddr> = agents.iter().map(|a| a.dns).collect();
    let kuard = |c: &str| format!("kuard.gateway.{c}.dev-team.clusters.xcc.test");

    // GatewayDNS applied → every agent answers every gateway.
    let applied = Instant::now();
    mgmt.kubectl(&[
        "apply",
        "-f",
        &crate::xcc_dns::manifest("manifests/examples/dev-team-gateway-dns.yaml"),
    ])
    .await
    .unwrap();
    if node_port {
        mgmt.kubectl(&[
            "-n",
            "dev-team",
            "patch",
            "gatewaydns",
            "dev-team-gateway-dns",
            "--type=merge",
            "-p",
            r#"{"spec":{"resolutionType":"nodePort"}}"#,
        ])
        .await
        .unwrap();
    }
    for (i, c) in names.iter().enumerate() {
        let prefix = if node_port { "10.4" } else { "10.2" };
        let ip: IpAddr = format!("{prefix}.{i}.1").parse().unwrap();
        all_answer(&dns, &kuard(c), ip, Duration::from_secs(600)).await;
    }
    let to_all = applied.elapsed();
    let pid = controller.pid();
    // Settled: the controller has done what the apply asked (virtual clusters included).
    // sleep: lets the apply's last writes land before the measured changes (figures, not an
    // assertion of absence).
    tokio::time::sleep(Duration::from_secs(2 + (virtual_clusters / 100) as u64)).await;

    // One change on c-00 (its LB address, or its node's) → every agent answers the new address.
    let slice = "dev-team-c-00-gateway";
    let mut took = Vec::new();
    let mut writes = Vec::new();
    let mut last_write = Vec::new();
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(bed.cluster(&names[0]).client.clone(), "projectcontour");
    let nodes: Api<k8s_openapi::api::core::v1::Node> =
        Api::all(bed.cluster(&names[0]).client.clone());
    let others: Vec<String> = names[1..]
        .iter()
        .map(|c| format!("dev-team-{c}-gateway"))
        .collect();
    let others_before: usize = others.iter().map(|s| writes_of(&log, s)).sum();
    let cpu_before = cpu(pid);
    for k in 0..CHANGES {
        let ip: IpAddr = format!("10.3.{}.{}", k / 200, 1 + k % 200).parse().unwrap();
        let before = writes_of(&log, slice);
        if node_port {
            let patch = serde_json::json!({"status": {"addresses": [
                {"type": "InternalIP", "address": ip.to_string()}]}});
            nodes
                .patch_status("node-0", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        } else {
            let patch = serde_json::json!({"status": {"loadBalancer": {"ingress": [{"ip": ip.to_string()}]}}});
            services
                .patch_status("envoy", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
        // From the moment the API server accepted the change.
        let started = Instant::now();
        all_answer(&dns, &kuard(&names[0]), ip, Duration::from_secs(60)).await;
        took.push(started.elapsed());
        // Until every cluster of the namespace was written (virtual ones included). Virtual
        // clusters share the N servers: one whose server already holds the new slice (written
        // through another cluster of that server) needs no write, so the writes also end when
        // none came for a second; the time is that of the last one seen.
        let want = n + virtual_clusters;
        let (mut seen, mut last_at) = (0, started.elapsed());
        while seen < want && started.elapsed() < Duration::from_secs(30) {
            let now = writes_of(&log, slice) - before;
            if now > seen {
                (seen, last_at) = (now, started.elapsed());
            } else if seen > 0 && started.elapsed() - last_at > Duration::from_secs(1) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        last_write.push(last_at);
        writes.push(seen);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cpu_changes = cpu(pid).saturating_sub(cpu_before);
    let others_written = others.iter().map(|s| writes_of(&log, s)).sum::<usize>() - others_before;
    took.sort();
    last_write.sort();

    // A reconcile that finds nothing to change: a Cluster relabelled, the selection unchanged.
    let idle_cpu_before = cpu(pid);
    let idle_rounds = 10;
    for k in 0..idle_rounds {
        let before = reconciles(admin).await;
        mgmt.kubectl(&[
            "-n",
            "dev-team",
            "label",
            "cluster",
            &names[1],
            &format!("bench-round={k}"),
            "--overwrite",
        ])
        .await
        .unwrap();
        let started = Instant::now();
        while reconciles(admin).await <= before && started.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let idle_cpu = cpu(pid).saturating_sub(idle_cpu_before);
    let rss = rss_mib(pid);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut label = if virtual_clusters > 0 {
        format!("N={n} real + {virtual_clusters} virtual")
    } else {
        format!("N={n}")
    };
    if node_port {
        label.push_str(" nodePort");
    }
    let change = if node_port {
        "node change"
    } else {
        "LB change"
    };
    println!(
        "fleet {label}: GatewayDNS applied → every agent answers every gateway: {:.2} s",
        to_all.as_secs_f64()
    );
    println!(
        "fleet {label}: one {change} → all agents answer: p50 {:.1} ms, p99 {:.1} ms ({CHANGES} changes)",
        ms(percentile(&took, 50.0)),
        ms(percentile(&took, 99.0))
    );
    let writes_avg = writes.iter().sum::<usize>() as f64 / writes.len() as f64;
    println!(
        "fleet {label}: slice writes per change: {writes_avg:.1} (clusters in the namespace: {}); last write after p50 {:.1} ms, p99 {:.1} ms; other clusters' slices written meanwhile: {others_written}",
        n + virtual_clusters,
        ms(percentile(&last_write, 50.0)),
        ms(percentile(&last_write, 99.0))
    );
    println!(
        "fleet {label}: controller CPU per change: {:.1} ms; per no-op reconcile: {:.1} ms; RSS {rss:.0} MiB",
        ms(cpu_changes) / CHANGES as f64,
        ms(idle_cpu) / idle_rounds as f64
    );
    drop(agents);
    drop(controller);
}

//! Secret replication benchmark (run by `bench/secrets.sh`, not by the default test run): 1,000
//! SecretExports on a service cluster and 1,000 SecretImports on a workload cluster whose agent
//! is stopped; then the agent starts, and the clock runs until all 1,000 copies exist (bar:
//! < 3 s), over at most ceil(1,000 watches / 100) + 2 connections to the service cluster (HTTP/2
//! streams). Creating the imports is not timed: at about 100 objects a second it measures the
//! test bed's API server, not the agent. Then 100 updates of exported Secrets, each timed from
//! the service cluster's accepted write until the workload cluster's copy has the new value
//! (bar: p99 < 20 ms). The workload agent's RSS after both (bar ≤ 71 MiB).

use std::time::{Duration, Instant};

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api,
    api::{DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use xcc_e2e::{Testbed, require_testbed, xcc::Agent};

use crate::measure::{
    count_delta, cpu_time, create_all, percentile, request_counts, rss_mib, tcp_connections,
};
use crate::secrets::{NS, agent, create_namespace, kind, secret, secrets, value};

const IMPORTS: usize = 1000;
const UPDATES: usize = 100;
fn name(i: usize) -> String {
    format!("bench-{i:04}")
}

fn replication_object(kind_name: &str, i: usize, spec: serde_json::Value) -> DynamicObject {
    let mut object = DynamicObject::new(&name(i), &kind(kind_name)).within(NS);
    object.data = json!({ "spec": spec });
    object
}

/// How many of the workload's copies carry `want(i)` under key `v`.
async fn converged(api: &Api<Secret>, want: &dyn Fn(usize) -> String) -> usize {
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .filter(|s| {
            let n = s.metadata.name.as_deref().unwrap_or_default();
            n.strip_prefix("bench-")
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| value(s, "v") == Some(want(i)))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: bench/secrets.sh runs it"]
async fn secret_replication_benchmark() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["service", "workload"])
        .await
        .unwrap();
    let (service, workload) = (bed.cluster("service"), bed.cluster("workload"));
    let service_agent = agent(service).await;
    let mut stopped = agent(workload).await;
    stopped.process.stop(Duration::from_secs(10));
    let reader = service
        .mint_kubeconfig(NS, "upstream-replication-sa")
        .await
        .unwrap();

    // The service cluster: 1,000 Secrets, each exported to the replication ServiceAccount.
    let started = Instant::now();
    let sources: Vec<Secret> = (0..IMPORTS)
        .map(|i| secret(&name(i), &[("v", &format!("v1-{i}"))], &[]))
        .collect();
    create_all(&secrets(service), sources).await;
    let exports_api: Api<DynamicObject> =
        Api::namespaced_with(service.client.clone(), NS, &kind("SecretExport"));
    let exports = (0..IMPORTS)
        .map(|i| {
            replication_object(
                "SecretExport",
                i,
                json!({"secret": {"name": name(i)}, "serviceAccount": {"name": "upstream-replication-sa"}}),
            )
        })
        .collect();
    create_all(&exports_api, exports).await;
    let created = started.elapsed();
    loop {
        let list = exports_api.list(&ListParams::default()).await.unwrap();
        let ready = list
            .items
            .iter()
            .filter(|e| {
                e.data["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .count();
        if ready == IMPORTS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "only {ready} of {IMPORTS} exports Ready after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "secrets: {IMPORTS} Secrets and SecretExports created in {:.2} s, all exports Ready in {:.2} s",
        created.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    // The workload cluster: the kubeconfig Secret, then 1,000 imports; the clock runs from the
    // first import's creation until every copy is there.
    create_namespace(workload).await;
    let kubeconfig = std::fs::read_to_string(&reader.path).unwrap();
    secrets(workload)
        .create(
            &PostParams::default(),
            &secret("energy-source", &[("kubeconfig", &kubeconfig)], &[]),
        )
        .await
        .unwrap();
    let imports_api: Api<DynamicObject> =
        Api::namespaced_with(workload.client.clone(), NS, &kind("SecretImport"));
    let imports = (0..IMPORTS)
        .map(|i| {
            replication_object(
                "SecretImport",
                i,
                json!({"secret": {"name": name(i)}, "remoteKubeconfig": {"name": "energy-source"}}),
            )
        })
        .collect();
    let started = Instant::now();
    create_all(&imports_api, imports).await;
    let created = started.elapsed();
    let kubeconfig = workload
        .mint_kubeconfig("xcc-dns", "xcc-agent")
        .await
        .unwrap();
    let replication = |resource: &str| {
        ["secrets", "secretimports", "secretexports", "events"].contains(&resource)
    };
    let before = [
        request_counts(service, replication).await,
        request_counts(workload, replication).await,
    ];
    // Who spends the machine's CPU while the imports converge.
    let etcd = bed.pids()[0];
    let busy = [
        ("workload API server", workload.apiserver_pid()),
        ("service API server", service.apiserver_pid()),
        ("etcd", etcd),
        ("service agent", service_agent.process.pid()),
    ];
    let cpu_before: Vec<Duration> = busy.iter().map(|(_, pid)| cpu_time(*pid)).collect();
    let started = Instant::now();
    let workload_agent = Agent::start(
        &kubeconfig.path,
        &workload.dir().join("xcc-agent-bench.log"),
        &["--log=info"],
    )
    .unwrap();
    let copies = secrets(workload);
    let v1 = |i: usize| format!("v1-{i}");
    // When the first copy, a quarter, half, three quarters and all of them were there.
    let mut milestones = Vec::new();
    loop {
        let done = converged(&copies, &v1).await;
        while milestones.len() < 5 && done >= (IMPORTS * milestones.len() / 4).max(1) {
            milestones.push(started.elapsed());
        }
        if done == IMPORTS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {done} of {IMPORTS} copies after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let converge = started.elapsed();
    let mut cpu: Vec<String> = busy
        .iter()
        .zip(&cpu_before)
        .map(|((who, pid), before)| {
            format!(
                "{who} {:.2} s",
                cpu_time(*pid).saturating_sub(*before).as_secs_f64()
            )
        })
        .collect();
    cpu.push(format!(
        "workload agent {:.2} s",
        cpu_time(workload_agent.process.pid()).as_secs_f64()
    ));
    eprintln!(
        "secrets: CPU used while converging ({:.2} s on 2 cores): {}",
        converge.as_secs_f64(),
        cpu.join(", ")
    );
    let requests = [
        count_delta(&request_counts(service, replication).await, &before[0]),
        count_delta(&request_counts(workload, replication).await, &before[1]),
    ];
    let at: Vec<String> = milestones
        .iter()
        .map(|t| format!("{:.2}", t.as_secs_f64()))
        .collect();
    eprintln!(
        "secrets: copies there at (s): first {}, 25% {}, 50% {}, 75% {}, all {}",
        at[0], at[1], at[2], at[3], at[4]
    );
    for (cluster, requests) in ["service", "workload"].iter().zip(&requests) {
        let total: f64 = requests.values().sum();
        eprintln!(
            "secrets: requests on the {cluster} cluster while converging ({:.1} per import, the benchmark's own lists included): {requests:?}",
            total / IMPORTS as f64
        );
    }
    let service_port: u16 = service
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the API server's port");
    let connections = tcp_connections(workload_agent.process.pid(), service_port);
    let connection_bar = IMPORTS.div_ceil(xcc_kube::h2::STREAMS_PER_CONNECTION) + 2;
    eprintln!(
        "secrets: {IMPORTS} imports created in {:.2} s (agent stopped); agent started, all copies in {:.2} s (bar < 3 s); {connections} connections to the service cluster (bar ≤ {connection_bar}); agent RSS {:.0} MiB",
        created.as_secs_f64(),
        converge.as_secs_f64(),
        rss_mib(workload_agent.process.pid())
    );

    // Updates: one at a time, each timed from the accepted write to the copy's new value.
    let mut took = Vec::with_capacity(UPDATES);
    for u in 0..UPDATES {
        let i = (u * 7) % IMPORTS;
        let new = format!("v2-{u}-{i}");
        let patch = json!({"data": {"v": ByteString(new.clone().into_bytes())}});
        secrets(service)
            .patch(&name(i), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let written = Instant::now();
        loop {
            let copy = copies.get(&name(i)).await.unwrap();
            if value(&copy, "v").as_deref() == Some(new.as_str()) {
                break;
            }
            assert!(
                written.elapsed() < Duration::from_secs(30),
                "update {u} of {} not replicated after 30 s",
                name(i)
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        took.push(written.elapsed());
    }
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let rss = rss_mib(workload_agent.process.pid());
    eprintln!(
        "secrets: {UPDATES} updates: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (bar p99 < 20 ms); agent RSS {rss:.0} MiB (bar ≤ 71 MiB)",
        ms(percentile(&took, 50.0)),
        ms(percentile(&took, 99.0)),
        ms(*took.last().unwrap()),
    );
    assert!(converge < Duration::from_secs(3), "convergence bar missed");
    assert!(connections <= connection_bar, "connection bar missed");
    assert!(
        percentile(&took, 99.0) < Duration::from_millis(20),
        "update p99 bar missed"
    );
    assert!(rss <= 71.0, "RSS bar missed");
}

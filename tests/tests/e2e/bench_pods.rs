//! Lookup latency from a pod (run by `bench/pods.sh`, not by the default test run): on a real
//! node of cluster-a with the workload install, a pod resolves a name of the zone (its CoreDNS
//! forwards it to xcc-agent, as the patcher Job set it up) and a cluster-local Service name
//! (`kubernetes`, answered by the same CoreDNS), through the C library's resolver with the pod's
//! own resolv.conf (search path, `ndots:5`), interleaved, and prints p50/p99 of each.
//!
//! The gateway record is the EndpointSlice xcc-controller would write (this bench has no
//! management cluster); the agent serves it as it serves the controller's.

use std::time::Duration;

use xcc_e2e::{Testbed, require_node_testbed};

use crate::pods::{NGINX, client_pod, install_workload, nxdomain_or_answer};

const LOOKUPS: &str = "3000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: bench/pods.sh runs it"]
async fn pod_lookup_latency() {
    let Some(binaries) = require_node_testbed() else {
        return;
    };
    let bed = Testbed::start_with_nodes(&binaries, &["cluster-a"], &["cluster-a"])
        .await
        .unwrap();
    let ca = bed.cluster("cluster-a");
    install_workload(ca).await;
    ca.apply_yaml(
        "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dev-team-cluster-a-gateway
  namespace: xcc-dns
  labels: {kubernetes.io/service-name: dev-team-cluster-a-gateway}
  annotations:
    connectivity.tanzu.vmware.com/dns-hostname: '*.gateway.cluster-a.dev-team.clusters.xcc.test'
    connectivity.tanzu.vmware.com/gateway-dns-ref: dev-team/dev-team-gateway-dns
addressType: IPv4
endpoints:
- addresses: [10.250.0.80]
",
    )
    .await
    .unwrap();
    ca.apply_yaml(&client_pod()).await.unwrap();
    ca.wait_pod_ready("default", "client", Duration::from_secs(60))
        .await
        .unwrap();
    // Through the patched CoreDNS, the record answers.
    nxdomain_or_answer(ca, Duration::from_secs(90), Some("10.250.0.80")).await;
    let resolv = ca
        .exec("default", "client", &["cat", "/etc/resolv.conf"])
        .await
        .unwrap();
    println!(
        "pod resolv.conf: {}",
        resolv.lines().collect::<Vec<_>>().join(" | ")
    );
    // Warm up, then the measured run: both names in every round, back to back.
    for n in ["200", LOOKUPS] {
        let out = ca
            .exec(
                "default",
                "client",
                &["lookup", "-n", n, NGINX, "kubernetes"],
            )
            .await
            .unwrap();
        if n == LOOKUPS {
            for line in out.lines().filter(|l| *l != "started") {
                println!("pod lookup: {line}");
                assert!(line.contains(" failed=0 "), "{line}");
            }
        }
    }
}

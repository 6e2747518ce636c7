//! End-to-end tests on the real multi-cluster test bed (one test binary, one module per topic).
//! Without a test bed they skip with one loud line, except with CI=true where they fail.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

mod agent_leader;
mod bench_fleet;
mod bench_mcs;
mod bench_mcs_dns;
mod bench_pods;
mod bench_projection;
mod bench_propagation;
mod bench_resource_sync;
mod bench_secrets;
mod canary;
mod cli;
mod cli_link;
mod cluster_group;
mod failover;
mod gatewaydns_names;
mod group_churn;
mod health_checks;
mod https;
mod install;
mod isolation;
mod least_privilege;
mod mcs;
mod mcs_conformance;
mod mcs_dns;
mod measure;
mod metrics;
mod mixed_fleet;
mod moved_copies;
mod node_gateways;
mod node_ports;
mod nodes;
mod original_peer;
mod outage;
mod peer_http2;
mod plumber;
mod pods;
mod projection;
mod projection_workload;
mod resource_sync;
mod secrets;
mod shared_watches;
mod shutdown;
mod smoke;
mod teardown;
mod trust;
mod xcc_dns;

//! The shared sync core every reconciler runs on: the local client, the one cache of peer
//! clients (behind the kubeconfig trust gate), the one watch per (cluster, kind) ([`Sources`]),
//! the local Secret view built on it, and the sync metrics.
//!
//! A crate of its own rather than a module tree of `xcc-kube`: it is the layer between the
//! plumbing every binary needs (`xcc-kube`: the trust gate, the peer-client cache, HTTP/2
//! clients, backoff, conditions) and the reconcilers, and only the binaries that run reconcilers
//! (the agent and the controller) need it, with the process skeleton they share (the admin
//! server, leader election); the CLI and the CoreDNS patcher link `xcc-kube` without it. The peer clients stay in `xcc-kube`
//! ([`PeerClients`], re-exported here) because the controller builds and probes its workload
//! clients with them without the rest of this core, and they sit on the trust gate and the HTTP/2
//! client there.
//!
//! - [`sources`]: one watch per (cluster, kind), shared by every reconciler that reads that kind.
//! - [`sink`]: the one local writer (forced server-side apply, status apart, delete by UID).
//! - [`wakers`]: the watches a reconciler opens per object, each waking that object.
//! - [`metrics`]: per watch, peer server and reconciler.
//! - [`kit`]: what every reconciler says about itself, and the runner of a process's list.
//! - [`admin`]: the admin HTTP server of every process (health, readiness, metrics, own routes).
//! - [`leader`]: leader election over a Lease ([`run_while_leading`], `--leader-elect`).
//! - [`outage`]: what every retry loop says about a source it cannot reach: one WARN when an
//!   outage starts, one INFO when it ends ([`Outage`](outage::Outage)).
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "a test is one scenario read top to bottom; the line limit is for production code"
    )
)]
#![forbid(unsafe_code)]

pub mod admin;
pub mod kit;
pub mod leader;
pub mod metrics;
pub mod outage;
pub mod sink;
pub mod sources;
pub mod task;
pub mod wakers;

use kube::Client;
pub use leader::{LeaderElectArgs, LeaseConfig, run_while_leading};
pub use xcc_kube::PeerClients;

use crate::{
    metrics::SyncMetrics,
    sources::{LocalSecrets, Sources},
};

/// From now on the process has `within` to exit: past it, it says so and exits at once with
/// status 1. Every binary calls this at its first SIGTERM, with its shutdown delay and the
/// bound of its final steps, so that no step that outlives its own deadline (a bug) keeps a pod
/// waiting out its grace period.
pub fn exit_deadline(binary: &'static str, within: std::time::Duration) {
    let spawned = std::thread::Builder::new()
        .name("exit-deadline".into())
        .spawn(move || {
            std::thread::sleep(within);
            tracing::error!(
                "{binary} did not finish shutting down within {within:?} of the signal; exiting now"
            );
            std::process::exit(1);
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the exit deadline's thread");
    }
}

/// What every reconciler of the process shares: the clusters, the watches and the metrics
/// (cheap to clone).
#[derive(Clone)]
pub struct Core {
    /// The agent's own cluster.
    pub client: Client,
    /// The pod name, for Events.
    pub instance: Option<String>,
    /// The one cache of peer clients, behind the trust gate.
    pub peers: PeerClients,
    /// The shared watches of every cluster.
    pub sources: Sources,
    /// The shared watch of this cluster's Secrets.
    pub local_secrets: LocalSecrets,
    /// Where the sync metrics are counted.
    pub metrics: SyncMetrics,
}

impl Core {
    /// The Event recorder of the agent's reconcilers: controller `xcc-agent`, instance the pod.
    pub fn recorder(&self) -> kube::runtime::events::Recorder {
        kube::runtime::events::Recorder::new(
            self.client.clone(),
            kube::runtime::events::Reporter {
                controller: "xcc-agent".into(),
                instance: self.instance.clone(),
            },
        )
    }
}

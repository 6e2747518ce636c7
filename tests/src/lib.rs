//! The test bed: several real Kubernetes API servers on one machine, no containers.
//!
//! ```text
//!   etcd (one, 127.0.0.1) ◄── kube-apiserver cluster-0  (--etcd-prefix /xcc/cluster-0, RBAC, SA keys,
//!                        ◄── kube-apiserver cluster-1    aggregation layer, 127.0.0.1:<port>)
//!                        ◄── kube-apiserver cluster-2 ...
//! ```
//!
//! No pods run: the programs under test run as local processes with kubeconfigs minted from
//! ServiceAccount tokens, so the RBAC of our manifests is exercised for real. Every process is
//! killed when the [`Testbed`] is dropped, and — through `PR_SET_PDEATHSIG` on a spawner thread that
//! lives as long as the test process — when the test process dies.
//!
//! With [`Testbed::start_with_nodes`], chosen clusters also get a real node (kubelet, containerd,
//! kube-proxy in namespaces of their own), kube-controller-manager, kube-scheduler, CoreDNS and a
//! LoadBalancer controller, and run pods: see [`node`].
//!
//! The binaries come from `tests/testbed/install.sh` (built from their Go modules, cached outside
//! the repository); [`require_testbed`] finds them.
#![allow(
    clippy::too_many_lines,
    reason = "test-bed set-up, not production code: its longest functions are ordered scripts that write a cluster's or a node's configuration (inline YAML) and start its processes"
)]

pub mod aggregation;
mod binaries;
pub mod certs;
mod cluster;
mod egress;
pub mod images;
mod lb;
pub mod mcs;
pub mod node;
mod process;
pub mod scrape;
pub mod sources;
pub mod xcc;

pub use binaries::{Binaries, NodeBinaries, require_node_testbed, require_testbed};
pub use cluster::{BedOptions, Blackhole, Cluster, Kubeconfig, Testbed, client_for};
pub use node::{NetworkMode, Node, NodePlan};
pub use process::{Process, connections_to, free_port, spawn};

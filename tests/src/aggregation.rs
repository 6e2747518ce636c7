//! ClusterRole aggregation on the test bed: kube-controller-manager running only its
//! `clusterrole-aggregation` controller, so that aggregated ClusterRoles (cluster-registry's
//! `controller-aggregated` / `reader-aggregated`) get their rules as in a real cluster.

use crate::{Binaries, Cluster, Process, spawn};

/// Starts the aggregation controller for `cluster` (stopped when the returned process drops).
pub fn start(binaries: &Binaries, cluster: &Cluster) -> anyhow::Result<Process> {
    let args = [
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        "--controllers=clusterrole-aggregation".to_string(),
        "--leader-elect=false".to_string(),
        "--secure-port=0".to_string(),
    ];
    spawn(
        &format!("{}-role-aggregation", cluster.name),
        &binaries.kube_controller_manager,
        &args,
        &cluster.dir().join("kube-controller-manager.log"),
    )
}

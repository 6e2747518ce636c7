//! kube-controller-manager on the test bed, running only the controllers a test needs: ClusterRole
//! aggregation (cluster-registry's `controller-aggregated` / `reader-aggregated` get their rules
//! as in a real cluster), or the namespace controller (a deleted namespace is emptied and goes).

use crate::{Binaries, Cluster, Process, spawn};

/// Starts the aggregation controller for `cluster` (stopped when the returned process drops).
pub fn start(binaries: &Binaries, cluster: &Cluster) -> anyhow::Result<Process> {
    start_controllers(binaries, cluster, "clusterrole-aggregation")
}

/// Starts kube-controller-manager with only `controllers` (its `--controllers` list) for
/// `cluster`, as admin (stopped when the returned process drops).
pub fn start_controllers(
    binaries: &Binaries,
    cluster: &Cluster,
    controllers: &str,
) -> anyhow::Result<Process> {
    let args = [
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        format!("--controllers={controllers}"),
        "--leader-elect=false".to_string(),
        "--secure-port=0".to_string(),
    ];
    spawn(
        &format!("{}-{controllers}", cluster.name),
        &binaries.kube_controller_manager,
        &args,
        &cluster
            .dir()
            .join(format!("kube-controller-manager-{controllers}.log")),
    )
}

//! Kubernetes plumbing that more than one xcc binary needs: a client built from the kubeconfig in
//! a Secret (Cluster API's `<cluster>-kubeconfig`, cluster-registry's peer Secrets), and status
//! conditions that follow the API conventions (`observedGeneration`, `lastTransitionTime` kept
//! while the status does not change).

mod conditions;
mod kubeconfig;

pub use conditions::{ConditionStatus, set_condition};
pub use kubeconfig::{
    KubeconfigError, client_from_kubeconfig, client_from_secret, own_cluster_client,
};

//! Kubernetes plumbing that more than one xcc binary needs: the one gate through which a
//! kubeconfig in a Secret (Cluster API's `<cluster>-kubeconfig`, cluster-registry's peer Secrets,
//! a SecretImport's service cluster) becomes a client ([`trust`]), the cache of those peer
//! clients ([`PeerClients`]), and status conditions that follow the API conventions (`observedGeneration`, `lastTransitionTime` kept
//! while the status does not change), and the [`announcement`] by which an xcc-agent tells
//! xcc-controller which parts of the record feed it reads; and what every binary does the same
//! way: [`logging`], the common [`metrics`], errors on one line ([`report`]),
//! flag values and usage errors ([`flags`]), bytes as the API writes them ([`wire`]); the one
//! status writer ([`status`]).
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "a test is one scenario read top to bottom; the line limit is for production code"
    )
)]

pub mod announcement;
mod backoff;
mod conditions;
pub mod finalizers;
pub mod flags;
pub mod h2;
pub mod health_check;
mod kubeconfig;
pub mod logging;
pub mod metrics;
mod peers;
pub mod report;
#[cfg(any(test, feature = "test-util"))]
pub mod scenario;
pub mod status;
pub mod status_enum;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod trust;
pub mod wire;
pub mod yaml;

#[doc(hidden)]
pub use serde as __serde;

pub use announcement::{Announcement, Feature};
pub use backoff::Backoff;
pub use conditions::{
    ConditionStatus, REMOTE_TEXT_LIMIT, bounded, remove_condition, set_condition,
};
pub use kubeconfig::{
    KubeconfigArgs, KubeconfigError, config_problem, environment_kubeconfig, own_cluster,
    own_cluster_client, own_cluster_with_token, read_kubeconfig,
};
pub use peers::{PROBE_DEADLINE, PROBE_INTERVAL, PeerClients, Reach};
pub use trust::{PeerClient, PeerTls, PeerTrust};

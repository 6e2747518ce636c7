//! The shared sync core every reconciler runs on: the local client, the one cache of peer
//! clients (behind the kubeconfig trust gate), the one watch per (cluster, kind) ([`Sources`]),
//! the local Secret view built on it, and the sync metrics.

use kube::Client;
use xcc_kube::PeerClients;

use crate::{
    sources::{LocalSecrets, Sources},
    sync_metrics::SyncMetrics,
};

#[derive(Clone)]
pub struct Core {
    /// The agent's own cluster.
    pub client: Client,
    /// The pod name, for Events.
    pub instance: Option<String>,
    pub peers: PeerClients,
    pub sources: Sources,
    pub local_secrets: LocalSecrets,
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

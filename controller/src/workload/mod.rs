//! Workload clusters as the controller sees them: a client per cluster, built from its Cluster
//! API kubeconfig Secret and rebuilt when that Secret changes ([`clients`]), what its xcc-agent
//! announced ([`announcements`]), one watch per gateway Service, shared by every GatewayDNS that
//! names it, which triggers their reconcile the moment the Service changes (the original polled
//! every 30 s; [`services`]), one Node watch per cluster whose nodes some GatewayDNS publishes
//! ([`nodes`]), and one watch of the records in `xcc-dns` ([`slices`]).

mod announcements;
mod clients;
mod nodes;
mod services;
mod slices;
#[cfg(test)]
mod tests;
mod watched;

use std::{collections::HashMap, sync::Arc, time::Duration};

use dashmap::DashMap;
use kube::{Client, runtime::reflector::ObjectRef};
use tokio::sync::mpsc::UnboundedSender;
use xcc_kube::{PeerClient, PeerClients};

use crate::{desired::Print, gatewaydns::GatewayDNS};

pub use announcements::read_announcement;
pub use clients::ClientError;
pub(crate) use slices::delete_slice;

use announcements::CachedAnnouncement;
use nodes::NodeWatch;
use services::ServiceWatch;
use slices::{SliceKey, SliceWatch};

/// Key of the kubeconfig Secret, Cluster API's convention.
pub const KUBECONFIG_KEY: &str = "value";
/// Longest wait for one call to a workload cluster, so a dead cluster cannot stall a reconcile.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

struct ClusterEntry {
    /// The client, built by the trust gate; its identity names the Secret version.
    peer: PeerClient,
    /// The resourceVersion of the kubeconfig Secret it was built from: while the Secret watch
    /// shows that version, the client is used without reading the Secret again.
    secret_version: Option<String>,
    services: HashMap<String, ServiceWatch>,
    /// Started by the first GatewayDNS that needs this cluster's nodes; stopped when none does.
    nodes: Option<NodeWatch>,
    /// Started by the first write to this cluster.
    slices: Option<SliceWatch>,
}

/// Clients and Service watches for every workload cluster, keyed by (namespace, cluster). The
/// reconciles of every GatewayDNS, the prober and the slice watches use it at once: its maps are
/// concurrent maps, and no entry is held while anything is awaited or another entry is read.
pub struct Workloads {
    management: Client,
    peers: PeerClients,
    clusters: DashMap<(String, String), ClusterEntry>,
    trigger: UnboundedSender<ObjectRef<GatewayDNS>>,
    /// What each cluster's xcc-agent announced, and when that was read.
    announcements: DashMap<(String, String), CachedAnnouncement>,
    announcement_ttl: Duration,
    /// The last content this controller wrote (or is writing) to each slice, keyed by
    /// (namespace, cluster, slice): a watch event that shows just that wakes nobody, since the
    /// reconcile that wrote it knows. Recorded before the write, so the event cannot overtake it.
    written: Arc<DashMap<SliceKey, Print>>,
    /// Clients that could not be built, with the Secret version they were refused at.
    failed: DashMap<(String, String), (String, ClientError)>,
    /// What the management cluster's Cluster and Secret watches say.
    pub index: Arc<crate::index::Index>,
}

impl Workloads {
    pub fn new(
        management: Client,
        peers: PeerClients,
        trigger: UnboundedSender<ObjectRef<GatewayDNS>>,
        announcement_ttl: Duration,
    ) -> Self {
        Workloads {
            management,
            peers,
            clusters: DashMap::new(),
            trigger,
            announcements: DashMap::new(),
            announcement_ttl,
            written: Arc::default(),
            failed: DashMap::new(),
            index: Arc::default(),
        }
    }

    /// What wakes a GatewayDNS.
    pub fn trigger(&self) -> UnboundedSender<ObjectRef<GatewayDNS>> {
        self.trigger.clone()
    }

    /// How long a cluster's announcement is trusted before it is read again.
    pub fn announcement_ttl(&self) -> Duration {
        self.announcement_ttl
    }
}

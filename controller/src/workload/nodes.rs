//! One Node watch per workload cluster, shared by every GatewayDNS that needs that cluster's
//! nodes (`resolutionType: nodePort` or `hostPort`, or `spec.nodeNames`), opened only while one
//! does. Nodes are read through a partial type ([`NodeView`]): the name, labels and
//! resourceVersion, `spec.unschedulable`, `status.addresses` and the type and status of
//! `status.conditions`; nothing else of a Node is deserialized or kept. A watch event wakes
//! the subscribed GatewayDNS only when what they read of the nodes changed (a kubelet's status
//! heartbeat changes nothing of it).

use std::{
    collections::{BTreeMap, BTreeSet, HashSet},
    hash::{Hash, Hasher},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Client,
    api::ListParams,
    runtime::{
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use serde::{Deserialize, Deserializer};

use xcc_kube::bounded;

use super::{
    CALL_TIMEOUT, Workloads,
    watched::{Watched, watch},
};
use crate::{desired::NodeInfo, gatewaydns::GatewayDNS};

/// A Node as the controller reads it: only the fields it needs.
#[derive(Clone, Debug, Deserialize)]
pub struct NodeView {
    #[serde(deserialize_with = "slim_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<NodeSpecView>,
    #[serde(default)]
    status: Option<NodeStatusView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct NodeSpecView {
    #[serde(default)]
    unschedulable: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct NodeStatusView {
    #[serde(default)]
    addresses: Option<Vec<NodeAddressView>>,
    #[serde(default)]
    conditions: Option<Vec<NodeConditionView>>,
}

#[derive(Clone, Debug, Deserialize)]
struct NodeAddressView {
    #[serde(rename = "type")]
    type_: String,
    address: String,
}

#[derive(Clone, Debug, Deserialize)]
struct NodeConditionView {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

/// The metadata fields kept of a Node.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    name: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    resource_version: Option<String>,
}

fn slim_meta<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let slim = SlimMeta::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: slim.name,
        labels: slim.labels,
        resource_version: slim.resource_version,
        ..Default::default()
    })
}

impl k8s_openapi::Resource for NodeView {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Node";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "nodes";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for NodeView {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl NodeView {
    /// What a GatewayDNS reads of this node.
    pub fn info(&self) -> NodeInfo {
        let status = self.status.clone().unwrap_or_default();
        NodeInfo {
            name: self.metadata.name.clone().unwrap_or_default(),
            ready: status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
            unschedulable: self
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            addresses: status
                .addresses
                .iter()
                .flatten()
                .filter_map(|a| Some((a.type_.clone(), a.address.trim().parse().ok()?)))
                .collect(),
        }
    }
}

/// The nodes in `store`, sorted by name.
fn infos(store: &Store<NodeView>) -> Vec<NodeInfo> {
    let mut nodes: Vec<NodeInfo> = store.state().iter().map(|n| n.info()).collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes
}

/// The nodes of one cluster and who wants to hear of their changes.
pub(super) struct NodeWatch {
    nodes: Watched<NodeView>,
    pub(super) subscribers: Arc<Mutex<HashSet<ObjectRef<GatewayDNS>>>>,
}

impl Workloads {
    /// The nodes of `cluster` (of `namespace`) now, for `gateway`, which is subscribed to their
    /// changes from here on; an error when the cluster cannot be asked.
    pub async fn nodes(
        &self,
        namespace: &str,
        cluster: &str,
        gateway: &ObjectRef<GatewayDNS>,
        client: Client,
    ) -> Result<Vec<NodeInfo>, String> {
        let (store, health) = {
            let Some(mut entry) = self
                .clusters
                .get_mut(&(namespace.to_string(), cluster.to_string()))
            else {
                return Err("client was replaced; retrying".into());
            };
            let watch = entry
                .nodes
                .get_or_insert_with(|| self.start_node_watch(client.clone(), cluster));
            watch
                .subscribers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(gateway.clone());
            (watch.nodes.store.clone(), watch.nodes.health.clone())
        };
        if health.healthy() {
            return Ok(infos(&store));
        }
        if let Some(error) = health.error() {
            return Err(error);
        }
        // The watch has not listed yet: ask directly.
        let api: Api<NodeView> = Api::all(client);
        match tokio::time::timeout(CALL_TIMEOUT, api.list(&ListParams::default())).await {
            Ok(Ok(list)) => {
                let mut nodes: Vec<NodeInfo> = list.items.iter().map(NodeView::info).collect();
                nodes.sort_by(|a, b| a.name.cmp(&b.name));
                Ok(nodes)
            }
            Ok(Err(e)) => Err(format!("cannot list the Nodes: {}", bounded(&e))),
            Err(_) => Err("timed out listing the Nodes".into()),
        }
    }

    fn start_node_watch(&self, client: Client, cluster: &str) -> NodeWatch {
        let subscribers: Arc<Mutex<HashSet<ObjectRef<GatewayDNS>>>> = Arc::default();
        let (task_subscribers, trigger) = (subscribers.clone(), self.trigger.clone());
        // What the subscribers read of the nodes, last time they were woken (0: never).
        let seen = AtomicU64::new(0);
        let nodes = watch(
            Api::all(client),
            watcher::Config::default(),
            format!("Nodes on cluster {cluster}"),
            move |store: &Store<NodeView>| {
                let mut hasher = std::hash::DefaultHasher::new();
                infos(store).hash(&mut hasher);
                let digest = hasher.finish().max(1);
                if seen.swap(digest, Ordering::AcqRel) == digest {
                    return;
                }
                let subscribers = task_subscribers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                for gateway in subscribers {
                    let _ = trigger.send(gateway);
                }
            },
        );
        NodeWatch { nodes, subscribers }
    }

    /// Forgets `gateway`'s interest in the nodes of every cluster of `namespace` except those
    /// in `keep`, and stops the Node watches nobody needs any more.
    pub fn retain_nodes(
        &self,
        namespace: &str,
        gateway: &ObjectRef<GatewayDNS>,
        keep: &BTreeSet<String>,
    ) {
        for mut entry in self.clusters.iter_mut() {
            let ((ns, cluster), entry) = entry.pair_mut();
            if ns != namespace {
                continue;
            }
            let unused = entry.nodes.as_ref().is_some_and(|watch| {
                let mut subscribers = watch.subscribers.lock().unwrap_or_else(|e| e.into_inner());
                if !keep.contains(cluster) {
                    subscribers.remove(gateway);
                }
                subscribers.is_empty()
            });
            if unused {
                entry.nodes = None;
            }
        }
    }
}

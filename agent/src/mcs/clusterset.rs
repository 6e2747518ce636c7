//! The ClusterSet as the MCS reconciler sees it: this cluster's ID (the About API's
//! ClusterProperty, read if present, else written), and the peers of its cluster group, found
//! as resource sync finds them (Cluster CRs, kubeconfig Secrets through the trust gate), each
//! read through two shared watches: its `ExportedService`s and its ClusterProperties.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, SystemTime},
};

use super::{
    api::{CLUSTER_ID_PROPERTY, CLUSTERSET_PROPERTY, ClusterProperty, ClusterPropertySpec},
    publication::ExportedService,
    watched::{Concerns, Key, Pending, Watched, own_key},
};
use crate::{
    clusterregistry::{self, api::Cluster},
    sources::{Detail, Health, SourceId, View},
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, GroupVersionKind, PostParams},
};

/// The objects of `view`'s store read as `K` (those that do not read are left out).
pub fn objects<K: serde::de::DeserializeOwned>(view: &View) -> Vec<K> {
    view.store()
        .state()
        .iter()
        .filter_map(|o| {
            serde_json::to_value(&**o)
                .ok()
                .and_then(|v| serde_json::from_value(v).ok())
        })
        .collect()
}

/// A peer of the group, read through its two watches.
pub struct Peer {
    /// Its Cluster's name.
    pub cluster: String,
    /// The peer client's identity (a new Secret: new watches).
    pub identity: String,
    /// Its `ExportedService`s, cluster-wide: kept as last synced while it fails.
    publications: Watched<ExportedService>,
    /// Its ClusterProperties.
    properties: Watched<ClusterProperty>,
    /// Its cluster ID, as of the last [`Peer::update`].
    id: Option<String>,
    /// Whether its watch was ever synced.
    synced_once: bool,
    /// Whether its publications are withdrawn (failing for longer than the stale period).
    pub withdrawn: bool,
}

impl Peer {
    /// Brings what this agent uses of the peer up to date: its publications while its watch is
    /// synced (kept as they were while it fails), withdrawn once it has failed for `stale`.
    /// Returns whether what it publishes changed as a whole (withdrawn, back, new ID): then
    /// every service is to be looked at again.
    pub fn update(&mut self, stale: Duration) -> bool {
        if self.properties.refresh() {
            let id = self
                .properties
                .get(&(String::new(), CLUSTER_ID_PROPERTY.to_string()))
                .map(|p| p.spec.value.clone());
            if id != self.id {
                self.id = id;
                self.update_publications(stale);
                return true;
            }
        }
        self.update_publications(stale)
    }

    fn update_publications(&mut self, stale: Duration) -> bool {
        let failing_since = match self.publications.view().health() {
            Health::Synced { .. } if self.publications.view().listed() => {
                self.publications.refresh();
                self.synced_once = true;
                return std::mem::replace(&mut self.withdrawn, false);
            }
            // Synced, but not yet in the detail this view asked for.
            Health::Synced { .. } => return false,
            Health::Listing { since } | Health::Reconnecting { since, .. } => since,
        };
        let failing = SystemTime::now()
            .duration_since(failing_since)
            .unwrap_or_default();
        if failing < stale || self.withdrawn {
            return false;
        }
        self.withdrawn = true;
        if self.synced_once {
            tracing::info!(peer = %self.cluster, stale = %xcc_kube::flags::show_duration(stale), "multi-cluster services: the peer has not answered for the stale period; its exports and endpoints are withdrawn");
        }
        true
    }

    /// Its cluster ID: its ClusterProperty `cluster.clusterset.k8s.io`, if it has one.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// What it publishes for service `key`, as this agent uses it now.
    pub fn publication(&self, key: &Key) -> Option<&Arc<ExportedService>> {
        if self.withdrawn {
            return None;
        }
        self.publications.get(key)
    }

    /// The services it publishes, as this agent uses them now.
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.publications
            .iter()
            .map(|(k, _)| k)
            .filter(|_| !self.withdrawn)
    }
}

/// Opens the watches of a peer.
pub fn open(
    core: &xcc_sync::Core,
    cluster: &str,
    peer: &xcc_kube::PeerClient,
    pending: &Arc<Pending>,
) -> Peer {
    let view = |gvk: GroupVersionKind, resource: ApiResource| {
        core.sources.view(
            SourceId {
                cluster: cluster.to_string(),
                identity: peer.identity.clone(),
                gvk,
                fields: None,
                namespace: None,
            },
            peer.client.clone(),
            &resource,
            Detail::Full,
        )
    };
    let publications = view(
        GroupVersionKind::gvk(super::publication::GROUP, "v1alpha1", "ExportedService"),
        ApiResource::erase::<ExportedService>(&()),
    );
    let properties = view(
        GroupVersionKind::gvk("about.k8s.io", "v1alpha1", "ClusterProperty"),
        ApiResource::erase::<ClusterProperty>(&()),
    );
    Peer {
        cluster: cluster.to_string(),
        identity: peer.identity.clone(),
        publications: Watched::new(publications, pending, Concerns::Key(own_key)),
        properties: Watched::new(properties, pending, Concerns::All),
        id: None,
        synced_once: false,
        withdrawn: false,
    }
}

/// What discovery found: the peers' clients by Cluster name, and the peers that cannot be read
/// with why.
#[derive(Default)]
pub struct Found {
    /// Peer Cluster name → client.
    pub clients: BTreeMap<String, xcc_kube::PeerClient>,
    /// Peer Cluster name → why it is not read.
    pub refused: BTreeMap<String, String>,
}

/// The peers of the group: every Cluster but this one (`uid`: its kube-system UID), opened
/// through the trust gate.
pub async fn discover(core: &xcc_sync::Core, clusters: &View, uid: &str) -> Found {
    let mut found = Found::default();
    for cluster in objects::<Cluster>(clusters) {
        if cluster.spec.cluster_id == uid {
            continue;
        }
        let name = cluster.name_any();
        match clusterregistry::clusters::open_peer(&cluster, &core.client, &core.peers).await {
            Ok((client, _)) => {
                found.clients.insert(name, client);
            }
            Err(problem) => {
                found.refused.insert(name, problem.message);
            }
        }
    }
    found
}

/// A valid cluster ID: a DNS label of at most 63 characters.
pub fn is_dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// This cluster's own Cluster's name in the group, once the Clusters are listed (a short wait:
/// without the CRD, none).
pub async fn own_cluster_name(clusters: &View, uid: &str) -> Option<String> {
    for _ in 0..50 {
        if clusters.listed() {
            break;
        }
        // sleep: the pace of a wait for the first list.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    objects::<Cluster>(clusters)
        .into_iter()
        .find(|c| c.spec.cluster_id == uid)
        .map(|c| c.name_any())
}

/// The ID this cluster writes when it has none: its own Cluster's name if that is a DNS label,
/// else the kube-system UID.
pub fn chosen_id(own: Option<String>, uid: &str) -> String {
    own.filter(|n| is_dns_label(n))
        .unwrap_or_else(|| uid.to_string())
}

/// This cluster's ID: ClusterProperty `cluster.clusterset.k8s.io` if present; else written as
/// what `candidate` gives ([`chosen_id`]). ClusterProperty `clusterset.k8s.io` is written as
/// `clusterset` if absent. An existing property, whoever wrote it, is never changed.
pub async fn cluster_id(
    client: &Client,
    candidate: impl AsyncFnOnce() -> String,
    clusterset: &str,
    counted: &xcc_sync::sink::Counted,
) -> Result<String, kube::Error> {
    let properties: Api<ClusterProperty> = Api::all(client.clone());
    if properties.get_opt(CLUSTERSET_PROPERTY).await?.is_none() {
        create(&properties, CLUSTERSET_PROPERTY, clusterset, counted).await?;
    }
    if let Some(existing) = properties.get_opt(CLUSTER_ID_PROPERTY).await? {
        return Ok(existing.spec.value);
    }
    let id = candidate().await;
    create(&properties, CLUSTER_ID_PROPERTY, &id, counted).await?;
    // Whoever wrote it first (another writer, a restart) wins.
    Ok(properties
        .get_opt(CLUSTER_ID_PROPERTY)
        .await?
        .map_or(id, |p| p.spec.value))
}

/// Creates ClusterProperty `name` = `value`, unless it exists.
async fn create(
    api: &Api<ClusterProperty>,
    name: &str,
    value: &str,
    counted: &xcc_sync::sink::Counted,
) -> Result<(), kube::Error> {
    let property = ClusterProperty::new(
        name,
        ClusterPropertySpec {
            value: value.to_string(),
        },
    );
    let created = api
        .create(
            &PostParams {
                field_manager: Some(xcc_sync::sink::FIELD_MANAGER.into()),
                ..Default::default()
            },
            &property,
        )
        .await;
    match created {
        Ok(_) => {
            counted.wrote("create");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// A local view of `gvk` (whole objects).
pub fn local_view(
    core: &xcc_sync::Core,
    gvk: GroupVersionKind,
    resource: &ApiResource,
    detail: Detail,
) -> View {
    core.sources
        .view(SourceId::local(gvk), core.client.clone(), resource, detail)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use xcc_kube::scenario::{Scenario, echo, not_found, status};

    use super::*;

    const PATH: &str = "/apis/about.k8s.io/v1alpha1/clusterproperties";

    fn counted() -> xcc_sync::sink::Counted {
        let mut registry = prometheus_client::registry::Registry::default();
        xcc_sync::sink::Counted {
            metrics: xcc_sync::metrics::SyncMetrics::register(&mut registry),
            reconciler: "mcs",
        }
    }

    fn property(name: &str, value: &str) -> (u16, serde_json::Value) {
        (
            200,
            json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                "metadata": {"name": name}, "spec": {"value": value}}),
        )
    }

    #[test]
    fn the_written_id_is_the_own_clusters_name_if_it_is_a_dns_label() {
        assert_eq!(chosen_id(Some("first".into()), "uid-1"), "first");
        assert_eq!(chosen_id(None, "uid-1"), "uid-1");
        for bad in ["First", "a.b", "-a", &"a".repeat(64), ""] {
            assert_eq!(chosen_id(Some(bad.to_string()), "uid-1"), "uid-1", "{bad}");
        }
    }

    /// Both properties present: read, nothing written, whatever this cluster would choose.
    #[tokio::test]
    async fn existing_properties_are_read_and_never_written() {
        let (client, server) = Scenario::new()
            .expect("GET", format!("{PATH}/clusterset.k8s.io"))
            .reply(property("clusterset.k8s.io", "theirs"))
            .expect("GET", format!("{PATH}/cluster.clusterset.k8s.io"))
            .reply(property("cluster.clusterset.k8s.io", "kept"))
            .run();
        let id = cluster_id(&client, async || "first".to_string(), "default", &counted())
            .await
            .unwrap();
        assert_eq!(id, "kept");
        server.done().await;
    }

    /// Absent: both written once, the ID as chosen; a writer that came first wins.
    #[tokio::test]
    async fn absent_properties_are_written_and_a_first_writer_wins() {
        let (client, server) = Scenario::new()
            .expect("GET", format!("{PATH}/clusterset.k8s.io"))
            .reply(not_found())
            .expect("POST", PATH)
            .check(|body| {
                assert_eq!(body["metadata"]["name"], "clusterset.k8s.io");
                assert_eq!(body["spec"]["value"], "default");
            })
            .reply_with(echo)
            .expect("GET", format!("{PATH}/cluster.clusterset.k8s.io"))
            .reply(not_found())
            .expect("POST", PATH)
            .check(|body| assert_eq!(body["spec"]["value"], "first"))
            .reply(status(409, "AlreadyExists", "exists"))
            .expect("GET", format!("{PATH}/cluster.clusterset.k8s.io"))
            .reply(property("cluster.clusterset.k8s.io", "earlier"))
            .run();
        let id = cluster_id(&client, async || "first".to_string(), "default", &counted())
            .await
            .unwrap();
        assert_eq!(id, "earlier");
        server.done().await;
    }
}

//! The management cluster's Cluster API Clusters and kubeconfig Secrets as the reconciles need
//! them, kept by two metadata-only watches (no spec, no status, no managedFields, no Secret data):
//! per Cluster its name and labels, per kubeconfig Secret its resourceVersion. A reconcile reads
//! these instead of listing Clusters or reading Secrets, so one that finds nothing changed asks
//! the management cluster nothing. A change wakes the GatewayDNS of its namespace only when it
//! matters to them: a Cluster added, removed or relabelled, a kubeconfig Secret written or
//! deleted; a Cluster's status updates wake nobody.

use std::{
    collections::{BTreeMap, HashMap},
    sync::RwLock,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{Api, ResourceExt, api::DynamicObject, core::PartialObjectMeta, runtime::watcher};
use xcc_sync::{
    outage::{Outage, WATCH_WARN_AFTER},
    sources::{self, Schedule},
};

use crate::{desired::ClusterInfo, gatewaydns::NamespaceLabels};

type Labels = BTreeMap<String, String>;
/// namespace → cluster name → labels.
type Clusters = HashMap<String, BTreeMap<String, Labels>>;
/// (namespace, Secret name) → resourceVersion.
type Secrets = HashMap<(String, String), String>;

/// What the two watches know; `None` until each has listed once.
#[derive(Default)]
pub struct Index {
    clusters: RwLock<Option<Clusters>>,
    secrets: RwLock<Option<Secrets>>,
    namespaces: RwLock<Option<NamespaceLabels>>,
}

impl Index {
    /// The Clusters of `namespace` (none being deleted), once the watch has listed.
    pub fn clusters(&self, namespace: &str) -> Option<Vec<ClusterInfo>> {
        let clusters = self.clusters.read().unwrap_or_else(|e| e.into_inner());
        let all = clusters.as_ref()?;
        Some(
            all.get(namespace)
                .map(|named| {
                    named
                        .iter()
                        .map(|(name, labels)| ClusterInfo {
                            name: name.clone(),
                            labels: labels.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        )
    }

    /// `f` of the labels of every namespace (`None` until the Namespace watch has listed).
    pub fn with_namespaces<T>(&self, f: impl FnOnce(Option<&NamespaceLabels>) -> T) -> T {
        let namespaces = self.namespaces.read().unwrap_or_else(|e| e.into_inner());
        f(namespaces.as_ref())
    }

    /// The resourceVersion of Secret `namespace/name`: `None` until the watch has listed,
    /// `Some(None)` when there is no such Secret.
    pub fn secret_version(&self, namespace: &str, name: &str) -> Option<Option<String>> {
        let secrets = self.secrets.read().unwrap_or_else(|e| e.into_inner());
        Some(
            secrets
                .as_ref()?
                .get(&(namespace.to_string(), name.to_string()))
                .cloned(),
        )
    }
}

/// The namespaces whose entries differ between `old` and `new`.
fn changed_namespaces<V: PartialEq>(
    old: &BTreeMap<(String, String), V>,
    new: &BTreeMap<(String, String), V>,
) -> Vec<String> {
    let mut out: Vec<String> = old
        .iter()
        .filter(|(k, v)| new.get(*k) != Some(*v))
        .chain(new.iter().filter(|(k, v)| old.get(*k) != Some(*v)))
        .map(|((ns, _), _)| ns.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Runs a metadata-only watch of `api` forever, keeping a map of (namespace, name) → `entry`
/// (objects for which it is `None` are left out) and calling `publish` with the whole map after
/// each change and `wake` with each namespace whose entries changed.
async fn keep<K, V>(
    api: Api<PartialObjectMeta<K>>,
    what: &'static str,
    entry: impl Fn(&PartialObjectMeta<K>) -> Option<V>,
    publish: impl Fn(&BTreeMap<(String, String), V>),
    wake: impl Fn(&str),
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Clone,
    PartialObjectMeta<K>: kube::Resource<DynamicType = K::DynamicType>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send,
    V: PartialEq + Clone,
{
    let mut map: BTreeMap<(String, String), V> = BTreeMap::new();
    let mut listing: BTreeMap<(String, String), V> = BTreeMap::new();
    // The management cluster is this process's own: the local schedule.
    let mut events = sources::watch(api, watcher::Config::default(), Schedule::Local);
    let mut outage = Outage::new(
        format!("the watch of {what}"),
        xcc_sync::outage::local_server(),
    )
    .warn_after(WATCH_WARN_AFTER)
    .quiet(xcc_kube::Backoff::local().quiet());
    while let Some(event) = events.next().await {
        let key = |o: &PartialObjectMeta<K>| (o.namespace().unwrap_or_default(), o.name_any());
        match event {
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(object)) => {
                if let Some(value) = entry(&object) {
                    listing.insert(key(&object), value);
                }
            }
            Ok(watcher::Event::InitDone) => {
                outage.recovered();
                let listed = std::mem::take(&mut listing);
                let changed = changed_namespaces(&map, &listed);
                map = listed;
                publish(&map);
                for namespace in changed {
                    wake(&namespace);
                }
            }
            Ok(watcher::Event::Apply(object)) => {
                let k = key(&object);
                let value = entry(&object);
                if map.get(&k) != value.as_ref() {
                    match value {
                        Some(value) => map.insert(k.clone(), value),
                        None => map.remove(&k),
                    };
                    publish(&map);
                    wake(&k.0);
                }
            }
            Ok(watcher::Event::Delete(object)) => {
                let k = key(&object);
                if map.remove(&k).is_some() {
                    publish(&map);
                    wake(&k.0);
                }
            }
            // The last list is used meanwhile.
            Err(error) => {
                outage.failed(&error);
            }
        }
    }
}

/// Keeps the Clusters of `api` (Cluster API `Cluster`) in `index` forever.
pub async fn watch_clusters(
    index: std::sync::Arc<Index>,
    api: Api<PartialObjectMeta<DynamicObject>>,
    wake: impl Fn(&str),
) {
    keep(
        api,
        "Cluster API Clusters",
        |cluster| {
            cluster
                .metadata
                .deletion_timestamp
                .is_none()
                .then(|| cluster.labels().clone())
        },
        |map| {
            let mut clusters: Clusters = HashMap::new();
            for ((namespace, name), labels) in map {
                clusters
                    .entry(namespace.clone())
                    .or_default()
                    .insert(name.clone(), labels.clone());
            }
            *index.clusters.write().unwrap_or_else(|e| e.into_inner()) = Some(clusters);
        },
        wake,
    )
    .await;
}

/// Keeps the labels of every Namespace in `index` forever; `wake` is told of a change (the
/// GatewayDNS that select namespaces by label look again).
pub async fn watch_namespaces(
    index: std::sync::Arc<Index>,
    api: Api<PartialObjectMeta<Namespace>>,
    wake: impl Fn(&str),
) {
    keep(
        api,
        "Namespaces",
        |namespace| Some(namespace.labels().clone()),
        |map| {
            *index.namespaces.write().unwrap_or_else(|e| e.into_inner()) = Some(
                map.iter()
                    .map(|((_, name), labels)| (name.clone(), labels.clone()))
                    .collect(),
            );
        },
        wake,
    )
    .await;
}

/// Keeps the resourceVersion of every kubeconfig Secret (`<cluster>-kubeconfig`) in `index`
/// forever.
pub async fn watch_secrets(
    index: std::sync::Arc<Index>,
    api: Api<PartialObjectMeta<Secret>>,
    wake: impl Fn(&str),
) {
    keep(
        api,
        "kubeconfig Secrets",
        |secret| {
            secret
                .name_any()
                .ends_with("-kubeconfig")
                .then(|| secret.resource_version())
                .flatten()
        },
        |map| {
            *index.secrets.write().unwrap_or_else(|e| e.into_inner()) =
                Some(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
        },
        wake,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_namespaces_whose_entries_changed_are_woken() {
        let map = |entries: &[(&str, &str, &str)]| -> BTreeMap<(String, String), String> {
            entries
                .iter()
                .map(|(ns, name, v)| ((ns.to_string(), name.to_string()), v.to_string()))
                .collect()
        };
        let old = map(&[("a", "c1", "1"), ("a", "c2", "1"), ("b", "c1", "1")]);
        assert!(changed_namespaces(&old, &old).is_empty());
        let new = map(&[("a", "c1", "1"), ("a", "c2", "2"), ("b", "c1", "1")]);
        assert_eq!(changed_namespaces(&old, &new), ["a"]);
        let gone = map(&[("a", "c1", "1"), ("a", "c2", "1")]);
        assert_eq!(changed_namespaces(&old, &gone), ["b"]);
        let added = map(&[
            ("a", "c1", "1"),
            ("a", "c2", "1"),
            ("b", "c1", "1"),
            ("c", "x", "1"),
        ]);
        assert_eq!(changed_namespaces(&old, &added), ["c"]);
    }
}

//! One pass of the MCS reconciler: publish this cluster's exports, merge every cluster's, write
//! the imports, remove what no cluster exports any more, and say it all on the local exports.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{
    core::v1::{Node, ObjectReference, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Resource, ResourceExt,
    runtime::events::{Event, EventType},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use xcc_kube::{ConditionStatus, remove_condition, set_condition};

use super::{
    Mcs,
    api::{
        ExportReason, LABEL_SERVICE_NAME, ServiceExport, ServiceExportStatus, ServiceImport,
        conditions,
    },
    clusterset::objects,
    gateway,
    plan::{self, LABEL_IMPORT, LABEL_MANAGED_BY, MANAGED_BY, Merged, Validity},
    publication::{ExportedService, ExportedServiceSpec},
    reconciler::DataPlane,
};
use crate::sink;

/// `namespace/name` of an exported Service.
type Key = (String, String);

/// Whether `current` holds everything `desired` sets (objects: each key of `desired`; lists:
/// the same length, item by item; the rest: equal).
pub fn contains(current: &Value, desired: &Value) -> bool {
    match (current, desired) {
        (Value::Object(c), Value::Object(d)) => d
            .iter()
            .all(|(k, v)| v.is_null() || c.get(k).is_some_and(|cv| contains(cv, v))),
        (Value::Array(c), Value::Array(d)) => {
            c.len() == d.len() && c.iter().zip(d).all(|(c, d)| contains(c, d))
        }
        (c, d) => c == d,
    }
}

fn key_of<K: Resource>(object: &K) -> Key {
    (object.namespace().unwrap_or_default(), object.name_any())
}

fn json<T: Serialize>(value: &T) -> Result<Value, kube::Error> {
    serde_json::to_value(value).map_err(kube::Error::SerdeError)
}

/// `desired` as applied: with its apiVersion and kind.
fn typed<K: Resource<DynamicType = ()> + Serialize>(desired: &K) -> Result<Value, kube::Error> {
    let mut value = json(desired)?;
    value["apiVersion"] = K::api_version(&()).into();
    value["kind"] = K::kind(&()).into();
    Ok(value)
}

/// Whether `managed_fields` name the agent's field manager.
fn ours<K: Resource>(object: &K) -> bool {
    object
        .meta()
        .managed_fields
        .iter()
        .flatten()
        .any(|f| f.manager.as_deref() == Some(sink::FIELD_MANAGER))
}

/// A write of this agent whose echo its store has not shown yet.
pub(super) struct Echo {
    /// What was written.
    desired: Value,
    /// The resourceVersion the store had when it was written.
    before: Option<String>,
    /// The resourceVersion the write left.
    after: Option<String>,
}

impl Mcs {
    /// Makes local object `namespace/name` hold `desired` (a forced apply; `whole`: replaced
    /// when other managers' fields survive), unless `current` (the store's) holds it already
    /// or is still the version this agent's identical last write replaced (the store has not
    /// caught up: writing again would be a write for nothing). Returns the object as written or
    /// found (`None`: created, not in the store yet).
    async fn write<K>(
        &self,
        namespace: &str,
        name: &str,
        current: Option<&K>,
        desired: Value,
        whole: bool,
    ) -> Result<Option<K>, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Serialize
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let id = format!("{}/{namespace}/{name}", K::kind(&()));
        let rv = current.and_then(ResourceExt::resource_version);
        {
            let mut echoes = self
                .echoes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(c) = current
                && contains(&json(c)?, &desired)
            {
                echoes.remove(&id);
                return Ok(Some(c.clone()));
            }
            if let Some(echo) = echoes.get(&id) {
                if rv.is_some() && rv == echo.after {
                    echoes.remove(&id);
                } else if echo.desired == desired && rv == echo.before {
                    return Ok(current.cloned());
                }
            }
        }
        let api: Api<K> = Api::namespaced(self.core.client.clone(), namespace);
        let written = if whole {
            sink::apply_whole(&api, name, desired.clone(), &self.counted).await?
        } else {
            sink::apply_fields(&api, name, &desired, &self.counted).await?
        };
        self.echoes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                id,
                Echo {
                    desired,
                    before: rv,
                    after: written.resource_version(),
                },
            );
        Ok(Some(written))
    }

    /// One pass over everything.
    pub(super) async fn pass(&mut self) -> Result<(), kube::Error> {
        let exports: Vec<ServiceExport> = objects(&self.local.exports);
        let services: Vec<Service> = objects(&self.local.services);
        let slices: Vec<EndpointSlice> = objects(&self.local.slices);
        let services_by: BTreeMap<Key, &Service> =
            services.iter().map(|s| (key_of(s), s)).collect();
        let mut failed = None;
        let mut note = |result: Result<(), kube::Error>| {
            if let Err(error) = result {
                failed.get_or_insert(error);
            }
        };
        let gateway = exports
            .iter()
            .any(|e| self.plane_of(e) == DataPlane::Gateway);
        let nodes: Vec<Node> = if gateway {
            objects(self.local.nodes(&self.core, &self.wake))
        } else {
            Vec::new()
        };
        let Published {
            published,
            local,
            gateways,
        } = self.published(&exports, &services_by, &slices, &nodes);
        note(self.write_gateways(&gateways, &services).await);
        note(self.write_publications(&published).await);
        let mut by_key: BTreeMap<Key, Vec<ExportedServiceSpec>> = BTreeMap::new();
        for (key, spec) in &local {
            by_key.entry(key.clone()).or_default().push(spec.clone());
        }
        let stale = self.settings.stale_after;
        for peer in self.peers.values_mut() {
            let id = peer.id();
            let current = peer.current(stale);
            for publication in current {
                let mut spec = publication.spec.clone();
                if let Some(id) = &id {
                    spec.cluster_id.clone_from(id);
                }
                by_key.entry(key_of(&publication)).or_default().push(spec);
            }
        }
        let mut merged: BTreeMap<Key, Merged> = BTreeMap::new();
        for (key, specs) in &by_key {
            let refs: Vec<&ExportedServiceSpec> = specs.iter().collect();
            if let Some(m) = plan::merge(&refs) {
                note(self.import(key, &m, &refs, &services_by, &slices).await);
                merged.insert(key.clone(), m);
            }
        }
        note(self.clean(&merged, &services, &slices).await);
        note(
            self.statuses(&exports, &services_by, &merged, &published)
                .await,
        );
        failed.map_or(Ok(()), Err)
    }

    /// The data plane of `export`: its annotation, else `--mcs-data-plane`.
    fn plane_of(&self, export: &ServiceExport) -> DataPlane {
        match export
            .annotations()
            .get(gateway::DATA_PLANE_ANNOTATION)
            .map(String::as_str)
        {
            Some("gateway") => DataPlane::Gateway,
            Some("flat") => DataPlane::Flat,
            _ => self.settings.data_plane,
        }
    }

    /// What this cluster publishes: one spec per valid export; the same as this cluster imports
    /// it; and the gateway Services its gateway exports need.
    fn published(
        &self,
        exports: &[ServiceExport],
        services: &BTreeMap<Key, &Service>,
        slices: &[EndpointSlice],
        nodes: &[Node],
    ) -> Published {
        let mut out = BTreeMap::new();
        let mut local = BTreeMap::new();
        let mut gateways = Vec::new();
        for export in exports {
            let key = key_of(export);
            let service = services.get(&key).copied();
            if plan::validate(service) != Validity::Valid {
                continue;
            }
            let Some(service) = service else { continue };
            let own: Vec<&EndpointSlice> = slices
                .iter()
                .filter(|s| {
                    s.namespace().as_deref() == Some(key.0.as_str())
                        && s.labels().get(plan::LABEL_KUBE_SERVICE_NAME) == Some(&key.1)
                        && s.labels().get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY)
                })
                .collect();
            let spec = service.spec.clone().unwrap_or_default();
            let plane = self.plane_of(export);
            let pods = plan::flat_endpoints(&spec, &own);
            let endpoints = match plane {
                DataPlane::Flat => pods.clone(),
                DataPlane::Gateway => {
                    let current = services
                        .get(&(key.0.clone(), gateway::gateway_name(&key.1)))
                        .copied();
                    if gateway::needs_node_port(service) {
                        gateways.push(gateway::gateway_service(service));
                    }
                    gateway::gateway_endpoints(service, current, nodes)
                }
            };
            let publication =
                plan::publication(&self.id, export, service, plane.as_str(), endpoints);
            // This cluster reaches its own pods directly, whatever the others use: its import of
            // its own export lists the pods (a node port of its own node would be a second DNAT
            // that a connection from a pod of this node never gets).
            let mut here = publication.clone();
            here.endpoints = pods;
            local.insert(key.clone(), here);
            out.insert(key, publication);
        }
        Published {
            published: out,
            local,
            gateways,
        }
    }

    /// Makes the gateway Services exactly `desired`: written where they differ, removed where
    /// no longer wanted.
    async fn write_gateways(
        &self,
        desired: &[Service],
        services: &[Service],
    ) -> Result<(), kube::Error> {
        let mut wanted = BTreeSet::new();
        for gateway in desired {
            let key = key_of(gateway);
            let want = typed(gateway)?;
            let have = services.iter().find(|s| key_of(*s) == key);
            wanted.insert(key.clone());
            self.write(&key.0, &key.1, have, want, false).await?;
        }
        for service in services {
            let key = key_of(service);
            let Some(of) = service.labels().get(gateway::LABEL_GATEWAY_FOR) else {
                continue;
            };
            if wanted.contains(&key) || key.1 != gateway::gateway_name(of) {
                continue;
            }
            let api: Api<Service> = Api::namespaced(self.core.client.clone(), &key.0);
            sink::delete_exact(&api, &key.1, service.uid(), None, &self.counted).await?;
        }
        Ok(())
    }

    /// Makes the local `ExportedService`s exactly `published`.
    async fn write_publications(
        &self,
        published: &BTreeMap<Key, ExportedServiceSpec>,
    ) -> Result<(), kube::Error> {
        let current: Vec<ExportedService> = objects(&self.local.publications);
        let current: BTreeMap<Key, &ExportedService> =
            current.iter().map(|p| (key_of(p), p)).collect();
        for ((namespace, name), spec) in published {
            let mut desired = ExportedService::new(name, spec.clone());
            desired.metadata.namespace = Some(namespace.clone());
            let desired = typed(&desired)?;
            let have = current.get(&(namespace.clone(), name.clone())).copied();
            self.write(namespace, name, have, desired, true).await?;
        }
        for (key, have) in &current {
            if !published.contains_key(key) {
                let api: Api<ExportedService> = Api::namespaced(self.core.client.clone(), &key.0);
                sink::delete_exact(&api, &key.1, have.uid(), None, &self.counted).await?;
            }
        }
        Ok(())
    }

    /// Writes the import of `key` here: derived Service, ServiceImport, EndpointSlices.
    async fn import(
        &mut self,
        key: &Key,
        merged: &Merged,
        publications: &[&ExportedServiceSpec],
        services: &BTreeMap<Key, &Service>,
        slices: &[EndpointSlice],
    ) -> Result<(), kube::Error> {
        let (namespace, name) = key;
        if !self.namespace_exists(namespace) {
            self.say_absent(key).await;
            return Ok(());
        }
        self.absent.remove(key);
        let derived = plan::derived_service(namespace, name, merged);
        let derived_name = plan::derived_name(name);
        let desired = typed(&derived)?;
        let current = services
            .get(&(namespace.clone(), derived_name.clone()))
            .copied();
        let Some(written) = self
            .write(namespace, &derived_name, current, desired, false)
            .await?
        else {
            // Created; its ClusterIP is read once the store has it.
            return Ok(());
        };
        // The families this cluster gave the derived Service (a single-stack cluster gives one
        // of a dual-stack export's two): the import states those, with one IP each.
        let mut merged = merged.clone();
        if let Some(families) = written
            .spec
            .as_ref()
            .and_then(|s| s.ip_families.clone())
            .filter(|f| !f.is_empty())
        {
            merged.spec.ip_families = families;
        }
        let ips = plan::ips_of(&written, &merged.spec.ip_families);
        let import = plan::service_import(namespace, name, &merged, ips);
        let imports: Vec<ServiceImport> = objects(&self.local.imports);
        let current = imports.iter().find(|i| key_of(*i) == *key);
        let desired = typed(&import)?;
        self.write(namespace, name, current, desired, true).await?;
        self.write_slices(key, &merged, publications, slices).await
    }

    /// The import's EndpointSlices: written where they differ, removed where no longer wanted.
    async fn write_slices(
        &self,
        (namespace, name): &Key,
        merged: &Merged,
        publications: &[&ExportedServiceSpec],
        slices: &[EndpointSlice],
    ) -> Result<(), kube::Error> {
        let api: Api<EndpointSlice> = Api::namespaced(self.core.client.clone(), namespace);
        let desired = plan::slices(namespace, name, merged, publications);
        let mine: Vec<&EndpointSlice> = slices
            .iter()
            .filter(|s| {
                s.namespace().as_deref() == Some(namespace.as_str())
                    && s.labels().get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY)
                    && s.labels().get(LABEL_SERVICE_NAME) == Some(name)
            })
            .collect();
        for slice in &desired {
            let slice_name = slice.name_any();
            let want = typed(slice)?;
            let have = mine.iter().find(|s| s.name_any() == slice_name).copied();
            self.write(namespace, &slice_name, have, want, false)
                .await?;
        }
        let names: BTreeSet<String> = desired.iter().map(ResourceExt::name_any).collect();
        for slice in mine {
            if !names.contains(&slice.name_any()) {
                sink::delete_exact(&api, &slice.name_any(), slice.uid(), None, &self.counted)
                    .await?;
            }
        }
        Ok(())
    }

    fn namespace_exists(&self, namespace: &str) -> bool {
        self.local
            .namespaces
            .store()
            .state()
            .iter()
            .any(|n| n.name_any() == namespace)
    }

    /// Says once, in an Event on the Namespace, that an import waits for its namespace.
    async fn say_absent(&mut self, key: &Key) {
        if !self.local.namespaces.listed() || !self.absent.insert(key.clone()) {
            return;
        }
        let (namespace, name) = key;
        let event = Event {
            type_: EventType::Warning,
            reason: "NamespaceAbsent".into(),
            note: Some(format!(
                "Service {namespace}/{name} is exported in the ClusterSet, but namespace {namespace} does not exist in this cluster: its ServiceImport is not created; it appears when the namespace is created"
            )),
            action: "Import".into(),
            secondary: None,
        };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Namespace".into()),
            name: Some(namespace.clone()),
            ..Default::default()
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::debug!(%namespace, %error, "could not publish an Event");
        }
    }

    /// Removes the imports, derived Services and slices of services no cluster exports.
    async fn clean(
        &self,
        merged: &BTreeMap<Key, Merged>,
        services: &[Service],
        slices: &[EndpointSlice],
    ) -> Result<(), kube::Error> {
        let client = &self.core.client;
        let imports: Vec<ServiceImport> = objects(&self.local.imports);
        for import in imports.iter().filter(|i| ours(*i)) {
            let key = key_of(import);
            if !merged.contains_key(&key) {
                let api: Api<ServiceImport> = Api::namespaced(client.clone(), &key.0);
                sink::delete_exact(&api, &key.1, import.uid(), None, &self.counted).await?;
            }
        }
        for service in services {
            let Some(of) = service.labels().get(LABEL_IMPORT) else {
                continue;
            };
            let namespace = service.namespace().unwrap_or_default();
            if service.name_any() != plan::derived_name(of)
                || merged.contains_key(&(namespace.clone(), of.clone()))
            {
                continue;
            }
            let api: Api<Service> = Api::namespaced(client.clone(), &namespace);
            sink::delete_exact(
                &api,
                &service.name_any(),
                service.uid(),
                None,
                &self.counted,
            )
            .await?;
        }
        for slice in slices {
            if slice.labels().get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY) {
                continue;
            }
            let namespace = slice.namespace().unwrap_or_default();
            let of = slice
                .labels()
                .get(LABEL_SERVICE_NAME)
                .cloned()
                .unwrap_or_default();
            if merged.contains_key(&(namespace.clone(), of)) {
                continue;
            }
            let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &namespace);
            sink::delete_exact(&api, &slice.name_any(), slice.uid(), None, &self.counted).await?;
        }
        Ok(())
    }

    /// The status of every local ServiceExport.
    async fn statuses(
        &self,
        exports: &[ServiceExport],
        services: &BTreeMap<Key, &Service>,
        merged: &BTreeMap<Key, Merged>,
        published: &BTreeMap<Key, ExportedServiceSpec>,
    ) -> Result<(), kube::Error> {
        for export in exports {
            let key = key_of(export);
            let validity = plan::validate(services.get(&key).copied());
            let status = self.export_status(
                export,
                validity,
                merged.get(&key),
                published.contains_key(&key),
            );
            let api: Api<ServiceExport> = Api::namespaced(self.core.client.clone(), &key.0);
            sink::write_status(&api, export, &status, &self.counted).await?;
        }
        Ok(())
    }

    /// The status `export` gets.
    fn export_status(
        &self,
        export: &ServiceExport,
        validity: Validity,
        merged: Option<&Merged>,
        published: bool,
    ) -> ServiceExportStatus {
        let generation = export.metadata.generation;
        let mut list = export.status.clone().unwrap_or_default().conditions;
        let mut set = |type_: &str, (status, reason, message): Verdict| {
            set_condition(
                &mut list,
                type_,
                status,
                reason.as_str(),
                message,
                generation,
            );
        };
        set(conditions::VALID_CONDITION, valid_condition(validity));
        let merged = merged.filter(|_| validity == Validity::Valid);
        if let Some(merged) = merged {
            let (conflict, reason, message) = merged.conflict_of(&self.id);
            set(
                conditions::CONFLICT_CONDITION,
                (truth(conflict), reason, message),
            );
        }
        let ready = if validity != Validity::Valid {
            (
                ConditionStatus::False,
                ExportReason::Failed,
                "the export is not valid".to_string(),
            )
        } else if published && merged.is_some() {
            let seen = objects::<ExportedService>(&self.local.publications)
                .iter()
                .any(|p| key_of(p) == key_of(export));
            let reason = if seen {
                ExportReason::Ready
            } else {
                ExportReason::Exported
            };
            (
                ConditionStatus::True,
                reason,
                format!("published to the ClusterSet as cluster {}", self.id),
            )
        } else {
            (
                ConditionStatus::False,
                ExportReason::Pending,
                "not yet published".to_string(),
            )
        };
        set(conditions::READY_CONDITION, ready);
        set(
            conditions::PEERS_READ_CONDITION,
            peers_condition(&self.refused),
        );
        if merged.is_none() {
            remove_condition(&mut list, conditions::CONFLICT_CONDITION);
        }
        ServiceExportStatus { conditions: list }
    }
}

/// A condition as decided: status, reason, message.
type Verdict = (ConditionStatus, ExportReason, String);

fn truth(b: bool) -> ConditionStatus {
    if b {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    }
}

/// The `Valid` condition of an export.
fn valid_condition(validity: Validity) -> Verdict {
    match validity {
        Validity::Valid => (
            ConditionStatus::True,
            ExportReason::Valid,
            "the Service is exported to the ClusterSet".to_string(),
        ),
        Validity::NoService => (
            ConditionStatus::False,
            ExportReason::NoService,
            "no Service of this name in the namespace".to_string(),
        ),
        Validity::InvalidServiceType => (
            ConditionStatus::False,
            ExportReason::InvalidServiceType,
            "an ExternalName Service cannot be exported".to_string(),
        ),
    }
}

/// The `PeersRead` condition: every peer read, or those that are not and why.
fn peers_condition(refused: &BTreeMap<String, String>) -> Verdict {
    if refused.is_empty() {
        return (
            ConditionStatus::True,
            ExportReason::AllPeersRead,
            "every peer of the cluster group is read".to_string(),
        );
    }
    let message = refused
        .iter()
        .map(|(peer, why)| format!("cluster {peer}: {why}"))
        .collect::<Vec<_>>()
        .join("; ");
    (
        ConditionStatus::False,
        ExportReason::PeerRefused,
        format!("the exports of these peers are not imported: {message}"),
    )
}

/// What [`Mcs::published`] finds.
struct Published {
    /// What this cluster publishes for the others, per export.
    published: BTreeMap<Key, ExportedServiceSpec>,
    /// The same as this cluster imports it: its own pods, in either data plane.
    local: BTreeMap<Key, ExportedServiceSpec>,
    /// The gateway Services its gateway exports need.
    gateways: Vec<Service>,
}

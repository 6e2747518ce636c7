//! One pass of the MCS reconciler: publish this cluster's exports, merge every cluster's, write
//! the imports, remove what no cluster exports any more, and say it all on the local exports.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use futures::StreamExt as _;

use k8s_openapi::api::{
    core::v1::{ObjectReference, Service},
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
    api::{ExportReason, ServiceExport, ServiceExportStatus, ServiceImport, conditions},
    gateway,
    plan::{self, LABEL_IMPORT, Merged, Validity},
    publication::{ExportedService, ExportedServiceSpec},
    reconciler::DataPlane,
    watched::{Dirty, Key},
};
use crate::sink;

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

    /// One pass over the services `dirty` names (every one if it says so).
    pub(super) async fn pass(&mut self, dirty: Dirty) -> Result<(), kube::Error> {
        self.local.refresh();
        let gateway = self
            .local
            .exports
            .iter()
            .any(|(_, e)| self.plane_of(e) == DataPlane::Gateway);
        self.local.refresh_nodes(&self.core, &self.pending, gateway);
        let mut keys = if dirty.all {
            self.every_key()
        } else {
            dirty.keys
        };
        if dirty.nodes {
            keys.extend(
                self.local
                    .exports
                    .iter()
                    .filter(|(_, e)| self.plane_of(e) == DataPlane::Gateway)
                    .map(|(k, _)| k.clone()),
            );
        }
        let this = &*self;
        let results: Vec<(Key, Result<(), kube::Error>)> = futures::stream::iter(keys)
            .map(|key| async move {
                let result = this.reconcile(&key).await;
                (key, result)
            })
            .buffer_unordered(super::IN_FLIGHT)
            .collect()
            .await;
        let mut failed = None;
        for (key, result) in results {
            if let Err(error) = result {
                // Looked at again in the next pass.
                self.pending.key(key);
                failed.get_or_insert(error);
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Every service something is known of: exported here or by a peer, published, imported,
    /// derived, gatewayed or sliced here.
    fn every_key(&self) -> BTreeSet<Key> {
        let local = &self.local;
        let mut keys: BTreeSet<Key> = local.exports.iter().map(|(k, _)| k.clone()).collect();
        keys.extend(local.publications.iter().map(|(k, _)| k.clone()));
        keys.extend(local.imports.iter().map(|(k, _)| k.clone()));
        keys.extend(local.mcs_slices.keys().cloned());
        for peer in self.peers.values() {
            keys.extend(peer.keys().cloned());
        }
        for ((namespace, _), service) in local.services.iter() {
            let labels = service.labels();
            if let Some(of) = labels
                .get(LABEL_IMPORT)
                .or_else(|| labels.get(gateway::LABEL_GATEWAY_FOR))
            {
                keys.insert((namespace.clone(), of.clone()));
            }
        }
        keys
    }

    /// Everything of service `key`: its publication (exported here), its import (exported
    /// anywhere) or the removal of both, its export's status.
    async fn reconcile(&self, key: &Key) -> Result<(), kube::Error> {
        // A pass over every service yields between them (the admin server, the DNS feed).
        tokio::task::consume_budget().await;
        let mut failed = None;
        let mut note = |result: Result<(), kube::Error>| {
            if let Err(error) = result {
                failed.get_or_insert(error);
            }
        };
        let export = self.local.exports.get(key);
        let service = self.local.services.get(key).map(|s| &**s);
        let ours = match export {
            Some(export) if plan::validate(service) == Validity::Valid => {
                service.map(|service| self.published(key, export, service))
            }
            _ => None,
        };
        note(
            self.write_gateway(key, ours.as_ref().and_then(|o| o.gateway.as_ref()))
                .await,
        );
        note(
            self.write_publication(key, ours.as_ref().map(|o| &o.published))
                .await,
        );
        let mut specs: Vec<ExportedServiceSpec> = ours.iter().map(|o| o.local.clone()).collect();
        for peer in self.peers.values() {
            if let Some(publication) = peer.publication(key) {
                let mut spec = publication.spec.clone();
                if let Some(id) = peer.id() {
                    spec.cluster_id = id.to_string();
                }
                specs.push(spec);
            }
        }
        let refs: Vec<&ExportedServiceSpec> = specs.iter().collect();
        let merged = plan::merge(&refs);
        match &merged {
            Some(merged) => note(self.import(key, merged, &refs).await),
            None => note(self.clean(key).await),
        }
        if let Some(export) = export {
            note(
                self.status(key, export, merged.as_ref(), ours.is_some())
                    .await,
            );
        }
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

    /// What this cluster publishes for its valid `export` of `service`, the same as this cluster
    /// imports it, and the gateway Service it needs.
    fn published(&self, key: &Key, export: &ServiceExport, service: &Service) -> Published {
        let own: Vec<&EndpointSlice> = self
            .local
            .own_slices
            .get(key)
            .into_iter()
            .flatten()
            .map(|s| &**s)
            .collect();
        let spec = service.spec.clone().unwrap_or_default();
        let plane = self.plane_of(export);
        let pods = plan::flat_endpoints(&spec, &own);
        let mut gateway = None;
        let endpoints = match plane {
            DataPlane::Flat => pods.clone(),
            DataPlane::Gateway => {
                let current = self
                    .local
                    .services
                    .get(&(key.0.clone(), gateway::gateway_name(&key.1)))
                    .map(|s| &**s);
                if gateway::needs_node_port(service) {
                    gateway = Some(gateway::gateway_service(service));
                }
                gateway::gateway_endpoints(service, current, &self.local.node_list)
            }
        };
        let published = plan::publication(&self.id, export, service, plane.as_str(), endpoints);
        // This cluster reaches its own pods directly, whatever the others use: its import of
        // its own export lists the pods (a node port of its own node would be a second DNAT
        // that a connection from a pod of this node never gets).
        let mut local = published.clone();
        local.endpoints = pods;
        Published {
            published,
            local,
            gateway,
        }
    }

    /// Makes the gateway Service of `key` exactly `desired`: written where it differs, removed
    /// when no longer wanted.
    async fn write_gateway(&self, key: &Key, desired: Option<&Service>) -> Result<(), kube::Error> {
        let name = gateway::gateway_name(&key.1);
        let have = self
            .local
            .services
            .get(&(key.0.clone(), name.clone()))
            .map(|s| &**s);
        if let Some(desired) = desired {
            self.write(&key.0, &name, have, typed(desired)?, false)
                .await?;
        } else if let Some(have) = have
            && have.labels().get(gateway::LABEL_GATEWAY_FOR) == Some(&key.1)
        {
            let api: Api<Service> = Api::namespaced(self.core.client.clone(), &key.0);
            sink::delete_exact(&api, &name, have.uid(), None, &self.counted).await?;
        }
        Ok(())
    }

    /// Makes the local `ExportedService` of `key` exactly `published` (none: removed).
    async fn write_publication(
        &self,
        (namespace, name): &Key,
        published: Option<&ExportedServiceSpec>,
    ) -> Result<(), kube::Error> {
        let have = self
            .local
            .publications
            .get(&(namespace.clone(), name.clone()))
            .map(|p| &**p);
        if let Some(spec) = published {
            let mut desired = ExportedService::new(name, spec.clone());
            desired.metadata.namespace = Some(namespace.clone());
            self.write(namespace, name, have, typed(&desired)?, true)
                .await?;
        } else if let Some(have) = have {
            let api: Api<ExportedService> = Api::namespaced(self.core.client.clone(), namespace);
            sink::delete_exact(&api, name, have.uid(), None, &self.counted).await?;
        }
        Ok(())
    }

    /// Writes the import of `key` here: derived Service, ServiceImport, EndpointSlices.
    async fn import(
        &self,
        key: &Key,
        merged: &Merged,
        publications: &[&ExportedServiceSpec],
    ) -> Result<(), kube::Error> {
        let (namespace, name) = key;
        if !self.namespace_exists(namespace) {
            self.say_absent(key).await;
            return Ok(());
        }
        self.absent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
        let derived = plan::derived_service(namespace, name, merged);
        let derived_name = plan::derived_name(name);
        let desired = typed(&derived)?;
        let current = self
            .local
            .services
            .get(&(namespace.clone(), derived_name.clone()))
            .map(|s| &**s);
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
        let current = self.local.imports.get(key).map(|i| &**i);
        self.write(namespace, name, current, typed(&import)?, true)
            .await?;
        self.write_slices(key, &merged, publications).await
    }

    /// The import's EndpointSlices: written where they differ, removed where no longer wanted.
    async fn write_slices(
        &self,
        key: &Key,
        merged: &Merged,
        publications: &[&ExportedServiceSpec],
    ) -> Result<(), kube::Error> {
        let (namespace, name) = key;
        let api: Api<EndpointSlice> = Api::namespaced(self.core.client.clone(), namespace);
        let desired = plan::slices(namespace, name, merged, publications);
        let mine: &[Arc<EndpointSlice>] = self.local.mcs_slices.get(key).map_or(&[], Vec::as_slice);
        for slice in &desired {
            let slice_name = slice.name_any();
            let have = mine
                .iter()
                .find(|s| s.name_any() == slice_name)
                .map(|s| &**s);
            self.write(namespace, &slice_name, have, typed(slice)?, false)
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
            .get(&(String::new(), namespace.to_string()))
            .is_some()
    }

    /// Says once, in an Event on the Namespace, that an import waits for its namespace.
    async fn say_absent(&self, key: &Key) {
        if !self.local.namespaces.view().listed()
            || !self
                .absent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(key.clone())
        {
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

    /// Removes the import, derived Service and slices of service `key`, which no cluster
    /// exports.
    async fn clean(&self, key: &Key) -> Result<(), kube::Error> {
        let (namespace, name) = key;
        let client = &self.core.client;
        if let Some(import) = self.local.imports.get(key).filter(|i| ours(&***i)) {
            let api: Api<ServiceImport> = Api::namespaced(client.clone(), namespace);
            sink::delete_exact(&api, name, import.uid(), None, &self.counted).await?;
        }
        let derived_name = plan::derived_name(name);
        if let Some(service) = self
            .local
            .services
            .get(&(namespace.clone(), derived_name.clone()))
            .filter(|s| s.labels().get(LABEL_IMPORT) == Some(name))
        {
            let api: Api<Service> = Api::namespaced(client.clone(), namespace);
            sink::delete_exact(&api, &derived_name, service.uid(), None, &self.counted).await?;
        }
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
        for slice in self.local.mcs_slices.get(key).into_iter().flatten() {
            sink::delete_exact(&api, &slice.name_any(), slice.uid(), None, &self.counted).await?;
        }
        Ok(())
    }

    /// The status of local ServiceExport `key`.
    async fn status(
        &self,
        key: &Key,
        export: &ServiceExport,
        merged: Option<&Merged>,
        published: bool,
    ) -> Result<(), kube::Error> {
        let validity = plan::validate(self.local.services.get(key).map(|s| &**s));
        let status = self.export_status(key, export, validity, merged, published);
        let api: Api<ServiceExport> = Api::namespaced(self.core.client.clone(), &key.0);
        sink::write_status(&api, export, &status, &self.counted).await?;
        Ok(())
    }

    /// The status `export` gets.
    fn export_status(
        &self,
        key: &Key,
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
            let seen = self.local.publications.get(key).is_some();
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

/// What [`Mcs::published`] finds for one export.
struct Published {
    /// What this cluster publishes for the others.
    published: ExportedServiceSpec,
    /// The same as this cluster imports it: its own pods, in either data plane.
    local: ExportedServiceSpec,
    /// The gateway Service the export needs.
    gateway: Option<Service>,
}

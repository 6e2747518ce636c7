//! ClusterAPIGroupImport and APIResourceImport: which API groups of a service cluster the
//! workload cluster serves, and in which namespaces their resources are available.
//!
//! - ClusterAPIGroupImport `G` (one per group): the versions of `spec.group` the service cluster
//!   serves (or `spec.version`), each registered as APIService `<version>.<group>` pointing at the
//!   Service and CA in the DownstreamClusterLink's status, labelled with [`IMPORT_LABEL`] and
//!   owned by `G`. A group the workload cluster already serves (a CRD, a built-in API or another
//!   APIService) is refused (`GroupServedLocally`) and never taken over. A finalizer removes the
//!   APIServices when `G` is deleted, so no garbage collector is needed.
//! - APIResourceImport: checks that its resources exist in the group upstream
//!   (`ResourcesAvailable`); the proxy forwards a namespace's requests only for resources an
//!   APIResourceImport of that namespace lists.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::ListParams,
    runtime::{
        controller::Action,
        events::Recorder,
        finalizer::{Event as Finalizer, finalizer},
        reflector::{ObjectRef, Store},
    },
};
use serde_json::Value;
use xcc_kube::PeerClient;

use super::{
    Error, Verdict,
    api::{
        APIResourceImport, ClusterAPIGroupImport, DownstreamClusterLink, ProjectionStatus, Reason,
    },
    proxy::Proxy,
    publish, reason_of,
};
use crate::sink::{self, Counted};

mod plan;

/// Label on each APIService an import registers: the import's name.
pub const IMPORT_LABEL: &str =
    "projection.apiresources.multicluster.x-tanzu.vmware.com/cluster-api-group-import";
/// Finalizer that removes an import's APIServices.
pub const FINALIZER: &str = "projection.apiresources.multicluster.x-tanzu.vmware.com/apiservices";
const RESYNC: Duration = Duration::from_secs(60);
const RETRY: Duration = Duration::from_secs(2);

pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub proxy: Arc<Proxy>,
    pub links: Store<DownstreamClusterLink>,
    pub imports: Store<ClusterAPIGroupImport>,
    pub counted: Counted,
}

/// The APIService of `version` of `group`.
pub fn api_service_name(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// The link of `import`, its proxy Service and CA, and its client; or why it cannot serve.
fn link_of(
    import: &ClusterAPIGroupImport,
    ctx: &Context,
) -> Result<(Value, String, PeerClient), Verdict> {
    let r = &import.spec.downstream_cluster_link_ref;
    let link = ctx
        .links
        .get(&ObjectRef::<DownstreamClusterLink>::new(&r.name).within(&r.namespace));
    let client = ctx.proxy.link(&r.namespace, &r.name);
    let (service, ca) = plan::link_target(import, link.as_deref(), client.is_some())?;
    Ok((service, ca, client.expect("link_target checked it")))
}

/// GET `path` on the service cluster, as JSON; `Ok(None)` on 404.
async fn discover(client: &Client, path: &str) -> Result<Option<Value>, String> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request::<Value>(request).await {
        Ok(value) => Ok(Some(value)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(error) => Err(xcc_kube::bounded(&error)),
    }
}

pub async fn reconcile_group(
    import: Arc<ClusterAPIGroupImport>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let api: Api<ClusterAPIGroupImport> = Api::all(ctx.client.clone());
    let result = finalizer(&api, FINALIZER, import, |event| async {
        match event {
            Finalizer::Apply(import) => apply_group(import, &ctx).await,
            Finalizer::Cleanup(import) => {
                withdraw(&import, &BTreeSet::new(), &ctx).await?;
                Ok(Action::await_change())
            }
        }
    })
    .await;
    xcc_kube::finalizers::finalized(result).map_err(|e| Error::Finalizer(Box::new(e)))
}

pub fn error_policy_group(
    import: Arc<ClusterAPIGroupImport>,
    error: &Error,
    _: Arc<Context>,
) -> Action {
    tracing::warn!(import = %import.name_any(), error = %xcc_kube::bounded(&error), "ClusterAPIGroupImport reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Deletes this import's APIServices except those of `keep`.
async fn withdraw(
    import: &ClusterAPIGroupImport,
    keep: &BTreeSet<String>,
    ctx: &Context,
) -> Result<(), Error> {
    let api: Api<APIService> = Api::all(ctx.client.clone());
    let uid = import.uid().unwrap_or_default();
    let ours = api
        .list(&ListParams::default().labels(&format!("{IMPORT_LABEL}={}", import.name_any())))
        .await?;
    for service in plan::to_withdraw(&ours.items, &uid, keep) {
        sink::delete_exact(&api, &service.name_any(), service.uid(), None, &ctx.counted).await?;
    }
    Ok(())
}

async fn apply_group(import: Arc<ClusterAPIGroupImport>, ctx: &Context) -> Result<Action, Error> {
    let generation = import.meta().generation;
    let (verdict, requeue) = register(&import, ctx).await?;
    let ready = plan::ready(&verdict, &verdict.message);
    let old = import.status.clone().unwrap_or_default();
    let mut status: ProjectionStatus = old.clone();
    ready.set(&mut status.conditions, "Ready", generation);
    verdict.set(&mut status.conditions, "APIServicesReady", generation);
    status.observed_generation = generation;
    let api: Api<ClusterAPIGroupImport> = Api::all(ctx.client.clone());
    sink::write_status(&api, import.as_ref(), &status, &ctx.counted).await?;
    if reason_of(&old.conditions, "APIServicesReady") != Some(&*verdict.reason) {
        tracing::info!(import = %import.name_any(), ready = verdict.ready, reason = %verdict.reason, message = %verdict.message, "ClusterAPIGroupImport status");
        publish(&ctx.recorder, import.as_ref(), "Import", &verdict).await;
    }
    Ok(Action::requeue(requeue))
}

/// Registers the import's APIServices; the `APIServicesReady` verdict and when to look again.
async fn register(
    import: &ClusterAPIGroupImport,
    ctx: &Context,
) -> Result<(Verdict, Duration), Error> {
    let group = &import.spec.group;
    let uid = import.uid().unwrap_or_default();
    let api: Api<APIService> = Api::all(ctx.client.clone());
    // Never take over a group this cluster serves otherwise.
    let all = api.list(&ListParams::default()).await?;
    if let Some(verdict) = plan::served_locally(&all.items, group, &uid) {
        // Keep nothing: whatever this import registered before is withdrawn.
        withdraw(import, &BTreeSet::new(), ctx).await?;
        return Ok((verdict, RESYNC));
    }
    let (service, ca, client) = match link_of(import, ctx) {
        Ok(found) => found,
        Err(verdict) => return Ok((verdict, plan::WAIT)),
    };
    let versions = match &import.spec.version {
        Some(version) => Ok(vec![version.clone()]),
        None => plan::versions(
            group,
            discover(&client.client, &format!("/apis/{group}")).await,
        ),
    };
    let versions = match versions {
        Ok(versions) => versions,
        Err(stop) => return Ok(stop),
    };
    let owner = serde_json::to_value(import.controller_owner_ref(&()))?;
    let mut names = BTreeSet::new();
    let mut unavailable = Vec::new();
    for version in &versions {
        let name = api_service_name(group, version);
        let desired = plan::api_service(&import.name_any(), group, version, &service, &ca, &owner);
        let current = all.iter().find(|s| s.name_any() == name);
        let written = match current {
            Some(current) if sink::up_to_date(&serde_json::to_value(current)?, &desired) => {
                current.clone()
            }
            _ => sink::apply_whole(&api, &name, desired, &ctx.counted).await?,
        };
        unavailable.extend(plan::unavailable(&written));
        names.insert(name);
    }
    withdraw(import, &names, ctx).await?;
    Ok(plan::registered(&names, &unavailable))
}

pub async fn reconcile_resources(
    import: Arc<APIResourceImport>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let Some(namespace) = import.namespace() else {
        return Ok(Action::await_change());
    };
    if import.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let generation = import.meta().generation;
    let (available, requeue) = resources(&import, &ctx).await;
    let ready = plan::ready(&available, "Successfully reconciled");
    let old = import.status.clone().unwrap_or_default();
    let mut status: ProjectionStatus = old.clone();
    ready.set(&mut status.conditions, "Ready", generation);
    available.set(&mut status.conditions, "ResourcesAvailable", generation);
    status.observed_generation = generation;
    let api: Api<APIResourceImport> = Api::namespaced(ctx.client.clone(), &namespace);
    sink::write_status(&api, import.as_ref(), &status, &ctx.counted).await?;
    if reason_of(&old.conditions, "ResourcesAvailable") != Some(&*available.reason) {
        publish(&ctx.recorder, import.as_ref(), "Import", &available).await;
    }
    Ok(Action::requeue(requeue))
}

pub fn error_policy_resources(
    import: Arc<APIResourceImport>,
    error: &Error,
    _: Arc<Context>,
) -> Action {
    tracing::warn!(import = %import.name_any(), error = %xcc_kube::bounded(&error), "APIResourceImport reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Whether the resources of `import` exist upstream in its group.
async fn resources(import: &APIResourceImport, ctx: &Context) -> (Verdict, Duration) {
    let retry = plan::WAIT;
    let name = &import.spec.cluster_api_import_ref.name;
    let Some(group_import) = ctx
        .imports
        .get(&ObjectRef::<ClusterAPIGroupImport>::new(name))
    else {
        return (
            Verdict::not(
                Reason::ClusterApiGroupImportNotFound,
                format!("ClusterAPIGroupImport {name} does not exist"),
            ),
            retry,
        );
    };
    if !plan::group_ready(&group_import) {
        return (
            Verdict::not(
                Reason::ClusterApiGroupImportNotReady,
                format!("ClusterAPIGroupImport {name} is not ready"),
            ),
            retry,
        );
    }
    let group = &group_import.spec.group;
    let r = &group_import.spec.downstream_cluster_link_ref;
    let Some(client) = ctx.proxy.link(&r.namespace, &r.name) else {
        return (
            Verdict::not(
                Reason::ClusterApiGroupImportNotReady,
                format!(
                    "DownstreamClusterLink {}/{} has no usable client",
                    r.namespace, r.name
                ),
            ),
            retry,
        );
    };
    let version = match &group_import.spec.version {
        Some(v) => Some(v.clone()),
        None => match discover(&client.client, &format!("/apis/{group}")).await {
            Ok(found) => found.as_ref().and_then(plan::preferred_version),
            Err(error) => return (Verdict::not(Reason::UpstreamUnreachable, error), retry),
        },
    };
    let Some(version) = version else {
        return (
            Verdict::not(
                Reason::ResourcesNotFound,
                format!("the service cluster does not serve API group {group}"),
            ),
            retry,
        );
    };
    let served = match discover(&client.client, &format!("/apis/{group}/{version}")).await {
        Ok(found) => found.as_ref().map(plan::served).unwrap_or_default(),
        Err(error) => return (Verdict::not(Reason::UpstreamUnreachable, error), retry),
    };
    plan::resources(&import.spec.resources, &served, group, &version)
}

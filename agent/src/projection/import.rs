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
use serde_json::{Value, json};
use xcc_kube::PeerClient;

use super::{
    Error, Verdict,
    api::{
        APIResourceImport, ClusterAPIGroupImport, DownstreamClusterLink, ProjectionStatus, Reason,
    },
    owned_by,
    proxy::Proxy,
    publish, reason_of,
};
use crate::sink::{self, Counted};

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
    let Some(link) = ctx
        .links
        .get(&ObjectRef::<DownstreamClusterLink>::new(&r.name).within(&r.namespace))
    else {
        return Err(Verdict::not(
            Reason::DownstreamClusterLinkNotFound,
            format!(
                "DownstreamClusterLink {}/{} does not exist",
                r.namespace, r.name
            ),
        ));
    };
    let proxy = link.status.as_ref().and_then(|s| s.proxy.clone());
    let service = proxy.as_ref().and_then(|p| p.service_reference.clone());
    let ca = proxy.and_then(|p| p.ca_bundle);
    let client = ctx.proxy.link(&r.namespace, &r.name);
    match (service, ca, client) {
        (Some(service), Some(ca), Some(client)) => Ok((
            json!({"name": service.name, "namespace": service.namespace, "port": service.port.unwrap_or(443)}),
            ca,
            client,
        )),
        _ => Err(Verdict::not(
            Reason::DownstreamClusterLinkNotReady,
            format!(
                "DownstreamClusterLink {}/{} has no proxy Service, CA or usable kubeconfig yet",
                r.namespace, r.name
            ),
        )),
    }
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
    ctx: Arc<Context>,
) -> Action {
    ctx.counted.failed(error);
    tracing::warn!(import = %import.name_any(), %error, "ClusterAPIGroupImport reconcile failed");
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
    for service in ours {
        if owned_by(&service.metadata, &uid) && !keep.contains(&service.name_any()) {
            sink::delete_exact(&api, &service.name_any(), service.uid(), None, &ctx.counted)
                .await?;
        }
    }
    Ok(())
}

async fn apply_group(import: Arc<ClusterAPIGroupImport>, ctx: &Context) -> Result<Action, Error> {
    let generation = import.meta().generation;
    let (verdict, requeue) = register(&import, ctx).await?;
    let ready = if verdict.ready {
        Verdict::ok(Reason::Reconciled, verdict.message.clone())
    } else {
        verdict.clone()
    };
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
    if let Some(other) = all.iter().find(|s| {
        s.spec.as_ref().and_then(|s| s.group.as_deref()) == Some(group.as_str())
            && !owned_by(&s.metadata, &uid)
    }) {
        // Keep nothing: whatever this import registered before is withdrawn.
        withdraw(import, &BTreeSet::new(), ctx).await?;
        return Ok((
            Verdict::not(
                Reason::GroupServedLocally,
                format!(
                    "API group {group} is already served on this cluster (APIService {}); it is not imported",
                    other.name_any()
                ),
            ),
            RESYNC,
        ));
    }
    let (service, ca, client) = match link_of(import, ctx) {
        Ok(found) => found,
        Err(verdict) => return Ok((verdict, Duration::from_secs(5))),
    };
    let versions: Vec<String> = match &import.spec.version {
        Some(version) => vec![version.clone()],
        None => match discover(&client.client, &format!("/apis/{group}")).await {
            Ok(Some(found)) => found["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["version"].as_str().map(str::to_string))
                .collect(),
            Ok(None) => {
                return Ok((
                    Verdict::not(
                        Reason::GroupNotFoundUpstream,
                        format!("the service cluster does not serve API group {group}"),
                    ),
                    Duration::from_secs(10),
                ));
            }
            Err(error) => {
                return Ok((
                    Verdict::not(
                        Reason::UpstreamUnreachable,
                        format!("discovery of API group {group} upstream failed: {error}"),
                    ),
                    Duration::from_secs(10),
                ));
            }
        },
    };
    if versions.is_empty() {
        return Ok((
            Verdict::not(
                Reason::GroupNotFoundUpstream,
                format!("the service cluster serves no version of API group {group}"),
            ),
            Duration::from_secs(10),
        ));
    }
    let owner = serde_json::to_value(import.controller_owner_ref(&()))?;
    let mut names = BTreeSet::new();
    let mut unavailable = Vec::new();
    for version in &versions {
        let name = api_service_name(group, version);
        let desired = json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {
                "name": name,
                "labels": {
                    super::MANAGED_BY.0: super::MANAGED_BY.1,
                    IMPORT_LABEL: import.name_any(),
                },
                "ownerReferences": [owner],
            },
            "spec": {
                "group": group,
                "version": version,
                "service": service,
                "caBundle": ca,
                "groupPriorityMinimum": 1000,
                "versionPriority": 15,
            },
        });
        let current = all.iter().find(|s| s.name_any() == name);
        let written = match current {
            Some(current) if sink::up_to_date(&serde_json::to_value(current)?, &desired) => {
                current.clone()
            }
            _ => sink::apply_whole(&api, &name, desired, &ctx.counted).await?,
        };
        let available = written
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Available"));
        match available {
            Some(c) if c.status == "True" => {}
            Some(c) => unavailable.push(format!(
                "{name}: {}",
                xcc_kube::bounded(
                    &c.message
                        .clone()
                        .unwrap_or_else(|| c.reason.clone().unwrap_or_default())
                )
            )),
            None => unavailable.push(format!("{name}: not checked yet")),
        }
        names.insert(name);
    }
    withdraw(import, &names, ctx).await?;
    let list = names.iter().cloned().collect::<Vec<_>>().join(", ");
    Ok(if unavailable.is_empty() {
        (
            Verdict::ok(
                Reason::Available,
                format!("APIServices {list} are available"),
            ),
            RESYNC,
        )
    } else {
        (
            Verdict::not(Reason::ApiServiceNotAvailable, unavailable.join("; ")),
            RETRY,
        )
    })
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
    let ready = if available.ready {
        Verdict::ok(Reason::Reconciled, "Successfully reconciled")
    } else {
        available.clone()
    };
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
    ctx: Arc<Context>,
) -> Action {
    ctx.counted.failed(error);
    tracing::warn!(import = %import.name_any(), %error, "APIResourceImport reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Whether the resources of `import` exist upstream in its group.
async fn resources(import: &APIResourceImport, ctx: &Context) -> (Verdict, Duration) {
    let retry = Duration::from_secs(5);
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
    let group_ready = group_import
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    if !group_ready {
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
            Ok(Some(found)) => found["preferredVersion"]["version"]
                .as_str()
                .map(str::to_string),
            Ok(None) => None,
            Err(error) => {
                return (Verdict::not(Reason::UpstreamUnreachable, error), retry);
            }
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
    let served: BTreeSet<String> =
        match discover(&client.client, &format!("/apis/{group}/{version}")).await {
            Ok(Some(found)) => found["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["name"].as_str())
                .filter(|n| !n.contains('/'))
                .map(str::to_string)
                .collect(),
            Ok(None) => BTreeSet::new(),
            Err(error) => {
                return (Verdict::not(Reason::UpstreamUnreachable, error), retry);
            }
        };
    let missing: Vec<String> = import
        .spec
        .resources
        .iter()
        .filter(|r| !served.contains(*r))
        .map(xcc_kube::bounded)
        .collect();
    if missing.is_empty() {
        (
            Verdict::ok(Reason::ResourcesReady, "Resources Ready"),
            RESYNC,
        )
    } else {
        (
            Verdict::not(
                Reason::ResourcesNotFound,
                format!(
                    "not served by the service cluster in {group}/{version}: {}",
                    missing.join(", ")
                ),
            ),
            retry,
        )
    }
}

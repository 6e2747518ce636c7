//! API projection (`projection.apiresources.multicluster.x-tanzu.vmware.com`), both sides.
//!
//! ```text
//!  service cluster
//!  UpstreamClusterLink L ──► ServiceAccount xcc-upstream-L   (owned by L)
//!                       └──► Secret L-kubeconfig             (owned by L; TokenRequest token,
//!                                                             renewed when a third remains)
//!  APIExportRoleBinding B ─► ClusterRoleBinding xcc-apiexport-B (owned by B): spec.clusterRoleRef
//!                            to the ServiceAccount of spec.upstreamClusterLinkRef
//!
//!  workload cluster
//!  DownstreamClusterLink D ─► client from its kubeconfig Secret (trust gate), TLS Secret,
//!                             Service D-proxy (+ EndpointSlice) → the agent's aggregated server
//!  ClusterAPIGroupImport G ─► APIService <version>.<group> per version (owned by G, finalizer)
//!  APIResourceImport R ─────► which resources of G the proxy forwards in R's namespace
//! ```
//!
//! The service-side controllers read one shared watch of UpstreamClusterLinks ([`Typed`]); a
//! link's change wakes the bindings that name it. The workload side shares one watch per kind
//! the same way; the aggregated API server ([`proxy`]) reads the import stores directly and
//! gets each link's client and certificate from the DownstreamClusterLink reconciler. Everything
//! else is read with a GET per reconcile and written through the sink
//! ([`crate::sink::apply_whole`], [`crate::sink::delete_exact`]).

pub mod api;
pub mod binding;
pub mod downstream;
pub mod import;
pub mod link;
pub mod proxy;
pub mod reconciler;
pub mod renew;
mod write;

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, CustomResourceExt, Resource, ResourceExt,
    api::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        events::{Event as KubeEvent, EventType, Recorder},
        reflector::{self, ObjectRef},
        watcher,
    },
};
pub use xcc_kube::status::{Verdict, reason_of};

use tokio_util::sync::CancellationToken;
use xcc_sync::{Core, kit::Loop};

use crate::{
    sink::Counted,
    sources::{Schedule, SecretChange, Typed},
};

/// The apiVersion prefix of the projection kinds.
const GROUP_PREFIX: &str = "projection.apiresources.multicluster.x-tanzu.vmware.com/";
use api::{
    APIExportRoleBinding, APIResourceImport, ClusterAPIGroupImport, DownstreamClusterLink,
    UpstreamClusterLink,
};

/// The CRDs of this module: the five kinds of the projection API.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    vec![
        UpstreamClusterLink::crd(),
        APIExportRoleBinding::crd(),
        DownstreamClusterLink::crd(),
        ClusterAPIGroupImport::crd(),
        APIResourceImport::crd(),
    ]
}

/// Label on every object the projection reconcilers make.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "xcc-agent");

/// What a reconcile can fail with (and retry).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot encode: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("cannot encode the kubeconfig: {0}")]
    Yaml(#[from] xcc_kube::yaml::SerializeError),
    #[error("cannot make a certificate: {0}")]
    Certificate(String),
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl xcc_sync::kit::ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(error) => error.metric_label(),
            Error::Encode(_) | Error::Yaml(_) => "encode",
            Error::Certificate(_) => "certificate",
            Error::Finalizer(error) => error.metric_label(),
        }
    }
}

/// Publishes an Event about `obj` (Warning unless `verdict` is ready); a failure is only logged.
pub async fn publish<K>(recorder: &Recorder, obj: &K, action: &str, verdict: &Verdict)
where
    K: Resource<DynamicType = ()>,
{
    let event = KubeEvent {
        type_: if verdict.ready {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: verdict.reason.to_string(),
        note: Some(verdict.message.clone()),
        action: action.into(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::debug!(%error, "could not publish an Event");
    }
}

/// Whether `obj` has an ownerReference to `uid`.
pub fn owned_by(meta: &kube::api::ObjectMeta, uid: &str) -> bool {
    meta.owner_references.iter().flatten().any(|o| o.uid == uid)
}

/// What the projection reconcilers are told by flags.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The API server URL written into UpstreamClusterLinks' kubeconfig Secrets.
    pub advertise_url: String,
    /// Where the aggregated API server listens.
    pub proxy_listen: std::net::SocketAddr,
    /// How DownstreamClusterLinks' Services reach it.
    pub endpoint: downstream::Endpoint,
    /// The agent's kubeconfig (`None`: in-cluster), for the aggregated server's own client.
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Namespace and name of the aggregated server's own ServiceAccount.
    pub proxy_account: (String, String),
}

/// Runs the controllers of both sides, and the aggregated API server, until `stop` is cancelled.
pub async fn run(core: Core, settings: Settings, stop: CancellationToken) {
    let workload = xcc_sync::task::spawn_owned(run_workload_side(
        core.clone(),
        settings.clone(),
        stop.clone(),
    ));
    run_service_side(core, settings.advertise_url, stop).await;
    if let Err(error) = workload.await {
        tracing::error!(%error, "API projection (workload side) ended abnormally");
    }
}

/// Logs the outcome of one reconcile of `kind`.
/// The workload-cluster side: DownstreamClusterLink, ClusterAPIGroupImport, APIResourceImport
/// and the aggregated API server that serves the imports.
async fn run_workload_side(core: Core, settings: Settings, stop: CancellationToken) {
    let links = Typed::<DownstreamClusterLink>::new();
    let groups = Typed::<ClusterAPIGroupImport>::new();
    let resources = Typed::<APIResourceImport>::new();
    let (identity, renewer) = proxy_identity(&core, &settings, &stop).await;
    let (namespaces, namespace_watch) = watch_namespaces(&identity);
    let proxy = Arc::new(proxy::Proxy::new(
        identity.clone(),
        core.peers.clone(),
        groups.store(),
        resources.store(),
        namespaces,
        core.metrics.clone(),
    ));
    let server = serve_proxy(&proxy, settings.proxy_listen, &stop).await;
    let link_controller = downstream_controller(&core, &settings, &links, &proxy, &stop);
    let import_ctx = Arc::new(import::Context {
        client: core.client.clone(),
        recorder: core.recorder(),
        proxy: proxy.clone(),
        links: links.store(),
        imports: groups.store(),
        counted: Counted {
            metrics: core.metrics.clone(),
            reconciler: "projection-import",
        },
    });
    let group_controller = group_controller(&links, &groups, import_ctx.clone(), &stop);
    let resource_controller = resource_controller(&groups, &resources, import_ctx, &stop);
    let watches = [
        xcc_sync::task::spawn_owned(links.run(Api::all(core.client.clone()), core.metrics.clone())),
        xcc_sync::task::spawn_owned(
            groups.run(Api::all(core.client.clone()), core.metrics.clone()),
        ),
        xcc_sync::task::spawn_owned(
            resources.run(Api::all(core.client.clone()), core.metrics.clone()),
        ),
    ];
    tracing::info!(
        "API projection running (DownstreamClusterLink, ClusterAPIGroupImport, APIResourceImport)"
    );
    futures::join!(link_controller, group_controller, resource_controller);
    for watch in watches {
        watch.abort();
    }
    namespace_watch.abort();
    if let Some(renewer) = renewer {
        renewer.abort();
    }
    if let Some(server) = server {
        let _ = server.await;
    }
}

/// The aggregated server's own ServiceAccount, with its first token before anything uses it,
/// and the task that renews that token until `stop` (none if the first token failed).
async fn proxy_identity(
    core: &Core,
    settings: &Settings,
    stop: &CancellationToken,
) -> (
    Arc<proxy::identity::Identity>,
    Option<xcc_sync::task::Owned<()>>,
) {
    let identity = Arc::new(
        proxy::identity::Identity::new(
            core.client.clone(),
            settings.kubeconfig.as_deref(),
            &settings.proxy_account.0,
            &settings.proxy_account.1,
        )
        .await,
    );
    let mut backoff = xcc_kube::Backoff::local();
    let renewer = identity.renew_once(&mut backoff).await.map(|first| {
        xcc_sync::task::spawn_owned(identity.clone().renew_forever(
            first,
            backoff,
            stop.clone().cancelled_owned(),
        ))
    });
    (identity, renewer)
}

/// Which namespaces are being deleted, for the aggregated server (metadata only), and the task
/// that watches them.
fn watch_namespaces(
    identity: &proxy::identity::Identity,
) -> (
    reflector::Store<PartialObjectMeta<Namespace>>,
    xcc_sync::task::Owned<()>,
) {
    let (namespaces, namespace_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let namespace_watch = xcc_sync::task::spawn_owned(
        xcc_sync::sources::watch(
            Api::<PartialObjectMeta<Namespace>>::all(identity.client()),
            watcher::Config::default(),
            Schedule::Local,
        )
        .reflect(namespace_writer)
        .for_each(|event| async move {
            if let Err(error) = event {
                tracing::debug!(error = %xcc_kube::bounded(&error), "namespace watch failed; retrying");
            }
        }),
    );
    (namespaces, namespace_watch)
}

/// The aggregated API server on `listen` until `stop`; none if it cannot listen (the
/// DownstreamClusterLinks then say so).
async fn serve_proxy(
    proxy: &Arc<proxy::Proxy>,
    listen: std::net::SocketAddr,
    stop: &CancellationToken,
) -> Option<xcc_sync::task::Owned<()>> {
    match tokio::net::TcpListener::bind(listen).await {
        Ok(listener) => {
            tracing::info!(%listen, "aggregated API server listening");
            Some(xcc_sync::task::spawn_owned(
                proxy
                    .clone()
                    .serve(listener, stop.clone().cancelled_owned()),
            ))
        }
        Err(error) => {
            tracing::warn!(%listen, error = %xcc_kube::bounded(&error), "cannot listen: the aggregated API server is off (DownstreamClusterLinks say NotListening)");
            None
        }
    }
}

/// The DownstreamClusterLink controller, woken also when a link's kubeconfig or TLS Secret
/// changes.
fn downstream_controller(
    core: &Core,
    settings: &Settings,
    links: &Typed<DownstreamClusterLink>,
    proxy: &Arc<proxy::Proxy>,
    stop: &CancellationToken,
) -> impl std::future::Future<Output = ()> + use<> {
    let link_ctx = Arc::new(downstream::Context {
        client: core.client.clone(),
        recorder: core.recorder(),
        peers: core.peers.clone(),
        proxy: proxy.clone(),
        endpoint: settings.endpoint.clone(),
        counted: Counted {
            metrics: core.metrics.clone(),
            reconciler: "projection-downstream",
        },
        renewed: Default::default(),
    });
    // A kubeconfig or TLS Secret of a link changed: wake that link.
    let link_store = links.store();
    let secret_wakes = core.local_secrets.changes().filter_map(move |change| {
        let link_store = link_store.clone();
        async move {
            let secret = match change {
                SecretChange::Applied(secret) | SecretChange::Deleted(secret) => secret,
                SecretChange::Listed | SecretChange::Missed => return None,
            };
            let namespace = secret.namespace()?;
            let name = secret.name_any();
            link_store
                .state()
                .into_iter()
                .find(|l| {
                    l.namespace().as_deref() == Some(namespace.as_str())
                        && (l.spec.upstream.kubeconfig.secret_name == name
                            || l.spec.proxy.tls.secret_name == name)
                })
                .map(|l| ObjectRef::from_obj(l.as_ref()))
        }
    });
    Loop::of(&link_ctx.counted, links)
        .wake_on(secret_wakes)
        .run(
            downstream::reconcile,
            downstream::error_policy,
            link_ctx,
            stop.clone(),
        )
}

/// The ClusterAPIGroupImport controller, woken also by a change of the link an import names.
fn group_controller(
    links: &Typed<DownstreamClusterLink>,
    groups: &Typed<ClusterAPIGroupImport>,
    import_ctx: Arc<import::Context>,
    stop: &CancellationToken,
) -> impl std::future::Future<Output = ()> + use<> {
    let group_loop = Loop::of(&import_ctx.counted, groups);
    let group_store = group_loop.store();
    group_loop
        .wake_by(
            links.subscribe(),
            move |link: Arc<DownstreamClusterLink>| {
                let namespace = link.namespace().unwrap_or_default();
                let name = link.name_any();
                group_store
                    .state()
                    .into_iter()
                    .filter(|g| {
                        g.spec.downstream_cluster_link_ref.name == name
                            && g.spec.downstream_cluster_link_ref.namespace == namespace
                    })
                    .map(|g| ObjectRef::from_obj(g.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .run(
            import::reconcile_group,
            import::error_policy_group,
            import_ctx,
            stop.clone(),
        )
}

/// The APIResourceImport controller, woken also by a change of the group import it belongs to.
fn resource_controller(
    groups: &Typed<ClusterAPIGroupImport>,
    resources: &Typed<APIResourceImport>,
    import_ctx: Arc<import::Context>,
    stop: &CancellationToken,
) -> impl std::future::Future<Output = ()> + use<> {
    let resource_loop = Loop::of(&import_ctx.counted, resources);
    let resource_store = resource_loop.store();
    resource_loop
        .wake_by(
            groups.subscribe(),
            move |group: Arc<ClusterAPIGroupImport>| {
                let name = group.name_any();
                resource_store
                    .state()
                    .into_iter()
                    .filter(|r| r.spec.cluster_api_import_ref.name == name)
                    .map(|r| ObjectRef::from_obj(r.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .run(
            import::reconcile_resources,
            import::error_policy_resources,
            import_ctx,
            stop.clone(),
        )
}

/// The service-cluster side: UpstreamClusterLink and APIExportRoleBinding.
async fn run_service_side(core: Core, advertise_url: String, stop: CancellationToken) {
    let links = Typed::<UpstreamClusterLink>::new();
    let bindings = Typed::<APIExportRoleBinding>::new();
    let link_controller = upstream_controller(&core, advertise_url, &links, &stop);
    let binding_controller = binding_controller(&core, &links, &bindings, &stop);
    let link_watch =
        xcc_sync::task::spawn_owned(links.run(Api::all(core.client.clone()), core.metrics.clone()));
    let binding_watch = xcc_sync::task::spawn_owned(
        bindings.run(Api::all(core.client.clone()), core.metrics.clone()),
    );
    tracing::info!("API projection running (UpstreamClusterLink, APIExportRoleBinding)");
    futures::join!(link_controller, binding_controller);
    link_watch.abort();
    binding_watch.abort();
}

/// The UpstreamClusterLink controller, woken also when a kubeconfig Secret it owns is deleted
/// or edited (from the process's one Secret watch).
fn upstream_controller(
    core: &Core,
    advertise_url: String,
    links: &Typed<UpstreamClusterLink>,
    stop: &CancellationToken,
) -> impl std::future::Future<Output = ()> + use<> {
    let link_ctx = Arc::new(link::Context {
        client: core.client.clone(),
        recorder: core.recorder(),
        advertise_url,
        token_seconds: link::TOKEN_SECONDS,
        counted: Counted {
            metrics: core.metrics.clone(),
            reconciler: "projection-link",
        },
    });
    let secret_wakes = core
        .local_secrets
        .changes()
        .filter_map(|change| async move {
            match change {
                SecretChange::Applied(secret) | SecretChange::Deleted(secret) => {
                    let namespace = secret.namespace()?;
                    let owner = secret.owner_references().iter().find(|o| {
                        o.kind == "UpstreamClusterLink" && o.api_version.starts_with(GROUP_PREFIX)
                    })?;
                    Some(ObjectRef::<UpstreamClusterLink>::new(&owner.name).within(&namespace))
                }
                SecretChange::Listed | SecretChange::Missed => None,
            }
        });
    Loop::of(&link_ctx.counted, links)
        .wake_on(secret_wakes)
        .run(link::reconcile, link::error_policy, link_ctx, stop.clone())
}

/// The APIExportRoleBinding controller, woken also by a change of the link a binding names.
fn binding_controller(
    core: &Core,
    links: &Typed<UpstreamClusterLink>,
    bindings: &Typed<APIExportRoleBinding>,
    stop: &CancellationToken,
) -> impl std::future::Future<Output = ()> + use<> {
    let binding_ctx = Arc::new(binding::Context {
        client: core.client.clone(),
        recorder: core.recorder(),
        counted: Counted {
            metrics: core.metrics.clone(),
            reconciler: "projection-binding",
        },
    });
    let binding_loop = Loop::of(&binding_ctx.counted, bindings);
    let binding_store = binding_loop.store();
    binding_loop
        .wake_by(links.subscribe(), move |link: Arc<UpstreamClusterLink>| {
            let namespace = link.namespace().unwrap_or_default();
            let name = link.name_any();
            binding_store
                .state()
                .into_iter()
                .filter(|b| {
                    b.spec.upstream_cluster_link_ref.name == name
                        && b.spec.upstream_cluster_link_ref.namespace == namespace
                })
                .map(|b| ObjectRef::from_obj(b.as_ref()))
                .collect::<Vec<_>>()
        })
        .run(
            binding::reconcile,
            binding::error_policy,
            binding_ctx,
            stop.clone(),
        )
}

/// What the reconcilers' unit tests read of the requests a
/// [`Scenario`](xcc_kube::scenario::Scenario) received.
#[cfg(test)]
pub(crate) mod testing {
    use serde_json::Value;
    use xcc_kube::scenario::Request;

    /// The requests seen, `METHOD path` only.
    pub fn lines(seen: &[Request]) -> Vec<String> {
        seen.iter().map(Request::line).collect()
    }

    /// The body of the first request whose line is `line`.
    pub fn body(seen: &[Request], line: &str) -> Value {
        seen.iter()
            .find(|r| r.line() == line)
            .map(|r| r.body.clone())
            .unwrap_or_else(|| panic!("no request {line}"))
    }
}

#[cfg(test)]
mod tests {
    use super::api::*;

    fn example<K: serde::de::DeserializeOwned>(file: &str) -> K {
        let path = format!(
            "{}/../manifests/examples/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap();
        xcc_kube::yaml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn the_references_examples_deserialize() {
        let link: UpstreamClusterLink = example("projection-upstream-cluster-link.yaml");
        assert_eq!(link.spec.downstream.name, "workload-3c");
        let status = link.status.unwrap();
        assert_eq!(
            status.service_account.unwrap().name,
            "managed-service-account"
        );
        assert_eq!(status.observed_generation, Some(1));
        let types: Vec<_> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "ServiceAccountReady"]);

        let binding: APIExportRoleBinding = example("projection-apiexport-role-binding.yaml");
        assert_eq!(binding.spec.upstream_cluster_link_ref.name, "fish-sauce");
        assert_eq!(
            binding.spec.upstream_cluster_link_ref.namespace,
            "project-alpha"
        );
        assert_eq!(binding.spec.cluster_role_ref.name, "cluster-1-a");

        let down: DownstreamClusterLink = example("projection-downstream-cluster-link.yaml");
        assert_eq!(down.spec.proxy.tls.secret_name, "omnia-isla");
        assert_eq!(down.spec.upstream.kubeconfig.secret_name, "pumpkin-seeds");
        assert_eq!(down.spec.upstream.name, "services-2b");
        let proxy = down.status.as_ref().unwrap().proxy.clone().unwrap();
        assert_eq!(proxy.ca_bundle.as_deref(), Some("facade0ff1cebadc0ffee..."));
        let service = proxy.service_reference.unwrap();
        assert_eq!(
            (
                service.name.as_str(),
                service.namespace.as_str(),
                service.port
            ),
            ("services-2b-proxy", "services-toolkit", Some(443))
        );
        assert_eq!(down.status.unwrap().conditions.len(), 6);

        let group: ClusterAPIGroupImport = example("projection-cluster-api-group-import.yaml");
        assert_eq!(group.spec.group, "rabbitmq.com");
        assert_eq!(group.spec.version.as_deref(), Some("v1beta1"));
        assert_eq!(group.spec.downstream_cluster_link_ref.name, "services-2b");
        let types: Vec<_> = group
            .status
            .unwrap()
            .conditions
            .iter()
            .map(|c| c.type_.clone())
            .collect();
        assert_eq!(types, ["Ready", "APIServicesReady"]);

        let resources: APIResourceImport = example("projection-api-resource-import.yaml");
        assert_eq!(resources.spec.cluster_api_import_ref.name, "rabbitmq.com");
        assert_eq!(resources.spec.resources, ["rabbitmqclusters"]);
        assert_eq!(
            resources.status.unwrap().conditions[1].type_,
            "ResourcesAvailable"
        );
    }

    #[test]
    fn crds_have_the_references_scopes() {
        let scopes: Vec<_> = super::crds()
            .iter()
            .map(|c| (c.spec.names.kind.clone(), c.spec.scope.clone()))
            .collect();
        assert_eq!(
            scopes,
            [
                ("UpstreamClusterLink".to_string(), "Namespaced".to_string()),
                ("APIExportRoleBinding".into(), "Cluster".into()),
                ("DownstreamClusterLink".into(), "Namespaced".into()),
                ("ClusterAPIGroupImport".into(), "Cluster".into()),
                ("APIResourceImport".into(), "Namespaced".into()),
            ]
        );
        for crd in super::crds() {
            assert_eq!(
                crd.spec.group,
                "projection.apiresources.multicluster.x-tanzu.vmware.com"
            );
        }
    }
}

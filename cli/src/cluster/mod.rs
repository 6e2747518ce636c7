//! `cluster join` and `cluster leave`: cluster-registry's Cluster + Secret exchange, done for
//! every pair of clusters at once.
//!
//! Join reads and checks every cluster first (reachable, the Cluster CRD and the reader
//! ServiceAccount installed, names unique), mints one reader token per cluster and checks the
//! kubeconfig it makes against the trust rules the agents apply; only then does it write, with
//! server-side apply, so that running it again changes nothing but the tokens.

mod join;
mod leave;

use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, PostParams},
};

use crate::{Error, args::ClusterCommand, contexts::Target, error::is_not_found};

pub(crate) const FIELD_MANAGER: &str = "kubectl-xcc";
/// On a cluster's own Cluster and Secret when join created them: leave deletes only those.
pub const CREATED_BY: &str = "xcc.test/created-by";
const CREATED_BY_VALUE: &str = "kubectl-xcc";
/// Type of cluster-registry's peer Secrets.
pub const SECRET_TYPE: &str = "k8s.cisco.com/cluster-registry-secret";

pub async fn run(command: ClusterCommand) -> Result<(), Error> {
    match command {
        ClusterCommand::Join(args) => join::join(args).await,
        ClusterCommand::Leave(args) => leave::leave(args).await,
    }
}

pub fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("clusterregistry.k8s.cisco.com", "v1alpha1", "Cluster"),
        "clusters",
    )
}

fn clusters(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &cluster_resource())
}

fn reach_error(target: &Target) -> impl FnOnce(kube::Error) -> Error {
    let (context, server) = (target.context.clone(), target.server.clone());
    move |e| {
        Error::Failed(format!(
            "cannot reach context {context:?} ({server}): {}; check that the cluster is up and \
             the context is right; nothing was changed",
            crate::error::describe(&e)
        ))
    }
}

/// The kube-system UID of a cluster: also the check that it answers.
pub(crate) async fn cluster_id(target: &Target) -> Result<String, Error> {
    let namespaces: Api<Namespace> = Api::all(target.client.clone());
    let ns = namespaces
        .get("kube-system")
        .await
        .map_err(reach_error(target))?;
    Ok(ns.uid().unwrap_or_default())
}

/// The Cluster objects a cluster holds, or why it cannot be a member.
async fn list_clusters(target: &Target) -> Result<Vec<DynamicObject>, Error> {
    match clusters(&target.client).list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(e) if is_not_found(&e) => Err(Error::Failed(format!(
            "context {:?}: the CRD clusters.clusterregistry.k8s.cisco.com is not installed; apply \
             manifests/crds and manifests/agent there first; nothing was changed",
            target.context
        ))),
        Err(e) => Err(reach_error(target)(e)),
    }
}

fn cluster_id_of(object: &DynamicObject) -> Option<&str> {
    object.data["spec"]["clusterID"].as_str()
}

pub(crate) async fn ensure_namespace(target: &Target, namespace: &str) -> Result<(), Error> {
    let namespaces: Api<Namespace> = Api::all(target.client.clone());
    let what = format!("cannot create namespace {namespace} on {}", target.context);
    if namespaces
        .get_opt(namespace)
        .await
        .map_err(Error::api(what.clone()))?
        .is_some()
    {
        return Ok(());
    }
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(Error::api(what)(e)),
    }
}

//! `cluster join` and `cluster leave`: cluster-registry's Cluster + Secret exchange, done for
//! every pair of clusters at once.
//!
//! Join reads and checks every cluster first (reachable, the Cluster CRD and the reader
//! ServiceAccount installed, names unique), mints one reader token per cluster and checks the
//! kubeconfig it makes against the trust rules the agents apply; only then does it write, with
//! server-side apply, so that running it again changes nothing but the tokens.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{
    ByteString,
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        core::v1::{Namespace, Secret, ServiceAccount},
    },
};
use kube::{
    Api, Client, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch,
        PatchParams, PostParams,
    },
    config::Kubeconfig,
};
use serde_json::json;
use xcc_kube::PeerTrust;

use crate::{
    Error,
    args::{ClusterCommand, JoinArgs, LeaveArgs, RegistryArgs},
    contexts::{self, Target},
    error::is_not_found,
};

pub(crate) const FIELD_MANAGER: &str = "kubectl-xcc";
/// On a cluster's own Cluster and Secret when join created them: leave deletes only those.
pub const CREATED_BY: &str = "xcc.test/created-by";
const CREATED_BY_VALUE: &str = "kubectl-xcc";
/// Type of cluster-registry's peer Secrets.
pub const SECRET_TYPE: &str = "k8s.cisco.com/cluster-registry-secret";

pub async fn run(command: ClusterCommand) -> Result<(), Error> {
    match command {
        ClusterCommand::Join(args) => join(args).await,
        ClusterCommand::Leave(args) => leave(args).await,
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

/// One cluster as join found it.
struct Member {
    target: Target,
    /// Its Cluster's name (its own Cluster if it has one, else the context name).
    name: String,
    /// kube-system UID: cluster-registry's cluster ID.
    id: String,
    own_cluster: bool,
    own_secret: bool,
    ca: Option<String>,
    server: String,
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

async fn inspect(
    kubeconfig: &Kubeconfig,
    context: &str,
    registry: &RegistryArgs,
    timeout: Duration,
) -> Result<Member, Error> {
    let target = contexts::client(kubeconfig, context, timeout).await?;
    let (server, ca) = contexts::server_and_ca(kubeconfig, context)?;
    inspect_target(target, server, ca, registry).await
}

/// [`inspect`] of a cluster with a client already made: reads only.
async fn inspect_target(
    target: Target,
    server: String,
    ca: Option<String>,
    registry: &RegistryArgs,
) -> Result<Member, Error> {
    let context = target.context.clone();
    let context = context.as_str();
    let id = cluster_id(&target).await?;
    let existing = list_clusters(&target).await?;
    let own = existing
        .iter()
        .find(|c| cluster_id_of(c) == Some(id.as_str()));
    let name = match own {
        Some(own) => own.name_any(),
        None if crate::plumber::is_dns_subdomain(context) => context.to_string(),
        None => {
            return Err(Error::Usage(format!(
                "context {context:?} has no Cluster of its own and its name is not a valid \
                 Cluster name (lowercase RFC 1123): create its Cluster first, or rename the context"
            )));
        }
    };
    let accounts: Api<ServiceAccount> =
        Api::namespaced(target.client.clone(), &registry.reader_namespace);
    if accounts
        .get_opt(&registry.reader)
        .await
        .map_err(reach_error(&target))?
        .is_none()
    {
        return Err(Error::Failed(format!(
            "context {context:?}: ServiceAccount {}/{} not found; apply \
             manifests/agent/cluster-registry.yaml there first; nothing was changed",
            registry.reader_namespace, registry.reader
        )));
    }
    let secrets: Api<Secret> = Api::namespaced(target.client.clone(), &registry.registry_namespace);
    let own_secret = secrets
        .get_opt(&name)
        .await
        .map_err(reach_error(&target))?
        .is_some();
    Ok(Member {
        own_cluster: own.is_some(),
        own_secret,
        name,
        id,
        ca,
        server,
        target,
    })
}

/// A kubeconfig that reads `member` with `token`.
fn reader_kubeconfig(member: &Member, token: &str) -> String {
    let mut cluster = serde_json::Map::new();
    cluster.insert("server".into(), member.server.clone().into());
    if let Some(ca) = &member.ca {
        cluster.insert("certificate-authority-data".into(), ca.clone().into());
    }
    let value = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": member.name, "cluster": cluster}],
        "users": [{"name": member.name, "user": {"token": token}}],
        "contexts": [{"name": member.name, "context": {"cluster": member.name, "user": member.name}}],
        "current-context": member.name,
    });
    xcc_kube::yaml::to_string(&value).unwrap_or_default()
}

async fn mint(member: &Member, registry: &RegistryArgs, ttl: Duration) -> Result<String, Error> {
    let accounts: Api<ServiceAccount> =
        Api::namespaced(member.target.client.clone(), &registry.reader_namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(ttl.as_secs().clamp(600, i64::MAX as u64) as i64),
            ..Default::default()
        },
        ..Default::default()
    };
    let status = accounts
        .create_token_request(&registry.reader, &PostParams::default(), &request)
        .await
        .map_err(Error::api(format!(
            "cannot get a token for {}/{} on context {:?}; nothing was changed",
            registry.reader_namespace, registry.reader, member.target.context
        )))?
        .status
        .ok_or_else(|| Error::Failed("the TokenRequest came back without a token".into()))?;
    Ok(status.token)
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

/// Applies on `on` the Cluster and Secret that stand for `member`.
async fn apply_pair(
    on: &Target,
    member: &Member,
    kubeconfig: &str,
    registry: &RegistryArgs,
    mark_cluster: bool,
    mark_secret: bool,
) -> Result<(), Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let annotations = |mark: bool| -> BTreeMap<String, String> {
        if mark {
            [(CREATED_BY.to_string(), CREATED_BY_VALUE.to_string())].into()
        } else {
            BTreeMap::new()
        }
    };
    let cluster = json!({
        "apiVersion": "clusterregistry.k8s.cisco.com/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": member.name, "annotations": annotations(mark_cluster)},
        "spec": {
            "clusterID": member.id,
            "authInfo": {"secretRef": {"name": member.name, "namespace": registry.registry_namespace}},
        },
    });
    clusters(&on.client)
        .patch(&member.name, &params, &Patch::Apply(cluster))
        .await
        .map_err(Error::api(format!(
            "cannot apply Cluster {} on {}",
            member.name, on.context
        )))?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(member.name.clone()),
            namespace: Some(registry.registry_namespace.clone()),
            annotations: Some(annotations(mark_secret)).filter(|a| !a.is_empty()),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(
            [(
                "kubeconfig".to_string(),
                ByteString(kubeconfig.as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let mut object = serde_json::to_value(&secret)
        .map_err(|e| Error::Failed(format!("cannot encode a Secret: {e}")))?;
    object["apiVersion"] = "v1".into();
    object["kind"] = "Secret".into();
    let secrets: Api<Secret> = Api::namespaced(on.client.clone(), &registry.registry_namespace);
    secrets
        .patch(&member.name, &params, &Patch::Apply(object))
        .await
        .map_err(Error::api(format!(
            "cannot apply Secret {}/{} on {}",
            registry.registry_namespace, member.name, on.context
        )))?;
    Ok(())
}

async fn join(args: JoinArgs) -> Result<(), Error> {
    let mut names = args.contexts.clone();
    names.sort();
    names.dedup();
    if names.len() < 2 {
        return Err(Error::Usage(
            "name at least two different contexts: --context A --context B".into(),
        ));
    }
    let kubeconfig = contexts::load_args(&args.kube)?;
    for context in &args.contexts {
        contexts::require(&kubeconfig, context)?;
    }
    // Read and check everything before the first write.
    let members = read_members(&kubeconfig, &names, &args).await?;
    let mut readers = Vec::new();
    for member in &members {
        let token = mint(member, &args.registry, args.token_ttl).await?;
        let text = reader_kubeconfig(member, &token);
        xcc_kube::trust::check(
            text.as_bytes(),
            &format!(
                "the reader kubeconfig of context {:?}",
                member.target.context
            ),
            PeerTrust::default(),
        )?;
        readers.push(text);
    }
    write_pairs(&members, &readers, &args.registry).await?;
    for member in &members {
        let peers: Vec<&str> = members
            .iter()
            .filter(|m| m.id != member.id)
            .map(|m| m.name.as_str())
            .collect();
        println!(
            "cluster {} (context {}) joined: its Cluster and Secret are on {}",
            member.name,
            member.target.context,
            peers.join(", ")
        );
    }
    Ok(())
}

/// Inspects each of the sorted, distinct context `names`, and refuses two contexts of one
/// cluster or two clusters that would have the same Cluster name. Reads only.
async fn read_members(
    kubeconfig: &Kubeconfig,
    names: &[String],
    args: &JoinArgs,
) -> Result<Vec<Member>, Error> {
    let mut members: Vec<Member> = Vec::new();
    for context in names.iter().filter(|c| args.contexts.contains(c)) {
        let member = inspect(
            kubeconfig,
            context,
            &args.registry,
            args.kube.request_timeout(),
        )
        .await?;
        if let Some(same) = members.iter().find(|m| m.id == member.id) {
            return Err(Error::Usage(format!(
                "contexts {:?} and {context:?} are the same cluster; name each cluster once",
                same.target.context
            )));
        }
        if let Some(same) = members.iter().find(|m| m.name == member.name) {
            return Err(Error::Usage(format!(
                "contexts {:?} and {context:?} would both be Cluster {:?}; rename one context, \
                 or create its Cluster under another name first",
                same.target.context, member.name
            )));
        }
        members.push(member);
    }
    Ok(members)
}

/// Applies every member's Cluster and Secret (with its reader kubeconfig `readers[i]`) on
/// itself, marked as created by join where it had none, and on every other member.
async fn write_pairs(
    members: &[Member],
    readers: &[String],
    registry: &RegistryArgs,
) -> Result<(), Error> {
    for (i, member) in members.iter().enumerate() {
        ensure_namespace(&member.target, &registry.registry_namespace).await?;
        apply_pair(
            &member.target,
            member,
            &readers[i],
            registry,
            !member.own_cluster,
            !member.own_secret,
        )
        .await?;
        for (j, peer) in members.iter().enumerate() {
            if i != j {
                ensure_namespace(&peer.target, &registry.registry_namespace).await?;
                apply_pair(&peer.target, member, &readers[i], registry, false, false).await?;
            }
        }
    }
    Ok(())
}

/// The server of the kubeconfig in a peer Secret.
fn server_in(secret: &Secret) -> Option<String> {
    let key = xcc_kube::trust::kubeconfig_key(secret);
    let data = secret.data.as_ref()?.get(key)?;
    let root: serde_json::Value = xcc_kube::yaml::from_slice(&data.0).ok()?;
    let current = root.get("current-context").and_then(|c| c.as_str());
    let contexts = root.get("contexts")?.as_array()?;
    let context = contexts
        .iter()
        .find(|c| current.is_none() || c.get("name").and_then(|n| n.as_str()) == current)?;
    let cluster = context.get("context")?.get("cluster")?.as_str()?;
    root.get("clusters")?
        .as_array()?
        .iter()
        .find(|c| c.get("name").and_then(|n| n.as_str()) == Some(cluster))?
        .get("cluster")?
        .get("server")?
        .as_str()
        .map(str::to_string)
}

fn same_server(a: &str, b: &str) -> bool {
    a.trim_end_matches('/')
        .eq_ignore_ascii_case(b.trim_end_matches('/'))
}

/// Rounds of deletion `leave` makes before it gives up on copies that keep coming back.
const LEAVE_ROUNDS: usize = 20;

async fn delete_cluster(on: &Target, name: &str) -> Result<(), Error> {
    match clusters(&on.client)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::api(format!(
            "cannot delete Cluster {name} on {}",
            on.context
        ))(e)),
    }
}

async fn delete_secret(on: &Target, name: &str, registry: &RegistryArgs) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(on.client.clone(), &registry.registry_namespace);
    match secrets.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::api(format!(
            "cannot delete Secret {}/{name} on {}",
            registry.registry_namespace, on.context
        ))(e)),
    }
}

/// The Secret first: without it the cluster's agent cannot copy the Cluster back.
async fn delete_pair(on: &Target, name: &str, registry: &RegistryArgs) -> Result<(), Error> {
    delete_secret(on, name, registry).await?;
    delete_cluster(on, name).await
}

/// Whether `on` still holds a Cluster or peer Secret named `name`.
async fn holds_pair(on: &Target, name: &str, registry: &RegistryArgs) -> Result<bool, Error> {
    let what = format!("cannot read Cluster and Secret {name} on {}", on.context);
    let cluster = clusters(&on.client)
        .get_opt(name)
        .await
        .map_err(Error::api(what.clone()))?;
    let secrets: Api<Secret> = Api::namespaced(on.client.clone(), &registry.registry_namespace);
    let secret = secrets.get_opt(name).await.map_err(Error::api(what))?;
    Ok(cluster.is_some() || secret.is_some())
}

/// Recreates the reader ServiceAccount of `target`, so that every token minted for it (the
/// ones in the peers' Secrets) stops working. Its labels and annotations are kept.
async fn revoke_reader(target: &Target, registry: &RegistryArgs) -> Result<(), Error> {
    let accounts: Api<ServiceAccount> =
        Api::namespaced(target.client.clone(), &registry.reader_namespace);
    let what = format!(
        "cannot recreate ServiceAccount {}/{} on {}",
        registry.reader_namespace, registry.reader, target.context
    );
    let Some(account) = accounts
        .get_opt(&registry.reader)
        .await
        .map_err(Error::api(what.clone()))?
    else {
        return Ok(());
    };
    let fresh = ServiceAccount {
        metadata: ObjectMeta {
            name: account.metadata.name.clone(),
            namespace: account.metadata.namespace.clone(),
            labels: account.metadata.labels.clone(),
            annotations: account.metadata.annotations.clone(),
            ..Default::default()
        },
        automount_service_account_token: account.automount_service_account_token,
        image_pull_secrets: account.image_pull_secrets.clone(),
        ..Default::default()
    };
    let uid = account.uid().unwrap_or_default();
    let precondition = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match accounts.delete(&registry.reader, &precondition).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(Error::api(what)(e)),
    }
    // Deletion of a ServiceAccount is immediate (no finalizers); retry a conflict briefly.
    for attempt in 0..10 {
        match accounts.create(&PostParams::default(), &fresh).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 9 => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(Error::api(what)(e)),
        }
    }
    Ok(())
}

async fn leave(args: LeaveArgs) -> Result<(), Error> {
    let kubeconfig = contexts::load_args(&args.kube)?;
    let target = contexts::client(&kubeconfig, &args.context, args.kube.request_timeout()).await?;
    let id = cluster_id(&target).await?;
    let existing = list_clusters(&target).await?;
    let own = existing
        .iter()
        .find(|c| cluster_id_of(c) == Some(id.as_str()));
    let Some(own) = own else {
        println!(
            "context {} has no Cluster of its own: it is in no group; nothing changed",
            args.context
        );
        return Ok(());
    };
    let own_name = own.name_any();
    let secrets: Api<Secret> =
        Api::namespaced(target.client.clone(), &args.registry.registry_namespace);
    // Every peer, reached through the context of the user's kubeconfig with its server.
    let mut peers: Vec<(String, Target)> = Vec::new();
    for peer in existing
        .iter()
        .filter(|c| cluster_id_of(c) != Some(id.as_str()))
    {
        let peer_target = reach_peer(&kubeconfig, &args, &target, &secrets, peer).await?;
        peers.push((peer.name_any(), peer_target));
    }
    let own_secret = secrets
        .get_opt(&own_name)
        .await
        .map_err(reach_error(&target))?;
    // First nobody may read the leaving cluster any more: its reader ServiceAccount is
    // recreated, which invalidates every token minted for it. Otherwise the agents of the group,
    // which copy each other's Clusters and peer Secrets, would copy its objects back as fast as
    // they are deleted.
    revoke_reader(&target, &args.registry).await?;
    delete_from_group(&target, &own_name, &peers, &args.registry).await?;
    delete_own(&target, own, own_secret.as_ref(), &secrets).await?;
    let names: Vec<&str> = peers.iter().map(|(n, _)| n.as_str()).collect();
    if names.is_empty() {
        println!("cluster {own_name} (context {}) had no peers", args.context);
    } else {
        println!(
            "cluster {own_name} (context {}) left its group: removed from {} and they from it",
            args.context,
            names.join(", ")
        );
    }
    Ok(())
}

/// A client of the peer Cluster `peer` of the leaving cluster `target`: the server its Secret
/// names, through a context of the user's kubeconfig with that server that answers (the one
/// named like the peer first).
async fn reach_peer(
    kubeconfig: &Kubeconfig,
    args: &LeaveArgs,
    target: &Target,
    secrets: &Api<Secret>,
    peer: &DynamicObject,
) -> Result<Target, Error> {
    let name = peer.name_any();
    let secret_name = peer.data["spec"]["authInfo"]["secretRef"]["name"]
        .as_str()
        .unwrap_or(&name)
        .to_string();
    let secret = secrets
        .get_opt(&secret_name)
        .await
        .map_err(reach_error(target))?;
    let server = secret.as_ref().and_then(server_in).ok_or_else(|| {
        Error::Failed(format!(
            "peer Cluster {name} on {}: its Secret {}/{secret_name} holds no kubeconfig, so \
             its server is unknown; nothing was changed",
            args.context, args.registry.registry_namespace
        ))
    })?;
    // Every context with that server may reach the peer; the one named like it first.
    let mut candidates: Vec<String> = contexts::context_names(kubeconfig)
        .into_iter()
        .filter(|c| {
            contexts::server_and_ca(kubeconfig, c).is_ok_and(|(s, _)| same_server(&s, &server))
        })
        .collect();
    candidates.sort_by_key(|c| *c != name);
    let mut reached = Err(Error::Usage(format!(
        "peer Cluster {name} ({server}) has no context in your kubeconfig: add one, then run \
         leave again; nothing was changed"
    )));
    for context in &candidates {
        reached = async {
            let peer = contexts::client(kubeconfig, context, args.kube.request_timeout()).await?;
            cluster_id(&peer).await?;
            Ok::<Target, Error>(peer)
        }
        .await;
        if reached.is_ok() {
            break;
        }
    }
    reached
}

/// Deletes `own_name`'s Cluster and Secret from every peer and the peers' from `target`, in
/// rounds until none comes back (the group's agents may still copy them for a while).
async fn delete_from_group(
    target: &Target,
    own_name: &str,
    peers: &[(String, Target)],
    registry: &RegistryArgs,
) -> Result<(), Error> {
    let peer_names: Vec<String> = peers.iter().map(|(n, _)| n.clone()).collect();
    for round in 0..LEAVE_ROUNDS {
        if round > 0 {
            // Staggered, so that this round does not meet the agents' next copy in step.
            tokio::time::sleep(Duration::from_millis(700 + 300 * round as u64)).await;
        }
        // All at once: the group's agents copy each other's copies, so an object deleted on
        // one member while another still holds it comes straight back.
        let mut deletions = tokio::task::JoinSet::new();
        for (_, peer) in peers {
            let (peer, name, registry) = (peer.clone(), own_name.to_string(), registry.clone());
            deletions.spawn(async move { delete_pair(&peer, &name, &registry).await });
        }
        for name in &peer_names {
            let (target, name, registry) = (target.clone(), name.clone(), registry.clone());
            deletions.spawn(async move { delete_pair(&target, &name, &registry).await });
        }
        while let Some(done) = deletions.join_next().await {
            done.map_err(|e| Error::Failed(format!("a deletion did not finish: {e}")))??;
        }
        // Copies an agent made while this ran: look again.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut left = false;
        for (_, peer) in peers {
            left |= holds_pair(peer, own_name, registry).await?;
        }
        for name in &peer_names {
            left |= holds_pair(target, name, registry).await?;
        }
        if !left {
            return Ok(());
        }
    }
    Err(Error::Failed(format!(
        "after {LEAVE_ROUNDS} rounds the group's agents still copy {own_name}'s Cluster and \
         Secret back; run leave again"
    )))
}

/// Deletes the leaving cluster's own Cluster and Secret, each only if join created it.
async fn delete_own(
    target: &Target,
    own: &DynamicObject,
    own_secret: Option<&Secret>,
    secrets: &Api<Secret>,
) -> Result<(), Error> {
    let own_name = own.name_any();
    let created = |annotations: &BTreeMap<String, String>| {
        annotations.get(CREATED_BY).map(String::as_str) == Some(CREATED_BY_VALUE)
    };
    if created(own.annotations()) {
        match clusters(&target.client)
            .delete(&own_name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Error::api(format!("cannot delete Cluster {own_name}"))(e)),
        }
    }
    if let Some(secret) = own_secret
        && created(secret.annotations())
    {
        match secrets.delete(&own_name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Error::api(format!("cannot delete Secret {own_name}"))(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_of_a_peer_secret_is_its_current_contexts() {
        let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: a\n  cluster: {server: 'https://a:1'}\n- name: b\n  cluster: {server: 'https://b:2'}\ncontexts:\n- name: x\n  context: {cluster: a}\n- name: y\n  context: {cluster: b}\ncurrent-context: y\n";
        let secret = Secret {
            data: Some([("kubeconfig".to_string(), ByteString(kubeconfig.into()))].into()),
            ..Default::default()
        };
        assert_eq!(server_in(&secret).as_deref(), Some("https://b:2"));
        assert!(same_server("https://B:2/", "https://b:2"));
        assert_eq!(server_in(&Secret::default()), None);
    }

    mod api {
        use super::*;
        use serde_json::{Value, json};
        use xcc_kube::scenario::{Running, Scenario, not_found};

        fn target(context: &str, scenario: Scenario) -> (Target, Running) {
            let (client, server) = scenario.run();
            let target = Target {
                context: context.into(),
                client,
                server: "https://a".into(),
            };
            (target, server)
        }

        fn registry() -> RegistryArgs {
            RegistryArgs {
                registry_namespace: "cluster-registry".into(),
                reader_namespace: "xcc-dns".into(),
                reader: "xcc-cluster-reader".into(),
            }
        }

        /// Serves kube-system, then `clusters` for the Cluster list; then expects nothing more
        /// than the reads of `rest` (paths), answered as given: a write before them, or any
        /// other request, fails the scenario.
        fn reads(clusters: (u16, Value), rest: Vec<(&str, (u16, Value))>) -> Scenario {
            let mut scenario = Scenario::new()
                .expect("GET", "/api/v1/namespaces/kube-system")
                .reply((
                    200,
                    json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": "kube-system", "uid": "uid-a"}}),
                ))
                .expect(
                    "GET",
                    "/apis/clusterregistry.k8s.cisco.com/v1alpha1/clusters",
                )
                .reply(clusters);
            for (path, answer) in rest {
                scenario = scenario.expect("GET", path).reply(answer);
            }
            scenario
        }

        #[tokio::test]
        async fn a_cluster_without_the_crd_is_refused_after_reads_only() {
            let (target, server) = target("a", reads(not_found(), vec![]));
            let e = inspect_target(target, "https://a".into(), None, &registry())
                .await
                .err()
                .unwrap();
            assert!(e.to_string().contains("is not installed"), "{e}");
            assert_eq!(e.exit_code(), crate::exit::ERROR);
            server.done().await;
        }

        #[tokio::test]
        async fn a_cluster_without_the_reader_is_refused_after_reads_only() {
            let list = (
                200,
                json!({"apiVersion": "clusterregistry.k8s.cisco.com/v1alpha1",
                    "kind": "ClusterList", "metadata": {}, "items": []}),
            );
            let (target, server) = target(
                "a",
                reads(
                    list,
                    vec![(
                        "/api/v1/namespaces/xcc-dns/serviceaccounts/xcc-cluster-reader",
                        not_found(),
                    )],
                ),
            );
            let e = inspect_target(target, "https://a".into(), None, &registry())
                .await
                .err()
                .unwrap();
            assert!(e.to_string().contains("cluster-registry.yaml"), "{e}");
            server.done().await;
        }

        #[tokio::test]
        async fn its_own_cluster_gives_the_name() {
            let list = (
                200,
                json!({"apiVersion": "clusterregistry.k8s.cisco.com/v1alpha1",
                "kind": "ClusterList", "metadata": {}, "items": [
                    {"apiVersion": "clusterregistry.k8s.cisco.com/v1alpha1", "kind": "Cluster",
                     "metadata": {"name": "peer"}, "spec": {"clusterID": "uid-b"}},
                    {"apiVersion": "clusterregistry.k8s.cisco.com/v1alpha1", "kind": "Cluster",
                     "metadata": {"name": "alpha"}, "spec": {"clusterID": "uid-a"}}
                ]}),
            );
            let account = (
                200,
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "xcc-cluster-reader", "namespace": "xcc-dns"}}),
            );
            let (target, server) = target(
                "ctx-a",
                reads(
                    list,
                    vec![
                        (
                            "/api/v1/namespaces/xcc-dns/serviceaccounts/xcc-cluster-reader",
                            account,
                        ),
                        (
                            "/api/v1/namespaces/cluster-registry/secrets/alpha",
                            not_found(),
                        ),
                    ],
                ),
            );
            let member = inspect_target(target, "https://a".into(), None, &registry())
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(member.name, "alpha");
            assert_eq!(member.id, "uid-a");
            assert!(member.own_cluster && !member.own_secret);
            let kubeconfig = reader_kubeconfig(&member, "t0ken");
            xcc_kube::trust::check(kubeconfig.as_bytes(), "reader", PeerTrust::default()).unwrap();
            assert!(kubeconfig.contains("token: t0ken"), "{kubeconfig}");
            server.done().await;
        }
    }
}

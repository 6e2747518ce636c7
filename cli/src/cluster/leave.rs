//! `cluster leave`: revoke the cluster's reader tokens, then delete its Cluster and Secret
//! from every peer and theirs from it, in rounds until the group's agents stop copying them
//! back.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, ObjectMeta, PostParams},
};

use super::{
    CREATED_BY, CREATED_BY_VALUE, cluster_id, cluster_id_of, clusters, list_clusters, reach_error,
};
use crate::{
    Error,
    args::{LeaveArgs, RegistryArgs},
    contexts::{self, Target, UserKubeconfig},
    error::is_not_found,
};

/// The server of the kubeconfig in a peer Secret, when it is an http(s) URL (anything else is
/// not an address, and is not repeated).
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
        .filter(|server| {
            server.parse::<http::Uri>().is_ok_and(|uri| {
                matches!(uri.scheme_str(), Some("https" | "http")) && uri.host().is_some()
            })
        })
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

pub(super) async fn leave(args: LeaveArgs) -> Result<(), Error> {
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
    kubeconfig: &UserKubeconfig,
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
            "peer Cluster {name} on {}: its Secret {}/{secret_name} holds no kubeconfig with \
             an https:// server, so its server is unknown; nothing was changed",
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
        "peer Cluster {name} ({server}) has no context in kubeconfig {}: add one, then run \
         leave again; nothing was changed",
        kubeconfig.file
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
    use k8s_openapi::ByteString;

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
        // Not an address: not a server (it is not repeated in the messages).
        let secret = Secret {
            data: Some(
                [(
                    "kubeconfig".to_string(),
                    ByteString(kubeconfig.replace("https://b:2", "s3cr3t").into()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        assert_eq!(server_in(&secret), None);
    }
}

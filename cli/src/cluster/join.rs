//! `cluster join`: read and check every cluster, mint a reader token for each, then apply
//! each cluster's Cluster and Secret on itself and on every other.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{
    ByteString,
    api::{
        authentication::v1::{TokenRequest, TokenRequestSpec},
        core::v1::{Secret, ServiceAccount},
    },
};
use kube::{
    Api, ResourceExt,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::json;
use xcc_kube::PeerTrust;

use super::{
    CREATED_BY, CREATED_BY_VALUE, FIELD_MANAGER, SECRET_TYPE, cluster_id, cluster_id_of, clusters,
    ensure_namespace, list_clusters, reach_error,
};
use crate::{
    Error,
    args::{JoinArgs, RegistryArgs},
    contexts::{self, Target, UserKubeconfig},
};

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

async fn inspect(
    kubeconfig: &UserKubeconfig,
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

pub(super) async fn join(args: JoinArgs) -> Result<(), Error> {
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
    kubeconfig: &UserKubeconfig,
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

#[cfg(test)]
mod tests {
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

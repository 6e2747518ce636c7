//! What the Replicator reads besides the objects it writes: the kinds of `resources[]`, the
//! Ingress certificates to use, and the other Replicators (for a shared namespace).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt, core::GroupVersionKind};

use super::{Context, plan};
use crate::{
    plumber::{
        api::Replicator,
        certs::{self, Bundle},
        desired::{self, Kinds, Object},
    },
    sink::ORIGIN_ANNOTATION,
};

/// The kinds of `resources[]`, found by discovery on this cluster (cached).
pub async fn resolve_kinds(replicator: &Replicator, ctx: &Context) -> Kinds {
    let mut kinds = ctx.kinds.lock().await;
    for manifest in &replicator.spec.resources {
        let text = |k: &str| {
            manifest
                .0
                .get(k)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let (Some(api_version), Some(kind)) = (text("apiVersion"), text("kind")) else {
            continue;
        };
        let key = (api_version.clone(), kind.clone());
        if kinds.contains_key(&key) {
            continue;
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        match kube::discovery::pinned_kind(&ctx.client, &gvk).await {
            Ok((resource, caps)) => {
                let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
                kinds.insert(key, (resource, namespaced));
            }
            Err(error) => {
                tracing::debug!(%api_version, %kind, %error, "kind of resources[] not found");
            }
        }
    }
    kinds.clone()
}

/// The certificates to use: those in the primary's `ca-secret`/`cli-secret` when they are ours
/// and still serve the hosts, else new ones.
pub async fn certificates(
    replicator: &Replicator,
    ctx: &Context,
    origin: &str,
) -> Result<Option<Bundle>, String> {
    if !desired::secure(replicator) {
        return Ok(None);
    }
    let hosts = desired::hosts(replicator);
    let secrets: Api<Secret> =
        Api::namespaced(ctx.client.clone(), &replicator.spec.replication_namespace);
    let read = |s: Option<Secret>| {
        s.filter(|s| s.annotations().get(ORIGIN_ANNOTATION).map(String::as_str) == Some(origin))
    };
    let ca = read(secrets.get_opt(certs::CA_SECRET).await.ok().flatten());
    let client = read(secrets.get_opt(certs::CLIENT_SECRET).await.ok().flatten());
    if let (Some(ca), Some(client)) = (ca, client) {
        let text = |s: &Secret| -> BTreeMap<String, String> {
            s.data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                .collect()
        };
        let found = Bundle {
            hosts: ca
                .annotations()
                .get(certs::HOSTS_ANNOTATION)
                .map(|h| h.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
            not_after: ca
                .annotations()
                .get(certs::NOT_AFTER_ANNOTATION)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            ca: text(&ca),
            client: text(&client),
        };
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        if found.serves(&hosts, now) && found.ca.len() == 3 && found.client.len() == 2 {
            return Ok(Some(found));
        }
    }
    let uid = replicator.uid().unwrap_or_default();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    // Cloned out at once: no guard of the map is held while the certificates are made.
    let kept = ctx.made.get(&uid).map(|b| b.clone());
    if let Some(bundle) = kept.filter(|b| b.serves(&hosts, now)) {
        return Ok(Some(bundle));
    }
    tracing::info!(replicator = %replicator.name_any(), ?hosts, "new Ingress certificates");
    let bundle = certs::generate(&hosts)
        .map_err(|e| format!("cannot make the Ingress certificates: {e}"))?;
    ctx.made.insert(uid, bundle.clone());
    Ok(Some(bundle))
}

/// `objects` without the namespace when another Replicator replicates into it too: deleting it
/// would take that Replicator's objects with it. It stays, with our origin, as that Replicator's
/// `existing` namespace.
pub async fn without_shared_namespace(
    replicator: &Replicator,
    ctx: &Context,
    objects: &[Object],
) -> Result<Vec<Object>, kube::Error> {
    let others = Api::<Replicator>::all(ctx.client.clone())
        .list(&Default::default())
        .await?;
    let shared = plan::namespace_shared(replicator, &others.items);
    if shared {
        let namespace = &replicator.spec.replication_namespace;
        tracing::info!(replicator = %replicator.name_any(), %namespace, "namespace kept: another Replicator uses it");
    }
    Ok(plan::to_remove(objects, shared))
}

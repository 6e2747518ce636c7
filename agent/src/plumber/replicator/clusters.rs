//! Which clusters a Replicator writes to: this one (the primary) and each target of its kubeconfig
//! Secret, or why one cannot be written.

use std::collections::BTreeSet;

use kube::Client;

use super::Context;
use crate::plumber::{api::Replicator, contexts};

/// One cluster a Replicator writes to.
#[derive(Clone)]
pub struct Cluster {
    /// Its name in the status: the ClusterDetector name (or as `targetCluster` names it).
    pub name: String,
    pub client: Client,
    /// [`crate::sources::LOCAL`] or the peer client's identity.
    pub identity: String,
    /// The peer's server URL (for its reach); `None` for this cluster.
    pub server: Option<String>,
}

/// A cluster, or why it cannot be written.
pub enum Resolved {
    Ready(Cluster),
    Failed { name: String, why: String },
}

/// The primary and every target of `replicator` (deduplicated, the primary not twice).
pub fn resolve(replicator: &Replicator, ctx: &Context, extra: &[String]) -> Vec<Resolved> {
    let primary = ctx.registry.primary();
    let mut out = vec![Resolved::Ready(Cluster {
        name: primary.clone(),
        client: ctx.client.clone(),
        identity: crate::sources::LOCAL.into(),
        server: None,
    })];
    let mut seen = BTreeSet::from([primary]);
    for name in replicator.spec.target_cluster.iter().chain(extra) {
        if !seen.insert(name.clone()) {
            continue;
        }
        let secret = format!("{}/{}", contexts::NAMESPACE, contexts::SECRET);
        match ctx.registry.find(name) {
            Err(()) => out.push(Resolved::Failed {
                name: name.clone(),
                why: format!("the kubeconfig Secret {secret} was not read yet"),
            }),
            Ok(None) => out.push(Resolved::Failed {
                name: name.clone(),
                why: format!(
                    "no ClusterDetector or context named {name:?} in the kubeconfig Secret {secret}"
                ),
            }),
            Ok(Some(target)) if target.primary => {}
            Ok(Some(target)) => match target.client {
                Ok(peer) => out.push(Resolved::Ready(Cluster {
                    name: name.clone(),
                    client: peer.client,
                    identity: peer.identity,
                    server: Some(peer.server),
                })),
                Err(why) => out.push(Resolved::Failed {
                    name: name.clone(),
                    why,
                }),
            },
        }
    }
    out
}

impl Resolved {
    /// The cluster's name in the status.
    pub fn name(&self) -> &str {
        match self {
            Resolved::Ready(c) => &c.name,
            Resolved::Failed { name, .. } => name,
        }
    }
}

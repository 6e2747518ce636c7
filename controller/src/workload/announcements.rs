//! What each workload cluster's xcc-agent announced (ConfigMap `xcc-dns/xcc-agent`), read once
//! per TTL for every GatewayDNS of the namespace.

use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use xcc_kube::{
    Announcement,
    announcement::{ANNOUNCEMENT_NAME, ANNOUNCEMENT_NAMESPACE},
    bounded,
};

use super::{CALL_TIMEOUT, Workloads};

/// Reads a cluster's announcement ConfigMap; `Ok(None)` when there is none.
pub async fn read_announcement(client: &Client) -> Result<Option<Announcement>, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ANNOUNCEMENT_NAMESPACE);
    match tokio::time::timeout(CALL_TIMEOUT, api.get_opt(ANNOUNCEMENT_NAME)).await {
        Ok(Ok(found)) => Ok(found.as_ref().map(Announcement::read)),
        Ok(Err(e)) => Err(format!(
            "cannot read ConfigMap {ANNOUNCEMENT_NAMESPACE}/{ANNOUNCEMENT_NAME} (the xcc-agent announcement): {}",
            bounded(&e)
        )),
        Err(_) => Err(format!(
            "timed out reading ConfigMap {ANNOUNCEMENT_NAMESPACE}/{ANNOUNCEMENT_NAME}"
        )),
    }
}

/// A cluster's announcement (`Ok(None)`: nothing announced; `Err`: it could not be read) and
/// when it was read.
pub(super) type CachedAnnouncement = (Instant, Result<Option<Announcement>, String>);

impl Workloads {
    /// What the xcc-agent of `cluster` announced (`Ok(None)`: no agent announced itself there),
    /// read with one `get` of ConfigMap `xcc-dns/xcc-agent` and cached for the TTL, so that
    /// every GatewayDNS of the namespace shares one read and a newly installed agent is seen
    /// within the TTL. A failed read is cached too, so that a cluster that refuses it is not
    /// asked on every reconcile (and counts as not announced meanwhile).
    pub async fn announcement(
        &self,
        namespace: &str,
        cluster: &str,
        client: &Client,
    ) -> Result<Option<Announcement>, String> {
        let key = (namespace.to_string(), cluster.to_string());
        let fresh = self
            .announcements
            .get(&key)
            .filter(|cached| cached.0.elapsed() < self.announcement_ttl)
            .map(|cached| cached.1.clone());
        if let Some(cached) = fresh {
            return cached;
        }
        let found = read_announcement(client).await;
        self.announcements
            .insert(key, (Instant::now(), found.clone()));
        found
    }

    /// What `cluster`'s announcement cache holds, while it is fresh.
    pub fn cached_announcement(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> Option<Result<Option<Announcement>, String>> {
        self.announcements
            .get(&(namespace.to_string(), cluster.to_string()))
            .filter(|cached| cached.0.elapsed() < self.announcement_ttl)
            .map(|cached| cached.1.clone())
    }
}

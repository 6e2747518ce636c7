//! The agent's announcement on its own cluster: the ConfigMap `<namespace>/xcc-agent` saying which
//! parts of the record feed it reads (see `xcc_kube::announcement` for why it exists and why it
//! is a ConfigMap). xcc-controller publishes IPv6 slices only where it finds one, so that a
//! cluster still running the original XCC dns-server never sees a slice that crashes it.
//!
//! Written once per start with server-side apply (every replica writes the same content, so no
//! leader is needed) into the ConfigMap the manifest creates, retried with backoff until the API
//! server takes it: a restart or an upgrade rewrites it with the new version's features. The
//! agent may not create it: a person who deleted it (going back to the original XCC) keeps it
//! deleted.

use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use xcc_kube::{Announcement, Backoff, announcement::ANNOUNCEMENT_NAME};

/// Field manager of the announcement.
const FIELD_MANAGER: &str = "xcc-agent";

/// How long the agent's start waits for the first attempt, so that a ready agent has announced
/// itself unless its API server is slow or refuses.
pub const FIRST_ATTEMPT: std::time::Duration = std::time::Duration::from_secs(5);

/// Applies this agent's announcement in `namespace`: the first attempt before returning (up to
/// [`FIRST_ATTEMPT`]), the retries, if needed, in a task of their own.
pub async fn start(client: Client, namespace: String) {
    let mut task = tokio::spawn(run(client, namespace));
    if tokio::time::timeout(FIRST_ATTEMPT, &mut task)
        .await
        .is_err()
    {
        tracing::debug!("announcement not written yet; retrying in the background");
    }
}

/// Applies this agent's announcement in `namespace`, retrying until it is accepted.
async fn run(client: Client, namespace: String) {
    let announcement = Announcement::current(env!("CARGO_PKG_VERSION"));
    let mut config_map = announcement.to_config_map();
    config_map.metadata.namespace = Some(namespace.clone());
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, &namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    // The slower schedule: a missing permission or namespace keeps failing, and nothing waits on
    // this write but the IPv6 records of this cluster.
    let mut delays = Backoff::peer();
    // One WARN while it cannot be written (a missing permission keeps failing; an API server
    // that does not answer is an outage), one INFO once it is.
    let mut outage = xcc_sync::outage::Outage::new(
        "the write of the announcement (ConfigMap xcc-agent, which the manifest creates; until it is written xcc-controller withholds IPv6 records from this cluster)",
        xcc_sync::outage::local_server(),
    );
    loop {
        match api
            .patch(ANNOUNCEMENT_NAME, &params, &Patch::Apply(&config_map))
            .await
        {
            Ok(_) => {
                outage.recovered();
                tracing::info!(
                    %namespace,
                    configmap = ANNOUNCEMENT_NAME,
                    features = %announcement.features_value(),
                    "announced the record-feed features this agent reads"
                );
                return;
            }
            Err(error) => {
                outage.failed(&error);
                let delay = delays.next().unwrap_or(Backoff::PEER_MAX);
                tokio::time::sleep(delay).await;
            }
        }
    }
}

//! The agent's announcement on its own cluster: the ConfigMap `<namespace>/xcc-agent` saying which
//! parts of the record feed it reads (see `xcc_kube::announcement` for why it exists and why it
//! is a ConfigMap). xcc-controller publishes IPv6 slices only where it finds one, so that a
//! cluster still running the original XCC dns-server never sees a slice that crashes it.
//!
//! Written once per start with server-side apply (every replica writes the same content, so no
//! leader is needed), retried with backoff until the API server takes it: a restart or an upgrade
//! rewrites it with the new version's features.

use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use xcc_kube::{Announcement, Backoff, announcement::ANNOUNCEMENT_NAME, bounded};

/// Field manager of the announcement.
const FIELD_MANAGER: &str = "xcc-agent";

/// Applies this agent's announcement in `namespace`, retrying until it is accepted.
pub async fn run(client: Client, namespace: String) {
    let announcement = Announcement::current(env!("CARGO_PKG_VERSION"));
    let mut config_map = announcement.to_config_map();
    config_map.metadata.namespace = Some(namespace.clone());
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, &namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    // The slower schedule: a missing permission or namespace keeps failing, and nothing waits on
    // this write but the IPv6 records of this cluster.
    let mut delays = Backoff::peer();
    let mut failures = 0u32;
    loop {
        match api
            .patch(ANNOUNCEMENT_NAME, &params, &Patch::Apply(&config_map))
            .await
        {
            Ok(_) => {
                tracing::info!(
                    %namespace,
                    configmap = ANNOUNCEMENT_NAME,
                    features = %announcement.features_value(),
                    "announced the record-feed features this agent reads"
                );
                return;
            }
            Err(error) => {
                failures += 1;
                // The first failure and then every 20th: a missing permission keeps failing.
                if failures % 20 == 1 {
                    tracing::warn!(
                        %namespace,
                        configmap = ANNOUNCEMENT_NAME,
                        error = %bounded(&error),
                        "cannot write the announcement; xcc-controller withholds IPv6 records from this cluster until it exists; retrying"
                    );
                }
                let delay = delays.next().unwrap_or(Backoff::PEER_MAX);
                tokio::time::sleep(delay).await;
            }
        }
    }
}

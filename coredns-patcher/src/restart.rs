//! `kubectl rollout restart` of CoreDNS's Deployment, for a Corefile without `reload`: the same
//! annotation on the pod template, so that the Deployment controller replaces the pods and the
//! new ones read the Corefile as it is now.

use k8s_openapi::{api::apps::v1::Deployment, jiff::Timestamp};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};

use crate::configmap::FIELD_MANAGER;

/// The pod-template annotation `kubectl rollout restart` sets to the time of the restart.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[error("cannot restart CoreDNS (Deployment {deployment})")]
pub struct RestartError {
    deployment: String,
    #[source]
    source: kube::Error,
}

/// Sets [`RESTARTED_AT`] on the pod template of Deployment `namespace/name` to now.
pub async fn restart(client: Client, namespace: &str, name: &str) -> Result<(), RestartError> {
    let api: Api<Deployment> = Api::namespaced(client, namespace);
    let patch = serde_json::json!({
        "spec": {"template": {"metadata": {"annotations": {
            RESTARTED_AT: Timestamp::now().to_string(),
        }}}}
    });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Strategic(patch))
        .await
        .map(drop)
        .map_err(|source| RestartError {
            deployment: format!("{namespace}/{name}"),
            source,
        })
}

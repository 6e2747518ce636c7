//! Read, edit and write back the Corefile in CoreDNS's ConfigMap.
//!
//! The ConfigMap belongs to whoever installed CoreDNS (kubeadm, an addon manager, a Helm chart),
//! so it is never server-side applied: a full `replace` carrying the resourceVersion that was
//! read keeps every other field as it was, and a 409 Conflict — someone wrote in between — means
//! read again and redo the edit on the new text.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client, api::PostParams};

use crate::corefile::{CorefileError, Edit};

/// The data key CoreDNS's Deployment mounts as its configuration file.
pub const COREFILE_KEY: &str = "Corefile";
/// Field manager recorded in the ConfigMap's managedFields.
pub const FIELD_MANAGER: &str = "xcc-coredns-patcher";
/// Updates tried before giving up on a ConfigMap that keeps changing.
pub const TRIES: u32 = 5;
/// Wait before the first retry; doubled for each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// What happened to the ConfigMap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    Updated,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigMapError {
    #[error(
        "ConfigMap {configmap} does not exist; is CoreDNS installed, and are \
         --corefile-configmap-namespace and --corefile-configmap-name \
         (COREFILE_CONFIGMAP_NAMESPACE, COREFILE_CONFIGMAP_NAME) right?"
    )]
    NotFound { configmap: String },
    #[error(
        "ConfigMap {configmap} has no key {COREFILE_KEY:?} in its data ({found}); \
         is it CoreDNS's configuration?"
    )]
    MissingKey { configmap: String, found: String },
    #[error("cannot edit the Corefile in ConfigMap {configmap}")]
    Corefile {
        configmap: String,
        #[source]
        source: CorefileError,
    },
    #[error("cannot read ConfigMap {configmap}")]
    Read {
        configmap: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot update ConfigMap {configmap}")]
    Update {
        configmap: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "ConfigMap {configmap} was changed by someone else during each of {tries} updates; \
         nothing was written, run again"
    )]
    Conflicts { configmap: String, tries: u32 },
}

/// Applies `edit` to the Corefile in ConfigMap `namespace/name` and writes the result, unless
/// the edit leaves it unchanged. On a conflict the ConfigMap is read again and `edit` runs on
/// the new text, up to [`TRIES`] times.
pub async fn edit_corefile(
    client: Client,
    namespace: &str,
    name: &str,
    edit: impl Fn(&str) -> Result<Edit, CorefileError>,
) -> Result<Outcome, ConfigMapError> {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let configmap = format!("{namespace}/{name}");
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 1;
    loop {
        let mut object = match api.get(name).await {
            Ok(object) => object,
            Err(kube::Error::Api(status)) if status.is_not_found() => {
                return Err(ConfigMapError::NotFound { configmap });
            }
            Err(source) => return Err(ConfigMapError::Read { configmap, source }),
        };
        let data = object.data.get_or_insert_default();
        let Some(corefile) = data.get_mut(COREFILE_KEY) else {
            let found = if data.is_empty() {
                "it has no data".to_string()
            } else {
                let keys: Vec<_> = data.keys().map(String::as_str).collect();
                format!("keys: {}", keys.join(", "))
            };
            return Err(ConfigMapError::MissingKey { configmap, found });
        };
        match edit(corefile) {
            Err(source) => return Err(ConfigMapError::Corefile { configmap, source }),
            Ok(Edit::Unchanged) => return Ok(Outcome::Unchanged),
            Ok(Edit::Changed(text)) => *corefile = text,
        }
        // `object` still carries the resourceVersion it was read with: the server refuses the
        // update if anyone wrote since.
        match api.replace(name, &params, &object).await {
            Ok(_) => return Ok(Outcome::Updated),
            Err(kube::Error::Api(status)) if status.is_conflict() => {
                if attempt >= TRIES {
                    return Err(ConfigMapError::Conflicts {
                        configmap,
                        tries: TRIES,
                    });
                }
                tracing::warn!(
                    %configmap,
                    attempt,
                    retry_in = ?backoff,
                    "the ConfigMap changed since it was read; reading it again"
                );
                tokio::time::sleep(backoff).await;
                backoff *= 2;
                attempt += 1;
            }
            Err(source) => return Err(ConfigMapError::Update { configmap, source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corefile::{self, BEGIN};
    use serde_json::{Value, json};
    use xcc_kube::scenario::{Scenario, status};

    const PATH: &str = "/api/v1/namespaces/kube-system/configmaps/coredns";
    const ORIGINAL: &str = ".:53 {\n    errors\n    forward . /etc/resolv.conf\n}\n";

    fn configmap(version: &str, data: Value) -> (u16, Value) {
        let body = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "coredns", "namespace": "kube-system", "resourceVersion": version,
                "labels": {"k8s-app": "kube-dns"},
            },
            "data": data,
        });
        (200, body)
    }

    fn conflict() -> (u16, Value) {
        status(
            409,
            "Conflict",
            "Operation cannot be fulfilled on configmaps \"coredns\": the object has been \
             modified; please apply your changes to the latest version and try again",
        )
    }

    /// The body sent back as the API server stores it.
    fn stored(body: &Value) -> (u16, Value) {
        (200, body.clone())
    }

    fn block() -> String {
        corefile::block(&["xcc.test".to_string()], "10.96.0.53")
    }

    async fn patch(client: Client) -> Result<Outcome, ConfigMapError> {
        let block = block();
        edit_corefile(client, "kube-system", "coredns", move |text| {
            corefile::patch(text, &block)
        })
        .await
    }

    #[tokio::test]
    async fn writes_the_edit_with_the_resource_version_it_read() {
        let (client, server) = Scenario::new()
            .expect("GET", PATH)
            .reply(configmap(
                "7",
                json!({"Corefile": ORIGINAL, "other": "kept"}),
            ))
            .expect("PUT", PATH)
            .check(|body| {
                assert_eq!(body["metadata"]["resourceVersion"], "7");
                assert_eq!(body["metadata"]["labels"]["k8s-app"], "kube-dns");
                assert_eq!(body["data"]["other"], "kept");
                assert_eq!(body["data"]["Corefile"], format!("{ORIGINAL}{}\n", block()));
            })
            .reply_with(stored)
            .run();
        assert_eq!(patch(client).await.unwrap(), Outcome::Updated);
        let seen = server.done().await;
        assert_eq!(
            seen[1].param("fieldManager"),
            Some("xcc-coredns-patcher"),
            "{}",
            seen[1].uri()
        );
    }

    #[tokio::test]
    async fn an_up_to_date_corefile_is_not_written() {
        let current = format!("{ORIGINAL}{}\n", block());
        // No PUT follows: the scenario expects none.
        let (client, server) = Scenario::new()
            .expect("GET", PATH)
            .reply(configmap("7", json!({"Corefile": current})))
            .run();
        assert_eq!(patch(client).await.unwrap(), Outcome::Unchanged);
        assert_eq!(server.done().await.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflict_rereads_and_edits_the_new_text() {
        // Meanwhile someone else added a server block.
        let theirs = format!("{ORIGINAL}example.org {{\n    whoami\n}}\n");
        let (client, server) = Scenario::new()
            .expect("GET", PATH)
            .reply(configmap("7", json!({"Corefile": ORIGINAL})))
            .expect("PUT", PATH)
            .reply(conflict())
            .expect("GET", PATH)
            .reply(configmap("8", json!({"Corefile": theirs.clone()})))
            .expect("PUT", PATH)
            .check(move |body| {
                assert_eq!(body["metadata"]["resourceVersion"], "8");
                assert_eq!(body["data"]["Corefile"], format!("{theirs}{}\n", block()));
            })
            .reply_with(stored)
            .run();
        assert_eq!(patch(client).await.unwrap(), Outcome::Updated);
        server.done().await;
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_bounded_conflicts() {
        let scenario = (0..TRIES).fold(Scenario::new(), |scenario, version| {
            scenario
                .expect("GET", PATH)
                .reply(configmap(
                    &version.to_string(),
                    json!({"Corefile": ORIGINAL}),
                ))
                .expect("PUT", PATH)
                .reply(conflict())
        });
        let (client, server) = scenario.run();
        let err = patch(client).await.unwrap_err();
        assert!(matches!(
            err,
            ConfigMapError::Conflicts { tries: TRIES, .. }
        ));
        assert!(
            err.to_string()
                .starts_with("ConfigMap kube-system/coredns was changed")
        );
        server.done().await;
    }

    #[tokio::test]
    async fn a_missing_configmap_is_a_clear_error() {
        let (client, server) = Scenario::new()
            .expect("GET", PATH)
            .reply(status(404, "NotFound", "configmaps \"coredns\" not found"))
            .run();
        let err = patch(client).await.unwrap_err();
        assert!(matches!(err, ConfigMapError::NotFound { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("kube-system/coredns does not exist")
        );
        server.done().await;
    }

    #[tokio::test]
    async fn a_configmap_without_data_or_corefile_is_a_clear_error() {
        for (data, found) in [
            (Value::Null, "(it has no data)"),
            (json!({"Caddyfile": "x"}), "(keys: Caddyfile)"),
        ] {
            let (client, server) = Scenario::new()
                .expect("GET", PATH)
                .reply(configmap("7", data))
                .run();
            let err = patch(client).await.unwrap_err().to_string();
            assert!(
                err.starts_with("ConfigMap kube-system/coredns has no key \"Corefile\""),
                "{err}"
            );
            assert!(err.contains(found), "{err}");
            server.done().await;
        }
    }

    #[tokio::test]
    async fn an_unterminated_block_is_not_written() {
        let broken = format!("{ORIGINAL}{BEGIN}\nexample.org {{\n}}\n");
        let (client, server) = Scenario::new()
            .expect("GET", PATH)
            .reply(configmap("7", json!({"Corefile": broken})))
            .run();
        let err = patch(client).await.unwrap_err();
        assert!(matches!(err, ConfigMapError::Corefile { .. }), "{err}");
        server.done().await;
    }

    #[tokio::test]
    async fn other_api_errors_are_reported_not_retried() {
        let (client, server) = Scenario::new()
            .expect("GET", PATH)
            .reply(configmap("7", json!({"Corefile": ORIGINAL})))
            .expect("PUT", PATH)
            .reply(status(
                403,
                "Forbidden",
                "configmaps \"coredns\" is forbidden: User \"x\" cannot update resource",
            ))
            .run();
        let err = patch(client).await.unwrap_err();
        assert!(matches!(err, ConfigMapError::Update { .. }), "{err}");
        assert_eq!(server.done().await.len(), 2);
    }
}

//! Clients for other clusters, from kubeconfigs kept in Secrets.

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Client, Config, ResourceExt,
    config::{KubeConfigOptions, Kubeconfig},
};

/// Why a kubeconfig could not give a client. Messages name the Secret and key where known.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeconfigError {
    #[error("Secret {secret} has no key {key:?}")]
    MissingKey { secret: String, key: String },
    #[error("kubeconfig in {origin} is not valid YAML: {source}")]
    Parse {
        origin: String,
        #[source]
        source: serde_yaml::Error,
    },
    #[error("kubeconfig in {origin} cannot be used: {source}")]
    Config {
        origin: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot read kubeconfig {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error(
        "no Kubernetes configuration: run in a pod, or set KUBECONFIG or --kubeconfig ({source})"
    )]
    NoConfig {
        #[source]
        source: kube::config::InferConfigError,
    },
    #[error("cannot build a client from the kubeconfig in {origin}: {source}")]
    Client {
        origin: String,
        #[source]
        source: kube::Error,
    },
}

impl KubeconfigError {
    /// Short, stable label (metrics, condition reasons).
    pub fn reason(&self) -> &'static str {
        match self {
            KubeconfigError::MissingKey { .. } => "KubeconfigMissing",
            KubeconfigError::Parse { .. } | KubeconfigError::Config { .. } => "KubeconfigInvalid",
            KubeconfigError::Read { .. } => "KubeconfigUnreadable",
            KubeconfigError::NoConfig { .. } => "NoKubeconfig",
            KubeconfigError::Client { .. } => "ClientFailed",
        }
    }
}

/// The client of a binary's own cluster: from the kubeconfig file `path` when given (its current
/// context), else in-cluster or `$KUBECONFIG`.
pub async fn own_cluster_client(path: Option<&std::path::Path>) -> Result<Client, KubeconfigError> {
    let (config, origin) = match path {
        Some(path) => {
            let origin = path.display().to_string();
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| KubeconfigError::Read {
                    path: origin.clone(),
                    source,
                })?;
            let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| KubeconfigError::Config {
                    origin: origin.clone(),
                    source,
                })?;
            (config, origin)
        }
        None => {
            let config = Config::infer()
                .await
                .map_err(|source| KubeconfigError::NoConfig { source })?;
            (config, "the inferred configuration".to_string())
        }
    };
    Client::try_from(config).map_err(|source| KubeconfigError::Client { origin, source })
}

/// A client from kubeconfig text; `origin` names where it came from, for error messages.
pub async fn client_from_kubeconfig(text: &[u8], origin: &str) -> Result<Client, KubeconfigError> {
    let kubeconfig: Kubeconfig =
        serde_yaml::from_slice(text).map_err(|source| KubeconfigError::Parse {
            origin: origin.to_string(),
            source,
        })?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| KubeconfigError::Config {
            origin: origin.to_string(),
            source,
        })?;
    Client::try_from(config).map_err(|source| KubeconfigError::Client {
        origin: origin.to_string(),
        source,
    })
}

/// A client from the kubeconfig under `key` of `secret`.
pub async fn client_from_secret(secret: &Secret, key: &str) -> Result<Client, KubeconfigError> {
    let origin = format!(
        "Secret {}/{} key {key:?}",
        secret.namespace().unwrap_or_default(),
        secret.name_any()
    );
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.as_slice())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.as_bytes())
        })
        .ok_or_else(|| KubeconfigError::MissingKey {
            secret: format!(
                "{}/{}",
                secret.namespace().unwrap_or_default(),
                secret.name_any()
            ),
            key: key.to_string(),
        })?;
    client_from_kubeconfig(data, &origin).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    fn secret(key: &str, value: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("cluster-a-kubeconfig".into()),
                namespace: Some("dev-team".into()),
                ..Default::default()
            },
            data: Some([(key.to_string(), ByteString(value.as_bytes().to_vec()))].into()),
            ..Default::default()
        }
    }

    const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: abc}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
";

    #[tokio::test]
    async fn a_good_secret_gives_a_client() {
        client_from_secret(&secret("value", KUBECONFIG), "value")
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn errors_name_the_secret_and_the_problem() {
        let err = client_from_secret(&secret("other", KUBECONFIG), "value")
            .await
            .err()
            .expect("an error");
        assert_eq!(err.reason(), "KubeconfigMissing");
        assert!(
            err.to_string().contains("dev-team/cluster-a-kubeconfig"),
            "{err}"
        );

        let err = client_from_secret(&secret("value", "{not: [yaml"), "value")
            .await
            .err()
            .expect("an error");
        assert_eq!(err.reason(), "KubeconfigInvalid");
        assert!(err.to_string().contains("cluster-a-kubeconfig"), "{err}");

        let err = client_from_secret(&secret("value", "apiVersion: v1\nkind: Config\n"), "value")
            .await
            .err()
            .expect("an error");
        assert!(err.to_string().contains("cannot be used"), "{err}");
    }
}

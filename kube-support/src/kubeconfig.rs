//! Errors of kubeconfigs, and the client of a binary's own cluster (from its own, trusted,
//! kubeconfig file or the pod's ServiceAccount).

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

/// Why a kubeconfig could not give a client. Messages name the Secret and key where known.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeconfigError {
    /// The Secret has no such key.
    #[error("Secret {secret} has no key {key:?}")]
    MissingKey {
        /// The Secret, `namespace/name`.
        secret: String,
        /// The key looked for.
        key: String,
    },
    /// The kubeconfig does not parse.
    #[error("kubeconfig in {origin} is not valid YAML: {source}")]
    Parse {
        /// Where the kubeconfig came from (a Secret and key, or a file).
        origin: String,
        /// The parser's error (it does not quote the text).
        #[source]
        source: crate::yaml::Error,
    },
    /// The kubeconfig parses but lacks what a client needs (a context, a cluster, a user).
    #[error("kubeconfig in {origin} cannot be used: {why}")]
    Invalid {
        /// Where the kubeconfig came from (a Secret and key, or a file).
        origin: String,
        /// What is missing or wrong.
        why: String,
    },
    /// A field the trust rules refuse (see [`crate::trust`]).
    #[error("kubeconfig in {origin} is refused: {field} {why}")]
    Rejected {
        /// Where the kubeconfig came from (a Secret and key, or a file).
        origin: String,
        /// The field refused.
        field: String,
        /// Which rule refuses it.
        why: String,
    },
    /// kube could not make a client configuration of it.
    #[error("kubeconfig in {origin} cannot be used: {source}")]
    Config {
        /// Where the kubeconfig came from (a Secret and key, or a file).
        origin: String,
        /// kube's error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Made by [`KubeconfigError::read`].
    #[error("cannot read kubeconfig {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why it could not be read or parsed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No kubeconfig given, none in the environment, and not in a pod.
    #[error(
        "no Kubernetes configuration: run in a pod, or set KUBECONFIG or --kubeconfig ({source})"
    )]
    NoConfig {
        /// What kube tried, and why each failed.
        #[source]
        source: kube::config::InferConfigError,
    },
    /// The configuration is complete but the client could not be built (TLS, a proxy).
    #[error("cannot build a client from the kubeconfig in {origin}: {source}")]
    Client {
        /// Where the kubeconfig came from (a Secret and key, or a file).
        origin: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
}

impl KubeconfigError {
    /// A kubeconfig (the file `path`, or the files it names, as `$KUBECONFIG`) could not be read
    /// or parsed. kube's "cannot read" error names the file: it becomes the path, and only its
    /// cause (the I/O error) the source, so that the line says the path once.
    pub fn read(path: &str, source: kube::config::KubeconfigError) -> Self {
        match source {
            kube::config::KubeconfigError::ReadConfig(io, file) => KubeconfigError::Read {
                path: file.display().to_string(),
                source: Box::new(io),
            },
            other => KubeconfigError::Read {
                path: path.to_string(),
                source: Box::new(other),
            },
        }
    }

    /// Short, stable label (metrics, condition reasons).
    pub fn reason(&self) -> &'static str {
        match self {
            KubeconfigError::MissingKey { .. } => "KubeconfigMissing",
            KubeconfigError::Parse { .. }
            | KubeconfigError::Invalid { .. }
            | KubeconfigError::Config { .. } => "KubeconfigInvalid",
            KubeconfigError::Rejected { .. } => "KubeconfigRejected",
            KubeconfigError::Read { .. } => "KubeconfigUnreadable",
            KubeconfigError::NoConfig { .. } => "NoKubeconfig",
            KubeconfigError::Client { .. } => "ClientFailed",
        }
    }
}

/// `--kubeconfig FILE` (env `XCC_KUBECONFIG`): the binary's own, trusted, kubeconfig. Flatten it
/// into a binary's `Args`; each binary says in its help which cluster that is
/// (`#[command(mut_arg("kubeconfig", |a| a.help(...)))]` on the struct that flattens it).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct KubeconfigArgs {
    /// Kubeconfig of the cluster; default: in-cluster or $KUBECONFIG.
    #[arg(long, env = "XCC_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,
}

impl KubeconfigArgs {
    /// The client of the binary's own cluster ([`own_cluster_client`]).
    pub async fn client(&self) -> Result<Client, KubeconfigError> {
        own_cluster_client(self.kubeconfig.as_deref()).await
    }

    /// The client and its API server's URL ([`own_cluster`]).
    pub async fn cluster(&self) -> Result<(Client, String), KubeconfigError> {
        own_cluster(self.kubeconfig.as_deref()).await
    }
}

/// The client of a binary's own cluster: from the kubeconfig file `path` when given (its current
/// context), else in-cluster or `$KUBECONFIG`.
pub async fn own_cluster_client(path: Option<&std::path::Path>) -> Result<Client, KubeconfigError> {
    own_cluster(path).await.map(|(client, _)| client)
}

/// [`own_cluster_client`], and the API server URL it talks to (without a trailing `/`).
pub async fn own_cluster(
    path: Option<&std::path::Path>,
) -> Result<(Client, String), KubeconfigError> {
    let (config, origin) = own_config(path).await?;
    let url = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let client =
        crate::h2::client(config).map_err(|source| KubeconfigError::Client { origin, source })?;
    Ok((client, url))
}

/// A client of the cluster [`own_cluster`] finds that authenticates with `token` instead of the
/// configured credentials ([`crate::h2::client_with_token`]).
pub async fn own_cluster_with_token(
    path: Option<&std::path::Path>,
    token: crate::h2::SharedToken,
) -> Result<Client, KubeconfigError> {
    let (config, origin) = own_config(path).await?;
    crate::h2::client_with_token(config, token)
        .map_err(|source| KubeconfigError::Client { origin, source })
}

/// The configuration of this process's own cluster: from the kubeconfig at `path`, else inferred
/// (in-cluster, or `$KUBECONFIG`); and where it came from.
async fn own_config(path: Option<&std::path::Path>) -> Result<(Config, String), KubeconfigError> {
    Ok(match path {
        Some(path) => {
            let origin = path.display().to_string();
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|source| KubeconfigError::read(&origin, source))?;
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
    })
}

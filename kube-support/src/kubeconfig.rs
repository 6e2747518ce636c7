//! Errors of kubeconfigs, and the client of a binary's own cluster (from its own, trusted,
//! kubeconfig file or the pod's ServiceAccount).

use std::path::{Path, PathBuf};

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

/// Why a kubeconfig could not give a client. Messages name the Secret and key (or the file)
/// and the line and column where known, and never hold a byte of the kubeconfig: no variant
/// keeps a library error whose text could quote it (kube's and the YAML parser's do), only
/// text made of their kinds ([`crate::report::describe`], [`crate::yaml::Error`]).
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
    /// The kubeconfig does not parse, or a field has the wrong type.
    #[error("kubeconfig in {origin} does not parse: {problem}")]
    Parse {
        /// Where the kubeconfig came from (a Secret and key, or a file).
        origin: String,
        /// The parser's error (it does not quote the text).
        problem: crate::yaml::Error,
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
    /// kube could not make a client configuration of it (bad base64, PEM, URL; a file it
    /// names cannot be read).
    #[error("kubeconfig in {origin} cannot be used: {why}")]
    Config {
        /// Where the kubeconfig came from (a Secret and key, or a file).
        origin: String,
        /// What is wrong, without the data ([`config_problem`]).
        why: String,
    },
    /// The kubeconfig file could not be read.
    #[error("cannot read kubeconfig {path}: {why}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        why: std::io::Error,
    },
    /// No kubeconfig given, none in the environment, and not in a pod.
    #[error("no Kubernetes configuration: run in a pod, or set KUBECONFIG or --kubeconfig ({why})")]
    NoConfig {
        /// Why the in-cluster configuration is not there.
        why: String,
    },
    /// The configuration is complete but the client could not be built (TLS, a proxy).
    #[error("cannot build a client from the kubeconfig in {origin}: {why}")]
    Client {
        /// Where the kubeconfig came from (a Secret and key, or a file).
        origin: String,
        /// What is wrong ([`crate::report::describe`]).
        why: String,
    },
}

impl KubeconfigError {
    /// A kubeconfig (the file `path`, or the files it names, as `$KUBECONFIG`) could not be read
    /// or parsed by kube's own reader. kube's "cannot read" error names the file: it becomes the
    /// path, and only its cause (the I/O error) the reason, so that the line says the path once.
    pub fn read(path: &str, source: kube::config::KubeconfigError) -> Self {
        match source {
            kube::config::KubeconfigError::ReadConfig(why, file) => KubeconfigError::Read {
                path: file.display().to_string(),
                why,
            },
            kube::config::KubeconfigError::Parse(problem) => KubeconfigError::Parse {
                origin: path.to_string(),
                problem: crate::yaml::Error::new(*problem),
            },
            other => KubeconfigError::config(path, &other),
        }
    }

    /// kube could not make a client configuration of the kubeconfig in `origin`.
    pub fn config(origin: impl Into<String>, source: &kube::config::KubeconfigError) -> Self {
        match source {
            kube::config::KubeconfigError::Parse(_)
            | kube::config::KubeconfigError::ReadConfig(..) => {
                // Not made by configuration; said without the parser's text all the same.
                KubeconfigError::Config {
                    origin: origin.into(),
                    why: "the kubeconfig does not parse".into(),
                }
            }
            other => KubeconfigError::Config {
                origin: origin.into(),
                why: config_problem(other),
            },
        }
    }

    /// The client of the configuration from `origin` could not be built.
    pub fn client(origin: impl Into<String>, source: &kube::Error) -> Self {
        KubeconfigError::Client {
            origin: origin.into(),
            why: crate::report::describe(source),
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

/// What is wrong in a kubeconfig kube could not configure a client from, in the kubeconfig's
/// own field names and without the data: the base64 decoder's and PEM parsers' errors quote
/// the bytes they stopped at, so only their kind is said.
pub fn config_problem(error: &kube::config::KubeconfigError) -> String {
    use kube::config::{KubeconfigError as K, LoadDataError as D};
    let data = |field: &str, error: &D| match error {
        D::DecodeBase64(_) => format!("{field}-data is not valid base64"),
        D::ReadFile(io, path) => format!("cannot read {field} {}: {io}", path.display()),
        D::NoBase64DataOrFile => format!("neither {field}-data nor {field} is set"),
    };
    match error {
        K::CurrentContextNotSet => "no current-context, and no context named".into(),
        K::KindMismatch => "its documents have different kinds".into(),
        K::ApiVersionMismatch => "its documents have different apiVersions".into(),
        K::LoadContext(name) => format!("context {name:?} is not in contexts"),
        K::LoadClusterOfContext(name) => format!("cluster {name:?} is not in clusters"),
        K::FindPath => "no kubeconfig path (no $HOME)".into(),
        K::ReadConfig(io, path) => format!("cannot read {}: {io}", path.display()),
        K::Parse(_) => "it does not parse".into(),
        K::MissingClusterUrl => "the cluster has no server".into(),
        K::ParseClusterUrl(_) => "the cluster's server is not a valid URL".into(),
        K::ParseProxyUrl(_) => "the cluster's proxy-url is not a valid URL".into(),
        K::LoadCertificateAuthority(e) => data("certificate-authority", e),
        K::LoadClientCertificate(e) => data("client-certificate", e),
        K::LoadClientKey(e) => data("client-key", e),
        K::ParseCertificates(_) => {
            "certificate-authority-data is not PEM-encoded certificates".into()
        }
        #[allow(
            unreachable_patterns,
            reason = "kube has more variants when its proxy features are on"
        )]
        _ => "kube cannot configure a client from it".into(),
    }
}

/// `--kubeconfig FILE` (env `XCC_KUBECONFIG`): the binary's own, trusted, kubeconfig. Flatten it
/// into a binary's `Args`; each binary says in its help which cluster that is
/// (`#[command(mut_arg("kubeconfig", |a| a.help(...)))]` on the struct that flattens it).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct KubeconfigArgs {
    /// Kubeconfig of the cluster; default: in-cluster or $KUBECONFIG.
    #[arg(long, env = "XCC_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
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
pub async fn own_cluster_client(path: Option<&Path>) -> Result<Client, KubeconfigError> {
    own_cluster(path).await.map(|(client, _)| client)
}

/// [`own_cluster_client`], and the API server URL it talks to (without a trailing `/`).
pub async fn own_cluster(path: Option<&Path>) -> Result<(Client, String), KubeconfigError> {
    let (config, origin) = own_config(path).await?;
    let url = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let client =
        crate::h2::client(config).map_err(|source| KubeconfigError::client(origin, &source))?;
    crate::report::own_server(&url);
    Ok((client, url))
}

/// A client of the cluster [`own_cluster`] finds that authenticates with `token` instead of the
/// configured credentials ([`crate::h2::client_with_token`]).
pub async fn own_cluster_with_token(
    path: Option<&Path>,
    token: crate::h2::SharedToken,
) -> Result<Client, KubeconfigError> {
    let (config, origin) = own_config(path).await?;
    crate::h2::client_with_token(config, token)
        .map_err(|source| KubeconfigError::client(origin, &source))
}

/// Reads the kubeconfig file `path` as kube's `Kubeconfig::read_from` does (every document
/// merged, relative file paths made absolute against the file's folder), with errors that name
/// the file and the line and never quote it.
pub fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, KubeconfigError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|why| KubeconfigError::Read {
        path: origin.clone(),
        why,
    })?;
    let documents: Vec<Kubeconfig> =
        crate::yaml::documents(&text).map_err(|problem| KubeconfigError::Parse {
            origin: origin.clone(),
            problem,
        })?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut merged: Option<Kubeconfig> = None;
    for mut document in documents {
        absolute_paths(&mut document, dir);
        merged = Some(match merged {
            None => document,
            Some(merged) => merged
                .merge(document)
                .map_err(|e| KubeconfigError::config(origin.clone(), &e))?,
        });
    }
    Ok(merged.unwrap_or_default())
}

/// The files a kubeconfig names, relative to `dir` (the kubeconfig's folder), as kube does.
fn absolute_paths(kubeconfig: &mut Kubeconfig, dir: &Path) {
    let absolute = |path: &mut Option<String>| {
        if let Some(p) = path
            && Path::new(p).is_relative()
        {
            *p = dir.join(&*p).display().to_string();
        }
    };
    for named in &mut kubeconfig.clusters {
        if let Some(cluster) = &mut named.cluster {
            absolute(&mut cluster.certificate_authority);
        }
    }
    for named in &mut kubeconfig.auth_infos {
        if let Some(user) = &mut named.auth_info {
            absolute(&mut user.client_certificate);
            absolute(&mut user.client_key);
            absolute(&mut user.token_file);
            if let Some(exec) = &mut user.exec
                && exec
                    .command
                    .as_deref()
                    .is_some_and(|c| c.contains(std::path::MAIN_SEPARATOR))
            {
                absolute(&mut exec.command);
            }
        }
    }
}

/// The kubeconfig of the environment, as kubectl finds it: the files of `$KUBECONFIG` merged
/// (the first to set a value wins), else `~/.kube/config` if it exists; with the text that
/// names it in errors. `None` when there is none.
pub fn environment_kubeconfig() -> Result<Option<(Kubeconfig, String)>, KubeconfigError> {
    if let Some(value) = std::env::var_os("KUBECONFIG") {
        let paths: Vec<PathBuf> = std::env::split_paths(&value)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            let mut merged = Kubeconfig::default();
            for path in &paths {
                merged = merged
                    .merge(read_kubeconfig(path)?)
                    .map_err(|e| KubeconfigError::config("$KUBECONFIG", &e))?;
            }
            let origin = std::env::join_paths(&paths).map_or_else(
                |_| "$KUBECONFIG".into(),
                |p| p.to_string_lossy().into_owned(),
            );
            return Ok(Some((merged, origin)));
        }
    }
    let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
        return Ok(None);
    };
    let path = Path::new(&home).join(".kube").join("config");
    if !path.exists() {
        return Ok(None);
    }
    read_kubeconfig(&path).map(|kubeconfig| Some((kubeconfig, path.display().to_string())))
}

/// The configuration of the kubeconfig file at `path` (its current context).
async fn file_config(path: &Path) -> Result<(Config, String), KubeconfigError> {
    let origin = path.display().to_string();
    let kubeconfig = read_kubeconfig(path)?;
    from_kubeconfig(kubeconfig, origin).await
}

async fn from_kubeconfig(
    kubeconfig: Kubeconfig,
    origin: String,
) -> Result<(Config, String), KubeconfigError> {
    match Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await {
        Ok(config) => Ok((config, origin)),
        Err(e) => Err(KubeconfigError::config(origin, &e)),
    }
}

/// The configuration of this process's own cluster: from the kubeconfig at `path`, else
/// inferred as kube's `Config::infer` does (`$KUBECONFIG` or `~/.kube/config`, else in-cluster),
/// with our reader's errors; and where it came from.
async fn own_config(path: Option<&Path>) -> Result<(Config, String), KubeconfigError> {
    if let Some(path) = path {
        return file_config(path).await;
    }
    let from_file = match environment_kubeconfig() {
        Ok(Some((kubeconfig, origin))) => Some(from_kubeconfig(kubeconfig, origin).await),
        Ok(None) => None,
        Err(error) => Some(Err(error)),
    };
    match from_file {
        Some(Ok(found)) => Ok(found),
        // A kubeconfig that cannot be used: in a pod, the pod's own account, as kube does.
        Some(Err(error)) => match Config::incluster() {
            Ok(config) => Ok((config, "the pod's ServiceAccount".to_string())),
            Err(_) => Err(error),
        },
        None => Config::incluster()
            .map(|config| (config, "the pod's ServiceAccount".to_string()))
            .map_err(|e| KubeconfigError::NoConfig {
                why: format!("not in a pod: {e}"),
            }),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The canary: every way a kubeconfig can be wrong, with a credential in it; no message
    //! (Display, Debug, the one-line report) holds a byte of it, and each still says what is
    //! wrong and where.
    use super::*;

    const CANARY: &str = "s3cr3t-CANARY-9f1c";

    pub(crate) fn base64(bytes: &[u8]) -> String {
        serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec()))
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    }

    /// A kubeconfig whose cluster and user bodies are `cluster` and `user` (flow mappings).
    pub(crate) fn kubeconfig(cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {cluster}\nusers:\n\
             - name: u\n  user: {user}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
             current-context: x\n"
        )
    }

    /// The texts an error reaches a person or a log by.
    pub(crate) fn texts(error: &KubeconfigError) -> [String; 3] {
        [
            error.to_string(),
            format!("{error:?}"),
            crate::report::one_line(error),
        ]
    }

    pub(crate) fn assert_clean(error: &KubeconfigError, says: &[&str]) {
        for (i, text) in texts(error).iter().enumerate() {
            for secret in [CANARY, &base64(CANARY.as_bytes())[..12], "9f1c"] {
                assert!(!text.contains(secret), "{secret:?} in {text:?}");
            }
            // Debug (the second) is for programmers: it need not say it in words.
            for said in says.iter().filter(|_| i != 1) {
                assert!(text.contains(said), "{said:?} missing in {text:?}");
            }
        }
        let line = crate::report::one_line(error);
        assert_eq!(line.lines().count(), 1, "{line}");
    }

    fn file(name: &str, text: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("xcc-canary-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    const SERVER: &str = "server: 'https://127.0.0.1:6443'";

    #[test]
    fn a_file_that_does_not_parse_names_the_file_and_line_not_the_token() {
        // An unclosed quote right after the token: the parser stops inside it.
        let text = format!(
            "apiVersion: v1\nclusters:\n- name: c\n  cluster: {{{SERVER}}}\nusers:\n\
             - name: u\n  user: {{token: \"{CANARY}}}\n"
        );
        let path = file("unclosed", &text);
        let error = read_kubeconfig(&path).unwrap_err();
        assert_eq!(error.reason(), "KubeconfigInvalid");
        assert_clean(
            &error,
            &[path.to_str().unwrap(), "line 7", "does not parse"],
        );
        // The same through kube's own reader (what `KubeconfigError::read` is given).
        let kube = Kubeconfig::read_from(&path).unwrap_err();
        assert!(
            kube.to_string().contains(CANARY),
            "kube's own text quotes it"
        );
        assert_clean(
            &KubeconfigError::read(path.to_str().unwrap(), kube),
            &["line 7"],
        );
    }

    #[test]
    fn a_field_of_the_wrong_type_says_what_was_expected_not_the_value() {
        let text = format!("apiVersion: v1\nkind: Config\nusers: {CANARY}\n");
        let path = file("users-string", &text);
        let error = read_kubeconfig(&path).unwrap_err();
        assert_clean(&error, &["line 3", "expected sequence"]);
        let text = kubeconfig(&format!("{{{SERVER}}}"), "{token: [1, 2]}");
        let error = read_kubeconfig(&file("token-list", &text)).unwrap_err();
        assert_clean(&error, &["line 8", "expected string"]);
    }

    /// A PEM block of `kind` whose body is the canary (in base64, as PEM bodies are), and all
    /// of it in base64, as kubeconfigs hold PEM.
    pub(crate) fn pem(kind: &str) -> String {
        let body = base64(CANARY.as_bytes());
        base64(format!("-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n").as_bytes())
    }

    #[tokio::test]
    async fn bad_base64_and_pem_name_the_field_not_the_data() {
        let cases = [
            (
                kubeconfig(
                    &format!("{{{SERVER}, certificate-authority-data: '{CANARY}!'}}"),
                    "{}",
                ),
                "certificate-authority-data is not valid base64",
            ),
            (
                kubeconfig(
                    &format!(
                        "{{{SERVER}, certificate-authority-data: {}}}",
                        pem("CERTIFICATE")
                    ),
                    "{}",
                ),
                "certificate-authority-data",
            ),
            (
                kubeconfig(
                    &format!("{{{SERVER}}}"),
                    &format!(
                        "{{client-certificate-data: {}, client-key-data: '{CANARY}!'}}",
                        base64(b"x")
                    ),
                ),
                "client-key-data is not valid base64",
            ),
        ];
        for (i, (text, says)) in cases.iter().enumerate() {
            let path = file(&format!("data-{i}"), text);
            let error = own_cluster(Some(&path)).await.err().expect(says);
            assert_clean(&error, &[path.to_str().unwrap(), says]);
        }
    }

    #[tokio::test]
    async fn a_client_key_that_is_not_pem_is_said_without_it() {
        let text = kubeconfig(
            &format!("{{{SERVER}}}"),
            &format!(
                "{{client-certificate-data: {}, client-key-data: {}}}",
                pem("CERTIFICATE"),
                pem("PRIVATE KEY")
            ),
        );
        let path = file("pem-key", &text);
        let error = own_cluster(Some(&path)).await.err().unwrap();
        assert_clean(&error, &[path.to_str().unwrap(), "client-"]);
    }

    #[test]
    fn relative_paths_are_made_absolute_as_kube_does() {
        let text = kubeconfig(
            "{server: 'https://a:1', certificate-authority: ca.pem}",
            "{client-certificate: c.pem, client-key: /abs/k.pem, tokenFile: t}",
        );
        let path = file("relative", &text);
        let ours = read_kubeconfig(&path).unwrap();
        let kube = Kubeconfig::read_from(&path).unwrap();
        assert_eq!(
            serde_json::to_value(&ours).unwrap(),
            serde_json::to_value(&kube).unwrap()
        );
    }
}

//! The user's kubeconfig, found as kubectl finds it, and clients for its contexts.

use std::{path::Path, time::Duration};

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Map, Value};
use xcc_kube::KubeconfigError;

use crate::{Error, args::KubeArgs};

type Mapping = Map<String, Value>;

/// The user's kubeconfig and the file it was read from, which every error about it names
/// (never any of its content).
#[derive(Clone, Debug, Default)]
pub struct UserKubeconfig {
    pub kubeconfig: Kubeconfig,
    /// The path given, `$KUBECONFIG`'s files (joined as there), or `~/.kube/config`.
    pub file: String,
}

impl std::ops::Deref for UserKubeconfig {
    type Target = Kubeconfig;

    fn deref(&self) -> &Kubeconfig {
        &self.kubeconfig
    }
}

impl UserKubeconfig {
    /// `context` of this kubeconfig, as errors name it.
    fn context(&self, context: &str) -> String {
        format!("context {context:?} of kubeconfig {}", self.file)
    }
}

/// Reads the kubeconfig: `path`, else the files of `$KUBECONFIG` (merged as kubectl merges
/// them), else `~/.kube/config`.
///
/// Read by xcc-kube's reader, whose errors name the file and line and never quote it.
pub fn load(path: Option<&Path>) -> Result<UserKubeconfig, Error> {
    if let Some(path) = path {
        return Ok(UserKubeconfig {
            kubeconfig: xcc_kube::read_kubeconfig(path)?,
            file: path.display().to_string(),
        });
    }
    if let Some((kubeconfig, file)) = xcc_kube::environment_kubeconfig()? {
        return Ok(UserKubeconfig { kubeconfig, file });
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    let path = Path::new(&home).join(".kube").join("config");
    Ok(UserKubeconfig {
        kubeconfig: xcc_kube::read_kubeconfig(&path)?,
        file: path.display().to_string(),
    })
}

/// Reads the kubeconfig named by `args`.
pub fn load_args(args: &KubeArgs) -> Result<UserKubeconfig, Error> {
    load(args.kubeconfig.as_deref())
}

/// Names of the contexts, sorted.
pub fn context_names(kubeconfig: &Kubeconfig) -> Vec<String> {
    let mut names: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    names.sort();
    names
}

/// `Ok` when `context` is in the kubeconfig; a usage error listing the ones that are.
pub fn require(kubeconfig: &UserKubeconfig, context: &str) -> Result<(), Error> {
    if kubeconfig.contexts.iter().any(|c| c.name == context) {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "context {context:?} is not in kubeconfig {} (it has: {}); name one of those",
        kubeconfig.file,
        context_names(kubeconfig).join(", ")
    )))
}

/// The context `context`, else the current one.
pub fn pick(kubeconfig: &UserKubeconfig, context: Option<&str>) -> Result<String, Error> {
    let name = match context {
        Some(c) => c.to_string(),
        None => kubeconfig
            .current_context
            .clone()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                Error::Usage(format!(
                    "kubeconfig {} has no current context: pass --context",
                    kubeconfig.file
                ))
            })?,
    };
    require(kubeconfig, &name)?;
    Ok(name)
}

/// The namespace of `context` (checked to exist), else `default`, as kubectl's.
pub fn namespace(kubeconfig: &Kubeconfig, context: &str) -> String {
    kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.namespace.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// What `context` names that `kubeconfig` does not have (its cluster, its user), as kubectl
/// says it.
fn missing_entry(kubeconfig: &Kubeconfig, context: &str) -> Option<String> {
    let body = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)?
        .context
        .as_ref()?;
    if !kubeconfig.clusters.iter().any(|c| c.name == body.cluster) {
        return Some(format!(
            "the context names cluster {:?}, which is not in clusters",
            body.cluster
        ));
    }
    match &body.user {
        Some(user)
            if !user.is_empty() && !kubeconfig.auth_infos.iter().any(|u| u.name == *user) =>
        {
            Some(format!(
                "the context names user {user:?}, which is not in users"
            ))
        }
        _ => None,
    }
}

/// A timeout as the client takes it: `--request-timeout 0` means none, as kubectl's.
pub fn limit(timeout: Duration) -> Option<Duration> {
    (!timeout.is_zero()).then_some(timeout)
}

/// A client for one context.
#[derive(Clone)]
pub struct Target {
    pub context: String,
    pub client: Client,
    /// The API server's URL.
    pub server: String,
}

/// A client for `context` of `kubeconfig` (checked to exist), with `timeout` on connections
/// and reads (zero: none).
pub async fn client(
    kubeconfig: &UserKubeconfig,
    context: &str,
    timeout: Duration,
) -> Result<Target, Error> {
    require(kubeconfig, context)?;
    let origin = format!("{} (context {context:?})", kubeconfig.file);
    // kube would go on without a user that is not there (anonymous); kubectl refuses it.
    if let Some(why) = missing_entry(kubeconfig, context) {
        return Err(KubeconfigError::Config { origin, why }.into());
    }
    let options = KubeConfigOptions {
        context: Some(context.to_string()),
        ..Default::default()
    };
    let mut config = Config::from_custom_kubeconfig(kubeconfig.kubeconfig.clone(), &options)
        .await
        .map_err(|source| KubeconfigError::config(origin.clone(), &source))?;
    // kube takes any URI as the server (`server: abc` is an authority); every error would then
    // name it. Said without it: it is not an address.
    if !matches!(config.cluster_url.scheme_str(), Some("https" | "http"))
        || config.cluster_url.host().is_none()
    {
        return Err(KubeconfigError::Config {
            origin,
            why: "the cluster's server is not an http:// or https:// URL".into(),
        }
        .into());
    }
    let timeout = limit(timeout);
    config.connect_timeout = timeout;
    config.read_timeout = timeout;
    config.write_timeout = timeout;
    let server = config.cluster_url.to_string();
    // Errors of requests that get no answer name the server.
    let named = xcc_kube::report::Unanswered::layer(&config.cluster_url);
    let client = kube::client::ClientBuilder::try_from(config)
        .map(|builder| builder.with_layer(&named).build())
        .map_err(|source| KubeconfigError::client(origin, &source))?;
    Ok(Target {
        context: context.to_string(),
        client,
        server,
    })
}

/// The kubeconfig as YAML, with the names of its entries as written.
fn as_yaml(kubeconfig: &Kubeconfig) -> Result<Mapping, Error> {
    match serde_json::to_value(kubeconfig) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(Error::Failed("the kubeconfig is not a mapping".into())),
        Err(e) => Err(Error::Failed(format!("cannot read the kubeconfig: {e}"))),
    }
}

/// The entry `name` of list `list` (`clusters`, `users`, `contexts`) of a kubeconfig mapping.
pub fn entry<'a>(root: &'a Mapping, list: &str, name: &str) -> Option<&'a Mapping> {
    root.get(list)?
        .as_array()?
        .iter()
        .filter_map(Value::as_object)
        .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
}

/// What one context of the kubeconfig is made of.
#[derive(Clone, Debug, PartialEq)]
pub struct Extracted {
    /// A kubeconfig with only this context, its cluster and its user, current-context set.
    pub kubeconfig: Mapping,
    pub cluster: String,
    pub user: Option<String>,
}

/// Context `context` of `kubeconfig`, alone in a kubeconfig of its own (as plumberctl's
/// extraction, but keeping every field: the trust rules decide what may go on).
pub fn extract(kubeconfig: &UserKubeconfig, context: &str) -> Result<Extracted, Error> {
    require(kubeconfig, context)?;
    let root = as_yaml(kubeconfig)?;
    let invalid = |why: String| Error::Usage(format!("{} {why}", kubeconfig.context(context)));
    let context_entry =
        entry(&root, "contexts", context).ok_or_else(|| invalid("has no body".into()))?;
    let body = context_entry
        .get("context")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("has no body".into()))?;
    let cluster = body
        .get("cluster")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| invalid("names no cluster".into()))?
        .to_string();
    let user = body
        .get("user")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .map(str::to_string);
    let cluster_entry = entry(&root, "clusters", &cluster).ok_or_else(|| {
        invalid(format!(
            "names cluster {cluster:?}, which is not in clusters"
        ))
    })?;
    let mut out = Mapping::new();
    out.insert("apiVersion".into(), "v1".into());
    out.insert("kind".into(), "Config".into());
    out.insert(
        "clusters".into(),
        Value::Array(vec![Value::Object(cluster_entry.clone())]),
    );
    let users = match &user {
        Some(user) => {
            let user_entry = entry(&root, "users", user)
                .ok_or_else(|| invalid(format!("names user {user:?}, which is not in users")))?;
            vec![Value::Object(user_entry.clone())]
        }
        None => Vec::new(),
    };
    out.insert("users".into(), Value::Array(users));
    out.insert(
        "contexts".into(),
        Value::Array(vec![Value::Object(context_entry.clone())]),
    );
    out.insert("current-context".into(), context.into());
    Ok(Extracted {
        kubeconfig: out,
        cluster,
        user,
    })
}

/// The server URL and inline CA (base64) of `context`'s cluster, for a kubeconfig that others
/// will use to reach it. A CA file of the user is read and inlined; `insecure-skip-tls-verify`
/// is refused (readers would refuse it).
pub fn server_and_ca(
    kubeconfig: &UserKubeconfig,
    context: &str,
) -> Result<(String, Option<String>), Error> {
    let extracted = extract(kubeconfig, context)?;
    let cluster = entry(&extracted.kubeconfig, "clusters", &extracted.cluster)
        .and_then(|e| e.get("cluster"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let server = cluster
        .get("server")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            Error::Usage(format!(
                "cluster {:?} of {} has no server",
                extracted.cluster,
                kubeconfig.context(context)
            ))
        })?
        .to_string();
    if cluster
        .get("insecure-skip-tls-verify")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return Err(Error::Failed(format!(
            "cluster {:?} of {} sets insecure-skip-tls-verify: peers would not verify it; give \
             it certificate-authority-data",
            extracted.cluster,
            kubeconfig.context(context)
        )));
    }
    let ca = match (
        cluster
            .get("certificate-authority-data")
            .and_then(Value::as_str),
        cluster.get("certificate-authority").and_then(Value::as_str),
    ) {
        (Some(data), _) => Some(data.to_string()),
        (None, Some(file)) => {
            let pem = std::fs::read(file).map_err(|e| {
                Error::Failed(format!(
                    "cannot read certificate-authority {file} of {}: {e}",
                    kubeconfig.context(context)
                ))
            })?;
            Some(xcc_kube::wire::encode_base64(pem))
        }
        (None, None) => None,
    };
    Ok((server, ca))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: first
  cluster: {server: 'https://127.0.0.1:6443', certificate-authority-data: Q0E=}
- name: second
  cluster: {server: 'https://127.0.0.1:6444', certificate-authority-data: Q0I=}
- name: filed
  cluster: {server: 'https://127.0.0.1:6445', certificate-authority: /nonexistent/ca.crt}
users:
- name: admin
  user: {token: secret-token}
- name: cert
  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}
- name: runner
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: get-token}
contexts:
- name: first
  context: {cluster: first, user: admin}
- name: second
  context: {cluster: second, user: cert, namespace: team-a}
- name: exec
  context: {cluster: second, user: runner}
- name: filed
  context: {cluster: filed, user: admin}
current-context: first
";

    /// Where the fixture says it was read from.
    pub const FILE: &str = "/home/me/.kube/config";

    /// `text`, as read from [`FILE`].
    pub fn read(text: &str) -> UserKubeconfig {
        UserKubeconfig {
            kubeconfig: Kubeconfig::from_yaml(text).unwrap(),
            file: FILE.into(),
        }
    }

    pub fn kubeconfig() -> UserKubeconfig {
        read(KUBECONFIG)
    }

    /// kube takes `server: s3cr3t` as an authority; the error says it is no URL, without it.
    #[tokio::test]
    async fn a_server_that_is_no_url_is_refused_without_repeating_it() {
        let kc = read(&KUBECONFIG.replace("https://127.0.0.1:6443", "s3cr3t"));
        let Err(e) = client(&kc, "first", Duration::from_secs(1)).await else {
            panic!("a client for server s3cr3t");
        };
        let text = e.to_string();
        assert!(text.contains("not an http:// or https:// URL"), "{text}");
        assert!(text.contains("context \"first\""), "{text}");
        assert!(text.contains(FILE), "{text}");
        assert!(!text.contains("s3cr3t"), "{text}");
    }

    #[test]
    fn an_extracted_context_keeps_tokens_and_certificates() {
        let kc = kubeconfig();
        let first = extract(&kc, "first").unwrap();
        assert_eq!(first.cluster, "first");
        assert_eq!(first.user.as_deref(), Some("admin"));
        let user = entry(&first.kubeconfig, "users", "admin").unwrap();
        assert_eq!(user["user"]["token"], "secret-token");
        assert_eq!(first.kubeconfig["current-context"], "first");
        assert_eq!(first.kubeconfig["clusters"].as_array().unwrap().len(), 1);

        let second = extract(&kc, "second").unwrap();
        let user = entry(&second.kubeconfig, "users", "cert").unwrap();
        assert_eq!(user["user"]["client-key-data"], "S0VZ");
        let context = entry(&second.kubeconfig, "contexts", "second").unwrap();
        assert_eq!(context["context"]["namespace"], "team-a");
    }

    #[test]
    fn unknown_contexts_are_usage_errors_naming_the_known_ones() {
        let kc = kubeconfig();
        let e = extract(&kc, "nope").unwrap_err();
        assert_eq!(e.exit_code(), crate::exit::USAGE);
        assert!(e.to_string().contains("exec, filed, first, second"), "{e}");
        assert!(e.to_string().contains(FILE), "{e}");
        assert_eq!(pick(&kc, None).unwrap(), "first");
    }

    #[test]
    fn server_and_ca_inline_the_ca() {
        let kc = kubeconfig();
        let (server, ca) = server_and_ca(&kc, "second").unwrap();
        assert_eq!(server, "https://127.0.0.1:6444");
        assert_eq!(ca.as_deref(), Some("Q0I="));
        let e = server_and_ca(&kc, "filed").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ca.crt"), "{e}");
        assert!(e.to_string().contains(FILE), "{e}");
    }

    #[test]
    fn the_namespace_is_the_contexts_else_default() {
        let kubeconfig: Kubeconfig = xcc_kube::yaml::from_str(
            "apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]
users: [{name: u, user: {}}]
contexts:
- {name: plain, context: {cluster: c, user: u}}
- {name: team, context: {cluster: c, user: u, namespace: team-a}}
",
        )
        .unwrap();
        assert_eq!(namespace(&kubeconfig, "team"), "team-a");
        assert_eq!(namespace(&kubeconfig, "plain"), "default");
    }
}

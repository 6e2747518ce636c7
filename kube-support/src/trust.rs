//! The trust boundary: kubeconfig text from a Secret becomes a client only here.
//!
//! A kubeconfig stored in a Secret is data written by whoever may write that Secret (a namespace
//! user creating a SecretImport, a peer cluster of a group, a Cluster API provider). Handed
//! unfiltered to a client library it is also code and a file reader: `exec` and `auth-provider`
//! run programs inside our process, `tokenFile` and the other file paths read our pod's files (its
//! own ServiceAccount token) and send them to any `server`, `proxy-url` reroutes our traffic, and
//! `insecure-skip-tls-verify` hands our credentials to whoever answers. So only the entries of the
//! selected context are read, each field against an allow-list, and the client is built from a
//! fresh kubeconfig holding just the accepted fields: nothing is run or read before the check and
//! nothing else reaches the client library.
//!
//! Accepted: `server` (https), `certificate-authority-data`, `tls-server-name`,
//! `disable-compression`; `token`, `client-certificate-data` with `client-key-data`; the
//! context's `namespace`; `extensions` (ignored). Refused unless an operator flag allows it:
//! `proxy-url` (`--allow-peer-proxy`), `insecure-skip-tls-verify: true` and plain `http://`
//! servers (`--allow-insecure-peers`; the client then says it is [`PeerTls::Unverified`]).
//! Refused always: everything else, named in the error.

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Client, Config, ResourceExt,
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::{Map, Value};

use crate::KubeconfigError;

type Mapping = Map<String, Value>;

/// What an operator allows in kubeconfigs read from Secrets, beyond inline credentials.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::Args)]
#[command(next_help_heading = "Kubeconfigs from Secrets (peer clusters)")]
pub struct PeerTrust {
    /// Accept `proxy-url` in kubeconfigs read from Secrets. Off by default: whoever writes such a
    /// Secret could route this process's requests (and credentials) through a host of their choice.
    #[arg(long, env = "XCC_ALLOW_PEER_PROXY")]
    pub allow_peer_proxy: bool,

    /// Accept kubeconfigs from Secrets with `insecure-skip-tls-verify: true` or a plain `http://`
    /// server. Off by default: the peer's identity is then not verified, so anyone on the path
    /// can impersonate it and read the credentials. Objects using such a peer carry the condition
    /// `InsecurePeer=True`.
    #[arg(long, env = "XCC_ALLOW_INSECURE_PEERS")]
    pub allow_insecure_peers: bool,
}

/// Whether the peer's identity is verified on every connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerTls {
    /// TLS with the kubeconfig's CA (or the system roots).
    Verified,
    /// `insecure-skip-tls-verify` or plain HTTP, allowed by `--allow-insecure-peers`.
    Unverified,
}

/// Condition type set to True on objects whose peer is [`PeerTls::Unverified`].
pub const INSECURE_PEER_CONDITION: &str = "InsecurePeer";
/// Reason of [`INSECURE_PEER_CONDITION`].
pub const INSECURE_PEER_REASON: &str = "TLSNotVerified";

/// A client for a peer, as the gate built it.
#[derive(Clone)]
pub struct PeerClient {
    /// The client.
    pub client: Client,
    /// `namespace/name@<fingerprint>`: the kubeconfig Secret and a hash of what the client
    /// connects with (server, CA, TLS settings, credentials). It changes when the client does,
    /// and only then: a Secret written again with the same kubeconfig (a new resourceVersion, or
    /// deleted and made again) keeps it, so nothing built on the client is restarted.
    pub identity: String,
    /// The API server's URL: peers behind one server share its reachability.
    pub server: String,
    /// Whether the server's identity is verified.
    pub tls: PeerTls,
}

impl std::fmt::Debug for PeerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerClient")
            .field("identity", &self.identity)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl PeerClient {
    /// Message of [`INSECURE_PEER_CONDITION`] for this peer, `None` when it is verified.
    pub fn insecure_message(&self) -> Option<String> {
        let secret = self.identity.split('@').next().unwrap_or_default();
        (self.tls == PeerTls::Unverified).then(|| {
            format!(
                "the kubeconfig of Secret {secret} does not verify the server's certificate \
                 (allowed by --allow-insecure-peers): anyone on the path can impersonate the peer"
            )
        })
    }
}

/// Data keys a kubeconfig Secret may use, in the order they are tried: `kubeconfig` (the usual
/// name, cluster-registry's), `value` (Cluster API's `<cluster>-kubeconfig`), `config`.
pub const KUBECONFIG_KEYS: [&str; 3] = ["kubeconfig", "value", "config"];

/// The key of `secret` holding the kubeconfig: the first of [`KUBECONFIG_KEYS`] present, or the
/// first one (so that the error names it) when none is.
pub fn kubeconfig_key(secret: &Secret) -> &'static str {
    let data = secret.data.as_ref();
    let string_data = secret.string_data.as_ref();
    KUBECONFIG_KEYS
        .into_iter()
        .find(|k| {
            data.is_some_and(|d| d.contains_key(*k))
                || string_data.is_some_and(|d| d.contains_key(*k))
        })
        .unwrap_or(KUBECONFIG_KEYS[0])
}

/// `namespace/name` of a Secret.
pub fn secret_name(secret: &Secret) -> String {
    format!(
        "{}/{}",
        secret.namespace().unwrap_or_default(),
        secret.name_any()
    )
}

/// A kubeconfig Secret that passed the trust gate, before a client is built from it.
pub struct Screened {
    /// What [`PeerClient::identity`] will be.
    pub identity: String,
    kubeconfig: Kubeconfig,
    tls: PeerTls,
    origin: String,
}

/// The client for the peer whose kubeconfig is under `key` of `secret`, if `trust` accepts it.
/// The only way any xcc component turns a kubeconfig from an object into a client.
pub async fn peer_client(
    secret: &Secret,
    key: &str,
    trust: PeerTrust,
) -> Result<PeerClient, KubeconfigError> {
    build(screen_secret(secret, key, trust)?).await
}

/// The trust gate alone: the kubeconfig under `key` of `secret`, checked, with the identity of
/// the client it gives (so that a cache can tell whether it already holds that client).
pub fn screen_secret(
    secret: &Secret,
    key: &str,
    trust: PeerTrust,
) -> Result<Screened, KubeconfigError> {
    let name = secret_name(secret);
    let origin = format!("Secret {name} key {key:?}");
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
            secret: name.clone(),
            key: key.to_string(),
        })?;
    let (kubeconfig, tls, fingerprint) = screen(data, trust).map_err(|refusal| match refusal {
        Refusal::Parse(problem) => KubeconfigError::Parse {
            origin: origin.clone(),
            problem,
        },
        Refusal::Invalid(why) => KubeconfigError::Invalid {
            origin: origin.clone(),
            why,
        },
        Refusal::Field { field, why } => KubeconfigError::Rejected {
            origin: origin.clone(),
            field,
            why,
        },
    })?;
    Ok(Screened {
        identity: format!("{name}@{fingerprint:016x}"),
        kubeconfig,
        tls,
        origin,
    })
}

/// The client of a screened kubeconfig.
pub async fn build(screened: Screened) -> Result<PeerClient, KubeconfigError> {
    let Screened {
        identity,
        kubeconfig,
        tls,
        origin,
    } = screened;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| KubeconfigError::config(origin.clone(), &source))?;
    let server = config.cluster_url.to_string();
    let client =
        crate::h2::client(config).map_err(|source| KubeconfigError::client(origin, &source))?;
    Ok(PeerClient {
        client,
        identity,
        server,
        tls,
    })
}

/// Checks kubeconfig `text` (its selected context) against the trust rules without building a
/// client: what a tool that writes kubeconfig Secrets (kubectl-xcc) runs before writing one, so
/// that nothing the readers would refuse is ever stored. `origin` names the text in errors.
pub fn check(text: &[u8], origin: &str, trust: PeerTrust) -> Result<PeerTls, KubeconfigError> {
    screen(text, trust)
        .map(|(_, tls, _)| tls)
        .map_err(|refusal| match refusal {
            Refusal::Parse(problem) => KubeconfigError::Parse {
                origin: origin.to_string(),
                problem,
            },
            Refusal::Invalid(why) => KubeconfigError::Invalid {
                origin: origin.to_string(),
                why,
            },
            Refusal::Field { field, why } => KubeconfigError::Rejected {
                origin: origin.to_string(),
                field,
                why,
            },
        })
}

/// Why [`screen`] refused a kubeconfig.
#[derive(Debug)]
enum Refusal {
    Parse(crate::yaml::Error),
    /// Not a usable kubeconfig (no context, a missing entry, a wrong type).
    Invalid(String),
    /// A field the trust rules do not accept.
    Field {
        field: String,
        why: String,
    },
}

fn field(field: impl Into<String>, why: impl Into<String>) -> Refusal {
    Refusal::Field {
        field: field.into(),
        why: why.into(),
    }
}

const INLINE_ONLY: &str = "only inline credentials are accepted: token, or client-certificate-data \
     with client-key-data";

/// Checks kubeconfig `text` against the trust rules without running or reading anything, and
/// returns a kubeconfig holding only the accepted fields of its selected context.
/// The accepted kubeconfig, its TLS mode, and the fingerprint of what it connects with.
fn screen(text: &[u8], trust: PeerTrust) -> Result<(Kubeconfig, PeerTls, u64), Refusal> {
    let root: Value = crate::yaml::from_slice(text).map_err(Refusal::Parse)?;
    let root = root
        .as_object()
        .ok_or_else(|| Refusal::Invalid("not a YAML mapping".into()))?;
    let (context, cluster_name, user_name) = selected_context(root)?;
    let (cluster, tls) = screen_cluster(root, cluster_name, trust)?;
    let user = screen_user(root, user_name)?;
    check_types(context, cluster, user)?;

    let out = accepted_kubeconfig(context, cluster, user);
    let fingerprint = fingerprint(&out, tls);
    // The types were checked; serde's message would quote the value, so only its kind is said.
    let kubeconfig = serde_json::from_value(out).map_err(|e| {
        Refusal::Invalid(format!(
            "a field has the wrong type: {}",
            crate::yaml::redact_serde_message(&e.to_string())
        ))
    })?;
    Ok((kubeconfig, tls, fingerprint))
}

/// Refuses a kept field of the wrong type, naming it (and never its value).
fn check_types(
    context: &Mapping,
    cluster: &Mapping,
    user: Option<&Mapping>,
) -> Result<(), Refusal> {
    let strings = [
        (context, "context", "namespace"),
        (cluster, "cluster", "server"),
        (cluster, "cluster", "certificate-authority-data"),
        (cluster, "cluster", "tls-server-name"),
        (cluster, "cluster", "proxy-url"),
    ]
    .into_iter()
    .chain(user.into_iter().flat_map(|user| {
        ["token", "client-certificate-data", "client-key-data"].map(|key| (user, "user", key))
    }));
    for (map, entry, key) in strings {
        if map.get(key).is_some_and(|v| !v.is_string()) {
            return Err(Refusal::Invalid(format!(
                "the {entry}'s {key} is not a string"
            )));
        }
    }
    if cluster
        .get("disable-compression")
        .is_some_and(|v| !v.is_boolean())
    {
        return Err(Refusal::Invalid(
            "the cluster's disable-compression is not a boolean".into(),
        ));
    }
    Ok(())
}

/// The context `current-context` names (or the only one), with the names of its cluster and
/// its user.
fn selected_context(root: &Mapping) -> Result<(&Mapping, &str, Option<&str>), Refusal> {
    let contexts = named_entries(root, "contexts", "context")?;
    let current = str_field(root, "current-context").filter(|c| !c.is_empty());
    let (context_name, context) = match current {
        Some(current) => contexts
            .iter()
            .find(|(n, _)| *n == current)
            .cloned()
            .ok_or_else(|| {
                Refusal::Invalid(format!("current-context {current:?} is not in contexts"))
            })?,
        None if contexts.len() == 1 => contexts[0],
        None => {
            return Err(Refusal::Invalid(
                "no current-context, and not exactly one context".into(),
            ));
        }
    };
    let where_ = format!("context {context_name:?}");
    check_keys(
        context,
        &where_,
        &["cluster", "user", "namespace", "extensions"],
        |_| None,
    )?;
    let cluster_name = str_field(context, "cluster")
        .ok_or_else(|| Refusal::Invalid(format!("{where_} names no cluster")))?;
    Ok((context, cluster_name, str_field(context, "user")))
}

/// The cluster entry `cluster_name`, checked against the trust rules, and the TLS mode its
/// server is reached with.
fn screen_cluster<'a>(
    root: &'a Mapping,
    cluster_name: &str,
    trust: PeerTrust,
) -> Result<(&'a Mapping, PeerTls), Refusal> {
    let clusters = named_entries(root, "clusters", "cluster")?;
    let (_, cluster) = clusters
        .iter()
        .find(|(n, _)| *n == cluster_name)
        .ok_or_else(|| Refusal::Invalid(format!("cluster {cluster_name:?} is not in clusters")))?;
    let where_ = format!("cluster {cluster_name:?}");
    check_keys(
        cluster,
        &where_,
        &[
            "server",
            "certificate-authority-data",
            "tls-server-name",
            "disable-compression",
            "insecure-skip-tls-verify",
            "proxy-url",
            "extensions",
        ],
        |key| match key {
            "certificate-authority" => Some(
                "is a file path, which would be read from this pod: put the CA inline in \
                 certificate-authority-data"
                    .into(),
            ),
            _ => None,
        },
    )?;
    let mut tls = server_tls(cluster, &where_, trust)?;
    if let Some(insecure) = cluster.get("insecure-skip-tls-verify") {
        match insecure.as_bool() {
            Some(false) => {}
            Some(true) if trust.allow_insecure_peers => tls = PeerTls::Unverified,
            Some(true) => {
                return Err(field(
                    format!("{where_} insecure-skip-tls-verify"),
                    "is true: the server's certificate would not be checked, so anyone on the \
                     path could impersonate the peer; set certificate-authority-data instead (or \
                     start with --allow-insecure-peers)",
                ));
            }
            None => {
                return Err(Refusal::Invalid(format!(
                    "{where_} insecure-skip-tls-verify is not a boolean"
                )));
            }
        }
    }
    if cluster.contains_key("proxy-url") && !trust.allow_peer_proxy {
        return Err(field(
            format!("{where_} proxy-url"),
            "would route this process's requests through a host the Secret chooses; remove it \
             (or start with --allow-peer-proxy)",
        ));
    }
    Ok((cluster, tls))
}

/// The TLS mode the scheme of the cluster's `server` URL allows.
fn server_tls(cluster: &Mapping, where_: &str, trust: PeerTrust) -> Result<PeerTls, Refusal> {
    let server = str_field(cluster, "server")
        .ok_or_else(|| Refusal::Invalid(format!("{where_} has no server")))?;
    let scheme = server
        .split_once("://")
        .map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("https") => Ok(PeerTls::Verified),
        Some("http") if trust.allow_insecure_peers => Ok(PeerTls::Unverified),
        Some("http") => Err(field(
            format!("{where_} server"),
            "is plain http://: credentials would travel unencrypted to an unverified peer; \
             use https (or start with --allow-insecure-peers)",
        )),
        // The URL is not quoted: whatever was put there is the Secret's, not a log's.
        Some(scheme) if scheme.chars().all(|c| c.is_ascii_alphanumeric()) && scheme.len() < 16 => {
            Err(field(
                format!("{where_} server"),
                format!("is a {scheme}:// URL, not an https:// one"),
            ))
        }
        _ => Err(field(format!("{where_} server"), "is not an https:// URL")),
    }
}

/// The user entry `user_name` (none when the context names none), checked: inline credentials
/// only.
fn screen_user<'a>(
    root: &'a Mapping,
    user_name: Option<&str>,
) -> Result<Option<&'a Mapping>, Refusal> {
    let users = named_entries(root, "users", "user")?;
    let Some(user_name) = user_name else {
        return Ok(None);
    };
    let user = users
        .iter()
        .find(|(n, _)| *n == user_name)
        .map(|(_, u)| *u)
        .ok_or_else(|| Refusal::Invalid(format!("user {user_name:?} is not in users")))?;
    let where_ = format!("user {user_name:?}");
    check_keys(
        user,
        &where_,
        &[
            "token",
            "client-certificate-data",
            "client-key-data",
            "extensions",
        ],
        |key| {
            let why = match key {
                "exec" => "would run a program inside this process",
                "auth-provider" => "would run an authentication plugin inside this process",
                "tokenFile" | "client-certificate" | "client-key" => {
                    "is a file path, which would be read from this pod (and its content sent \
                     to the server)"
                }
                "username" | "password" => "is basic authentication",
                "as" | "as-uid" | "as-groups" | "as-user-extra" => "is impersonation",
                _ => return None,
            };
            Some(format!("{why}; {INLINE_ONLY}"))
        },
    )?;
    if user.contains_key("client-certificate-data") != user.contains_key("client-key-data") {
        return Err(Refusal::Invalid(format!(
            "{where_} needs both client-certificate-data and client-key-data, or neither"
        )));
    }
    Ok(Some(user))
}

/// A fresh kubeconfig with the accepted fields only: nothing else reaches the client library.
fn accepted_kubeconfig(context: &Mapping, cluster: &Mapping, user: Option<&Mapping>) -> Value {
    let keep = |from: &Mapping, keys: &[&str]| -> Mapping {
        keys.iter()
            .filter_map(|k| Some((k.to_string(), from.get(*k)?.clone())))
            .collect()
    };
    let mut context_out = Mapping::new();
    context_out.insert("cluster".into(), "peer".into());
    context_out.insert("user".into(), "peer".into());
    if let Some(namespace) = context.get("namespace") {
        context_out.insert("namespace".into(), namespace.clone());
    }
    let cluster_out = keep(
        cluster,
        &[
            "server",
            "certificate-authority-data",
            "tls-server-name",
            "disable-compression",
            "insecure-skip-tls-verify",
            "proxy-url",
        ],
    );
    let user_out = user
        .map(|u| keep(u, &["token", "client-certificate-data", "client-key-data"]))
        .unwrap_or_default();
    let entry = |kind: &str, body: Mapping| -> Value {
        let mut m = Mapping::new();
        m.insert("name".into(), "peer".into());
        m.insert(kind.into(), Value::Object(body));
        Value::Array(vec![Value::Object(m)])
    };
    let mut out = Mapping::new();
    out.insert("apiVersion".into(), "v1".into());
    out.insert("kind".into(), "Config".into());
    out.insert("clusters".into(), entry("cluster", cluster_out));
    out.insert("users".into(), entry("user", user_out));
    out.insert("contexts".into(), entry("context", context_out));
    out.insert("current-context".into(), "peer".into());
    Value::Object(out)
}

/// A hash of the fields a client is built from (the screened kubeconfig holds nothing else):
/// equal for equal connections, whatever else the Secret or the original kubeconfig carries.
/// Only the hash is kept, never the credentials, so identities can be logged.
fn fingerprint(screened: &Value, tls: PeerTls) -> u64 {
    use std::hash::{Hash, Hasher};
    // `DefaultHasher::new()` has fixed keys: the same value hashes the same in one process,
    // which is all a cache key needs.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    screened.to_string().hash(&mut hasher);
    (tls == PeerTls::Verified).hash(&mut hasher);
    hasher.finish()
}

fn str_field<'a>(map: &'a Mapping, key: &str) -> Option<&'a str> {
    map.get(key).and_then(Value::as_str)
}

/// The `(name, body)` pairs of list `list` (`clusters`, `users`, `contexts`), whose bodies sit
/// under `body`.
fn named_entries<'a>(
    root: &'a Mapping,
    list: &str,
    body: &str,
) -> Result<Vec<(&'a str, &'a Mapping)>, Refusal> {
    let Some(entries) = root.get(list) else {
        return Ok(Vec::new());
    };
    let entries = match entries {
        Value::Null => return Ok(Vec::new()),
        Value::Array(entries) => entries,
        _ => return Err(Refusal::Invalid(format!("{list} is not a list"))),
    };
    entries
        .iter()
        .map(|entry| {
            let entry = entry
                .as_object()
                .ok_or_else(|| Refusal::Invalid(format!("an entry of {list} is not a mapping")))?;
            let name = str_field(entry, "name")
                .ok_or_else(|| Refusal::Invalid(format!("an entry of {list} has no name")))?;
            let body = entry.get(body).and_then(Value::as_object).ok_or_else(|| {
                Refusal::Invalid(format!("entry {name:?} of {list} has no {body} mapping"))
            })?;
            Ok((name, body))
        })
        .collect()
}

/// Refuses any key of `map` outside `allowed`; `explain` says why a known key is refused.
fn check_keys(
    map: &Mapping,
    where_: &str,
    allowed: &[&str],
    explain: impl Fn(&str) -> Option<String>,
) -> Result<(), Refusal> {
    for key in map.keys() {
        if allowed.contains(&key.as_str()) {
            continue;
        }
        let why = explain(key)
            .unwrap_or_else(|| format!("is not a field xcc accepts here ({})", allowed.join(", ")));
        return Err(field(format!("{where_} {key}"), why));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    /// A kubeconfig whose cluster and user bodies are `cluster` and `user` (flow mappings).
    fn kubeconfig(cluster: &str, user: &str) -> String {
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: other
  cluster: {{server: 'https://elsewhere:6443', certificate-authority: /etc/passwd}}
- name: c
  cluster: {cluster}
users:
- name: other
  user: {{exec: {{command: touch, args: [/tmp/never]}}}}
- name: u
  user: {user}
contexts:
- name: other
  context: {{cluster: other, user: other}}
- name: x
  context: {{cluster: c, user: u, namespace: team-1}}
current-context: x
"
        )
    }

    const SERVER: &str = "server: 'https://127.0.0.1:6443'";

    fn screened(cluster: &str, user: &str, trust: PeerTrust) -> Result<PeerTls, Refusal> {
        screen(kubeconfig(cluster, user).as_bytes(), trust).map(|(_, tls, _)| tls)
    }

    fn refused_field(cluster: &str, user: &str, trust: PeerTrust) -> String {
        match screened(cluster, user, trust) {
            Err(Refusal::Field { field, .. }) => field,
            other => panic!("expected a refused field, got {other:?}"),
        }
    }

    fn body(fields: &[&str]) -> String {
        format!("{{{}}}", fields.join(", "))
    }

    #[test]
    fn inline_credentials_are_accepted() {
        let cluster = body(&[
            SERVER,
            "certificate-authority-data: Zm9v",
            "tls-server-name: api.example",
            "disable-compression: true",
            "insecure-skip-tls-verify: false",
            "extensions: []",
        ]);
        for user in [
            "{token: abc}",
            "{client-certificate-data: Zm9v, client-key-data: YmFy}",
            "{}",
            "{token: abc, extensions: []}",
        ] {
            let tls = screened(&cluster, user, PeerTrust::default()).expect(user);
            assert_eq!(tls, PeerTls::Verified, "{user}");
        }
    }

    #[test]
    fn only_the_selected_context_is_read_and_kept() {
        // The other context's exec user and CA file are never looked at, nor passed on.
        let (kubeconfig, _, _) = screen(
            kubeconfig(&body(&[SERVER]), "{token: abc}").as_bytes(),
            PeerTrust::default(),
        )
        .unwrap();
        assert_eq!(kubeconfig.clusters.len(), 1);
        assert_eq!(kubeconfig.auth_infos.len(), 1);
        let user = kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.exec.is_none() && user.token.is_some());
        assert_eq!(
            kubeconfig.contexts[0]
                .context
                .as_ref()
                .unwrap()
                .namespace
                .as_deref(),
            Some("team-1")
        );
    }

    #[test]
    fn programs_and_files_are_refused_whatever_the_flags() {
        let everything = PeerTrust {
            allow_peer_proxy: true,
            allow_insecure_peers: true,
        };
        let cluster = body(&[SERVER]);
        for (user, key) in [
            ("{exec: {command: touch, args: [/tmp/x]}}", "exec"),
            ("{auth-provider: {name: gcp}}", "auth-provider"),
            (
                "{tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}",
                "tokenFile",
            ),
            (
                "{client-certificate: /a, client-key: /b}",
                "client-certificate",
            ),
            (
                "{client-certificate-data: Zm9v, client-key: /b}",
                "client-key",
            ),
            // Several refused keys: the first in key order is named.
            ("{username: a, password: b}", "password"),
            ("{token: a, as: system:admin}", "as"),
            ("{token: a, as-groups: [system:masters]}", "as-groups"),
            ("{token: a, something-new: x}", "something-new"),
        ] {
            for trust in [PeerTrust::default(), everything] {
                assert_eq!(
                    refused_field(&cluster, user, trust),
                    format!("user \"u\" {key}"),
                    "{user}"
                );
            }
        }
        for trust in [PeerTrust::default(), everything] {
            assert_eq!(
                refused_field(
                    &body(&[SERVER, "certificate-authority: /etc/ssl/ca.pem"]),
                    "{}",
                    trust
                ),
                "cluster \"c\" certificate-authority"
            );
        }
    }

    #[test]
    fn proxy_and_insecure_need_their_flag() {
        let proxy = body(&[SERVER, "proxy-url: 'http://10.0.0.1:3128'"]);
        assert_eq!(
            refused_field(&proxy, "{}", PeerTrust::default()),
            "cluster \"c\" proxy-url"
        );
        let allow_proxy = PeerTrust {
            allow_peer_proxy: true,
            ..Default::default()
        };
        assert_eq!(
            screened(&proxy, "{}", allow_proxy).unwrap(),
            PeerTls::Verified
        );

        let insecure = body(&[SERVER, "insecure-skip-tls-verify: true"]);
        let plain = body(&["server: 'http://127.0.0.1:8080'"]);
        let allow_insecure = PeerTrust {
            allow_insecure_peers: true,
            ..Default::default()
        };
        assert_eq!(
            refused_field(&insecure, "{}", PeerTrust::default()),
            "cluster \"c\" insecure-skip-tls-verify"
        );
        assert_eq!(
            refused_field(&plain, "{}", PeerTrust::default()),
            "cluster \"c\" server"
        );
        for cluster in [&insecure, &plain] {
            assert_eq!(
                screened(cluster, "{token: a}", allow_insecure).unwrap(),
                PeerTls::Unverified
            );
            // Insecure does not mean proxy, nor the other way round.
            assert!(screened(cluster, "{}", allow_proxy).is_err());
        }
    }

    #[test]
    fn broken_kubeconfigs_say_what_is_wrong() {
        let invalid = |text: &str| match screen(text.as_bytes(), PeerTrust::default()) {
            Err(Refusal::Invalid(why)) => why,
            other => panic!("expected Invalid, got {other:?}"),
        };
        assert!(invalid("[1, 2]").contains("mapping"));
        assert!(invalid("apiVersion: v1\nkind: Config\n").contains("current-context"));
        assert!(
            invalid(
                &kubeconfig(&body(&[SERVER]), "{token: a}")
                    .replace("current-context: x", "current-context: y")
            )
            .contains("\"y\"")
        );
        assert!(invalid(&kubeconfig("{}", "{token: a}")).contains("no server"));
        assert!(
            invalid(&kubeconfig(
                &body(&[SERVER]),
                "{client-certificate-data: Zm9v}"
            ))
            .contains("client-key-data")
        );
        assert!(
            invalid(&kubeconfig(
                &body(&[SERVER, "insecure-skip-tls-verify: maybe"]),
                "{}"
            ))
            .contains("boolean")
        );
        assert!(matches!(
            screen(b"{not: [yaml", PeerTrust::default()),
            Err(Refusal::Parse(_))
        ));
        assert!(matches!(
            screened(&body(&["server: 'ftp://x'"]), "{}", PeerTrust::default()),
            Err(Refusal::Field { .. })
        ));
    }

    fn secret(key: &str, value: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("cluster-a-kubeconfig".into()),
                namespace: Some("dev-team".into()),
                uid: Some("uid-1".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            data: Some([(key.to_string(), ByteString(value.as_bytes().to_vec()))].into()),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_good_secret_gives_a_client_and_its_identity() {
        let text = kubeconfig(&body(&[SERVER]), "{token: s3cret-token}");
        let peer = peer_client(&secret("value", &text), "value", PeerTrust::default())
            .await
            .unwrap();
        assert!(
            peer.identity.starts_with("dev-team/cluster-a-kubeconfig@"),
            "{}",
            peer.identity
        );
        assert!(!peer.identity.contains("s3cret"), "no credentials in it");
        // Written again (another resourceVersion, key or UID), with other contexts and names
        // around the same connection: the same identity. Another token: another one.
        let renamed = text
            .replace("- name: c\n", "- name: renamed\n")
            .replace("{cluster: c,", "{cluster: renamed,");
        assert_ne!(renamed, text);
        let mut again = secret("kubeconfig", &renamed);
        again.metadata.resource_version = Some("8".into());
        again.metadata.uid = Some("uid-2".into());
        let same = peer_client(&again, "kubeconfig", PeerTrust::default())
            .await
            .unwrap();
        assert_eq!(same.identity, peer.identity);
        let other = kubeconfig(&body(&[SERVER]), "{token: s3cret-other}");
        let other = peer_client(&secret("value", &other), "value", PeerTrust::default())
            .await
            .unwrap();
        assert_ne!(other.identity, peer.identity);
        assert_eq!(peer.tls, PeerTls::Verified);
        assert_eq!(peer.insecure_message(), None);
    }

    #[tokio::test]
    async fn errors_name_the_secret_the_field_and_the_reason() {
        let trust = PeerTrust::default();
        let text = kubeconfig(&body(&[SERVER]), "{tokenFile: /var/run/token}");
        let err = peer_client(&secret("value", &text), "value", trust)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "KubeconfigRejected");
        let message = err.to_string();
        assert!(
            message.contains("dev-team/cluster-a-kubeconfig"),
            "{message}"
        );
        assert!(message.contains("tokenFile"), "{message}");

        let err = peer_client(&secret("other", &text), "value", trust)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "KubeconfigMissing");

        let err = peer_client(&secret("value", "{not: [yaml"), "value", trust)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "KubeconfigInvalid");
        let err = peer_client(&secret("value", "apiVersion: v1\n"), "value", trust)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "KubeconfigInvalid");
    }

    #[tokio::test]
    async fn an_allowed_insecure_peer_says_so() {
        let trust = PeerTrust {
            allow_insecure_peers: true,
            ..Default::default()
        };
        let text = kubeconfig(&body(&[SERVER, "insecure-skip-tls-verify: true"]), "{}");
        let peer = peer_client(&secret("kubeconfig", &text), "kubeconfig", trust)
            .await
            .unwrap();
        assert_eq!(peer.tls, PeerTls::Unverified);
        assert!(
            peer.insecure_message()
                .unwrap()
                .contains("dev-team/cluster-a-kubeconfig")
        );
    }

    #[tokio::test]
    async fn secrets_with_a_credential_in_every_kind_of_error_never_show_it() {
        use crate::kubeconfig::tests::{assert_clean, pem};
        const CANARY: &str = "s3cr3t-CANARY-9f1c";
        let token = format!("{{token: {CANARY}}}");
        let cases: Vec<(String, &[&str])> = vec![
            // An unclosed quote right after the token.
            (
                format!("users:\n- name: u\n  user: {{token: \"{CANARY}}}\n"),
                &["does not parse", "line 3"],
            ),
            (
                format!(
                    "current-context: x\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
                     clusters:\n- name: c\n  cluster: {{{SERVER}}}\nusers: {CANARY}\n"
                ),
                &["users is not a list"],
            ),
            (
                kubeconfig(&body(&[SERVER]), &format!("{{token: [{CANARY}]}}")),
                &["token is not a string"],
            ),
            (
                kubeconfig(
                    &body(&[SERVER, &format!("certificate-authority-data: '{CANARY}!'")]),
                    &token,
                ),
                &["certificate-authority-data is not valid base64"],
            ),
            (
                kubeconfig(
                    &body(&[
                        SERVER,
                        &format!("certificate-authority-data: {}", pem("CERTIFICATE")),
                    ]),
                    &token,
                ),
                &["certificate-authority-data"],
            ),
            (
                kubeconfig(
                    &body(&[SERVER]),
                    &format!(
                        "{{client-certificate-data: {}, client-key-data: '{CANARY}!'}}",
                        pem("CERTIFICATE")
                    ),
                ),
                &["client-key-data is not valid base64"],
            ),
            (
                kubeconfig(
                    &body(&[SERVER]),
                    &format!(
                        "{{client-certificate-data: {}, client-key-data: {}}}",
                        pem("CERTIFICATE"),
                        pem("PRIVATE KEY")
                    ),
                ),
                &["client-"],
            ),
            (
                kubeconfig(
                    &body(&[SERVER]),
                    &format!("{{token: {CANARY}, newfield: x}}"),
                ),
                &["newfield", "is not a field xcc accepts"],
            ),
            (
                kubeconfig(
                    &body(&[SERVER]),
                    &format!("{{exec: {{command: {CANARY}, args: [{CANARY}]}}}}"),
                ),
                &["exec", "would run a program"],
            ),
            (
                kubeconfig(
                    &body(&[SERVER]),
                    &format!(
                        "{{auth-provider: {{name: gcp, config: {{access-token: {CANARY}}}}}}}"
                    ),
                ),
                &["auth-provider"],
            ),
            (
                kubeconfig(&body(&[SERVER]), &format!("{{tokenFile: /{CANARY}}}")),
                &["tokenFile", "file path"],
            ),
            (
                kubeconfig(&body(&[&format!("server: '{CANARY}'")]), &token),
                &["server", "is not an https:// URL"],
            ),
        ];
        for (text, says) in cases {
            let error = peer_client(&secret("value", &text), "value", PeerTrust::default())
                .await
                .expect_err(&text);
            let mut says = says.to_vec();
            says.push("dev-team/cluster-a-kubeconfig");
            assert_clean(&error, &says);
            // kubectl-xcc checks the same before writing a Secret.
            if let Err(error) = check(text.as_bytes(), "context \"a\"", PeerTrust::default()) {
                assert_clean(&error, &[]);
            }
        }
    }

    #[test]
    fn the_kubeconfig_key_is_the_first_present() {
        assert_eq!(kubeconfig_key(&secret("value", "")), "value");
        assert_eq!(kubeconfig_key(&secret("config", "")), "config");
        assert_eq!(kubeconfig_key(&secret("other", "")), "kubeconfig");
    }
}

//! plumber's kubeconfig Secret: one kubeconfig holding every cluster as a context, as
//! `plumberctl` (and `kubectl xcc plumber`) writes it, where the original keeps it (Secret
//! `config` in namespace `kubeconfig`, key `config`: its `pkg/constants/const.go`).
//!
//! xcc 0.1 kept it in Secret `kubeconfig` of the plumber namespace; that Secret is still read,
//! for one release ([`Location::Legacy`]): a context in both is taken from the original's
//! location.
//!
//! Each context becomes a client through the one trust gate and the one peer-client cache: the
//! Secret is handed to [`PeerClients::client_for`] once per context, as a Secret named
//! `<secret>#<context>` whose kubeconfig selects that context, so the trust rules screen exactly
//! that context's entries and name the refused field, and the client is rebuilt only when the
//! Secret changes.

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::ResourceExt;
use serde_json::Value;

/// Namespace, name and data key of plumber's kubeconfig Secret (the original's).
pub const NAMESPACE: &str = "kubeconfig";
pub const SECRET: &str = "config";
pub const KEY: &str = "config";
/// Name of xcc 0.1's Secret, in the plumber namespace (read for one release).
pub const LEGACY_SECRET: &str = "kubeconfig";

/// Where a kubeconfig Secret is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Location {
    /// `kubeconfig/config`, where plumberctl and the original keep it; wins.
    Original,
    /// `<plumber namespace>/kubeconfig`, where xcc 0.1 kept it.
    Legacy,
}

impl Location {
    /// `(namespace, name)` of the Secret; `plumber_namespace` is the agent's
    /// `--plumber-namespace`.
    pub fn key(self, plumber_namespace: &str) -> (&str, &'static str) {
        match self {
            Location::Original => (NAMESPACE, SECRET),
            Location::Legacy => (plumber_namespace, LEGACY_SECRET),
        }
    }
}

/// One context of the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub context: String,
    pub cluster: String,
    pub user: String,
}

impl Entry {
    /// The ClusterDetector name: `<cluster>.<user>`, made a valid object name.
    pub fn detector(&self) -> String {
        object_name(&format!("{}.{}", self.cluster, self.user))
    }
}

/// `text` as an object name (a DNS subdomain): lower case, other characters `-`, at most 253.
pub fn object_name(text: &str) -> String {
    let mut name: String = text
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(253)
        .collect();
    while name.ends_with(['-', '.']) {
        name.pop();
    }
    while name.starts_with(['-', '.']) {
        name.remove(0);
    }
    name
}

/// Why the Secret's kubeconfig cannot be read as a whole.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("Secret {secret} has no key {KEY:?}")]
    MissingKey { secret: String },
    #[error("key {KEY:?} of Secret {secret} is not a kubeconfig: {why}")]
    Invalid { secret: String, why: String },
}

fn kubeconfig_text(secret: &Secret) -> Option<&[u8]> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(KEY))
        .map(|b| b.0.as_slice())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(KEY))
                .map(String::as_bytes)
        })
}

fn parse(secret: &Secret) -> Result<Value, Error> {
    let name = format!(
        "{}/{}",
        secret.namespace().unwrap_or_default(),
        secret.name_any()
    );
    let text = kubeconfig_text(secret).ok_or_else(|| Error::MissingKey {
        secret: name.clone(),
    })?;
    let root: Value = xcc_kube::yaml::from_slice(text).map_err(|e| Error::Invalid {
        secret: name.clone(),
        why: xcc_kube::bounded(&e),
    })?;
    if !root.is_object() {
        return Err(Error::Invalid {
            secret: name,
            why: "not a YAML mapping".into(),
        });
    }
    Ok(root)
}

/// Every context of the Secret, in its order. A context without a cluster or user name is
/// still listed (with an empty name), so that the trust gate says what is wrong with it.
pub fn entries(secret: &Secret) -> Result<Vec<Entry>, Error> {
    let root = parse(secret)?;
    let contexts = root
        .get("contexts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let field = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(contexts
        .iter()
        .filter_map(|c| {
            let context = c.get("name").and_then(Value::as_str)?.to_string();
            let body = c.get("context").cloned().unwrap_or(Value::Null);
            Some(Entry {
                context,
                cluster: field(&body, "cluster"),
                user: field(&body, "user"),
            })
        })
        .collect())
}

/// The Secret as the trust gate should see it for `context`: named `<name>#<context>`, with the
/// same UID and resourceVersion (so its client is cached until the Secret changes) and a
/// kubeconfig whose current context is `context`.
pub fn for_context(secret: &Secret, context: &str) -> Result<Secret, Error> {
    let mut root = parse(secret)?;
    if let Some(map) = root.as_object_mut() {
        map.insert("current-context".into(), Value::String(context.into()));
    }
    let text = xcc_kube::yaml::to_string(&root).map_err(|e| Error::Invalid {
        secret: secret.name_any(),
        why: xcc_kube::bounded(&e),
    })?;
    let mut one = Secret::default();
    one.metadata.name = Some(client_key(&secret.name_any(), context));
    one.metadata.namespace = secret.namespace();
    one.metadata.uid = secret.uid();
    one.metadata.resource_version = secret.resource_version();
    one.data = Some([(KEY.to_string(), ByteString(text.into_bytes()))].into());
    Ok(one)
}

/// The name under which the client of `context` is cached.
pub fn client_key(secret: &str, context: &str) -> String {
    format!("{secret}#{context}")
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const THREE: &str = "apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster: {server: 'https://127.0.0.1:6443', certificate-authority-data: Zm9v}
- name: v1262-cluster
  cluster: {server: 'https://127.0.0.1:6444', certificate-authority-data: Zm9v}
- name: v1252-cluster
  cluster: {server: 'https://127.0.0.1:6445', certificate-authority: /etc/ca.crt}
users:
- name: kubernetes-admin
  user: {token: a}
- name: kubernetes-admin2
  user: {token: b}
- name: kubernetes-admin3
  user: {exec: {command: aws}}
contexts:
- name: primary
  context: {cluster: kubernetes, user: kubernetes-admin}
- name: secondary1
  context: {cluster: v1262-cluster, user: kubernetes-admin2}
- name: secondary2
  context: {cluster: v1252-cluster, user: kubernetes-admin3}
current-context: primary
";

    pub fn secret(text: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(SECRET.into());
        s.metadata.namespace = Some(NAMESPACE.into());
        s.metadata.uid = Some("u".into());
        s.metadata.resource_version = Some("7".into());
        s.data = Some([(KEY.to_string(), ByteString(text.as_bytes().to_vec()))].into());
        s
    }

    #[test]
    fn every_context_is_a_detector_named_cluster_dot_user() {
        let found = entries(&secret(THREE)).unwrap();
        let names: Vec<_> = found.iter().map(Entry::detector).collect();
        assert_eq!(
            names,
            [
                "kubernetes.kubernetes-admin",
                "v1262-cluster.kubernetes-admin2",
                "v1252-cluster.kubernetes-admin3"
            ]
        );
        assert_eq!(found[1].context, "secondary1");
        assert_eq!(object_name("EKS:Cluster/a@b.User_"), "eks-cluster-a-b.user");
    }

    #[tokio::test]
    async fn each_context_passes_the_trust_gate_alone_and_a_refusal_names_the_field() {
        let peers = xcc_kube::PeerClients::default();
        let s = secret(THREE);
        let ok = peers
            .client_for(&for_context(&s, "secondary1").unwrap())
            .await
            .unwrap();
        assert_eq!(ok.server, "https://127.0.0.1:6444/");
        assert!(
            ok.identity.starts_with("kubeconfig/config#secondary1@"),
            "{}",
            ok.identity
        );
        let refused = peers
            .client_for(&for_context(&s, "secondary2").unwrap())
            .await
            .unwrap_err()
            .to_string();
        assert!(refused.contains("certificate-authority"), "{refused}");
        assert!(refused.contains("config#secondary2"), "{refused}");
    }

    #[test]
    fn a_secret_without_the_key_or_with_garbage_says_so() {
        let mut s = secret(THREE);
        s.data = Some([("other".to_string(), ByteString(vec![]))].into());
        assert!(matches!(entries(&s), Err(Error::MissingKey { .. })));
        assert!(matches!(
            entries(&secret("- just\n- a list\n")),
            Err(Error::Invalid { .. })
        ));
    }
}

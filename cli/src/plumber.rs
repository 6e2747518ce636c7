//! plumberctl's commands. `activate` records which kubeconfig file and context reach the
//! primary cluster; `add`, `remove` and `view` edit the Secret `config` (key `config`) in
//! namespace `kubeconfig` there, where plumberctl and the original controller keep it, which
//! holds one context per target cluster. Unlike plumberctl, a context keeps every credential the
//! trust rules accept (tokens included), and one they refuse is refused here, before anything is
//! written.
//!
//! xcc 0.1 kept the Secret as `kubeconfig` in plumber-system (`--namespace`); the agent still
//! reads it for one release. `view` lists both (the original's location wins for a context in
//! both), the first `add` copies its contexts to the original's location, and `remove` removes a
//! context from both.

use std::path::{Path, PathBuf};

use k8s_openapi::{
    ByteString,
    api::core::v1::{Namespace, Secret},
};
use kube::{
    Api, ResourceExt,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use serde::Serialize;
use serde_json::{Map, Value};
use xcc_kube::PeerTrust;

use crate::{
    Error,
    args::{Output, PlumberArgs, PlumberCommand},
    contexts::{self, Target, entry},
    error::is_not_found,
    output::{Table, structured},
};

type Mapping = Map<String, Value>;

/// Namespace and name of the Secret (plumberctl's), and its key.
pub const SECRET_NAMESPACE: &str = "kubeconfig";
pub const SECRET: &str = "config";
pub const KEY: &str = "config";
/// xcc 0.1's Secret, in `--namespace`.
pub const LEGACY_SECRET: &str = "kubeconfig";
const FIELD_MANAGER: &str = "kubectl-xcc";

pub async fn run(args: PlumberArgs) -> Result<(), Error> {
    let file = match &args.activation_file {
        Some(file) => file.clone(),
        None => default_activation_file()?,
    };
    let timeout = args.request_timeout();
    match args.command {
        PlumberCommand::Activate {
            path,
            activate_context,
        } => activate(timeout, &file, &path, &activate_context).await,
        PlumberCommand::Add { target_context } => {
            let (activation, kubeconfig, primary) = primary(&file, timeout).await?;
            add(
                &primary,
                &args.namespace,
                &activation,
                &kubeconfig,
                &target_context,
            )
            .await
        }
        PlumberCommand::Remove { context } => {
            let (_, _, primary) = primary(&file, timeout).await?;
            remove(&primary, &args.namespace, &context).await
        }
        PlumberCommand::View { output } => {
            let (_, _, primary) = primary(&file, timeout).await?;
            view(&primary, &args.namespace, output).await
        }
    }
}

fn default_activation_file() -> Result<PathBuf, Error> {
    let home = std::env::var_os("HOME").ok_or_else(|| {
        Error::Usage("HOME is not set: pass --activation-file or set XCC_PLUMBER_ACTIVATION".into())
    })?;
    Ok(Path::new(&home).join(".plumber").join("config.toml"))
}

/// What `activate` records (plumberctl's `~/.plumber/config.toml`: `cluster` is the context).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activation {
    pub path: PathBuf,
    pub cluster: String,
}

impl Activation {
    pub fn to_toml(&self) -> String {
        let quote = |s: &str| format!("'{}'", s.replace('\'', ""));
        format!(
            "cluster = {}\npath = {}\n",
            quote(&self.cluster),
            quote(&self.path.display().to_string())
        )
    }

    /// Reads the two keys plumberctl writes (`key = 'value'` or `key = "value"`).
    pub fn from_toml(text: &str) -> Option<Activation> {
        let mut path = None;
        let mut cluster = None;
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim();
            let value = value
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .or_else(|| value.strip_prefix('"').and_then(|v| v.strip_suffix('"')))?;
            match key.trim() {
                "path" => path = Some(PathBuf::from(value)),
                "cluster" => cluster = Some(value.to_string()),
                _ => {}
            }
        }
        Some(Activation {
            path: path?,
            cluster: cluster?,
        })
    }
}

async fn activate(
    timeout: std::time::Duration,
    file: &Path,
    path: &Path,
    context: &str,
) -> Result<(), Error> {
    let path = std::path::absolute(path)
        .map_err(|e| Error::Usage(format!("bad --path {}: {e}", path.display())))?;
    let kubeconfig = contexts::load(Some(&path))?;
    let target = contexts::client(&kubeconfig, context, timeout).await?;
    let namespaces: Api<Namespace> = Api::all(target.client.clone());
    let found = namespaces
        .get_opt(SECRET_NAMESPACE)
        .await
        .map_err(Error::api(format!(
            "cannot reach context {context:?} ({})",
            target.server
        )))?;
    let activation = Activation {
        path,
        cluster: context.to_string(),
    };
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Failed(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(file, activation.to_toml())
        .map_err(|e| Error::Failed(format!("cannot write {}: {e}", file.display())))?;
    println!("activate file was written out to {}", file.display());
    if found.is_none() {
        println!(
            "note: namespace {SECRET_NAMESPACE} does not exist yet on {context}; `add` creates it"
        );
    }
    println!("Successfully activated to the cluster.");
    Ok(())
}

/// The activation, its kubeconfig, and a client for the primary.
async fn primary(
    file: &Path,
    timeout: std::time::Duration,
) -> Result<(Activation, contexts::UserKubeconfig, Target), Error> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Error::Usage(format!(
            "not activated ({}: {e}): run `kubectl xcc plumber activate -p <kubeconfig> -a <primary context>` first",
            file.display()
        ))
    })?;
    let activation = Activation::from_toml(&text).ok_or_else(|| {
        Error::Usage(format!(
            "{} has no path and cluster: run `kubectl xcc plumber activate` again",
            file.display()
        ))
    })?;
    let kubeconfig = contexts::load(Some(&activation.path))?;
    let target = contexts::client(&kubeconfig, &activation.cluster, timeout).await?;
    Ok((activation, kubeconfig, target))
}

/// The stored kubeconfig of Secret `namespace/name` and its resourceVersion (`None` when
/// there is no Secret).
async fn stored(
    primary: &Target,
    namespace: &str,
    name: &str,
) -> Result<Option<(Option<Vec<u8>>, String)>, Error> {
    let secrets: Api<Secret> = Api::namespaced(primary.client.clone(), namespace);
    let secret = secrets.get_opt(name).await.map_err(Error::api(format!(
        "cannot read Secret {namespace}/{name} on {} ({})",
        primary.context, primary.server
    )))?;
    Ok(secret.map(|s| {
        let data = s
            .data
            .as_ref()
            .and_then(|d| d.get(KEY))
            .map(|b| b.0.clone());
        (data, s.resource_version().unwrap_or_default())
    }))
}

async fn add(
    primary: &Target,
    namespace: &str,
    activation: &Activation,
    kubeconfig: &contexts::UserKubeconfig,
    context: &str,
) -> Result<(), Error> {
    let extracted = contexts::extract(kubeconfig, context)?;
    let user = extracted.user.clone().ok_or_else(|| {
        Error::Usage(format!(
            "context {context:?} of kubeconfig {} has no user: plumber names its \
             ClusterDetector <cluster>.<user>",
            kubeconfig.file
        ))
    })?;
    let detector = format!("{}.{user}", extracted.cluster);
    if !is_dns_subdomain(&detector) {
        return Err(Error::Usage(format!(
            "ClusterDetector name {detector:?} (<cluster>.<user> of context {context:?}) is not a \
             lowercase RFC 1123 subdomain: rename the cluster or user in {}",
            activation.path.display()
        )));
    }
    let text = xcc_kube::yaml::to_string(&Value::Object(extracted.kubeconfig.clone()))
        .map_err(|e| Error::Failed(format!("cannot write context {context:?}: {e}")))?;
    xcc_kube::trust::check(
        text.as_bytes(),
        &format!("context {context:?} of {}", activation.path.display()),
        PeerTrust::default(),
    )?;
    let current = stored(primary, SECRET_NAMESPACE, SECRET).await?;
    // The first write at the original's location starts from xcc 0.1's Secret, if there is
    // one, so that no registered context is lost in the move.
    let legacy = match &current {
        None => stored(primary, namespace, LEGACY_SECRET)
            .await?
            .and_then(|(d, _)| d),
        Some(_) => None,
    };
    let base = current
        .as_ref()
        .and_then(|(d, _)| d.as_deref())
        .or(legacy.as_deref());
    let base_secret = if current.is_some() {
        format!("{SECRET_NAMESPACE}/{SECRET}")
    } else {
        format!("{namespace}/{LEGACY_SECRET}")
    };
    let merged = merge(base, &base_secret, &extracted, context)?;
    write(primary, &merged, current.map(|(_, rv)| rv)).await?;
    println!(
        "added context {context} to Secret {SECRET_NAMESPACE}/{SECRET} on {} (ClusterDetector {detector})",
        primary.context
    );
    if legacy.is_some() {
        println!(
            "note: the contexts of Secret {namespace}/{LEGACY_SECRET} (where xcc 0.1 kept them) were copied \
             to {SECRET_NAMESPACE}/{SECRET}; the agent reads the old Secret for one more release: \
             delete it with `kubectl -n {namespace} delete secret {LEGACY_SECRET}`"
        );
    }
    Ok(())
}

async fn remove(primary: &Target, namespace: &str, context: &str) -> Result<(), Error> {
    let mut removed = false;
    for (ns, name) in [(SECRET_NAMESPACE, SECRET), (namespace, LEGACY_SECRET)] {
        let Some((Some(data), rv)) = stored(primary, ns, name).await? else {
            continue;
        };
        if let Some(kept) = remove_context(&data, &format!("{ns}/{name}"), context)? {
            write_to(primary, ns, name, &kept, Some(rv)).await?;
            println!(
                "removed context {context} from Secret {ns}/{name} on {}",
                primary.context
            );
            removed = true;
        }
    }
    if !removed {
        println!("context {context} is not registered; nothing changed");
    }
    Ok(())
}

/// One registered context, as `view` shows it.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Registered {
    pub context: String,
    pub cluster: String,
    pub user: String,
}

async fn view(primary: &Target, namespace: &str, output: Output) -> Result<(), Error> {
    let mut rows = match stored(primary, SECRET_NAMESPACE, SECRET).await? {
        Some((Some(data), _)) => registered(&data, &format!("{SECRET_NAMESPACE}/{SECRET}"))?,
        _ => Vec::new(),
    };
    if let Some((Some(data), _)) = stored(primary, namespace, LEGACY_SECRET).await? {
        let legacy: Vec<Registered> = registered(&data, &format!("{namespace}/{LEGACY_SECRET}"))?
            .into_iter()
            .filter(|r| !rows.iter().any(|o| o.context == r.context))
            .collect();
        if !legacy.is_empty() {
            eprintln!(
                "note: {} from Secret {namespace}/{LEGACY_SECRET} (xcc 0.1's location, read by the agent \
                 for one more release): run `kubectl xcc plumber add` for each to move it",
                legacy
                    .iter()
                    .map(|r| r.context.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        rows.extend(legacy);
        rows.sort_by(|a, b| a.context.cmp(&b.context));
    }
    let text = match output {
        Output::Table => {
            let mut table = Table::new(&["CONTEXT", "CLUSTER", "USER"]);
            for r in &rows {
                table.push(vec![r.context.clone(), r.cluster.clone(), r.user.clone()]);
            }
            table.render()
        }
        _ => structured(&serde_json::json!({ "contexts": rows }), output)?,
    };
    print!("{text}");
    Ok(())
}

/// Writes the kubeconfig into plumberctl's Secret (creating its namespace if needed). With
/// `resource_version`, the write fails if someone changed the Secret since it was read.
async fn write(
    primary: &Target,
    kubeconfig: &Mapping,
    resource_version: Option<String>,
) -> Result<(), Error> {
    write_to(
        primary,
        SECRET_NAMESPACE,
        SECRET,
        kubeconfig,
        resource_version,
    )
    .await
}

async fn write_to(
    primary: &Target,
    namespace: &str,
    name: &str,
    kubeconfig: &Mapping,
    resource_version: Option<String>,
) -> Result<(), Error> {
    let text = xcc_kube::yaml::to_string(&Value::Object(kubeconfig.clone()))
        .map_err(|e| Error::Failed(format!("cannot write the kubeconfig: {e}")))?;
    let what = || {
        format!(
            "cannot write Secret {namespace}/{name} on {} ({})",
            primary.context, primary.server
        )
    };
    if resource_version.is_none() {
        let namespaces: Api<Namespace> = Api::all(primary.client.clone());
        if namespaces
            .get_opt(namespace)
            .await
            .map_err(Error::api(what()))?
            .is_none()
        {
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(namespace.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match namespaces.create(&PostParams::default(), &ns).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(Error::api(what())(e)),
            }
        }
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            resource_version: resource_version.clone(),
            ..Default::default()
        },
        data: Some([(KEY.to_string(), ByteString(text.into_bytes()))].into()),
        ..Default::default()
    };
    let mut object = serde_json::to_value(&secret)
        .map_err(|e| Error::Failed(format!("cannot encode the Secret: {e}")))?;
    object["apiVersion"] = "v1".into();
    object["kind"] = "Secret".into();
    let secrets: Api<Secret> = Api::namespaced(primary.client.clone(), namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match secrets.patch(name, &params, &Patch::Apply(object)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 && resource_version.is_some() => {
            Err(Error::Failed(format!(
                "Secret {namespace}/{name} on {} changed while this command ran; nothing was written: run it again",
                primary.context
            )))
        }
        Err(e) if is_not_found(&e) && resource_version.is_some() => Err(Error::Failed(format!(
            "Secret {namespace}/{name} on {} was deleted while this command ran; nothing was written: run it again",
            primary.context
        ))),
        Err(e) => Err(Error::api(what())(e)),
    }
}

/// The kubeconfig stored in Secret `secret` (`namespace/name`, for the errors).
fn parse_stored(data: &[u8], secret: &str) -> Result<Mapping, Error> {
    match xcc_kube::yaml::from_slice::<Value>(data) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::Null) => Ok(Mapping::new()),
        Ok(_) => Err(Error::Failed(format!(
            "Secret {secret} key {KEY} is not a kubeconfig mapping: fix or delete it"
        ))),
        Err(e) => Err(Error::Failed(format!(
            "Secret {secret} key {KEY} is not valid YAML ({e}): fix or delete it"
        ))),
    }
}

fn list_mut<'a>(root: &'a mut Mapping, list: &str) -> &'a mut Vec<Value> {
    let slot = root.entry(list).or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    slot.as_array_mut().expect("made a sequence above")
}

fn name_of(entry: &Value) -> Option<&str> {
    entry.get("name").and_then(Value::as_str)
}

/// `(cluster, user)` of every context of `root`.
fn references(root: &Mapping) -> Vec<(String, String, String)> {
    root.get("contexts")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|c| {
                    let body = c.get("context")?;
                    let s = |k: &str| {
                        body.get(k)
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string()
                    };
                    Some((name_of(c)?.to_string(), s("cluster"), s("user")))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Removes context `context` from `root`, and its cluster and user when no other context uses
/// them. Returns whether it was there.
fn remove_in(root: &mut Mapping, context: &str) -> bool {
    let refs = references(root);
    let Some((_, cluster, user)) = refs.iter().find(|(n, _, _)| n == context).cloned() else {
        return false;
    };
    list_mut(root, "contexts").retain(|c| name_of(c) != Some(context));
    let others: Vec<&(String, String, String)> =
        refs.iter().filter(|(n, _, _)| n != context).collect();
    if !others.iter().any(|(_, c, _)| *c == cluster) {
        list_mut(root, "clusters").retain(|c| name_of(c) != Some(cluster.as_str()));
    }
    if !user.is_empty() && !others.iter().any(|(_, _, u)| *u == user) {
        list_mut(root, "users").retain(|u| name_of(u) != Some(user.as_str()));
    }
    true
}

/// The kubeconfig stored in Secret `secret` (`None`: no Secret yet) with context `context`
/// added or replaced.
/// A cluster or user entry of the same name that another context uses with other settings is
/// a conflict, not silently overwritten (plumberctl's merge overwrote it).
pub fn merge(
    stored: Option<&[u8]>,
    secret: &str,
    addition: &contexts::Extracted,
    context: &str,
) -> Result<Mapping, Error> {
    let mut root = match stored {
        Some(data) => parse_stored(data, secret)?,
        None => Mapping::new(),
    };
    root.entry("apiVersion").or_insert("v1".into());
    root.entry("kind").or_insert("Config".into());
    remove_in(&mut root, context);
    let refs = references(&root);
    let mut lists = vec![("clusters", addition.cluster.clone(), "cluster")];
    if let Some(user) = &addition.user {
        lists.push(("users", user.clone(), "user"));
    }
    for (list, name, field) in lists {
        let new = entry(&addition.kubeconfig, list, &name)
            .cloned()
            .ok_or_else(|| Error::Failed(format!("context {context:?} lost its {field}")))?;
        let existing = list_mut(&mut root, list)
            .iter()
            .find(|e| name_of(e) == Some(name.as_str()))
            .cloned();
        match existing {
            Some(existing) if existing == Value::Object(new.clone()) => {}
            Some(_) => {
                let users: Vec<&str> = refs
                    .iter()
                    .filter(|(_, c, u)| {
                        if field == "cluster" {
                            *c == name
                        } else {
                            *u == name
                        }
                    })
                    .map(|(n, _, _)| n.as_str())
                    .collect();
                return Err(Error::Failed(format!(
                    "Secret {secret} already has a {field} named {name:?} with other settings \
                     (used by context {}); rename the {field} of context {context:?} in your \
                     kubeconfig, or remove that context first; nothing was changed",
                    users.join(", ")
                )));
            }
            None => list_mut(&mut root, list).push(Value::Object(new)),
        }
    }
    let context_entry = entry(&addition.kubeconfig, "contexts", context)
        .cloned()
        .ok_or_else(|| Error::Failed(format!("context {context:?} lost its entry")))?;
    list_mut(&mut root, "contexts").push(Value::Object(context_entry));
    Ok(root)
}

/// The kubeconfig stored in Secret `secret` without context `context`; `None` when it was not
/// there.
pub fn remove_context(
    stored: &[u8],
    secret: &str,
    context: &str,
) -> Result<Option<Mapping>, Error> {
    let mut root = parse_stored(stored, secret)?;
    Ok(remove_in(&mut root, context).then_some(root))
}

/// The contexts registered in Secret `secret`, sorted by name.
pub fn registered(stored: &[u8], secret: &str) -> Result<Vec<Registered>, Error> {
    let root = parse_stored(stored, secret)?;
    let mut rows: Vec<Registered> = references(&root)
        .into_iter()
        .map(|(context, cluster, user)| Registered {
            context,
            cluster,
            user,
        })
        .collect();
    rows.sort_by(|a, b| a.context.cmp(&b.context));
    Ok(rows)
}

/// A lowercase RFC 1123 subdomain (what a ClusterDetector's name must be).
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contexts::tests::kubeconfig;

    /// The Secret the stored kubeconfigs of these tests are in.
    const S: &str = "kubeconfig/config";

    fn yaml(m: &Mapping) -> Vec<u8> {
        xcc_kube::yaml::to_string(&Value::Object(m.clone()))
            .unwrap()
            .into_bytes()
    }

    #[test]
    fn add_view_remove_round_trip_keeps_credentials() {
        let kc = kubeconfig();
        let first = contexts::extract(&kc, "first").unwrap();
        let second = contexts::extract(&kc, "second").unwrap();
        let stored = merge(None, S, &first, "first").unwrap();
        let stored = merge(Some(&yaml(&stored)), S, &second, "second").unwrap();
        // Tokens stay (plumberctl dropped them), certificates too.
        assert_eq!(
            entry(&stored, "users", "admin").unwrap()["user"]["token"],
            "secret-token"
        );
        assert_eq!(
            entry(&stored, "users", "cert").unwrap()["user"]["client-certificate-data"],
            "Q0VSVA=="
        );
        let rows = registered(&yaml(&stored), S).unwrap();
        assert_eq!(
            rows,
            [
                Registered {
                    context: "first".into(),
                    cluster: "first".into(),
                    user: "admin".into()
                },
                Registered {
                    context: "second".into(),
                    cluster: "second".into(),
                    user: "cert".into()
                }
            ]
        );
        // Adding again is idempotent.
        let again = merge(Some(&yaml(&stored)), S, &second, "second").unwrap();
        assert_eq!(again, stored);

        let kept = remove_context(&yaml(&stored), S, "first").unwrap().unwrap();
        assert!(entry(&kept, "users", "admin").is_none());
        assert!(entry(&kept, "clusters", "first").is_none());
        assert!(entry(&kept, "contexts", "second").is_some());
        assert_eq!(remove_context(&yaml(&kept), S, "first").unwrap(), None);
    }

    #[test]
    fn shared_entries_stay_until_their_last_context_goes() {
        let kc = kubeconfig();
        let second = contexts::extract(&kc, "second").unwrap();
        let stored = merge(None, S, &second, "second").unwrap();
        // "exec" uses cluster "second" too (its user would be refused by the trust rules
        // before merging; here only the bookkeeping is tested).
        let mut exec = contexts::extract(&kc, "exec").unwrap();
        exec.user = None;
        list_mut(&mut exec.kubeconfig, "users").clear();
        let stored = merge(Some(&yaml(&stored)), S, &exec, "exec").unwrap();
        let kept = remove_context(&yaml(&stored), S, "second")
            .unwrap()
            .unwrap();
        assert!(entry(&kept, "clusters", "second").is_some());
        assert!(entry(&kept, "users", "cert").is_none());
    }

    #[test]
    fn a_same_named_cluster_with_other_settings_is_a_conflict() {
        let kc = kubeconfig();
        let first = contexts::extract(&kc, "first").unwrap();
        let stored = merge(None, S, &first, "first").unwrap();
        let mut other = contexts::extract(&kc, "second").unwrap();
        // A context elsewhere whose cluster is also called "first".
        other.cluster = "first".into();
        let cluster = list_mut(&mut other.kubeconfig, "clusters");
        cluster[0]["name"] = "first".into();
        let e = merge(Some(&yaml(&stored)), S, &other, "second").unwrap_err();
        assert!(e.to_string().contains("cluster named \"first\""), "{e}");
        assert!(e.to_string().contains("used by context first"), "{e}");
    }

    #[test]
    fn refused_credentials_name_the_field() {
        let kc = kubeconfig();
        for (context, field) in [
            ("exec", "user \"runner\" exec"),
            ("filed", "cluster \"filed\" certificate-authority"),
        ] {
            let extracted = contexts::extract(&kc, context).unwrap();
            let text = xcc_kube::yaml::to_string(&Value::Object(extracted.kubeconfig)).unwrap();
            let e =
                xcc_kube::trust::check(text.as_bytes(), context, PeerTrust::default()).unwrap_err();
            assert!(e.to_string().contains(field), "{e}");
        }
        let ok = contexts::extract(&kc, "second").unwrap();
        let text = xcc_kube::yaml::to_string(&Value::Object(ok.kubeconfig)).unwrap();
        xcc_kube::trust::check(text.as_bytes(), "second", PeerTrust::default()).unwrap();
    }

    #[test]
    fn activation_file_reads_what_plumberctl_writes() {
        let a = Activation::from_toml("cluster = 'primary'\npath = '/home/user/.kube/config'\n")
            .unwrap();
        assert_eq!(a.cluster, "primary");
        assert_eq!(a.path, PathBuf::from("/home/user/.kube/config"));
        assert_eq!(Activation::from_toml(&a.to_toml()), Some(a));
        assert_eq!(Activation::from_toml("path = '/x'\n"), None);
    }

    #[test]
    fn detector_names_are_rfc_1123() {
        assert!(is_dns_subdomain("v1262-cluster.kubernetes-admin2"));
        assert!(!is_dns_subdomain("Kind-Cluster.admin"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("-a.b"));
    }

    mod api {
        use super::*;
        use serde_json::Value;
        use xcc_kube::scenario::{Running, Scenario, not_found, status};

        const SECRET: &str = "/api/v1/namespaces/kubeconfig/secrets/config";

        fn primary(scenario: Scenario) -> (Target, Running) {
            let (client, server) = scenario.run();
            let target = Target {
                context: "primary".into(),
                client,
                server: "https://primary".into(),
            };
            (target, server)
        }

        fn stored() -> Mapping {
            merge(
                None,
                "kubeconfig/config",
                &contexts::extract(&kubeconfig(), "first").unwrap(),
                "first",
            )
            .unwrap()
        }

        #[tokio::test]
        async fn a_first_add_creates_the_namespace_and_applies_the_secret() {
            let (target, server) = primary(
                Scenario::new()
                    .expect("GET", "/api/v1/namespaces/kubeconfig")
                    .reply(not_found())
                    .expect("POST", "/api/v1/namespaces")
                    .reply_with(|body| (201, body.clone()))
                    // An apply by this tool: a request without the field manager is unexpected.
                    .expect("PATCH", SECRET)
                    .when(|r| r.param("fieldManager") == Some("kubectl-xcc"))
                    .check(|sent: &Value| {
                        assert!(sent["metadata"].get("resourceVersion").is_none(), "{sent}");
                        let data = sent["data"]["config"].as_str().unwrap();
                        let text = xcc_kube::wire::decode_base64(data).unwrap();
                        let text = String::from_utf8(text).unwrap();
                        assert!(text.contains("token: secret-token"), "{text}");
                    })
                    .reply_with(|sent| (200, sent.clone())),
            );
            write(&target, &stored(), None).await.unwrap();
            server.done().await;
        }

        #[tokio::test]
        async fn a_secret_changed_meanwhile_is_not_overwritten() {
            let (target, server) = primary(
                Scenario::new()
                    .expect("PATCH", SECRET)
                    .check(|sent| assert_eq!(sent["metadata"]["resourceVersion"], "41"))
                    .reply(status(409, "Conflict", "Conflict")),
            );
            let e = write(&target, &stored(), Some("41".into()))
                .await
                .unwrap_err();
            assert!(
                e.to_string().contains("changed while this command ran"),
                "{e}"
            );
            server.done().await;
        }
    }
}

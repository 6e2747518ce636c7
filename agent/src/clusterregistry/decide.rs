//! What to do with one object key (kind, namespace, name) of the peers, given what the local
//! cluster holds: the ownership rules of cluster-registry, as a pure function.
//!
//! - A local object without the owner annotation was made here: it always wins.
//! - A copy is made from a peer's object that a rule matches, unless the object is marked
//!   `resource-sync-disabled`, is owned by this cluster, or is itself a copy whose owner is
//!   another live peer (then that owner is read directly: copies never feed copies while the
//!   original is reachable, so nothing ping-pongs).
//! - A copy is deleted only when its owner is live, its list of that kind is complete, and the
//!   object is not there. An unreachable owner never causes a deletion.
//! - A live peer whose watch has not listed yet (it just started, or restarted) is *unknown*: it
//!   neither holds nor lacks the object. Unknown never wins or loses: when it could outrank the
//!   best known source, nothing is written until it has listed, so a restarted watch never
//!   changes a decision (the source would flip to another peer and back).
//! - A copy that a rule writes under another kind, namespace or name than its source carries
//!   [`SOURCE_ANNOTATION`] naming the source's key; that is how it is found again when the source
//!   changes or goes. A key already held by another key's copy is left to that copy.

use std::sync::Arc;

use serde_json::Value;

use super::{
    OWNER_ANNOTATION, SOURCE_ANNOTATION, SYNC_DISABLED_ANNOTATION,
    api::{Cluster, GroupVersionKind},
    rules::{self, Clusters, Rule, RuleSet, desired_copy},
};
use crate::sink::up_to_date;

/// Where an object is stored: kind, namespace (`None` when cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub gvk: GroupVersionKind,
    pub namespace: Option<String>,
    pub name: String,
}

impl Key {
    /// The key of an object carrying `apiVersion`, `kind` and `metadata.name`.
    pub fn of(object: &Value) -> Option<Key> {
        let metadata = &object["metadata"];
        Some(Key::new(
            object["apiVersion"].as_str()?,
            object["kind"].as_str()?,
            metadata["namespace"].as_str().unwrap_or_default(),
            metadata["name"].as_str()?,
        ))
    }

    /// From an `apiVersion` (`group/version`, or `version` for the core group), a kind, a
    /// namespace (empty when cluster-scoped) and a name.
    fn new(api_version: &str, kind: &str, namespace: &str, name: &str) -> Key {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        Key {
            gvk: GroupVersionKind {
                group: group.to_string(),
                version: version.to_string(),
                kind: kind.to_string(),
            },
            namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
            name: name.to_string(),
        }
    }

    /// `apiVersion/Kind/namespace/name` (the namespace empty when cluster-scoped).
    pub fn to_annotation(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            rules::api_version(&self.gvk),
            self.gvk.kind,
            self.namespace.as_deref().unwrap_or_default(),
            self.name
        )
    }

    /// The inverse of [`Key::to_annotation`].
    pub fn parse(value: &str) -> Option<Key> {
        let mut parts = value.rsplitn(4, '/');
        let name = parts.next().filter(|n| !n.is_empty())?;
        let namespace = parts.next()?;
        let kind = parts.next().filter(|k| !k.is_empty())?;
        let api_version = parts.next().filter(|v| !v.is_empty())?;
        Some(Key::new(api_version, kind, namespace, name))
    }

    /// The source an object names with [`SOURCE_ANNOTATION`], if it is a moved copy.
    pub fn source_of(object: &Value) -> Option<Key> {
        annotation(object, SOURCE_ANNOTATION).and_then(Key::parse)
    }
}

/// One peer, seen by the reconcile of one key.
#[derive(Debug, Clone, Copy)]
pub struct PeerView<'a> {
    pub name: &'a str,
    /// Its cluster ID (kube-system UID).
    pub id: &'a str,
    /// Its liveness check passes.
    pub live: bool,
    /// The watch of this kind there has delivered a full list.
    pub listed: bool,
    /// Its ClusterFeatures.
    pub features: &'a [Value],
    /// Its object under the key.
    pub object: Option<&'a Value>,
}

/// What the local cluster holds that matters to one key. Objects carry `apiVersion` and `kind`.
pub struct LocalView<'a> {
    /// The object under the key itself.
    pub at_key: Option<&'a Value>,
    /// Copies under other keys that name this key as their source.
    pub moved: &'a [Value],
    /// The object under any other key (where a rule moves the copy).
    pub get: &'a dyn Fn(&Key) -> Option<Value>,
    /// Whether a kind is namespaced.
    pub namespaced: &'a dyn Fn(&GroupVersionKind) -> bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Write this object (from peer `from`).
    Apply { desired: Value, from: String },
    /// Delete this local copy.
    Delete(Value),
    /// Nothing to do, and why.
    Keep(&'static str),
    /// The copy cannot be made (a template failed, or it has no valid name): nothing is written
    /// or deleted for this key.
    Invalid { rule: String, message: String },
}

/// What to do for one key, and where its copy goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The key of the copy, when a peer's object is copied.
    pub target: Option<Key>,
    /// Each to be done; `Keep` or `Invalid` alone.
    pub actions: Vec<Action>,
}

impl Decision {
    fn only(action: Action) -> Decision {
        Decision {
            target: None,
            actions: vec![action],
        }
    }
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["annotations"][key].as_str()
}

/// The cluster an object originates from: its owner annotation, or the cluster holding it.
pub fn owner<'a>(object: &'a Value, holder: &'a str) -> &'a str {
    annotation(object, OWNER_ANNOTATION).unwrap_or(holder)
}

fn sync_disabled(object: &Value) -> bool {
    annotation(object, SYNC_DISABLED_ANNOTATION) == Some("true")
}

fn uid(object: &Value) -> Option<&str> {
    object["metadata"]["uid"].as_str()
}

/// Whether `current` already is `desired` (status included when the copy carries one).
fn fresh(current: &Value, desired: &Value) -> bool {
    up_to_date(current, desired)
        && desired
            .get("status")
            .is_none_or(|s| current.get("status") == Some(s))
}

/// A DNS-1123 subdomain (names) or label (namespaces), as the API server checks them.
fn valid_name(name: &str, max: usize, dots: bool) -> bool {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= max
        && name.starts_with(alphanumeric)
        && name.ends_with(alphanumeric)
        && name
            .chars()
            .all(|c| alphanumeric(c) || c == '-' || (dots && c == '.'))
}

/// Fixes where `desired` is stored: no namespace for a cluster-scoped kind, a valid name, and
/// [`SOURCE_ANNOTATION`] when that is not `key`.
fn place(desired: &mut Value, key: &Key, namespaced: bool) -> Result<Key, String> {
    let metadata = &mut desired["metadata"];
    if namespaced {
        let namespace = metadata["namespace"].as_str().unwrap_or_default();
        if !valid_name(namespace, 63, false) {
            return Err(format!(
                "the copy's namespace {namespace:?} is not a valid namespace name; override \
                 /metadata/namespace"
            ));
        }
    } else if let Some(metadata) = metadata.as_object_mut() {
        metadata.remove("namespace");
    }
    let name = metadata["name"].as_str().unwrap_or_default();
    if !valid_name(name, 253, true) {
        return Err(format!(
            "the copy's name {name:?} is not a valid object name (lowercase letters, digits, \
             '-' and '.')"
        ));
    }
    let target = Key::of(desired).ok_or("the copy has no apiVersion, kind or name")?;
    if target == *key {
        rules::remove_key(desired, "annotations", SOURCE_ANNOTATION);
    } else {
        rules::set_key(
            desired,
            "annotations",
            SOURCE_ANNOTATION,
            &key.to_annotation(),
        );
    }
    Ok(target)
}

/// The peers' objects of the key that a rule reads, with that rule; `.0` says whether the object
/// is a copy. Originals first, then by cluster name: every cluster picks the same source.
fn sources<'p, 'a>(
    local_id: &str,
    peers: &'p [PeerView<'a>],
    rules: &'p [RuleSet],
    namespaced: bool,
) -> Vec<(bool, &'p PeerView<'a>, &'a Value, &'p RuleSet, &'p Rule)> {
    let live_owner = |id: &str| peers.iter().any(|p| p.live && p.id == id);
    let mut candidates = Vec::new();
    for peer in peers.iter().filter(|p| p.live && p.listed) {
        let Some(object) = peer.object else { continue };
        let owner = owner(object, peer.id);
        if sync_disabled(object) || owner == local_id || (owner != peer.id && live_owner(owner)) {
            continue;
        }
        let rule = rules
            .iter()
            .filter(|r| r.reads_from(peer.features))
            .find_map(|r| Some((r, r.matching(object, namespaced)?)));
        if let Some((set, rule)) = rule {
            candidates.push((owner != peer.id, peer, object, set, rule));
        }
    }
    candidates.sort_by(|a, b| (a.0, a.1.name).cmp(&(b.0, b.1.name)));
    candidates.sort_by(|a, b| (a.0, a.1.name).cmp(&(b.0, b.1.name)));
    candidates
}

/// `clusters` are the Cluster objects, which templates in overrides refer to.
pub fn decide(
    local_id: &str,
    key: &Key,
    local: &LocalView<'_>,
    peers: &[PeerView<'_>],
    rules: &[RuleSet],
    clusters: &[Arc<Cluster>],
) -> Decision {
    let is_copy_of_key = |object: &Value| {
        annotation(object, OWNER_ANNOTATION).is_some()
            && Key::source_of(object)
                .or_else(|| Key::of(object))
                .is_some_and(|source| source == *key)
    };
    // This key's copies here, wherever a rule put them; disabled ones are left alone.
    let copies: Vec<&Value> = local
        .at_key
        .into_iter()
        .chain(local.moved)
        .filter(|c| is_copy_of_key(c) && !sync_disabled(c))
        .collect();
    let candidates = sources(local_id, peers, rules, (local.namespaced)(&key.gvk));
    let Some((is_copy, peer, object, set, rule)) = candidates.first() else {
        return gone(local_id, local, &copies, peers);
    };
    // A peer not listed yet may hold an original that would win over this source (or, when the
    // source is a copy, a copy of its own that sorts first): wait for it. Peers that rank after
    // the source cannot change the decision, so they hold nothing up.
    if peers
        .iter()
        .any(|p| p.live && !p.listed && (false, p.name) < (*is_copy, peer.name))
    {
        return Decision::only(Action::Keep(
            "a peer that may hold the source has not listed yet",
        ));
    }
    let invalid = |message: String| {
        Decision::only(Action::Invalid {
            rule: set.name.clone(),
            message,
        })
    };
    let clusters = Clusters {
        local_id,
        all: clusters,
    };
    let mut desired = match desired_copy(object, peer.id, rule, clusters) {
        Ok(desired) => desired,
        Err(error) => return invalid(error.to_string()),
    };
    let target_namespaced = Key::of(&desired).is_some_and(|t| (local.namespaced)(&t.gvk));
    let target = match place(&mut desired, key, target_namespaced) {
        Ok(target) => target,
        Err(message) => return invalid(message),
    };
    let current = if target == *key {
        local.at_key.cloned()
    } else {
        (local.get)(&target)
    };
    let current_uid = current.as_ref().and_then(uid);
    // Copies this key left under another key (the rule or the object changed): they go.
    let mut actions: Vec<Action> = copies
        .iter()
        .filter(|c| {
            Key::of(c).as_ref() != Some(&target) && uid(c).is_none_or(|u| Some(u) != current_uid)
        })
        .map(|c| Action::Delete((*c).clone()))
        .collect();
    let keep = match &current {
        Some(c) if annotation(c, OWNER_ANNOTATION).is_none() => Some("made here"),
        Some(c) if sync_disabled(c) => Some("resource-sync-disabled"),
        Some(c) if !is_copy_of_key(c) => Some("another object's copy holds the key"),
        Some(c) if fresh(c, &desired) => Some("up to date"),
        _ => None,
    };
    match keep {
        Some(why) if actions.is_empty() => actions.push(Action::Keep(why)),
        Some(_) => {}
        None => actions.push(Action::Apply {
            desired,
            from: peer.name.to_string(),
        }),
    }
    Decision {
        target: Some(target),
        actions,
    }
}

/// No peer offers an object under the key: its copies go once their owner is known to have lost
/// the source.
fn gone(
    local_id: &str,
    local: &LocalView<'_>,
    copies: &[&Value],
    peers: &[PeerView<'_>],
) -> Decision {
    let source_gone = |owner: &str| {
        peers
            .iter()
            .any(|p| p.id == owner && p.live && p.listed && p.object.is_none())
    };
    let actions: Vec<Action> = copies
        .iter()
        .filter(|c| source_gone(owner(c, local_id)))
        .map(|c| Action::Delete((*c).clone()))
        .collect();
    if !actions.is_empty() {
        return Decision {
            target: None,
            actions,
        };
    }
    let why = match local.at_key {
        _ if !copies.is_empty() => "the source may still exist",
        Some(l) if annotation(l, OWNER_ANNOTATION).is_none() => "made here",
        Some(l) if sync_disabled(l) => "resource-sync-disabled",
        _ => "nothing to copy",
    };
    Decision::only(Action::Keep(why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clusterregistry::api::{ClusterSpec, ResourceSyncRuleSpec};
    use serde_json::json;

    fn secret_key() -> Key {
        Key::of(&secret("", None)).unwrap()
    }

    /// The one action for the key `ns/s` of Secrets, with `local` the object under it.
    fn one(
        local_id: &str,
        local: Option<&Value>,
        peers: &[PeerView<'_>],
        rules: &[RuleSet],
        namespaced: bool,
        clusters: &[Arc<Cluster>],
    ) -> Action {
        let view = LocalView {
            at_key: local,
            moved: &[],
            get: &|_| None,
            namespaced: &|_| namespaced,
        };
        let decision = decide(local_id, &secret_key(), &view, peers, rules, clusters);
        assert_eq!(decision.actions.len(), 1, "{decision:?}");
        decision.actions.into_iter().next().unwrap()
    }

    fn rule(spec: Value) -> RuleSet {
        let spec: ResourceSyncRuleSpec = serde_json::from_value(spec).unwrap();
        RuleSet::compile("r", &spec).unwrap()
    }

    fn all_secrets() -> Vec<RuleSet> {
        vec![rule(
            json!({"groupVersionKind": {"version": "v1", "kind": "Secret"}, "rules": [{}]}),
        )]
    }

    fn secret(data: &str, owner: Option<&str>) -> Value {
        let mut s = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns", "uid": "u", "resourceVersion": "9"},
            "data": {"a": data}});
        if let Some(owner) = owner {
            s["metadata"]["annotations"] = json!({ OWNER_ANNOTATION: owner });
            s["metadata"]["labels"] = json!({ OWNER_ANNOTATION: owner });
        }
        s
    }

    fn peer<'a>(name: &'a str, object: Option<&'a Value>) -> PeerView<'a> {
        PeerView {
            name,
            id: name,
            live: true,
            listed: true,
            features: &[],
            object,
        }
    }

    #[test]
    fn a_peer_original_is_copied_with_its_owner() {
        let source = secret("MQ==", None);
        let Action::Apply { desired, from } = one(
            "here",
            None,
            &[peer("b", Some(&source))],
            &all_secrets(),
            true,
            &[],
        ) else {
            panic!("no apply")
        };
        assert_eq!(from, "b");
        assert_eq!(desired["metadata"]["annotations"][OWNER_ANNOTATION], "b");
        assert_eq!(desired["metadata"]["labels"][OWNER_ANNOTATION], "b");
        assert!(desired["metadata"].get("uid").is_none());
        assert_eq!(desired["data"]["a"], "MQ==");
        // Applied once, it is up to date.
        assert_eq!(
            one(
                "here",
                Some(&desired),
                &[peer("b", Some(&source))],
                &all_secrets(),
                true,
                &[]
            ),
            Action::Keep("up to date")
        );
    }

    #[test]
    fn local_objects_always_win() {
        let local = secret("bG9jYWw=", None);
        let source = secret("MQ==", None);
        assert_eq!(
            one(
                "here",
                Some(&local),
                &[peer("b", Some(&source))],
                &all_secrets(),
                true,
                &[]
            ),
            Action::Keep("made here")
        );
        assert_eq!(
            one(
                "here",
                Some(&local),
                &[peer("b", None)],
                &all_secrets(),
                true,
                &[]
            ),
            Action::Keep("made here")
        );
    }

    #[test]
    fn drift_of_a_copy_is_reverted() {
        let source = secret("MQ==", None);
        let drifted = secret("ZWRpdGVk", Some("b"));
        let action = one(
            "here",
            Some(&drifted),
            &[peer("b", Some(&source))],
            &all_secrets(),
            true,
            &[],
        );
        assert!(matches!(action, Action::Apply { desired, .. } if desired["data"]["a"] == "MQ=="));
    }

    #[test]
    fn copies_are_deleted_only_when_the_live_owner_lost_the_source() {
        let copy = secret("MQ==", Some("b"));
        assert_eq!(
            one(
                "here",
                Some(&copy),
                &[peer("b", None)],
                &all_secrets(),
                true,
                &[]
            ),
            Action::Delete(copy.clone())
        );
        let mut down = peer("b", None);
        down.live = false;
        assert_eq!(
            one("here", Some(&copy), &[down], &all_secrets(), true, &[]),
            Action::Keep("the source may still exist")
        );
        let mut unlisted = peer("b", None);
        unlisted.listed = false;
        assert_eq!(
            one("here", Some(&copy), &[unlisted], &all_secrets(), true, &[]),
            Action::Keep("the source may still exist")
        );
        // Another copy at a third cluster does not keep it alive while the owner is live.
        let other_copy = secret("MQ==", Some("b"));
        assert_eq!(
            one(
                "here",
                Some(&copy),
                &[peer("b", None), peer("c", Some(&other_copy))],
                &all_secrets(),
                true,
                &[]
            ),
            Action::Delete(copy.clone())
        );
    }

    #[test]
    fn a_peer_that_has_not_listed_never_wins_or_loses() {
        let at_a = secret("MQ==", None);
        let at_b = secret("Mg==", None);
        let copy_from_a = secret("MQ==", Some("a"));
        // Both listed: a sorts first and wins.
        let both = [peer("a", Some(&at_a)), peer("b", Some(&at_b))];
        let action = one("here", None, &both, &all_secrets(), true, &[]);
        assert!(matches!(action, Action::Apply { from, .. } if from == "a"));
        assert_eq!(
            one("here", Some(&copy_from_a), &both, &all_secrets(), true, &[]),
            Action::Keep("up to date")
        );
        // a's watch restarted: b does not win meanwhile, and a's copy is not deleted.
        let mut restarted = peer("a", None);
        restarted.listed = false;
        for local in [None, Some(&copy_from_a)] {
            assert_eq!(
                one(
                    "here",
                    local,
                    &[restarted, peer("b", Some(&at_b))],
                    &all_secrets(),
                    true,
                    &[]
                ),
                Action::Keep("a peer that may hold the source has not listed yet")
            );
        }
        // A peer that sorts after the source changes nothing by not having listed.
        let mut late = peer("c", None);
        late.listed = false;
        let action = one(
            "here",
            None,
            &[peer("a", Some(&at_a)), late],
            &all_secrets(),
            true,
            &[],
        );
        assert!(matches!(action, Action::Apply { from, .. } if from == "a"));
        // Even an object in a store that has not listed is not read.
        let mut stale = peer("a", Some(&at_a));
        stale.listed = false;
        assert_eq!(
            one("here", None, &[stale], &all_secrets(), true, &[]),
            Action::Keep("nothing to copy")
        );
    }

    #[test]
    fn copies_are_read_from_the_original_while_it_is_live() {
        let original = secret("MQ==", None);
        let stale_copy = secret("b2xk", Some("b"));
        let peers = [peer("b", Some(&original)), peer("c", Some(&stale_copy))];
        let action = one("here", None, &peers, &all_secrets(), true, &[]);
        assert!(matches!(action, Action::Apply { from, .. } if from == "b"));
        // Owner unreachable: the copy at c is used, with b still named as owner.
        let mut peers = peers;
        peers[0].live = false;
        let Action::Apply { from, desired } = one("here", None, &peers, &all_secrets(), true, &[])
        else {
            panic!("no apply")
        };
        assert_eq!(from, "c");
        assert_eq!(desired["metadata"]["annotations"][OWNER_ANNOTATION], "b");
    }

    #[test]
    fn own_objects_and_disabled_ones_are_not_copied_back() {
        let ours = secret("MQ==", Some("here"));
        assert_eq!(
            one(
                "here",
                None,
                &[peer("b", Some(&ours))],
                &all_secrets(),
                true,
                &[]
            ),
            Action::Keep("nothing to copy")
        );
        let mut disabled = secret("MQ==", None);
        disabled["metadata"]["annotations"] = json!({ SYNC_DISABLED_ANNOTATION: "true" });
        assert_eq!(
            one(
                "here",
                None,
                &[peer("b", Some(&disabled))],
                &all_secrets(),
                true,
                &[]
            ),
            Action::Keep("nothing to copy")
        );
    }

    #[test]
    fn cluster_features_select_the_peers_read_from() {
        let rules = vec![rule(json!({
            "groupVersionKind": {"version": "v1", "kind": "Secret"},
            "clusterFeatureMatch": [{"featureName": "test-secret-feature"}],
            "rules": [{}]
        }))];
        let source = secret("MQ==", None);
        assert_eq!(
            one("here", None, &[peer("b", Some(&source))], &rules, true, &[]),
            Action::Keep("nothing to copy")
        );
        let features =
            [json!({"metadata": {"name": "f"}, "spec": {"featureName": "test-secret-feature"}})];
        let mut with = peer("b", Some(&source));
        with.features = &features;
        assert!(matches!(
            one("here", None, &[with], &rules, true, &[]),
            Action::Apply { .. }
        ));
    }

    fn clusters() -> Vec<Arc<Cluster>> {
        [("home", "here"), ("cluster-b", "b"), ("cluster-c", "c")]
            .into_iter()
            .map(|(name, id)| {
                let spec = ClusterSpec {
                    cluster_id: id.into(),
                    ..Default::default()
                };
                Arc::new(Cluster::new(name, spec))
            })
            .collect()
    }

    /// Secrets copied with `data.plain` decoded from `data.a` and `data.from` naming clusters.
    fn templated_secrets() -> Vec<RuleSet> {
        vec![rule(json!({
            "groupVersionKind": {"version": "v1", "kind": "Secret"},
            "rules": [{"mutations": {"overrides": [
                {"type": "replace", "path": "/data/plain", "value": "{{ b64dec .Object.data.a }}"},
                {"type": "replace", "path": "/data/from",
                 "value": "{{ .Cluster.GetName }} to {{ .LocalCluster.Name }}"}
            ]}}]
        }))]
    }

    #[test]
    fn templated_overrides_are_rendered_per_object() {
        let source = secret("MQ==", None);
        let Action::Apply { desired, .. } = one(
            "here",
            None,
            &[peer("b", Some(&source))],
            &templated_secrets(),
            true,
            &clusters(),
        ) else {
            panic!("no apply")
        };
        assert_eq!(desired["data"]["plain"], "1");
        assert_eq!(desired["data"]["from"], "cluster-b to home");
    }

    #[test]
    fn a_failing_template_writes_and_deletes_nothing_for_that_key() {
        let bad = secret("not base64!", None);
        let invalid = Action::Invalid {
            rule: "r".into(),
            message: "spec.rules[0].mutations.overrides[0].value: the template failed: \
                      b64dec: the value is not base64"
                .into(),
        };
        assert_eq!(
            one(
                "here",
                None,
                &[peer("b", Some(&bad))],
                &templated_secrets(),
                true,
                &clusters()
            ),
            invalid
        );
        // An existing copy is neither rewritten nor deleted.
        let copy = secret("MQ==", Some("b"));
        assert_eq!(
            one(
                "here",
                Some(&copy),
                &[peer("b", Some(&bad))],
                &templated_secrets(),
                true,
                &clusters()
            ),
            invalid
        );
        // Without the Cluster objects there is nothing to render with.
        let good = secret("MQ==", None);
        let action = one(
            "here",
            None,
            &[peer("b", Some(&good))],
            &templated_secrets(),
            true,
            &[],
        );
        assert!(
            matches!(&action, Action::Invalid { message, .. } if message.contains("clusterID \"b\"")),
            "{action:?}"
        );
    }

    #[test]
    fn templates_see_the_cluster_named_by_the_owner_annotation() {
        // b holds a copy of c's object while c is unreachable: .Cluster is c, as the owner.
        let copy_at_b = secret("MQ==", Some("c"));
        let mut c = peer("c", None);
        c.live = false;
        let Action::Apply { desired, from } = one(
            "here",
            None,
            &[peer("b", Some(&copy_at_b)), c],
            &templated_secrets(),
            true,
            &clusters(),
        ) else {
            panic!("no apply")
        };
        assert_eq!(from, "b");
        assert_eq!(desired["data"]["from"], "cluster-c to home");
        assert_eq!(desired["metadata"]["annotations"][OWNER_ANNOTATION], "c");
    }

    /// Secrets copied as `<name>-copy` into namespace `moved`.
    fn renaming() -> Vec<RuleSet> {
        vec![rule(json!({
            "groupVersionKind": {"version": "v1", "kind": "Secret"},
            "rules": [{"mutations": {"overrides": [
                {"type": "replace", "path": "/metadata/name", "value": "{{ .Object.metadata.name }}-copy"},
                {"type": "replace", "path": "/metadata/namespace", "value": "moved"}
            ]}}]
        }))]
    }

    /// The decision for key `ns/s`, with `local` every local object (found by key), `moved` the
    /// ones naming the key as their source.
    fn decide_among(local: &[Value], peers: &[PeerView<'_>], rules: &[RuleSet]) -> Decision {
        let key = secret_key();
        let at_key = local.iter().find(|o| Key::of(o).as_ref() == Some(&key));
        let moved: Vec<Value> = local
            .iter()
            .filter(|o| Key::source_of(o).as_ref() == Some(&key))
            .cloned()
            .collect();
        let get = |k: &Key| {
            local
                .iter()
                .find(|o| Key::of(o).as_ref() == Some(k))
                .cloned()
        };
        let view = LocalView {
            at_key,
            moved: &moved,
            get: &get,
            namespaced: &|g| g.kind != "Namespace",
        };
        decide("here", &key, &view, peers, rules, &clusters())
    }

    fn at(mut object: Value, namespace: &str, name: &str, uid: &str) -> Value {
        object["metadata"]["namespace"] = json!(namespace);
        object["metadata"]["name"] = json!(name);
        object["metadata"]["uid"] = json!(uid);
        object
    }

    #[test]
    fn keys_round_trip_through_the_source_annotation() {
        for key in [
            secret_key(),
            Key::of(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"namespace": "a", "name": "web.v2"}}))
            .unwrap(),
            Key::of(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}))
                .unwrap(),
        ] {
            assert_eq!(Key::parse(&key.to_annotation()), Some(key.clone()));
        }
        assert_eq!(secret_key().to_annotation(), "v1/Secret/ns/s");
        assert_eq!(Key::parse("Secret/ns/s"), None);
        assert_eq!(Key::parse("v1/Secret/ns/"), None);
    }

    #[test]
    fn a_renamed_copy_names_its_source_and_is_found_by_it() {
        let source = secret("MQ==", None);
        let peers = [peer("b", Some(&source))];
        let decision = decide_among(&[], &peers, &renaming());
        let [Action::Apply { desired, .. }] = &decision.actions[..] else {
            panic!("{decision:?}")
        };
        assert_eq!(desired["metadata"]["name"], "s-copy");
        assert_eq!(desired["metadata"]["namespace"], "moved");
        assert_eq!(
            desired["metadata"]["annotations"][SOURCE_ANNOTATION],
            "v1/Secret/ns/s"
        );
        assert_eq!(decision.target, Key::of(desired));
        // Written, it is up to date; a copy of the same source under the key is deleted.
        let written = at(desired.clone(), "moved", "s-copy", "u1");
        let old = secret("MQ==", Some("b"));
        let decision = decide_among(&[written.clone(), old.clone()], &peers, &renaming());
        assert_eq!(decision.actions, vec![Action::Delete(old)]);
        let decision = decide_among(std::slice::from_ref(&written), &peers, &renaming());
        assert_eq!(decision.actions, vec![Action::Keep("up to date")]);
        // The source is deleted: so is the copy.
        let decision = decide_among(
            std::slice::from_ref(&written),
            &[peer("b", None)],
            &renaming(),
        );
        assert_eq!(decision.actions, vec![Action::Delete(written.clone())]);
        // The owner is unreachable: nothing is deleted.
        let mut down = peer("b", None);
        down.live = false;
        let decision = decide_among(&[written], &[down], &renaming());
        assert_eq!(
            decision.actions,
            vec![Action::Keep("the source may still exist")]
        );
    }

    #[test]
    fn a_moved_copy_never_overwrites_what_holds_its_key() {
        let source = secret("MQ==", None);
        let peers = [peer("b", Some(&source))];
        let made_here = at(secret("bG9jYWw=", None), "moved", "s-copy", "u1");
        let decision = decide_among(&[made_here], &peers, &renaming());
        assert_eq!(decision.actions, vec![Action::Keep("made here")]);
        assert_eq!(decision.target.unwrap().name, "s-copy");
        // Another peer object's copy, made under its own key, stays too.
        let other = at(secret("Mg==", Some("c")), "moved", "s-copy", "u2");
        let decision = decide_among(&[other], &peers, &renaming());
        assert_eq!(
            decision.actions,
            vec![Action::Keep("another object's copy holds the key")]
        );
        // And the key's own decision leaves a moved copy of another key alone.
        let moved_here = at(
            {
                let mut s = secret("MQ==", Some("b"));
                s["metadata"]["annotations"][SOURCE_ANNOTATION] = json!("v1/Secret/ns/x");
                s
            },
            "ns",
            "s",
            "u3",
        );
        let decision = decide_among(&[moved_here], &[peer("b", None)], &all_secrets());
        assert_eq!(decision.actions, vec![Action::Keep("nothing to copy")]);
    }

    #[test]
    fn a_copy_moved_again_leaves_nothing_behind() {
        let source = secret("MQ==", None);
        let peers = [peer("b", Some(&source))];
        let Action::Apply { desired, .. } =
            decide_among(&[], &peers, &renaming()).actions[0].clone()
        else {
            panic!("no apply")
        };
        let written = at(desired, "moved", "s-copy", "u1");
        // The rule now keeps the name: the copy under the old key goes, one under the key comes.
        let decision = decide_among(std::slice::from_ref(&written), &peers, &all_secrets());
        let [Action::Delete(old), Action::Apply { desired, .. }] = &decision.actions[..] else {
            panic!("{decision:?}")
        };
        assert_eq!(*old, written);
        assert_eq!(desired["metadata"]["name"], "s");
        assert!(
            desired["metadata"]["annotations"]
                .get(SOURCE_ANNOTATION)
                .is_none()
        );
    }

    #[test]
    fn copies_written_as_another_kind_follow_its_scope_and_name_rules() {
        let as_namespace = vec![rule(json!({
            "groupVersionKind": {"version": "v1", "kind": "Secret"},
            "rules": [{"mutations": {"groupVersionKind": {"version": "v1", "kind": "Namespace"}}}]
        }))];
        let source = secret("MQ==", None);
        let decision = decide_among(&[], &[peer("b", Some(&source))], &as_namespace);
        let [Action::Apply { desired, .. }] = &decision.actions[..] else {
            panic!("{decision:?}")
        };
        assert_eq!(desired["kind"], "Namespace");
        assert!(desired["metadata"].get("namespace").is_none());
        assert_eq!(decision.target.unwrap().namespace, None);
        let bad_name = vec![rule(json!({
            "groupVersionKind": {"version": "v1", "kind": "Secret"},
            "rules": [{"mutations": {"overrides": [
                {"type": "replace", "path": "/metadata/name", "value": "Not_A_Name"}]}}]
        }))];
        let decision = decide_among(&[], &[peer("b", Some(&source))], &bad_name);
        assert!(
            matches!(&decision.actions[..], [Action::Invalid { message, .. }] if message.contains("\"Not_A_Name\" is not a valid object name")),
            "{decision:?}"
        );
    }
}

//! What to do with one object key (kind, namespace, name) of the local cluster, given what the
//! peers hold under that key: the ownership rules of cluster-registry, as a pure function.
//!
//! - A local object without the owner annotation was made here: it always wins.
//! - A copy is made from a peer's object that a rule matches, unless the object is marked
//!   `resource-sync-disabled`, is owned by this cluster, or is itself a copy whose owner is
//!   another live peer (then that owner is read directly: copies never feed copies while the
//!   original is reachable, so nothing ping-pongs).
//! - A copy is deleted only when its owner is live, its list of that kind is complete, and the
//!   object is not there. An unreachable owner never causes a deletion.

use serde_json::Value;

use super::{OWNER_ANNOTATION, SYNC_DISABLED_ANNOTATION, rules::RuleSet};
use crate::sink::up_to_date;

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

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Write this object (from peer `from`).
    Apply { desired: Value, from: String },
    /// Delete the local copy.
    Delete,
    /// Nothing to do, and why.
    Keep(&'static str),
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

/// Whether `current` already is `desired` (status included when the copy carries one).
fn fresh(current: &Value, desired: &Value) -> bool {
    up_to_date(current, desired)
        && desired
            .get("status")
            .is_none_or(|s| current.get("status") == Some(s))
}

pub fn decide(
    local_id: &str,
    local: Option<&Value>,
    peers: &[PeerView<'_>],
    rules: &[RuleSet],
    namespaced: bool,
) -> Action {
    if let Some(local) = local {
        if annotation(local, OWNER_ANNOTATION).is_none() {
            return Action::Keep("made here");
        }
        if sync_disabled(local) {
            return Action::Keep("resource-sync-disabled");
        }
    }
    let live_owner = |id: &str| peers.iter().any(|p| p.live && p.id == id);
    let mut candidates: Vec<(bool, &PeerView<'_>, &Value, &RuleSet)> = Vec::new();
    for peer in peers.iter().filter(|p| p.live) {
        let Some(object) = peer.object else { continue };
        let owner = owner(object, peer.id);
        if sync_disabled(object) || owner == local_id || (owner != peer.id && live_owner(owner)) {
            continue;
        }
        let rule = rules
            .iter()
            .find(|r| r.reads_from(peer.features) && r.matching(object, namespaced).is_some());
        if let Some(rule) = rule {
            candidates.push((owner != peer.id, peer, object, rule));
        }
    }
    // Originals first, then by cluster name: every cluster picks the same source.
    candidates.sort_by(|a, b| (a.0, a.1.name).cmp(&(b.0, b.1.name)));
    if let Some((_, peer, object, rule)) = candidates.first() {
        let mutations = rule
            .matching(object, namespaced)
            .expect("the candidate matched");
        let desired = super::rules::desired_copy(object, peer.id, mutations);
        if local.is_some_and(|l| fresh(l, &desired)) {
            return Action::Keep("up to date");
        }
        return Action::Apply {
            desired,
            from: peer.name.to_string(),
        };
    }
    let Some(local) = local else {
        return Action::Keep("nothing to copy");
    };
    let owner = owner(local, local_id);
    let source_gone = peers
        .iter()
        .any(|p| p.id == owner && p.live && p.listed && p.object.is_none());
    if source_gone {
        Action::Delete
    } else {
        Action::Keep("the source may still exist")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clusterregistry::api::ResourceSyncRuleSpec;
    use serde_json::json;

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
        let Action::Apply { desired, from } = decide(
            "here",
            None,
            &[peer("b", Some(&source))],
            &all_secrets(),
            true,
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
            decide(
                "here",
                Some(&desired),
                &[peer("b", Some(&source))],
                &all_secrets(),
                true
            ),
            Action::Keep("up to date")
        );
    }

    #[test]
    fn local_objects_always_win() {
        let local = secret("bG9jYWw=", None);
        let source = secret("MQ==", None);
        assert_eq!(
            decide(
                "here",
                Some(&local),
                &[peer("b", Some(&source))],
                &all_secrets(),
                true
            ),
            Action::Keep("made here")
        );
        assert_eq!(
            decide(
                "here",
                Some(&local),
                &[peer("b", None)],
                &all_secrets(),
                true
            ),
            Action::Keep("made here")
        );
    }

    #[test]
    fn drift_of_a_copy_is_reverted() {
        let source = secret("MQ==", None);
        let drifted = secret("ZWRpdGVk", Some("b"));
        let action = decide(
            "here",
            Some(&drifted),
            &[peer("b", Some(&source))],
            &all_secrets(),
            true,
        );
        assert!(matches!(action, Action::Apply { desired, .. } if desired["data"]["a"] == "MQ=="));
    }

    #[test]
    fn copies_are_deleted_only_when_the_live_owner_lost_the_source() {
        let copy = secret("MQ==", Some("b"));
        assert_eq!(
            decide(
                "here",
                Some(&copy),
                &[peer("b", None)],
                &all_secrets(),
                true
            ),
            Action::Delete
        );
        let mut down = peer("b", None);
        down.live = false;
        assert_eq!(
            decide("here", Some(&copy), &[down], &all_secrets(), true),
            Action::Keep("the source may still exist")
        );
        let mut unlisted = peer("b", None);
        unlisted.listed = false;
        assert_eq!(
            decide("here", Some(&copy), &[unlisted], &all_secrets(), true),
            Action::Keep("the source may still exist")
        );
        // Another copy at a third cluster does not keep it alive while the owner is live.
        let other_copy = secret("MQ==", Some("b"));
        assert_eq!(
            decide(
                "here",
                Some(&copy),
                &[peer("b", None), peer("c", Some(&other_copy))],
                &all_secrets(),
                true
            ),
            Action::Delete
        );
    }

    #[test]
    fn copies_are_read_from_the_original_while_it_is_live() {
        let original = secret("MQ==", None);
        let stale_copy = secret("b2xk", Some("b"));
        let peers = [peer("b", Some(&original)), peer("c", Some(&stale_copy))];
        let action = decide("here", None, &peers, &all_secrets(), true);
        assert!(matches!(action, Action::Apply { from, .. } if from == "b"));
        // Owner unreachable: the copy at c is used, with b still named as owner.
        let mut peers = peers;
        peers[0].live = false;
        let Action::Apply { from, desired } = decide("here", None, &peers, &all_secrets(), true)
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
            decide(
                "here",
                None,
                &[peer("b", Some(&ours))],
                &all_secrets(),
                true
            ),
            Action::Keep("nothing to copy")
        );
        let mut disabled = secret("MQ==", None);
        disabled["metadata"]["annotations"] = json!({ SYNC_DISABLED_ANNOTATION: "true" });
        assert_eq!(
            decide(
                "here",
                None,
                &[peer("b", Some(&disabled))],
                &all_secrets(),
                true
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
            decide("here", None, &[peer("b", Some(&source))], &rules, true),
            Action::Keep("nothing to copy")
        );
        let features =
            [json!({"metadata": {"name": "f"}, "spec": {"featureName": "test-secret-feature"}})];
        let mut with = peer("b", Some(&source));
        with.features = &features;
        assert!(matches!(
            decide("here", None, &[with], &rules, true),
            Action::Apply { .. }
        ));
    }
}

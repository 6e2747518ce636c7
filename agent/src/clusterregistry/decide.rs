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

use std::sync::Arc;

use serde_json::Value;

use super::{
    OWNER_ANNOTATION, SYNC_DISABLED_ANNOTATION,
    api::Cluster,
    rules::{Clusters, Rule, RuleSet, desired_copy},
};
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
    /// The copy cannot be made (a template failed): nothing is written or deleted for this key.
    Invalid { rule: String, message: String },
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

/// `clusters` are the Cluster objects, which templates in overrides refer to.
pub fn decide(
    local_id: &str,
    local: Option<&Value>,
    peers: &[PeerView<'_>],
    rules: &[RuleSet],
    namespaced: bool,
    clusters: &[Arc<Cluster>],
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
    let mut candidates: Vec<(bool, &PeerView<'_>, &Value, &RuleSet, &Rule)> = Vec::new();
    for peer in peers.iter().filter(|p| p.live) {
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
    // Originals first, then by cluster name: every cluster picks the same source.
    candidates.sort_by(|a, b| (a.0, a.1.name).cmp(&(b.0, b.1.name)));
    if let Some((_, peer, object, set, rule)) = candidates.first() {
        let clusters = Clusters {
            local_id,
            all: clusters,
        };
        let desired = match desired_copy(object, peer.id, rule, clusters) {
            Ok(desired) => desired,
            Err(error) => {
                return Action::Invalid {
                    rule: set.name.clone(),
                    message: error.to_string(),
                };
            }
        };
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
    use crate::clusterregistry::api::{ClusterSpec, ResourceSyncRuleSpec};
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
            decide(
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
            decide(
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
            decide(
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
        let action = decide(
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
            decide(
                "here",
                Some(&copy),
                &[peer("b", None)],
                &all_secrets(),
                true,
                &[]
            ),
            Action::Delete
        );
        let mut down = peer("b", None);
        down.live = false;
        assert_eq!(
            decide("here", Some(&copy), &[down], &all_secrets(), true, &[]),
            Action::Keep("the source may still exist")
        );
        let mut unlisted = peer("b", None);
        unlisted.listed = false;
        assert_eq!(
            decide("here", Some(&copy), &[unlisted], &all_secrets(), true, &[]),
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
                true,
                &[]
            ),
            Action::Delete
        );
    }

    #[test]
    fn copies_are_read_from_the_original_while_it_is_live() {
        let original = secret("MQ==", None);
        let stale_copy = secret("b2xk", Some("b"));
        let peers = [peer("b", Some(&original)), peer("c", Some(&stale_copy))];
        let action = decide("here", None, &peers, &all_secrets(), true, &[]);
        assert!(matches!(action, Action::Apply { from, .. } if from == "b"));
        // Owner unreachable: the copy at c is used, with b still named as owner.
        let mut peers = peers;
        peers[0].live = false;
        let Action::Apply { from, desired } =
            decide("here", None, &peers, &all_secrets(), true, &[])
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
                true,
                &[]
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
            decide("here", None, &[peer("b", Some(&source))], &rules, true, &[]),
            Action::Keep("nothing to copy")
        );
        let features =
            [json!({"metadata": {"name": "f"}, "spec": {"featureName": "test-secret-feature"}})];
        let mut with = peer("b", Some(&source));
        with.features = &features;
        assert!(matches!(
            decide("here", None, &[with], &rules, true, &[]),
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
        let Action::Apply { desired, .. } = decide(
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
            decide(
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
            decide(
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
        let action = decide(
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
        let Action::Apply { desired, from } = decide(
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
}

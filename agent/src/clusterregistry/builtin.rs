//! The group's own sync rules, built in (cluster-registry's "core" rules): every peer's Cluster
//! objects, peer kubeconfig Secrets and ResourceSyncRules are copied here like any rule's objects.
//! That is what lets one Cluster+Secret exchange with any member spread a new cluster to all of
//! them, and a ResourceSyncRule created on one cluster reach every cluster. They are not objects
//! (nobody can delete or edit them by accident); `--group-sync=false` switches them off.

use serde_json::json;

use super::{SECRET_TYPE, api::GROUP, rules::RuleSet};

/// Names of the built-in rules start with this; no ResourceSyncRule object has them.
const PREFIX: &str = "built-in:";

/// Whether `rule` is one of [`core_rules`].
pub fn is_core(rule: &RuleSet) -> bool {
    rule.name.starts_with(PREFIX)
}

/// The built-in rules: Clusters, Secrets of type [`SECRET_TYPE`], ResourceSyncRules; status is
/// never copied (it describes the cluster that writes it).
pub fn core_rules() -> Vec<RuleSet> {
    let registry = |kind: &str| json!({"group": GROUP, "version": "v1alpha1", "kind": kind});
    [
        (
            "clusters",
            json!({"groupVersionKind": registry("Cluster"), "rules": [{}]}),
        ),
        (
            "cluster-secrets",
            json!({
                "groupVersionKind": {"version": "v1", "kind": "Secret"},
                "rules": [{"match": [{"content": [{"key": "type", "value": SECRET_TYPE}]}]}],
            }),
        ),
        (
            "resourcesyncrules",
            json!({"groupVersionKind": registry("ResourceSyncRule"), "rules": [{}]}),
        ),
    ]
    .into_iter()
    .map(|(name, spec)| {
        let spec = serde_json::from_value(spec).expect("a built-in rule is a valid spec");
        RuleSet::compile(&format!("{PREFIX}{name}"), &spec).expect("a built-in rule compiles")
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn matched(object: &Value, namespaced: bool) -> Vec<String> {
        core_rules()
            .into_iter()
            .filter(|r| r.gvk.kind == object["kind"] && r.matching(object, namespaced).is_some())
            .map(|r| r.name)
            .collect()
    }

    #[test]
    fn the_group_objects_are_copied_and_nothing_else() {
        let cluster =
            json!({"kind": "Cluster", "metadata": {"name": "first"}, "spec": {"clusterID": "u"}});
        assert_eq!(matched(&cluster, false), ["built-in:clusters"]);
        let rule = json!({"kind": "ResourceSyncRule", "metadata": {"name": "test-secret-sink"}});
        assert_eq!(matched(&rule, false), ["built-in:resourcesyncrules"]);
        let peer_secret = json!({"kind": "Secret", "type": SECRET_TYPE,
            "metadata": {"name": "first", "namespace": "cluster-registry"}});
        assert_eq!(matched(&peer_secret, true), ["built-in:cluster-secrets"]);
        let other = json!({"kind": "Secret", "type": "Opaque",
            "metadata": {"name": "first", "namespace": "cluster-registry"}});
        assert!(matched(&other, true).is_empty());
        assert!(core_rules().iter().all(is_core));
        assert!(core_rules().iter().all(|r| !r.uses_features()));
    }
}

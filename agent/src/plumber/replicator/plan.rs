//! The Replicator's decisions, apart from I/O: what to do with one object on one cluster given
//! what is there, what each attempt comes to in the status, which clusters were dropped, and the
//! `Ready` condition. Everything here is a pure function of observed state, tested by tables.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use kube::ResourceExt;
use serde_json::{Map, Value};
use xcc_kube::status::Verdict;

use crate::{
    plumber::{
        api::{ApplyState, ApplyStatus, Reason, Replicator},
        certs::Bundle,
        desired::{self, Object},
    },
    sink::ORIGIN_ANNOTATION,
};

/// When to look at a Replicator again after applying it.
pub fn requeue(synced: bool) -> Duration {
    if synced {
        Duration::from_secs(300)
    } else {
        Duration::from_secs(10)
    }
}

/// What to do with one object on one cluster, given what is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A namespace that was there before: used (`existing`), never written or deleted.
    UseExisting,
    /// Someone else's object of that name: left as is (`Conflict`, with this message).
    LeaveAlone(String),
    /// Ours, and it holds what we want: nothing to write.
    Keep,
    /// Ours but changed by someone (or made by the original controller: `adopt`): applied with
    /// force, taking back the fields they took.
    PutBack { adopt: bool },
    /// Not there: applied without force, so that someone who made it since the read keeps their
    /// fields (the apply then fails with 409: [`made_meanwhile`]).
    Create,
}

/// The [`Step`] for `object` (whose body to apply is `body`) of the Replicator named
/// `replicator` (origin annotation `origin`), given `current`, the object found there (JSON).
pub fn step(
    object: &Object,
    body: &Value,
    current: Option<&Value>,
    origin: &str,
    replicator: &str,
) -> Step {
    let Some(current) = current else {
        return Step::Create;
    };
    let metadata = &current["metadata"];
    let theirs = metadata["annotations"][ORIGIN_ANNOTATION].as_str();
    let adopt = theirs.is_none() && desired::made_by_original(current, replicator);
    if theirs != Some(origin) && !adopt {
        if object.kind() == "Namespace" {
            return Step::UseExisting;
        }
        let managers: BTreeSet<&str> = metadata["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["manager"].as_str())
            .collect();
        let owner = theirs.map_or("no origin annotation".to_string(), |o| {
            format!("origin {o}")
        });
        return Step::LeaveAlone(xcc_kube::bounded(&format!(
            "{} {} exists and is not this Replicator's ({owner}; field managers: {}); left as is",
            object.kind(),
            object.name,
            managers.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    if desired::holds(current, body) {
        Step::Keep
    } else {
        Step::PutBack { adopt }
    }
}

/// The message of a [`Step::Create`] refused with 409 (`why`: the API server's message).
pub fn made_meanwhile(object: &Object, why: &str) -> String {
    xcc_kube::bounded(&format!(
        "{} {} was made meanwhile by someone else: {why}",
        object.kind(),
        object.name
    ))
}

/// The body to apply for `object` on one cluster, when it differs from `object.body`, and the
/// Service selector that cluster needs from now on (`carried`: that of an earlier object of the
/// same cluster).
///
/// A Deployment found with another selector keeps it (a selector cannot change), and the
/// Service of the same cluster (when the spec names a Deployment) selects what it selects.
pub fn adjust(
    replicator: &Replicator,
    object: &Object,
    current: Option<&Value>,
    carried: Option<&Map<String, Value>>,
) -> (Option<Value>, Option<Map<String, Value>>) {
    if object.kind() == "Deployment"
        && let Some(found) = current.and_then(|c| c.pointer("/spec/selector"))
        && let Some((body, labels)) = desired::keep_selector(replicator, &object.body, found)
    {
        return (Some(body), Some(labels));
    }
    if object.kind() == "Service"
        && replicator.spec.deployment_name.is_some()
        && let Some(labels) = carried
    {
        let mut body = object.body.clone();
        body["spec"]["selector"] = Value::Object(labels.clone());
        return (Some(body), None);
    }
    (None, None)
}

/// Whether the object found on removal (`current`, JSON) is ours to delete: a namespace that
/// was there, or someone else's object, never is.
pub fn ours_to_delete(current: &Value, origin: &str) -> bool {
    current["metadata"]["annotations"][ORIGIN_ANNOTATION].as_str() == Some(origin)
}

/// A pass over one cluster: applying a Replicator's objects, or removing them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    Apply,
    Remove,
}

/// What one object's attempt on one cluster came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Applied (with this state and message), or removed (`None`: nothing to report).
    Done(Option<(ApplyState, Option<String>)>),
    /// The cluster answered with an error (bounded text).
    Refused(String),
    /// The cluster did not answer (bounded text): the objects after this one are not tried.
    Silent(String),
}

impl Pass {
    /// The objects in the order this pass works on them (removal: the reverse).
    pub fn order(self, objects: &[Object]) -> Vec<&Object> {
        match self {
            Pass::Apply => objects.iter().collect(),
            Pass::Remove => objects.iter().rev().collect(),
        }
    }

    /// The status entry of `attempt` for `object` on `cluster`, if any (a removed object has
    /// none: the removal lists only what was left behind).
    pub fn entry(self, cluster: &str, object: &Object, attempt: &Attempt) -> Option<ApplyStatus> {
        let (status, message) = match (self, attempt) {
            (_, Attempt::Done(None)) => return None,
            (_, Attempt::Done(Some((status, message)))) => (status.clone(), message.clone()),
            (Pass::Apply, Attempt::Refused(why)) => (ApplyState::Failed, Some(why.clone())),
            (Pass::Apply, Attempt::Silent(why)) => (ApplyState::Unreachable, Some(why.clone())),
            (Pass::Remove, Attempt::Refused(why) | Attempt::Silent(why)) => {
                (ApplyState::LeftBehind, Some(why.clone()))
            }
        };
        Some(entry(cluster, object, status, message))
    }

    /// The entries of a cluster this pass cannot work on at all: silent (`Silent`) or without a
    /// usable client (`Refused`), for every object.
    pub fn not_tried(
        self,
        cluster: &str,
        objects: &[Object],
        attempt: &Attempt,
    ) -> Vec<ApplyStatus> {
        self.order(objects)
            .into_iter()
            .filter_map(|o| self.entry(cluster, o, attempt))
            .collect()
    }
}

/// A status entry.
pub fn entry(
    cluster: &str,
    object: &Object,
    status: ApplyState,
    message: Option<String>,
) -> ApplyStatus {
    ApplyStatus {
        cluster: cluster.to_string(),
        kind: object.kind().to_string(),
        name: object.name.clone(),
        apply_status: status,
        message,
    }
}

/// The clusters of `replicator`'s status (sorted, once each).
pub fn clusters_in_status(replicator: &Replicator) -> Vec<String> {
    replicator
        .status
        .iter()
        .flat_map(|s| &s.applied)
        .map(|e| e.cluster.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Clusters of the status that are no longer written (dropped from `targetCluster`, or left
/// behind before): our objects there go.
pub fn stale_clusters(replicator: &Replicator, in_use: &BTreeSet<String>) -> Vec<String> {
    clusters_in_status(replicator)
        .into_iter()
        .filter(|c| !in_use.contains(c))
        .collect()
}

/// Whether another Replicator (not being deleted) replicates into `replicator`'s namespace:
/// then that namespace is never deleted (it would take the other's objects with it).
pub fn namespace_shared(replicator: &Replicator, all: &[Replicator]) -> bool {
    let namespace = &replicator.spec.replication_namespace;
    all.iter().any(|other| {
        other.name_any() != replicator.name_any()
            && other.metadata.deletion_timestamp.is_none()
            && &other.spec.replication_namespace == namespace
    })
}

/// `objects` to remove: without the namespace when it is `shared`.
pub fn to_remove(objects: &[Object], shared: bool) -> Vec<Object> {
    objects
        .iter()
        .filter(|o| !(shared && o.kind() == "Namespace"))
        .cloned()
        .collect()
}

/// Certificates that carry only the Secrets' names: all that deletion needs.
pub fn names_only() -> Bundle {
    Bundle {
        hosts: Vec::new(),
        not_after: 0,
        ca: BTreeMap::new(),
        client: BTreeMap::new(),
    }
}

/// The `Ready` condition for `entries`: synced when every object is `applied` or `existing`;
/// else the worst state decides the reason (Failed, then Conflict, then LeftBehind, then
/// Unreachable) and the message lists what is not, per cluster.
pub fn verdict(entries: &[ApplyStatus]) -> Verdict {
    let bad: Vec<&ApplyStatus> = entries
        .iter()
        .filter(|e| e.apply_status != ApplyState::Applied && e.apply_status != ApplyState::Existing)
        .collect();
    if bad.is_empty() {
        let clusters: BTreeSet<&str> = entries.iter().map(|e| e.cluster.as_str()).collect();
        return Verdict::ok(
            Reason::Synced,
            format!("every object applied on {} cluster(s)", clusters.len()),
        );
    }
    let rank = |s: &ApplyState| match s {
        ApplyState::Failed => 0,
        ApplyState::Conflict => 1,
        ApplyState::LeftBehind => 2,
        _ => 3,
    };
    let worst = bad
        .iter()
        .min_by_key(|e| rank(&e.apply_status))
        .expect("not empty");
    let reason = match worst.apply_status {
        ApplyState::Failed => Reason::ApplyFailed,
        ApplyState::Conflict => Reason::Conflict,
        ApplyState::LeftBehind => Reason::LeftBehind,
        _ => Reason::Unreachable,
    };
    let mut by_cluster: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for e in &bad {
        by_cluster
            .entry(e.cluster.as_str())
            .or_default()
            .push(format!("{} {} {}", e.kind, e.name, e.apply_status));
    }
    let summary = by_cluster
        .iter()
        .map(|(c, list)| format!("{c}: {}", list.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    let first = worst.message.clone().unwrap_or_default();
    Verdict::not(reason, xcc_kube::bounded(&format!("{summary} ({first})")))
}

/// The `Ready` condition after a deletion left `left` behind (`None`: all removed, nothing to
/// write).
pub fn left_behind(left: &[ApplyStatus]) -> Option<Verdict> {
    if left.is_empty() {
        return None;
    }
    let message = verdict(left).message;
    Some(Verdict::not(
        Reason::LeftBehind,
        xcc_kube::bounded(&format!("Replicator deleted; left behind: {message}")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plumber::desired::Kinds;
    use serde_json::json;

    fn replicator(spec: Value) -> Replicator {
        serde_json::from_value(json!({
            "apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "Replicator",
            "metadata": {"name": "app"}, "spec": spec,
        }))
        .unwrap()
    }

    fn app() -> Replicator {
        replicator(
            json!({"replicationNamespace": "test-ns", "configMapName": "nginx",
                          "configMapData": {"a": "1"}}),
        )
    }

    /// The namespace and the ConfigMap of [`app`].
    fn objects() -> Vec<Object> {
        desired::objects(&app(), "app", None, &Kinds::new()).unwrap()
    }

    fn found(kind: &str, annotations: Value, managers: &[&str], data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": kind,
               "metadata": {"name": "x", "annotations": annotations,
                            "managedFields": managers.iter().map(|m| json!({"manager": m})).collect::<Vec<_>>()},
               "data": {"a": data}})
    }

    #[test]
    fn what_is_done_with_an_object_given_what_is_there() {
        let origin = desired::origin("app");
        let ours = json!({ORIGIN_ANNOTATION: origin});
        let other = json!({ORIGIN_ANNOTATION: desired::origin("other")});
        let none = json!({});
        let [namespace, config_map] = <[Object; 2]>::try_from(objects()).unwrap();
        let mut original = found("ConfigMap", none.clone(), &["plumberctl"], "1");
        original["metadata"]["ownerReferences"] = json!([{"apiVersion": "plumber.jnytnai0613.github.io/v1",
            "kind": "Replicator", "name": "app", "uid": "u", "controller": true}]);
        let rows: Vec<(&str, &Object, Option<Value>, Step)> = vec![
            ("nothing there: made, unforced", &config_map, None, Step::Create),
            ("ours as wanted: not written", &config_map,
             Some(found("ConfigMap", ours.clone(), &["xcc-agent"], "1")), Step::Keep),
            ("ours, edited: put back", &config_map,
             Some(found("ConfigMap", ours.clone(), &["xcc-agent", "kubectl-edit"], "edited")),
             Step::PutBack { adopt: false }),
            ("made by the original controller: adopted", &config_map, Some(original),
             Step::PutBack { adopt: true }),
            ("a namespace that was there: used", &namespace,
             Some(found("Namespace", none.clone(), &["kubectl-create"], "")), Step::UseExisting),
            ("someone else's: left alone", &config_map,
             Some(found("ConfigMap", none, &["kubectl-create"], "1")),
             Step::LeaveAlone("ConfigMap nginx exists and is not this Replicator's (no origin annotation; field managers: kubectl-create); left as is".into())),
            ("another Replicator's: left alone", &config_map,
             Some(found("ConfigMap", other, &["xcc-agent"], "1")),
             Step::LeaveAlone(format!("ConfigMap nginx exists and is not this Replicator's (origin {}; field managers: xcc-agent); left as is", desired::origin("other")))),
        ];
        for (situation, object, current, want) in rows {
            let got = step(object, &object.body, current.as_ref(), &origin, "app");
            assert_eq!(got, want, "{situation}");
        }
    }

    #[test]
    fn a_deployment_found_with_another_selector_keeps_it_and_its_service_follows() {
        let web = replicator(
            json!({"replicationNamespace": "test-ns", "deploymentName": "web",
            "deploymentSpec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "serviceName": "web", "serviceSpec": {"ports": [{"port": 80}]}}),
        );
        let objects = desired::objects(&web, "web", None, &Kinds::new()).unwrap();
        let deployment = objects.iter().find(|o| o.kind() == "Deployment").unwrap();
        let service = objects.iter().find(|o| o.kind() == "Service").unwrap();
        // Nothing there, or the same selector: the body as desired.
        assert_eq!(adjust(&web, deployment, None, None), (None, None));
        let same = json!({"spec": {"selector": deployment.body["spec"]["selector"]}});
        assert_eq!(adjust(&web, deployment, Some(&same), None), (None, None));
        // Another selector: kept, and carried to the Service.
        let other = json!({"spec": {"selector": {"matchLabels": {"run": "old"}}}});
        let (body, carried) = adjust(&web, deployment, Some(&other), None);
        assert_eq!(
            body.unwrap()["spec"]["selector"]["matchLabels"]["run"],
            "old"
        );
        let carried = carried.unwrap();
        let (body, none) = adjust(&web, service, None, Some(&carried));
        assert_eq!(body.unwrap()["spec"]["selector"]["run"], "old");
        assert_eq!(none, None);
    }

    #[test]
    fn what_each_attempt_comes_to_in_the_status() {
        let object = &objects()[1];
        let rows = [
            (
                Pass::Apply,
                Attempt::Done(Some((ApplyState::Applied, None))),
                Some((ApplyState::Applied, None)),
            ),
            (
                Pass::Apply,
                Attempt::Done(Some((ApplyState::Conflict, Some("m".into())))),
                Some((ApplyState::Conflict, Some("m"))),
            ),
            (
                Pass::Apply,
                Attempt::Refused("403".into()),
                Some((ApplyState::Failed, Some("403"))),
            ),
            (
                Pass::Apply,
                Attempt::Silent("timeout".into()),
                Some((ApplyState::Unreachable, Some("timeout"))),
            ),
            (Pass::Remove, Attempt::Done(None), None),
            (
                Pass::Remove,
                Attempt::Refused("403".into()),
                Some((ApplyState::LeftBehind, Some("403"))),
            ),
            (
                Pass::Remove,
                Attempt::Silent("timeout".into()),
                Some((ApplyState::LeftBehind, Some("timeout"))),
            ),
        ];
        for (pass, attempt, want) in rows {
            let got = pass.entry("b", object, &attempt);
            let got = got
                .as_ref()
                .map(|e| (e.apply_status.clone(), e.message.as_deref()));
            assert_eq!(got, want, "{pass:?} {attempt:?}");
        }
        // A cluster not tried: every object, removal in reverse order.
        let silent = Attempt::Silent("down".into());
        let kinds = |entries: Vec<ApplyStatus>| {
            entries
                .into_iter()
                .map(|e| (e.kind, e.apply_status))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            kinds(Pass::Apply.not_tried("b", &objects(), &silent)),
            [
                ("Namespace".into(), "Unreachable".into()),
                ("ConfigMap".into(), "Unreachable".into())
            ]
        );
        assert_eq!(
            kinds(Pass::Remove.not_tried("b", &objects(), &silent)),
            [
                ("ConfigMap".into(), "LeftBehind".into()),
                ("Namespace".into(), "LeftBehind".into())
            ]
        );
    }

    #[test]
    fn clusters_dropped_from_the_spec_are_stale() {
        let mut app = app();
        app.status = Some(
            serde_json::from_value(json!({"applied": [
                {"cluster": "a", "kind": "ConfigMap", "name": "nginx", "applyStatus": "applied"},
                {"cluster": "b", "kind": "ConfigMap", "name": "nginx", "applyStatus": "applied"},
                {"cluster": "b", "kind": "Namespace", "name": "test-ns", "applyStatus": "existing"},
                {"cluster": "c", "kind": "ConfigMap", "name": "nginx", "applyStatus": "LeftBehind"},
            ]}))
            .unwrap(),
        );
        assert_eq!(clusters_in_status(&app), ["a", "b", "c"]);
        let in_use = BTreeSet::from(["a".to_string(), "b".to_string()]);
        assert_eq!(stale_clusters(&app, &in_use), ["c"]);
        assert!(
            stale_clusters(&app, &BTreeSet::from(["a".into(), "b".into(), "c".into()])).is_empty()
        );
    }

    #[test]
    fn a_namespace_another_live_replicator_uses_is_kept() {
        let app = app();
        let other = |ns: &str, deleting: bool| {
            let mut r = replicator(json!({"replicationNamespace": ns}));
            r.metadata.name = Some("other".into());
            if deleting {
                r.metadata.deletion_timestamp =
                    Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
            }
            r
        };
        let rows = [
            ("alone", vec![app.clone()], false),
            (
                "another in the same namespace",
                vec![app.clone(), other("test-ns", false)],
                true,
            ),
            (
                "another elsewhere",
                vec![app.clone(), other("elsewhere", false)],
                false,
            ),
            (
                "another in the same namespace, being deleted",
                vec![app.clone(), other("test-ns", true)],
                false,
            ),
        ];
        for (situation, all, shared) in rows {
            assert_eq!(namespace_shared(&app, &all), shared, "{situation}");
            let kinds: Vec<String> = to_remove(&objects(), shared)
                .iter()
                .map(|o| o.kind().to_string())
                .collect();
            let want: &[&str] = if shared {
                &["ConfigMap"]
            } else {
                &["Namespace", "ConfigMap"]
            };
            assert_eq!(kinds, want, "{situation}");
        }
    }

    use super::super::tests::e;

    #[test]
    fn the_ready_condition_names_the_worst_state() {
        let rows: [(&str, Vec<ApplyStatus>, bool, Reason); 6] = [
            (
                "all applied or existing",
                vec![e("a", ApplyState::Applied), e("b", ApplyState::Existing)],
                true,
                Reason::Synced,
            ),
            (
                "one silent target",
                vec![e("a", ApplyState::Applied), e("b", ApplyState::Unreachable)],
                false,
                Reason::Unreachable,
            ),
            (
                "a conflict outranks a silent target",
                vec![
                    e("b", ApplyState::Unreachable),
                    e("c", ApplyState::Conflict),
                ],
                false,
                Reason::Conflict,
            ),
            (
                "a failure outranks a conflict",
                vec![e("c", ApplyState::Conflict), e("d", ApplyState::Failed)],
                false,
                Reason::ApplyFailed,
            ),
            (
                "left behind outranks unreachable",
                vec![
                    e("b", ApplyState::Unreachable),
                    e("c", ApplyState::LeftBehind),
                ],
                false,
                Reason::LeftBehind,
            ),
            ("nothing yet", vec![], true, Reason::Synced),
        ];
        for (situation, entries, ready, why) in rows {
            let verdict = verdict(&entries);
            assert_eq!(verdict.ready, ready, "{situation}");
            assert_eq!(verdict.reason, why, "{situation}");
        }
        let silent = verdict(&[e("a", ApplyState::Applied), e("b", ApplyState::Unreachable)]);
        assert_eq!(silent.message, "b: Deployment nginx Unreachable (why)");
        assert_eq!(requeue(true), Duration::from_secs(300));
        assert_eq!(requeue(false), Duration::from_secs(10));
    }

    #[test]
    fn a_deletion_that_left_objects_behind_says_which() {
        assert_eq!(left_behind(&[]), None);
        let left = left_behind(&[e("b", ApplyState::LeftBehind)]).unwrap();
        assert!(!left.ready);
        assert_eq!(left.reason, Reason::LeftBehind);
        assert_eq!(
            left.message,
            "Replicator deleted; left behind: b: Deployment nginx LeftBehind (why)"
        );
    }
}

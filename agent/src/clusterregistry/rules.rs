//! ResourceSyncRules compiled for use: which objects a rule matches, which peers it reads from,
//! and what the local copy of a matching object looks like. Pure functions over JSON objects.

use std::{collections::BTreeMap, sync::Arc};

use jsonpath_rust::{
    parser::{model::JpQuery, parse_json_path},
    query::js_path_process,
};
use kube::core::{Selector, SelectorExt};
use serde_json::{Map, Value};

use super::{
    OWNER_ANNOTATION,
    api::{
        Cluster, ClusterFeatureMatch, GroupVersionKind, LabelSelector, MapMutations, Match,
        Mutations, Override, ResourceSyncRuleSpec, RuleReason,
    },
    template::{self, ValueTemplate},
};

/// Why a ResourceSyncRule cannot work.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    #[error("{field}: invalid selector: {reason}")]
    Selector { field: String, reason: String },
    #[error("{field}: invalid JSONPath {path:?}: {reason}")]
    JsonPath {
        field: String,
        path: String,
        reason: String,
    },
    #[error("{field}: {reason}")]
    Override { field: String, reason: String },
    #[error("{field}: not a valid template: {reason}")]
    Template { field: String, reason: String },
}

impl RuleError {
    /// Short label for Events and status reasons.
    pub fn reason(&self) -> RuleReason {
        match self {
            RuleError::Selector { .. } => RuleReason::InvalidSelector,
            RuleError::JsonPath { .. } => RuleReason::InvalidJsonPath,
            RuleError::Override { .. } => RuleReason::InvalidOverride,
            RuleError::Template { .. } => RuleReason::InvalidTemplate,
        }
    }
}

/// A ResourceSyncRule, checked and ready to match.
#[derive(Debug, Clone)]
pub struct RuleSet {
    pub name: String,
    pub gvk: GroupVersionKind,
    features: Vec<(String, Selector)>,
    rules: Vec<Rule>,
}

/// Why the copy of one object cannot be made; the rule as a whole still works.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CopyError {
    #[error("{field}: the template failed: {reason}")]
    Render { field: String, reason: String },
    #[error("{field}: the template needs {role}, but no Cluster has clusterID {id:?}")]
    UnknownCluster {
        field: String,
        role: &'static str,
        id: String,
    },
}

/// One entry of `spec.rules`, compiled.
#[derive(Debug, Clone)]
pub struct Rule {
    matches: Vec<Matcher>,
    mutations: Mutations,
    /// Per override: its value's field, and the parsed template when the value is one.
    values: Vec<(String, Option<ValueTemplate>)>,
}

/// The Cluster objects templates refer to (`.Cluster`, `.LocalCluster`), by `spec.clusterID`.
#[derive(Debug, Clone, Copy)]
pub struct Clusters<'a> {
    pub local_id: &'a str,
    pub all: &'a [Arc<Cluster>],
}

impl<'a> Clusters<'a> {
    fn by_id(&self, id: &str) -> Option<&'a Cluster> {
        self.all
            .iter()
            .find(|c| c.spec.cluster_id == id)
            .map(|c| &**c)
    }
}

#[derive(Debug, Clone)]
struct Matcher {
    name: Option<String>,
    namespace: Option<String>,
    namespaces: Vec<String>,
    labels: Vec<Selector>,
    annotations: Vec<Selector>,
    content: Vec<(JpQuery, Value)>,
}

fn selector(
    field: String,
    labels: &BTreeMap<String, String>,
    expressions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement],
) -> Result<Selector, RuleError> {
    let selector = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        match_labels: Some(labels.clone()),
        match_expressions: Some(expressions.to_vec()),
    };
    Selector::try_from(selector).map_err(|e| RuleError::Selector {
        field,
        reason: e.to_string(),
    })
}

fn json_path(field: String, key: &str) -> Result<JpQuery, RuleError> {
    // cluster-registry's keys are written `.spec.type`; RFC 9535 wants `$.spec.type`.
    let query = if key.starts_with('$') {
        key.to_string()
    } else if key.starts_with('.') || key.starts_with('[') {
        format!("${key}")
    } else {
        format!("$.{key}")
    };
    parse_json_path(&query).map_err(|e| RuleError::JsonPath {
        field,
        path: key.to_string(),
        reason: e.to_string(),
    })
}

/// Checks one override; returns its value's template if the value is one.
fn check_override(field: String, o: &Override) -> Result<Option<ValueTemplate>, RuleError> {
    let fail = |reason: String| RuleError::Override {
        field: field.clone(),
        reason,
    };
    if !o.path.starts_with('/') || o.path.len() < 2 {
        return Err(fail(format!(
            "path {:?} must be a JSON pointer such as /spec/replicas",
            o.path
        )));
    }
    // The copy's kind comes from mutations.groupVersionKind, and its metadata carries the owner.
    match o.path.as_str() {
        "/apiVersion" | "/kind" => {
            return Err(fail(format!(
                "path {:?}: set the copy's kind with mutations.groupVersionKind",
                o.path
            )));
        }
        "/metadata" => {
            return Err(fail(
                "path \"/metadata\": override its fields (/metadata/name, /metadata/labels/...) \
                 instead"
                    .into(),
            ));
        }
        _ => {}
    }
    match o.type_.as_str() {
        "replace" => {
            let value = o.value.as_deref().unwrap_or_default();
            if template::is_template(value) {
                // What it renders to is only known per object; YAML is checked then.
                return ValueTemplate::parse(value).map(Some).map_err(|error| {
                    RuleError::Template {
                        field: format!("{field}.value"),
                        reason: error.to_string(),
                    }
                });
            }
            if o.parse_value {
                xcc_kube::yaml::from_str::<Value>(value)
                    .map(drop)
                    .map_err(|e| fail(format!("value is not YAML: {e}")))?;
            }
            Ok(None)
        }
        "remove" => Ok(None),
        other => Err(fail(format!(
            "type {other:?} is not one of \"replace\", \"remove\""
        ))),
    }
}

fn matcher(field: &str, m: &Match) -> Result<Matcher, RuleError> {
    let key = m.object_key.as_ref();
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    Ok(Matcher {
        name: key
            .and_then(|k| non_empty(&k.name))
            .or_else(|| m.name.clone().filter(|n| !n.is_empty())),
        namespace: key
            .and_then(|k| non_empty(&k.namespace))
            .or_else(|| m.namespace.clone().filter(|n| !n.is_empty())),
        namespaces: m.namespaces.clone(),
        labels: m
            .labels
            .iter()
            .enumerate()
            .map(|(i, s): (usize, &LabelSelector)| {
                selector(
                    format!("{field}.labels[{i}]"),
                    &s.match_labels,
                    &s.match_expressions,
                )
            })
            .collect::<Result<_, _>>()?,
        annotations: m
            .annotations
            .iter()
            .enumerate()
            .map(|(i, s)| {
                selector(
                    format!("{field}.annotations[{i}]"),
                    &s.match_annotations,
                    &s.match_expressions,
                )
            })
            .collect::<Result<_, _>>()?,
        content: m
            .content
            .iter()
            .enumerate()
            .map(|(i, c)| {
                Ok((
                    json_path(format!("{field}.content[{i}].key"), &c.key)?,
                    c.value.clone(),
                ))
            })
            .collect::<Result<_, _>>()?,
    })
}

fn string_map(object: &Value, field: &str) -> BTreeMap<String, String> {
    object["metadata"][field]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

impl Matcher {
    fn matches(&self, object: &Value, namespaced: bool) -> bool {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        if self.name.as_deref().is_some_and(|n| n != name) {
            return false;
        }
        if namespaced {
            if self.namespace.as_deref().is_some_and(|n| n != namespace) {
                return false;
            }
            if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n == namespace) {
                return false;
            }
        }
        let labels = string_map(object, "labels");
        if !self.labels.iter().all(|s| s.matches(&labels)) {
            return false;
        }
        let annotations = string_map(object, "annotations");
        if !self.annotations.iter().all(|s| s.matches(&annotations)) {
            return false;
        }
        self.content.iter().all(|(path, value)| {
            js_path_process(path, object)
                .is_ok_and(|found| found.into_iter().any(|node| node.val() == value))
        })
    }
}

impl RuleSet {
    pub fn compile(name: &str, spec: &ResourceSyncRuleSpec) -> Result<RuleSet, RuleError> {
        let features = spec
            .cluster_feature_match
            .iter()
            .enumerate()
            .map(|(i, f): (usize, &ClusterFeatureMatch)| {
                Ok((
                    f.feature_name.clone(),
                    selector(
                        format!("spec.clusterFeatureMatch[{i}]"),
                        &f.match_labels,
                        &f.match_expressions,
                    )?,
                ))
            })
            .collect::<Result<_, RuleError>>()?;
        let mut rules = Vec::new();
        for (i, rule) in spec.rules.iter().enumerate() {
            let field = format!("spec.rules[{i}]");
            let mutations = rule.mutations.clone().unwrap_or_default();
            if let Some(gvk) = &mutations.group_version_kind
                && (gvk.version.is_empty() || gvk.kind.is_empty())
            {
                return Err(RuleError::Override {
                    field: format!("{field}.mutations.groupVersionKind"),
                    reason: "needs a version and a kind".into(),
                });
            }
            let mut values = Vec::new();
            for (j, o) in mutations.overrides.iter().enumerate() {
                let at = format!("{field}.mutations.overrides[{j}]");
                let template = check_override(at.clone(), o)?;
                values.push((format!("{at}.value"), template));
            }
            let matches = rule
                .matches
                .iter()
                .enumerate()
                .map(|(j, m)| matcher(&format!("{field}.match[{j}]"), m))
                .collect::<Result<_, _>>()?;
            rules.push(Rule {
                matches,
                mutations,
                values,
            });
        }
        Ok(RuleSet {
            name: name.to_string(),
            gvk: spec.group_version_kind.clone(),
            features,
            rules,
        })
    }

    /// The first rule matching `object`, if any does.
    pub fn matching(&self, object: &Value, namespaced: bool) -> Option<&Rule> {
        self.rules.iter().find(|r| {
            r.matches.is_empty() || r.matches.iter().any(|m| m.matches(object, namespaced))
        })
    }

    /// Whether this rule reads from a peer whose ClusterFeatures are `features`: always without
    /// `clusterFeatureMatch`, else when one of them matches an entry (feature name and labels).
    pub fn reads_from(&self, features: &[Value]) -> bool {
        self.features.is_empty()
            || self.features.iter().any(|(name, selector)| {
                features.iter().any(|f| {
                    (name.is_empty() || f["spec"]["featureName"].as_str() == Some(name))
                        && selector.matches(&string_map(f, "labels"))
                })
            })
    }

    /// The namespaces this rule can match objects in, read from its match entries
    /// (`objectKey.namespace`, `namespace`, `namespaces`); `None` when some entry (or an entry
    /// list left empty) matches in any namespace. The peers' readers may read the rule's kind
    /// there only ([`grants`](super::grants)).
    pub fn namespaces(&self) -> Option<std::collections::BTreeSet<String>> {
        let mut all = std::collections::BTreeSet::new();
        for rule in &self.rules {
            if rule.matches.is_empty() {
                return None;
            }
            for m in &rule.matches {
                match (&m.namespace, m.namespaces.is_empty()) {
                    // Both: the object must be in `namespace` and in `namespaces`.
                    (Some(one), true) => {
                        all.insert(one.clone());
                    }
                    (Some(one), false) => {
                        if m.namespaces.contains(one) {
                            all.insert(one.clone());
                        }
                    }
                    (None, false) => all.extend(m.namespaces.iter().cloned()),
                    (None, true) => return None,
                }
            }
        }
        Some(all)
    }

    /// Whether a rule needs the peers' ClusterFeatures.
    pub fn uses_features(&self) -> bool {
        !self.features.is_empty()
    }

    /// The kinds copies are written as: the rule's own, or that of a `groupVersionKind`
    /// mutation.
    pub fn targets(&self) -> Vec<GroupVersionKind> {
        let mut kinds = Vec::new();
        for rule in &self.rules {
            let gvk = rule
                .mutations
                .group_version_kind
                .as_ref()
                .unwrap_or(&self.gvk);
            if !kinds.contains(gvk) {
                kinds.push(gvk.clone());
            }
        }
        kinds
    }
}

/// Metadata fields a copy keeps; the rest (uid, resourceVersion, managedFields, ownerReferences,
/// finalizers, timestamps, generation) belongs to the source's API server.
const KEPT_METADATA: [&str; 4] = ["name", "namespace", "labels", "annotations"];

/// Annotations that describe how the source was written, not what it is.
const DROPPED_ANNOTATIONS: [&str; 1] = ["kubectl.kubernetes.io/last-applied-configuration"];

/// The local copy of `source`: server-managed metadata stripped, the mutations of `rule` applied,
/// and the owner annotation and label set to `owner` unless the source already names its owner.
/// Templates in override values see `source`, the owner's Cluster and the local Cluster; when one
/// cannot be rendered there is no copy at all.
pub fn desired_copy(
    source: &Value,
    owner: &str,
    rule: &Rule,
    clusters: Clusters<'_>,
) -> Result<Value, CopyError> {
    let mutations = &rule.mutations;
    let mut copy = Map::new();
    for (key, value) in source.as_object().into_iter().flatten() {
        match key.as_str() {
            "metadata" => {
                let metadata: Map<String, Value> = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| KEPT_METADATA.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                copy.insert(key.clone(), Value::Object(metadata));
            }
            "status" if !mutations.sync_status => {}
            _ => {
                copy.insert(key.clone(), value.clone());
            }
        }
    }
    let mut copy = Value::Object(copy);
    if let Some(gvk) = &mutations.group_version_kind {
        copy["apiVersion"] = Value::String(api_version(gvk));
        copy["kind"] = Value::String(gvk.kind.clone());
    }
    let owner = source["metadata"]["annotations"][OWNER_ANNOTATION]
        .as_str()
        .unwrap_or(owner)
        .to_string();
    for annotation in DROPPED_ANNOTATIONS {
        remove_key(&mut copy, "annotations", annotation);
    }
    if let Some(m) = &mutations.annotations {
        mutate_map(&mut copy, "annotations", m);
    }
    if let Some(m) = &mutations.labels {
        mutate_map(&mut copy, "labels", m);
    }
    // Built once per copy, and only for rules with templates.
    let mut data = None;
    for (o, (field, template)) in mutations.overrides.iter().zip(&rule.values) {
        let value = match template {
            None => o.value.clone().unwrap_or_default(),
            Some(template) => {
                let data = match &mut data {
                    Some(data) => data,
                    None => data.insert(template_data(source, &owner, clusters, field)?),
                };
                template.render(data).map_err(|error| CopyError::Render {
                    field: field.clone(),
                    reason: error.to_string(),
                })?
            }
        };
        apply_override(&mut copy, o, value);
    }
    for map in ["annotations", "labels"] {
        set_key(&mut copy, map, OWNER_ANNOTATION, &owner);
    }
    Ok(copy)
}

/// `group/version`, or `version` for the core group.
pub fn api_version(gvk: &GroupVersionKind) -> String {
    if gvk.group.is_empty() {
        gvk.version.clone()
    } else {
        format!("{}/{}", gvk.group, gvk.version)
    }
}

fn template_data(
    source: &Value,
    owner: &str,
    clusters: Clusters<'_>,
    field: &str,
) -> Result<template::Data, CopyError> {
    let find = |id: &str, role| {
        clusters.by_id(id).ok_or_else(|| CopyError::UnknownCluster {
            field: field.to_string(),
            role,
            id: id.to_string(),
        })
    };
    let cluster = find(owner, ".Cluster (the cluster the object originates from)")?;
    let local = find(clusters.local_id, ".LocalCluster")?;
    Ok(template::context(source, cluster, local))
}

fn meta_map<'a>(object: &'a mut Value, map: &str) -> &'a mut Map<String, Value> {
    let metadata = &mut object["metadata"];
    if !metadata[map].is_object() {
        metadata[map] = Value::Object(Map::new());
    }
    metadata[map].as_object_mut().expect("an object")
}

pub(super) fn set_key(object: &mut Value, map: &str, key: &str, value: &str) {
    meta_map(object, map).insert(key.to_string(), Value::String(value.to_string()));
}

pub(super) fn remove_key(object: &mut Value, map: &str, key: &str) {
    if let Some(m) = object["metadata"][map].as_object_mut() {
        m.remove(key);
        if m.is_empty() {
            object["metadata"]
                .as_object_mut()
                .expect("metadata is an object")
                .remove(map);
        }
    }
}

fn mutate_map(object: &mut Value, map: &str, mutation: &MapMutations) {
    for key in &mutation.remove {
        remove_key(object, map, key);
    }
    for (key, value) in &mutation.add {
        set_key(object, map, key, value);
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// Applies one override (checked by [`RuleSet::compile`]) with its value, rendered if it was a
/// template.
fn apply_override(object: &mut Value, o: &Override, raw: String) {
    let tokens: Vec<String> = o.path[1..].split('/').map(unescape).collect();
    let (last, parents) = tokens.split_last().expect("a checked path has a token");
    let mut node = object;
    for token in parents {
        node = match node {
            Value::Array(items) => match token.parse::<usize>().ok().and_then(|i| items.get_mut(i))
            {
                Some(item) => item,
                None => return,
            },
            Value::Object(map) => {
                if o.type_ == "remove" && !map.contains_key(token) {
                    return;
                }
                map.entry(token.clone())
                    .or_insert_with(|| Value::Object(Map::new()))
            }
            _ => return,
        };
    }
    let value = if o.parse_value {
        xcc_kube::yaml::from_str(&raw).unwrap_or(Value::String(raw))
    } else {
        Value::String(raw)
    };
    match (node, o.type_.as_str()) {
        (Value::Object(map), "replace") => {
            map.insert(last.clone(), value);
        }
        (Value::Object(map), _) => {
            map.remove(last);
        }
        (Value::Array(items), kind) => {
            if let Some(i) = last.parse::<usize>().ok().filter(|i| *i < items.len()) {
                if kind == "replace" {
                    items[i] = value;
                } else {
                    items.remove(i);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clusterregistry::api::ClusterSpec;
    use serde_json::json;

    fn cluster(name: &str, id: &str) -> Arc<Cluster> {
        let spec = ClusterSpec {
            cluster_id: id.into(),
            ..Default::default()
        };
        Arc::new(Cluster::new(name, spec))
    }

    /// The copy of `source` from peer `east` (ID `peer-id`), made at `home` (ID `local-id`).
    fn copy(r: &RuleSet, source: &Value) -> Result<Value, CopyError> {
        let all = [cluster("east", "peer-id"), cluster("home", "local-id")];
        let clusters = Clusters {
            local_id: "local-id",
            all: &all,
        };
        desired_copy(
            source,
            "peer-id",
            r.matching(source, true).unwrap(),
            clusters,
        )
    }

    fn compile(spec: Value) -> Result<RuleSet, RuleError> {
        let spec: ResourceSyncRuleSpec = serde_json::from_value(spec).unwrap();
        RuleSet::compile("r", &spec)
    }

    fn rule(rules: Value) -> RuleSet {
        compile(json!({"groupVersionKind": {"version": "v1", "kind": "ConfigMap"}, "rules": rules}))
            .unwrap()
    }

    fn object(namespace: &str, name: &str, labels: Value, annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": namespace, "labels": labels,
                            "annotations": annotations},
               "data": {"mode": "blue", "size": "3"}})
    }

    fn plain(namespace: &str, name: &str) -> Value {
        object(namespace, name, json!({}), json!({}))
    }

    #[test]
    fn an_empty_match_matches_everything_and_no_rule_matches_nothing() {
        assert!(rule(json!([{}])).matching(&plain("a", "b"), true).is_some());
        assert!(rule(json!([])).matching(&plain("a", "b"), true).is_none());
    }

    #[test]
    fn object_keys_match_name_and_namespace() {
        let r = rule(json!([{"match": [{"objectKey": {"name": "x", "namespace": "ns"}}]}]));
        assert!(r.matching(&plain("ns", "x"), true).is_some());
        assert!(r.matching(&plain("other", "x"), true).is_none());
        assert!(r.matching(&plain("ns", "y"), true).is_none());
        // Cluster-scoped kinds ignore the namespace.
        assert!(r.matching(&plain("", "x"), false).is_some());
    }

    #[test]
    fn the_published_example_with_flattened_name_and_namespace_is_an_object_key() {
        // `- objectKey:` followed by `name:` and `namespace:` at the same indentation.
        let r = rule(json!([{"match": [{"objectKey": null, "name": "test-secret",
                                        "namespace": "cluster-registry"}]}]));
        assert!(
            r.matching(&plain("cluster-registry", "test-secret"), true)
                .is_some()
        );
        assert!(
            r.matching(&plain("cluster-registry", "other"), true)
                .is_none()
        );
    }

    #[test]
    fn fields_of_one_entry_are_anded_and_entries_ored() {
        let r = rule(json!([{"match": [
            {"namespaces": ["a", "b"], "labels": [{"matchLabels": {"team": "x"}}]},
            {"objectKey": {"name": "special"}}
        ]}]));
        let labelled = |ns| object(ns, "n", json!({"team": "x"}), json!({}));
        assert!(r.matching(&labelled("a"), true).is_some());
        assert!(r.matching(&labelled("c"), true).is_none());
        assert!(r.matching(&plain("a", "n"), true).is_none());
        assert!(r.matching(&plain("c", "special"), true).is_some());
    }

    #[test]
    fn label_and_annotation_expressions() {
        let r = rule(json!([{"match": [{
            "labels": [{"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "db"]}]}],
            "annotations": [{"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
                            {"matchAnnotations": {"owner": "me"}}]
        }]}]));
        let o = |tier, ann: Value| object("a", "n", json!({"tier": tier}), ann);
        assert!(
            r.matching(&o("web", json!({"owner": "me"})), true)
                .is_some()
        );
        assert!(
            r.matching(&o("cache", json!({"owner": "me"})), true)
                .is_none()
        );
        assert!(
            r.matching(&o("db", json!({"owner": "me", "skip": ""})), true)
                .is_none()
        );
        assert!(
            r.matching(&o("db", json!({"owner": "you"})), true)
                .is_none()
        );
    }

    #[test]
    fn content_is_matched_with_json_path() {
        let r = rule(json!([{"match": [{"content": [
            {"key": ".data.mode", "value": "blue"},
            {"key": "$.metadata.name", "value": "n"}
        ]}]}]));
        assert!(r.matching(&plain("a", "n"), true).is_some());
        let mut green = plain("a", "n");
        green["data"]["mode"] = json!("green");
        assert!(r.matching(&green, true).is_none());
    }

    #[test]
    fn rules_that_cannot_work_say_which_field_is_wrong() {
        let bad_path = compile(
            json!({"groupVersionKind": {"version": "v1", "kind": "ConfigMap"},
            "rules": [{"match": [{"content": [{"key": "$[?", "value": 1}]}]}]}),
        )
        .unwrap_err();
        assert_eq!(bad_path.reason(), "InvalidJSONPath");
        assert!(
            bad_path
                .to_string()
                .contains("spec.rules[0].match[0].content[0].key"),
            "{bad_path}"
        );
        let bad_selector = compile(json!({"groupVersionKind": {"version": "v1", "kind": "ConfigMap"},
            "rules": [{"match": [{"labels": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]}]}]}))
        .unwrap_err();
        assert_eq!(bad_selector.reason(), "InvalidSelector");
        let kind = compile(
            json!({"groupVersionKind": {"version": "v1", "kind": "ConfigMap"},
            "rules": [{"mutations": {"groupVersionKind": {"group": "example.com", "version": "", "kind": "Gadget"}}}]}),
        )
        .unwrap_err();
        assert_eq!(kind.reason(), "InvalidOverride");
        assert!(kind.to_string().contains("groupVersionKind"), "{kind}");
    }

    #[test]
    fn copies_lose_server_metadata_and_keep_an_existing_owner() {
        let mut source = object(
            "a",
            "n",
            json!({"team": "x"}),
            json!({
            "kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "hi"}),
        );
        source["metadata"]["uid"] = json!("u-1");
        source["metadata"]["resourceVersion"] = json!("42");
        source["metadata"]["managedFields"] = json!([{}]);
        source["metadata"]["ownerReferences"] = json!([{}]);
        source["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
        source["status"] = json!({"phase": "Up"});
        let copy = copy(&rule(json!([{}])), &source).unwrap();
        assert_eq!(
            copy["metadata"],
            json!({"name": "n", "namespace": "a",
                   "labels": {"team": "x", OWNER_ANNOTATION: "peer-id"},
                   "annotations": {"note": "hi", OWNER_ANNOTATION: "peer-id"}})
        );
        assert!(copy.get("status").is_none());
        assert_eq!(copy["data"], source["data"]);

        source["metadata"]["annotations"][OWNER_ANNOTATION] = json!("first");
        let with_status = rule(json!([{"mutations": {"syncStatus": true}}]));
        let copy = super::tests::copy(&with_status, &source).unwrap();
        assert_eq!(copy["metadata"]["annotations"][OWNER_ANNOTATION], "first");
        assert_eq!(copy["metadata"]["labels"][OWNER_ANNOTATION], "first");
        assert_eq!(copy["status"]["phase"], "Up");
    }

    #[test]
    fn mutations_edit_labels_annotations_and_fields() {
        let spec = json!([{"mutations": {
            "labels": {"add": {"copied": "yes"}, "remove": ["team"]},
            "annotations": {"add": {"a": "1"}, "remove": ["note", OWNER_ANNOTATION]},
            "overrides": [
                {"type": "replace", "path": "/data/mode", "value": "green"},
                {"type": "replace", "path": "/data/extra~1key", "value": "v"},
                {"type": "replace", "path": "/spec/replicas", "value": "3", "parseValue": true},
                {"type": "remove", "path": "/data/size"},
                {"type": "remove", "path": "/missing/field"}
            ]
        }}]);
        let r = rule(spec);
        let source = object("a", "n", json!({"team": "x"}), json!({"note": "hi"}));
        let copy = copy(&r, &source).unwrap();
        assert_eq!(
            copy["metadata"]["labels"],
            json!({"copied": "yes", OWNER_ANNOTATION: "peer-id"})
        );
        // The owner annotation cannot be mutated away.
        assert_eq!(
            copy["metadata"]["annotations"],
            json!({"a": "1", OWNER_ANNOTATION: "peer-id"})
        );
        assert_eq!(copy["data"], json!({"mode": "green", "extra/key": "v"}));
        assert_eq!(copy["spec"]["replicas"], json!(3));
        assert!(copy.get("missing").is_none());
    }

    fn templated(overrides: Value) -> RuleSet {
        rule(json!([{"mutations": {"overrides": overrides}}]))
    }

    #[test]
    fn the_published_printf_template_renders() {
        let r = templated(json!([{"type": "replace", "path": "/metadata/labels/from",
            "value": "{{ printf \"%s-%s\" .Object.GetName .Cluster.GetName }}"}]));
        let copy = copy(&r, &plain("a", "n")).unwrap();
        assert_eq!(copy["metadata"]["labels"]["from"], "n-east");
        assert_eq!(copy["metadata"]["name"], "n");
    }

    #[test]
    fn the_kind_and_all_of_metadata_are_not_overridden() {
        for (path, hint) in [
            ("/kind", "mutations.groupVersionKind"),
            ("/apiVersion", "mutations.groupVersionKind"),
            ("/metadata", "/metadata/name"),
        ] {
            let error = compile(
                json!({"groupVersionKind": {"version": "v1", "kind": "ConfigMap"},
                "rules": [{"mutations": {"overrides": [
                    {"type": "replace", "path": path, "value": "x"}]}}]}),
            )
            .unwrap_err();
            assert_eq!(error.reason(), "InvalidOverride");
            assert!(error.to_string().contains(hint), "{error}");
        }
    }

    #[test]
    fn copies_can_be_renamed_and_written_as_another_kind() {
        let r = compile(json!({"groupVersionKind": {"group": "a.example.com", "version": "v1", "kind": "Widget"},
            "rules": [{"mutations": {
                "groupVersionKind": {"group": "b.example.com", "version": "v2", "kind": "Gadget"},
                "overrides": [
                    {"type": "replace", "path": "/metadata/name", "value": "{{ .Object.metadata.name }}-copy"},
                    {"type": "replace", "path": "/metadata/namespace", "value": "elsewhere"}]}}]}))
        .unwrap();
        let gadget = GroupVersionKind {
            group: "b.example.com".into(),
            version: "v2".into(),
            kind: "Gadget".into(),
        };
        assert_eq!(r.targets(), vec![gadget]);
        let mut source = plain("a", "n");
        source["apiVersion"] = json!("a.example.com/v1");
        source["kind"] = json!("Widget");
        let copy = copy(&r, &source).unwrap();
        assert_eq!(copy["apiVersion"], "b.example.com/v2");
        assert_eq!(copy["kind"], "Gadget");
        assert_eq!(copy["metadata"]["name"], "n-copy");
        assert_eq!(copy["metadata"]["namespace"], "elsewhere");
        assert_eq!(copy["data"], source["data"]);
    }

    #[test]
    fn templates_see_the_object_both_clusters_and_sprig_functions() {
        let r = templated(json!([
            {"type": "replace", "path": "/data/ns", "value": "{{ .Object.metadata.namespace }}"},
            {"type": "replace", "path": "/data/from", "value": "{{ .Cluster.Spec.ClusterID }}"},
            {"type": "replace", "path": "/data/at", "value": "at-{{ .LocalCluster.GetName }}"},
            {"type": "replace", "path": "/data/mode", "value": "{{ .Object.data.mode | upper }}"},
            {"type": "replace", "path": "/data/keys", "value": "{{ len .Object.data }}",
             "parseValue": true},
            {"type": "replace", "path": "/data/plain", "value": "no template"}
        ]));
        let copy = copy(&r, &plain("apps", "n")).unwrap();
        assert_eq!(
            copy["data"],
            json!({"ns": "apps", "from": "peer-id", "at": "at-home", "mode": "BLUE",
                   "keys": 2, "size": "3", "plain": "no template"})
        );
    }

    #[test]
    fn a_template_that_does_not_parse_is_rejected_naming_the_field() {
        let error = compile(
            json!({"groupVersionKind": {"version": "v1", "kind": "ConfigMap"},
            "rules": [{}, {"mutations": {"overrides": [
                {"type": "replace", "path": "/data/a", "value": "fine"},
                {"type": "replace", "path": "/data/b", "value": "{{ .Object.GetName "}
            ]}}]}),
        )
        .unwrap_err();
        assert_eq!(error.reason(), "InvalidTemplate");
        let message = error.to_string();
        assert!(
            message
                .starts_with("spec.rules[1].mutations.overrides[1].value: not a valid template: "),
            "{message}"
        );
        let unknown = compile(
            json!({"groupVersionKind": {"version": "v1", "kind": "ConfigMap"},
            "rules": [{"mutations": {"overrides": [
                {"type": "replace", "path": "/data/a", "value": "{{ shout .Object.GetName }}"}
            ]}}]}),
        )
        .unwrap_err();
        assert_eq!(unknown.reason(), "InvalidTemplate");
        assert!(unknown.to_string().contains("shout"), "{unknown}");
    }

    #[test]
    fn a_template_that_fails_gives_no_copy() {
        let r = templated(json!([
            {"type": "replace", "path": "/data/a", "value": "set"},
            {"type": "replace", "path": "/data/b", "value": "{{ .Cluster.Spec.Region }}"}
        ]));
        let error = copy(&r, &plain("a", "n")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "spec.rules[0].mutations.overrides[1].value: the template failed: \
             can't evaluate field Region"
        );
        // Without the Cluster the object comes from there is nothing to render with.
        let mut stranger = plain("a", "n");
        stranger["metadata"]["annotations"] = json!({ OWNER_ANNOTATION: "gone" });
        let r = templated(json!([{"type": "replace", "path": "/data/a",
            "value": "{{ .Object.GetName }}"}]));
        assert!(matches!(
            copy(&r, &stranger),
            Err(CopyError::UnknownCluster { id, .. }) if id == "gone"
        ));
    }
}

//! OpenAPI of the imported groups only: the service cluster's documents are cut down to the
//! paths under `/apis/<group>/` of the groups a workload cluster imports, so that its merged
//! OpenAPI gains nothing else of the service cluster's.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// Whether `path` (with or without its leading `/`) is under `/apis/<group>` of one of `groups`.
pub fn imported(path: &str, groups: &[String]) -> bool {
    let path = path.strip_prefix('/').unwrap_or(path);
    groups.iter().any(|group| {
        path.strip_prefix("apis/")
            .and_then(|p| p.strip_prefix(group.as_str()))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// The paths of an OpenAPI v3 index (`/openapi/v3`) of the imported groups.
pub fn v3_index_paths(index: &Value, groups: &[String], into: &mut Map<String, Value>) {
    for (path, entry) in index["paths"].as_object().into_iter().flatten() {
        if imported(path, groups) {
            into.insert(path.clone(), entry.clone());
        }
    }
}

/// Adds to `into` (a Swagger 2.0 document) the paths of `spec` under the imported groups and
/// every definition they refer to, directly or through other definitions.
pub fn v2_merge(spec: &Value, groups: &[String], into: &mut Value) {
    let mut wanted = Vec::new();
    for (path, item) in spec["paths"].as_object().into_iter().flatten() {
        if imported(path, groups) {
            into["paths"][path] = item.clone();
            references(item, &mut wanted);
        }
    }
    let definitions = spec["definitions"].as_object();
    let mut seen = BTreeSet::new();
    while let Some(name) = wanted.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(definition) = definitions.and_then(|d| d.get(&name)) {
            references(definition, &mut wanted);
            into["definitions"][&name] = definition.clone();
        }
    }
}

/// An empty Swagger 2.0 document titled like kube-apiserver's.
pub fn v2_empty(version: &str) -> Value {
    serde_json::json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": {},
        "definitions": {},
    })
}

/// The definition names every `$ref: "#/definitions/<name>"` in `value` refers to.
fn references(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                if key == "$ref"
                    && let Some(name) = inner
                        .as_str()
                        .and_then(|r| r.strip_prefix("#/definitions/"))
                {
                    into.push(name.to_string());
                } else {
                    references(inner, into);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| references(item, into)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_imported_groups_paths_and_the_definitions_they_need_are_kept() {
        let spec = json!({
            "swagger": "2.0",
            "paths": {
                "/apis/rabbitmq.com/v1beta1/namespaces/{namespace}/rabbitmqclusters": {
                    "get": {"responses": {"200": {"schema": {"$ref": "#/definitions/com.rabbitmq.v1beta1.RabbitmqClusterList"}}}}
                },
                "/apis/rabbitmq.com.evil/v1/things": {"get": {}},
                "/api/v1/secrets": {"get": {"responses": {"200": {"schema": {"$ref": "#/definitions/io.k8s.api.core.v1.SecretList"}}}}},
            },
            "definitions": {
                "com.rabbitmq.v1beta1.RabbitmqClusterList": {"properties": {
                    "items": {"items": {"$ref": "#/definitions/com.rabbitmq.v1beta1.RabbitmqCluster"}},
                    "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"}}},
                "com.rabbitmq.v1beta1.RabbitmqCluster": {"properties": {
                    "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}}},
                "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta": {},
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"properties": {
                    "self": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}}},
                "io.k8s.api.core.v1.SecretList": {},
            }
        });
        let mut merged = v2_empty("v1.35.0");
        v2_merge(&spec, &["rabbitmq.com".to_string()], &mut merged);
        let paths: Vec<&String> = merged["paths"].as_object().unwrap().keys().collect();
        assert_eq!(
            paths,
            ["/apis/rabbitmq.com/v1beta1/namespaces/{namespace}/rabbitmqclusters"]
        );
        let definitions: BTreeSet<&String> =
            merged["definitions"].as_object().unwrap().keys().collect();
        assert_eq!(
            definitions,
            BTreeSet::from_iter(&[
                "com.rabbitmq.v1beta1.RabbitmqClusterList".to_string(),
                "com.rabbitmq.v1beta1.RabbitmqCluster".to_string(),
                "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta".to_string(),
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".to_string(),
            ])
        );
    }

    #[test]
    fn a_group_is_matched_whole() {
        let groups = ["rabbitmq.com".to_string()];
        assert!(imported("apis/rabbitmq.com/v1beta1", &groups));
        assert!(imported("/apis/rabbitmq.com", &groups));
        assert!(!imported("apis/rabbitmq.company/v1", &groups));
        assert!(!imported("api/v1", &groups));
    }
}

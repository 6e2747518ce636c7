//! What a Replicator asks for on every cluster, as the original fills it in: the namespace, the
//! ConfigMap, the Deployment (selector and template label `apps: nginx`, the original's, unless
//! `deploymentSpec.selector.matchLabels` names others), the Service (selector the same), the
//! Ingress (class `nginx` unless the spec names one; TLS and nginx client-auth annotations when
//! `ingressSecureEnabled`), the certificate Secrets, then `resources[]`. Every object carries
//! the origin annotation `plumber/replicator/<name>`: what makes it ours to update and delete.
//!
//! An object the original controller made (its field manager `plumberctl`, no origin
//! annotation, no owner but this Replicator) is adopted ([`made_by_original`]); a Deployment
//! found with another selector keeps it ([`keep_selector`]), since a selector cannot change and
//! a changed pod template would start new pods.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace, Secret, Service},
    networking::v1::Ingress,
};
use kube::api::ApiResource;
use serde_json::{Value, json};

use super::{
    api::Replicator,
    certs::{self, Bundle},
};
use crate::sink::ORIGIN_ANNOTATION;

/// One object to make on every cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Object {
    pub resource: ApiResource,
    pub namespaced: bool,
    pub name: String,
    /// The whole object to apply (apiVersion, kind, metadata, content).
    pub body: Value,
}

impl Object {
    pub fn kind(&self) -> &str {
        &self.resource.kind
    }
}

/// The origin annotation value of Replicator `name`'s objects.
pub fn origin(name: &str) -> String {
    crate::sink::origin("plumber", "replicator", name)
}

/// The Replicator named by an origin annotation value, if it is one of ours.
pub fn replicator_of(origin: &str) -> Option<&str> {
    origin.strip_prefix("plumber/replicator/")
}

/// Kinds of `resources[]`, resolved by discovery: `(apiVersion, kind)` → resource and whether it
/// is namespaced.
pub type Kinds = BTreeMap<(String, String), (ApiResource, bool)>;

/// The hosts of the Ingress rules, in order, without repeats.
pub fn hosts(replicator: &Replicator) -> Vec<String> {
    let mut hosts: Vec<String> = Vec::new();
    let rules = replicator
        .spec
        .ingress_spec
        .as_ref()
        .and_then(|s| s.get("rules"))
        .and_then(Value::as_array);
    for rule in rules.into_iter().flatten() {
        if let Some(host) = rule.get("host").and_then(Value::as_str)
            && !hosts.iter().any(|h| h == host)
        {
            hosts.push(host.to_string());
        }
    }
    hosts
}

/// The original's selector (and pod label) for every Replicator's Deployment and Service.
pub const ORIGINAL_SELECTOR: (&str, &str) = ("apps", "nginx");
/// The original's Ingress class (`pkg/constants`), set when the spec names none.
pub const ORIGINAL_INGRESS_CLASS: &str = "nginx";
/// The field manager of the original controller's writes (`pkg/constants.FieldManager`).
pub const ORIGINAL_FIELD_MANAGER: &str = "plumberctl";

/// The Deployment's selector labels: `deploymentSpec.selector.matchLabels` when set, else the
/// original's `apps: nginx`.
pub fn selector_labels(replicator: &Replicator) -> serde_json::Map<String, Value> {
    replicator
        .spec
        .deployment_spec
        .as_ref()
        .and_then(|d| d.pointer("/selector/matchLabels"))
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
        .cloned()
        .unwrap_or_else(|| {
            let (k, v) = ORIGINAL_SELECTOR;
            [(k.to_string(), json!(v))].into_iter().collect()
        })
}

/// Whether `current` (an object of `replicator`'s name and kind, without our origin
/// annotation) was made by the original plumber controller for it: written under its field
/// manager, and owned by no one or by a Replicator of this name. Such an object is adopted.
pub fn made_by_original(current: &Value, replicator: &str) -> bool {
    let metadata = &current["metadata"];
    let by_plumber = metadata["managedFields"].as_array().is_some_and(|fields| {
        fields
            .iter()
            .any(|f| f["manager"] == ORIGINAL_FIELD_MANAGER)
    });
    let owners_ok = metadata["ownerReferences"]
        .as_array()
        .map(|owners| {
            owners.iter().all(|o| {
                o["controller"] != true
                    || (o["kind"] == "Replicator"
                        && o["apiVersion"] == "plumber.jnytnai0613.github.io/v1"
                        && o["name"] == replicator)
            })
        })
        .unwrap_or(true);
    by_plumber && owners_ok && metadata["annotations"][ORIGIN_ANNOTATION].is_null()
}

/// `deployment` (the desired body) with the selector `found` (that of the Deployment already
/// there, which cannot change): the template carries the found selector's labels instead of
/// the ones this version would choose, unless the spec's template names those itself. The
/// Service selector to use on that cluster is returned with it.
pub fn keep_selector(
    replicator: &Replicator,
    deployment: &Value,
    found: &Value,
) -> Option<(Value, serde_json::Map<String, Value>)> {
    let found_labels = found.get("matchLabels").and_then(Value::as_object)?;
    if deployment["spec"]["selector"] == *found || found_labels.is_empty() {
        return None;
    }
    let mut body = deployment.clone();
    body["spec"]["selector"] = found.clone();
    let own = replicator
        .spec
        .deployment_spec
        .as_ref()
        .and_then(|d| d.pointer("/template/metadata/labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let labels = &mut body["spec"]["template"]["metadata"]["labels"];
    if let Some(map) = labels.as_object_mut() {
        for key in selector_labels(replicator).keys() {
            if !own.contains_key(key) {
                map.remove(key);
            }
        }
        for (k, v) in found_labels {
            map.insert(k.clone(), v.clone());
        }
    }
    Some((body, found_labels.clone()))
}

pub fn secure(replicator: &Replicator) -> bool {
    replicator.spec.ingress_secure_enabled == Some(true) && replicator.spec.ingress_spec.is_some()
}

fn object<K: kube::Resource<DynamicType = ()>>(
    namespaced: bool,
    name: &str,
    namespace: &str,
    origin: &str,
    extra_annotations: &[(&str, String)],
    content: Value,
) -> Object {
    let resource = ApiResource::erase::<K>(&());
    let mut annotations = serde_json::Map::new();
    annotations.insert(ORIGIN_ANNOTATION.into(), json!(origin));
    for (k, v) in extra_annotations {
        annotations.insert((*k).into(), json!(v));
    }
    let mut body = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name, "annotations": annotations},
    });
    if namespaced {
        body["metadata"]["namespace"] = json!(namespace);
    }
    if let (Some(body), Value::Object(content)) = (body.as_object_mut(), content) {
        body.extend(content);
    }
    Object {
        resource,
        namespaced,
        name: name.to_string(),
        body,
    }
}

/// Secret data: base64 of each value.
fn encoded(data: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    data.iter()
        .map(|(k, v)| (k.clone(), xcc_kube::wire::encode_base64(v)))
        .collect()
}

/// Every object of `replicator`, in the order they are applied (deleted in reverse). `certs` is
/// the bundle to use when `ingressSecureEnabled`; `kinds` resolves `resources[]`.
pub fn objects(
    replicator: &Replicator,
    name: &str,
    certs: Option<&Bundle>,
    kinds: &Kinds,
) -> Result<Vec<Object>, String> {
    let spec = &replicator.spec;
    let ns = spec.replication_namespace.as_str();
    if ns.is_empty() {
        return Err("spec.replicationNamespace is empty".into());
    }
    let origin = origin(name);
    let mut out = vec![object::<Namespace>(false, ns, ns, &origin, &[], json!({}))];
    if let Some(cm) = &spec.config_map_name {
        out.push(object::<ConfigMap>(
            true,
            cm,
            ns,
            &origin,
            &[],
            json!({"data": spec.config_map_data.clone().unwrap_or_default()}),
        ));
    }
    if let Some(deployment) = &spec.deployment_name {
        out.push(deployment_object(replicator, deployment, &origin)?);
    }
    if let Some(service) = &spec.service_name {
        out.push(service_object(replicator, service, &origin)?);
    }
    if let Some(bundle) = certs.filter(|_| secure(replicator)) {
        out.extend(cert_secrets(bundle, ns, &origin));
    }
    if let Some(ingress) = &spec.ingress_name {
        out.push(ingress_object(replicator, ingress, &origin)?);
    }
    for (i, manifest) in spec.resources.iter().enumerate() {
        out.push(manifest_object(
            &manifest.0,
            &format!("spec.resources[{i}]"),
            ns,
            &origin,
            kinds,
        )?);
    }
    Ok(out)
}

/// The Deployment `deployment`: `spec.deploymentSpec` with the selector labels on its selector
/// and its pod template.
fn deployment_object(
    replicator: &Replicator,
    deployment: &str,
    origin: &str,
) -> Result<Object, String> {
    let spec = &replicator.spec;
    let mut dspec = spec.deployment_spec.clone().unwrap_or_else(|| json!({}));
    if !dspec.is_object() {
        return Err("spec.deploymentSpec is not an object".into());
    }
    let selector = selector_labels(replicator);
    dspec["selector"] = json!({ "matchLabels": selector });
    if !dspec["template"].is_object() {
        dspec["template"] = json!({});
    }
    if !dspec["template"]["metadata"].is_object() {
        dspec["template"]["metadata"] = json!({});
    }
    if !dspec["template"]["metadata"]["labels"].is_object() {
        dspec["template"]["metadata"]["labels"] = json!({});
    }
    for (k, v) in selector {
        dspec["template"]["metadata"]["labels"][k] = v;
    }
    Ok(object::<Deployment>(
        true,
        deployment,
        &spec.replication_namespace,
        origin,
        &[],
        json!({"spec": dspec}),
    ))
}

/// The Service `service`: `spec.serviceSpec`, selecting the Deployment's pods when there is one.
fn service_object(replicator: &Replicator, service: &str, origin: &str) -> Result<Object, String> {
    let spec = &replicator.spec;
    let mut sspec = spec.service_spec.clone().unwrap_or_else(|| json!({}));
    if !sspec.is_object() {
        return Err("spec.serviceSpec is not an object".into());
    }
    if spec.deployment_name.is_some() {
        sspec["selector"] = Value::Object(selector_labels(replicator));
    }
    Ok(object::<Service>(
        true,
        service,
        &spec.replication_namespace,
        origin,
        &[],
        json!({"spec": sspec}),
    ))
}

/// The CA Secret (annotated with the hosts and expiry of `bundle`) and the client Secret.
fn cert_secrets(bundle: &Bundle, ns: &str, origin: &str) -> [Object; 2] {
    [
        object::<Secret>(
            true,
            certs::CA_SECRET,
            ns,
            origin,
            &[
                (certs::HOSTS_ANNOTATION, bundle.hosts.join(",")),
                (certs::NOT_AFTER_ANNOTATION, bundle.not_after.to_string()),
            ],
            json!({"type": "Opaque", "data": encoded(&bundle.ca)}),
        ),
        object::<Secret>(
            true,
            certs::CLIENT_SECRET,
            ns,
            origin,
            &[],
            json!({"type": "Opaque", "data": encoded(&bundle.client)}),
        ),
    ]
}

/// The Ingress `ingress`: `spec.ingressSpec` with the original's class by default, and, when
/// secure, TLS with client certificates verified against the CA Secret.
fn ingress_object(replicator: &Replicator, ingress: &str, origin: &str) -> Result<Object, String> {
    let spec = &replicator.spec;
    let ns = spec.replication_namespace.as_str();
    let mut ispec = spec.ingress_spec.clone().unwrap_or_else(|| json!({}));
    if !ispec.is_object() {
        return Err("spec.ingressSpec is not an object".into());
    }
    if ispec["ingressClassName"]
        .as_str()
        .is_none_or(|class| class.is_empty())
    {
        ispec["ingressClassName"] = json!(ORIGINAL_INGRESS_CLASS);
    }
    let mut extra = Vec::new();
    if secure(replicator) {
        ispec["tls"] = json!([{"hosts": hosts(replicator), "secretName": certs::CA_SECRET}]);
        extra = vec![
            (
                "nginx.ingress.kubernetes.io/auth-tls-secret",
                format!("{ns}/{}", certs::CA_SECRET),
            ),
            (
                "nginx.ingress.kubernetes.io/auth-tls-verify-client",
                "on".into(),
            ),
            ("nginx.ingress.kubernetes.io/rewrite-target", "/".into()),
        ];
    }
    Ok(object::<Ingress>(
        true,
        ingress,
        ns,
        origin,
        &extra,
        json!({"spec": ispec}),
    ))
}

/// One manifest of `spec.resources[]` (`at` names it in errors), checked against `kinds` and
/// placed in `ns`, without its status and the fields the API server owns.
fn manifest_object(
    manifest: &Value,
    at: &str,
    ns: &str,
    origin: &str,
    kinds: &Kinds,
) -> Result<Object, String> {
    let text = |k: &str| manifest.get(k).and_then(Value::as_str).map(str::to_string);
    let (Some(api_version), Some(kind)) = (text("apiVersion"), text("kind")) else {
        return Err(format!("{at} needs apiVersion and kind"));
    };
    let Some(name) = manifest
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    else {
        return Err(format!("{at} needs metadata.name"));
    };
    let Some((resource, namespaced)) = kinds.get(&(api_version.clone(), kind.clone())) else {
        return Err(format!(
            "{at}: kind {kind} of {api_version} is not served here"
        ));
    };
    if let Some(other) = manifest
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        && *namespaced
        && other != ns
    {
        return Err(format!(
            "{at}: metadata.namespace {other:?} is not spec.replicationNamespace {ns:?}"
        ));
    }
    let mut body = manifest.clone();
    body.as_object_mut()
        .map(|b| b.remove("status"))
        .unwrap_or_default();
    let meta = &mut body["metadata"];
    if *namespaced {
        meta["namespace"] = json!(ns);
    } else if let Some(m) = meta.as_object_mut() {
        m.remove("namespace");
    }
    for field in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "generation",
    ] {
        if let Some(m) = meta.as_object_mut() {
            m.remove(field);
        }
    }
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    meta["annotations"][ORIGIN_ANNOTATION] = json!(origin);
    Ok(Object {
        resource: resource.clone(),
        namespaced: *namespaced,
        name: name.to_string(),
        body,
    })
}

/// Whether `current` holds everything `desired` sets: maps as subsets, lists element by
/// element with the same length, scalars equal; of `metadata`, only labels and annotations.
/// Defaults the API server adds (a container's `terminationMessagePath`) do not count as drift;
/// an edited or removed field does.
pub fn holds(current: &Value, desired: &Value) -> bool {
    match (current, desired) {
        (Value::Object(c), Value::Object(d)) => d.iter().all(|(k, dv)| {
            if k == "metadata" {
                return ["labels", "annotations"].iter().all(|m| {
                    holds(
                        c.get(k).and_then(|cm| cm.get(*m)).unwrap_or(&Value::Null),
                        dv.get(*m).unwrap_or(&Value::Null),
                    ) || dv.get(*m).is_none()
                });
            }
            match c.get(k) {
                Some(cv) => holds(cv, dv),
                // An empty map or list asked for and absent is the same.
                None => {
                    matches!(dv, Value::Null)
                        || dv.as_object().is_some_and(|o| o.is_empty())
                        || dv.as_array().is_some_and(|a| a.is_empty())
                }
            }
        }),
        (Value::Array(c), Value::Array(d)) => {
            c.len() == d.len() && c.iter().zip(d).all(|(c, d)| holds(c, d))
        }
        (c, d) => c == d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const SAMPLE: &str = include_str!("../../../manifests/examples/replicator-sample.yaml");

    fn sample() -> Replicator {
        xcc_kube::yaml::from_str(SAMPLE).unwrap()
    }

    #[test]
    fn the_sample_becomes_namespace_configmap_deployment_service_secrets_and_ingress() {
        let rep = sample();
        assert_eq!(rep.spec.target_cluster.len(), 2);
        let bundle = certs::generate(&hosts(&rep)).unwrap();
        let objects = objects(&rep, "replicator-sample", Some(&bundle), &Kinds::new()).unwrap();
        let kinds: Vec<_> = objects
            .iter()
            .map(|o| format!("{}/{}", o.kind(), o.name))
            .collect();
        assert_eq!(
            kinds,
            [
                "Namespace/test-ns",
                "ConfigMap/nginx",
                "Deployment/nginx",
                "Service/nginx",
                "Secret/ca-secret",
                "Secret/cli-secret",
                "Ingress/nginx"
            ]
        );
        let deployment = &objects[2].body;
        assert_eq!(deployment["metadata"]["namespace"], "test-ns");
        // The original's selector and pod label.
        assert_eq!(
            deployment["spec"]["selector"],
            json!({"matchLabels": {"apps": "nginx"}})
        );
        assert_eq!(
            deployment["spec"]["template"]["metadata"]["labels"],
            json!({"apps": "nginx"})
        );
        assert_eq!(deployment["spec"]["replicas"], 3);
        assert_eq!(
            objects[3].body["spec"]["selector"],
            json!({"apps": "nginx"})
        );
        let ingress = &objects[6].body;
        assert_eq!(ingress["spec"]["ingressClassName"], "nginx");
        assert_eq!(ingress["spec"]["tls"][0]["hosts"][0], "nginx.example.com");
        assert_eq!(ingress["spec"]["tls"][0]["secretName"], "ca-secret");
        assert_eq!(
            ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/auth-tls-secret"],
            "test-ns/ca-secret"
        );
        for o in &objects {
            assert_eq!(
                o.body["metadata"]["annotations"][ORIGIN_ANNOTATION],
                "plumber/replicator/replicator-sample"
            );
        }
        assert_eq!(replicator_of(&origin("a")), Some("a"));
    }

    #[test]
    fn resources_need_a_kind_served_here_and_the_replication_namespace() {
        let mut rep = sample();
        rep.spec.resources = vec![super::super::api::Manifest(json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "runner", "namespace": "elsewhere"}
        }))];
        let err = objects(&rep, "r", None, &Kinds::new()).unwrap_err();
        assert!(
            err.contains("spec.resources[0]") && err.contains("not served"),
            "{err}"
        );
        let mut kinds = Kinds::new();
        kinds.insert(
            ("v1".into(), "ServiceAccount".into()),
            (
                ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&()),
                true,
            ),
        );
        let err = objects(&rep, "r", None, &kinds).unwrap_err();
        assert!(err.contains("elsewhere"), "{err}");
        rep.spec.resources[0].0["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        let all = objects(&rep, "r", None, &kinds).unwrap();
        let sa = all.last().unwrap();
        assert_eq!(sa.body["metadata"]["namespace"], "test-ns");
        assert_eq!(
            sa.body["metadata"]["annotations"][ORIGIN_ANNOTATION],
            "plumber/replicator/r"
        );
    }

    #[test]
    fn a_class_or_selector_of_the_spec_is_kept() {
        let mut rep = sample();
        rep.spec.ingress_spec.as_mut().unwrap()["ingressClassName"] = json!("traefik");
        rep.spec.deployment_spec.as_mut().unwrap()["selector"] =
            json!({"matchLabels": {"team": "web"}});
        let objects = objects(&rep, "r", None, &Kinds::new()).unwrap();
        let find = |kind: &str| objects.iter().find(|o| o.kind() == kind).unwrap();
        assert_eq!(find("Ingress").body["spec"]["ingressClassName"], "traefik");
        assert_eq!(
            find("Deployment").body["spec"]["template"]["metadata"]["labels"],
            json!({"team": "web"})
        );
        assert_eq!(
            find("Service").body["spec"]["selector"],
            json!({"team": "web"})
        );
    }

    #[test]
    fn the_originals_objects_are_adopted_and_a_found_selector_is_kept() {
        let original = json!({"metadata": {"name": "nginx",
            "managedFields": [{"manager": "plumberctl", "operation": "Apply"}],
            "ownerReferences": [{"apiVersion": "plumber.jnytnai0613.github.io/v1",
                "kind": "Replicator", "name": "replicator-sample", "uid": "u", "controller": true}]}});
        assert!(made_by_original(&original, "replicator-sample"));
        assert!(!made_by_original(&original, "another"));
        let mut someone = original.clone();
        someone["metadata"]["managedFields"][0]["manager"] = json!("kubectl");
        assert!(!made_by_original(&someone, "replicator-sample"));
        let mut ours = original.clone();
        ours["metadata"]["annotations"] = json!({ORIGIN_ANNOTATION: "plumber/replicator/x"});
        assert!(!made_by_original(&ours, "replicator-sample"));
        let mut secondary = original;
        secondary["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences");
        assert!(made_by_original(&secondary, "replicator-sample"));

        // A Deployment made by xcc 0.1 (`app: nginx`) keeps its selector; the pod template
        // carries that label instead of `apps`.
        let rep = sample();
        let objects = objects(&rep, "replicator-sample", None, &Kinds::new()).unwrap();
        let deployment = &objects
            .iter()
            .find(|o| o.kind() == "Deployment")
            .unwrap()
            .body;
        let found = json!({"matchLabels": {"app": "nginx"}});
        let (kept, service) = keep_selector(&rep, deployment, &found).unwrap();
        assert_eq!(kept["spec"]["selector"], found);
        assert_eq!(
            kept["spec"]["template"]["metadata"]["labels"],
            json!({"app": "nginx"})
        );
        assert_eq!(Value::Object(service), json!({"app": "nginx"}));
        // The same selector: nothing to change.
        assert!(keep_selector(&rep, deployment, &deployment["spec"]["selector"]).is_none());
    }

    #[test]
    fn holds_ignores_server_defaults_but_not_edits() {
        let desired = json!({"metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "n", "image": "i"}]}}}});
        let mut current = desired.clone();
        current["metadata"]["resourceVersion"] = json!("9");
        current["metadata"]["labels"]["other"] = json!("y");
        current["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] =
            json!("/dev/termination-log");
        current["spec"]["progressDeadlineSeconds"] = json!(600);
        assert!(holds(&current, &desired));
        let mut edited = current.clone();
        edited["spec"]["replicas"] = json!(1);
        assert!(!holds(&edited, &desired));
        let mut more = current.clone();
        more["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sidecar"}));
        assert!(!holds(&more, &desired));
        let mut relabelled = current;
        relabelled["metadata"]["labels"]["x"] = json!("2");
        assert!(!holds(&relabelled, &desired));
    }
}

//! The one local writer of every sync reconciler: puts objects read from a peer into the local
//! cluster, and never touches an object it did not put there.
//!
//! - [`apply_whole`]: a forced server-side apply under [`FIELD_MANAGER`] of an object that is
//!   ours; when fields another manager set survive it (someone added a key to a copy), the object
//!   is replaced as a whole; `status` is applied on its subresource. Each write is counted per
//!   reconciler in the sync metrics.
//! - [`write_status`]: the status, through the one status writer of `xcc_kube::status`;
//! - [`merge`]: a merge patch of the few fields a reconciler keeps in an object it does not own
//!   (a renewed token in a user's Secret);
//! - [`delete_exact`]: a delete conditional on the UID and resourceVersion the reconciler
//!   decided on, so an object replaced meanwhile by someone else survives.
//! - [`LocalWriter`]: both, for reconcilers whose ownership mark is the origin annotation
//!   [`ORIGIN_ANNOTATION`] (Secret replication), with an unforced create where someone else's
//!   object must win.
//!
//! The reconciler chooses the marks its API needs (the replication origin, cluster-registry's
//! owner annotation and label) and puts them in the desired object; the writer writes them.

use std::fmt::Debug;

use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

use crate::metrics::SyncMetrics;

/// Where a write is counted: the metrics and the reconciler's name.
#[derive(Clone)]
pub struct Counted {
    /// The metrics.
    pub metrics: SyncMetrics,
    /// The reconciler's name (the `reconciler` label).
    pub reconciler: &'static str,
}

impl Counted {
    /// A reconcile failed with `error`: counted in `xcc_sync_reconcile_errors_total` under its
    /// [`metric_label`](crate::kit::ReconcileError::metric_label). Call it from the
    /// reconciler's error policy, which kube-runtime calls once per failed reconcile.
    pub fn failed(&self, error: &impl crate::kit::ReconcileError) {
        self.metrics
            .reconcile_failed(self.reconciler, error.metric_label());
    }

    /// One write of `verb` was made.
    pub fn wrote(&self, verb: &'static str) {
        self.metrics.wrote(self.reconciler, verb);
    }
}

/// Makes local object `name` exactly `desired` (a JSON object with apiVersion, kind, metadata):
/// a forced server-side apply; a replace when fields of another manager survive it; `status`
/// applied on its subresource when it differs. Returns the object as last written.
pub async fn apply_whole<K>(
    api: &Api<K>,
    name: &str,
    mut desired: Value,
    counted: &Counted,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
{
    let status = desired.as_object_mut().and_then(|o| o.remove("status"));
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut written = api.patch(name, &params, &Patch::Apply(&desired)).await?;
    counted.wrote("apply");
    let current = serde_json::to_value(&written).map_err(kube::Error::SerdeError)?;
    if !up_to_date(&current, &desired) {
        let mut replacement = desired.clone();
        replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        let replacement: K =
            serde_json::from_value(replacement).map_err(kube::Error::SerdeError)?;
        written = api
            .replace(name, &PostParams::default(), &replacement)
            .await?;
        counted.wrote("replace");
    }
    if let Some(status) = status
        && current.get("status") != Some(&status)
    {
        let patch = json!({
            "apiVersion": desired["apiVersion"],
            "kind": desired["kind"],
            "status": status,
        });
        written = api
            .patch_status(name, &params, &Patch::Apply(patch))
            .await?;
        counted.wrote("status");
    }
    Ok(written)
}

/// Makes the fields `desired` sets (a JSON object with apiVersion, kind, metadata) so in local
/// object `name`: a forced server-side apply under [`FIELD_MANAGER`], nothing replaced, for kinds
/// whose API server fills in fields the reconciler leaves to it (a Service's `clusterIP`): the
/// fields it sets and no longer sets are its own, the rest stays. Counted as `apply`.
pub async fn apply_fields<K>(
    api: &Api<K>,
    name: &str,
    desired: &Value,
    counted: &Counted,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let written = api.patch(name, &params, &Patch::Apply(desired)).await?;
    counted.wrote("apply");
    Ok(written)
}

/// Merges `patch` (a JSON merge patch under [`FIELD_MANAGER`]) into local object `name`, for an
/// object the reconciler does not own as a whole (a user's Secret that holds a token it renews):
/// only the fields in `patch` change. With `metadata.resourceVersion` in `patch`, the write
/// applies only to that version (409 otherwise). Counted as `patch`.
pub async fn merge<K>(
    api: &Api<K>,
    name: &str,
    patch: &Value,
    counted: &Counted,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let written = api.patch(name, &params, &Patch::Merge(patch)).await?;
    counted.wrote("patch");
    Ok(written)
}

/// Makes the status of `obj` (as read) `status` through the one status writer,
/// [`xcc_kube::status::write`] (a forced server-side apply under [`FIELD_MANAGER`], nothing when
/// only `lastTransitionTime`s would change); returns whether it wrote. Counted as `status`.
pub async fn write_status<K, S>(
    api: &Api<K>,
    obj: &K,
    status: &S,
    counted: &Counted,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug,
    S: Serialize,
{
    let wrote = xcc_kube::status::write(api, obj, status, FIELD_MANAGER).await?;
    if wrote {
        counted.wrote("status");
    }
    Ok(wrote)
}

/// Deletes local object `name` only if it still has `uid` and `resource_version` (when given);
/// returns whether it did. Gone already, or changed meanwhile: `false`, not an error.
pub async fn delete_exact<K>(
    api: &Api<K>,
    name: &str,
    uid: Option<String>,
    resource_version: Option<String>,
    counted: &Counted,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            counted.wrote("delete");
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Annotation on every object the agent copies from a peer: `<peer>/<namespace>/<name>` of the
/// source object. Its presence is what makes an object the agent's to update and delete.
pub const ORIGIN_ANNOTATION: &str = "xcc.test/origin";

/// Field manager of every server-side apply of the agent.
pub const FIELD_MANAGER: &str = "xcc-agent";

/// The origin annotation's value for object `namespace/name` read from `peer`.
pub fn origin(peer: &str, namespace: &str, name: &str) -> String {
    format!("{peer}/{namespace}/{name}")
}

/// Who a local object belongs to, seen from a writer that would write `origin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// No such object.
    Absent,
    /// Written by us from the same source.
    Ours,
    /// Made by someone else (no origin annotation), or copied from another source.
    Foreign {
        /// Its origin annotation, if it has one.
        origin: Option<String>,
    },
}

/// Classifies `current` for a writer of `origin`.
pub fn ownership<K: Resource>(current: Option<&K>, origin: &str) -> Ownership {
    let Some(current) = current else {
        return Ownership::Absent;
    };
    match current.annotations().get(ORIGIN_ANNOTATION) {
        Some(o) if o == origin => Ownership::Ours,
        other => Ownership::Foreign {
            origin: other.cloned(),
        },
    }
}

/// True when `current` already holds everything `desired` sets: the same labels and annotations
/// (others may exist) and exactly the same content outside `metadata` (`status` aside).
pub fn up_to_date(current: &Value, desired: &Value) -> bool {
    let empty = serde_json::Map::new();
    let fields = |v: &Value| v.as_object().unwrap_or(&empty).clone();
    let (current, desired) = (fields(current), fields(desired));
    let skip = ["apiVersion", "kind", "metadata", "status"];
    let keys = current
        .keys()
        .chain(desired.keys())
        .filter(|k| !skip.contains(&k.as_str()));
    for key in keys {
        if current.get(key).unwrap_or(&Value::Null) != desired.get(key).unwrap_or(&Value::Null) {
            return false;
        }
    }
    for map in ["labels", "annotations"] {
        let want = desired
            .get("metadata")
            .and_then(|m| m.get(map))
            .and_then(Value::as_object);
        let have = current
            .get("metadata")
            .and_then(|m| m.get(map))
            .and_then(Value::as_object);
        for (k, v) in want.into_iter().flatten() {
            if have.and_then(|h| h.get(k)) != Some(v) {
                return false;
            }
        }
    }
    true
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Written; the resourceVersion the write left.
    Applied(Option<String>),
    /// Already so; its resourceVersion.
    Unchanged(Option<String>),
    /// The local object is not ours; nothing was written.
    Conflict {
        /// The local object's origin annotation, if it has one.
        origin: Option<String>,
    },
}

/// Writes objects of kind `K` in one namespace of the local cluster, owned by their origin
/// annotation.
pub struct LocalWriter<K> {
    api: Api<K>,
    counted: Counted,
}

impl<K> LocalWriter<K>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    /// Writes through `api`, each write counted under `counted`.
    pub fn new(api: Api<K>, counted: Counted) -> Self {
        LocalWriter { api, counted }
    }

    /// Makes the local object `desired` (which must carry its origin annotation), unless a
    /// local object of that name is not ours.
    pub async fn apply(&self, desired: &K, current: Option<&K>) -> Result<Written, kube::Error> {
        let origin = desired
            .annotations()
            .get(ORIGIN_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        match ownership(current, &origin) {
            Ownership::Foreign { origin } => return Ok(Written::Conflict { origin }),
            Ownership::Ours => {
                let as_json = |k: &K| serde_json::to_value(k).unwrap_or(Value::Null);
                if let Some(current) = current
                    && up_to_date(&as_json(current), &as_json(desired))
                {
                    return Ok(Written::Unchanged(current.resource_version()));
                }
            }
            Ownership::Absent => {
                // A create: if someone made the object since `current` was read, it fails and
                // nothing of theirs is overwritten; then look again. (Cheaper for the API server
                // than a server-side apply; later writes apply, and take the fields over.)
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                };
                match self.api.create(&params, desired).await {
                    Ok(written) => {
                        self.counted.wrote("create");
                        return Ok(Written::Applied(written.resource_version()));
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        let current = self.api.get_opt(&desired.name_any()).await?;
                        if let Ownership::Foreign { origin } = ownership(current.as_ref(), &origin)
                        {
                            return Ok(Written::Conflict { origin });
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        self.adopt(desired).await
    }

    /// Makes the local object `desired`, whoever it belongs to now: for a reconciler that has
    /// decided the object is its own (a copy another writer of the same API left behind).
    pub async fn adopt(&self, desired: &K) -> Result<Written, kube::Error> {
        let desired = serde_json::to_value(desired).map_err(kube::Error::SerdeError)?;
        let written = apply_whole(&self.api, &name_of(&desired), desired, &self.counted).await?;
        Ok(Written::Applied(written.resource_version()))
    }

    /// Deletes `current` if it is ours (origin `origin`); returns whether it did. The delete is
    /// conditional on the object's uid and resourceVersion, so an object replaced meanwhile by
    /// someone else survives.
    pub async fn delete(&self, current: &K, origin: &str) -> Result<bool, kube::Error> {
        if ownership(Some(current), origin) != Ownership::Ours {
            return Ok(false);
        }
        delete_exact(
            &self.api,
            &current.name_any(),
            current.uid(),
            current.resource_version(),
            &self.counted,
        )
        .await
    }
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::ObjectMeta;
    use serde_json::json;
    use xcc_kube::scenario::Scenario;

    fn secret(annotation: Option<&str>) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("dumbo".into()),
                namespace: Some("project-1".into()),
                annotations: annotation
                    .map(|a| [(ORIGIN_ANNOTATION.to_string(), a.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn origin_names_peer_namespace_and_name() {
        assert_eq!(
            origin("energy-source", "project-1", "dumbo"),
            "energy-source/project-1/dumbo"
        );
    }

    #[test]
    fn only_objects_with_our_origin_are_ours() {
        let o = origin("energy-source", "project-1", "dumbo");
        assert_eq!(ownership::<Secret>(None, &o), Ownership::Absent);
        assert_eq!(ownership(Some(&secret(Some(&o))), &o), Ownership::Ours);
        assert_eq!(
            ownership(Some(&secret(None)), &o),
            Ownership::Foreign { origin: None }
        );
        assert_eq!(
            ownership(Some(&secret(Some("other/project-1/dumbo"))), &o),
            Ownership::Foreign {
                origin: Some("other/project-1/dumbo".into())
            }
        );
    }

    #[test]
    fn up_to_date_compares_content_exactly_and_metadata_as_a_subset() {
        let current = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "resourceVersion": "7",
                         "annotations": {"xcc.test/origin": "p/ns/s", "other": "x"}},
            "type": "Opaque", "data": {"a": "MQ=="}
        });
        let desired = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "annotations": {"xcc.test/origin": "p/ns/s"}},
            "type": "Opaque", "data": {"a": "MQ=="}
        });
        assert!(up_to_date(&current, &desired));

        let mut changed = desired.clone();
        changed["data"]["a"] = json!("Mg==");
        assert!(!up_to_date(&current, &changed));

        // A key removed at the source must be removed here too.
        let mut fewer = current.clone();
        fewer["data"]["b"] = json!("Mw==");
        assert!(!up_to_date(&fewer, &desired));

        let mut no_data = desired.clone();
        no_data.as_object_mut().unwrap().remove("data");
        assert!(!up_to_date(&current, &no_data));

        let mut relabelled = desired.clone();
        relabelled["metadata"]["labels"] = json!({"team": "a"});
        assert!(!up_to_date(&current, &relabelled));
    }

    fn counted() -> (Counted, prometheus_client::registry::Registry) {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = SyncMetrics::register(&mut registry);
        (
            Counted {
                metrics,
                reconciler: "test",
            },
            registry,
        )
    }

    fn writes(registry: &prometheus_client::registry::Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text.lines()
            .filter(|l| l.starts_with("sync_writes_total{"))
            .map(|l| {
                l.split("verb=\"")
                    .nth(1)
                    .unwrap_or_default()
                    .replace("\"} ", "=")
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(",")
    }

    #[tokio::test]
    async fn a_copy_with_a_foreign_key_is_replaced_and_its_status_applied_apart() {
        let desired = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "team-a"},
            "data": {"a": "1"},
            "status": {"seen": true},
        });
        let mut after_apply = desired.clone();
        after_apply.as_object_mut().unwrap().remove("status");
        after_apply["metadata"]["resourceVersion"] = json!("7");
        // Another manager's key survives the apply.
        after_apply["data"]["extra"] = json!("theirs");
        let mut replaced = after_apply.clone();
        replaced["data"] = json!({"a": "1"});
        let path = "/api/v1/namespaces/team-a/configmaps/settings";
        let (client, server) = Scenario::new()
            .expect("PATCH", path)
            .when(|r| {
                r.param("force") == Some("true") && r.param("fieldManager") == Some("xcc-agent")
            })
            .reply((200, after_apply))
            .expect("PUT", path)
            .check(|body| assert_eq!(body["data"], json!({"a": "1"})))
            .reply((200, replaced.clone()))
            .expect("PATCH", format!("{path}/status"))
            .check(|body| assert_eq!(body["status"], json!({"seen": true})))
            .reply((200, replaced))
            .run();
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            client,
            "team-a",
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        let (counted, registry) = counted();
        apply_whole(&api, "settings", desired, &counted)
            .await
            .unwrap();
        assert_eq!(server.done().await.len(), 3);
        assert_eq!(writes(&registry), "apply=1,replace=1,status=1");
    }

    #[tokio::test]
    async fn a_delete_that_lost_its_precondition_is_no_error_and_not_counted() {
        let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409, "message": "Precondition failed: UID in precondition: a, UID in object meta: b"});
        let (client, server) = Scenario::new()
            .expect("DELETE", "/api/v1/namespaces/project-1/secrets/dumbo")
            .check(|body| assert_eq!(body["preconditions"]["uid"], "a"))
            .reply((409, conflict))
            .run();
        let api: Api<Secret> = Api::namespaced(client, "project-1");
        let (counted, registry) = counted();
        let deleted = delete_exact(&api, "dumbo", Some("a".into()), Some("3".into()), &counted)
            .await
            .unwrap();
        assert!(!deleted);
        server.done().await;
        assert_eq!(writes(&registry), "");
    }
}

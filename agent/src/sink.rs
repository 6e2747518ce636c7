//! The local writer: puts objects read from a peer into the local cluster, and never touches an
//! object it did not put there.
//!
//! Every object it writes carries the origin annotation [`ORIGIN_ANNOTATION`]
//! (`<peer>/<namespace>/<name>`, naming where the object was read from). An object without it, or
//! with another origin, belongs to someone else: it is neither overwritten nor deleted (the caller
//! reports a conflict). Writes are server-side applies under field manager [`FIELD_MANAGER`], and
//! are skipped when the local object already says what the desired one says.

use std::fmt::Debug;

use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

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
    Foreign { origin: Option<String> },
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
    Conflict { origin: Option<String> },
}

/// Writes objects of kind `K` in one namespace of the local cluster.
pub struct LocalWriter<K> {
    api: Api<K>,
}

impl<K> LocalWriter<K>
where
    K: Resource + Clone + Serialize + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    pub fn new(api: Api<K>) -> Self {
        LocalWriter { api }
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
                // Not forced: if someone made the object since `current` was read, their fields
                // conflict and nothing of theirs is overwritten; then look again.
                let params = PatchParams::apply(FIELD_MANAGER);
                match self
                    .api
                    .patch(&desired.name_any(), &params, &Patch::Apply(desired))
                    .await
                {
                    Ok(written) => return Ok(Written::Applied(written.resource_version())),
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
        let written = self
            .api
            .patch(
                &desired.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(desired),
            )
            .await?;
        Ok(Written::Applied(written.resource_version()))
    }

    /// Deletes `current` if it is ours (origin `origin`); returns whether it did. The delete is
    /// conditional on the object's uid and resourceVersion, so an object replaced meanwhile by
    /// someone else survives.
    pub async fn delete(&self, current: &K, origin: &str) -> Result<bool, kube::Error> {
        if ownership(Some(current), origin) != Ownership::Ours {
            return Ok(false);
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: current.uid(),
                resource_version: current.resource_version(),
            }),
            ..Default::default()
        };
        match self.api.delete(&current.name_any(), &params).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::ObjectMeta;
    use serde_json::json;

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
}

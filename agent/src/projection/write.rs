//! The decision every projection reconciler makes for an object it owns: leave it (someone
//! else's), keep it (up to date) or apply it. Pure, so that each reconciler's plan is.

use kube::Resource;
use serde::Serialize;
use serde_json::Value;

use super::owned_by;
use crate::sink;

/// What to do with an object of the name a reconciler writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// One of that name exists that the owner does not own: left alone (a `...Conflict`).
    LeaveAlone,
    /// Ours and up to date ([`sink::up_to_date`]): nothing to write.
    Keep,
    /// Missing or drifted: applied whole.
    Apply,
}

/// The [`Write`] for `desired` given `current`, the object of that name (if any), for the owner
/// with UID `uid`.
pub fn decide<K: Resource + Serialize>(
    current: Option<&K>,
    uid: &str,
    desired: &Value,
) -> Result<Write, serde_json::Error> {
    Ok(match current {
        None => Write::Apply,
        Some(object) if !owned_by(object.meta(), uid) => Write::LeaveAlone,
        Some(object) if sink::up_to_date(&serde_json::to_value(object)?, desired) => Write::Keep,
        Some(_) => Write::Apply,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use serde_json::json;

    #[test]
    fn an_object_is_left_kept_or_applied() {
        let desired = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "sa", "labels": {"app.kubernetes.io/managed-by": "xcc-agent"}}});
        let found = |owner: &str, labels: Value| -> ServiceAccount {
            serde_json::from_value(json!({"metadata": {"name": "sa", "labels": labels,
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": owner}]}}))
            .unwrap()
        };
        let ours = json!({"app.kubernetes.io/managed-by": "xcc-agent", "extra": "kept"});
        let rows = [
            ("missing", None, Write::Apply),
            (
                "ours, up to date (other labels allowed)",
                Some(found("me", ours)),
                Write::Keep,
            ),
            (
                "ours, its label removed",
                Some(found("me", json!({}))),
                Write::Apply,
            ),
            (
                "someone else's",
                Some(found("them", json!({}))),
                Write::LeaveAlone,
            ),
        ];
        for (situation, current, want) in rows {
            assert_eq!(
                decide(current.as_ref(), "me", &desired).unwrap(),
                want,
                "{situation}"
            );
        }
    }
}

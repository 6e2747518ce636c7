//! The one status writer: what a reconcile decided ([`Verdict`]) and how it reaches the
//! object's `status` subresource ([`write`]).
//!
//! ## One patch strategy: server-side apply of the status, forced, under a field manager
//!
//! The objects xcc writes status on are the originals' kinds: users, `kubectl edit
//! --subresource=status` and the original controllers (during a migration) may own fields of the
//! same status. A server-side apply touches only what its field manager sets: fields owned by
//! another manager stay as they are, without this writer having to read them and write them back
//! (a merge patch of a status built from the object as it was read writes back a snapshot of
//! everyone's fields, undoing a change another writer made in between, and cannot remove a field
//! without an explicit `null`). And a field this writer stops setting (the `InsecurePeer`
//! condition once a peer is verified, a `proxy` reference that no longer holds) goes away because
//! the manager no longer applies it. `force` takes over a field another manager set before (the
//! conditions list is atomic in the CRDs: the reconciler's list wins, as it did with a merge
//! patch). The cost of an apply over a merge patch is paid only on a change: an unchanged status
//! is not written at all.
//!
//! ## Nothing written when nothing changed
//!
//! [`write`] compares the status it would write with the object's, apart from the
//! `lastTransitionTime` of conditions, and keeps each condition's `lastTransitionTime` while its
//! status (`True`/`False`/`Unknown`) stays the same, whatever the reconciler put there: a
//! reconcile that finds nothing new leaves the object (and its resourceVersion) as it was.

use std::{borrow::Cow, fmt::Debug};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

use crate::{
    ConditionStatus, PeerClient, remove_condition, set_condition,
    trust::{INSECURE_PEER_CONDITION, INSECURE_PEER_REASON},
};

/// Longest condition message a [`Verdict`] carries (characters); longer ones are cut and end in
/// `…`. Text from another server inside a message is bounded tighter by [`crate::bounded`].
pub const MESSAGE_LIMIT: usize = 1024;

/// One condition as a reconcile decided it: whether it holds, why (a `reason` of the API's
/// vocabulary) and a message for people, bounded to [`MESSAGE_LIMIT`]. The condition type and
/// the generation it was decided for are given when it is [`set`](Verdict::set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the condition holds.
    pub ready: bool,
    /// The reason, as written: a value of the API's reason enum
    /// ([`status_enum!`](crate::status_enum)) or a `&'static str`.
    pub reason: Cow<'static, str>,
    /// For people, bounded to [`MESSAGE_LIMIT`].
    pub message: String,
    /// Why the peer the object reads from is not verified (`--allow-insecure-peers`), if so:
    /// the message of the `InsecurePeer` condition ([`Verdict::set_peer`]).
    pub insecure: Option<String>,
}

impl Verdict {
    /// A condition that holds. `reason` is a value of a reason enum (declared with
    /// [`status_enum!`](crate::status_enum)) or a `&'static str`.
    pub fn ok(reason: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Verdict {
        Verdict {
            ready: true,
            reason: reason.into(),
            message: limited(message.into()),
            insecure: None,
        }
    }

    /// A condition that does not hold.
    pub fn not(reason: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Verdict {
        Verdict {
            ready: false,
            reason: reason.into(),
            message: limited(message.into()),
            insecure: None,
        }
    }

    /// This verdict, reached through `peer` (which may be unverified).
    pub fn through(mut self, peer: &PeerClient) -> Verdict {
        self.insecure = peer.insecure_message();
        self
    }

    /// `True` or `False`.
    pub fn status(&self) -> ConditionStatus {
        if self.ready {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }

    /// Sets condition `type_` from this verdict, decided for `generation`.
    pub fn set(&self, conditions: &mut Vec<Condition>, type_: &str, generation: Option<i64>) {
        set_condition(
            conditions,
            type_,
            self.status(),
            &self.reason,
            self.message.clone(),
            generation,
        );
    }

    /// Sets the `InsecurePeer` condition when the peer is not verified; removes it otherwise.
    pub fn set_peer(&self, conditions: &mut Vec<Condition>, generation: Option<i64>) {
        match &self.insecure {
            Some(why) => set_condition(
                conditions,
                INSECURE_PEER_CONDITION,
                ConditionStatus::True,
                INSECURE_PEER_REASON,
                why.clone(),
                generation,
            ),
            None => remove_condition(conditions, INSECURE_PEER_CONDITION),
        }
    }
}

fn limited(message: String) -> String {
    match message.char_indices().nth(MESSAGE_LIMIT) {
        Some((at, _)) => {
            let mut cut = message[..at].to_string();
            cut.push('…');
            cut
        }
        None => message,
    }
}

/// The reason of condition `type_`, if it is set.
pub fn reason_of<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.reason.as_str())
}

/// Makes the status of `obj` (as read) `status`: a forced server-side apply of the status
/// subresource under `field_manager` (see the [module](self) for why), unless nothing but
/// `lastTransitionTime`s would change. Returns whether it wrote.
pub async fn write<K, S>(
    api: &Api<K>,
    obj: &K,
    status: &S,
    field_manager: &str,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Debug,
    S: Serialize,
{
    let current = serde_json::to_value(obj).map_err(kube::Error::SerdeError)?;
    let desired = serde_json::to_value(status).map_err(kube::Error::SerdeError)?;
    let Some(desired) = changed(current.get("status"), desired) else {
        return Ok(false);
    };
    let patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": desired,
    });
    api.patch_status(
        &obj.name_any(),
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(patch),
    )
    .await?;
    Ok(true)
}

/// `desired` with the `lastTransitionTime` of each condition whose status `current` already has
/// taken from `current`; `None` when it then equals `current`.
pub fn changed(current: Option<&Value>, mut desired: Value) -> Option<Value> {
    let conditions = |status: Option<&Value>| -> Vec<Value> {
        status
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let before = conditions(current);
    if let Some(list) = desired.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in list {
            let same = before.iter().find(|old| {
                old.get("type") == condition.get("type")
                    && old.get("status") == condition.get("status")
            });
            if let (Some(old), Some(fields)) = (same, condition.as_object_mut())
                && let Some(time) = old.get("lastTransitionTime")
            {
                fields.insert("lastTransitionTime".into(), time.clone());
            }
        }
    }
    (current != Some(&desired)).then_some(desired)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(conditions: Value) -> Value {
        json!({"observedGeneration": 2, "conditions": conditions})
    }

    fn ready(status: &str, reason: &str, time: &str) -> Value {
        json!({"type": "Ready", "status": status, "reason": reason, "message": "m",
               "observedGeneration": 2, "lastTransitionTime": time})
    }

    #[test]
    fn a_status_that_differs_only_in_transition_times_is_not_written() {
        let current = status(json!([ready("True", "Synced", "2026-01-01T00:00:00Z")]));
        let desired = status(json!([ready("True", "Synced", "2026-05-05T00:00:00Z")]));
        assert_eq!(changed(Some(&current), desired), None);
    }

    #[test]
    fn a_new_reason_keeps_the_transition_time_and_a_new_status_moves_it() {
        let current = status(json!([ready("False", "Waiting", "2026-01-01T00:00:00Z")]));
        let reason = status(json!([ready("False", "Still", "2026-05-05T00:00:00Z")]));
        let written = changed(Some(&current), reason).expect("a new reason is written");
        assert_eq!(
            written["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(written["conditions"][0]["reason"], "Still");

        let flipped = status(json!([ready("True", "Done", "2026-05-05T00:00:00Z")]));
        let written = changed(Some(&current), flipped).expect("a new status is written");
        assert_eq!(
            written["conditions"][0]["lastTransitionTime"],
            "2026-05-05T00:00:00Z"
        );
    }

    #[test]
    fn a_first_status_and_a_removed_condition_are_written() {
        let desired = status(json!([ready("True", "Synced", "2026-01-01T00:00:00Z")]));
        assert!(changed(None, desired.clone()).is_some());
        let mut insecure = desired.clone();
        insecure["conditions"].as_array_mut().unwrap().push(
            json!({"type": "InsecurePeer", "status": "True", "reason": "TLSNotVerified",
                         "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}),
        );
        assert!(changed(Some(&insecure), desired).is_some());
    }

    #[test]
    fn messages_are_bounded_and_reasons_come_from_enums_too() {
        crate::status_enum! {
            enum Reason {
                FromEnum = "FromEnum",
            }
        }
        let verdict = Verdict::not(Reason::FromEnum, "é".repeat(5 * MESSAGE_LIMIT));
        assert_eq!(verdict.reason, "FromEnum");
        for known in Reason::KNOWN {
            assert_eq!(Verdict::ok(known.clone(), "m").reason, *known);
        }
        // A reason another version wrote is written back as it was read.
        let other = Verdict::ok(Reason::from("Later"), "m");
        assert_eq!(other.reason, "Later");
        assert_eq!(verdict.message.chars().count(), MESSAGE_LIMIT + 1);
        assert!(verdict.message.ends_with('…'));
        assert_eq!(Verdict::ok("Synced", "short").message, "short");
    }

    #[test]
    fn the_insecure_peer_condition_follows_the_verdict() {
        let mut conditions = Vec::new();
        let mut verdict = Verdict::ok("Replicated", "ok");
        verdict.insecure = Some("not verified".into());
        verdict.set(&mut conditions, "Ready", Some(1));
        verdict.set_peer(&mut conditions, Some(1));
        assert_eq!(reason_of(&conditions, "Ready"), Some("Replicated"));
        assert_eq!(
            reason_of(&conditions, INSECURE_PEER_CONDITION),
            Some(INSECURE_PEER_REASON)
        );
        verdict.insecure = None;
        verdict.set_peer(&mut conditions, Some(1));
        assert_eq!(reason_of(&conditions, INSECURE_PEER_CONDITION), None);
    }

    #[tokio::test]
    async fn a_change_is_a_forced_apply_of_the_status_subresource_and_no_change_no_request() {
        use k8s_openapi::api::core::v1::Namespace;
        let body = json!({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": "team-a"}});
        // One request: the unchanged status below is not written (a second would be unexpected).
        let (client, server) = crate::scenario::Scenario::new()
            .expect("PATCH", "/api/v1/namespaces/team-a/status")
            .when(|r| {
                r.param("fieldManager") == Some("xcc-test") && r.param("force") == Some("true")
            })
            .check(|patch| assert_eq!(patch["status"]["phase"], "Terminating"))
            .reply((200, body))
            .run();
        let api: Api<Namespace> = Api::all(client);
        let namespace: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-a"}, "status": {"phase": "Active"}
        }))
        .unwrap();
        let terminating = json!({"phase": "Terminating"});
        assert!(
            write(&api, &namespace, &terminating, "xcc-test")
                .await
                .unwrap()
        );
        let active = json!({"phase": "Active"});
        assert!(!write(&api, &namespace, &active, "xcc-test").await.unwrap());
        assert_eq!(server.done().await.len(), 1);
    }
}

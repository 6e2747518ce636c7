//! Status conditions.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

/// The status of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// It does not.
    False,
    /// It cannot be told (the status Kubernetes uses while it is being found out).
    Unknown,
}

impl ConditionStatus {
    fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// Sets condition `type_` in `conditions`. `lastTransitionTime` moves only when the status
/// changes, so a reconcile that finds nothing new leaves the object as it was.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
) {
    let message = message.into();
    let status = status.as_str();
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status != status {
            existing.last_transition_time = Time(Timestamp::now());
        }
        existing.status = status.to_string();
        existing.reason = reason.to_string();
        existing.message = message;
        existing.observed_generation = observed_generation;
        return;
    }
    conditions.push(Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation,
        last_transition_time: Time(Timestamp::now()),
    });
}

/// Longest text from another server that goes into a condition message or an Event note.
pub const REMOTE_TEXT_LIMIT: usize = 256;

/// `text` (an error from another server, say), cut to [`REMOTE_TEXT_LIMIT`] characters and with
/// control characters replaced, so that whatever a remote server answers cannot swell a status or
/// an Event, nor forge lines in a log; and without kube's Rust type names
/// ([`crate::report::scrub`]).
pub fn bounded(text: &impl std::fmt::Display) -> String {
    let text = crate::report::scrub(&text.to_string());
    let mut out: String = text
        .chars()
        .take(REMOTE_TEXT_LIMIT)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(REMOTE_TEXT_LIMIT).is_some() {
        out.push('…');
    }
    out
}

/// Removes condition `type_` (one that only holds while something is true, such as
/// `InsecurePeer`).
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_text_is_bounded_and_flattened() {
        assert_eq!(bounded(&"401 Unauthorized"), "401 Unauthorized");
        let long = "é".repeat(10_000) + "\nforged log line";
        let out = bounded(&long);
        assert_eq!(out.chars().count(), REMOTE_TEXT_LIMIT + 1);
        assert!(out.ends_with('…'));
        assert_eq!(bounded(&"a\nb\tc"), "a b c");
    }

    #[test]
    fn transition_time_moves_only_when_the_status_changes() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::False,
            "Waiting",
            "a",
            Some(1),
        );
        let first = conditions[0].last_transition_time.clone();
        std::thread::sleep(std::time::Duration::from_millis(5));
        set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::False,
            "Still",
            "b",
            Some(2),
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, first);
        assert_eq!(conditions[0].reason, "Still");
        assert_eq!(conditions[0].observed_generation, Some(2));
        set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::True,
            "Done",
            "",
            Some(2),
        );
        assert_ne!(conditions[0].last_transition_time, first);
        assert_eq!(conditions[0].status, "True");
    }
}

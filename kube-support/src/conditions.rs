//! Status conditions.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

/// The status of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
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

#[cfg(test)]
mod tests {
    use super::*;

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

//! What a link's status says, and waiting for it: the command stops at once on a condition
//! that waiting does not change.

use std::{future::Future, time::Duration};

use kube::api::DynamicObject;
use serde_json::Value;

use crate::Error;

/// Between two looks at a link that is not Ready yet.
const POLL: Duration = Duration::from_millis(500);
/// Reasons of a link's conditions that waiting does not change: the command stops at once.
const LASTING: [&str; 7] = [
    "NameTooLong",
    "ServiceAccountConflict",
    "SecretConflict",
    "NoServerURL",
    "KubeconfigRejected",
    "TLSSecretConflict",
    "ServiceConflict",
];

/// A condition of a link that is not True.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    pub type_: String,
    pub reason: String,
    pub message: String,
}

/// What a link's status says about its current generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// No status for this generation yet (no agent, or it has not looked yet).
    Pending,
    /// Ready=True, with its message.
    Ready(String),
    /// Ready is not True: every condition that is not True, Ready first.
    NotReady(Vec<Failing>),
}

pub fn readiness(object: &DynamicObject) -> Readiness {
    let status = &object.data["status"];
    if object.metadata.generation.is_none()
        || status["observedGeneration"].as_i64() != object.metadata.generation
    {
        return Readiness::Pending;
    }
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let text = |c: &Value, key: &str| c[key].as_str().unwrap_or_default().to_string();
    let Some(ready) = conditions.iter().find(|c| c["type"] == "Ready") else {
        return Readiness::Pending;
    };
    if ready["status"] == "True" {
        return Readiness::Ready(xcc_kube::bounded(&text(ready, "message")));
    }
    let mut failing: Vec<Failing> = conditions
        .iter()
        .filter(|c| c["status"] != "True")
        .map(|c| Failing {
            type_: text(c, "type"),
            reason: text(c, "reason"),
            message: xcc_kube::bounded(&text(c, "message")),
        })
        .collect();
    failing.sort_by_key(|f| f.type_ != "Ready");
    Readiness::NotReady(failing)
}

/// `Ready=False (reason: message); ServiceAccountReady=False (...)`.
pub fn describe_failing(failing: &[Failing]) -> String {
    failing
        .iter()
        .map(|f| format!("{}=False ({}: {})", f.type_, f.reason, f.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether waiting cannot make these conditions True.
pub(super) fn lasting(failing: &[Failing]) -> bool {
    failing.iter().any(|f| LASTING.contains(&f.reason.as_str()))
}

/// Why a link has no status for its generation, as far as the command can tell.
pub(super) fn pending(namespace: &str) -> String {
    format!(
        "its agent has not reported on it (is xcc-agent running there with API projection on, \
         and may it work in namespace {namespace}: RoleBinding xcc-agent-projection-link, see \
         manifests/agent/projection.yaml?)"
    )
}

/// Calls `step` every [`POLL`] until it gives a value, fails, or `timeout` passes; then
/// `timed_out` gets the last reason `step` gave for waiting.
pub(super) async fn wait<T, F, Fut>(
    timeout: Duration,
    mut step: F,
    timed_out: impl FnOnce(String) -> Error,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Result<T, String>, Error>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let why = match step().await? {
            Ok(done) => return Ok(done),
            Err(why) => why,
        };
        if tokio::time::Instant::now() + POLL > deadline {
            return Err(timed_out(why));
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::objects::{GROUP, VERSION};
    use serde_json::json;

    fn link(generation: i64, status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": "DownstreamClusterLink",
            "metadata": {"name": "w", "namespace": "ns", "generation": generation},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn readiness_is_read_for_the_current_generation_only() {
        assert_eq!(readiness(&link(1, json!(null))), Readiness::Pending);
        let ready = json!({"observedGeneration": 1, "conditions": [
            {"type": "Ready", "status": "True", "reason": "Ready", "message": "served"}]});
        assert_eq!(readiness(&link(2, ready.clone())), Readiness::Pending);
        assert_eq!(
            readiness(&link(1, ready)),
            Readiness::Ready("served".into())
        );
        let not = json!({"observedGeneration": 3, "conditions": [
            {"type": "ProxyServiceReady", "status": "True", "reason": "ServiceApplied"},
            {"type": "ServiceAccountReady", "status": "False", "reason": "UpstreamRefused",
             "message": format!("401 {}", "x".repeat(1000))},
            {"type": "Ready", "status": "False", "reason": "NotReady", "message": "UpstreamRefused"}]});
        let Readiness::NotReady(failing) = readiness(&link(3, not)) else {
            panic!("not NotReady");
        };
        assert_eq!(failing.len(), 2);
        assert_eq!(failing[0].type_, "Ready");
        assert_eq!(failing[1].reason, "UpstreamRefused");
        assert!(failing[1].message.chars().count() <= xcc_kube::REMOTE_TEXT_LIMIT + 1);
        let text = describe_failing(&failing);
        assert!(
            text.starts_with("Ready=False (NotReady: UpstreamRefused); ServiceAccountReady=False (UpstreamRefused: 401 x"),
            "{text}"
        );
        assert!(!lasting(&failing));
        assert!(lasting(&[Failing {
            type_: "Ready".into(),
            reason: "SecretConflict".into(),
            message: String::new(),
        }]));
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_ends_with_the_last_reason_when_the_timeout_passes() {
        let mut calls = 0;
        let e = wait::<(), _, _>(
            Duration::from_secs(3),
            || {
                calls += 1;
                let n = calls;
                async move { Ok(Err(format!("look {n}"))) }
            },
            |why| Error::Failed(format!("timed out: {why}")),
        )
        .await
        .unwrap_err();
        // Looks at 0, 0.5, ..., 3 s.
        assert_eq!(e.to_string(), "timed out: look 7");
        let done = wait(
            Duration::from_secs(3),
            || async { Ok::<_, Error>(Ok::<_, String>(7)) },
            Error::Failed,
        )
        .await
        .unwrap();
        assert_eq!(done, 7);
    }
}

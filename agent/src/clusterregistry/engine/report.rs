//! What the engine says: a rule's status and Events, on rules and on objects written again and
//! again.

use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api, Resource, ResourceExt,
    runtime::events::{Event as KubeEvent, EventType},
};
use xcc_kube::status::Verdict;

use super::{Engine, RECONCILER};
pub use crate::clusterregistry::api::RuleReason as Reason;
use crate::{
    clusterregistry::{
        api::{GroupVersionKind, ResourceSyncRule},
        builtin,
        decide::Key,
        rules,
    },
    sink,
};

impl Engine {
    /// Counts a write of `target`; one written more than [`LIMIT`](crate::clusterregistry::churn::LIMIT) times within a minute
    /// is reported (metric, warning, Warning Event on the object).
    pub(super) async fn guard(&self, target: &Key) {
        let writes = self
            .memory
            .churn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(target, Instant::now());
        let Some(writes) = writes else { return };
        let kind = &target.gvk.kind;
        let namespace = target.namespace.as_deref().unwrap_or_default();
        let name = &target.name;
        self.io.metrics.churning(RECONCILER, kind);
        tracing::warn!(%kind, %namespace, %name, writes, "object written again and again by resource sync");
        let reference = ObjectReference {
            api_version: Some(rules::api_version(&target.gvk)),
            kind: Some(kind.clone()),
            namespace: target.namespace.clone(),
            name: Some(name.clone()),
            ..Default::default()
        };
        let note = format!(
            "resource sync wrote this object {writes} times within a minute: its sources or \
             another writer keep changing it (see the agent's log for where each copy came from)"
        );
        self.event(&reference, EventType::Warning, "Churn", note)
            .await;
    }

    /// Where this engine's writes are counted.
    pub(super) fn counted(&self) -> sink::Counted {
        sink::Counted {
            metrics: self.io.metrics.clone(),
            reconciler: RECONCILER,
        }
    }

    /// A reference to the first rule of `gvk`, for Events.
    pub(super) fn rule_object(&self, gvk: &GroupVersionKind) -> Option<ObjectReference> {
        let name = &self
            .catalog
            .rules
            .get(gvk)?
            .iter()
            .find(|r| !builtin::is_core(r))?
            .name;
        Some(ResourceSyncRule::new(name, Default::default()).object_ref(&()))
    }

    pub(super) async fn event(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let event = KubeEvent {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Sync".into(),
            secondary: None,
        };
        if let Err(error) = self.io.recorder.publish(&event, reference).await {
            tracing::debug!(%error, "could not publish an Event");
        }
    }

    /// Says once (log, Event, status) whether `rule` can work.
    pub(super) async fn report(
        &mut self,
        rule: &ResourceSyncRule,
        ok: bool,
        reason: Reason,
        message: String,
    ) {
        let name = rule.name_any();
        let said = (reason.to_string(), message.clone());
        let verdict = if ok {
            Verdict::ok(reason.clone(), message.clone())
        } else {
            Verdict::not(reason.clone(), message.clone())
        };
        let mut status = rule.status.clone().unwrap_or_default();
        let generation = rule.metadata.generation;
        status.observed_generation = generation;
        verdict.set(&mut status.conditions, "Ready", generation);
        let api = Api::<ResourceSyncRule>::all(self.io.client.clone());
        if let Err(error) = sink::write_status(&api, rule, &status, &self.counted()).await {
            tracing::debug!(rule = %name, %error, "could not write the status");
        }
        if self.memory.reported.get(&name) == Some(&said) {
            return;
        }
        self.memory.reported.insert(name.clone(), said);
        if ok {
            tracing::info!(rule = %name, "ResourceSyncRule active");
        } else {
            tracing::warn!(rule = %name, %reason, %message, "ResourceSyncRule cannot work");
            self.event(
                &rule.object_ref(&()),
                EventType::Warning,
                reason.as_str(),
                message,
            )
            .await;
        }
    }
}

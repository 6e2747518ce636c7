//! SecretExport: lets one ServiceAccount read exactly one Secret of the namespace.
//!
//! For export `E` the agent applies Role `xcc-secretexport-E` (get, list, watch on `secrets` with
//! `resourceNames: [<spec.secret.name>]` — list and watch only ever admit a `metadata.name` field
//! selector for that name) and RoleBinding `xcc-secretexport-E` to `spec.serviceAccount.name`,
//! both owned by the export. Their ownerReferences let a garbage collector remove them, and the
//! finalizer removes them itself, so they also go where none runs. A Role or RoleBinding of that
//! name that the export does not own is left alone (`Conflict`).

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::{
    core::v1::Secret,
    rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::ObjectMeta,
    runtime::{
        controller::Action,
        events::{Event as KubeEvent, EventType, Recorder},
        finalizer::{Event as FinalizerEvent, finalizer},
    },
};

use super::{Error, FINALIZER, Reason, Verdict, api::SecretExport, finalized, write_status};
use crate::sink;

pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    /// Where the writes of Roles and RoleBindings are counted.
    pub counted: sink::Counted,
}

/// Label on the Role and RoleBinding of every export: the export reconciler watches only the
/// objects with it ([`EXPORT_SELECTOR`]), not every Role and RoleBinding of the cluster.
pub const EXPORT_LABEL: (&str, &str) = ("replication.xcc.test/secretexport", "true");

/// The label selector of [`EXPORT_LABEL`].
pub const EXPORT_SELECTOR: &str = "replication.xcc.test/secretexport=true";

/// Name of the Role and RoleBinding of export `export`.
pub fn rbac_name(export: &str) -> String {
    format!("xcc-secretexport-{export}")
}

fn metadata(export: &SecretExport) -> ObjectMeta {
    ObjectMeta {
        name: Some(rbac_name(&export.name_any())),
        namespace: export.namespace(),
        owner_references: export.controller_owner_ref(&()).map(|o| vec![o]),
        labels: Some(
            [
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "xcc-agent".to_string(),
                ),
                (EXPORT_LABEL.0.to_string(), EXPORT_LABEL.1.to_string()),
            ]
            .into(),
        ),
        ..Default::default()
    }
}

/// The Role of `export`: read access to its Secret and nothing else.
pub fn desired_role(export: &SecretExport) -> Role {
    Role {
        metadata: metadata(export),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".into()]),
            resource_names: Some(vec![export.spec.secret.name.clone()]),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            non_resource_urls: None,
        }]),
    }
}

/// The RoleBinding of `export`: its Role, to its ServiceAccount.
pub fn desired_role_binding(export: &SecretExport) -> RoleBinding {
    RoleBinding {
        metadata: metadata(export),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: rbac_name(&export.name_any()),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: export.spec.service_account.name.clone(),
            namespace: export.namespace(),
            api_group: None,
        }]),
    }
}

/// Whether `object` is owned by the export with uid `uid`.
pub fn owned_by<K: Resource>(object: &K, uid: &str) -> bool {
    object.owner_references().iter().any(|o| o.uid == uid)
}

pub async fn reconcile(export: Arc<SecretExport>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = export.namespace().unwrap_or_default();
    let api: Api<SecretExport> = Api::namespaced(ctx.client.clone(), &namespace);
    finalized(
        finalizer(&api, FINALIZER, export, |event| async {
            match event {
                FinalizerEvent::Apply(export) => apply(&api, &export, &ctx).await,
                FinalizerEvent::Cleanup(export) => cleanup(&export, &ctx).await,
            }
        })
        .await,
    )
}

pub fn error_policy(export: Arc<SecretExport>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(
        namespace = %export.namespace().unwrap_or_default(),
        export = %export.name_any(),
        %error,
        "SecretExport reconcile failed"
    );
    Action::requeue(Duration::from_secs(5))
}

/// Applies `desired` unless an object of that name exists that `uid` does not own.
async fn apply_owned<K>(
    api: &Api<K>,
    desired: &K,
    uid: &str,
    counted: &sink::Counted,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let name = desired.name_any();
    if let Some(current) = api.get_opt(&name).await? {
        if !owned_by(&current, uid) {
            return Ok(false);
        }
        let json = |k: &K| serde_json::to_value(k).unwrap_or_default();
        if sink::up_to_date(&json(&current), &json(desired)) {
            return Ok(true);
        }
    }
    let desired = serde_json::to_value(desired).map_err(kube::Error::SerdeError)?;
    sink::apply_whole(api, &name, desired, counted).await?;
    Ok(true)
}

async fn apply(
    api: &Api<SecretExport>,
    export: &SecretExport,
    ctx: &Context,
) -> Result<Action, Error> {
    let verdict = grant(export, ctx).await;
    let namespace = export.namespace().unwrap_or_default();
    let name = export.name_any();
    let reason_changed =
        write_status(api, export, export.status.as_ref(), &verdict, &ctx.counted).await?;
    if reason_changed {
        tracing::info!(%namespace, export = %name, ready = verdict.ready, reason = %verdict.reason, message = %verdict.message, "SecretExport status");
        if verdict.reason == Reason::Conflict {
            let event = KubeEvent {
                type_: EventType::Warning,
                reason: Reason::Conflict.into(),
                note: Some(verdict.message.clone()),
                action: "Export".into(),
                secondary: None,
            };
            if let Err(error) = ctx.recorder.publish(&event, &export.object_ref(&())).await {
                tracing::debug!(%namespace, export = %name, %error, "could not publish an Event");
            }
        }
    }
    Ok(Action::requeue(super::requeue(&verdict)))
}

async fn grant(export: &SecretExport, ctx: &Context) -> Verdict {
    let namespace = export.namespace().unwrap_or_default();
    let uid = export.uid().unwrap_or_default();
    let rbac = rbac_name(&export.name_any());
    let roles: Api<Role> = Api::namespaced(ctx.client.clone(), &namespace);
    let bindings: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), &namespace);
    let written = async {
        Ok::<_, kube::Error>(
            apply_owned(&roles, &desired_role(export), &uid, &ctx.counted).await?
                && apply_owned(&bindings, &desired_role_binding(export), &uid, &ctx.counted)
                    .await?,
        )
    }
    .await;
    match written {
        Ok(true) => {}
        Ok(false) => {
            return Verdict::not(
                Reason::Conflict,
                format!(
                    "Role or RoleBinding {namespace}/{rbac} exists and is not owned by this \
                     SecretExport; it is left as is"
                ),
            );
        }
        Err(error) => {
            return Verdict::not(
                Reason::WriteFailed,
                format!("cannot write Role/RoleBinding {namespace}/{rbac}: {error}"),
            );
        }
    }
    let secret = &export.spec.secret.name;
    match Api::<Secret>::namespaced(ctx.client.clone(), &namespace)
        .get_metadata_opt(secret)
        .await
    {
        Ok(Some(_)) => Verdict::ok(
            Reason::Exported,
            format!(
                "ServiceAccount {namespace}/{} may read Secret {namespace}/{secret}",
                export.spec.service_account.name
            ),
        ),
        Ok(None) => Verdict::not(
            Reason::SecretNotFound,
            format!(
                "Secret {namespace}/{secret} does not exist (yet); ServiceAccount \
                 {namespace}/{} may read it once it does",
                export.spec.service_account.name
            ),
        ),
        Err(error) => Verdict::not(
            Reason::WriteFailed,
            format!("cannot read Secret {namespace}/{secret}: {error}"),
        ),
    }
}

/// The export is being deleted: remove its Role and RoleBinding (only if it owns them).
async fn cleanup(export: &SecretExport, ctx: &Context) -> Result<Action, Error> {
    let namespace = export.namespace().unwrap_or_default();
    let uid = export.uid().unwrap_or_default();
    let name = rbac_name(&export.name_any());
    let bindings: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(binding) = bindings.get_opt(&name).await?
        && owned_by(&binding, &uid)
    {
        sink::delete_exact(&bindings, &name, binding.uid(), None, &ctx.counted).await?;
    }
    let roles: Api<Role> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(role) = roles.get_opt(&name).await?
        && owned_by(&role, &uid)
    {
        sink::delete_exact(&roles, &name, role.uid(), None, &ctx.counted).await?;
    }
    tracing::info!(%namespace, export = %export.name_any(), "SecretExport deleted; its Role and RoleBinding removed");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::api::{LocalRef, SecretExportSpec};

    fn export() -> SecretExport {
        let mut export = SecretExport::new(
            "small-postgres-23.status.binding.name",
            SecretExportSpec {
                secret: LocalRef {
                    name: "pg-binding".into(),
                },
                service_account: LocalRef {
                    name: "upstream-replication-sa".into(),
                },
            },
        );
        export.metadata.namespace = Some("project-1".into());
        export.metadata.uid = Some("export-uid".into());
        export
    }

    #[test]
    fn the_role_reads_exactly_the_exported_secret() {
        let role = desired_role(&export());
        assert_eq!(
            role.metadata.name.as_deref(),
            Some("xcc-secretexport-small-postgres-23.status.binding.name")
        );
        assert!(owned_by(&role, "export-uid"));
        let rules = role.rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].api_groups, Some(vec![String::new()]));
        assert_eq!(rules[0].resources, Some(vec!["secrets".to_string()]));
        assert_eq!(
            rules[0].resource_names,
            Some(vec!["pg-binding".to_string()])
        );
        assert_eq!(rules[0].verbs, ["get", "list", "watch"]);
    }

    #[test]
    fn the_binding_names_the_service_account_of_the_namespace() {
        let binding = desired_role_binding(&export());
        assert!(!owned_by(&binding, "someone-else"));
        assert_eq!(binding.role_ref.kind, "Role");
        assert_eq!(
            binding.role_ref.name,
            rbac_name("small-postgres-23.status.binding.name")
        );
        let subjects = binding.subjects.unwrap();
        assert_eq!(subjects[0].kind, "ServiceAccount");
        assert_eq!(subjects[0].name, "upstream-replication-sa");
        assert_eq!(subjects[0].namespace.as_deref(), Some("project-1"));
    }
}

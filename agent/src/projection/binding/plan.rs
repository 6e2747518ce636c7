//! An APIExportRoleBinding's decisions, apart from I/O: a small state machine over what was read
//! so far. [`next`] says what to read next, or what to do: the reads happen in the same order
//! and stop at the same point as the decisions need them, so nothing is read that is not used.

use std::time::Duration;

use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::{RESYNC, ROLE_MISSING_REQUEUE, cluster_role_binding_name};
use crate::projection::{
    MANAGED_BY, Verdict,
    api::Reason,
    api::{APIExportRoleBinding, UpstreamClusterLink},
    owned_by,
};

/// What was read so far (`None`: not read yet).
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The ClusterRoleBinding of the binding's name, if it exists.
    pub cluster_role_binding: Option<Option<ClusterRoleBinding>>,
    /// The UpstreamClusterLink `spec.upstreamClusterLinkRef`, if it exists.
    pub link: Option<Option<UpstreamClusterLink>>,
    /// Whether ClusterRole `spec.clusterRoleRef.name` exists.
    pub cluster_role: Option<bool>,
}

/// What to read next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    ClusterRoleBinding,
    Link,
    ClusterRole,
}

/// What to do, once enough is read.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Delete the ClusterRoleBinding found (ours): withdrawn while the link or the role is
    /// missing, so that nothing keeps a grant its binding no longer backs; or replaced, since a
    /// roleRef cannot change.
    pub delete: bool,
    /// Apply this ClusterRoleBinding (after the delete, if any).
    pub apply: Option<Value>,
    /// `Ready` once the writes are done.
    pub verdict: Verdict,
    pub requeue: Duration,
}

/// The next read, or the plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Read(Read),
    Done(Plan),
}

fn done(delete: bool, verdict: Verdict, requeue: Duration) -> Next {
    Next::Done(Plan {
        delete,
        apply: None,
        verdict,
        requeue,
    })
}

/// The next step for `binding` (UID `uid`) given `seen`.
pub fn next(
    binding: &APIExportRoleBinding,
    uid: &str,
    seen: &Observed,
) -> Result<Next, serde_json::Error> {
    let name = cluster_role_binding_name(&binding.name_any());
    if name.len() > 253 {
        return Ok(done(
            false,
            Verdict::not(
                Reason::NameTooLong,
                format!(
                    "the name is too long for ClusterRoleBinding {name:?} (253 characters at most)"
                ),
            ),
            RESYNC,
        ));
    }
    let Some(current) = &seen.cluster_role_binding else {
        return Ok(Next::Read(Read::ClusterRoleBinding));
    };
    if let Some(crb) = current
        && !owned_by(&crb.metadata, uid)
    {
        return Ok(done(
            false,
            Verdict::not(
                Reason::Conflict,
                format!(
                    "ClusterRoleBinding {name} exists and is not this binding's; it is left alone"
                ),
            ),
            RESYNC,
        ));
    }
    let withdraw = current.is_some();
    let Some(link) = &seen.link else {
        return Ok(Next::Read(Read::Link));
    };
    let service_account = match linked_service_account(binding, link.as_ref()) {
        Ok(service_account) => service_account,
        Err(verdict) => return Ok(done(withdraw, verdict, RESYNC)),
    };
    let role = &binding.spec.cluster_role_ref.name;
    let Some(role_exists) = seen.cluster_role else {
        return Ok(Next::Read(Read::ClusterRole));
    };
    if !role_exists {
        return Ok(done(
            withdraw,
            Verdict::not(
                Reason::ClusterRoleNotFound,
                format!("ClusterRole {role} does not exist"),
            ),
            ROLE_MISSING_REQUEUE,
        ));
    }
    bound(binding, &name, current.as_ref(), &service_account)
}

/// The ServiceAccount of `link` the ClusterRoleBinding binds, or why there is none yet.
fn linked_service_account(
    binding: &APIExportRoleBinding,
    link: Option<&UpstreamClusterLink>,
) -> Result<String, Verdict> {
    let link_ref = &binding.spec.upstream_cluster_link_ref;
    let Some(link) = link else {
        return Err(Verdict::not(
            Reason::UpstreamClusterLinkNotFound,
            format!(
                "UpstreamClusterLink {}/{} does not exist",
                link_ref.namespace, link_ref.name
            ),
        ));
    };
    link.status
        .as_ref()
        .and_then(|s| s.service_account.as_ref())
        .map(|sa| sa.name.clone())
        .ok_or_else(|| {
            Verdict::not(
                Reason::UpstreamClusterLinkNotReady,
                format!(
                    "UpstreamClusterLink {}/{} has no ServiceAccount yet",
                    link_ref.namespace, link_ref.name
                ),
            )
        })
}

/// The plan once the link and the role are there: the ClusterRoleBinding `name` (`current`, ours
/// if any) binds the role to `service_account`; replaced when it names another role.
fn bound(
    binding: &APIExportRoleBinding,
    name: &str,
    current: Option<&ClusterRoleBinding>,
    service_account: &str,
) -> Result<Next, serde_json::Error> {
    let role = &binding.spec.cluster_role_ref.name;
    let link_ref = &binding.spec.upstream_cluster_link_ref;
    let desired = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": name,
            "labels": { MANAGED_BY.0: MANAGED_BY.1 },
            "ownerReferences": [serde_json::to_value(binding.controller_owner_ref(&()))?],
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role,
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": service_account,
            "namespace": link_ref.namespace,
        }],
    });
    let other_role = current
        .as_ref()
        .is_some_and(|crb| crb.role_ref.name != *role);
    let up_to_date = match current {
        Some(crb) if !other_role => crate::sink::up_to_date(&serde_json::to_value(crb)?, &desired),
        _ => false,
    };
    Ok(Next::Done(Plan {
        delete: other_role,
        apply: (!up_to_date).then_some(desired),
        verdict: Verdict::ok(
            Reason::Bound,
            format!(
                "ClusterRoleBinding {name} binds ClusterRole {role} to ServiceAccount {}/{service_account}",
                link_ref.namespace
            ),
        ),
        requeue: RESYNC,
    }))
}

/// `Ready` when the apply was refused with 403 or 422 (`why`, bounded): the agent may not bind
/// this role (the escalation check, or its RBAC narrowed).
pub fn refused(binding: &APIExportRoleBinding, why: &str) -> (Verdict, Duration) {
    (
        Verdict::not(
            Reason::BindFailed,
            format!(
                "cannot bind ClusterRole {}: {why}",
                binding.spec.cluster_role_ref.name
            ),
        ),
        ROLE_MISSING_REQUEUE,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding() -> APIExportRoleBinding {
        let text =
            include_str!("../../../../manifests/examples/projection-apiexport-role-binding.yaml");
        let mut binding: APIExportRoleBinding = xcc_kube::yaml::from_str(text).unwrap();
        binding.metadata.uid = Some("binding-uid".into());
        binding
    }

    fn crb(owner: &str, role: &str, subject: &str) -> ClusterRoleBinding {
        serde_json::from_value(json!({
            "metadata": {"name": "xcc-apiexport-fish-sauce-cluster-1-a",
                "labels": {MANAGED_BY.0: MANAGED_BY.1},
                "ownerReferences": [{"apiVersion": "projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1",
                    "kind": "APIExportRoleBinding", "name": "fish-sauce-cluster-1-a", "uid": owner,
                    "controller": true, "blockOwnerDeletion": true}]},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": "project-alpha"}],
        }))
        .unwrap()
    }

    fn link(service_account: Option<&str>) -> UpstreamClusterLink {
        let mut link = json!({"apiVersion": "projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1",
            "kind": "UpstreamClusterLink",
            "metadata": {"name": "fish-sauce", "namespace": "project-alpha", "uid": "l"},
            "spec": {"downstream": {"name": "w"}}});
        if let Some(sa) = service_account {
            link["status"] = json!({"serviceAccount": {"name": sa}});
        }
        serde_json::from_value(link).unwrap()
    }

    /// What [`next`] does with each situation, read by read.
    #[test]
    fn each_situation_reads_what_it_needs_and_plans_its_writes() {
        let sa = "xcc-upstream-fish-sauce";
        let ours = crb("binding-uid", "cluster-1-a", sa);
        let seen = |crb: Option<Option<ClusterRoleBinding>>,
                    link: Option<Option<UpstreamClusterLink>>,
                    role: Option<bool>| Observed {
            cluster_role_binding: crb,
            link,
            cluster_role: role,
        };
        // (situation, observed, next read or (delete, applies, reason, requeue))
        type Want = Result<(bool, bool, Reason, Duration), Read>;
        let rows: Vec<(&str, Observed, Want)> = vec![
            (
                "nothing read",
                seen(None, None, None),
                Err(Read::ClusterRoleBinding),
            ),
            (
                "someone else's ClusterRoleBinding",
                seen(Some(Some(crb("x", "cluster-1-a", sa))), None, None),
                Ok((false, false, Reason::Conflict, RESYNC)),
            ),
            (
                "no binding yet: the link next",
                seen(Some(None), None, None),
                Err(Read::Link),
            ),
            (
                "link missing, nothing bound",
                seen(Some(None), Some(None), None),
                Ok((false, false, Reason::UpstreamClusterLinkNotFound, RESYNC)),
            ),
            (
                "link missing, the binding is withdrawn",
                seen(Some(Some(ours.clone())), Some(None), None),
                Ok((true, false, Reason::UpstreamClusterLinkNotFound, RESYNC)),
            ),
            (
                "link without ServiceAccount: withdrawn",
                seen(Some(Some(ours.clone())), Some(Some(link(None))), None),
                Ok((true, false, Reason::UpstreamClusterLinkNotReady, RESYNC)),
            ),
            (
                "link ready: the role next",
                seen(Some(None), Some(Some(link(Some(sa)))), None),
                Err(Read::ClusterRole),
            ),
            (
                "role missing: withdrawn, looked at again soon",
                seen(
                    Some(Some(ours.clone())),
                    Some(Some(link(Some(sa)))),
                    Some(false),
                ),
                Ok((
                    true,
                    false,
                    Reason::ClusterRoleNotFound,
                    ROLE_MISSING_REQUEUE,
                )),
            ),
            (
                "all there, not bound yet",
                seen(Some(None), Some(Some(link(Some(sa)))), Some(true)),
                Ok((false, true, Reason::Bound, RESYNC)),
            ),
            (
                "all there, bound as wanted",
                seen(
                    Some(Some(ours.clone())),
                    Some(Some(link(Some(sa)))),
                    Some(true),
                ),
                Ok((false, false, Reason::Bound, RESYNC)),
            ),
            (
                "bound to another ServiceAccount: applied again",
                seen(
                    Some(Some(crb("binding-uid", "cluster-1-a", "old"))),
                    Some(Some(link(Some(sa)))),
                    Some(true),
                ),
                Ok((false, true, Reason::Bound, RESYNC)),
            ),
            (
                "bound to another role: replaced",
                seen(
                    Some(Some(crb("binding-uid", "old-role", sa))),
                    Some(Some(link(Some(sa)))),
                    Some(true),
                ),
                Ok((true, true, Reason::Bound, RESYNC)),
            ),
        ];
        for (situation, observed, want) in rows {
            let got = match next(&binding(), "binding-uid", &observed).unwrap() {
                Next::Read(read) => Err(read),
                Next::Done(plan) => Ok((
                    plan.delete,
                    plan.apply.is_some(),
                    Reason::from(&*plan.verdict.reason),
                    plan.requeue,
                )),
            };
            assert_eq!(got, want, "{situation}");
        }
    }

    #[test]
    fn a_long_name_is_refused_before_anything_is_read() {
        let mut long = binding();
        long.metadata.name = Some("b".repeat(250));
        let Next::Done(plan) = next(&long, "binding-uid", &Observed::default()).unwrap() else {
            panic!("reads nothing");
        };
        assert_eq!(Reason::from(&*plan.verdict.reason), Reason::NameTooLong);
        let (verdict, requeue) = refused(&binding(), "forbidden");
        assert_eq!(Reason::from(&*verdict.reason), Reason::BindFailed);
        assert_eq!(
            verdict.message,
            "cannot bind ClusterRole cluster-1-a: forbidden"
        );
        assert_eq!(requeue, ROLE_MISSING_REQUEUE);
    }
}

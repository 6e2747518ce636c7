//! Who may do what: the namespace gate (is the resource imported there?) and the
//! SubjectAccessReview on this cluster, with its answers kept a short while.

use std::{collections::BTreeMap, time::Duration};

use dashmap::DashMap;
use http::{Response, StatusCode};
use k8s_openapi::api::{
    authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
    core::v1::Namespace,
};
use kube::{Api, api::PostParams, runtime::reflector::ObjectRef};
use serde_json::json;

use super::front::User;
use super::request::ResourceRequest;

use super::{Body, Proxy, not_found, status_value, unavailable, value_answer};

impl Proxy {
    /// The refusal of a request in a namespace being deleted, if it is: its projected resources
    /// are no longer served there (404; a create gets kube-apiserver's 403), so that deleting a
    /// workload namespace never waits on the service cluster and never deletes anything there
    /// (the namespace controller takes 404 as "nothing to delete"). The objects in the
    /// same-named namespace of the service cluster are kept. A delete is checked against the API
    /// server itself, not the watch, so that one racing the namespace's deletion cannot reach
    /// the service cluster.
    pub(super) async fn namespace_gate(
        &self,
        resource: &ResourceRequest,
        namespace: &str,
    ) -> Option<Response<Body>> {
        let watched = self
            .namespaces
            .get(&ObjectRef::new(namespace))
            .map(|ns| ns.metadata.deletion_timestamp.is_some());
        let terminating = match watched {
            Some(true) => true,
            _ if matches!(resource.verb, "delete" | "deletecollection") => {
                match Api::<Namespace>::all(self.identity.client())
                    .get_metadata_opt(namespace)
                    .await
                {
                    Ok(Some(ns)) => ns.metadata.deletion_timestamp.is_some(),
                    Ok(None) => true,
                    Err(error) => {
                        tracing::warn!(%namespace, error = %xcc_kube::bounded(&error), "cannot read the namespace before a delete");
                        return Some(unavailable(&format!(
                            "cannot confirm that namespace {namespace} is not being deleted"
                        )));
                    }
                }
            }
            _ => false,
        };
        if !terminating {
            return None;
        }
        if resource.verb == "create" {
            let mut value = status_value(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &format!(
                    "{}.{} is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                    resource.resource, resource.group
                ),
            );
            value["details"] = json!({"group": resource.group, "kind": resource.resource,
                "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace",
                    "message": format!("namespace {namespace} is being terminated")}]});
            return Some(value_answer(StatusCode::FORBIDDEN, &value));
        }
        Some(not_found(&format!(
            "namespace {namespace} is being deleted: {}.{} is no longer served in it here (the \
             service cluster's objects in its namespace {namespace} are kept)",
            resource.resource, resource.group
        )))
    }

    /// Whether `user` may do `resource` on this cluster: a SubjectAccessReview, its answer kept
    /// [`DECISION_TTL`] as every aggregated API server's delegating authorizer does.
    pub(super) async fn authorize(
        &self,
        user: &User,
        resource: &ResourceRequest,
    ) -> Result<bool, kube::Error> {
        let key = (user.clone(), resource.clone());
        if let Some(allowed) = self.decisions.get(&key) {
            return Ok(allowed);
        }
        let allowed = self.review(user, resource).await?;
        self.decisions.put(key, allowed);
        Ok(allowed)
    }

    /// Asks this cluster whether `user` may do `resource`.
    pub(super) async fn review(
        &self,
        user: &User,
        resource: &ResourceRequest,
    ) -> Result<bool, kube::Error> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| {
                    user.extra
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect::<BTreeMap<_, _>>()
                }),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(resource.verb.to_string()),
                    group: Some(resource.group.clone()),
                    version: Some(resource.version.clone()),
                    resource: Some(resource.resource.clone()),
                    subresource: resource.subresource.clone(),
                    namespace: resource.namespace.clone(),
                    name: resource.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let review = Api::<SubjectAccessReview>::all(self.identity.client())
            .create(&PostParams::default(), &review)
            .await?;
        Ok(review
            .status
            .is_some_and(|s| s.allowed && s.denied != Some(true)))
    }
}

/// How long a SubjectAccessReview's answer is used again (kube's delegating authorizer keeps
/// both answers 10 s by default).
pub(super) const DECISION_TTL: Duration = Duration::from_secs(10);
/// Most answers kept: past this, expired ones are dropped, and all when none has expired.
const MAX_DECISIONS: usize = 10_000;

/// SubjectAccessReview answers by user and request, each kept [`DECISION_TTL`]. Every request
/// reads it: a concurrent map, so that requests of different users do not queue on one lock.
#[derive(Default)]
pub(super) struct Decisions(DashMap<(User, ResourceRequest), (bool, tokio::time::Instant)>);

impl Decisions {
    pub(super) fn get(&self, key: &(User, ResourceRequest)) -> Option<bool> {
        self.0
            .get(key)
            .filter(|decision| decision.1.elapsed() < DECISION_TTL)
            .map(|decision| decision.0)
    }

    /// Keeps `allowed` for `key`. Past [`MAX_DECISIONS`], expired answers go first, and all of
    /// them when none has expired (requests meanwhile may add a few: the bound is approximate).
    pub(super) fn put(&self, key: (User, ResourceRequest), allowed: bool) {
        if self.0.len() >= MAX_DECISIONS {
            self.0.retain(|_, (_, at)| at.elapsed() < DECISION_TTL);
            if self.0.len() >= MAX_DECISIONS {
                self.0.clear();
            }
        }
        self.0.insert(key, (allowed, tokio::time::Instant::now()));
    }
}

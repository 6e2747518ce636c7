//! The imports' decisions, apart from I/O: whether a group may be imported, which versions and
//! APIServices it gets, which of ours go, whether an APIResourceImport's resources are served,
//! and the conditions and requeues that follow.

use std::{collections::BTreeSet, time::Duration};

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::{IMPORT_LABEL, RESYNC, RETRY, api_service_name};
use crate::projection::{
    MANAGED_BY, Verdict,
    api::Reason,
    api::{ClusterAPIGroupImport, DownstreamClusterLink},
    owned_by,
};

/// How soon an import waits again for its link, or for the APIResourceImport's group.
pub const WAIT: Duration = Duration::from_secs(5);
/// How soon discovery upstream is tried again.
pub const DISCOVERY_RETRY: Duration = Duration::from_secs(10);

/// An APIService of `group` this cluster serves otherwise (not owned by import `uid`): the group
/// is then never imported, and the import's own APIServices are withdrawn.
pub fn served_locally(all: &[APIService], group: &str, uid: &str) -> Option<Verdict> {
    let other = all.iter().find(|s| {
        s.spec.as_ref().and_then(|s| s.group.as_deref()) == Some(group)
            && !owned_by(&s.metadata, uid)
    })?;
    Some(Verdict::not(
        Reason::GroupServedLocally,
        format!(
            "API group {group} is already served on this cluster (APIService {}); it is not imported",
            other.name_any()
        ),
    ))
}

/// The Service reference and CA the APIServices point at, from the import's link
/// (`link`: found in the store; `has_client`: the proxy has a usable client for it).
pub fn link_target(
    import: &ClusterAPIGroupImport,
    link: Option<&DownstreamClusterLink>,
    has_client: bool,
) -> Result<(Value, String), Verdict> {
    let r = &import.spec.downstream_cluster_link_ref;
    let Some(link) = link else {
        return Err(Verdict::not(
            Reason::DownstreamClusterLinkNotFound,
            format!(
                "DownstreamClusterLink {}/{} does not exist",
                r.namespace, r.name
            ),
        ));
    };
    let proxy = link.status.as_ref().and_then(|s| s.proxy.clone());
    let service = proxy.as_ref().and_then(|p| p.service_reference.clone());
    let ca = proxy.and_then(|p| p.ca_bundle);
    match (service, ca, has_client) {
        (Some(service), Some(ca), true) => Ok((
            json!({"name": service.name, "namespace": service.namespace, "port": service.port.unwrap_or(443)}),
            ca,
        )),
        _ => Err(Verdict::not(
            Reason::DownstreamClusterLinkNotReady,
            format!(
                "DownstreamClusterLink {}/{} has no proxy Service, CA or usable kubeconfig yet",
                r.namespace, r.name
            ),
        )),
    }
}

/// The versions of `group` from the service cluster's discovery document `found` (`Ok(None)`:
/// 404), or `APIServicesReady` saying why there are none.
pub fn versions(
    group: &str,
    found: Result<Option<Value>, String>,
) -> Result<Vec<String>, (Verdict, Duration)> {
    let versions: Vec<String> = match found {
        Ok(Some(found)) => found["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["version"].as_str().map(str::to_string))
            .collect(),
        Ok(None) => {
            return Err((
                Verdict::not(
                    Reason::GroupNotFoundUpstream,
                    format!("the service cluster does not serve API group {group}"),
                ),
                DISCOVERY_RETRY,
            ));
        }
        Err(error) => {
            return Err((
                Verdict::not(
                    Reason::UpstreamUnreachable,
                    format!("discovery of API group {group} upstream failed: {error}"),
                ),
                DISCOVERY_RETRY,
            ));
        }
    };
    no_versions(group, versions)
}

/// `versions`, unless there are none.
pub fn no_versions(group: &str, versions: Vec<String>) -> Result<Vec<String>, (Verdict, Duration)> {
    if versions.is_empty() {
        return Err((
            Verdict::not(
                Reason::GroupNotFoundUpstream,
                format!("the service cluster serves no version of API group {group}"),
            ),
            DISCOVERY_RETRY,
        ));
    }
    Ok(versions)
}

/// APIService `<version>.<group>` of import `import` (named `import_name`, ownerReference
/// `owner`) pointing at `service` and `ca`.
pub fn api_service(
    import_name: &str,
    group: &str,
    version: &str,
    service: &Value,
    ca: &str,
    owner: &Value,
) -> Value {
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {
            "name": api_service_name(group, version),
            "labels": {
                MANAGED_BY.0: MANAGED_BY.1,
                IMPORT_LABEL: import_name,
            },
            "ownerReferences": [owner],
        },
        "spec": {
            "group": group,
            "version": version,
            "service": service,
            "caBundle": ca,
            "groupPriorityMinimum": 1000,
            "versionPriority": 15,
        },
    })
}

/// Why APIService `written` is not available (`None`: it is).
pub fn unavailable(written: &APIService) -> Option<String> {
    let name = written.name_any();
    let available = written
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Available"));
    match available {
        Some(c) if c.status == "True" => None,
        Some(c) => Some(format!(
            "{name}: {}",
            xcc_kube::bounded(
                &c.message
                    .clone()
                    .unwrap_or_else(|| c.reason.clone().unwrap_or_default())
            )
        )),
        None => Some(format!("{name}: not checked yet")),
    }
}

/// `APIServicesReady` once `names` are registered, `unavailable` saying which are not available.
pub fn registered(names: &BTreeSet<String>, unavailable: &[String]) -> (Verdict, Duration) {
    let list = names.iter().cloned().collect::<Vec<_>>().join(", ");
    if unavailable.is_empty() {
        (
            Verdict::ok(
                Reason::Available,
                format!("APIServices {list} are available"),
            ),
            RESYNC,
        )
    } else {
        (
            Verdict::not(Reason::ApiServiceNotAvailable, unavailable.join("; ")),
            RETRY,
        )
    }
}

/// Of the APIServices labelled with the import's name, those to delete: owned by the import
/// (`uid`) and not in `keep`.
pub fn to_withdraw<'a>(
    labelled: &'a [APIService],
    uid: &str,
    keep: &BTreeSet<String>,
) -> Vec<&'a APIService> {
    labelled
        .iter()
        .filter(|s| owned_by(&s.metadata, uid) && !keep.contains(&s.name_any()))
        .collect()
}

/// `Ready` of an import from its main condition: `Reconciled` (with `message`) when it holds,
/// the condition itself otherwise.
pub fn ready(verdict: &Verdict, message: &str) -> Verdict {
    if verdict.ready {
        Verdict::ok(Reason::Reconciled, message.to_string())
    } else {
        verdict.clone()
    }
}

/// Whether ClusterAPIGroupImport `import` is `Ready`.
pub fn group_ready(import: &ClusterAPIGroupImport) -> bool {
    import
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// The preferred version in a group's discovery document.
pub fn preferred_version(found: &Value) -> Option<String> {
    found["preferredVersion"]["version"]
        .as_str()
        .map(str::to_string)
}

/// The resources (not subresources) in a group version's discovery document.
pub fn served(found: &Value) -> BTreeSet<String> {
    found["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .filter(|n| !n.contains('/'))
        .map(str::to_string)
        .collect()
}

/// `ResourcesAvailable` of an APIResourceImport asking for `wanted` in `group`/`version`, of
/// which the service cluster serves `served`.
pub fn resources(
    wanted: &[String],
    served: &BTreeSet<String>,
    group: &str,
    version: &str,
) -> (Verdict, Duration) {
    let missing: Vec<String> = wanted
        .iter()
        .filter(|r| !served.contains(*r))
        .map(xcc_kube::bounded)
        .collect();
    if missing.is_empty() {
        (
            Verdict::ok(Reason::ResourcesReady, "Resources Ready"),
            RESYNC,
        )
    } else {
        (
            Verdict::not(
                Reason::ResourcesNotFound,
                format!(
                    "not served by the service cluster in {group}/{version}: {}",
                    missing.join(", ")
                ),
            ),
            WAIT,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_service_found(
        name: &str,
        group: &str,
        owner: &str,
        available: Option<(&str, &str)>,
    ) -> APIService {
        let mut s = json!({"metadata": {"name": name, "ownerReferences": [
                {"apiVersion": "v1", "kind": "X", "name": "x", "uid": owner}]},
            "spec": {"group": group, "version": "v1", "groupPriorityMinimum": 1, "versionPriority": 1}});
        if let Some((status, message)) = available {
            s["status"] = json!({"conditions": [{"type": "Available", "status": status, "message": message}]});
        }
        serde_json::from_value(s).unwrap()
    }

    fn import(json: Value) -> ClusterAPIGroupImport {
        serde_json::from_value(json!({
            "apiVersion": "projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1",
            "kind": "ClusterAPIGroupImport", "metadata": {"name": "g", "uid": "me"},
            "spec": {"group": "fish.example", "downstreamClusterLinkRef": {"name": "l", "namespace": "ns"}},
            "status": json,
        }))
        .unwrap()
    }

    #[test]
    fn a_group_served_here_by_someone_else_is_not_imported() {
        let rows = [
            ("nothing registered", vec![], false),
            (
                "ours",
                vec![api_service_found(
                    "v1.fish.example",
                    "fish.example",
                    "me",
                    None,
                )],
                false,
            ),
            (
                "another group",
                vec![api_service_found(
                    "v1.other.example",
                    "other.example",
                    "them",
                    None,
                )],
                false,
            ),
            (
                "the group, someone else's",
                vec![api_service_found(
                    "v1.fish.example",
                    "fish.example",
                    "them",
                    None,
                )],
                true,
            ),
        ];
        for (situation, all, refused) in rows {
            let verdict = served_locally(&all, "fish.example", "me");
            assert_eq!(verdict.is_some(), refused, "{situation}");
            if let Some(v) = verdict {
                assert_eq!(Reason::from(&*v.reason), Reason::GroupServedLocally);
                assert!(
                    v.message.contains("(APIService v1.fish.example)"),
                    "{}",
                    v.message
                );
            }
        }
    }

    #[test]
    fn an_import_points_at_its_links_service_once_the_link_is_ready() {
        let link = |status: Value| -> DownstreamClusterLink {
            serde_json::from_value(json!({
                "apiVersion": "projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1",
                "kind": "DownstreamClusterLink", "metadata": {"name": "l", "namespace": "ns"},
                "spec": {"upstream": {"name": "services", "kubeconfig": {"secretName": "k"}},
                         "proxy": {"TLS": {"secretName": "t"}}},
                "status": status,
            }))
            .unwrap()
        };
        let ready = link(
            json!({"proxy": {"caBundle": "Q0E=", "serviceReference": {"name": "l-proxy", "namespace": "ns"}}}),
        );
        let g = import(json!({}));
        let rows = [
            (
                "no link",
                None,
                true,
                Err(Reason::DownstreamClusterLinkNotFound),
            ),
            (
                "link without proxy status",
                Some(link(json!({}))),
                true,
                Err(Reason::DownstreamClusterLinkNotReady),
            ),
            (
                "link ready, no client",
                Some(ready.clone()),
                false,
                Err(Reason::DownstreamClusterLinkNotReady),
            ),
            ("link ready", Some(ready.clone()), true, Ok(())),
        ];
        for (situation, link, client, want) in rows {
            let got = link_target(&g, link.as_ref(), client);
            assert_eq!(
                got.as_ref()
                    .map(|_| ())
                    .map_err(|v| Reason::from(&*v.reason)),
                want,
                "{situation}"
            );
        }
        let (service, ca) = link_target(&g, Some(&ready), true).unwrap();
        assert_eq!(
            service,
            json!({"name": "l-proxy", "namespace": "ns", "port": 443})
        );
        assert_eq!(ca, "Q0E=");
    }

    #[test]
    fn the_versions_come_from_discovery_upstream() {
        let doc = json!({"versions": [{"version": "v1"}, {"version": "v1beta1"}]});
        assert_eq!(versions("g", Ok(Some(doc))).unwrap(), ["v1", "v1beta1"]);
        let rows = [
            ("not served", Ok(None), Reason::GroupNotFoundUpstream),
            (
                "served without versions",
                Ok(Some(json!({"versions": []}))),
                Reason::GroupNotFoundUpstream,
            ),
            (
                "no answer",
                Err("timeout".to_string()),
                Reason::UpstreamUnreachable,
            ),
        ];
        for (situation, found, why) in rows {
            let (verdict, requeue) = versions("g", found).unwrap_err();
            assert_eq!(
                (Reason::from(&*verdict.reason), requeue),
                (why, DISCOVERY_RETRY),
                "{situation}"
            );
        }
    }

    #[test]
    fn the_apiservices_are_ready_when_each_is_available() {
        let names = BTreeSet::from(["v1.g".to_string(), "v2.g".to_string()]);
        let rows = [
            ("available", Some(("True", "")), None),
            (
                "not available",
                Some(("False", "no endpoints")),
                Some("v1.g: no endpoints"),
            ),
            ("not checked", None, Some("v1.g: not checked yet")),
        ];
        for (situation, available, why) in rows {
            let written = api_service_found("v1.g", "g", "me", available);
            assert_eq!(unavailable(&written).as_deref(), why, "{situation}");
        }
        let (all, requeue) = registered(&names, &[]);
        assert_eq!(
            (Reason::from(&*all.reason), all.message.as_str(), requeue),
            (
                Reason::Available,
                "APIServices v1.g, v2.g are available",
                RESYNC
            )
        );
        let (not, requeue) = registered(&names, &["v1.g: a".into(), "v2.g: b".into()]);
        assert_eq!(
            (Reason::from(&*not.reason), not.message.as_str(), requeue),
            (Reason::ApiServiceNotAvailable, "v1.g: a; v2.g: b", RETRY)
        );
        assert_eq!(ready(&all, &all.message).reason, Reason::Reconciled);
        assert_eq!(ready(&not, "").reason, Reason::ApiServiceNotAvailable);
    }

    #[test]
    fn only_our_apiservices_that_are_no_longer_wanted_are_withdrawn() {
        let labelled = vec![
            api_service_found("v1.g", "g", "me", None),
            api_service_found("v2.g", "g", "me", None),
            api_service_found("v3.g", "g", "them", None),
        ];
        let keep = BTreeSet::from(["v1.g".to_string()]);
        let names: Vec<String> = to_withdraw(&labelled, "me", &keep)
            .iter()
            .map(|s| s.name_any())
            .collect();
        assert_eq!(names, ["v2.g"]);
        assert_eq!(to_withdraw(&labelled, "me", &BTreeSet::new()).len(), 2);
    }

    #[test]
    fn an_apiresourceimport_is_ready_when_its_resources_are_served() {
        assert!(!group_ready(&import(json!({}))));
        assert!(group_ready(&import(
            json!({"conditions": [{"type": "Ready", "status": "True",
            "reason": "Reconciled", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
        )));
        let doc = json!({"preferredVersion": {"version": "v1"},
            "resources": [{"name": "fish"}, {"name": "fish/status"}, {"name": "sauces"}]});
        assert_eq!(preferred_version(&doc).as_deref(), Some("v1"));
        let served = served(&doc);
        assert_eq!(
            served,
            BTreeSet::from(["fish".to_string(), "sauces".to_string()])
        );
        let (ok, requeue) = resources(&["fish".into()], &served, "g", "v1");
        assert_eq!(
            (Reason::from(&*ok.reason), requeue),
            (Reason::ResourcesReady, RESYNC)
        );
        let (missing, requeue) = resources(
            &["fish".into(), "chips".into(), "fish/status".into()],
            &served,
            "g",
            "v1",
        );
        assert_eq!(
            (Reason::from(&*missing.reason), requeue),
            (Reason::ResourcesNotFound, WAIT)
        );
        assert_eq!(
            missing.message,
            "not served by the service cluster in g/v1: chips, fish/status"
        );
    }
}

//! The objects `link` writes, and what it may overwrite: everything it makes carries its label
//! and the kube-system UID of the other cluster.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, GroupVersionKind, ObjectMeta, PatchParams};
use serde_json::{Value, json};

use super::names::{tls_secret, workload_secret};
use crate::{Error, cluster::FIELD_MANAGER};

pub(super) const GROUP: &str = "projection.apiresources.multicluster.x-tanzu.vmware.com";
pub(super) const VERSION: &str = "v1alpha1";
/// On everything `link` writes: what it may overwrite when run again.
pub(super) const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kubectl-xcc");
/// On the UpstreamClusterLink: the kube-system UID of the workload cluster it was made for.
pub(super) const WORKLOAD_CLUSTER: &str = "xcc.test/workload-cluster";
/// On the copied Secret and the DownstreamClusterLink: the kube-system UID of the service cluster.
pub(super) const SERVICE_CLUSTER: &str = "xcc.test/service-cluster";
/// When the token expires (RFC 3339): the agent's annotation on its Secret, copied along.
pub(super) const TOKEN_EXPIRES: &str = "xcc.test/token-expires";
/// The Secret key of the kubeconfig, the first the readers try.
pub(super) const KUBECONFIG_KEY: &str = xcc_kube::trust::KUBECONFIG_KEYS[0];

/// The API of the projection kind `kind`.
pub(super) fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, VERSION, kind))
}

/// `Ok` when `link` may overwrite `existing`: it made it (label) for the same other cluster
/// (annotation `peer_key` holds `peer_uid`). `what` names the object and its cluster in errors.
pub(super) fn may_overwrite(
    existing: &ObjectMeta,
    what: &str,
    peer_key: &str,
    peer_uid: &str,
    peer: &str,
) -> Result<(), Error> {
    let label = existing
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY.0))
        .map(String::as_str);
    if label != Some(MANAGED_BY.1) {
        return Err(Error::Failed(format!(
            "{what} exists and was not made by kubectl xcc link (no label {}={}): pass another \
             --name, or delete it; nothing was changed",
            MANAGED_BY.0, MANAGED_BY.1
        )));
    }
    let made_for = existing
        .annotations
        .as_ref()
        .and_then(|a| a.get(peer_key))
        .map(String::as_str);
    if made_for != Some(peer_uid) {
        return Err(Error::Failed(format!(
            "{what} was made by kubectl xcc link for another {peer} (kube-system UID {}): pass \
             another --name; nothing was changed",
            made_for.unwrap_or("unknown")
        )));
    }
    Ok(())
}

pub(super) fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// The UpstreamClusterLink `link` applies.
pub(super) fn upstream_link(
    name: &str,
    namespace: &str,
    workload: &str,
    workload_uid: &str,
) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "UpstreamClusterLink",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {MANAGED_BY.0: MANAGED_BY.1},
            "annotations": {WORKLOAD_CLUSTER: workload_uid},
        },
        "spec": {"downstream": {"name": workload}},
    })
}

/// The DownstreamClusterLink `link` applies.
pub(super) fn downstream_link(
    name: &str,
    namespace: &str,
    service: &str,
    service_uid: &str,
) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "DownstreamClusterLink",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {MANAGED_BY.0: MANAGED_BY.1},
            "annotations": {SERVICE_CLUSTER: service_uid},
        },
        "spec": {
            "proxy": {"TLS": {"secretName": tls_secret(name)}},
            "upstream": {
                "kubeconfig": {"secretName": workload_secret(name)},
                "name": service,
            },
        },
    })
}

/// The copy of the kubeconfig on the workload cluster.
pub(super) fn copied_secret(
    name: &str,
    namespace: &str,
    kubeconfig: &[u8],
    service_uid: &str,
    expires: Option<&str>,
) -> Value {
    let mut annotations = serde_json::Map::new();
    annotations.insert(SERVICE_CLUSTER.into(), service_uid.into());
    if let Some(expires) = expires {
        annotations.insert(TOKEN_EXPIRES.into(), expires.into());
    }
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": workload_secret(name),
            "namespace": namespace,
            "labels": {MANAGED_BY.0: MANAGED_BY.1},
            "annotations": annotations,
        },
        "data": {KUBECONFIG_KEY: xcc_kube::wire::encode_base64(kubeconfig)},
    })
}

/// The kubeconfig of a Secret, if it holds a non-empty one.
pub(super) fn kubeconfig_of(secret: &Secret) -> Option<Vec<u8>> {
    let key = xcc_kube::trust::kubeconfig_key(secret);
    let data = secret.data.as_ref()?.get(key)?;
    (!data.0.is_empty()).then(|| data.0.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::names::upstream_secret;
    use kube::ResourceExt;

    #[test]
    fn names_of_what_a_link_makes() {
        assert_eq!(upstream_secret("w"), "w-kubeconfig");
        assert_eq!(workload_secret("w"), "w-upstream-kubeconfig");
        assert_eq!(tls_secret("w"), "w-proxy-tls");
        let link = downstream_link("w", "services-toolkit", "services", "uid-s");
        assert_eq!(link["spec"]["proxy"]["TLS"]["secretName"], "w-proxy-tls");
        assert_eq!(
            link["spec"]["upstream"]["kubeconfig"]["secretName"],
            "w-upstream-kubeconfig"
        );
        assert_eq!(link["spec"]["upstream"]["name"], "services");
        assert_eq!(link["metadata"]["annotations"][SERVICE_CLUSTER], "uid-s");
        let link = upstream_link("w", "services-toolkit", "workload", "uid-w");
        assert_eq!(link["spec"]["downstream"]["name"], "workload");
        assert_eq!(link["metadata"]["labels"][MANAGED_BY.0], MANAGED_BY.1);
        let secret = copied_secret("w", "ns", b"kc", "uid-s", Some("2030-01-01T00:00:00Z"));
        let secret: Secret = serde_json::from_value(secret).unwrap();
        assert_eq!(kubeconfig_of(&secret).as_deref(), Some(&b"kc"[..]));
        assert_eq!(
            secret.annotations().get(TOKEN_EXPIRES).map(String::as_str),
            Some("2030-01-01T00:00:00Z")
        );
    }

    fn meta(labelled: bool, peer: Option<&str>) -> ObjectMeta {
        let mut meta = ObjectMeta::default();
        if labelled {
            meta.labels = Some([(MANAGED_BY.0.into(), MANAGED_BY.1.into())].into());
        }
        if let Some(peer) = peer {
            meta.annotations = Some([(SERVICE_CLUSTER.into(), peer.into())].into());
        }
        meta
    }

    #[test]
    fn only_what_link_made_for_the_same_pair_is_overwritten() {
        let check = |m: &ObjectMeta| {
            may_overwrite(m, "Secret x", SERVICE_CLUSTER, "uid-s", "service cluster")
        };
        assert!(check(&meta(true, Some("uid-s"))).is_ok());
        let e = check(&meta(false, Some("uid-s"))).unwrap_err();
        assert!(
            e.to_string().contains("not made by kubectl xcc link"),
            "{e}"
        );
        assert_eq!(e.exit_code(), crate::exit::ERROR);
        let e = check(&meta(true, Some("uid-other"))).unwrap_err();
        assert!(
            e.to_string().contains("another service cluster")
                && e.to_string().contains("uid-other"),
            "{e}"
        );
        assert!(check(&meta(true, None)).is_err());
    }
}

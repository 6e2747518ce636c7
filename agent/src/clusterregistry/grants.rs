//! What the other members of the group may read of this cluster's Secrets. The reader
//! ServiceAccount whose token `kubectl xcc cluster join` hands to each peer (`xcc-cluster-reader`)
//! holds no Secret permission of its own; this module grants it, on this cluster, exactly what
//! the group's sync needs, and takes it back when it is no longer needed:
//!
//! - a RoleBinding [`READER_SECRETS`] (to the ClusterRole of that name: Secrets get, list, watch)
//!   in each namespace where the group reads Secrets: the namespaces of the Clusters'
//!   `authInfo.secretRef` (group sync copies those kubeconfig Secrets; `cluster-registry` when a
//!   Cluster names none), and those a Secret ResourceSyncRule names in its match entries;
//! - a ClusterRoleBinding [`READER_SECRETS`] only while some Secret rule matches in any namespace
//!   (an entry without `namespace`/`namespaces`): such a rule reads every namespace.
//!
//! The rules and Clusters are those of this cluster; group sync makes them the same on every
//! member, so what a peer reads ([`SecretScope`], in the engine's plan too) is what is granted
//! here. Every binding carries the origin annotation [`GRANT_ORIGIN`] and the label
//! [`GRANT_LABEL`]; only such bindings are changed or deleted. A namespace that does not exist
//! yet is tried again every [`RETRY`] (there is nothing to read there meanwhile).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding, RoleRef, Subject};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, ListParams, ObjectMeta},
    core::GroupVersionKind as KubeGvk,
    runtime::reflector::Store,
};
use tokio_util::sync::CancellationToken;

use super::{
    DEFAULT_SECRET_NAMESPACE,
    api::{Cluster, ResourceSyncRule},
    builtin,
    rules::RuleSet,
};
use crate::{
    sink::{Counted, LocalWriter, ORIGIN_ANNOTATION, Written},
    sources::{Detail, SourceId},
};

/// The ClusterRole (Secrets get, list, watch; in the manifests, bound to nobody) and the name
/// of every binding of it this module writes.
pub const READER_SECRETS: &str = "xcc-cluster-reader-secrets";
/// Label on every binding this module writes (value `secrets`), to find them again.
pub const GRANT_LABEL: &str = "xcc.test/reader-grant";
/// The origin annotation's value on every binding this module writes.
pub const GRANT_ORIGIN: &str = "resource-sync/reader-grant/secrets";
/// How often a pass runs without a change (a namespace created since, a binding deleted by
/// hand).
const RETRY: Duration = Duration::from_secs(10);

/// Where the group reads this cluster's Secrets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretScope {
    /// The namespaces named by the Clusters' Secrets (with group sync) and by the rules.
    pub namespaces: BTreeSet<String>,
    /// Some rule reads Secrets in every namespace.
    pub everywhere: bool,
}

/// Whether `rule` reads Secrets (core/v1).
fn reads_secrets(rule: &RuleSet) -> bool {
    super::engine::is_secret(&rule.gvk)
}

/// Where `rules` (any kinds; the built-in ones are left out) and, with `group_sync`, the
/// built-in rule for the `clusters`' kubeconfig Secrets read Secrets.
pub fn secret_scope<'a>(
    rules: impl IntoIterator<Item = &'a RuleSet>,
    clusters: &[Arc<Cluster>],
    group_sync: bool,
) -> SecretScope {
    let mut scope = SecretScope::default();
    for rule in rules
        .into_iter()
        .filter(|r| reads_secrets(r) && !builtin::is_core(r))
    {
        match rule.namespaces() {
            Some(namespaces) => scope.namespaces.extend(namespaces),
            None => scope.everywhere = true,
        }
    }
    if group_sync {
        scope.namespaces.extend(clusters.iter().map(|c| {
            c.spec
                .auth_info
                .as_ref()
                .and_then(|a| a.secret_ref.as_ref())
                .and_then(|r| r.namespace.clone())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| DEFAULT_SECRET_NAMESPACE.to_string())
        }));
    }
    scope
}

/// Who the grants are for: the reader ServiceAccount `namespace/name`.
#[derive(Clone, Debug)]
pub struct Reader {
    pub namespace: String,
    pub name: String,
}

fn metadata(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_string),
        labels: Some(BTreeMap::from([(GRANT_LABEL.into(), "secrets".into())])),
        annotations: Some(BTreeMap::from([(
            ORIGIN_ANNOTATION.into(),
            GRANT_ORIGIN.into(),
        )])),
        ..Default::default()
    }
}

fn role_ref() -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "ClusterRole".into(),
        name: READER_SECRETS.into(),
    }
}

impl Reader {
    fn subjects(&self) -> Option<Vec<Subject>> {
        Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: self.name.clone(),
            namespace: Some(self.namespace.clone()),
            ..Default::default()
        }])
    }

    /// The RoleBinding that lets the reader read Secrets in `namespace`.
    pub fn role_binding(&self, namespace: &str) -> RoleBinding {
        RoleBinding {
            metadata: metadata(READER_SECRETS, Some(namespace)),
            role_ref: role_ref(),
            subjects: self.subjects(),
        }
    }

    /// The ClusterRoleBinding that lets the reader read Secrets everywhere.
    pub fn cluster_role_binding(&self) -> ClusterRoleBinding {
        ClusterRoleBinding {
            metadata: metadata(READER_SECRETS, None),
            role_ref: role_ref(),
            subjects: self.subjects(),
        }
    }
}

/// What a pass left undone.
#[derive(Debug, Default, PartialEq, Eq)]
struct Pass {
    /// Namespaces that do not exist (yet).
    missing: BTreeSet<String>,
    /// Bindings of that name that are not ours: left alone.
    conflicts: BTreeSet<String>,
}

/// Makes the bindings of this cluster match `scope`.
async fn apply(
    client: &Client,
    reader: &Reader,
    scope: &SecretScope,
    counted: &Counted,
) -> Result<Pass, kube::Error> {
    let mut pass = Pass::default();
    let listed = Api::<RoleBinding>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{GRANT_LABEL}=secrets")))
        .await?;
    let mut held: BTreeMap<String, RoleBinding> = listed
        .items
        .into_iter()
        .filter(|b| b.name_any() == READER_SECRETS)
        .filter_map(|b| Some((b.namespace()?, b)))
        .collect();
    for namespace in &scope.namespaces {
        let writer = LocalWriter::new(Api::namespaced(client.clone(), namespace), counted.clone());
        let current = held.remove(namespace);
        match writer
            .apply(&reader.role_binding(namespace), current.as_ref())
            .await
        {
            Ok(Written::Conflict { .. }) => {
                pass.conflicts
                    .insert(format!("{namespace}/{READER_SECRETS}"));
            }
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                pass.missing.insert(namespace.clone());
            }
            Err(e) => return Err(e),
        }
    }
    for (namespace, binding) in held {
        let writer = LocalWriter::<RoleBinding>::new(
            Api::namespaced(client.clone(), &namespace),
            counted.clone(),
        );
        writer.delete(&binding, GRANT_ORIGIN).await?;
    }
    let cluster_wide: Api<ClusterRoleBinding> = Api::all(client.clone());
    let current = cluster_wide.get_opt(READER_SECRETS).await?;
    let writer = LocalWriter::new(cluster_wide, counted.clone());
    if scope.everywhere {
        if let Written::Conflict { .. } = writer
            .apply(&reader.cluster_role_binding(), current.as_ref())
            .await?
        {
            pass.conflicts.insert(READER_SECRETS.into());
        }
    } else if let Some(current) = current {
        writer.delete(&current, GRANT_ORIGIN).await?;
    }
    Ok(pass)
}

/// Someone else's bindings in the way are a standing condition: said once (`said` holds what was
/// said last), and again only when it changes.
fn say_conflicts(pass: &Pass, said: &mut Option<String>) {
    let note = (!pass.conflicts.is_empty()).then(|| {
        format!(
            "bindings not made by xcc-agent are in the way, left as they are: {}",
            pass.conflicts
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    if note != *said {
        match &note {
            Some(note) => tracing::warn!("{note}"),
            None => tracing::info!("the reader's Secret grants are written"),
        }
        *said = note;
    }
}

/// Keeps the reader's Secret grants matching the rules and Clusters until `stop` is cancelled.
pub async fn run(
    core: xcc_sync::Core,
    reader: Reader,
    clusters: Store<Cluster>,
    group_sync: bool,
    stop: CancellationToken,
) {
    let view = |gvk: KubeGvk, resource: ApiResource| {
        core.sources.view(
            SourceId::local(gvk),
            core.client.clone(),
            &resource,
            Detail::Full,
        )
    };
    let kind = |k: &str| KubeGvk::gvk(super::api::GROUP, "v1alpha1", k);
    let rules = view(
        kind("ResourceSyncRule"),
        ApiResource::erase::<ResourceSyncRule>(&()),
    );
    let cluster_view = view(kind("Cluster"), ApiResource::erase::<Cluster>(&()));
    let mut changes = std::pin::pin!(futures::stream::select(
        rules.changes(),
        cluster_view.changes()
    ));
    let counted = Counted {
        metrics: core.metrics.clone(),
        reconciler: "resource-sync",
    };
    let mut tick = tokio::time::interval(RETRY);
    let mut applied: Option<SecretScope> = None;
    let mut said: Option<String> = None;
    let mut outage = xcc_sync::outage::Outage::new(
        "the write of the reader's Secret grants".to_string(),
        xcc_sync::outage::local_server(),
    );
    loop {
        let ticked = tokio::select! {
            () = stop.cancelled() => return,
            change = changes.next() => {
                if change.is_none() {
                    return;
                }
                false
            }
            _ = tick.tick() => true,
        };
        if !(rules.listed() && cluster_view.listed()) {
            continue;
        }
        let compiled: Vec<RuleSet> = super::engine::rules_of(&rules)
            .iter()
            .filter_map(|r| RuleSet::compile(&r.name_any(), &r.spec).ok())
            .collect();
        let scope = secret_scope(&compiled, &clusters.state(), group_sync);
        if !ticked && applied.as_ref() == Some(&scope) {
            continue;
        }
        let outcome = apply(&core.client, &reader, &scope, &counted).await;
        match &outcome {
            Ok(pass) => {
                outage.recovered();
                say_conflicts(pass, &mut said);
                tracing::debug!(namespaces = ?scope.namespaces, everywhere = scope.everywhere, missing = ?pass.missing, "reader Secret grants");
            }
            // An API server that does not answer is one outage: one WARN, one recovered line.
            Err(error) => {
                outage.failed(error);
            }
        }
        applied = outcome.is_ok().then_some(scope);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(name: &str, gvk: serde_json::Value, rules: serde_json::Value) -> RuleSet {
        let spec =
            serde_json::from_value(json!({"groupVersionKind": gvk, "rules": rules})).unwrap();
        RuleSet::compile(name, &spec).unwrap()
    }

    fn secrets(rules: serde_json::Value) -> RuleSet {
        rule("s", json!({"version": "v1", "kind": "Secret"}), rules)
    }

    fn cluster(namespace: Option<&str>) -> Arc<Cluster> {
        let spec = json!({"clusterID": "u", "authInfo": {"secretRef": {"name": "c", "namespace": namespace}}});
        Arc::new(Cluster::new("c", serde_json::from_value(spec).unwrap()))
    }

    fn scope(namespaces: &[&str], everywhere: bool) -> SecretScope {
        SecretScope {
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            everywhere,
        }
    }

    /// Where the group reads Secrets, per rule shape: each row is what a user would write.
    #[test]
    fn the_namespaces_each_rule_and_cluster_names() {
        let clusters = [cluster(None), cluster(Some("registry-b"))];
        // (what, rules, group sync, scope)
        let cases: Vec<(&str, Vec<RuleSet>, bool, SecretScope)> = vec![
            (
                "nothing: no Secret is read",
                vec![],
                false,
                scope(&[], false),
            ),
            (
                "group sync: the Clusters' Secret namespaces, cluster-registry by default",
                vec![],
                true,
                scope(&["cluster-registry", "registry-b"], false),
            ),
            (
                "an object key",
                vec![secrets(
                    json!([{"match": [{"objectKey": {"name": "x", "namespace": "a"}}]}]),
                )],
                false,
                scope(&["a"], false),
            ),
            (
                "namespaces lists, in several entries and rules",
                vec![secrets(json!([
                    {"match": [{"namespaces": ["a", "b"]}, {"namespace": "c"}]},
                    {"match": [{"namespace": "a", "namespaces": ["a", "d"]}]},
                ]))],
                false,
                scope(&["a", "b", "c"], false),
            ),
            (
                "a label selector alone matches in every namespace",
                vec![secrets(
                    json!([{"match": [{"namespace": "a"}, {"labels": [{"matchLabels": {"x": "y"}}]}]}]),
                )],
                false,
                scope(&[], true),
            ),
            (
                "an entry without match matches everything",
                vec![secrets(json!([{}]))],
                true,
                scope(&["cluster-registry", "registry-b"], true),
            ),
            (
                "a rule of another kind reads no Secret, even one written as a Secret",
                vec![rule(
                    "maps",
                    json!({"version": "v1", "kind": "ConfigMap"}),
                    json!([{"mutations": {"groupVersionKind": {"version": "v1", "kind": "Secret"}}}]),
                )],
                false,
                scope(&[], false),
            ),
            (
                "the built-in rule counts by the Clusters only",
                builtin::core_rules(),
                false,
                scope(&[], false),
            ),
        ];
        for (what, rules, group_sync, want) in cases {
            assert_eq!(secret_scope(&rules, &clusters, group_sync), want, "{what}");
        }
    }

    #[test]
    fn the_bindings_name_the_reader_and_the_read_only_cluster_role() {
        let reader = Reader {
            namespace: "xcc-dns".into(),
            name: "xcc-cluster-reader".into(),
        };
        let binding = serde_json::to_value(reader.role_binding("a")).unwrap();
        assert_eq!(
            binding,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": READER_SECRETS, "namespace": "a",
                    "labels": {GRANT_LABEL: "secrets"},
                    "annotations": {ORIGIN_ANNOTATION: GRANT_ORIGIN}},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": READER_SECRETS},
                "subjects": [{"kind": "ServiceAccount", "name": "xcc-cluster-reader",
                    "namespace": "xcc-dns"}],
            })
        );
        let cluster_wide = serde_json::to_value(reader.cluster_role_binding()).unwrap();
        assert_eq!(cluster_wide["kind"], "ClusterRoleBinding");
        assert_eq!(cluster_wide["roleRef"], binding["roleRef"]);
    }
}

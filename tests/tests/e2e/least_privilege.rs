//! Least privilege, shown: each binary's ServiceAccount, from our manifests as they are, gets 403
//! for what that binary must never do. The credentials are the ones the binaries run with in the
//! other e2e tests (a TokenRequest token for the manifest's ServiceAccount).

use k8s_openapi::api::{
    core::v1::{ConfigMap, Namespace, Node, Secret},
    rbac::v1::ClusterRole,
};
use kube::{
    Api, Client,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch,
        PatchParams, PostParams,
    },
};
use xcc_e2e::{Testbed, require_testbed};

use crate::xcc_dns::manifest;

/// The status code of a failed call; panics when it succeeded.
fn code<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) -> u16 {
    match result {
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("{what}: expected an API error, got {other}"),
        Ok(found) => panic!("{what}: allowed ({found:?})"),
    }
}

fn assert_forbidden<T: std::fmt::Debug>(who: &str, what: &str, result: Result<T, kube::Error>) {
    assert_eq!(code(what, result), 403, "{who} may not {what}");
}

fn named<T: kube::Resource<DynamicType = ()> + Default>(name: &str, namespace: Option<&str>) -> T {
    let mut object = T::default();
    *object.meta_mut() = ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_string),
        ..Default::default()
    };
    object
}

/// What no xcc ServiceAccount may do on a cluster: cluster-scoped objects it does not own. The
/// peer reader (`lists`: namespaces, nodes) may list namespaces and nodes, as the original
/// cluster-registry-controller reads them from a peer, and so may the agent (Multi-Cluster
/// Services); the controller may list namespaces (`spec.resolveFrom.namespaceSelector`); they
/// write neither.
async fn cluster_scope_is_closed(who: &str, client: &Client, lists: (bool, bool)) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert_forbidden(
        who,
        "create a namespace",
        namespaces
            .create(&PostParams::default(), &named("stolen", None))
            .await,
    );
    assert_forbidden(
        who,
        "delete namespace default",
        namespaces.delete("default", &DeleteParams::default()).await,
    );
    let listed_namespaces = namespaces.list(&ListParams::default()).await;
    let listed_nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await;
    if lists.0 {
        listed_namespaces.unwrap_or_else(|e| panic!("{who} lists namespaces: {e}"));
    } else {
        assert_forbidden(who, "list namespaces", listed_namespaces);
    }
    if lists.1 {
        listed_nodes.unwrap_or_else(|e| panic!("{who} lists nodes: {e}"));
    } else {
        assert_forbidden(who, "list nodes", listed_nodes);
    }
    assert_forbidden(
        who,
        "create a ClusterRole",
        Api::<ClusterRole>::all(client.clone())
            .create(&PostParams::default(), &named("escalate", None))
            .await,
    );
    let crds = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
    ));
    assert_forbidden(
        who,
        "delete a CRD",
        Api::<DynamicObject>::all_with(client.clone(), &crds)
            .delete(
                "secretimports.replication.apiresources.multicluster.x-tanzu.vmware.com",
                &DeleteParams::default(),
            )
            .await,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_service_account_is_refused_what_its_binary_must_not_do() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["member"]).await.unwrap();
    let member = bed.cluster("member");
    // The reader and agent ClusterRoles are aggregated, as in a real cluster.
    let _aggregator = xcc_e2e::aggregation::start(&binaries, member).unwrap();
    member
        .install_crds(&crate::secrets::repo().join("manifests/crds"))
        .await
        .unwrap();
    for file in [
        "manifests/agent/agent.yaml",
        "manifests/agent/cluster-registry.yaml",
        "manifests/agent/projection.yaml",
        "manifests/agent/mcs.yaml",
        "manifests/controller/controller.yaml",
        "manifests/coredns-patcher/job.yaml",
    ] {
        member
            .kubectl(&["apply", "-f", &manifest(file)])
            .await
            .unwrap();
    }
    for ns in ["cluster-registry", "team-a"] {
        member.kubectl(&["create", "namespace", ns]).await.unwrap();
    }
    member
        .apply_yaml(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: hidden, namespace: kube-system}\n\
             stringData: {token: not-for-xcc}\n",
        )
        .await
        .unwrap();
    let mint = |ns: &'static str, sa: &'static str| async move {
        member.mint_kubeconfig(ns, sa).await.unwrap().client
    };
    let agent = mint("xcc-dns", "xcc-agent").await;
    let reader = mint("xcc-dns", "xcc-cluster-reader").await;
    let controller = mint("xcc-system", "xcc-controller").await;
    let patcher = mint("xcc-dns", "xcc-coredns-patcher").await;

    // First, what the reader must read: the liveness check. Once it can, aggregation has filled
    // in the roles, and the 403s below mean something.
    crate::resource_sync::wait_for(
        "the reader reads namespace kube-system",
        std::time::Duration::from_secs(30),
        || async {
            Api::<Namespace>::all(reader.clone())
                .get("kube-system")
                .await
                .ok()
        },
    )
    .await;

    for (who, client, lists) in [
        // Multi-Cluster Services: the agent lists namespaces (an import waits for its namespace)
        // and nodes (the gateway data plane's addresses); it writes neither.
        ("xcc-agent", &agent, (true, true)),
        ("the peer reader", &reader, (true, true)),
        // The labels spec.resolveFrom.namespaceSelector matches.
        ("xcc-controller", &controller, (true, false)),
        ("xcc-coredns-patcher", &patcher, (false, false)),
    ] {
        cluster_scope_is_closed(who, client, lists).await;
    }

    // The peer reader is what other members act as here: it never writes, and reads only its
    // kinds.
    let who = "the peer reader";
    let registry_secrets: Api<Secret> = Api::namespaced(reader.clone(), "cluster-registry");
    assert_forbidden(
        who,
        "create a Secret",
        registry_secrets
            .create(&PostParams::default(), &named("planted", None))
            .await,
    );
    assert_forbidden(
        who,
        "patch a Secret",
        registry_secrets
            .patch(
                "member",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"stringData": {"k": "v"}})),
            )
            .await,
    );
    let clusters = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "clusterregistry.k8s.cisco.com",
        "v1alpha1",
        "Cluster",
    ));
    let mut planted = DynamicObject::new("planted", &clusters);
    planted.data = serde_json::json!({"spec": {"clusterID": "x"}});
    assert_forbidden(
        who,
        "create a Cluster",
        Api::<DynamicObject>::all_with(reader.clone(), &clusters)
            .create(&PostParams::default(), &planted)
            .await,
    );
    assert_forbidden(
        who,
        "read ConfigMaps",
        Api::<ConfigMap>::namespaced(reader.clone(), "team-a")
            .list(&ListParams::default())
            .await,
    );
    mcs_reader_reads_only_publications(&reader).await;

    // The controller reads kubeconfig Secrets and writes nothing but its own status and Events.
    let who = "xcc-controller";
    let secrets: Api<Secret> = Api::namespaced(controller.clone(), "team-a");
    assert_forbidden(
        who,
        "create a Secret",
        secrets
            .create(&PostParams::default(), &named("planted", None))
            .await,
    );
    assert_forbidden(
        who,
        "delete a Secret",
        Api::<Secret>::namespaced(controller.clone(), "kube-system")
            .delete("hidden", &DeleteParams::default())
            .await,
    );
    assert_forbidden(
        who,
        "read ConfigMaps",
        Api::<ConfigMap>::namespaced(controller.clone(), "kube-system")
            .list(&ListParams::default())
            .await,
    );

    // The patcher touches one ConfigMap, by update only, and no Secret anywhere.
    let who = "xcc-coredns-patcher";
    assert_forbidden(
        who,
        "read a Secret of kube-system",
        Api::<Secret>::namespaced(patcher.clone(), "kube-system")
            .get("hidden")
            .await,
    );
    assert_forbidden(
        who,
        "list Secrets",
        Api::<Secret>::all(patcher.clone())
            .list(&ListParams::default())
            .await,
    );
    let kube_system: Api<ConfigMap> = Api::namespaced(patcher.clone(), "kube-system");
    assert_forbidden(
        who,
        "read another ConfigMap",
        kube_system.get("kube-root-ca.crt").await,
    );
    assert_forbidden(
        who,
        "create a ConfigMap",
        kube_system
            .create(&PostParams::default(), &named("planted", None))
            .await,
    );

    // The agent's DNS part reads slices of its namespace only; its sync part never touches
    // RBAC beyond Roles and RoleBindings, nor ConfigMaps unless a rule's ClusterRole says so.
    let who = "xcc-agent";
    assert_forbidden(
        who,
        "read ConfigMaps",
        Api::<ConfigMap>::namespaced(agent.clone(), "team-a")
            .list(&ListParams::default())
            .await,
    );
    // Of ConfigMaps it writes its announcement only, and may not create even that one: once a
    // person deletes it, it stays deleted.
    let own: Api<ConfigMap> = Api::namespaced(agent.clone(), "xcc-dns");
    member
        .apply_yaml(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: xcc-dns}\n",
        )
        .await
        .unwrap();
    let announce = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "xcc-agent", "namespace": "xcc-dns"},
        "data": {"features": "ipv6"}
    });
    let mut other = announce.clone();
    other["metadata"]["name"] = "other".into();
    let apply = PatchParams::apply("xcc-agent").force();
    own.patch("xcc-agent", &apply, &Patch::Apply(&announce))
        .await
        .expect("the agent writes its announcement");
    assert_forbidden(
        who,
        "write another ConfigMap of its namespace",
        own.patch("other", &apply, &Patch::Apply(&other)).await,
    );
    assert_forbidden(
        who,
        "create a ConfigMap",
        own.create(&PostParams::default(), &named("planted", None))
            .await,
    );
    member
        .kubectl(&["-n", "xcc-dns", "delete", "configmap", "xcc-agent"])
        .await
        .unwrap();
    assert_forbidden(
        who,
        "recreate its deleted announcement",
        own.patch("xcc-agent", &apply, &Patch::Apply(&announce))
            .await,
    );
    // Multi-Cluster Services: the agent writes the imports' Services and EndpointSlices (and
    // reads them cluster-wide), never the users' ServiceExports, and a ClusterProperty only
    // once: it may create one, not change or delete it.
    let exports = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "multicluster.x-k8s.io",
        "v1beta1",
        "ServiceExport",
    ));
    assert_forbidden(
        who,
        "create a ServiceExport",
        Api::<DynamicObject>::namespaced_with(agent.clone(), "team-a", &exports)
            .create(
                &PostParams::default(),
                &DynamicObject::new("planted", &exports),
            )
            .await,
    );
    let properties = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "about.k8s.io",
        "v1alpha1",
        "ClusterProperty",
    ));
    assert_forbidden(
        who,
        "change a ClusterProperty",
        Api::<DynamicObject>::all_with(agent.clone(), &properties)
            .patch(
                "cluster.clusterset.k8s.io",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"value": "other"}})),
            )
            .await,
    );
    assert_forbidden(
        who,
        "delete a ClusterProperty",
        Api::<DynamicObject>::all_with(agent.clone(), &properties)
            .delete("cluster.clusterset.k8s.io", &DeleteParams::default())
            .await,
    );

    // API projection: the aggregated API server's own ServiceAccount holds the reference's list
    // for the proxy and nothing more; the agent holds none of it, and may request tokens for
    // that ServiceAccount only.
    let proxy = mint("xcc-dns", "xcc-projection-proxy").await;
    let review = |client: &Client| {
        let client = client.clone();
        async move {
            let review: k8s_openapi::api::authorization::v1::SubjectAccessReview =
                serde_json::from_value(serde_json::json!({"spec": {"user": "alice",
                    "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "team-a"}}}))
                .unwrap();
            Api::<k8s_openapi::api::authorization::v1::SubjectAccessReview>::all(client)
                .create(&PostParams::default(), &review)
                .await
        }
    };
    review(&proxy)
        .await
        .expect("the proxy creates SubjectAccessReviews");
    Api::<Namespace>::all(proxy.clone())
        .list(&ListParams::default())
        .await
        .expect("the proxy lists namespaces");
    Api::<ConfigMap>::namespaced(proxy.clone(), "kube-system")
        .get("extension-apiserver-authentication")
        .await
        .expect("the proxy reads the front proxy's settings");
    let who = "the aggregated API server";
    assert_forbidden(
        who,
        "read Secrets",
        Api::<Secret>::namespaced(proxy.clone(), "kube-system")
            .list(&ListParams::default())
            .await,
    );
    assert_forbidden(
        who,
        "read other ConfigMaps of kube-system",
        Api::<ConfigMap>::namespaced(proxy.clone(), "kube-system")
            .list(&ListParams::default())
            .await,
    );
    assert_forbidden(
        who,
        "write namespaces",
        Api::<Namespace>::all(proxy.clone())
            .create(&PostParams::default(), &named("stolen", None))
            .await,
    );
    let who = "xcc-agent";
    assert_forbidden(who, "create SubjectAccessReviews", review(&agent).await);
    let token_request = |sa: &'static str| {
        let agent = agent.clone();
        async move {
            Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(agent, "xcc-dns")
                .create_token_request(sa, &PostParams::default(), &Default::default())
                .await
        }
    };
    token_request("xcc-projection-proxy")
        .await
        .expect("the agent requests the proxy's tokens");
    assert_forbidden(
        who,
        "request tokens of another ServiceAccount",
        token_request("xcc-coredns-patcher").await,
    );
}

/// Every ServiceAccount of the install, as `(namespace, name)`.
const ACCOUNTS: [(&str, &str); 5] = [
    ("xcc-dns", "xcc-agent"),
    ("xcc-dns", "xcc-cluster-reader"),
    ("xcc-dns", "xcc-projection-proxy"),
    ("xcc-dns", "xcc-coredns-patcher"),
    ("xcc-system", "xcc-controller"),
];
const VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "patch", "update", "delete",
];
/// The namespaces asked about; `*` is every namespace at once (a cluster-wide list or watch).
const NAMESPACES: [&str; 6] = ["a", "b", "cluster-registry", "kube-system", "xcc-dns", "*"];
/// `(API group, resource, namespaced)`.
const RESOURCES: [(&str, &str, bool); 3] = [
    ("", "secrets", true),
    ("rbac.authorization.k8s.io", "rolebindings", true),
    ("rbac.authorization.k8s.io", "clusterrolebindings", false),
];

/// Whether ServiceAccount `namespace/name` may `verb` `resource` in `scope`, asked of the API
/// server with a SubjectAccessReview (what `kubectl auth can-i --as` asks).
async fn may(
    admin: &Client,
    (namespace, name): (&str, &str),
    verb: &str,
    (group, resource): (&str, &str),
    scope: &str,
) -> bool {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({"spec": {
        "user": format!("system:serviceaccount:{namespace}:{name}"),
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{namespace}"),
                   "system:authenticated"],
        "resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                               "namespace": if scope == "*" { "" } else { scope }},
    }}))
    .unwrap();
    Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("a SubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

/// The whole table, ServiceAccount × resource × namespace × verb, as one line per
/// `account resource namespace` with the verbs allowed there (lines with none left out).
async fn can_i_table(admin: &Client) -> Vec<String> {
    let mut asks = Vec::new();
    for account in ACCOUNTS {
        for (group, resource, namespaced) in RESOURCES {
            let scopes: &[&str] = if namespaced { &NAMESPACES } else { &["*"] };
            for scope in scopes {
                asks.push((account, group, resource, *scope));
            }
        }
    }
    let lines = futures::future::join_all(asks.into_iter().map(
        |(account, group, resource, scope)| async move {
            let mut allowed = Vec::new();
            for verb in VERBS {
                if may(admin, account, verb, (group, resource), scope).await {
                    allowed.push(verb);
                }
            }
            (!allowed.is_empty())
                .then(|| format!("{} {resource} {scope}: {}", account.1, allowed.join(" ")))
        },
    ))
    .await;
    lines.into_iter().flatten().collect()
}

/// The lines of `account resource` with `verbs` in each of `scopes`.
fn rows(account: &str, resource: &str, scopes: &[&str], verbs: &str) -> Vec<String> {
    scopes
        .iter()
        .map(|scope| format!("{account} {resource} {scope}: {verbs}"))
        .collect()
}

/// What every ServiceAccount may do with the reader allowed Secrets in `reader_scopes`.
fn expected_table(reader_scopes: &[&str]) -> Vec<String> {
    let all = "get list watch create patch update delete";
    let mut table = Vec::new();
    // The agent: Secrets and RoleBindings everywhere (replication, resource sync and plumber
    // write copies where users choose: docs/security.md says why); ClusterRoleBindings of API
    // projection and of the reader's cluster-wide grant.
    table.extend(rows("xcc-agent", "secrets", &NAMESPACES, all));
    table.extend(rows("xcc-agent", "rolebindings", &NAMESPACES, all));
    table.extend(rows(
        "xcc-agent",
        "clusterrolebindings",
        &["*"],
        "get create patch update delete",
    ));
    // The reader: Secrets where the group reads them, nothing else of these.
    table.extend(rows(
        "xcc-cluster-reader",
        "secrets",
        reader_scopes,
        "get list watch",
    ));
    // The controller reads Cluster API's kubeconfig Secrets, in any namespace.
    table.extend(rows(
        "xcc-controller",
        "secrets",
        &NAMESPACES,
        "get list watch",
    ));
    table.sort();
    table
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_reads_secrets_only_where_a_rule_or_the_group_reads_them() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["member"]).await.unwrap();
    let member = bed.cluster("member");
    // Our manifests (every feature's RBAC), the member's own Cluster and kubeconfig Secret in
    // namespace cluster-registry, as `kubectl xcc cluster join` leaves them.
    let prepared = crate::resource_sync::prepare_member(&binaries, member).await;
    for file in [
        "manifests/agent/plumber.yaml",
        "manifests/agent/projection.yaml",
        "manifests/controller/controller.yaml",
        "manifests/coredns-patcher/job.yaml",
    ] {
        member
            .kubectl(&["apply", "-f", &manifest(file)])
            .await
            .unwrap();
    }
    for ns in ["a", "b"] {
        member.kubectl(&["create", "namespace", ns]).await.unwrap();
    }
    let admin = member.client.clone();
    let table = || can_i_table(&admin);
    // Waits until the table is `want` (the aggregated roles and the agent's grants take a
    // moment), or fails with both tables.
    let settle = |want: Vec<String>, what: &'static str| {
        let table = &table;
        async move {
            let started = std::time::Instant::now();
            loop {
                let mut got = table().await;
                got.sort();
                if got == want {
                    return;
                }
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(30),
                    "{what}: got\n{}\nwanted\n{}",
                    got.join("\n"),
                    want.join("\n")
                );
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
    };
    // Installed, the agent not started: the reader may read no Secret anywhere.
    settle(expected_table(&[]), "as installed").await;

    let agent = crate::resource_sync::start_agent_with(
        member,
        "xcc-agent.log",
        &[
            "--secret-replication=false",
            "--plumber=false",
            "--api-projection=false",
        ],
    )
    .await;
    let _member = prepared.start(agent);
    // Group sync reads the Clusters' kubeconfig Secrets: namespace cluster-registry only.
    settle(expected_table(&["cluster-registry"]), "group sync").await;

    // A rule that syncs the Secrets of namespace `a`: the reader reads there too, and not in
    // `b` or kube-system.
    let rule_a = "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1
kind: ResourceSyncRule
metadata: {name: secrets-of-a}
spec:
  groupVersionKind: {version: v1, kind: Secret}
  rules:
  - match:
    - namespaces: [a]
";
    member.apply_yaml(rule_a).await.unwrap();
    settle(
        expected_table(&["a", "cluster-registry"]),
        "a rule naming namespace a",
    )
    .await;
    // What `kubectl auth can-i` says, for the record.
    let can_i = |ns: &'static str| async move {
        member
            .kubectl(&[
                "auth",
                "can-i",
                "get",
                "secrets",
                "-n",
                ns,
                "--as=system:serviceaccount:xcc-dns:xcc-cluster-reader",
            ])
            .await
    };
    assert_eq!(can_i("a").await.unwrap().trim(), "yes");
    let refused = can_i("b").await.unwrap_err().to_string();
    assert!(!refused.contains("error:"), "{refused}");
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = Api::namespaced(admin.clone(), "a")
        .get("xcc-cluster-reader-secrets")
        .await
        .unwrap();
    assert_eq!(
        binding
            .metadata
            .annotations
            .unwrap_or_default()
            .get("xcc.test/origin")
            .map(String::as_str),
        Some("resource-sync/reader-grant/secrets"),
        "the grant carries the origin annotation"
    );

    // The rule gone, so is the grant.
    member
        .kubectl(&["delete", "resourcesyncrule", "secrets-of-a"])
        .await
        .unwrap();
    settle(expected_table(&["cluster-registry"]), "the rule deleted").await;

    // A rule that selects Secrets by label alone reads every namespace: the one case of a
    // cluster-wide grant, gone with the rule.
    let by_label = "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1
kind: ResourceSyncRule
metadata: {name: secrets-by-label}
spec:
  groupVersionKind: {version: v1, kind: Secret}
  rules:
  - match:
    - labels: [{matchLabels: {sync: \"yes\"}}]
";
    member.apply_yaml(by_label).await.unwrap();
    settle(expected_table(&NAMESPACES), "a rule naming no namespace").await;
    member
        .kubectl(&["delete", "resourcesyncrule", "secrets-by-label"])
        .await
        .unwrap();
    settle(expected_table(&["cluster-registry"]), "that rule deleted").await;
}

/// Multi-Cluster Services: a peer reads what is exported (the publications, cluster-wide) and
/// the ClusterProperties (the IDs), and neither the Services, the EndpointSlices nor the Secrets
/// behind them; it writes none of them.
async fn mcs_reader_reads_only_publications(reader: &Client) {
    let who = "the peer reader";
    let resource = |group: &str, version: &str, kind: &str| {
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
    };
    let publications = resource("mcs.xcc.test", "v1alpha1", "ExportedService");
    let properties = resource("about.k8s.io", "v1alpha1", "ClusterProperty");
    crate::resource_sync::wait_for(
        "the reader lists ExportedServices and ClusterProperties (aggregated)",
        std::time::Duration::from_secs(30),
        || async {
            let listed = Api::<DynamicObject>::all_with(reader.clone(), &publications)
                .list(&ListParams::default())
                .await
                .is_ok()
                && Api::<DynamicObject>::all_with(reader.clone(), &properties)
                    .list(&ListParams::default())
                    .await
                    .is_ok();
            listed.then_some(())
        },
    )
    .await;
    assert_forbidden(
        who,
        "list Services",
        Api::<k8s_openapi::api::core::v1::Service>::all(reader.clone())
            .list(&ListParams::default())
            .await,
    );
    assert_forbidden(
        who,
        "list EndpointSlices",
        Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::all(reader.clone())
            .list(&ListParams::default())
            .await,
    );
    assert_forbidden(
        who,
        "list Secrets of every namespace",
        Api::<Secret>::all(reader.clone())
            .list(&ListParams::default())
            .await,
    );
    let mut planted = DynamicObject::new("planted", &properties);
    planted.data = serde_json::json!({"spec": {"value": "x"}});
    assert_forbidden(
        who,
        "create a ClusterProperty",
        Api::<DynamicObject>::all_with(reader.clone(), &properties)
            .create(&PostParams::default(), &planted)
            .await,
    );
}

/// What each ServiceAccount's code needs, hence may do: every other (account, verb, resource,
/// namespace) is refused. One row per need:
/// `account  API group  resources  where  verbs  # who needs it`, where `account` `*` is every
/// ServiceAccount, the group `core` is the core group, `resource[name]` is one object, `where`
/// is `*` (every namespace, or the cluster for a cluster-scoped resource) or namespaces.
/// Rows overlap where two features need the same thing: each says why on its own.
const NEEDS: &str = "
# Kubernetes' system:basic-user, for every authenticated user.
*                    authorization.k8s.io  selfsubjectaccessreviews,selfsubjectrulesreviews  *  create
*                    authentication.k8s.io  selfsubjectreviews  *  create

# xcc-agent, DNS (agent.yaml): the record slices of its namespace, its announcement, its Lease.
xcc-agent  discovery.k8s.io  endpointslices  xcc-dns  list watch
xcc-agent  core  configmaps[xcc-agent]  xcc-dns  patch
xcc-agent  events.k8s.io  events  xcc-dns  create patch
xcc-agent  coordination.k8s.io  leases  xcc-dns  create
xcc-agent  coordination.k8s.io  leases[xcc-agent]  xcc-dns  get list watch patch
# xcc-agent, secret replication (agent.yaml): copies where users choose (docs/security.md).
xcc-agent  replication.apiresources.multicluster.x-tanzu.vmware.com  secretexports,secretimports  *  get list watch create patch delete
xcc-agent  replication.apiresources.multicluster.x-tanzu.vmware.com  resourceimportmonitorbindings,resourceexportmonitorbindings  *  get list watch patch
xcc-agent  replication.apiresources.multicluster.x-tanzu.vmware.com  clusterresourceimportmonitors,clusterresourceexportmonitors  *  get list watch
xcc-agent  replication.apiresources.multicluster.x-tanzu.vmware.com  secretexports/status,secretimports/status,resourceimportmonitorbindings/status,resourceexportmonitorbindings/status,clusterresourceimportmonitors/status,clusterresourceexportmonitors/status  *  get patch
xcc-agent  replication.apiresources.multicluster.x-tanzu.vmware.com  secretexports/finalizers,secretimports/finalizers,resourceimportmonitorbindings/finalizers,resourceexportmonitorbindings/finalizers  *  update
xcc-agent  core  secrets  *  get list watch create patch delete
xcc-agent  rbac.authorization.k8s.io  roles,rolebindings  *  get list watch create patch delete
xcc-agent  events.k8s.io  events  *  create patch
# xcc-agent, resource sync and group sync (cluster-registry.yaml): the registry, the synced
# Secrets and the reader's Secret grants (a ClusterRoleBinding only for a rule naming no
# namespace); kube-system's UID is the cluster's ID.
xcc-agent  clusterregistry.k8s.cisco.com  clusters,clusterfeatures,resourcesyncrules  *  get list watch create patch update delete
xcc-agent  clusterregistry.k8s.cisco.com  clusters/status,clusterfeatures/status,resourcesyncrules/status  *  get patch update
xcc-agent  core  namespaces[kube-system]  *  get
xcc-agent  core  secrets  *  get list watch create patch update delete
xcc-agent  rbac.authorization.k8s.io  rolebindings  *  get list create patch update delete
xcc-agent  rbac.authorization.k8s.io  clusterrolebindings  *  create
xcc-agent  rbac.authorization.k8s.io  clusterrolebindings[xcc-cluster-reader-secrets]  *  get patch update delete
# xcc-agent, Multi-Cluster Services (mcs.yaml): imports' Services and slices, publications,
# the cluster's ID property (created once), namespaces and nodes (the gateway's addresses).
xcc-agent  multicluster.x-k8s.io  serviceexports  *  get list watch
xcc-agent  multicluster.x-k8s.io  serviceexports/status,serviceimports/status  *  get patch
xcc-agent  multicluster.x-k8s.io  serviceimports  *  get list watch create patch update delete
xcc-agent  mcs.xcc.test  exportedservices  *  get list watch create patch update delete
xcc-agent  core  services  *  get list watch create patch delete
xcc-agent  discovery.k8s.io  endpointslices  *  get list watch create patch delete
xcc-agent  about.k8s.io  clusterproperties  *  get list watch create
xcc-agent  core  namespaces,nodes  *  get list watch
xcc-agent  core  secrets  *  get
# xcc-agent, plumber (plumber.yaml): Replicators' objects in the target namespaces, its
# ClusterDetectors and the kubeconfig Secrets it is pointed at.
xcc-agent  plumber.jnytnai0613.github.io  replicators  *  get list watch patch
xcc-agent  plumber.jnytnai0613.github.io  replicators/status  *  get patch
xcc-agent  plumber.jnytnai0613.github.io  replicators/finalizers  *  update
xcc-agent  core  namespaces  *  get create patch delete
xcc-agent  core  configmaps,services,secrets  *  get list watch create patch delete
xcc-agent  apps  deployments  *  get list watch create patch delete
xcc-agent  networking.k8s.io  ingresses  *  get list watch create patch delete
xcc-agent  plumber.jnytnai0613.github.io  clusterdetectors  plumber-system  get list watch create patch delete
xcc-agent  plumber.jnytnai0613.github.io  clusterdetectors/status  plumber-system  get patch
xcc-agent  core  secrets[kubeconfig]  plumber-system  get
xcc-agent  core  secrets[config]  kubeconfig  get
# xcc-agent, API projection (projection.yaml): links and imports, the APIServices and their
# ClusterRoleBindings, the link objects in services-toolkit, the proxy's tokens.
xcc-agent  projection.apiresources.multicluster.x-tanzu.vmware.com  upstreamclusterlinks,apiexportrolebindings,downstreamclusterlinks,clusterapigroupimports,apiresourceimports  *  get list watch
xcc-agent  projection.apiresources.multicluster.x-tanzu.vmware.com  clusterapigroupimports  *  patch
xcc-agent  projection.apiresources.multicluster.x-tanzu.vmware.com  upstreamclusterlinks/status,apiexportrolebindings/status,downstreamclusterlinks/status,clusterapigroupimports/status,apiresourceimports/status  *  get patch
xcc-agent  projection.apiresources.multicluster.x-tanzu.vmware.com  upstreamclusterlinks/finalizers,apiexportrolebindings/finalizers,downstreamclusterlinks/finalizers,clusterapigroupimports/finalizers  *  update
xcc-agent  apiregistration.k8s.io  apiservices  *  get list create patch update delete
xcc-agent  rbac.authorization.k8s.io  clusterrolebindings  *  get create patch update delete
xcc-agent  rbac.authorization.k8s.io  clusterroles  *  get bind
xcc-agent  core  serviceaccounts,services,secrets  services-toolkit  get create patch update
xcc-agent  discovery.k8s.io  endpointslices  services-toolkit  get create patch update
xcc-agent  rbac.authorization.k8s.io  roles,rolebindings  services-toolkit  get create patch update
xcc-agent  core  serviceaccounts/token  services-toolkit  create
xcc-agent  core  configmaps[kube-root-ca.crt]  services-toolkit  get
xcc-agent  core  serviceaccounts/token[xcc-projection-proxy]  xcc-dns  create

# The peer reader (cluster-registry.yaml, mcs.yaml): what `cluster join` hands to peers. The
# registry, namespaces and nodes as the original reads them, the publications and the ID; its
# Secret grants come from the agent as rules change (the test above).
xcc-cluster-reader  core  namespaces  *  get list watch
xcc-cluster-reader  core  nodes  *  get list
xcc-cluster-reader  clusterregistry.k8s.cisco.com  clusters,clusterfeatures,resourcesyncrules  *  get list watch
xcc-cluster-reader  mcs.xcc.test  exportedservices  *  get list watch
xcc-cluster-reader  about.k8s.io  clusterproperties  *  get list watch

# The aggregated API server of API projection (projection.yaml): delegated authentication and
# authorization, the front proxy's settings, namespaces.
xcc-projection-proxy  authentication.k8s.io  tokenreviews  *  create
xcc-projection-proxy  authorization.k8s.io  subjectaccessreviews  *  create
xcc-projection-proxy  core  configmaps[extension-apiserver-authentication]  kube-system  get list watch
xcc-projection-proxy  core  namespaces  *  get list watch

# The CoreDNS patcher (job.yaml): the Corefile, the CoreDNS replicas it asks, our DNS Service.
xcc-coredns-patcher  core  configmaps[coredns]  kube-system  get update
xcc-coredns-patcher  discovery.k8s.io  endpointslices  kube-system  list
xcc-coredns-patcher  core  services[dns-server]  xcc-dns  get

# xcc-controller (controller.yaml): GatewayDNS and their status, Cluster API Clusters and
# their kubeconfig Secrets in any namespace, namespaces (spec.resolveFrom), its Lease.
xcc-controller  connectivity.tanzu.vmware.com  gatewaydns  *  get list watch patch update
xcc-controller  connectivity.tanzu.vmware.com  gatewaydns/status  *  get patch update
xcc-controller  connectivity.tanzu.vmware.com  gatewaydns/finalizers  *  update
xcc-controller  cluster.x-k8s.io  clusters  *  get list watch
xcc-controller  core  secrets,namespaces  *  get list watch
xcc-controller  events.k8s.io  events  *  create patch
xcc-controller  coordination.k8s.io  leases  xcc-system  create
xcc-controller  coordination.k8s.io  leases[xcc-controller]  xcc-system  get list watch patch
";

/// What a joined member's agent adds to [`NEEDS`], as [`NEEDS`] says it.
const NEEDS_JOINED: &str = "
# Group sync: a peer reads the kubeconfig Secrets of the registry (a RoleBinding by the agent).
xcc-cluster-reader  core  secrets  cluster-registry  get list watch
";

/// The namespaces asked about: every namespace at once (`*`), each namespace a manifest grants
/// something in, and one of a user.
const ASKED: [&str; 9] = [
    "*",
    "xcc-dns",
    "xcc-system",
    "kube-system",
    "cluster-registry",
    "plumber-system",
    "kubeconfig",
    "services-toolkit",
    "team-a",
];

/// One row of [`NEEDS`].
struct Need {
    account: String,
    group: String,
    /// `(resource, name)`: `pods/log`, `configmaps` with `Some("coredns")`.
    resources: Vec<(String, Option<String>)>,
    /// `None`: everywhere.
    namespaces: Option<Vec<String>>,
    verbs: Vec<String>,
}

fn parse_needs(table: &str) -> Vec<Need> {
    table
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter(|line| !line.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(fields.len() >= 5, "a row of NEEDS: {line:?}");
            let group = if fields[1] == "core" { "" } else { fields[1] };
            let resources = fields[2]
                .split(',')
                .map(|r| match r.split_once('[') {
                    Some((r, name)) => (r.to_string(), Some(name.trim_end_matches(']').into())),
                    None => (r.to_string(), None),
                })
                .collect();
            Need {
                account: fields[0].into(),
                group: group.into(),
                resources,
                namespaces: (fields[3] != "*")
                    .then(|| fields[3].split(',').map(str::to_string).collect()),
                verbs: fields[4..].iter().map(|v| v.to_string()).collect(),
            }
        })
        .collect()
}

/// One question: may `account` `verb` `resource` (`group`) in `namespace` (`*`: every
/// namespace, or the cluster), the object `name` if given.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Ask {
    account: &'static str,
    group: String,
    resource: String,
    namespace: &'static str,
    verb: String,
    name: Option<String>,
}

impl Ask {
    fn needed(&self, needs: &[Need]) -> bool {
        needs.iter().any(|need| {
            (need.account == "*" || need.account == self.account)
                && need.group == self.group
                && need.verbs.contains(&self.verb)
                && need
                    .namespaces
                    .as_ref()
                    .is_none_or(|namespaces| namespaces.iter().any(|ns| ns == self.namespace))
                && need.resources.iter().any(|(resource, name)| {
                    *resource == self.resource && (name.is_none() || *name == self.name)
                })
        })
    }

    fn row(&self, expected: bool, got: bool) -> String {
        let yes = |b: bool| if b { "yes" } else { "no" };
        let resource = match (&self.group[..], &self.name) {
            ("", None) => self.resource.clone(),
            ("", Some(name)) => format!("{}[{name}]", self.resource),
            (group, None) => format!("{group} {}", self.resource),
            (group, Some(name)) => format!("{group} {}[{name}]", self.resource),
        };
        format!(
            "{:<22}{:<8}{:<70}{:<18}{:<10}{}",
            self.account,
            self.verb,
            resource,
            self.namespace,
            yes(expected),
            yes(got)
        )
    }
}

/// Every resource the API server serves (its preferred version of each group, subresources
/// included), as `(group, resource, namespaced, verbs)`, with the verbs RBAC knows beyond
/// discovery's where they apply (`bind`, `escalate`, `impersonate`).
async fn served(admin: &Client) -> Vec<(String, String, bool, Vec<String>)> {
    let mut lists = vec![(
        String::new(),
        admin.list_core_api_resources("v1").await.unwrap(),
    )];
    for group in admin.list_api_groups().await.unwrap().groups {
        let Some(preferred) = group.preferred_version else {
            continue;
        };
        // An aggregated API without its server does not list its resources: nothing to ask.
        if let Ok(list) = admin
            .list_api_group_resources(&preferred.group_version)
            .await
        {
            lists.push((group.name, list));
        }
    }
    let mut served = Vec::new();
    for (group, list) in lists {
        for resource in list.resources {
            let mut verbs = resource.verbs;
            match (&group[..], &resource.name[..]) {
                ("rbac.authorization.k8s.io", "roles" | "clusterroles") => {
                    verbs.extend(["bind".into(), "escalate".into()]);
                }
                ("", "serviceaccounts") => verbs.push("impersonate".into()),
                _ => {}
            }
            served.push((group.clone(), resource.name, resource.namespaced, verbs));
        }
    }
    served
}

/// Asks the API server about `ask`, as `kubectl auth can-i --as` does (a SubjectAccessReview).
async fn allowed(admin: &Client, ask: &Ask) -> bool {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let (namespace, sa) = ACCOUNTS
        .iter()
        .find(|(_, name)| *name == ask.account)
        .copied()
        .unwrap();
    let (resource, subresource) = ask.resource.split_once('/').unwrap_or((&ask.resource, ""));
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({"spec": {
        "user": format!("system:serviceaccount:{namespace}:{sa}"),
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{namespace}"),
                   "system:authenticated"],
        "resourceAttributes": {"verb": ask.verb, "group": ask.group, "resource": resource,
                               "subresource": subresource,
                               "namespace": if ask.namespace == "*" { "" } else { ask.namespace },
                               "name": ask.name.clone().unwrap_or_default()},
    }}))
    .unwrap();
    Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("a SubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

/// Every question: each account × each served resource × its verbs × [`ASKED`] (namespaced)
/// or the cluster, and each row of [`NEEDS`] as written (named objects, `finalizers`, which
/// discovery does not list).
fn asks(served: &[(String, String, bool, Vec<String>)], needs: &[Need]) -> Vec<Ask> {
    let mut asks = std::collections::BTreeSet::new();
    for (_, account) in ACCOUNTS {
        for (group, resource, namespaced, verbs) in served {
            let scopes: &[&'static str] = if *namespaced { &ASKED } else { &["*"] };
            for namespace in scopes {
                for verb in verbs {
                    asks.insert(Ask {
                        account,
                        group: group.clone(),
                        resource: resource.clone(),
                        namespace,
                        verb: verb.clone(),
                        name: None,
                    });
                }
            }
        }
        for need in needs {
            if need.account != "*" && need.account != account {
                continue;
            }
            let scopes: Vec<&'static str> = match &need.namespaces {
                None => vec!["*"],
                Some(namespaces) => ASKED
                    .into_iter()
                    .filter(|asked| namespaces.iter().any(|ns| ns == asked))
                    .collect(),
            };
            assert_eq!(
                scopes.len(),
                need.namespaces.as_ref().map_or(1, Vec::len),
                "a namespace of NEEDS not in ASKED"
            );
            for (resource, name) in &need.resources {
                for namespace in &scopes {
                    for verb in &need.verbs {
                        asks.insert(Ask {
                            account,
                            group: need.group.clone(),
                            resource: resource.clone(),
                            namespace,
                            verb: verb.clone(),
                            name: name.clone(),
                        });
                    }
                }
            }
        }
    }
    asks.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_account_may_do_what_its_code_needs_and_nothing_more() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["member"]).await.unwrap();
    let member = bed.cluster("member");
    let _aggregator = xcc_e2e::aggregation::start(&binaries, member).unwrap();
    member
        .install_crds(&crate::secrets::repo().join("manifests/crds"))
        .await
        .unwrap();
    for ns in ["cluster-registry", "team-a"] {
        member.kubectl(&["create", "namespace", ns]).await.unwrap();
    }
    // Every manifest, every feature on: the widest install.
    for file in [
        "manifests/agent/agent.yaml",
        "manifests/agent/cluster-registry.yaml",
        "manifests/agent/mcs.yaml",
        "manifests/agent/plumber.yaml",
        "manifests/agent/projection.yaml",
        "manifests/controller/controller.yaml",
        "manifests/coredns-patcher/job.yaml",
    ] {
        member
            .kubectl(&["apply", "-f", &manifest(file)])
            .await
            .unwrap();
    }
    let admin = member.client.clone();
    let needs = parse_needs(NEEDS);
    // The aggregated ClusterRoles filled in (the agent's and the reader's): then the answers
    // below are the install's.
    let aggregated = |account| Ask {
        account,
        group: "clusterregistry.k8s.cisco.com".into(),
        resource: "clusters".into(),
        namespace: "*",
        verb: "list".into(),
        name: None,
    };
    crate::resource_sync::wait_for(
        "the aggregated ClusterRoles",
        std::time::Duration::from_secs(30),
        || async {
            (allowed(&admin, &aggregated("xcc-agent")).await
                && allowed(&admin, &aggregated("xcc-cluster-reader")).await)
                .then_some(())
        },
    )
    .await;

    check(&admin, &needs, "as installed").await;

    // Joined (`cluster join` leaves the member's Cluster and its reader's kubeconfig Secret in
    // cluster-registry) and its agent running with every feature: the agent grants the reader the
    // Secrets group sync reads, and nothing else changes.
    let id = member.kube_system_uid().await.unwrap();
    let reader = member
        .mint_kubeconfig("xcc-dns", "xcc-cluster-reader")
        .await
        .unwrap();
    let reader = member.kubeconfig_text(&reader.path).unwrap();
    member
        .apply_yaml(&crate::resource_sync::cluster_yaml(&member.name, &id))
        .await
        .unwrap();
    member
        .apply_yaml(&crate::resource_sync::peer_secret_yaml(
            &member.name,
            &reader,
        ))
        .await
        .unwrap();
    let _agent = crate::resource_sync::start_agent_with(member, "xcc-agent.log", &[]).await;
    let joined = parse_needs(NEEDS_JOINED);
    let group_sync = |verb: &str| Ask {
        account: "xcc-cluster-reader",
        group: String::new(),
        resource: "secrets".into(),
        namespace: "cluster-registry",
        verb: verb.into(),
        name: None,
    };
    crate::resource_sync::wait_for(
        "the agent grants the reader the Secrets of cluster-registry",
        std::time::Duration::from_secs(30),
        || async { allowed(&admin, &group_sync("watch")).await.then_some(()) },
    )
    .await;
    let needs: Vec<Need> = needs.into_iter().chain(joined).collect();
    check(&admin, &needs, "joined, the agent running").await;
}

/// Asks every question of [`asks`] and fails, printing the rows that differ, unless every answer
/// is what `needs` says.
async fn check(admin: &Client, needs: &[Need], state: &str) {
    use futures::StreamExt;
    let started = std::time::Instant::now();
    let asks = asks(&served(admin).await, needs);
    let answers: Vec<(Ask, bool)> = futures::stream::iter(asks)
        .map(|ask| async move {
            let got = allowed(admin, &ask).await;
            (ask, got)
        })
        .buffer_unordered(32)
        .collect()
        .await;
    eprintln!(
        "{state}: {} questions in {:.1} s",
        answers.len(),
        started.elapsed().as_secs_f64()
    );
    let wrong: Vec<String> = answers
        .iter()
        .filter(|(ask, got)| ask.needed(needs) != *got)
        .map(|(ask, got)| ask.row(!got, *got))
        .collect();
    assert!(
        wrong.is_empty(),
        "{state}: {} answers differ from NEEDS:\n{:<22}{:<8}{:<70}{:<18}{:<10}{}\n{}",
        wrong.len(),
        "account",
        "verb",
        "resource",
        "namespace",
        "expected",
        "got",
        wrong.join("\n")
    );
}

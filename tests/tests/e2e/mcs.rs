//! Multi-Cluster Services end to end on three bare API servers in one cluster group, each with an
//! xcc-agent (no nodes: the exporting cluster's EndpointSlices are written here as the
//! EndpointSlice controller would). Export → ServiceImport, derived Service with a ClusterIP and
//! slices in every member; ports union with `Conflict` on both exports; headless conflict;
//! ExternalName `Valid=False`; hand edits put back; unexport → all gone; a namespace absent in
//! an importing cluster; a peer whose kubeconfig is refused; a peer that stops answering.

use std::time::{Duration, Instant};

use k8s_openapi::api::{
    core::v1::{Event as CoreEvent, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    },
};
use serde_json::{Value, json};
use xcc_e2e::{
    Cluster, Testbed, require_testbed,
    xcc::{Agent, metrics_text},
};

use crate::resource_sync::{NAMES, REGISTRY_NS, group_with, wait_for};

const NS: &str = "demo";
const WAIT: Duration = Duration::from_secs(60);
/// `--mcs-stale-after` of the agents: short, yet long enough to see the endpoints kept.
const STALE: Duration = Duration::from_secs(15);

fn mcs_api(cluster: &Cluster, kind: &str, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "multicluster.x-k8s.io",
        "v1beta1",
        kind,
    ));
    Api::namespaced_with(cluster.client.clone(), namespace, &resource)
}

fn imports(cluster: &Cluster, namespace: &str) -> Api<DynamicObject> {
    mcs_api(cluster, "ServiceImport", namespace)
}

fn exports(cluster: &Cluster, namespace: &str) -> Api<DynamicObject> {
    mcs_api(cluster, "ServiceExport", namespace)
}

/// A Service `name` in `namespace` of `cluster` with `ports` (JSON), headless or not, and its
/// EndpointSlice as the EndpointSlice controller would write it (`addresses`, port `tcp` →
/// 8080), and its ServiceExport.
async fn export(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    ports: Value,
    headless: bool,
    addresses: &[&str],
) {
    let mut spec = json!({"ports": ports, "selector": {"app": name}});
    if headless {
        spec["clusterIP"] = "None".into();
    }
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec});
    cluster.apply_yaml(&service.to_string()).await.unwrap();
    endpoint_slice(cluster, namespace, name, addresses).await;
    let export = json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": name, "namespace": namespace}});
    cluster.apply_yaml(&export.to_string()).await.unwrap();
}

/// The EndpointSlice of Service `name` as the EndpointSlice controller would write it:
/// `addresses`, port `tcp` → 8080.
async fn endpoint_slice(cluster: &Cluster, namespace: &str, name: &str, addresses: &[&str]) {
    let endpoints: Vec<Value> = addresses
        .iter()
        .enumerate()
        .map(|(i, a)| json!({"addresses": [a], "hostname": format!("pod-{i}"), "conditions": {"ready": true}}))
        .collect();
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-abcde"), "namespace": namespace, "labels": {
            "kubernetes.io/service-name": name,
            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
        "addressType": "IPv4",
        "ports": [{"name": "tcp", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints});
    cluster.apply_yaml(&slice.to_string()).await.unwrap();
}

/// Condition `type_` of ServiceExport `name`: (status, reason, message).
async fn condition(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let export = exports(cluster, namespace).get_opt(name).await.ok()??;
    let found = export.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .clone();
    let text = |k: &str| found[k].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

async fn wait_condition(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> String {
    wait_for(
        &format!(
            "on {}: ServiceExport {namespace}/{name} {type_}={status}/{reason}",
            cluster.name
        ),
        WAIT,
        || async {
            let (s, r, m) = condition(cluster, namespace, name, type_).await?;
            (s == status && r == reason).then_some(m)
        },
    )
    .await
}

/// The ServiceImport `namespace/name` of `cluster` once `check` holds for it.
async fn wait_import(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    what: &str,
    check: impl Fn(&DynamicObject) -> bool,
) -> DynamicObject {
    wait_for(
        &format!(
            "on {}: ServiceImport {namespace}/{name} {what}",
            cluster.name
        ),
        WAIT,
        || async {
            let import = imports(cluster, namespace).get_opt(name).await.ok()??;
            check(&import).then_some(import)
        },
    )
    .await
}

fn port_names(import: &DynamicObject) -> Vec<String> {
    let mut names: Vec<String> = import.data["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            format!(
                "{}/{}/{}",
                p["name"].as_str().unwrap_or(""),
                p["protocol"].as_str().unwrap_or(""),
                p["port"]
            )
        })
        .collect();
    names.sort();
    names
}

fn clusters_of(import: &DynamicObject) -> Vec<String> {
    let mut ids: Vec<String> = import.data["status"]["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["cluster"].as_str().map(str::to_string))
        .collect();
    ids.sort();
    ids
}

/// The derived Service of the import of `name` (found by its label).
async fn derived(cluster: &Cluster, namespace: &str, name: &str) -> Option<Service> {
    let services: Api<Service> = Api::namespaced(cluster.client.clone(), namespace);
    let params = ListParams::default().labels(&format!("mcs.xcc.test/service-import={name}"));
    services.list(&params).await.ok()?.items.into_iter().next()
}

/// The MCS EndpointSlices of `name` on `cluster`.
async fn mcs_slices(cluster: &Cluster, namespace: &str, name: &str) -> Vec<EndpointSlice> {
    let slices: Api<EndpointSlice> = Api::namespaced(cluster.client.clone(), namespace);
    let params =
        ListParams::default().labels(&format!("multicluster.kubernetes.io/service-name={name}"));
    slices
        .list(&params)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn source(slice: &EndpointSlice) -> String {
    slice
        .labels()
        .get("multicluster.kubernetes.io/source-cluster")
        .cloned()
        .unwrap_or_default()
}

/// Every cluster imports `name` from first: a ClusterSet IP that is the derived Service's, the
/// slice of the first cluster's endpoints with its port, labels as the MCS API says.
async fn imported_everywhere(bed: &Testbed) {
    for cluster in &bed.clusters {
        let import = wait_import(cluster, NS, "hello", "with a ClusterSet IP", |i| {
            i.data["spec"]["ips"]
                .as_array()
                .is_some_and(|ips| !ips.is_empty())
        })
        .await;
        assert_eq!(import.data["spec"]["type"], "ClusterSetIP");
        assert_eq!(port_names(&import), ["tcp/TCP/42"]);
        assert_eq!(clusters_of(&import), ["first"]);
        let service = derived(cluster, NS, "hello")
            .await
            .expect("the derived Service");
        let spec = service.spec.clone().unwrap();
        assert_ne!(service.name_any(), "hello");
        assert_eq!(spec.selector, None);
        assert_eq!(
            import.data["spec"]["ips"][0].as_str(),
            spec.cluster_ip.as_deref()
        );
        let slices = wait_for(
            &format!("on {}: the slice of hello from first", cluster.name),
            WAIT,
            || async {
                let slices = mcs_slices(cluster, NS, "hello").await;
                (slices.len() == 1).then_some(slices)
            },
        )
        .await;
        let slice = &slices[0];
        let labels = slice.labels();
        assert_eq!(labels["kubernetes.io/service-name"], service.name_any());
        assert_eq!(labels["multicluster.kubernetes.io/source-cluster"], "first");
        assert_eq!(
            labels["endpointslice.kubernetes.io/managed-by"],
            "mcs.xcc.test"
        );
        let mut addresses: Vec<&str> = slice
            .endpoints
            .iter()
            .map(|e| e.addresses[0].as_str())
            .collect();
        addresses.sort_unstable();
        assert_eq!(addresses, ["10.1.0.1", "10.1.0.2"]);
        assert!(slice.endpoints.iter().all(|e| e.hostname.is_some()));
        let ports: Vec<_> = slice
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone(), p.port))
            .collect();
        assert_eq!(ports, [(Some("tcp".to_string()), Some(8080))]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_exported_in_a_cluster_group_are_imported_by_every_member() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &NAMES).await.unwrap();
    let stale = format!("--mcs-stale-after={}s", STALE.as_secs());
    let members = group_with(
        &binaries,
        &bed,
        &[
            "--secret-replication=false",
            "--plumber=false",
            "--api-projection=false",
            &stale,
        ],
    )
    .await;
    let [first, second, third] = [0, 1, 2].map(|i| &bed.clusters[i]);
    for cluster in &bed.clusters {
        cluster.kubectl(&["create", "namespace", NS]).await.unwrap();
    }
    let tcp = json!([{"name": "tcp", "port": 42, "protocol": "TCP", "targetPort": 8080}]);

    // Export → import everywhere, the exporting cluster included.
    export(
        first,
        NS,
        "hello",
        tcp.clone(),
        false,
        &["10.1.0.1", "10.1.0.2"],
    )
    .await;
    wait_condition(first, NS, "hello", "Valid", "True", "Valid").await;
    imported_everywhere(&bed).await;
    wait_condition(first, NS, "hello", "Conflict", "False", "NoConflicts").await;
    // Converged: a change that calls for no write (a namespace no export is in) is handled
    // without one; nothing is rewritten for nothing.
    let agent = &members[2].agent;
    let mark = agent.mark("mcs").await.unwrap();
    third
        .kubectl(&["create", "namespace", "noise"])
        .await
        .unwrap();
    agent.handled(("local", "Namespace"), &mark).await.unwrap();
    assert_eq!(agent.writes_since(&mark).await.unwrap(), 0.0);
    // An endpoint more in the exporting cluster: one update of its publication, and one of
    // the slice in each member (the exporting one's written by its own agent).
    let agent = &members[0].agent;
    let mark = agent.mark("mcs").await.unwrap();
    endpoint_slice(first, NS, "hello", &["10.1.0.1", "10.1.0.2", "10.1.0.3"]).await;
    for cluster in &bed.clusters {
        wait_for(
            &format!("on {}: the third endpoint", cluster.name),
            WAIT,
            || async {
                let slices = mcs_slices(cluster, NS, "hello").await;
                (slices.len() == 1 && slices[0].endpoints.len() == 3).then_some(())
            },
        )
        .await;
    }
    agent
        .handled(("local", "EndpointSlice"), &mark)
        .await
        .unwrap();
    assert_eq!(agent.writes_since(&mark).await.unwrap(), 2.0);

    // A second exporter with one more port: the union, and Conflict on both exports.
    let more = json!([{"name": "tcp", "port": 42, "protocol": "TCP", "targetPort": 8080},
                      {"name": "udp", "port": 43, "protocol": "UDP", "targetPort": 8080}]);
    export(second, NS, "hello", more, false, &["10.2.0.1"]).await;
    for cluster in &bed.clusters {
        let import = wait_import(cluster, NS, "hello", "from both", |i| {
            clusters_of(i) == ["first", "second"]
        })
        .await;
        assert_eq!(port_names(&import), ["tcp/TCP/42", "udp/UDP/43"]);
    }
    for cluster in [first, second] {
        let message =
            wait_condition(cluster, NS, "hello", "Conflict", "True", "PortConflict").await;
        assert!(
            message.contains("second") && message.contains("first"),
            "{message}"
        );
    }

    // A ServiceImport edited by hand is put back; a derived Service deleted comes back.
    imports(third, NS)
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"ports": [{"name": "x", "port": 1, "protocol": "TCP"}]}}),
            ),
        )
        .await
        .unwrap();
    wait_import(third, NS, "hello", "put back", |i| {
        port_names(i) == ["tcp/TCP/42", "udp/UDP/43"]
    })
    .await;
    let gone = derived(third, NS, "hello").await.unwrap();
    Api::<Service>::namespaced(third.client.clone(), NS)
        .delete(&gone.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    let back = wait_for("on third: the derived Service recreated", WAIT, || async {
        derived(third, NS, "hello")
            .await
            .filter(|s| s.uid() != gone.uid())
    })
    .await;
    let slice = mcs_slices(third, NS, "hello").await.remove(0);
    Api::<EndpointSlice>::namespaced(third.client.clone(), NS)
        .delete(&slice.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    wait_for("on third: the slice recreated", WAIT, || async {
        mcs_slices(third, NS, "hello")
            .await
            .into_iter()
            .find(|s| s.name_any() == slice.name_any() && s.uid() != slice.uid())
    })
    .await;
    let ip = back.spec.unwrap().cluster_ip.unwrap();
    wait_import(
        third,
        NS,
        "hello",
        "with the new derived Service's IP",
        |i| i.data["spec"]["ips"][0] == ip.as_str(),
    )
    .await;

    // Headless against not headless: the oldest wins, Conflict on both.
    export(first, NS, "web", tcp.clone(), true, &["10.1.0.9"]).await;
    wait_import(third, NS, "web", "Headless", |i| {
        i.data["spec"]["type"] == "Headless"
    })
    .await;
    export(second, NS, "web", tcp.clone(), false, &["10.2.0.9"]).await;
    for cluster in [first, second] {
        wait_condition(cluster, NS, "web", "Conflict", "True", "TypeConflict").await;
    }
    let web = wait_import(third, NS, "web", "from both", |i| {
        clusters_of(i) == ["first", "second"]
    })
    .await;
    assert_eq!(web.data["spec"]["type"], "Headless");
    assert!(web.data["spec"]["ips"].as_array().is_none_or(Vec::is_empty));
    assert_eq!(
        derived(third, NS, "web")
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .as_deref(),
        Some("None")
    );

    // ExternalName: not valid, not imported.
    third
        .apply_yaml(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ext", "namespace": NS},
            "spec": {"type": "ExternalName", "externalName": "example.com"}}).to_string())
        .await
        .unwrap();
    third
        .apply_yaml(
            &json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
            "metadata": {"name": "ext", "namespace": NS}})
            .to_string(),
        )
        .await
        .unwrap();
    wait_condition(third, NS, "ext", "Valid", "False", "InvalidServiceType").await;
    // Decided by the agent that would have written it (the condition above is its proof).
    assert!(imports(third, NS).get_opt("ext").await.unwrap().is_none());

    // Unexport: the last exporter gone, everything goes, everywhere.
    for cluster in [first, second] {
        exports(cluster, NS)
            .delete("hello", &DeleteParams::default())
            .await
            .unwrap();
    }
    for cluster in &bed.clusters {
        wait_for(
            &format!(
                "on {}: hello's import, derived Service and slices gone",
                cluster.name
            ),
            WAIT,
            || async {
                let import = imports(cluster, NS).get_opt("hello").await.ok()?;
                let all_gone = import.is_none()
                    && derived(cluster, NS, "hello").await.is_none()
                    && mcs_slices(cluster, NS, "hello").await.is_empty();
                all_gone.then_some(())
            },
        )
        .await;
    }

    absent_namespace(first, second).await;
    gateway(first, second).await;
    refused_peer(first, third).await;
    stopped_peer(first, second, &members[0].agent).await;
}

/// An export in a namespace the importing cluster lacks: an Event says so; the import appears
/// with the namespace.
async fn absent_namespace(first: &Cluster, second: &Cluster) {
    first
        .kubectl(&["create", "namespace", "only-first"])
        .await
        .unwrap();
    let tcp = json!([{"name": "tcp", "port": 42, "protocol": "TCP"}]);
    export(first, "only-first", "lonely", tcp, false, &["10.1.0.3"]).await;
    wait_import(
        first,
        "only-first",
        "lonely",
        "on the exporting cluster",
        |_| true,
    )
    .await;
    let events: Api<CoreEvent> = Api::all(second.client.clone());
    let note = wait_for(
        "on second: an Event NamespaceAbsent on namespace only-first",
        WAIT,
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("NamespaceAbsent")
                        && e.involved_object.name.as_deref() == Some("only-first")
                })
                .and_then(|e| e.message)
        },
    )
    .await;
    assert!(note.contains("lonely"), "{note}");
    second
        .kubectl(&["create", "namespace", "only-first"])
        .await
        .unwrap();
    wait_import(
        second,
        "only-first",
        "lonely",
        "once the namespace exists",
        |_| true,
    )
    .await;
}

/// An export in the gateway data plane (by its annotation): the exporting agent opens the
/// Service on a node port of its own, and the importing slices list the exporting cluster's node
/// addresses with that port.
async fn gateway(first: &Cluster, second: &Cluster) {
    first
        .apply_yaml("apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n")
        .await
        .unwrap();
    first
        .kubectl(&[
            "patch",
            "node",
            "node-a",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"addresses":[{"type":"InternalIP","address":"192.168.50.1"}]}}"#,
        ])
        .await
        .unwrap();
    let tcp = json!([{"name": "tcp", "port": 42, "protocol": "TCP", "targetPort": 8080}]);
    export(first, NS, "gw", tcp, false, &["10.1.0.7"]).await;
    exports(first, NS)
        .patch(
            "gw",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"mcs.xcc.test/data-plane": "gateway"}}}),
            ),
        )
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(first.client.clone(), NS);
    let node_port = wait_for(
        "on first: the gateway Service with a node port",
        WAIT,
        || async {
            let params = ListParams::default().labels("mcs.xcc.test/gateway-for=gw");
            let gateway = services
                .list(&params)
                .await
                .ok()?
                .items
                .into_iter()
                .next()?;
            let spec = gateway.spec?;
            assert_eq!(spec.type_.as_deref(), Some("NodePort"));
            spec.ports?.first()?.node_port
        },
    )
    .await;
    let slice = wait_for(
        "on second: gw's slice lists first's node and node port",
        WAIT,
        || async {
            mcs_slices(second, NS, "gw")
                .await
                .into_iter()
                .find(|s| s.endpoints.iter().any(|e| e.addresses == ["192.168.50.1"]))
        },
    )
    .await;
    assert_eq!(slice.endpoints.len(), 1, "the node, not the pod");
    let ports: Vec<_> = slice.ports.iter().flatten().map(|p| p.port).collect();
    assert_eq!(ports, [Some(node_port)]);
}

/// The kubeconfig of `first` on `third` replaced by one the trust gate refuses (an exec user):
/// third's exports say so, and first's exports are no longer imported on third.
async fn refused_peer(first: &Cluster, third: &Cluster) {
    let tcp = json!([{"name": "tcp", "port": 42, "protocol": "TCP"}]);
    export(third, NS, "mine", tcp, false, &["10.3.0.1"]).await;
    wait_condition(third, NS, "mine", "PeersRead", "True", "AllPeersRead").await;
    wait_import(third, NS, "web", "from first and second", |i| {
        clusters_of(i) == ["first", "second"]
    })
    .await;
    let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n\
        users:\n- name: u\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true}\n\
        contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n";
    let indented: String = kubeconfig.lines().map(|l| format!("    {l}\n")).collect();
    third
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: first, namespace: {REGISTRY_NS}}}\n\
             type: k8s.cisco.com/cluster-registry-secret\nstringData:\n  kubeconfig: |\n{indented}"
        ))
        .await
        .unwrap();
    let message = wait_condition(third, NS, "mine", "PeersRead", "False", "PeerRefused").await;
    assert!(message.contains("first"), "{message}");
    wait_import(third, NS, "web", "without first", |i| {
        clusters_of(i) == ["second"]
    })
    .await;
    let _ = first;
}

/// `second`'s API server stopped: on `first`, second's endpoints stay for the stale period, then
/// go.
async fn stopped_peer(first: &Cluster, second: &Cluster, agent: &Agent) {
    let from_second = || async {
        mcs_slices(first, NS, "web")
            .await
            .iter()
            .filter(|s| source(s) == "second")
            .count()
    };
    wait_for("on first: web's slice from second", WAIT, || async {
        (from_second().await == 1).then_some(())
    })
    .await;
    let stopped = Instant::now();
    second.stop();
    // The agent on first saw the failure (its watch of second's publications fails), and the
    // endpoints are still there.
    wait_for("on first: the watch of second fails", WAIT, || async {
        let text = metrics_text(agent.admin).await.ok()?;
        text.lines()
            .any(|l| {
                l.starts_with("xcc_sync_watch_state{cluster=\"second\",kind=\"ExportedService\"")
                    && l.ends_with("} 1")
                    && !l.contains("\"synced\"")
                    && !l.contains("\"listing\"")
            })
            .then_some(())
    })
    .await;
    if stopped.elapsed() < STALE {
        assert_eq!(from_second().await, 1, "kept during the stale period");
    }
    wait_for(
        "on first: second's endpoints withdrawn",
        WAIT + STALE,
        || async { (from_second().await == 0).then_some(()) },
    )
    .await;
    assert!(
        stopped.elapsed() >= STALE,
        "withdrawn after {:?}, before the stale period",
        stopped.elapsed()
    );
}

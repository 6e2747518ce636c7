//! Kubeconfigs from Secrets are untrusted. Each of the four places that turn one into a client
//! (the controller's `<cluster>-kubeconfig`, a SecretImport's `remoteKubeconfig`, a Cluster's
//! peer Secret, and a peer Secret that group sync copied in from another member) is given two
//! hostile kubeconfigs after it has worked with a good one:
//! - an `exec` user that would create a marker file,
//! - a `tokenFile` naming the component's own token, with `server` pointing at a local listener
//!   that counts every connection.
//!
//! Each object must say `KubeconfigRejected` naming the field; nothing may run, no connection may
//! reach the listener, and what the object made before is still there. Then
//! `insecure-skip-tls-verify` is refused by default and accepted with `--allow-insecure-peers`,
//! with the `InsecurePeer` condition.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::{ByteString, api::core::v1::Secret, api::events::v1::Event};
use kube::{
    Api,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    },
};
use xcc_e2e::{Cluster, Testbed, require_testbed};

use crate::{
    cluster_group::exchange,
    resource_sync::{
        REGISTRY_NS, TEST_RULE, clusters_api, install_member_with, wait_for, wait_secret,
    },
    secrets::{NS, create_namespace, import_yaml, ready, secret, secrets, wait_ready},
    xcc_dns::{controller, envoy, management, manifest},
};

/// A TCP listener that accepts and counts connections; nothing should ever reach it.
struct Tripwire {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl Tripwire {
    fn start() -> Tripwire {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Tripwire { port, connections }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn kubeconfig(server: &str, cluster_extra: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n{cluster_extra}\
         users:\n- name: u\n  user:\n{user}contexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
         current-context: x\n"
    )
}

/// An `exec` user that would touch `marker`, for a server that is the tripwire.
fn exec_kubeconfig(tripwire: &Tripwire, marker: &Path) -> String {
    kubeconfig(
        &format!("https://127.0.0.1:{}", tripwire.port),
        "",
        &format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      \
             args: [\"-c\", \"touch {}\"]\n      interactiveMode: Never\n",
            marker.display()
        ),
    )
}

/// A `tokenFile` user naming `token_file` (the component's own token), for the tripwire.
fn token_file_kubeconfig(tripwire: &Tripwire, token_file: &Path) -> String {
    kubeconfig(
        &format!("https://127.0.0.1:{}", tripwire.port),
        "",
        &format!("    tokenFile: {}\n", token_file.display()),
    )
}

/// `good` with TLS verification switched off instead of its CA.
fn insecure_kubeconfig(good: &str) -> String {
    good.lines()
        .map(|line| {
            if line.trim_start().starts_with("certificate-authority-data:") {
                "    insecure-skip-tls-verify: true"
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The token of the kubeconfig at `path`, written alone into a file next to it: the component's
/// own credential, which a `tokenFile` would send away.
fn own_token_file(path: &Path) -> PathBuf {
    let text = std::fs::read_to_string(path).unwrap();
    let token = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .expect("a token in the kubeconfig");
    let file = path.with_extension("token");
    std::fs::write(&file, token).unwrap();
    file
}

async fn set_data(api: &Api<Secret>, name: &str, key: &str, value: &str) {
    let patch = serde_json::json!({"data": {key: ByteString(value.as_bytes().to_vec())}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Warning Events with `reason` about object `name`.
async fn warnings(cluster: &Cluster, reason: &str, name: &str) -> usize {
    let events: Api<Event> = Api::all(cluster.client.clone());
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .count()
}

/// `(Ready status, Ready reason, Ready message)` of Cluster `name` on `cluster`.
async fn cluster_ready(cluster: &Cluster, name: &str) -> Option<(String, String, String)> {
    let object = clusters_api(cluster).get_opt(name).await.ok()??;
    let ready = object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .clone();
    Some((
        ready["status"].as_str()?.into(),
        ready["reason"].as_str()?.into(),
        ready["message"].as_str()?.into(),
    ))
}

async fn wait_cluster_rejected(cluster: &Cluster, name: &str, field: &str) {
    let what = format!(
        "on {}: Cluster {name} KubeconfigRejected naming {field}",
        cluster.name
    );
    wait_for(&what, Duration::from_secs(60), || async {
        cluster_ready(cluster, name)
            .await
            .filter(|(status, reason, message)| {
                status == "False" && reason == "KubeconfigRejected" && message.contains(field)
            })
    })
    .await;
    assert!(
        warnings(cluster, "KubeconfigRejected", name).await > 0,
        "a Warning Event for Cluster {name} on {}",
        cluster.name
    );
}

fn import_message(object: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let condition = object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .clone();
    Some((
        condition["status"].as_str()?.into(),
        condition["reason"].as_str()?.into(),
        condition["message"].as_str()?.into(),
    ))
}

async fn import_condition(
    cluster: &Cluster,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "replication.apiresources.multicluster.x-tanzu.vmware.com",
        "v1alpha1",
        "SecretImport",
    ));
    let api: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), NS, &resource);
    import_message(&api.get_opt(name).await.ok()??, type_)
}

async fn wait_import_rejected(cluster: &Cluster, name: &str, field: &str) {
    let what = format!("SecretImport {name} KubeconfigRejected naming {field}");
    wait_for(&what, Duration::from_secs(60), || async {
        import_condition(cluster, name, "Ready")
            .await
            .filter(|(status, reason, message)| {
                status == "False" && reason == "KubeconfigRejected" && message.contains(field)
            })
    })
    .await;
    assert!(
        warnings(cluster, "KubeconfigRejected", name).await > 0,
        "a Warning Event for SecretImport {name}"
    );
}

/// `(state, message)` of `cluster` in the status of the walkthrough's GatewayDNS.
async fn gateway_cluster(mgmt: &Cluster, cluster: &str) -> Option<(String, String)> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("connectivity.tanzu.vmware.com", "v1alpha1", "GatewayDNS"),
        "gatewaydns",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(mgmt.client.clone(), "dev-team", &resource);
    let object = api.get_opt("dev-team-gateway-dns").await.ok()??;
    let entry = object.data["status"]["clusters"]
        .as_array()?
        .iter()
        .find(|c| c["cluster"] == cluster)?
        .clone();
    Some((
        entry["state"].as_str()?.into(),
        entry["message"].as_str()?.into(),
    ))
}

/// On `cluster`: Secret `kc-<case>` holding `kubeconfig`, and SecretImport `import-<case>` of
/// the service cluster's Secret `source` through it.
async fn import_through(cluster: &Cluster, case: &str, source: &str, kubeconfig: &str) {
    let kubeconfig_secret = format!("kc-{case}");
    secrets(cluster)
        .create(
            &PostParams::default(),
            &secret(&kubeconfig_secret, &[("kubeconfig", kubeconfig)], &[]),
        )
        .await
        .unwrap();
    cluster
        .apply_yaml(
            &import_yaml(&format!("import-{case}"), source)
                .replace("energy-source", &kubeconfig_secret),
        )
        .await
        .unwrap();
}

/// The reference's test Secret, in the namespace its rule names.
const TEST_SECRET_IN_REGISTRY: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: test-secret, namespace: cluster-registry}\ndata: {}\n";

fn peer_secret(name: &str, kubeconfig: &str) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(REGISTRY_NS.into()),
            ..Default::default()
        },
        type_: Some("k8s.cisco.com/cluster-registry-secret".into()),
        data: Some(
            [(
                "kubeconfig".to_string(),
                ByteString(kubeconfig.as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    }
}

fn registry_cluster_yaml(name: &str) -> String {
    format!(
        "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}}}\n\
         spec:\n  clusterID: {name}-00000000-0000-0000-0000-000000000000\n  authInfo:\n    \
         secretRef: {{name: {name}, namespace: {REGISTRY_NS}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_kubeconfigs_are_refused_in_every_place_that_reads_one() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["management", "first", "second"])
        .await
        .unwrap();
    let (mgmt, first, second) = (
        bed.cluster("management"),
        bed.cluster("first"),
        bed.cluster("second"),
    );
    let tripwire = Tripwire::start();
    let markers = tempfile::tempdir().unwrap();
    let marker = |case: &str| markers.path().join(case);

    // Members of a cluster group, each agent with every reconciler; the second allows insecure
    // peers.
    let _first = install_member_with(&binaries, first, &[]).await;
    let _second = install_member_with(&binaries, second, &["--allow-insecure-peers"]).await;
    exchange(first, second).await;

    // The controller, with both members as Cluster API clusters and the walkthrough's GatewayDNS.
    management(&bed, &["first", "second"]).await;
    let controller_kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let _controller = controller(&bed, &controller_kubeconfig.path);
    envoy(first, r#"[{"ip":"10.9.8.7"}]"#).await;
    mgmt.kubectl(&[
        "apply",
        "-f",
        &manifest("manifests/examples/dev-team-gateway-dns.yaml"),
    ])
    .await
    .unwrap();
    let slices = |cluster: &Cluster| -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
        ));
        Api::namespaced_with(cluster.client.clone(), "xcc-dns", &resource)
    };
    for cluster in [first, second] {
        wait_for("the gateway slice", Duration::from_secs(60), || async {
            slices(cluster)
                .get_opt("dev-team-first-gateway")
                .await
                .ok()?
        })
        .await;
    }

    // Two imports on the first cluster, reading the management cluster (as service cluster)
    // with its admin kubeconfig, and their copies.
    let mgmt_kubeconfig = std::fs::read_to_string(&mgmt.kubeconfig).unwrap();
    create_namespace(mgmt).await;
    create_namespace(first).await;
    create_namespace(second).await;
    for case in ["exec", "token", "insecure"] {
        secrets(mgmt)
            .create(
                &PostParams::default(),
                &secret(
                    &format!("upstream-{case}"),
                    &[("v", "from-management")],
                    &[],
                ),
            )
            .await
            .unwrap();
    }
    for case in ["exec", "token"] {
        import_through(first, case, &format!("upstream-{case}"), &mgmt_kubeconfig).await;
    }
    wait_ready(first, "SecretImport", "import-exec", ("True", "Replicated")).await;
    wait_ready(
        first,
        "SecretImport",
        "import-token",
        ("True", "Replicated"),
    )
    .await;
    assert!(
        secrets(first)
            .get_opt("upstream-exec")
            .await
            .unwrap()
            .is_some()
    );

    // The group is formed: each sees the other through its peer Secret.
    for (cluster, peer) in [(first, "second"), (second, "first")] {
        wait_for("the peer is Ready", Duration::from_secs(60), || async {
            cluster_ready(cluster, peer)
                .await
                .filter(|(status, _, _)| status == "True")
        })
        .await;
    }

    // A copy the first cluster holds from the second: the reference's test-secret rule, made
    // on the second (group sync brings the rule to the first).
    second.apply_yaml(TEST_SECRET_IN_REGISTRY).await.unwrap();
    second.apply_yaml(TEST_RULE).await.unwrap();
    wait_secret(first, "test-secret", Some(&_second.id)).await;

    // The hostile kubeconfigs. First the controller's, the imports', and peer Secrets that
    // arrive by group sync (made on one member, copied to the other while the group is whole).
    let started = Instant::now();
    let agent_token = own_token_file(&first.dir().join("xcc-dns-xcc-agent.kubeconfig"));
    let controller_token = own_token_file(&controller_kubeconfig.path);
    let mgmt_secrets: Api<Secret> = Api::namespaced(mgmt.client.clone(), "dev-team");
    let first_secrets = secrets(first);
    for (api, name, key, kubeconfig) in [
        (
            &mgmt_secrets,
            "first-kubeconfig",
            "value",
            exec_kubeconfig(&tripwire, &marker("controller")),
        ),
        (
            &mgmt_secrets,
            "second-kubeconfig",
            "value",
            token_file_kubeconfig(&tripwire, &controller_token),
        ),
        (
            &first_secrets,
            "kc-exec",
            "kubeconfig",
            exec_kubeconfig(&tripwire, &marker("import")),
        ),
        (
            &first_secrets,
            "kc-token",
            "kubeconfig",
            token_file_kubeconfig(&tripwire, &agent_token),
        ),
    ] {
        set_data(api, name, key, &kubeconfig).await;
    }
    let registry = |c: &Cluster| -> Api<Secret> { Api::namespaced(c.client.clone(), REGISTRY_NS) };
    for (cluster, name, kubeconfig) in [
        (
            second,
            "evil-exec",
            exec_kubeconfig(&tripwire, &marker("copied")),
        ),
        (
            first,
            "evil-token",
            token_file_kubeconfig(&tripwire, &agent_token),
        ),
    ] {
        registry(cluster)
            .create(&PostParams::default(), &peer_secret(name, &kubeconfig))
            .await
            .unwrap();
        cluster
            .apply_yaml(&registry_cluster_yaml(name))
            .await
            .unwrap();
    }

    // Each object says why, naming the Secret and the field.
    let rejected = |entry: Option<(String, String)>, field: &str, secret: &str| {
        entry.is_some_and(|(state, message)| {
            state == "KubeconfigRejected" && message.contains(field) && message.contains(secret)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(rejected(
        gateway_cluster(mgmt, "first").await,
        "exec",
        "dev-team/first-kubeconfig",
    ) && rejected(
        gateway_cluster(mgmt, "second").await,
        "tokenFile",
        "dev-team/second-kubeconfig",
    )) {
        assert!(
            Instant::now() < deadline,
            "GatewayDNS names both refusals; first: {:?}, second: {:?}",
            gateway_cluster(mgmt, "first").await,
            gateway_cluster(mgmt, "second").await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(warnings(mgmt, "KubeconfigRejected", "dev-team-gateway-dns").await > 0);
    wait_import_rejected(first, "import-exec", "exec").await;
    wait_import_rejected(first, "import-token", "tokenFile").await;
    // Refused where they were made, and where group sync copied them.
    for cluster in [first, second] {
        wait_cluster_rejected(cluster, "evil-exec", "exec").await;
        wait_cluster_rejected(cluster, "evil-token", "tokenFile").await;
    }

    // Then the peer Secrets the group itself stands on, one on each side.
    let peers_hostile = Instant::now();
    for (cluster, peer, kubeconfig) in [
        (first, "second", exec_kubeconfig(&tripwire, &marker("peer"))),
        (
            second,
            "first",
            token_file_kubeconfig(&tripwire, &agent_token),
        ),
    ] {
        set_data(&registry(cluster), peer, "kubeconfig", &kubeconfig).await;
    }
    wait_cluster_rejected(first, "second", "exec").await;
    wait_cluster_rejected(second, "first", "tokenFile").await;

    // Ten seconds after the hostile Secrets: nothing ran, nothing connected.
    let waited = started.elapsed().min(peers_hostile.elapsed());
    if let Some(rest) = Duration::from_secs(10).checked_sub(waited) {
        // sleep: a window after the proof above (both kubeconfigs rejected in the statuses):
        // a command or a connection would come at any time, not in answer to one event.
        tokio::time::sleep(rest).await;
    }
    for case in ["controller", "import", "peer", "copied"] {
        assert!(
            !marker(case).exists(),
            "the exec command of the {case} kubeconfig ran"
        );
    }
    assert_eq!(
        tripwire.connections(),
        0,
        "a hostile kubeconfig's server was contacted"
    );

    // What each object made before is still there.
    for cluster in [first, second] {
        assert!(
            slices(cluster)
                .get_opt("dev-team-first-gateway")
                .await
                .unwrap()
                .is_some(),
            "the gateway slice on {} is kept",
            cluster.name
        );
    }
    for case in ["exec", "token"] {
        let copy = secrets(first)
            .get(&format!("upstream-{case}"))
            .await
            .unwrap();
        assert_eq!(
            crate::secrets::value(&copy, "v").as_deref(),
            Some("from-management")
        );
    }
    assert!(
        registry(first)
            .get_opt("test-secret")
            .await
            .unwrap()
            .is_some(),
        "the copy from the second is kept"
    );
    assert!(
        registry(first)
            .get_opt("evil-exec")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        registry(second)
            .get_opt("evil-token")
            .await
            .unwrap()
            .is_some()
    );

    // insecure-skip-tls-verify: refused by the first agent, accepted by the second (started
    // with --allow-insecure-peers), which says the peer is not verified.
    let insecure = insecure_kubeconfig(&mgmt_kubeconfig);
    for cluster in [first, second] {
        import_through(cluster, "insecure", "upstream-insecure", &insecure).await;
    }
    wait_import_rejected(first, "import-insecure", "insecure-skip-tls-verify").await;
    wait_ready(
        second,
        "SecretImport",
        "import-insecure",
        ("True", "Replicated"),
    )
    .await;
    let (status, reason, message) = import_condition(second, "import-insecure", "InsecurePeer")
        .await
        .expect("an InsecurePeer condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "TLSNotVerified")
    );
    assert!(message.contains(&format!("{NS}/kc-insecure")), "{message}");
    assert!(
        ready(second, "SecretImport", "import-insecure")
            .await
            .is_some()
    );
}

/// An HTTPS server that answers 401 to everything, as a peer whose token was revoked does, and
/// records when each request came.
struct RevokedPeer {
    port: u16,
    ca_pem: String,
    requests: Arc<std::sync::Mutex<Vec<(Instant, String)>>>,
}

impl RevokedPeer {
    async fn start() -> RevokedPeer {
        let ca = xcc_e2e::certs::ca("revoked-peer-ca").unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca.issuer).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests: Arc<std::sync::Mutex<Vec<(Instant, String)>>> = Arc::default();
        let seen = requests.clone();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let seen = seen.clone();
            async move {
                seen.lock()
                    .unwrap()
                    .push((Instant::now(), request.uri().path().to_string()));
                (
                    axum::http::StatusCode::UNAUTHORIZED,
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#,
                )
            }
        });
        tokio::spawn(crate::https::serve(
            listener,
            cert.der().clone(),
            key.serialize_der(),
            app,
        ));
        RevokedPeer {
            port,
            ca_pem: ca.pem,
            requests,
        }
    }

    fn kubeconfig(&self) -> String {
        let ca = xcc_kube::wire::encode_base64(&self.ca_pem);
        kubeconfig(
            &format!("https://127.0.0.1:{}", self.port),
            &format!("    certificate-authority-data: {ca}\n"),
            "    token: stolen-and-revoked\n",
        )
    }

    /// Requests that arrived in `[from, to)`, by path.
    fn between(&self, from: Instant, to: Instant) -> Vec<String> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, path)| path.clone())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_answering_401_is_not_hammered_and_its_objects_say_why() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["first"]).await.unwrap();
    let first = bed.cluster("first");
    let _member = install_member_with(&binaries, first, &[]).await;
    create_namespace(first).await;
    let peer = RevokedPeer::start().await;

    // The same revoked peer as a member of the group and as the service cluster of an import.
    let started = Instant::now();
    let kubeconfig = peer.kubeconfig();
    Api::<Secret>::namespaced(first.client.clone(), REGISTRY_NS)
        .create(&PostParams::default(), &peer_secret("revoked", &kubeconfig))
        .await
        .unwrap();
    first
        .apply_yaml(&registry_cluster_yaml("revoked"))
        .await
        .unwrap();
    import_through(first, "revoked", "upstream", &kubeconfig).await;

    // Both say why.
    wait_for("the Cluster says 401", Duration::from_secs(60), || async {
        cluster_ready(first, "revoked")
            .await
            .filter(|(status, _, message)| status == "False" && message.contains("Unauthorized"))
    })
    .await;
    wait_for("the import says 401", Duration::from_secs(60), || async {
        import_condition(first, "import-revoked", "Ready")
            .await
            .filter(|(status, _, message)| status == "False" && message.contains("Unauthorized"))
    })
    .await;

    // The second minute after the peer appeared: every reconciler together asks it at most 30
    // times.
    let minute = Duration::from_secs(60);
    if let Some(rest) = (2 * minute).checked_sub(started.elapsed()) {
        // sleep: the measured window (requests per minute to the peer).
        tokio::time::sleep(rest).await;
    }
    let first_minute = peer.between(started, started + minute);
    let second_minute = peer.between(started + minute, started + 2 * minute);
    eprintln!(
        "requests to a peer answering 401: {} in the first minute, {} in the second: {:?}",
        first_minute.len(),
        second_minute.len(),
        second_minute
    );
    assert!(!first_minute.is_empty(), "the peer was asked at all");
    assert!(
        second_minute.len() <= 30,
        "{} requests in the second minute",
        second_minute.len()
    );
}

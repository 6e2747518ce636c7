//! No credential in any error, on the test bed: kubeconfig Secrets that hold a credential (the
//! canary) and are wrong in every way a kubeconfig can be (it does not parse, a field of the
//! wrong type, bad base64 and bad PEM, an unknown field, an `exec` user, an `auth-provider`, a
//! file path), read by every place that reads one: the controller (a Cluster API cluster's
//! `<cluster>-kubeconfig`, said in the GatewayDNS status), the agent's SecretImports
//! (`remoteKubeconfig`) and its cluster registry (a Cluster's peer Secret). Each object must say
//! what is wrong and in which Secret; then every Event, every object's status and both
//! processes' logs are searched for the canary, in both log formats (two rounds: the agent in
//! JSON and the controller in text, then the other way round, with new objects each round).
//! API projection's and plumber's Secrets: [`agent`]; the CLI: [`cli`].

use std::time::Duration;

use k8s_openapi::{ByteString, api::core::v1::Secret, api::events::v1::Event};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, PostParams},
};
use xcc_e2e::{Cluster, Testbed, require_testbed, xcc::binary};

use crate::{
    resource_sync::{REGISTRY_NS, clusters_api, install_member_with, start_agent_with},
    secrets::{NS, create_namespace, kind, secret, secrets, wait_for},
    xcc_dns::{management, manifest},
};

mod agent;
mod cli;

const CANARY: &str = "s3cr3t-CANARY-4b8a";

fn base64(bytes: &[u8]) -> String {
    serde_json::to_value(ByteString(bytes.to_vec()))
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

/// Every spelling of the canary that could leak.
fn spellings() -> [String; 3] {
    [
        CANARY.to_string(),
        base64(CANARY.as_bytes())[..12].to_string(),
        // Its tail, as an error that cut the beginning would show it; with capitals, which no
        // UID, hash or generated name has (its hex part alone turns up in those by chance).
        CANARY[CANARY.len() - 8..].to_string(),
    ]
}

fn kubeconfig(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {cluster}\nusers:\n\
         - name: u\n  user: {user}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
         current-context: x\n"
    )
}

/// `(case, kubeconfig)`: every kind of wrong kubeconfig, each with the canary in it.
fn cases() -> Vec<(&'static str, String)> {
    let server = "server: 'https://127.0.0.1:1'";
    let token = format!("{{token: {CANARY}}}");
    // PEM whose body (base64, as PEM bodies are) is the canary; all of it in base64, as
    // kubeconfigs hold PEM.
    let pem = |kind: &str| {
        let body = base64(CANARY.as_bytes());
        base64(format!("-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n").as_bytes())
    };
    vec![
        (
            "unclosed",
            format!("users:\n- name: u\n  user: {{token: \"{CANARY}}}\n"),
        ),
        ("users-string", format!("users: {CANARY}\n")),
        (
            "token-list",
            kubeconfig(&format!("{{{server}}}"), &format!("{{token: [{CANARY}]}}")),
        ),
        (
            "ca-base64",
            kubeconfig(
                &format!("{{{server}, certificate-authority-data: '{CANARY}!'}}"),
                &token,
            ),
        ),
        (
            "ca-pem",
            kubeconfig(
                &format!(
                    "{{{server}, certificate-authority-data: {}}}",
                    pem("CERTIFICATE")
                ),
                &token,
            ),
        ),
        (
            "key-base64",
            kubeconfig(
                &format!("{{{server}}}"),
                &format!(
                    "{{client-certificate-data: {}, client-key-data: '{CANARY}!'}}",
                    pem("CERTIFICATE")
                ),
            ),
        ),
        (
            "key-pem",
            kubeconfig(
                &format!("{{{server}}}"),
                &format!(
                    "{{client-certificate-data: {}, client-key-data: {}}}",
                    pem("CERTIFICATE"),
                    pem("PRIVATE KEY")
                ),
            ),
        ),
        (
            "unknown-field",
            kubeconfig(
                &format!("{{{server}}}"),
                &format!("{{token: {CANARY}, newfield: x}}"),
            ),
        ),
        (
            "exec",
            kubeconfig(
                &format!("{{{server}}}"),
                &format!("{{exec: {{command: /bin/echo, args: [{CANARY}]}}}}"),
            ),
        ),
        (
            "auth-provider",
            kubeconfig(
                &format!("{{{server}}}"),
                &format!("{{auth-provider: {{name: oidc, config: {{id-token: {CANARY}}}}}}}"),
            ),
        ),
        (
            "server-not-url",
            kubeconfig(&format!("{{server: '{CANARY}'}}"), &token),
        ),
        (
            "token-file",
            kubeconfig(
                &format!("{{{server}}}"),
                &format!("{{tokenFile: /{CANARY}}}"),
            ),
        ),
    ]
}

fn kubeconfig_secret(name: &str, namespace: &str, key: &str, text: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        data: Some([(key.to_string(), ByteString(text.as_bytes().to_vec()))].into()),
        ..Default::default()
    }
}

/// `(status, reason, message)` of condition `type_` of `object`.
fn condition(object: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
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

fn gateway_api(mgmt: &Cluster) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("connectivity.tanzu.vmware.com", "v1alpha1", "GatewayDNS"),
        "gatewaydns",
    );
    Api::namespaced_with(mgmt.client.clone(), "dev-team", &resource)
}

/// `(state, message)` of Cluster API cluster `cluster` in the GatewayDNS status.
async fn gateway_cluster(mgmt: &Cluster, cluster: &str) -> Option<(String, String)> {
    let object = gateway_api(mgmt)
        .get_opt("dev-team-gateway-dns")
        .await
        .ok()??;
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

/// The round's objects: for each case, a Cluster API cluster on the management cluster, and a
/// SecretImport and a cluster-registry Cluster on the member, each reading a canary Secret.
async fn create_round(mgmt: &Cluster, member: &Cluster, round: usize) {
    let mgmt_secrets: Api<Secret> = Api::namespaced(mgmt.client.clone(), "dev-team");
    let registry: Api<Secret> = Api::namespaced(member.client.clone(), REGISTRY_NS);
    for (case, text) in cases() {
        let name = format!("canary{round}-{case}");
        // The controller: a Cluster API cluster the walkthrough's GatewayDNS selects.
        mgmt.apply_yaml(&format!(
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {{name: {name}, \
             namespace: dev-team, labels: {{hasContour: 'true'}}}}\nspec: {{}}\n"
        ))
        .await
        .unwrap();
        mgmt_secrets
            .create(
                &PostParams::default(),
                &kubeconfig_secret(&format!("{name}-kubeconfig"), "dev-team", "value", &text),
            )
            .await
            .unwrap();
        // The agent's SecretImport.
        secrets(member)
            .create(
                &PostParams::default(),
                &kubeconfig_secret(&format!("{name}-kc"), NS, "kubeconfig", &text),
            )
            .await
            .unwrap();
        member
            .apply_yaml(&format!(
                "apiVersion: replication.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1\n\
                 kind: SecretImport\nmetadata: {{name: {name}, namespace: {NS}}}\n\
                 spec: {{secret: {{name: {name}}}, remoteKubeconfig: {{name: {name}-kc}}}}\n"
            ))
            .await
            .unwrap();
        // The agent's cluster registry: a peer Cluster and its Secret.
        let mut peer = kubeconfig_secret(&name, REGISTRY_NS, "kubeconfig", &text);
        peer.type_ = Some("k8s.cisco.com/cluster-registry-secret".into());
        registry
            .create(&PostParams::default(), &peer)
            .await
            .unwrap();
        member
            .apply_yaml(&format!(
                "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1\nkind: Cluster\n\
                 metadata: {{name: {name}}}\nspec:\n  clusterID: {name}-0000\n  authInfo:\n    \
                 secretRef: {{name: {name}, namespace: {REGISTRY_NS}}}\n"
            ))
            .await
            .unwrap();
    }
}

/// Waits until every object of the round says its kubeconfig cannot be used, naming its Secret
/// (the reasons differ: refused by the trust gate, invalid, a client that cannot be built).
async fn wait_round_refused(mgmt: &Cluster, member: &Cluster, round: usize) {
    let imports: Api<DynamicObject> =
        Api::namespaced_with(member.client.clone(), NS, &kind("SecretImport"));
    for (case, _) in cases() {
        let name = format!("canary{round}-{case}");
        wait_for(
            &format!("GatewayDNS says cluster {name} is refused"),
            Duration::from_secs(90),
            || async {
                gateway_cluster(mgmt, &name)
                    .await
                    .filter(|(state, message)| {
                        state != "Ready" && message.contains(&format!("dev-team/{name}-kubeconfig"))
                    })
            },
        )
        .await;
        wait_for(
            &format!("SecretImport {name} is refused"),
            Duration::from_secs(90),
            || async {
                let object = imports.get_opt(&name).await.ok()??;
                condition(&object, "Ready").filter(|(status, _, message)| {
                    status == "False" && message.contains(&format!("{name}-kc"))
                })
            },
        )
        .await;
        wait_for(
            &format!("Cluster {name} is refused"),
            Duration::from_secs(90),
            || async {
                let object = clusters_api(member).get_opt(&name).await.ok()??;
                condition(&object, "Ready").filter(|(status, _, message)| {
                    status == "False" && message.contains(&format!("{REGISTRY_NS}/{name}"))
                })
            },
        )
        .await;
    }
}

/// Every Event's text and every status of the kinds that read kubeconfigs, on `cluster`.
async fn said_on(cluster: &Cluster) -> String {
    let mut said = String::new();
    let events: Api<Event> = Api::all(cluster.client.clone());
    for event in events.list(&ListParams::default()).await.unwrap().items {
        said.push_str(&serde_json::to_string(&event).unwrap());
        said.push('\n');
    }
    let kinds = [
        ("cluster.x-k8s.io", "v1beta1", "Cluster", None),
        (
            "connectivity.tanzu.vmware.com",
            "v1alpha1",
            "GatewayDNS",
            Some("gatewaydns"),
        ),
        (
            "replication.apiresources.multicluster.x-tanzu.vmware.com",
            "v1alpha1",
            "SecretImport",
            None,
        ),
        ("clusterregistry.k8s.cisco.com", "v1alpha1", "Cluster", None),
        (
            "projection.apiresources.multicluster.x-tanzu.vmware.com",
            "v1alpha1",
            "DownstreamClusterLink",
            None,
        ),
        (
            "plumber.jnytnai0613.github.io",
            "v1",
            "ClusterDetector",
            None,
        ),
        ("plumber.jnytnai0613.github.io", "v1", "Replicator", None),
    ];
    for (group, version, kind, plural) in kinds {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let resource = match plural {
            Some(plural) => ApiResource::from_gvk_with_plural(&gvk, plural),
            None => ApiResource::from_gvk(&gvk),
        };
        let api: Api<DynamicObject> = Api::all_with(cluster.client.clone(), &resource);
        // A kind this cluster does not serve has nothing to say.
        let Ok(list) = api.list(&ListParams::default()).await else {
            continue;
        };
        for object in list.items {
            said.push_str(&object.data["status"].to_string());
            said.push('\n');
        }
    }
    said
}

fn assert_no_canary(what: &str, text: &str) {
    for spelling in spellings() {
        if let Some(at) = text.find(&spelling) {
            let line = text[..at].rsplit('\n').next().unwrap_or_default();
            panic!("{what}: {spelling:?} shown, in a line starting {line:?}");
        }
    }
}

/// The controller under `kubeconfig`, logging in `format` to `log`.
fn controller(
    kubeconfig: &std::path::Path,
    format: &str,
    log: &std::path::Path,
) -> xcc_e2e::Process {
    xcc_e2e::spawn(
        "xcc-controller",
        &binary("xcc-controller"),
        &[
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--admin-listen=127.0.0.1:{}", xcc_e2e::free_port()),
            "--log=info,xcc_controller=debug,xcc_kube=debug,xcc_sync=debug".into(),
            format!("--log-format={format}"),
        ],
        log,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_credentials_in_kubeconfig_secrets_appear_in_no_event_condition_or_log() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["management", "first"])
        .await
        .unwrap();
    let (mgmt, first) = (bed.cluster("management"), bed.cluster("first"));

    let mut member = install_member_with(&binaries, first, &["--log-format=json"]).await;
    create_namespace(first).await;
    // Something to import, so that only the kubeconfig stands in the way.
    secrets(first)
        .create(
            &PostParams::default(),
            &secret("placeholder", &[("v", "x")], &[]),
        )
        .await
        .unwrap();
    management(&bed, &["first"]).await;
    let controller_kubeconfig = mgmt
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    mgmt.kubectl(&[
        "apply",
        "-f",
        &manifest("manifests/examples/dev-team-gateway-dns.yaml"),
    ])
    .await
    .unwrap();

    let rounds = [("json", "text"), ("text", "json")];
    for (round, (agent_format, controller_format)) in rounds.into_iter().enumerate() {
        let controller_log = mgmt
            .dir()
            .join(format!("xcc-controller-{controller_format}.log"));
        let agent_log = first.dir().join(format!("xcc-agent-{agent_format}.log"));
        if round > 0 {
            // The agent again, in the other format (the first one stopped before).
            drop(std::mem::replace(
                &mut member.agent,
                start_agent_with(
                    first,
                    &format!("xcc-agent-{agent_format}.log"),
                    &[&format!("--log-format={agent_format}")],
                )
                .await,
            ));
        }
        if round > 0 {
            // The GatewayDNS status lists 20 clusters at most: the last round's go.
            for (case, _) in cases() {
                mgmt.kubectl(&[
                    "-n",
                    "dev-team",
                    "delete",
                    "clusters.cluster.x-k8s.io",
                    &format!("canary{}-{case}", round - 1),
                    "--wait=false",
                ])
                .await
                .unwrap();
            }
        }
        let process = controller(
            &controller_kubeconfig.path,
            controller_format,
            &controller_log,
        );
        create_round(mgmt, first, round).await;
        wait_round_refused(mgmt, first, round).await;

        // What each object says is a sentence about the Secret, not Rust.
        let (_, message) = gateway_cluster(mgmt, &format!("canary{round}-unclosed"))
            .await
            .unwrap();
        assert!(message.contains("line"), "the line is said: {message}");
        for text in [&message] {
            for rust in ["ServiceError", "ApiError", "Status {"] {
                assert!(!text.contains(rust), "{rust:?} in {text}");
            }
        }

        for cluster in [mgmt, first] {
            assert_no_canary(
                &format!("Events and statuses on {}", cluster.name),
                &said_on(cluster).await,
            );
        }
        drop(process);
        let log = if agent_log.exists() {
            std::fs::read_to_string(&agent_log).unwrap()
        } else {
            std::fs::read_to_string(first.dir().join("xcc-agent.log")).unwrap()
        };
        assert_no_canary(&format!("the agent's {agent_format} log"), &log);
        let log = std::fs::read_to_string(&controller_log).unwrap();
        assert!(!log.is_empty(), "the controller logged");
        assert_no_canary(&format!("the controller's {controller_format} log"), &log);
    }
    // The first agent logged in JSON to the member's usual log file.
    let log = std::fs::read_to_string(first.dir().join("xcc-agent.log")).unwrap();
    assert!(
        log.trim_start().starts_with('{'),
        "JSON: {}",
        &log[..log.len().min(200)]
    );
    assert_no_canary("the agent's json log", &log);
}

/// Without Cluster API's CRDs, the controller says so in words (which CRD, what to do), and
/// nothing it logs meanwhile is Rust (`ApiError: 404 page not found: ... (Status {...})` was).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_says_the_cluster_api_crds_are_not_installed() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["management"])
        .await
        .unwrap();
    let mgmt = bed.cluster("management");
    // Our CRDs only (the test bed's `install_crds` adds Cluster API's).
    mgmt.kubectl(&["apply", "-f", &manifest("manifests/crds")])
        .await
        .unwrap();
    for format in ["text", "json"] {
        let log = mgmt
            .dir()
            .join(format!("xcc-controller-no-capi-{format}.log"));
        let process = controller(&mgmt.kubeconfig, format, &log);
        let (line, _) = wait_for(
            &format!("the controller ({format}) says the CRDs are missing"),
            Duration::from_secs(60),
            || async {
                std::fs::read_to_string(&log)
                    .ok()?
                    .lines()
                    .find(|l| l.contains("Cluster API CRDs are not installed"))
                    .map(str::to_string)
            },
        )
        .await;
        assert!(line.contains("clusters.cluster.x-k8s.io"), "{line}");
        assert!(line.contains("clusterctl init"), "{line}");
        if format == "json" {
            assert!(line.starts_with('{'), "a JSON line: {line}");
        }
        drop(process);
        let text = std::fs::read_to_string(&log).unwrap();
        for rust in [
            "ServiceError",
            "ApiError",
            "Status {",
            "Failed to parse error data",
        ] {
            assert!(
                !text.contains(rust),
                "{rust:?} in the controller's log: {text}"
            );
        }
    }
}

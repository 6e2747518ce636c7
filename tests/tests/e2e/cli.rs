//! kubectl-xcc run as a user runs it: the built binary as a child process, `KUBECONFIG` pointing
//! at a kubeconfig with a context per test-bed cluster (and a few bad ones), on three real API
//! servers with our agents running. Every failing command must say what is wrong on one line,
//! exit non-zero, and change nothing: the objects are read back after each one.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use serde_json::{Map, Value};
use xcc_e2e::{Cluster, Testbed, free_port, require_testbed, xcc::binary};

use crate::resource_sync::{
    NAMES, OWNER, REGISTRY_NS, TEST_RULE, TEST_SECRET, apply_namespaced, clusters_api,
    install_member, wait_for, wait_secret, wait_state,
};
use crate::xcc_dns::KUARD;

type Mapping = Map<String, Value>;

/// What one run of the binary did.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// Asserts a failure with `code` and a one-line error containing every one of `words`.
    pub(crate) fn fails(&self, code: i32, words: &[&str]) {
        assert_eq!(self.code, code, "{self:?}");
        let line = self.stderr.trim_end();
        assert!(
            line.starts_with("error: ") && !line.contains('\n'),
            "not one line: {self:?}"
        );
        for word in words {
            assert!(line.contains(word), "{word:?} not in {line:?}");
        }
    }

    pub(crate) fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "{self:?}");
        &self.stdout
    }
}

/// The user's terminal: a kubeconfig and a home directory.
pub(crate) struct User {
    pub(crate) kubeconfig: PathBuf,
    pub(crate) home: PathBuf,
}

impl User {
    pub(crate) async fn run(&self, args: &[&str]) -> Run {
        let mut command = tokio::process::Command::new(binary("kubectl-xcc"));
        for (var, _) in std::env::vars() {
            if var.starts_with("XCC_") {
                command.env_remove(var);
            }
        }
        let out = command
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into(),
            stderr: String::from_utf8_lossy(&out.stderr).into(),
        }
    }
}

fn entries(root: &Value, list: &str) -> Vec<Value> {
    root[list].as_array().cloned().unwrap_or_default()
}

/// One kubeconfig with the admin context of every cluster (named after it), plus `exec-user`
/// (the first cluster with an exec credential) and `unreachable` (nothing listens there).
pub(crate) fn user_kubeconfig(bed: &Testbed, dir: &Path) -> PathBuf {
    let mut clusters = Vec::new();
    let mut users = Vec::new();
    let mut contexts = Vec::new();
    for cluster in &bed.clusters {
        let text = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
        let root: Value = xcc_kube::yaml::from_str(&text).unwrap();
        clusters.extend(entries(&root, "clusters"));
        users.extend(entries(&root, "users"));
        contexts.extend(entries(&root, "contexts"));
    }
    let first = clusters[0]["cluster"].clone();
    let extra = format!(
        "clusters:
- name: gone
  cluster: {{server: 'https://127.0.0.1:{port}', certificate-authority-data: {ca}}}
users:
- name: runner
  user:
    exec: {{apiVersion: client.authentication.k8s.io/v1, command: get-token}}
contexts:
- name: exec-user
  context: {{cluster: first, user: runner}}
- name: unreachable
  context: {{cluster: gone, user: first}}
",
        port = free_port(),
        ca = first["certificate-authority-data"].as_str().unwrap(),
    );
    let extra: Value = xcc_kube::yaml::from_str(&extra).unwrap();
    clusters.extend(entries(&extra, "clusters"));
    users.extend(entries(&extra, "users"));
    contexts.extend(entries(&extra, "contexts"));
    let mut root = Mapping::new();
    root.insert("apiVersion".into(), "v1".into());
    root.insert("kind".into(), "Config".into());
    root.insert("clusters".into(), Value::Array(clusters));
    root.insert("users".into(), Value::Array(users));
    root.insert("contexts".into(), Value::Array(contexts));
    root.insert("current-context".into(), "first".into());
    let path = dir.join("user.kubeconfig");
    std::fs::write(&path, xcc_kube::yaml::to_string(&root).unwrap()).unwrap();
    path
}

/// Names of the Cluster objects on `cluster`, sorted.
async fn cluster_names(cluster: &Cluster) -> Vec<String> {
    let mut names: Vec<String> = clusters_api(cluster)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    names.sort();
    names
}

/// The plumber Secret's kubeconfig on `cluster` (`None`: no Secret), where plumberctl keeps
/// it: Secret `config` in namespace `kubeconfig`.
async fn plumber_secret(cluster: &Cluster) -> Option<Value> {
    let secret = Api::<Secret>::namespaced(cluster.client.clone(), "kubeconfig")
        .get_opt("config")
        .await
        .unwrap()?;
    let data = secret.data?.get("config")?.0.clone();
    Some(xcc_kube::yaml::from_slice(&data).unwrap())
}

fn context_names(kubeconfig: &Value) -> Vec<String> {
    entries(kubeconfig, "contexts")
        .iter()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect()
}

/// kubectl itself completes `kubectl xcc ...` (kubectl 1.26+: `kubectl __complete xcc WORDS`
/// runs `kubectl_complete-xcc WORDS` from PATH, a link to the plugin): the test bed's kubectl,
/// no cluster needed.
#[tokio::test]
async fn kubectl_completes_the_plugin_through_kubectl_complete_xcc() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(&binaries.kubectl, bin.join("kubectl")).unwrap();
    std::os::unix::fs::symlink(binary("kubectl-xcc"), bin.join("kubectl-xcc")).unwrap();
    let complete = |words: &'static [&'static str]| {
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = std::process::Command::new(bin.join("kubectl"))
            .arg("__complete")
            .args(words)
            .env("PATH", path)
            .env("KUBECONFIG", dir.path().join("none"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    // kubectl lists the plugin among its commands.
    let out = complete(&["x"]);
    assert!(out.lines().any(|l| l.starts_with("xcc")), "{out}");
    // Without kubectl_complete-xcc on PATH, kubectl has nothing for its arguments.
    let out = complete(&["xcc", "st"]);
    assert!(!out.contains("status"), "{out}");
    std::os::unix::fs::symlink(binary("kubectl-xcc"), bin.join("kubectl_complete-xcc")).unwrap();
    let out = complete(&["xcc", "st"]);
    assert!(out.lines().any(|l| l.starts_with("status\t")), "{out}");
    assert!(out.ends_with(":4\n"), "no file names: {out}");
    let out = complete(&["xcc", "status", "-o", ""]);
    let values: Vec<&str> = out.lines().collect();
    assert_eq!(values, ["table", "json", "yaml", ":4"], "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_xcc_joins_explains_lists_and_registers_plumber_targets() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &NAMES).await.unwrap();
    let mut members = Vec::new();
    for cluster in &bed.clusters {
        members.push(install_member(&binaries, cluster).await);
    }
    let [first, second, third] = [0, 1, 2].map(|i| &bed.clusters[i]);
    let home = bed.dir().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let user = User {
        kubeconfig: user_kubeconfig(&bed, bed.dir()),
        home,
    };

    // Help and completions work without any cluster.
    assert!(user.run(&["--help"]).await.ok().contains("Exit codes"));
    for spelling in ["completion", "completions"] {
        assert!(
            user.run(&[spelling, "bash"])
                .await
                .ok()
                .contains("complete -F __kubectl_xcc_start kubectl-xcc")
        );
    }

    // Bad input changes nothing: an unknown context, an unreachable cluster.
    user.run(&["cluster", "join", "--context", "first", "--context", "nope"])
        .await
        .fails(2, &["\"nope\"", "first, second, third"]);
    user.run(&[
        "cluster",
        "join",
        "--context",
        "first",
        "--context",
        "unreachable",
        "--timeout",
        "3s",
    ])
    .await
    .fails(
        1,
        &[
            "cannot reach context \"unreachable\"",
            "nothing was changed",
        ],
    );
    for cluster in [first, second, third] {
        assert_eq!(cluster_names(cluster).await, [cluster.name.as_str()]);
    }
    // Link (tests/tests/e2e/cli_link.rs): an unknown context is a usage error.
    user.run(&[
        "link",
        "--service-context",
        "first",
        "--workload-context",
        "nope",
    ])
    .await
    .fails(2, &["\"nope\"", "first, second, third"]);

    // One command forms the group of three; the agents then sync a rule's Secret.
    let out = user
        .run(&[
            "cluster",
            "join",
            "--context",
            "first",
            "--context",
            "second",
            "--context",
            "third",
        ])
        .await;
    assert!(
        out.ok().contains("cluster third (context third) joined"),
        "{out:?}"
    );
    for cluster in [first, second, third] {
        for name in NAMES {
            let type_ = if name == cluster.name {
                "Local"
            } else {
                "Peer"
            };
            wait_state(cluster, name, "Ready", type_, "True").await;
        }
    }
    // Again: idempotent.
    user.run(&["cluster", "join", "--context", "first,second,third"])
        .await
        .ok();
    let third_id = third.kube_system_uid().await.unwrap();
    apply_namespaced(third, TEST_SECRET).await;
    first.apply_yaml(TEST_RULE).await.unwrap();
    for cluster in [first, second] {
        wait_secret(cluster, "test-secret", Some(&third_id)).await;
    }

    // Status lists the group and the rule, with their state.
    let json = user
        .run(&["status", "--context", "second", "-o", "json"])
        .await;
    let report: serde_json::Value = serde_json::from_str(json.ok()).unwrap();
    let items = report["items"].as_array().unwrap();
    for name in NAMES {
        assert!(
            items
                .iter()
                .any(|i| i["kind"] == "Cluster" && i["name"] == name && i["ready"] == "True"),
            "{report}"
        );
    }
    wait_for(
        "status lists the rule on second",
        Duration::from_secs(60),
        || async {
            let out = user.run(&["status", "--context", "second"]).await;
            out.ok()
                .lines()
                .any(|l| l.starts_with("ResourceSyncRule") && l.contains("test-secret-sink"))
                .then_some(())
        },
    )
    .await;
    let table = user.run(&["status"]).await;
    assert!(table.ok().starts_with("KIND"), "{table:?}");
    assert!(table.stdout.contains("Cluster "), "{table:?}");
    // Namespaced kinds as kubectl get: the context's namespace (none here: `default`), -n, -A;
    // cluster-scoped kinds always.
    for (args, namespace) in [
        (&["status", "-o", "json"][..], serde_json::json!("default")),
        (
            &["status", "-n", "kube-system", "-o", "json"][..],
            serde_json::json!("kube-system"),
        ),
        (&["status", "-A", "-o", "json"][..], serde_json::Value::Null),
    ] {
        let out = user.run(args).await;
        let report: serde_json::Value = serde_json::from_str(out.ok()).unwrap();
        assert_eq!(report["namespace"], namespace, "{report}");
        assert!(
            report["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["kind"] == "Cluster"),
            "{report}"
        );
    }
    user.run(&["status", "-n", "Not_A_Namespace"])
        .await
        .fails(2, &["Not_A_Namespace"]);
    // `-n` completes with the namespaces of the context's cluster, as kubectl's.
    let out = user
        .run(&["__complete", "status", "--context", "second", "-n", "kube-"])
        .await;
    let candidates: Vec<&str> = out.ok().lines().collect();
    assert!(
        candidates.contains(&"kube-system") && candidates.contains(&"kube-public"),
        "{out:?}"
    );
    assert!(
        candidates
            .iter()
            .all(|c| c.starts_with("kube-") || c.starts_with(':'))
    );

    // dns: the agent on the first cluster serves a slice the way xcc-controller writes it,
    // and explains its answer.
    first
        .apply_yaml(
            "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: dev-team-cluster-a-gateway
  namespace: xcc-dns
  labels:
    kubernetes.io/service-name: dev-team-cluster-a-gateway
    endpointslice.kubernetes.io/managed-by: xcc-controller.connectivity.tanzu.vmware.com
  annotations:
    connectivity.tanzu.vmware.com/dns-hostname: '*.gateway.cluster-a.dev-team.clusters.xcc.test'
    connectivity.tanzu.vmware.com/gateway-dns-ref: dev-team/gateway-dns
addressType: IPv4
endpoints:
- addresses: [10.20.30.40]
",
        )
        .await
        .unwrap();
    let agent_url = format!("http://{}", members[0].agent.admin);
    let explained = wait_for(
        "the agent explains KUARD",
        Duration::from_secs(30),
        || async {
            let out = user
                .run(&["dns", KUARD, "--agent-url", &agent_url, "-o", "json"])
                .await;
            let value: serde_json::Value = serde_json::from_str(out.ok()).unwrap();
            (!value["answers"].as_array()?.is_empty()).then_some(value)
        },
    )
    .await;
    assert_eq!(explained["answers"][0]["data"], "10.20.30.40");
    let source = &explained["sources"][0];
    assert_eq!(
        source["endpointSlice"]["name"],
        "dev-team-cluster-a-gateway"
    );
    assert_eq!(source["endpointSlice"]["namespace"], "xcc-dns");
    assert_eq!(source["gatewayDns"], "dev-team/gateway-dns");
    assert_eq!(source["cluster"]["name"], "cluster-a");
    assert_eq!(source["cluster"]["namespace"], "dev-team");
    assert_eq!(
        source["labels"]["kubernetes.io/service-name"],
        "dev-team-cluster-a-gateway"
    );
    let table = user.run(&["dns", KUARD, "--agent-url", &agent_url]).await;
    assert!(table.ok().contains("dev-team/gateway-dns"), "{table:?}");
    // The same through the API server's service proxy, as a user without --agent-url asks. No
    // pods run here: the agent stands behind a Service whose endpoint is a Pod object given the
    // address 192.0.2.10 by hand (the API server proxies only to a Pod's own address) and the
    // agent's admin port (the test bed's egress proxy connects to 127.0.0.1 at that port).
    let port = members[0].agent.admin.port();
    first
        .apply_yaml(
            "apiVersion: v1
kind: Pod
metadata: {name: xcc-agent-local, namespace: xcc-dns}
spec:
  serviceAccountName: xcc-agent
  automountServiceAccountToken: false
  containers: [{name: xcc-agent, image: xcc:latest}]
",
        )
        .await
        .unwrap();
    first
        .kubectl(&[
            "-n",
            "xcc-dns",
            "patch",
            "pod",
            "xcc-agent-local",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"podIP":"192.0.2.10","podIPs":[{"ip":"192.0.2.10"}]}}"#,
        ])
        .await
        .unwrap();
    first
        .apply_yaml(&format!(
            "apiVersion: v1
kind: Service
metadata: {{name: xcc-agent-local, namespace: xcc-dns}}
spec:
  ports: [{{name: admin, port: {port}, protocol: TCP}}]
---
apiVersion: v1
kind: Endpoints
metadata: {{name: xcc-agent-local, namespace: xcc-dns}}
subsets:
- addresses:
  - ip: 192.0.2.10
    targetRef: {{kind: Pod, name: xcc-agent-local, namespace: xcc-dns}}
  ports: [{{name: admin, port: {port}, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: xcc-agent-local
  namespace: xcc-dns
  labels: {{kubernetes.io/service-name: xcc-agent-local}}
addressType: IPv4
endpoints:
- addresses: [192.0.2.10]
  targetRef: {{kind: Pod, name: xcc-agent-local, namespace: xcc-dns}}
ports: [{{name: admin, port: {port}, protocol: TCP}}]
"
        ))
        .await
        .unwrap();
    let proxied = user
        .run(&[
            "dns",
            KUARD,
            "--context",
            "first",
            "--agent-service",
            "xcc-agent-local",
            "-o",
            "yaml",
        ])
        .await;
    let proxied: serde_json::Value = xcc_kube::yaml::from_str(proxied.ok()).unwrap();
    assert_eq!(proxied["answers"], explained["answers"]);
    assert_eq!(proxied["sources"], explained["sources"]);
    let long = format!("{}.xcc.test", "a".repeat(260));
    user.run(&["dns", &long, "--agent-url", &agent_url])
        .await
        .fails(2, &["not a DNS name"]);

    // plumber: activate on the first cluster, then add, view and remove as plumberctl does.
    let path = user.kubeconfig.display().to_string();
    let out = user
        .run(&["plumber", "activate", "-p", &path, "-a", "first"])
        .await;
    assert!(out.ok().contains("Successfully activated"), "{out:?}");
    assert!(user.home.join(".plumber/config.toml").is_file());
    user.run(&["plumber", "add", "-c", "second"]).await.ok();
    let stored = plumber_secret(first).await.expect("the Secret is written");
    assert_eq!(context_names(&stored), ["second"]);
    let token = entries(&stored, "users")[0]["user"]["token"].clone();
    assert!(token.as_str().is_some_and(|t| !t.is_empty()), "token kept");
    user.run(&["plumber", "add", "-c", "third"]).await.ok();
    let view = user.run(&["plumber", "view", "-o", "json"]).await;
    let view: serde_json::Value = serde_json::from_str(view.ok()).unwrap();
    assert_eq!(view["contexts"][0]["context"], "second");
    assert_eq!(view["contexts"][1]["cluster"], "third");
    assert_eq!(view["contexts"][1]["user"], "third");
    let table = user.run(&["plumber", "view"]).await;
    assert!(table.ok().starts_with("CONTEXT"), "{table:?}");

    // Refused credentials, an unknown context: one line, nothing written.
    let before = Api::<Secret>::namespaced(first.client.clone(), "kubeconfig")
        .get("config")
        .await
        .unwrap();
    user.run(&["plumber", "add", "-c", "exec-user"])
        .await
        .fails(1, &["user \"runner\" exec", "would run a program"]);
    user.run(&["plumber", "add", "-c", "nope"])
        .await
        .fails(2, &["\"nope\""]);
    let after = Api::<Secret>::namespaced(first.client.clone(), "kubeconfig")
        .get("config")
        .await
        .unwrap();
    assert_eq!(before.resource_version(), after.resource_version());

    user.run(&["plumber", "remove", "-c", "second"]).await.ok();
    let stored = plumber_secret(first).await.unwrap();
    assert_eq!(context_names(&stored), ["third"]);
    assert!(
        entries(&stored, "users")
            .iter()
            .all(|u| u["name"] != "second"),
        "the removed context's user goes with it"
    );

    // Leave: the third cluster leaves; the others forget it, and it forgets them.
    let out = user.run(&["cluster", "leave", "--context", "third"]).await;
    assert!(out.ok().contains("left its group"), "{out:?}");
    for cluster in [first, second] {
        wait_for(
            &format!("on {}: Cluster third gone", cluster.name),
            Duration::from_secs(60),
            || async {
                let names = cluster_names(cluster).await;
                (!names.iter().any(|n| n == "third")).then_some(())
            },
        )
        .await;
        let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), REGISTRY_NS);
        wait_for(
            &format!("on {}: Secret third gone", cluster.name),
            Duration::from_secs(60),
            || async { secrets.get_opt("third").await.ok()?.is_none().then_some(()) },
        )
        .await;
    }
    assert_eq!(cluster_names(third).await, ["third"]);
    // The first and second still form a group.
    wait_state(first, "second", "Ready", "Peer", "True").await;
    // The leaving cluster's own Cluster was there before join: kept.
    let own = clusters_api(third).get("third").await.unwrap();
    assert!(own.annotations().get(OWNER).is_none());
}

//! The install users apply (manifests/install/), applied with `kubectl apply -k` as a user would,
//! then each component run as a local process with a token of the installed ServiceAccount and
//! the installed Deployment's environment: it does its initial work (every watch listed, the
//! Lease held) without one WARN or ERROR line, and a feature switched off by a component is
//! absent from the log, the metrics and the RBAC.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use xcc_e2e::{
    Cluster, Process, Testbed, free_port, require_testbed, spawn,
    xcc::{binary, http_status},
};

use crate::secrets::{repo, wait_for};

/// The workspace version: every xcc image of the manifests is tagged with it.
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn install_dir(name: &str) -> String {
    repo()
        .join("manifests/install")
        .join(name)
        .display()
        .to_string()
}

/// Every manifest and kustomization under `dir`, recursively.
fn manifest_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            manifest_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml")
            || path.file_name().is_some_and(|n| n == "Kustomization")
        {
            out.push(path);
        }
    }
}

/// No test bed needed: a release bumps the workspace version, and the manifests must follow.
#[test]
fn every_xcc_image_is_tagged_with_the_workspace_version_and_pulled_if_not_present() {
    let mut files = Vec::new();
    manifest_files(&repo().join("manifests"), &mut files);
    let mut images = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            if let Some(image) = trimmed.strip_prefix("image: ") {
                let (name, tag) = image.rsplit_once(':').unwrap_or((image, ""));
                if name != "xcc" && !name.ends_with("/xcc") {
                    continue;
                }
                images += 1;
                assert_eq!(
                    tag,
                    VERSION,
                    "{}:{}: image {image} is not tagged {VERSION}",
                    file.display(),
                    i + 1
                );
                let policy = lines[i..]
                    .iter()
                    .take_while(|l| !l.trim_start().starts_with("- name:") || *l == line)
                    .find_map(|l| l.trim_start().strip_prefix("imagePullPolicy: "));
                assert_eq!(
                    policy,
                    Some("IfNotPresent"),
                    "{}:{}: image {image} without imagePullPolicy: IfNotPresent",
                    file.display(),
                    i + 1
                );
            }
            if let Some(tag) = trimmed.strip_prefix("newTag: ") {
                assert_eq!(tag, VERSION, "{}:{}", file.display(), i + 1);
            }
        }
    }
    // The agent, the controller and the patcher Job at least.
    assert!(images >= 3, "only {images} xcc images found in manifests/");
}

/// The workload install with `components` (names under manifests/install/components/), as
/// `kubectl kustomize` renders it for a user's overlay kept beside a checkout named `xcc`: its
/// text and its objects.
fn render(kubectl: &Path, components: &[&str]) -> (String, Vec<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo(), dir.path().join("xcc")).unwrap();
    let overlay = dir.path().join("overlay");
    std::fs::create_dir(&overlay).unwrap();
    let components: Vec<String> = components
        .iter()
        .map(|c| format!("../xcc/manifests/install/components/{c}"))
        .collect();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources: [../xcc/manifests/install/workload]\ncomponents: [{}]\n",
            components.join(", ")
        ),
    )
    .unwrap();
    let out = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(&overlay)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{components:?} do not build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let objects = serde_saphyr::from_multiple(&text).unwrap();
    (text, objects)
}

/// `kind namespace/name` of an object.
fn id(object: &serde_json::Value) -> String {
    let meta = &object["metadata"];
    format!(
        "{} {}/{}",
        object["kind"].as_str().unwrap_or_default(),
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().unwrap_or_default()
    )
}

/// The agent's container (env by name, ports) in rendered objects.
fn agent_container(objects: &[serde_json::Value]) -> &serde_json::Value {
    let deployment = objects
        .iter()
        .find(|o| id(o) == "Deployment xcc-dns/xcc-agent")
        .expect("the agent's Deployment");
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

fn env_value<'a>(container: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].as_str().unwrap_or("(from a field)"))
}

/// Every `(apiGroup, resource)` a Role or ClusterRole of `objects` grants something on, with the
/// role's name.
fn grants(objects: &[serde_json::Value]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for role in objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
    {
        for rule in role["rules"].as_array().into_iter().flatten() {
            for group in rule["apiGroups"].as_array().into_iter().flatten() {
                for resource in rule["resources"].as_array().into_iter().flatten() {
                    out.push((
                        id(role),
                        group.as_str().unwrap_or_default().to_string(),
                        resource.as_str().unwrap_or_default().to_string(),
                    ));
                }
            }
        }
    }
    out
}

/// What a feature brings into the workload install: the agent's switch, its API group (its CRDs
/// and every rule on its kinds), the label of its objects, and what else belongs to it alone.
struct Feature {
    component: &'static str,
    /// The agent's variable that switches it, or None for the patcher Job.
    switch: Option<&'static str>,
    /// Its kinds' API group.
    group: Option<&'static str>,
    /// The value of label xcc.test/feature (or app.kubernetes.io/name) of its objects.
    label: (&'static str, &'static str),
    /// Text that appears nowhere in the install without it.
    words: &'static [&'static str],
    /// `(apiGroup, resource)` no role grants without it.
    rules: &'static [(&'static str, &'static str)],
}

const FEATURES: &[Feature] = &[
    Feature {
        component: "without-secret-replication",
        switch: Some("XCC_SECRET_REPLICATION"),
        group: Some("replication.apiresources.multicluster.x-tanzu.vmware.com"),
        label: ("xcc.test/feature", "secret-replication"),
        words: &["xcc-agent-secret-replication"],
        rules: &[],
    },
    Feature {
        component: "without-resource-sync",
        switch: Some("XCC_RESOURCE_SYNC"),
        group: Some("clusterregistry.k8s.cisco.com"),
        label: ("xcc.test/feature", "resource-sync"),
        words: &["xcc-cluster-reader", "cluster-registry"],
        rules: &[],
    },
    Feature {
        component: "without-plumber",
        switch: Some("XCC_PLUMBER"),
        group: Some("plumber.jnytnai0613.github.io"),
        label: ("xcc.test/feature", "plumber"),
        words: &["plumber-system", "xcc-agent-plumber"],
        rules: &[],
    },
    Feature {
        component: "without-api-projection",
        switch: Some("XCC_API_PROJECTION"),
        group: Some("projection.apiresources.multicluster.x-tanzu.vmware.com"),
        label: ("xcc.test/feature", "api-projection"),
        // The aggregated API server's port and settings, its identity, its namespace.
        words: &[
            "9443",
            "XCC_PROJECTION_",
            "xcc-projection-proxy",
            "services-toolkit",
            "projection",
        ],
        // APIServices are projection's alone; ClusterRoleBindings are not (resource sync grants
        // the peer reader Secrets cluster-wide through one while a rule names no namespace), so
        // projection's own are found by its label instead.
        rules: &[("apiregistration.k8s.io", "apiservices")],
    },
    Feature {
        component: "without-mcs",
        switch: Some("XCC_MCS"),
        group: Some("multicluster.x-k8s.io"),
        label: ("xcc.test/feature", "mcs"),
        words: &["xcc-agent-mcs", "xcc-mcs-peer-reader"],
        rules: &[
            ("about.k8s.io", "clusterproperties"),
            ("mcs.xcc.test", "exportedservices"),
        ],
    },
    Feature {
        component: "without-coredns-patcher",
        switch: None,
        group: None,
        label: ("app.kubernetes.io/name", "xcc-coredns-patcher"),
        // Its ServiceAccount and Roles are named after it; CoreDNS's objects appear only in them.
        words: &["xcc-coredns-patcher", "coredns", "kind: Job"],
        rules: &[],
    },
];

/// What of `feature` `objects` hold, each finding named.
fn remains(feature: &Feature, text: &str, objects: &[serde_json::Value]) -> Vec<String> {
    findings(feature, text, objects)
        .into_iter()
        .filter_map(|(what, found)| found.then_some(what))
        .collect()
}

/// Each check of `feature`: what it looks for, and whether it is there.
fn findings(feature: &Feature, text: &str, objects: &[serde_json::Value]) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for word in feature.words {
        out.push((format!("the text {word:?}"), text.contains(word)));
    }
    let (key, value) = feature.label;
    let labelled: Vec<String> = objects
        .iter()
        .filter(|o| o["metadata"]["labels"][key] == value)
        .map(id)
        .collect();
    out.push((
        format!("objects labelled {key}={value} {labelled:?}"),
        !labelled.is_empty(),
    ));
    let grants = grants(objects);
    if let Some(group) = feature.group {
        let crds: Vec<String> = objects
            .iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition" && o["spec"]["group"] == group)
            .map(id)
            .collect();
        out.push((format!("CRDs of {group} {crds:?}"), !crds.is_empty()));
        let roles: Vec<&String> = grants
            .iter()
            .filter(|(_, g, _)| g == group)
            .map(|(role, _, _)| role)
            .collect();
        out.push((format!("rules on {group} in {roles:?}"), !roles.is_empty()));
    }
    for (group, resource) in feature.rules {
        let roles: Vec<&String> = grants
            .iter()
            .filter(|(_, g, r)| g == group && r == resource)
            .map(|(role, _, _)| role)
            .collect();
        out.push((
            format!("rules on {resource}.{group} in {roles:?}"),
            !roles.is_empty(),
        ));
    }
    if let Some(switch) = feature.switch {
        let value = env_value(agent_container(objects), switch);
        out.push((
            format!("the agent's {switch}={value:?}"),
            value != Some("false"),
        ));
    }
    out
}

/// Each component leaves nothing of its feature in the rendered install: not its switch on, not
/// its CRDs, not a rule on its kinds, not its objects, ports or settings; and the install without
/// the component has all of them (the check finds what it looks for).
#[test]
fn every_component_leaves_nothing_of_its_feature() {
    let Some(bed) = xcc_e2e::require_testbed() else {
        return;
    };
    let (full_text, full) = render(&bed.kubectl, &[]);
    for feature in FEATURES {
        let missing: Vec<String> = findings(feature, &full_text, &full)
            .into_iter()
            .filter_map(|(what, found)| (!found).then_some(what))
            .collect();
        assert!(
            missing.is_empty(),
            "{}: the install without it lacks {missing:?}",
            feature.component
        );
        let (text, objects) = render(&bed.kubectl, &[feature.component]);
        let left = remains(feature, &text, &objects);
        assert!(
            left.is_empty(),
            "{} leaves {}",
            feature.component,
            left.join(", ")
        );
        // Only that feature: the agent and its DNS stay.
        let container = agent_container(&objects);
        let ports: Vec<i64> = container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["containerPort"].as_i64())
            .collect();
        assert!(
            ports.contains(&5353) && ports.contains(&9180),
            "{}: {ports:?}",
            feature.component
        );
        for other in FEATURES.iter().filter(|f| f.component != feature.component) {
            assert!(
                !remains(other, &text, &objects).is_empty(),
                "{} also took out {}",
                feature.component,
                other.component
            );
        }
    }
    // All of them at once: an agent that serves DNS and nothing else of the install remains.
    let all: Vec<&str> = FEATURES.iter().map(|f| f.component).collect();
    let (text, objects) = render(&bed.kubectl, &all);
    for feature in FEATURES {
        let left = remains(feature, &text, &objects);
        assert!(left.is_empty(), "with all components: {}", left.join(", "));
    }
    let kinds: std::collections::BTreeSet<String> = objects.iter().map(id).collect();
    eprintln!("with every component: {kinds:?}");
}

/// The component that lets the patcher restart CoreDNS: the flag on, and `patch` on CoreDNS's
/// Deployment alone; without it, the patcher may not touch a Deployment.
#[test]
fn restart_coredns_adds_the_flag_and_only_the_rule_it_needs() {
    let Some(bed) = xcc_e2e::require_testbed() else {
        return;
    };
    let job_env = |objects: &[serde_json::Value], name: &str| {
        let job = objects
            .iter()
            .find(|o| id(o) == "Job xcc-dns/xcc-coredns-patcher")
            .unwrap();
        env_value(&job["spec"]["template"]["spec"]["containers"][0], name).map(str::to_string)
    };
    let (_, plain) = render(&bed.kubectl, &[]);
    assert_eq!(
        job_env(&plain, "XCC_RESTART_COREDNS").as_deref(),
        Some("false")
    );
    let patcher_grants = |objects: &[serde_json::Value]| -> Vec<String> {
        grants(objects)
            .into_iter()
            .filter(|(role, _, _)| role.ends_with("/xcc-coredns-patcher"))
            .map(|(_, group, resource)| format!("{resource}.{group}"))
            .collect()
    };
    assert_eq!(
        patcher_grants(&plain),
        [
            "configmaps.",
            "endpointslices.discovery.k8s.io",
            "services."
        ]
    );
    let (_, restart) = render(&bed.kubectl, &["restart-coredns"]);
    assert_eq!(
        job_env(&restart, "XCC_RESTART_COREDNS").as_deref(),
        Some("true")
    );
    let role = restart
        .iter()
        .find(|o| id(o) == "Role kube-system/xcc-coredns-patcher")
        .unwrap();
    let rules = role["rules"].as_array().unwrap();
    let deployments: Vec<_> = rules
        .iter()
        .filter(|r| r["resources"][0] == "deployments")
        .collect();
    assert_eq!(
        deployments,
        [&serde_json::json!({
            "apiGroups": ["apps"], "resources": ["deployments"],
            "resourceNames": ["coredns"], "verbs": ["patch"],
        })]
    );
    // The rest of the Role as it was.
    assert_eq!(rules.len(), 3, "{rules:?}");
}

/// `GET path` on `addr`: status and body.
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.get(9..12)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// The environment of container 0 of Deployment `namespace/name` as installed, with the
/// downward-API fields a pod would get filled in from `fields`.
async fn deployment_env(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    fields: &BTreeMap<&str, String>,
) -> BTreeMap<String, String> {
    let json = cluster
        .kubectl(&["-n", namespace, "get", "deployment", name, "-o", "json"])
        .await
        .unwrap();
    let deployment: serde_json::Value = serde_json::from_str(&json).unwrap();
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    env.iter()
        .map(|var| {
            let key = var["name"].as_str().unwrap().to_string();
            let value = match var["value"].as_str() {
                Some(value) => value.to_string(),
                None => {
                    let path = var["valueFrom"]["fieldRef"]["fieldPath"]
                        .as_str()
                        .unwrap_or_else(|| panic!("{key}: neither a value nor a fieldRef"));
                    fields
                        .get(path)
                        .unwrap_or_else(|| panic!("{key}: no value for field {path}"))
                        .clone()
                }
            };
            (key, value)
        })
        .collect()
}

/// Starts `program` with environment `env` (through `env(1)`, which execs it: the pid is the
/// program's) and `args`.
fn start(program: &Path, env: &BTreeMap<String, String>, args: &[String], log: &Path) -> Process {
    let mut argv: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    argv.push(program.display().to_string());
    argv.extend(args.iter().cloned());
    spawn(
        &program.file_name().unwrap().to_string_lossy(),
        Path::new("/usr/bin/env"),
        &argv,
        log,
    )
    .unwrap()
}

/// The WARN and ERROR lines of a log.
fn warnings(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(str::to_string)
        .collect()
}

async fn lease_holder(cluster: &Cluster, namespace: &str, name: &str) -> Option<String> {
    Api::<Lease>::namespaced(cluster.client.clone(), namespace)
        .get_opt(name)
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// The `xcc_sync_watch_state` series at 1 of the agent's metrics: kind → state.
fn watch_states(metrics: &str) -> BTreeMap<String, String> {
    metrics
        .lines()
        .filter(|l| l.starts_with("xcc_sync_watch_state{") && l.ends_with(" 1"))
        .filter_map(|l| {
            let label = |name: &str| {
                l.split(&format!("{name}=\""))
                    .nth(1)?
                    .split('"')
                    .next()
                    .map(str::to_string)
            };
            Some((label("kind")?, label("state")?))
        })
        .collect()
}

/// An agent run the way the installed Deployment runs it, on the loopback.
struct InstalledAgent {
    process: Process,
    admin: SocketAddr,
    log: PathBuf,
}

const POD: &str = "xcc-agent-install-test";

/// Whether the agent's ServiceAccount may `verb` `resource` (`kubectl auth can-i`, which exits
/// non-zero for "no").
async fn agent_may(cluster: &Cluster, verb: &str, resource: &str) -> bool {
    let answer = cluster
        .kubectl(&[
            "auth",
            "can-i",
            verb,
            resource,
            "--as=system:serviceaccount:xcc-dns:xcc-agent",
        ])
        .await;
    matches!(answer, Ok(yes) if yes.trim() == "yes")
}

/// Waits until kube-controller-manager's ClusterRole aggregation has filled in the role of
/// resource sync (cluster-registry's aggregated ClusterRoles are empty until then).
async fn wait_aggregated(cluster: &Cluster) {
    wait_for(
        "the aggregated ClusterRole of resource sync",
        Duration::from_secs(60),
        || async {
            agent_may(cluster, "list", "clusters.clusterregistry.k8s.cisco.com")
                .await
                .then_some(())
        },
    )
    .await;
}

/// Once the installed CRDs are served and the aggregated RBAC is in, the installed agent.
async fn installed_agent_when_served(cluster: &Cluster) -> InstalledAgent {
    cluster
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])
        .await
        .unwrap();
    wait_aggregated(cluster).await;
    run_installed_agent(cluster, cluster.dir().join("agent.log")).await
}

async fn run_installed_agent(cluster: &Cluster, log: PathBuf) -> InstalledAgent {
    let kubeconfig = cluster
        .mint_kubeconfig("xcc-dns", "xcc-agent")
        .await
        .unwrap();
    let fields = BTreeMap::from([
        ("metadata.namespace", "xcc-dns".to_string()),
        ("metadata.name", POD.to_string()),
        ("status.podIP", "127.0.0.1".to_string()),
    ]);
    let env = deployment_env(cluster, "xcc-dns", "xcc-agent", &fields).await;
    assert_eq!(
        env.get("XCC_LEADER_ELECT").map(String::as_str),
        Some("true")
    );
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    // The listen addresses of a pod, moved to free loopback ports (flags win over env).
    let args = vec![
        format!("--kubeconfig={}", kubeconfig.path.display()),
        format!("--listen=127.0.0.1:{}", free_port()),
        format!("--admin-listen={admin}"),
        format!("--projection-proxy-listen=127.0.0.1:{}", free_port()),
        "--threads=1".into(),
        "--udp-sockets=1".into(),
    ];
    let process = start(&binary("xcc-agent"), &env, &args, &log);
    InstalledAgent {
        process,
        admin,
        log,
    }
}

impl InstalledAgent {
    /// Waits until the agent has done its initial work: ready, the Lease held, and every watch
    /// of the sync core listed (state 1), including one of each kind in `expected`.
    async fn wait_initial_work(&mut self, cluster: &Cluster, expected: &[&str]) -> String {
        let admin = self.admin;
        let started = std::time::Instant::now();
        while http_status(admin, "/readyz").await != Some(200) {
            still_running(&mut self.process, &self.log);
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "xcc-agent not ready after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        wait_for(
            "the agent holds the Lease",
            Duration::from_secs(60),
            || async {
                (lease_holder(cluster, "xcc-dns", "xcc-agent")
                    .await
                    .as_deref()
                    == Some(POD))
                .then_some(())
            },
        )
        .await;
        let mut last = BTreeMap::new();
        loop {
            if let Some((_, metrics)) = http_get(admin, "/metrics").await {
                last = watch_states(&metrics);
                if expected.iter().all(|k| last.contains_key(*k))
                    && last.values().all(|s| s == "synced")
                {
                    return metrics;
                }
            }
            still_running(&mut self.process, &self.log);
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "not every watch listed (want {expected:?}, all 1): {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The workload install on a fresh cluster; its agent with every default feature, then SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workload_install_applies_and_its_agent_starts_without_a_warning() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["workload", "dry-run"])
        .await
        .expect("test bed starts");

    // A server-side dry run needs the namespaces the install creates: a dry run creates nothing.
    let dry = bed.cluster("dry-run");
    let refused = dry
        .kubectl(&["apply", "--dry-run=server", "-k", &install_dir("workload")])
        .await
        .expect_err("a dry run before the namespaces exist");
    assert!(refused.to_string().contains("not found"), "{refused:#}");
    for namespace in [
        "xcc-dns",
        "plumber-system",
        "kubeconfig",
        "services-toolkit",
    ] {
        dry.kubectl(&["create", "namespace", namespace])
            .await
            .unwrap();
    }
    dry.kubectl(&["apply", "--dry-run=server", "-k", &install_dir("workload")])
        .await
        .unwrap();
    let deployments = dry
        .kubectl(&["-n", "xcc-dns", "get", "deployments", "-o", "name"])
        .await
        .unwrap();
    assert_eq!(deployments.trim(), "", "a dry run created nothing");

    let cluster = bed.cluster("workload");
    // As on a real cluster: ClusterRole aggregation (kube-controller-manager) runs.
    let _aggregation = xcc_e2e::aggregation::start(&binaries, cluster).unwrap();
    let applied = cluster
        .kubectl(&["apply", "-k", &install_dir("workload")])
        .await
        .unwrap();
    for object in [
        "deployment.apps/xcc-agent",
        "job.batch/xcc-coredns-patcher",
        "poddisruptionbudget.policy/xcc-agent",
        "clusterrole.rbac.authorization.k8s.io/xcc-agent-plumber",
        "clusterrole.rbac.authorization.k8s.io/xcc-agent-projection",
        "clusterrole.rbac.authorization.k8s.io/xcc-agent-secret-replication",
        "clusterrole.rbac.authorization.k8s.io/xcc-agent-cluster-registry",
        "clusterrole.rbac.authorization.k8s.io/xcc-agent-mcs",
        "customresourcedefinition.apiextensions.k8s.io/replicators.plumber.jnytnai0613.github.io",
    ] {
        assert!(applied.contains(object), "{object} not in:\n{applied}");
    }
    assert!(
        !applied.contains("gatewaydns"),
        "GatewayDNS is the management cluster's:\n{applied}"
    );
    // Applied twice: nothing to change, no error (the Job's spec is immutable).
    cluster
        .kubectl(&["apply", "-k", &install_dir("workload")])
        .await
        .unwrap();
    let mut agent = installed_agent_when_served(cluster).await;
    let metrics = agent
        .wait_initial_work(
            cluster,
            &[
                "SecretExport",
                "Cluster",
                "Replicator",
                "UpstreamClusterLink",
                "ServiceExport",
                "ExportedService",
            ],
        )
        .await;
    eprintln!("watches: {:?}", watch_states(&metrics));
    let log = std::fs::read_to_string(&agent.log).unwrap();
    for feature in [
        "secret-replication",
        "resource-sync",
        "plumber",
        "api-projection",
        "mcs",
    ] {
        assert!(log.contains(feature), "{feature} not started:\n{log}");
    }
    assert_eq!(warnings(&agent.log), Vec::<String>::new(), "{log}");

    // SIGTERM, as the kubelet sends it: out of the endpoints and the Lease at once, DNS served
    // through the drain (XCC_SHUTDOWN_DELAY of the Deployment), then a clean exit.
    let pid = agent.process.pid().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let admin = agent.admin;
    wait_for(
        "readiness fails and the Lease is released while the agent drains",
        Duration::from_secs(4),
        || async {
            (http_status(admin, "/readyz").await == Some(503)
                && lease_holder(cluster, "xcc-dns", "xcc-agent")
                    .await
                    .is_none())
            .then_some(())
        },
    )
    .await;
    let signalled = std::time::Instant::now();
    let exit = loop {
        if let Some(status) = agent.process.exited() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(20),
            "no exit within 20 s of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "{exit}");
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(log.contains("draining"), "{log}");
    assert_eq!(warnings(&agent.log), Vec::<String>::new(), "{log}");
}

/// The management install on a fresh cluster (with Cluster API's Cluster CRD); its controller
/// with leader election takes the Lease and reconciles a GatewayDNS without a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_management_install_applies_and_its_controller_starts_without_a_warning() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["management"])
        .await
        .expect("test bed starts");
    let cluster = bed.cluster("management");
    // Only the Cluster API fixture: there is no such directory.
    cluster
        .install_crds(Path::new("/nonexistent"))
        .await
        .unwrap();
    let applied = cluster
        .kubectl(&["apply", "-k", &install_dir("management")])
        .await
        .unwrap();
    assert!(
        applied.contains("deployment.apps/xcc-controller"),
        "{applied}"
    );
    assert!(
        applied.contains("gatewaydns.connectivity.tanzu.vmware.com"),
        "{applied}"
    );
    assert!(
        !applied.contains("plumber") && !applied.contains("replication"),
        "the agent's CRDs belong to workload clusters:\n{applied}"
    );
    cluster
        .kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])
        .await
        .unwrap();

    let kubeconfig = cluster
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let pod = "xcc-controller-install-test";
    let fields = BTreeMap::from([
        ("metadata.namespace", "xcc-system".to_string()),
        ("metadata.name", pod.to_string()),
    ]);
    let env = deployment_env(cluster, "xcc-system", "xcc-controller", &fields).await;
    assert_eq!(
        env.get("XCC_LEADER_ELECT").map(String::as_str),
        Some("true")
    );
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = cluster.dir().join("controller.log");
    let mut controller = start(
        &binary("xcc-controller"),
        &env,
        &[
            format!("--kubeconfig={}", kubeconfig.path.display()),
            format!("--admin-listen={admin}"),
        ],
        &log,
    );
    let started = std::time::Instant::now();
    while lease_holder(cluster, "xcc-system", "xcc-controller")
        .await
        .as_deref()
        != Some(pod)
    {
        still_running(&mut controller, &log);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "xcc-controller holds no Lease after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for(
        "the controller is ready",
        Duration::from_secs(30),
        || async { (http_status(admin, "/readyz").await == Some(200)).then_some(()) },
    )
    .await;
    // Its watches work: the documented GatewayDNS gets a status (no Cluster selected yet).
    cluster
        .kubectl(&["create", "namespace", "dev-team"])
        .await
        .unwrap();
    cluster
        .kubectl(&[
            "apply",
            "-f",
            &crate::secrets::manifest("manifests/examples/dev-team-gateway-dns.yaml"),
        ])
        .await
        .unwrap();
    wait_for(
        "the GatewayDNS is reconciled",
        Duration::from_secs(30),
        || async {
            let generation = cluster
                .kubectl(&[
                    "-n",
                    "dev-team",
                    "get",
                    "gatewaydns",
                    "-o",
                    "jsonpath={.items[0].status.observedGeneration}",
                ])
                .await
                .ok()?;
            (!generation.trim().is_empty()).then_some(())
        },
    )
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(warnings(&log), Vec::<String>::new(), "{text}");
    controller.stop(Duration::from_secs(10));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("stopped"), "{text}");
    assert_eq!(warnings(&log), Vec::<String>::new(), "{text}");
}

/// Fails the test with the log of `process` if it has exited.
fn still_running(process: &mut Process, log: &Path) {
    if let Some(status) = process.exited() {
        panic!(
            "{} exited ({status}):\n{}",
            process.name,
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

/// The path of `to` relative to directory `from` (both absolute): kustomize refuses absolute
/// paths in `resources` and `components`.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path = PathBuf::new();
    for _ in common..from.len() {
        path.push("..");
    }
    for part in &to[common..] {
        path.push(part);
    }
    path
}

/// A user's overlay with plumber and API projection switched off: their RBAC and CRDs are not
/// installed, and the agent never names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_switch_a_feature_off_with_its_rbac_and_it_is_never_mentioned() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["trimmed"])
        .await
        .expect("test bed starts");
    let cluster = bed.cluster("trimmed");
    let _aggregation = xcc_e2e::aggregation::start(&binaries, cluster).unwrap();
    let overlay = bed.dir().join("overlay");
    std::fs::create_dir_all(&overlay).unwrap();
    let install = repo().join("manifests/install").canonicalize().unwrap();
    let overlay = overlay.canonicalize().unwrap();
    let rel = |p: &str| relative(&overlay, &install.join(p)).display().to_string();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [{}]
components: [{}, {}]
",
            rel("workload"),
            rel("components/without-plumber"),
            rel("components/without-api-projection"),
        ),
    )
    .unwrap();
    let applied = cluster
        .kubectl(&["apply", "-k", &overlay.display().to_string()])
        .await
        .unwrap();
    assert!(applied.contains("deployment.apps/xcc-agent"), "{applied}");
    for absent in ["plumber", "projection", "services-toolkit"] {
        assert!(!applied.contains(absent), "{absent} in:\n{applied}");
    }
    // Their RBAC is absent: the agent may not read their kinds, nor what only they needed.
    for (verb, resource) in [
        ("list", "replicators.plumber.jnytnai0613.github.io"),
        (
            "list",
            "upstreamclusterlinks.projection.apiresources.multicluster.x-tanzu.vmware.com",
        ),
        ("create", "apiservices.apiregistration.k8s.io"),
        ("create", "deployments.apps"),
    ] {
        assert!(
            !agent_may(cluster, verb, resource).await,
            "the agent may {verb} {resource}"
        );
    }
    // What stays on is still granted.
    assert!(
        agent_may(
            cluster,
            "list",
            "secretexports.replication.apiresources.multicluster.x-tanzu.vmware.com"
        )
        .await
    );
    let mut agent = installed_agent_when_served(cluster).await;
    let metrics = agent
        .wait_initial_work(cluster, &["SecretExport", "Cluster"])
        .await;
    let states = watch_states(&metrics);
    for kind in [
        "Replicator",
        "ClusterDetector",
        "UpstreamClusterLink",
        "DownstreamClusterLink",
    ] {
        assert!(!states.contains_key(kind), "{kind} watched: {states:?}");
    }
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(log.contains("resource-sync"), "{log}");
    for absent in ["plumber", "projection"] {
        assert!(
            !log.to_lowercase().contains(absent),
            "{absent} in the log:\n{log}"
        );
    }
    assert_eq!(warnings(&agent.log), Vec::<String>::new(), "{log}");
}

/// What `nslookup NAME` in pod `default/client` prints, and whether it exited 0.
async fn nslookup(cluster: &Cluster, name: &str) -> (bool, String) {
    // busybox nslookup prints its failures on stdout and exits 1.
    let script = format!("nslookup -type=a {name} 2>&1; echo exit=$?");
    let out = cluster
        .exec("default", "client", &["sh", "-c", &script])
        .await
        .unwrap();
    (out.contains("exit=0"), out)
}

/// The README's check on a cluster with a node, CoreDNS as kubeadm deploys it (the `reload`
/// plugin, the kubelet's ConfigMap sync) at 2 replicas: right after `kubectl wait
/// --for=condition=complete job/xcc-coredns-patcher`, every lookup of a name of the zone from a
/// pod gets the agent's answer, whichever replica it reaches. The Job has asked each replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_after_the_patcher_job_completes_pods_resolve_the_zone() {
    let Some(binaries) = xcc_e2e::require_node_testbed() else {
        return;
    };
    let bed = Testbed::start_with_nodes(&binaries, &["workload"], &["workload"])
        .await
        .expect("test bed with a node starts");
    let c = bed.cluster("workload");
    let minute = Duration::from_secs(60);
    // Two replicas, each loading the new Corefile on its own clock.
    c.kubectl(&[
        "-n",
        "kube-system",
        "scale",
        "deployment",
        "coredns",
        "--replicas=2",
    ])
    .await
    .unwrap();
    c.wait_rollout("kube-system", "coredns", minute)
        .await
        .unwrap();
    c.apply_yaml(&crate::pods::client_pod()).await.unwrap();
    c.wait_pod_ready("default", "client", minute).await.unwrap();

    let applied = std::time::Instant::now();
    c.kubectl(&["apply", "-k", &install_dir("workload")])
        .await
        .unwrap();
    // The README's name, as xcc-controller would write it for the walkthrough's GatewayDNS.
    let name = crate::xcc_dns::KUARD;
    c.apply_yaml(&format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: kuard\n  \
         namespace: xcc-dns\n  annotations: {{connectivity.tanzu.vmware.com/dns-hostname: {name}}}\n\
         addressType: IPv4\nendpoints: [{{addresses: [10.9.9.9]}}]\n"
    ))
    .await
    .unwrap();
    // The README's check, as written.
    c.kubectl(&[
        "-n",
        "xcc-dns",
        "rollout",
        "status",
        "deploy/xcc-agent",
        "--timeout=180s",
    ])
    .await
    .unwrap();
    c.kubectl(&[
        "-n",
        "xcc-dns",
        "wait",
        "--for=condition=complete",
        "--timeout=300s",
        "job/xcc-coredns-patcher",
    ])
    .await
    .unwrap();
    let complete = applied.elapsed();
    // At once, and as often as it takes to reach both replicas through the Service.
    for attempt in 1..=10 {
        let (ok, out) = nslookup(c, name).await;
        assert!(
            ok && out.contains("10.9.9.9"),
            "lookup {attempt} right after the Job completed: {out}"
        );
    }
    let logs = c
        .kubectl(&["-n", "xcc-dns", "logs", "job/xcc-coredns-patcher"])
        .await
        .unwrap();
    let pods = c
        .kubectl(&[
            "-n",
            "kube-system",
            "get",
            "pods",
            "-l",
            "k8s-app=kube-dns",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .await
        .unwrap();
    assert!(
        logs.contains("every CoreDNS replica forwards the zone to xcc-agent"),
        "{logs}"
    );
    for pod in pods.split_whitespace() {
        assert!(logs.contains(pod), "{pod} not asked:\n{logs}");
    }
    eprintln!(
        "the Job completed {:.1} s after the install was applied:\n{logs}",
        complete.as_secs_f64()
    );
}

//! The XCC walkthrough from inside pods, on real nodes, with the install users apply.
//!
//! Three clusters with a node each: `management` runs `manifests/install/management`
//! (xcc-controller, 2 replicas), `cluster-a` and `cluster-b` run `manifests/install/workload`
//! (xcc-agent, 2 replicas, and the CoreDNS patcher Job), every image built here from the release
//! binaries. Everything is driven with kubectl, as a user would: the GatewayDNS of the walkthrough,
//! an HTTP server behind cluster-a's LoadBalancer gateway, and pods on cluster-a and cluster-b
//! that fetch `http://nginx.gateway.cluster-a.dev-team.clusters.xcc.test` through their cluster's
//! CoreDNS. Then the life of a deployment: the name withdrawn and restored, the agent restarted
//! under a lookup every 100 ms, the controller rolled, and the install left idle.

use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt as _;

use xcc_e2e::{Cluster, Testbed, images, require_node_testbed};

use crate::xcc_dns::manifest;

pub(crate) const NGINX: &str = "nginx.gateway.cluster-a.dev-team.clusters.xcc.test";
const PAGE: &str = "hello-from-cluster-a";
const CLUSTERS: [&str; 3] = ["management", "cluster-a", "cluster-b"];
/// The agent's answer TTL (the manifests keep the default).
const TTL: Duration = Duration::from_secs(30);

/// A busybox pod in `default` that sleeps, to exec the client commands in.
pub(crate) fn client_pod() -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: default}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: client
    image: {image}
    command: [sleep, '86400']
",
        image = images::BUSYBOX
    )
}

/// cluster-a's gateway: an HTTP server (busybox httpd) behind `projectcontour/envoy`, a
/// LoadBalancer Service, the name the walkthrough's GatewayDNS gives.
fn gateway() -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: projectcontour}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: envoy, namespace: projectcontour}}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: envoy}}
  template:
    metadata:
      labels: {{app: envoy}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: httpd
        image: {image}
        command: [sh, -c, 'echo {PAGE} > /www/index.html && exec httpd -f -p 80 -h /www']
        ports: [{{containerPort: 80}}]
        readinessProbe:
          tcpSocket: {{port: 80}}
          periodSeconds: 1
---
{service}",
        image = images::BUSYBOX,
        service = gateway_service(),
    )
}

fn gateway_service() -> String {
    "apiVersion: v1
kind: Service
metadata: {name: envoy, namespace: projectcontour}
spec:
  type: LoadBalancer
  selector: {app: envoy}
  ports: [{name: http, port: 80, targetPort: 80}]
"
    .to_string()
}

/// The install of each cluster role, applied with `kubectl apply -k` as the README says, and
/// waited for as a user would (`rollout status`, the patcher Job complete).
async fn install(bed: &Testbed) {
    let mgmt = bed.cluster("management");
    // Cluster API's Cluster CRD comes with Cluster API.
    mgmt.kubectl(&[
        "apply",
        "-f",
        &manifest("tests/fixtures/cluster-api-cluster-crd.yaml"),
    ])
    .await
    .unwrap();
    mgmt.kubectl(&["apply", "-k", &manifest("manifests/install/management")])
        .await
        .unwrap();
    for name in ["cluster-a", "cluster-b"] {
        install_workload(bed.cluster(name)).await;
    }
    mgmt.wait_rollout("xcc-system", "xcc-controller", Duration::from_secs(120))
        .await
        .unwrap();
}

/// The walkthrough's GatewayDNS, verbatim, on the management cluster.
async fn apply_gateway_dns(mgmt: &Cluster) {
    mgmt.kubectl(&[
        "apply",
        "-f",
        &manifest("manifests/examples/dev-team-gateway-dns.yaml"),
    ])
    .await
    .unwrap();
}

/// `kubectl apply -k manifests/install/workload`, then the agent rolled out and the patcher Job
/// complete.
pub(crate) async fn install_workload(c: &Cluster) {
    c.kubectl(&["apply", "-k", &manifest("manifests/install/workload")])
        .await
        .unwrap();
    c.wait_rollout("xcc-dns", "xcc-agent", Duration::from_secs(120))
        .await
        .unwrap();
    c.kubectl(&[
        "-n",
        "xcc-dns",
        "wait",
        "--for=condition=complete",
        "--timeout=120s",
        "job/xcc-coredns-patcher",
    ])
    .await
    .unwrap();
}

/// Waits until the client pod's CoreDNS forwards the zone to xcc-agent: the pod's lookup of
/// [`NGINX`] gives `want` (or, with `None`, NXDOMAIN from the agent). Returns how long it took.
pub(crate) async fn nxdomain_or_answer(
    c: &Cluster,
    within: Duration,
    want: Option<&str>,
) -> Duration {
    until(
        &format!("{}: CoreDNS forwards the zone to xcc-agent", c.name),
        within,
        || async move {
            match want {
                None => nxdomain(c).await,
                Some(ip) => match nslookup(c, NGINX).await {
                    Ok(ips) if ips == [ip] => Ok(()),
                    other => Err(format!("{other:?}")),
                },
            }
        },
    )
    .await
}

/// Namespace dev-team of the management cluster as Cluster API leaves it: a Cluster per workload
/// cluster, labelled for the walkthrough's selector, and its `<cluster>-kubeconfig` Secret with
/// the address a pod of the management cluster reaches that API server at.
async fn fleet(bed: &Testbed) {
    let mgmt = bed.cluster("management");
    mgmt.kubectl(&["create", "namespace", "dev-team"])
        .await
        .unwrap();
    for name in ["cluster-a", "cluster-b"] {
        let c = bed.cluster(name);
        let from_pods = c.url_from_pods().expect("a test bed with nodes");
        let kubeconfig = std::fs::read_to_string(&c.kubeconfig)
            .unwrap()
            .replace(&c.url, &from_pods);
        assert!(kubeconfig.contains(&from_pods), "{kubeconfig}");
        let file = c.dir().join("from-pods.kubeconfig");
        std::fs::write(&file, kubeconfig).unwrap();
        mgmt.apply_yaml(&format!(
            "apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {{name: {name}, namespace: dev-team, labels: {{hasContour: 'true'}}}}
spec: {{}}
"
        ))
        .await
        .unwrap();
        mgmt.kubectl(&[
            "-n",
            "dev-team",
            "create",
            "secret",
            "generic",
            &format!("{name}-kubeconfig"),
            &format!("--from-file=value={}", file.display()),
        ])
        .await
        .unwrap();
        mgmt.kubectl(&[
            "-n",
            "dev-team",
            "label",
            "secret",
            &format!("{name}-kubeconfig"),
            &format!("cluster.x-k8s.io/cluster-name={name}"),
        ])
        .await
        .unwrap();
    }
}

/// What `nslookup NAME` in the client pod says: `Ok(addresses)` or `Err(what it printed)`.
pub(crate) async fn nslookup(cluster: &Cluster, name: &str) -> Result<Vec<String>, String> {
    // busybox nslookup prints its failures on stdout and exits 1: its output is wanted either way.
    let script = format!("nslookup -type=a {name} 2>&1; echo exit=$?");
    let out = cluster
        .exec("default", "client", &["sh", "-c", &script])
        .await
        .map_err(|e| e.to_string())?;
    // "Server: ...\nAddress: ...\n\nName: <name>\nAddress: <ip>\n"
    let answer = out.split("\n\n").skip(1).collect::<Vec<_>>().join("\n");
    let ips: Vec<String> = answer
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Address:"))
        .map(|a| a.trim().to_string())
        .collect();
    if out.contains("exit=0") && !ips.is_empty() {
        Ok(ips)
    } else {
        Err(out)
    }
}

/// `wget -qO- http://NAME` in the client pod (busybox's `-T` crashes: `timeout` bounds it).
pub(crate) async fn fetch(cluster: &Cluster, url: &str) -> Result<String, String> {
    cluster
        .exec("default", "client", &["timeout", "5", "wget", "-qO-", url])
        .await
        .map(|s| s.trim().to_string())
        .map_err(|e| e.to_string())
}

/// Polls `check` every 200 ms until it holds; returns how long that took, or fails after `within`
/// with what the last attempt saw.
pub(crate) async fn until<F, Fut>(what: &str, within: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let start = Instant::now();
    loop {
        match check().await {
            Ok(()) => return start.elapsed(),
            Err(seen) if start.elapsed() > within => {
                panic!("{what}: not within {within:?}; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn http_url() -> String {
    format!("http://{NGINX}")
}

async fn resolves_and_answers(cluster: &Cluster) -> Result<(), String> {
    let body = fetch(cluster, &http_url()).await?;
    if body == PAGE {
        Ok(())
    } else {
        Err(format!("page {body:?}"))
    }
}

/// The name is gone from the zone: the pod's lookup fails with NXDOMAIN (not a timeout, not a
/// SERVFAIL: the agent answered that the name does not exist).
async fn nxdomain(cluster: &Cluster) -> Result<(), String> {
    match nslookup(cluster, NGINX).await {
        Err(text) if text.contains("NXDOMAIN") => Ok(()),
        Err(text) => Err(text),
        Ok(ips) => Err(format!("still resolves to {ips:?}")),
    }
}

/// Lines of level WARN or ERROR in `logs` (ANSI colours removed).
fn warnings(logs: &str) -> Vec<String> {
    logs.lines()
        .map(strip_ansi)
        .filter(|l| {
            let l = l.as_str();
            l.contains(" WARN ")
                || l.contains(" ERROR ")
                || l.contains("\"level\":\"WARN\"")
                || l.contains("\"level\":\"ERROR\"")
        })
        .collect()
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The logs of every pod of `selector` in `namespace` since `since` (RFC 3339), one string per pod.
async fn logs_since(
    cluster: &Cluster,
    namespace: &str,
    selector: &str,
    since: &str,
) -> Vec<(String, String)> {
    let pods = cluster
        .kubectl(&[
            "-n",
            namespace,
            "get",
            "pods",
            "-l",
            selector,
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .await
        .unwrap();
    let mut out = Vec::new();
    for pod in pods.split_whitespace() {
        let logs = cluster
            .kubectl(&[
                "-n",
                namespace,
                "logs",
                pod,
                "--all-containers",
                &format!("--since-time={since}"),
            ])
            .await
            .unwrap();
        out.push((format!("{}/{namespace}/{pod}", cluster.name), logs));
    }
    out
}

fn rfc3339_now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_walkthrough_from_pods_with_the_default_install() {
    let Some(binaries) = require_node_testbed() else {
        return;
    };
    let bed = Testbed::start_with_nodes(&binaries, &CLUSTERS, &CLUSTERS)
        .await
        .unwrap();
    let (mgmt, ca, cb) = (
        bed.cluster("management"),
        bed.cluster("cluster-a"),
        bed.cluster("cluster-b"),
    );
    let installed_at = rfc3339_now();
    install(&bed).await;

    // The Deployments as shipped: 2 replicas each, non-root, read-only root filesystem, no
    // capabilities, Ready through their own probes (wait_rollout counts available replicas).
    for (c, ns, name) in [
        (ca, "xcc-dns", "xcc-agent"),
        (cb, "xcc-dns", "xcc-agent"),
        (mgmt, "xcc-system", "xcc-controller"),
    ] {
        let spec = c
            .kubectl(&[
                "-n",
                ns,
                "get",
                "deployment",
                name,
                "-o",
                "jsonpath={.spec.replicas} {.spec.template.spec.securityContext.runAsNonRoot} \
                 {.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem} \
                 {.spec.template.spec.containers[0].securityContext.capabilities.drop} \
                 {.spec.template.spec.containers[0].readinessProbe.httpGet.path} \
                 {.spec.template.spec.containers[0].imagePullPolicy}",
            ])
            .await
            .unwrap();
        assert_eq!(
            spec, "2 true true [\"ALL\"] /readyz IfNotPresent",
            "{}: {ns}/{name}",
            c.name
        );
    }

    // Leader election: one agent replica of each workload cluster holds the Lease.
    for c in [ca, cb] {
        let pods = c
            .kubectl(&[
                "-n",
                "xcc-dns",
                "get",
                "pods",
                "-l",
                "app.kubernetes.io/name=xcc-agent",
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ])
            .await
            .unwrap();
        until(
            &format!("{}: an agent replica holds Lease xcc-agent", c.name),
            Duration::from_secs(30),
            || async {
                let holder = c
                    .kubectl(&[
                        "-n",
                        "xcc-dns",
                        "get",
                        "lease",
                        "xcc-agent",
                        "-o",
                        "jsonpath={.spec.holderIdentity}",
                    ])
                    .await
                    .map_err(|e| e.to_string())?;
                if pods.split_whitespace().any(|p| p == holder) {
                    Ok(())
                } else {
                    Err(format!("holder {holder:?}, pods {pods:?}"))
                }
            },
        )
        .await;
    }

    // cluster-a's gateway and a client pod on each workload cluster.
    ca.apply_yaml(&gateway()).await.unwrap();
    let lb = ca
        .wait_load_balancer("projectcontour", "envoy", Duration::from_secs(30))
        .await
        .unwrap();
    for c in [ca, cb] {
        c.apply_yaml(&client_pod()).await.unwrap();
    }
    ca.wait_rollout("projectcontour", "envoy", Duration::from_secs(60))
        .await
        .unwrap();
    for c in [ca, cb] {
        c.wait_pod_ready("default", "client", Duration::from_secs(60))
            .await
            .unwrap();
    }
    fleet(&bed).await;

    // Before the GatewayDNS: each pod's CoreDNS already forwards the zone to the agent (the
    // patcher Job's work), which says the name does not exist.
    for c in [ca, cb] {
        let took = nxdomain_or_answer(c, Duration::from_secs(90), None).await;
        eprintln!(
            "{}: the patched CoreDNS answers for the zone after {:.1} s more",
            c.name,
            took.as_secs_f64()
        );
    }

    // 1. The walkthrough's GatewayDNS, verbatim: both pods fetch the page by name within 60 s.
    let applied = Instant::now();
    apply_gateway_dns(mgmt).await;
    for c in [ca, cb] {
        until(
            &format!("{}: wget {}", c.name, http_url()),
            Duration::from_secs(60).saturating_sub(applied.elapsed()),
            || resolves_and_answers(c),
        )
        .await;
        eprintln!(
            "{}: wget by name answered {:.2} s after the GatewayDNS was applied",
            c.name,
            applied.elapsed().as_secs_f64()
        );
    }
    assert_eq!(nslookup(cb, NGINX).await, Ok(vec![lb.to_string()]));

    // 2. The agent restarted (rollout) on cluster-b while its client resolves the name 10 times a
    //    second: not one lookup fails. 600 lookups span 60 s: the rollout and the old replicas'
    //    drain (5 s) must fall inside them (checked).
    let mut lookups = tokio::process::Command::new(&bed.binaries.kubectl)
        .arg(format!("--kubeconfig={}", cb.kubeconfig.display()))
        .args([
            "exec", "-n", "default", "client", "--", "lookup", "-4", "-n", "600", "-i", "100",
            NGINX,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The restart starts once the first lookup is done (the program says `started`).
    let mut stdout = tokio::io::BufReader::new(lookups.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
        .await
        .expect("the lookups start within 30 s")
        .unwrap();
    assert_eq!(first.as_deref(), Some("started"));
    let restarted = Instant::now();
    cb.kubectl(&[
        "-n",
        "xcc-dns",
        "rollout",
        "restart",
        "deployment/xcc-agent",
    ])
    .await
    .unwrap();
    cb.kubectl(&[
        "-n",
        "xcc-dns",
        "rollout",
        "status",
        "deployment/xcc-agent",
        "--timeout=120s",
    ])
    .await
    .unwrap();
    let rollout = restarted.elapsed();
    let mut report = String::new();
    while let Some(line) = stdout.next_line().await.unwrap() {
        report.push_str(&line);
        report.push('\n');
    }
    let out = lookups.wait_with_output().await.unwrap();
    eprintln!(
        "cluster-b: agent rollout restart took {:.1} s under 10 lookups/s: {report}",
        rollout.as_secs_f64()
    );
    assert!(
        rollout < Duration::from_secs(50),
        "the rollout ({rollout:?}) and the drain ended within the 60 s of lookups"
    );
    assert!(
        out.status.success() && report.contains(" ok=600 failed=0 "),
        "every lookup during the rollout succeeded: {report} {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The controller's rolling update completes, and the controller still works afterwards
    // (the withdrawals below are its work).
    mgmt.kubectl(&[
        "-n",
        "xcc-system",
        "rollout",
        "restart",
        "deployment/xcc-controller",
    ])
    .await
    .unwrap();
    mgmt.kubectl(&[
        "-n",
        "xcc-system",
        "rollout",
        "status",
        "deployment/xcc-controller",
        "--timeout=120s",
    ])
    .await
    .unwrap();

    // 3. GatewayDNS deleted: the name stops resolving from the pods within TTL + 5 s.
    let deleted = Instant::now();
    mgmt.kubectl(&[
        "-n",
        "dev-team",
        "delete",
        "gatewaydns",
        "dev-team-gateway-dns",
    ])
    .await
    .unwrap();
    for c in [ca, cb] {
        until(
            &format!(
                "{}: the name withdrawn after the GatewayDNS was deleted",
                c.name
            ),
            (TTL + Duration::from_secs(5)).saturating_sub(deleted.elapsed()),
            || nxdomain(c),
        )
        .await;
    }
    eprintln!(
        "GatewayDNS deleted: NXDOMAIN in both pods after {:.2} s",
        deleted.elapsed().as_secs_f64()
    );

    // Applied again, then the gateway Service deleted: the name stops resolving; restored: it
    // resolves again and the page answers.
    apply_gateway_dns(mgmt).await;
    until(
        "cluster-b: the name back with the GatewayDNS",
        Duration::from_secs(60),
        || resolves_and_answers(cb),
    )
    .await;
    ca.kubectl(&["-n", "projectcontour", "delete", "service", "envoy"])
        .await
        .unwrap();
    until(
        "cluster-b: the name withdrawn with the gateway Service",
        TTL + Duration::from_secs(5),
        || nxdomain(cb),
    )
    .await;
    ca.apply_yaml(&gateway_service()).await.unwrap();
    let took = until(
        "cluster-b: the name back with the gateway Service",
        Duration::from_secs(60),
        || resolves_and_answers(cb),
    )
    .await;
    eprintln!(
        "gateway Service restored: the page by name from cluster-b after {:.2} s",
        took.as_secs_f64()
    );

    // 3'. Idle for 5 minutes: no xcc pod logs a warning or an error, on the workload clusters
    //     and on the management cluster.
    let idle_from = rfc3339_now();
    // sleep: the idle window the scenario is made of (what it checks is the logs of it).
    tokio::time::sleep(Duration::from_secs(300)).await;
    // Still serving after the idle time, with the replicas it started with.
    until(
        "cluster-b: the page by name after the idle time",
        Duration::from_secs(10),
        || resolves_and_answers(cb),
    )
    .await;
    let mut logs = Vec::new();
    for c in [ca, cb] {
        logs.extend(logs_since(c, "xcc-dns", "app.kubernetes.io/name=xcc-agent", &idle_from).await);
    }
    logs.extend(
        logs_since(
            mgmt,
            "xcc-system",
            "app.kubernetes.io/name=xcc-controller",
            &idle_from,
        )
        .await,
    );
    assert!(
        logs.len() >= 6,
        "2 agents on each workload cluster, 2 controllers: {logs:?}"
    );
    let idle: Vec<String> = logs
        .iter()
        .flat_map(|(pod, text)| {
            warnings(text)
                .into_iter()
                .map(move |l| format!("{pod}: {l}"))
        })
        .collect();
    assert!(
        idle.is_empty(),
        "warnings or errors while idle:\n{}",
        idle.join("\n")
    );

    // Over the whole run (install, walkthrough, rollouts, withdrawals): printed, for the record.
    for c in [ca, cb] {
        for (pod, text) in logs_since(
            c,
            "xcc-dns",
            "app.kubernetes.io/name=xcc-agent",
            &installed_at,
        )
        .await
        {
            for line in warnings(&text) {
                eprintln!("during the run: {pod}: {line}");
            }
        }
    }
}

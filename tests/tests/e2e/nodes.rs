//! Real nodes: two clusters with a node each run pods; each cluster's CoreDNS answers its pods; a
//! LoadBalancer Service of cluster-a gets an address of its pool that a pod of cluster-b reaches,
//! while cluster-a's pods are out of cluster-b's reach.

use std::time::{Duration, Instant};

use xcc_e2e::{Testbed, images, require_node_testbed};

/// A busybox pod that sleeps, to exec commands in.
fn client_pod() -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: default
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: client
    image: {image}
    imagePullPolicy: Never
    command: [sleep, '3600']
",
        image = images::BUSYBOX
    )
}

/// A busybox httpd Deployment serving one page, behind a LoadBalancer Service `name`.
fn web(name: &str, page: &str) -> String {
    httpd("Deployment", name, page, 80, None, "LoadBalancer")
}

/// A busybox httpd answering `page` on `port`, as a Deployment (one replica) or DaemonSet
/// `name` (pods labelled `app: name`), with `hostPort` when given, behind a Service `name` of
/// `service_type` whose port is named `http`.
pub(crate) fn httpd(
    kind: &str,
    name: &str,
    page: &str,
    port: u16,
    host_port: Option<u16>,
    service_type: &str,
) -> String {
    let replicas = if kind == "Deployment" {
        "\n  replicas: 1"
    } else {
        ""
    };
    let host_port = host_port.map_or(String::new(), |p| format!("\n          hostPort: {p}"));
    format!(
        "apiVersion: apps/v1
kind: {kind}
metadata: {{name: {name}, namespace: default}}
spec:{replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: httpd
        image: {image}
        imagePullPolicy: Never
        command: [sh, -c, 'mkdir -p /www && echo {page} > /www/index.html && exec httpd -f -p {port} -h /www']
        ports:
        - containerPort: {port}{host_port}
        readinessProbe:
          tcpSocket: {{port: {port}}}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  type: {service_type}
  selector: {{app: {name}}}
  ports:
  - {{name: http, port: {port}, targetPort: {port}}}
",
        image = images::BUSYBOX
    )
}

/// A ConfigMap and a pod that mounts it at /cfg.
fn config_pod() -> String {
    format!(
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: default
data:
  value: first
---
apiVersion: v1
kind: Pod
metadata:
  name: reader
  namespace: default
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: reader
    image: {image}
    imagePullPolicy: Never
    command: [sleep, '3600']
    volumeMounts:
    - {{name: settings, mountPath: /cfg}}
  volumes:
  - name: settings
    configMap: {{name: settings}}
",
        image = images::BUSYBOX
    )
}

fn lb_service(name: &str) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: default
spec:
  type: LoadBalancer
  selector: {{app: nothing}}
  ports:
  - port: 80
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_dns_and_load_balancers_on_two_node_clusters() {
    let Some(binaries) = require_node_testbed() else {
        return;
    };
    let start = Instant::now();
    let bed = Testbed::start_with_nodes(
        &binaries,
        &["management", "cluster-a", "cluster-b"],
        &["cluster-a", "cluster-b"],
    )
    .await
    .expect("test bed with two nodes starts");
    let up = start.elapsed();
    let a = bed.cluster("cluster-a");
    let b = bed.cluster("cluster-b");
    let node_a = a.node().expect("cluster-a has a node");
    let node_b = b.node().expect("cluster-b has a node");
    assert_ne!(node_a.plan.pod_cidr, node_b.plan.pod_cidr);
    assert_ne!(node_a.plan.service_cidr, node_b.plan.service_cidr);

    let t = Instant::now();
    let minute = Duration::from_secs(60);
    for c in [a, b] {
        c.apply_yaml(&client_pod()).await.expect("client pod");
    }
    a.apply_yaml(&web("web", "hello-from-cluster-a"))
        .await
        .expect("web on cluster-a");
    b.apply_yaml(&config_pod())
        .await
        .expect("reader on cluster-b");
    a.wait_pod_ready("default", "client", minute)
        .await
        .expect("client on cluster-a");
    b.wait_pod_ready("default", "client", minute)
        .await
        .expect("client on cluster-b");
    a.wait_rollout("default", "web", minute)
        .await
        .expect("web rolls out");
    b.wait_pod_ready("default", "reader", minute)
        .await
        .expect("reader on cluster-b");
    let pods_up = t.elapsed();

    // A ConfigMap edit reaches a mounted volume within seconds (kubelet's syncFrequency: 5s).
    let value = b
        .exec("default", "reader", &["cat", "/cfg/value"])
        .await
        .expect("cat");
    assert_eq!(value, "first");
    b.kubectl(&[
        "patch",
        "configmap",
        "settings",
        "--type=merge",
        "-p",
        r#"{"data":{"value":"second"}}"#,
    ])
    .await
    .expect("patch the ConfigMap");
    let edited = Instant::now();
    loop {
        let value = b
            .exec("default", "reader", &["cat", "/cfg/value"])
            .await
            .expect("cat");
        if value == "second" {
            break;
        }
        assert!(
            edited.elapsed() < Duration::from_secs(30),
            "the ConfigMap edit did not reach the pod in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let config_delay = edited.elapsed();

    // Each cluster's CoreDNS answers its pods, with its own kubernetes Service address.
    for c in [a, b] {
        let node = c.node().expect("node");
        let out = c
            .exec(
                "default",
                "client",
                &["nslookup", "kubernetes.default.svc.cluster.local"],
            )
            .await
            .unwrap_or_else(|e| panic!("nslookup on {}: {e:#}", c.name));
        assert!(
            out.contains(&node.plan.kubernetes_ip.to_string()),
            "{}: nslookup answers {}: {out}",
            c.name,
            node.plan.kubernetes_ip
        );
        assert!(
            out.contains(&node.plan.dns_ip.to_string()),
            "{}: answered by its CoreDNS at {}: {out}",
            c.name,
            node.plan.dns_ip
        );
        // CoreDNS (a pod) found that address by listing Services through the `kubernetes`
        // Service, verifying the API server with the `kube-root-ca.crt` ConfigMap and its token.
    }

    // Every API server of the bed, with a node or not, answers pods at the host's address (plain
    // HTTP to its HTTPS port: its 400 proves the path; busybox's TLS cannot talk to it).
    assert!(bed.cluster("management").node().is_none());
    for target in ["management", "cluster-a"] {
        let url = bed
            .cluster(target)
            .url_from_pods()
            .expect("a bed with nodes")
            .replace("https://", "http://");
        let out = b
            .exec(
                "default",
                "client",
                &[
                    "sh",
                    "-c",
                    &format!("timeout 5 wget -qO- {url}/ 2>&1; true"),
                ],
            )
            .await
            .expect("wget runs");
        assert!(
            out.contains("400"),
            "{target}'s API server answers a pod of cluster-b at {url}: {out}"
        );
    }

    // The LoadBalancer Service of cluster-a gets the first address of cluster-a's pool.
    let lb = a
        .wait_load_balancer("default", "web", Duration::from_secs(10))
        .await
        .expect("web gets an address");
    assert_eq!(lb, node_a.plan.lb_address(1), "the pool's first address");
    let web_pod = a
        .kubectl(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].status.podIP}",
        ])
        .await
        .expect("web pod IP");

    // Positive controls: the web pod answers at its pod IP inside cluster-a, and at the
    // LoadBalancer address from cluster-b.
    let fetch = |url: String| {
        vec![
            "timeout".to_string(),
            "5".into(),
            "wget".into(),
            "-qO-".into(),
            url,
        ]
    };
    let direct = fetch(format!("http://{web_pod}/"));
    let direct: Vec<&str> = direct.iter().map(String::as_str).collect();
    let page = a
        .exec("default", "client", &direct)
        .await
        .expect("cluster-a's client reaches the web pod");
    assert_eq!(page.trim(), "hello-from-cluster-a");
    let via_lb = fetch(format!("http://{lb}/"));
    let via_lb: Vec<&str> = via_lb.iter().map(String::as_str).collect();
    let page = b
        .exec("default", "client", &via_lb)
        .await
        .expect("cluster-b's client reaches cluster-a's LoadBalancer address");
    assert_eq!(page.trim(), "hello-from-cluster-a");

    // The host (the test) reaches the LoadBalancer address too.
    let from_host = async {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut conn = tokio::net::TcpStream::connect((lb, 80)).await?;
        conn.write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n")
            .await?;
        let mut response = String::new();
        conn.read_to_string(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(5), from_host)
        .await
        .expect("answer within 5 s")
        .expect("the host reaches the LoadBalancer address");
    assert!(response.contains("hello-from-cluster-a"), "{response}");

    // The same pod IP from cluster-b: not routed.
    let denied = b.exec("default", "client", &direct).await;
    assert!(
        denied.is_err(),
        "cluster-a's pod {web_pod} is reachable from cluster-b: {denied:?}"
    );

    // Addresses are released: with `web` holding .1, a second Service gets .2; once `web` is
    // deleted, a third gets .1 again.
    a.apply_yaml(&lb_service("second")).await.expect("second");
    let second = a
        .wait_load_balancer("default", "second", Duration::from_secs(10))
        .await
        .expect("second gets an address");
    assert_eq!(second, node_a.plan.lb_address(2));
    a.kubectl(&["delete", "service", "web", "--wait=true"])
        .await
        .expect("delete web");
    a.apply_yaml(&lb_service("third")).await.expect("third");
    let third = a
        .wait_load_balancer("default", "third", Duration::from_secs(10))
        .await
        .expect("third gets an address");
    assert_eq!(
        third,
        node_a.plan.lb_address(1),
        "web's address was released"
    );

    // The xcc image runs: its libc files are there.
    a.apply_yaml(&format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: xcc
  namespace: default
spec:
  restartPolicy: Never
  containers:
  - name: xcc
    image: {}
    imagePullPolicy: Never
    command: [xcc-agent, --help]
",
        images::xcc()
    ))
    .await
    .expect("xcc pod");
    a.kubectl(&[
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        "--timeout=30s",
        "pod/xcc",
    ])
    .await
    .expect("xcc-agent --help exits 0 in the xcc image");
    let help = a.kubectl(&["logs", "xcc"]).await.expect("xcc logs");
    assert!(help.contains("--records"), "xcc-agent --help: {help}");

    // kubectl logs goes through the kubelet.
    let logs = a
        .kubectl(&["logs", "-n", "kube-system", "deployment/coredns"])
        .await
        .expect("kubectl logs");
    assert!(logs.contains("CoreDNS"), "CoreDNS logs: {logs}");

    eprintln!(
        "two node clusters up in {:.1} s, pods ready in {:.1} s, a ConfigMap edit in the pod after {:.1} s, test done in {:.1} s",
        up.as_secs_f64(),
        pods_up.as_secs_f64(),
        config_delay.as_secs_f64(),
        start.elapsed().as_secs_f64()
    );
}

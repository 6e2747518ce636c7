//! The test bed's clusters.

use std::{
    path::{Path, PathBuf},
    sync::Mutex,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{Namespace, ServiceAccount},
};
use kube::{
    Api, Client, ResourceExt,
    api::{ObjectMeta, PostParams},
    config::{KubeConfigOptions, Kubeconfig as KubeconfigFile},
};

use crate::{
    Binaries, certs,
    egress::{self, EgressProxy},
    images, lb,
    node::{Network, NetworkMode, Node, NodePlan},
    process::{Process, free_port, spawn},
};

/// A Cluster API `Cluster` CRD, enough for the controller to list and watch Clusters.
const CLUSTER_API_CRD: &str = include_str!("../fixtures/cluster-api-cluster-crd.yaml");

/// A kubeconfig file and a client built from it.
#[derive(Clone)]
pub struct Kubeconfig {
    /// The file.
    pub path: PathBuf,
    /// A client that reads it.
    pub client: Client,
}

/// One cluster: a real kube-apiserver with its own etcd prefix.
pub struct Cluster {
    /// Its name in the bed (`management`, `c-00`, ...).
    pub name: String,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// Admin (system:masters) client.
    pub client: Client,
    /// Admin kubeconfig file.
    pub kubeconfig: PathBuf,
    kubectl: PathBuf,
    dir: PathBuf,
    apiserver: Mutex<Option<Process>>,
    program: PathBuf,
    args: Vec<String>,
    /// `None` on node clusters: their API server reaches endpoints directly.
    _egress: Option<EgressProxy>,
    port: u16,
    admin_token: String,
    /// The real node of a cluster started by [`Testbed::start_with_nodes`].
    node: Option<Node>,
    /// The host's address on the test network of the nodes, in a bed with nodes.
    host_ip: Option<std::net::Ipv4Addr>,
}

/// Choices for a test bed with nodes ([`Testbed::start_with_options`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct BedOptions {
    /// How the test network routes pod addresses between the node clusters.
    pub network: NetworkMode,
}

/// Several clusters sharing one etcd. Dropping it stops every process it started.
pub struct Testbed {
    /// The clusters, in the order asked for.
    pub clusters: Vec<Cluster>,
    /// The test network of the nodes (dropped after them).
    network: Option<Network>,
    etcd: Process,
    /// The binaries the bed runs.
    pub binaries: Binaries,
    /// Last: the processes using it are stopped first. Kept (and named on stderr) when the test
    /// panicked, so that the logs of every process can be read.
    dir: Option<tempfile::TempDir>,
}

/// A kubeconfig for `url` that verifies the server with CA `ca_pem` and presents `token`.
pub fn kubeconfig_yaml(name: &str, url: &str, ca_pem: &str, token: &str) -> String {
    let ca = xcc_kube::wire::encode_base64(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: {url}
    certificate-authority-data: {ca}
users:
- name: {name}
  user:
    token: {token}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}
current-context: {name}
"
    )
}

/// A client for kubeconfig `yaml`; with kube's default retries of 429/503/504 (an API server
/// whose storage is still initializing answers 429 for a moment) unless `retries` is false.
pub async fn client_for(yaml: &str, retries: bool) -> anyhow::Result<Client> {
    let file: KubeconfigFile = serde_saphyr::from_str(yaml)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default()).await?;
    config.default_retry = retries;
    Ok(Client::try_from(config)?)
}

impl Testbed {
    /// Starts `n` clusters named `cluster-0` ... `cluster-<n-1>`.
    pub async fn start(binaries: &Binaries, n: usize) -> anyhow::Result<Testbed> {
        let names: Vec<String> = (0..n).map(|i| format!("cluster-{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        Self::start_named(binaries, &names).await
    }

    /// Starts one cluster per name, in parallel, and waits until every one is ready.
    pub async fn start_named(binaries: &Binaries, names: &[&str]) -> anyhow::Result<Testbed> {
        Self::start_with_nodes(binaries, names, &[]).await
    }

    /// Starts one cluster per name, and one real node for each cluster of `with_nodes` (a subset
    /// of `names`; see [`crate::node`]), and waits until every API server is ready and every node
    /// is Ready with CoreDNS available. Needs `binaries.node` (see
    /// [`crate::require_node_testbed`]) and root when `with_nodes` is not empty.
    pub async fn start_with_nodes(
        binaries: &Binaries,
        names: &[&str],
        with_nodes: &[&str],
    ) -> anyhow::Result<Testbed> {
        Self::start_with_options(binaries, names, with_nodes, BedOptions::default()).await
    }

    /// [`Testbed::start_with_nodes`] with `options` (the network between the node clusters).
    pub async fn start_with_options(
        binaries: &Binaries,
        names: &[&str],
        with_nodes: &[&str],
        options: BedOptions,
    ) -> anyhow::Result<Testbed> {
        let started = Instant::now();
        if let Some(missing) = with_nodes.iter().find(|n| !names.contains(n)) {
            bail!("{missing} has a node but is not a cluster of the test bed");
        }
        let node_bins = if with_nodes.is_empty() {
            None
        } else {
            Some(
                binaries
                    .node
                    .clone()
                    .context("the test bed has no node binaries: run tests/testbed/install.sh")?,
            )
        };
        // The images are built (or found in the cache) while the rest starts.
        let images_task = node_bins.as_ref().map(|_| {
            let binaries = binaries.clone();
            tokio::task::spawn_blocking(move || {
                let t = Instant::now();
                let built = images::build_all(&binaries);
                eprintln!(
                    "node images built or found in the cache in {:.1} s",
                    t.elapsed().as_secs_f64()
                );
                built
            })
        });
        let dir = tempfile::Builder::new().prefix("xcc-testbed-").tempdir()?;
        let (network, plans) = if with_nodes.is_empty() {
            (None, vec![])
        } else {
            let (network, plans) = Network::create(dir.path(), with_nodes, options.network)?;
            (Some(network), plans)
        };
        let etcd_port = free_port();
        let peer_port = free_port();
        let etcd_dir = dir.path().join("etcd");
        let mut etcd = spawn(
            "etcd",
            &binaries.etcd,
            &[
                format!("--data-dir={}", etcd_dir.display()),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
            &dir.path().join("etcd.log"),
        )?;
        if let Err(e) = wait_tcp(etcd_port, Duration::from_secs(60), &mut etcd).await {
            let log = std::fs::read_to_string(dir.path().join("etcd.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let kept = dir.keep();
            return Err(e.context(format!(
                "etcd did not start; its log is in {}; its last lines, newest first:\n{}",
                kept.display(),
                tail.join("\n")
            )));
        }

        let mut clusters = Vec::new();
        for name in names {
            let plan = plans.iter().find(|p| p.cluster == *name);
            // Every API server of a bed with nodes is reachable from the nodes' pods.
            let host_ip = plans.first().map(|p| p.host_ip);
            clusters.push(Cluster::spawn(
                binaries,
                dir.path(),
                name,
                etcd_port,
                plan,
                host_ip,
            )?);
        }
        let mut bed = Testbed {
            clusters,
            network,
            etcd,
            binaries: binaries.clone(),
            dir: Some(dir),
        };
        let ready = futures_join_all(
            bed.clusters
                .iter_mut()
                .map(|c| c.wait_ready(Duration::from_secs(90))),
        )
        .await;
        for result in ready {
            if let Err(e) = result {
                let kept = bed.dir.take().map(|d| d.keep());
                return Err(e.context(format!(
                    "test bed files kept in {}",
                    kept.unwrap_or_default().display()
                )));
            }
        }
        if let (Some(node_bins), Some(images_task)) = (node_bins, images_task) {
            if let Err(e) = bed.start_nodes(&node_bins, &plans, images_task).await {
                let kept = bed.dir.take().map(|d| d.keep());
                return Err(e.context(format!(
                    "node test bed files kept in {}",
                    kept.unwrap_or_default().display()
                )));
            }
            eprintln!(
                "test bed with nodes {} ready in {:.1} s",
                with_nodes.join(", "),
                started.elapsed().as_secs_f64()
            );
        }
        Ok(bed)
    }

    /// The second half of [`Testbed::start_with_nodes`]: namespaces, containerd and images (in
    /// parallel per node), then the Kubernetes parts, CoreDNS, the LoadBalancer controller, and
    /// the wait for Ready.
    async fn start_nodes(
        &mut self,
        node_bins: &crate::NodeBinaries,
        plans: &[NodePlan],
        images_task: tokio::task::JoinHandle<anyhow::Result<Vec<images::Image>>>,
    ) -> anyhow::Result<()> {
        let t = Instant::now();
        let images = images_task.await??;
        eprintln!(
            "node images: waited {:.1} s for them after the API servers",
            t.elapsed().as_secs_f64()
        );
        let network = self.network.as_ref().expect("a network with nodes");
        let t = Instant::now();
        let prepared: Vec<anyhow::Result<Node>> = std::thread::scope(|scope| {
            let handles: Vec<_> = plans
                .iter()
                .map(|plan| {
                    let dir = self.cluster(&plan.cluster).dir.join("node");
                    let images = &images;
                    scope.spawn(move || Node::prepare(network, plan, &dir, images))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("node setup panicked")))
                })
                .collect()
        });
        let mut nodes = Vec::new();
        for (plan, node) in plans.iter().zip(prepared) {
            nodes.push((plan.cluster.clone(), node?));
        }
        eprintln!(
            "node namespaces, containerd and image imports in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        for (name, node) in nodes {
            let cluster = self
                .clusters
                .iter_mut()
                .find(|c| c.name == name)
                .expect("planned cluster");
            node.start_kubernetes(
                &self.binaries,
                node_bins,
                &cluster.dir,
                &cluster.kubeconfig,
                &cluster.admin_token,
                cluster.port,
            )?;
            cluster.node = Some(node);
        }
        let coredns = images::coredns(node_bins);
        for cluster in self.clusters.iter_mut() {
            let client = cluster.client.clone();
            if let Some(node) = cluster.node.as_mut() {
                let manifest = crate::node::coredns_manifest(&coredns, node.plan.dns_ip);
                node.set_lb_controller(tokio::spawn(lb::run(client, node.plan.clone())));
                cluster.apply_yaml(&manifest).await?;
            }
        }
        let waits = futures_join_all(self.clusters.iter().filter(|c| c.node.is_some()).map(
            |c| async move {
                c.wait_ready_nodes(Duration::from_secs(60)).await?;
                c.wait_rollout("kube-system", "coredns", Duration::from_secs(60))
                    .await
            },
        ))
        .await;
        waits.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        Ok(())
    }

    /// The cluster called `name`.
    pub fn cluster(&self, name: &str) -> &Cluster {
        self.clusters
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no cluster {name} in the test bed"))
    }

    /// Process ids of everything this test bed started (with nodes: every process of each node,
    /// containers included, and the router's holder).
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.etcd.pid()];
        pids.extend(
            self.clusters
                .iter()
                .map(Cluster::apiserver_pid)
                .filter(|p| *p != 0),
        );
        for node in self.clusters.iter().filter_map(Cluster::node) {
            pids.extend(node.pids());
        }
        if let Some(network) = &self.network {
            pids.push(network.router_holder_pid());
        }
        pids
    }

    /// The host's link to the test network of the nodes (`xcch<bed>`), if the bed has nodes.
    pub fn host_link(&self) -> Option<&str> {
        self.network.as_ref().map(Network::host_link)
    }

    /// A scratch directory that lives as long as the test bed.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("present until drop").path()
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        // Nodes first (with their controller-manager and scheduler), then their network.
        for cluster in &mut self.clusters {
            drop(cluster.node.take());
        }
        drop(self.network.take());
        // In parallel: each may take its grace period to drain.
        std::thread::scope(|scope| {
            for cluster in &self.clusters {
                scope.spawn(|| cluster.stop());
            }
        });
        self.etcd.stop(Duration::from_secs(3));
        if (std::thread::panicking() || std::env::var_os("XCC_KEEP_TESTBED").is_some())
            && let Some(dir) = self.dir.take()
        {
            eprintln!("test bed files kept in {}", dir.keep().display());
        }
    }
}

/// Runs futures concurrently on the current task and collects their results in order.
async fn futures_join_all<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}

/// Waits until something listens on `port`, failing at once if `process` exits first.
async fn wait_tcp(port: u16, timeout: Duration, process: &mut Process) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = process.exited() {
            bail!(
                "{} exited ({status}) before listening on 127.0.0.1:{port}",
                process.name
            );
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("nothing listens on 127.0.0.1:{port} after {timeout:?}")
}

impl Cluster {
    fn spawn(
        binaries: &Binaries,
        root: &Path,
        name: &str,
        etcd_port: u16,
        plan: Option<&NodePlan>,
        host_ip: Option<std::net::Ipv4Addr>,
    ) -> anyhow::Result<Cluster> {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("certs"))?;
        match plan {
            None => match host_ip {
                None => certs::write(&dir)?,
                Some(ip) => certs::write_with_sans(&dir, &[ip.to_string()])?,
            },
            Some(plan) => {
                certs::write_with_sans(
                    &dir,
                    &[
                        plan.host_ip.to_string(),
                        plan.kubernetes_ip.to_string(),
                        "kubernetes".into(),
                        "kubernetes.default".into(),
                        "kubernetes.default.svc".into(),
                        "kubernetes.default.svc.cluster.local".into(),
                    ],
                )?;
                // Client certificates: the kubelet (Node authorizer, NodeRestriction) and the
                // API server's own when it calls kubelets (logs, exec).
                let client_ca = certs::ca("xcc-testbed-client-ca")?;
                std::fs::write(dir.join("client-ca.crt"), &client_ca.pem)?;
                certs::write_client_in_group(
                    &dir,
                    "kubelet",
                    &format!("system:node:{}", plan.node_name),
                    Some("system:nodes"),
                    &client_ca,
                )?;
                certs::write_client_in_group(
                    &dir,
                    "apiserver-kubelet-client",
                    "kube-apiserver-kubelet-client",
                    Some("system:masters"),
                    &client_ca,
                )?;
            }
        }
        let token = format!("admin-{name}-{}", std::process::id());
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{token},admin,admin-uid,system:masters\n"),
        )?;
        let port = free_port();
        let url = format!("https://127.0.0.1:{port}");
        let kubeconfig = dir.join("admin.kubeconfig");
        let ca = std::fs::read_to_string(dir.join("serving-ca.crt"))?;
        std::fs::write(&kubeconfig, kubeconfig_yaml(name, &url, &ca, &token))?;
        let p = |f: &str| dir.join(f).display().to_string();
        let mut args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            format!("--etcd-prefix=/xcc-testbed/{name}"),
            format!("--secure-port={port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--cert-dir={}", p("certs")),
            format!("--tls-cert-file={}", p("serving.crt")),
            format!("--tls-private-key-file={}", p("serving.key")),
            format!("--token-auth-file={}", p("tokens.csv")),
            "--authorization-mode=RBAC".into(),
            format!("--service-account-issuer=https://{name}.testbed.invalid"),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            format!("--requestheader-client-ca-file={}", p("front-proxy-ca.crt")),
            "--requestheader-allowed-names=front-proxy-client".into(),
            "--requestheader-username-headers=X-Remote-User".into(),
            "--requestheader-group-headers=X-Remote-Group".into(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
            format!("--proxy-client-cert-file={}", p("front-proxy-client.crt")),
            format!("--proxy-client-key-file={}", p("front-proxy-client.key")),
            "--enable-priority-and-fairness=false".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ];
        let egress = match plan {
            None => {
                // Aggregated APIs and webhooks are reached at <service cluster IP>:<port> through
                // the egress proxy, which connects to 127.0.0.1:<port> (see egress.rs).
                let egress = EgressProxy::start(&dir.join("egress.sock"))?;
                std::fs::write(
                    dir.join("egress.yaml"),
                    egress::config(&dir.join("egress.sock")),
                )?;
                args.push(format!(
                    "--egress-selector-config-file={}",
                    p("egress.yaml")
                ));
                if host_ip.is_some() {
                    // Pods of the bed's nodes reach it at the host's address.
                    args.retain(|a| !a.starts_with("--bind-address="));
                    args.push("--bind-address=0.0.0.0".into());
                }
                Some(egress)
            }
            Some(plan) => {
                // Reachable from the nodes (and pods, through the `kubernetes` Service); aggregated
                // APIs and webhooks at their endpoints, which the host routes to the nodes.
                let set = |args: &mut Vec<String>, flag: &str, value: String| {
                    args.retain(|a| !a.starts_with(&format!("{flag}=")));
                    args.push(format!("{flag}={value}"));
                };
                set(&mut args, "--bind-address", "0.0.0.0".into());
                set(&mut args, "--advertise-address", plan.host_ip.to_string());
                set(
                    &mut args,
                    "--service-cluster-ip-range",
                    plan.service_cidr.clone(),
                );
                set(&mut args, "--authorization-mode", "Node,RBAC".into());
                args.push("--enable-admission-plugins=NodeRestriction".into());
                args.push(format!("--client-ca-file={}", p("client-ca.crt")));
                args.push(format!(
                    "--kubelet-client-certificate={}",
                    p("apiserver-kubelet-client.crt")
                ));
                args.push(format!(
                    "--kubelet-client-key={}",
                    p("apiserver-kubelet-client.key")
                ));
                args.push("--kubelet-preferred-address-types=InternalIP".into());
                args.push("--enable-aggregator-routing=true".into());
                None
            }
        };
        let mut cluster = Cluster {
            name: name.to_string(),
            url: url.clone(),
            client: Client::try_from(kube::Config::new(url.parse()?))?,
            kubeconfig,
            kubectl: binaries.kubectl.clone(),
            dir,
            apiserver: Mutex::new(None),
            program: binaries.kube_apiserver.clone(),
            args,
            _egress: egress,
            port,
            admin_token: token,
            node: None,
            host_ip,
        };
        cluster.start_apiserver()?;
        Ok(cluster)
    }

    fn start_apiserver(&mut self) -> anyhow::Result<()> {
        let log = self.dir.join("kube-apiserver.log");
        let process = spawn(&self.name, &self.program, &self.args, &log)?;
        *self.apiserver.lock().unwrap_or_else(|e| e.into_inner()) = Some(process);
        Ok(())
    }

    async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let yaml = std::fs::read_to_string(&self.kubeconfig)?;
        self.client = client_for(&yaml, true).await?;
        self.wait_api(timeout).await
    }

    async fn wait_api(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        loop {
            let ready = self
                .client
                .request_text(http_get("/readyz")?)
                .await
                .is_ok_and(|body| body.trim() == "ok");
            if ready
                && namespaces
                    .get_opt("kube-system")
                    .await
                    .ok()
                    .flatten()
                    .is_some()
                && namespaces.get_opt("default").await.ok().flatten().is_some()
            {
                return Ok(());
            }
            if let Some(status) = self
                .apiserver
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
                .and_then(Process::exited)
            {
                bail!(
                    "kube-apiserver of {} exited ({status}); see {}",
                    self.name,
                    self.dir.join("kube-apiserver.log").display()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "kube-apiserver of {} not ready after {timeout:?}; see {}",
                    self.name,
                    self.dir.join("kube-apiserver.log").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Pid of the API server (0 when stopped).
    pub fn apiserver_pid(&self) -> u32 {
        self.apiserver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, Process::pid)
    }

    /// Stops the API server (the cluster "goes away"; its data stays in etcd).
    pub fn stop(&self) {
        if let Some(mut p) = self
            .apiserver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            p.stop(Duration::from_secs(5));
        }
    }

    /// Kills the API server with SIGKILL, as a crash or a lost machine would.
    pub fn kill9(&self) {
        if let Some(mut p) = self
            .apiserver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            p.kill();
        }
    }

    /// Starts the API server again on the same address, and waits until it is ready.
    pub async fn restart(&self) -> anyhow::Result<()> {
        let log = self.dir.join("kube-apiserver.log");
        let process = spawn(&self.name, &self.program, &self.args, &log)?;
        *self.apiserver.lock().unwrap_or_else(|e| e.into_inner()) = Some(process);
        self.wait_api(Duration::from_secs(90)).await
    }

    /// An admin client that sees every answer as it comes: no retries of 429/503/504.
    pub async fn client_without_retries(&self) -> anyhow::Result<Client> {
        client_for(&std::fs::read_to_string(&self.kubeconfig)?, false).await
    }

    /// Runs the real kubectl against this cluster as admin; returns stdout, fails with stderr.
    pub async fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.kubectl_stdin(args, None).await
    }

    /// `kubectl apply -f -` of `yaml`.
    pub async fn apply_yaml(&self, yaml: &str) -> anyhow::Result<String> {
        self.kubectl_stdin(&["apply", "-f", "-"], Some(yaml)).await
    }

    async fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::new(&self.kubectl)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut input = child.stdin.take().expect("piped stdin");
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).await?;
        }
        drop(input);
        let out = child.wait_with_output().await?;
        if !out.status.success() {
            bail!(
                "kubectl {} on {} failed: {}",
                args.join(" "),
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    /// Applies every `.yaml` file of `dir` (skipped when `dir` does not exist) and the Cluster API
    /// `Cluster` CRD fixture, then waits until the CRDs are served.
    pub async fn install_crds(&self, dir: &Path) -> anyhow::Result<()> {
        self.apply_yaml(CLUSTER_API_CRD).await?;
        if dir.is_dir() {
            self.kubectl(&["apply", "-f", &dir.display().to_string()])
                .await?;
        }
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])
        .await?;
        Ok(())
    }

    /// Creates (if needed) ServiceAccount `namespace/name` and returns a kubeconfig with a token
    /// for it (TokenRequest API, valid for an hour): what the SA's RBAC allows, and nothing more.
    pub async fn mint_kubeconfig(&self, namespace: &str, name: &str) -> anyhow::Result<Kubeconfig> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        if namespaces.get_opt(namespace).await?.is_none() {
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(namespace.into()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match namespaces.create(&PostParams::default(), &ns).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        if accounts.get_opt(name).await?.is_none() {
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match accounts.create(&PostParams::default(), &sa).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .with_context(|| format!("TokenRequest for {namespace}/{name} on {}", self.name))?
            .status
            .context("TokenRequest without status")?
            .token;
        let yaml = kubeconfig_yaml(&self.name, &self.url, &self.serving_ca()?, &token);
        let path = self.dir.join(format!("{namespace}-{name}.kubeconfig"));
        std::fs::write(&path, &yaml)?;
        Ok(Kubeconfig {
            path,
            client: client_for(&yaml, true).await?,
        })
    }

    /// The admin's bearer token (`system:masters`), as in [`Cluster::kubeconfig`].
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The CA (PEM) that signed this API server's serving certificate.
    pub fn serving_ca(&self) -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(self.dir.join("serving-ca.crt"))?)
    }

    /// The kubeconfig text of `kubeconfig` (for Secrets that carry it to another cluster).
    pub fn kubeconfig_text(&self, kubeconfig: &Path) -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(kubeconfig)?)
    }

    /// UID of the kube-system namespace (cluster-registry's cluster ID).
    pub async fn kube_system_uid(&self) -> anyhow::Result<String> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        Ok(namespaces
            .get("kube-system")
            .await?
            .uid()
            .unwrap_or_default())
    }

    /// The directory of this cluster's files (kubeconfigs, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cluster's real node, when started by [`Testbed::start_with_nodes`].
    pub fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    /// The API server's port (on 127.0.0.1, and in a test bed with nodes on every address).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// In a test bed with nodes, the API server's URL for pods of any of its nodes:
    /// `https://<host's address on the test network>:<port>`, a name of its serving certificate.
    /// Every cluster of such a bed, with a node or not, is reachable there.
    pub fn url_from_pods(&self) -> Option<String> {
        self.host_ip.map(|ip| format!("https://{ip}:{}", self.port))
    }

    /// Waits until every Node of the cluster (at least one) reports Ready.
    pub async fn wait_ready_nodes(&self, timeout: Duration) -> anyhow::Result<()> {
        use k8s_openapi::api::core::v1::Node as KubeNode;
        let nodes: Api<KubeNode> = Api::all(self.client.clone());
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(node) = &self.node {
                node.check_alive()?;
            }
            let list = nodes.list(&Default::default()).await?;
            let ready = |n: &KubeNode| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            };
            if !list.items.is_empty() && list.items.iter().all(ready) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "nodes of {} not Ready after {timeout:?}: {:?}",
                    self.name,
                    list.items.iter().map(|n| n.name_any()).collect::<Vec<_>>()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until Deployment `namespace/name` has rolled out: its newest generation observed and
    /// every replica updated and available.
    pub async fn wait_rollout(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        use k8s_openapi::api::apps::v1::Deployment;
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(node) = &self.node {
                node.check_alive()?;
            }
            if let Some(d) = api.get_opt(name).await? {
                let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let generation = d.metadata.generation.unwrap_or(0);
                if let Some(s) = &d.status
                    && s.observed_generation.unwrap_or(0) >= generation
                    && s.updated_replicas.unwrap_or(0) == want
                    && s.available_replicas.unwrap_or(0) == want
                    && s.replicas.unwrap_or(0) == want
                {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                let pods = self
                    .kubectl(&["get", "pods", "-n", namespace, "-o", "wide"])
                    .await
                    .unwrap_or_default();
                bail!(
                    "deployment {namespace}/{name} of {} not rolled out after {timeout:?}; pods:\n{pods}",
                    self.name
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until pod `namespace/name` is Ready; returns its IP.
    pub async fn wait_pod_ready(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> anyhow::Result<std::net::Ipv4Addr> {
        use k8s_openapi::api::core::v1::Pod;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(node) = &self.node {
                node.check_alive()?;
            }
            if let Some(pod) = api.get_opt(name).await?
                && let Some(status) = &pod.status
                && status
                    .conditions
                    .as_ref()
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                && let Some(ip) = status.pod_ip.as_deref().and_then(|ip| ip.parse().ok())
            {
                return Ok(ip);
            }
            if Instant::now() > deadline {
                let described = self
                    .kubectl(&["describe", "pod", "-n", namespace, name])
                    .await
                    .unwrap_or_default();
                bail!(
                    "pod {namespace}/{name} of {} not Ready after {timeout:?}:\n{described}",
                    self.name
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `kubectl exec -n namespace pod -- command...`: the command's stdout; fails (with its
    /// stderr) when it exits non-zero.
    pub async fn exec(
        &self,
        namespace: &str,
        pod: &str,
        command: &[&str],
    ) -> anyhow::Result<String> {
        let mut args = vec!["exec", "-n", namespace, pod, "--"];
        args.extend_from_slice(command);
        self.kubectl(&args).await
    }

    /// Waits until Service `namespace/name` has an address in `status.loadBalancer.ingress`.
    pub async fn wait_load_balancer(
        &self,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> anyhow::Result<std::net::Ipv4Addr> {
        use k8s_openapi::api::core::v1::Service;
        let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        let deadline = Instant::now() + timeout;
        loop {
            let ip = api.get_opt(name).await?.and_then(|s| {
                s.status?
                    .load_balancer?
                    .ingress?
                    .into_iter()
                    .find_map(|i| i.ip?.parse().ok())
            });
            if let Some(ip) = ip {
                return Ok(ip);
            }
            if Instant::now() > deadline {
                bail!(
                    "service {namespace}/{name} of {} has no load-balancer address after {timeout:?}",
                    self.name
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn http_get(path: &str) -> anyhow::Result<http::Request<Vec<u8>>> {
    Ok(http::Request::get(path).body(Vec::new())?)
}

/// An API server stopped with SIGSTOP: the kernel still accepts its connections, nothing ever
/// answers. SIGCONT when dropped, however the test ends, so that the test bed can stop.
pub struct Blackhole(u32);

impl Blackhole {
    /// Stops (SIGSTOP) `cluster`'s API server until the blackhole is dropped.
    pub fn start(cluster: &Cluster) -> Blackhole {
        let pid = cluster.apiserver_pid();
        assert_ne!(pid, 0, "{}'s API server runs", cluster.name);
        let status = std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -STOP {pid}");
        Blackhole(pid)
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

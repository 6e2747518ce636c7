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
    process::{Process, free_port, spawn},
};

/// A Cluster API `Cluster` CRD, enough for the controller to list and watch Clusters.
const CLUSTER_API_CRD: &str = include_str!("../fixtures/cluster-api-cluster-crd.yaml");

/// A kubeconfig file and a client built from it.
#[derive(Clone)]
pub struct Kubeconfig {
    pub path: PathBuf,
    pub client: Client,
}

/// One cluster: a real kube-apiserver with its own etcd prefix.
pub struct Cluster {
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
    _egress: EgressProxy,
}

/// Several clusters sharing one etcd. Dropping it stops every process it started.
pub struct Testbed {
    pub clusters: Vec<Cluster>,
    etcd: Process,
    pub binaries: Binaries,
    /// Last: the processes using it are stopped first. Kept (and named on stderr) when the test
    /// panicked, so that the logs of every process can be read.
    dir: Option<tempfile::TempDir>,
}

/// A kubeconfig for `url` that verifies the server with CA `ca_pem` and presents `token`.
pub fn kubeconfig_yaml(name: &str, url: &str, ca_pem: &str, token: &str) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
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
async fn client_for(yaml: &str, retries: bool) -> anyhow::Result<Client> {
    let file: KubeconfigFile = serde_yaml::from_str(yaml)?;
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
        let dir = tempfile::Builder::new().prefix("xcc-testbed-").tempdir()?;
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
            clusters.push(Cluster::spawn(binaries, dir.path(), name, etcd_port)?);
        }
        let mut bed = Testbed {
            clusters,
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
        Ok(bed)
    }

    /// The cluster called `name`.
    pub fn cluster(&self, name: &str) -> &Cluster {
        self.clusters
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no cluster {name} in the test bed"))
    }

    /// Process ids of everything this test bed started.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.etcd.pid()];
        pids.extend(
            self.clusters
                .iter()
                .map(Cluster::apiserver_pid)
                .filter(|p| *p != 0),
        );
        pids
    }

    /// A scratch directory that lives as long as the test bed.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("present until drop").path()
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for cluster in &self.clusters {
            cluster.stop();
        }
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
    ) -> anyhow::Result<Cluster> {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("certs"))?;
        certs::write(&dir)?;
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
        let egress = EgressProxy::start(&dir.join("egress.sock"))?;
        std::fs::write(
            dir.join("egress.yaml"),
            egress::config(&dir.join("egress.sock")),
        )?;
        let args = vec![
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
            // Aggregated APIs and webhooks are reached at <service cluster IP>:<port> through
            // the egress proxy, which connects to 127.0.0.1:<port> (see egress.rs).
            format!("--egress-selector-config-file={}", p("egress.yaml")),
            "--enable-priority-and-fairness=false".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ];
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
}

fn http_get(path: &str) -> anyhow::Result<http::Request<Vec<u8>>> {
    Ok(http::Request::get(path).body(Vec::new())?)
}

/// An API server stopped with SIGSTOP: the kernel still accepts its connections, nothing ever
/// answers. SIGCONT when dropped, however the test ends, so that the test bed can stop.
pub struct Blackhole(u32);

impl Blackhole {
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

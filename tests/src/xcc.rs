//! Our own binaries, run as local processes against the test bed, and a DNS client.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::process::{Process, free_port, spawn};

/// Path of one of the workspace's binaries (`xcc-agent`, `xcc-controller`, `kubectl-xcc`, ...), built on first
/// use if this test run did not build it already.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    // target/<profile>/deps/<test-exe> → target/<profile>/<name>
    let dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(Path::to_path_buf))
        .expect("the test executable lives in target/<profile>/deps");
    let path = dir.join(name);
    BUILT.get_or_init(|| {
        let profile = dir.file_name().and_then(|p| p.to_str()).unwrap_or("debug");
        let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cargo.args([
            "build",
            "--quiet",
            "-p",
            "xcc-agent",
            "-p",
            "xcc-controller",
            "-p",
            "xcc-coredns-patcher",
            "-p",
            "kubectl-xcc",
        ]);
        if profile == "release" {
            cargo.arg("--release");
        }
        // `cargo test` runs this process with the variables it sets for the test crate
        // (CARGO_MANIFEST_DIR=tests/ ...). Cargo compares the ones a crate reads with `env!` to
        // its own environment, so inherited they would make it rebuild the agent and the
        // controller (both read CARGO_MANIFEST_DIR) here, and again in the next plain build.
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("CARGO_PKG_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_CRATE_NAME",
                    "CARGO_BIN_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "OUT_DIR",
                ]
                .contains(&key.as_ref())
            {
                cargo.env_remove(key.as_ref());
            }
        }
        let status = cargo.status().expect("cargo runs");
        assert!(status.success(), "building the xcc binaries failed");
    });
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// A running xcc-agent serving DNS on 127.0.0.1.
pub struct Agent {
    pub process: Process,
    pub dns: SocketAddr,
    pub admin: SocketAddr,
}

impl Agent {
    /// Starts xcc-agent against a cluster, with `kubeconfig` (our manifests' ServiceAccount).
    pub fn start(kubeconfig: &Path, log: &Path, extra: &[&str]) -> anyhow::Result<Agent> {
        let dns: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--listen={dns}"),
            format!("--admin-listen={admin}"),
            "--threads=1".into(),
            "--udp-sockets=1".into(),
        ];
        // The aggregated API server of API projection listens on a port of its own, on the
        // loopback, unless the test chooses one (the default, 0.0.0.0:9443, is one port for
        // every agent of the machine).
        if !extra
            .iter()
            .any(|a| a.starts_with("--projection-proxy-listen"))
        {
            args.push(format!(
                "--projection-proxy-listen=127.0.0.1:{}",
                free_port()
            ));
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let process = spawn("xcc-agent", &binary("xcc-agent"), &args, log)?;
        Ok(Agent {
            process,
            dns,
            admin,
        })
    }

    /// Waits until `/readyz` answers 200 (the first full list of slices is in).
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if http_status(self.admin, "/readyz").await == Some(200) {
                return Ok(());
            }
            if let Some(status) = self.process.exited() {
                bail!("xcc-agent exited: {status}");
            }
            if Instant::now() > deadline {
                bail!("xcc-agent not ready after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A real CoreDNS on 127.0.0.1, serving `corefile` (server blocks without a port get its port).
pub struct CoreDns {
    pub process: Process,
    pub dns: SocketAddr,
}

impl CoreDns {
    /// Writes `corefile` into `dir` and starts `coredns` on it; waits until it answers.
    pub async fn start(coredns: &Path, corefile: &str, dir: &Path) -> anyhow::Result<CoreDns> {
        let port = free_port();
        let conf = dir.join("Corefile");
        std::fs::write(&conf, corefile)?;
        let mut process = spawn(
            "coredns",
            coredns,
            &[
                "-conf".into(),
                conf.display().to_string(),
                "-dns.port".into(),
                port.to_string(),
            ],
            &dir.join("coredns.log"),
        )?;
        let dns: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if dig(dns, "ready.invalid", "A").await?.status != "NO-RESPONSE" {
                return Ok(CoreDns { process, dns });
            }
            if let Some(status) = process.exited() {
                bail!(
                    "coredns exited ({status}); see {}",
                    dir.join("coredns.log").display()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "coredns does not answer on {dns}; see {}",
                    dir.join("coredns.log").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Runs `xcc-coredns-patcher` to completion with `kubeconfig` and `args`; returns its output.
pub async fn coredns_patcher(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(binary("xcc-coredns-patcher"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .output()
        .await?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("xcc-coredns-patcher {} failed: {text}", args.join(" "));
    }
    Ok(text)
}

/// Status code of `GET path` on `addr`, `None` when nothing answers.
pub async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
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
    response.get(9..12)?.parse().ok()
}

/// What `dig` answers: the status (`NOERROR`, `NXDOMAIN`, ...) and the answer data, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigAnswer {
    pub status: String,
    pub data: Vec<String>,
}

/// Asks `server` for `name`/`qtype` with the real `dig`.
pub async fn dig(server: SocketAddr, name: &str, qtype: &str) -> anyhow::Result<DigAnswer> {
    let out = tokio::process::Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .args([
            "-p",
            &server.port().to_string(),
            "+time=1",
            "+tries=1",
            "+noall",
            "+comments",
            "+answer",
        ])
        .args([name, qtype])
        .output()
        .await
        .context("running dig (package dnsutils)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let status = text
        .lines()
        .find_map(|l| l.split("status: ").nth(1))
        .map(|s| s.split(',').next().unwrap_or("").to_string())
        .unwrap_or_else(|| "NO-RESPONSE".into());
    let mut data: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_string))
        .collect();
    data.sort();
    Ok(DigAnswer { status, data })
}

/// Polls `dig` until `check` accepts the answer; returns how long it took.
pub async fn wait_dig(
    server: SocketAddr,
    name: &str,
    qtype: &str,
    timeout: Duration,
    check: impl Fn(&DigAnswer) -> bool,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut last = None;
    while started.elapsed() < timeout {
        let answer = dig(server, name, qtype).await?;
        if check(&answer) {
            return Ok(started.elapsed());
        }
        last = Some(answer);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    bail!("{name} {qtype} @{server}: no expected answer after {timeout:?}; last: {last:?}")
}

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
    /// The process.
    pub process: Process,
    /// Where it serves DNS (UDP and TCP).
    pub dns: SocketAddr,
    /// Its admin server (health, metrics, explain).
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
    /// The process.
    pub process: Process,
    /// Where it serves DNS.
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
    // A process that accepts but never answers (a stalled runtime) is no answer, not a hang.
    let ask = async {
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
    };
    tokio::time::timeout(Duration::from_secs(5), ask)
        .await
        .ok()
        .flatten()
}

/// What `dig` answers: the status (`NOERROR`, `NXDOMAIN`, ...), the answer section's data and
/// the authority section's record types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigAnswer {
    /// The response code, as dig prints it.
    pub status: String,
    /// The answer section's data (everything after the type: `10.0.0.1`, or an SRV record's
    /// `0 100 42 target.`), sorted.
    pub data: Vec<String>,
    /// The authority section's record types (`SOA` in a negative answer), in order.
    pub authority: Vec<String>,
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
            "+authority",
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
    let (mut data, mut authority) = (Vec::new(), Vec::new());
    let mut section = "";
    for line in text.lines() {
        if let Some(header) = line.strip_prefix(";; ") {
            section = header.split(' ').next().unwrap_or("");
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if line.starts_with(';') || fields.len() < 5 {
            continue;
        }
        match section {
            "ANSWER" => data.push(fields[4..].join(" ")),
            "AUTHORITY" => authority.push(fields[3].to_string()),
            _ => {}
        }
    }
    data.sort();
    Ok(DigAnswer {
        status,
        data,
        authority,
    })
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

/// The Prometheus text of `GET /metrics` on an agent's admin address.
pub async fn metrics_text(admin: SocketAddr) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(admin).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    Ok(text)
}

/// The samples of metric `name` whose labels include every `label="value"` of `labels`.
fn samples<'a>(
    text: &'a str,
    name: &'a str,
    labels: &'a [(&'a str, &'a str)],
) -> impl Iterator<Item = f64> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        let (labels_text, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        labels
            .iter()
            .all(|(k, v)| {
                labels_text
                    .split(',')
                    .any(|pair| pair == format!("{k}=\"{v}\""))
            })
            .then(|| value.trim().parse::<f64>().ok())?
    })
}

/// The sum of the samples of metric `name` whose labels include every `label="value"` of
/// `labels` (0 when there is none).
pub fn sample_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text, name, labels).sum()
}

/// The largest of the samples of metric `name` whose labels include every `label="value"` of
/// `labels` (0 when there is none): a timestamp of several series (one per watched namespace).
pub fn sample_max(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text, name, labels).fold(0.0, f64::max)
}

/// A point in an agent's progress: when, and how far one reconciler had got.
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    /// The reconciler (`secret-import`, ...).
    pub reconciler: &'static str,
    /// When the mark was taken.
    pub at: std::time::SystemTime,
    /// How far the reconciler had got then.
    pub progress: Progress,
}

/// How far an agent's sync core got, read from its metrics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// `xcc_sync_reconciles_total` of one reconciler (every result).
    pub reconciles: f64,
    /// `xcc_sync_writes_total` of that reconciler to objects (every verb but `status`).
    pub writes: f64,
    /// `xcc_sync_writes_total` of that reconciler to statuses.
    pub status_writes: f64,
    /// `xcc_sync_queue_depth` of that reconciler.
    pub queued: f64,
}

impl Agent {
    /// The progress of `reconciler` (`resource-sync`, `clusters`, ...) now.
    pub async fn progress(&self, reconciler: &str) -> anyhow::Result<Progress> {
        let text = metrics_text(self.admin).await?;
        let of = |name| sample_sum(&text, name, &[("reconciler", reconciler)]);
        Ok(Progress {
            reconciles: of("xcc_sync_reconciles_total"),
            writes: of("xcc_sync_writes_total")
                - sample_sum(
                    &text,
                    "xcc_sync_writes_total",
                    &[("reconciler", reconciler), ("verb", "status")],
                ),
            status_writes: sample_sum(
                &text,
                "xcc_sync_writes_total",
                &[("reconciler", reconciler), ("verb", "status")],
            ),
            queued: of("xcc_sync_queue_depth"),
        })
    }

    /// Waits until the agent's watch of `kind` in `cluster` (`local` or a peer's Cluster name)
    /// heard from the server at or after `since`: a change made after `since` is in its store
    /// (one watch delivers in order). Take `since` just before the write the agent must see.
    pub async fn heard(
        &self,
        (cluster, kind): (&str, &str),
        since: std::time::SystemTime,
    ) -> anyhow::Result<()> {
        let since = since
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = metrics_text(self.admin).await?;
            // Each namespace watched is a series: a sum of timestamps would always be late.
            let contact = sample_max(
                &text,
                "xcc_sync_watch_last_contact_timestamp_seconds",
                &[("cluster", cluster), ("kind", kind)],
            );
            if contact >= since {
                return Ok(());
            }
            if Instant::now() > deadline {
                let watches: Vec<&str> = text
                    .lines()
                    .filter(|l| l.starts_with("xcc_sync_watch_last_contact"))
                    .collect();
                bail!(
                    "the agent's watch of {kind} in {cluster} heard nothing since {since}: {watches:?}"
                );
            }
            // sleep: poll interval.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A mark of `reconciler`'s progress, to take just before a write the agent must handle.
    pub async fn mark(&self, reconciler: &'static str) -> anyhow::Result<Mark> {
        let at = std::time::SystemTime::now();
        Ok(Mark {
            reconciler,
            at,
            progress: self.progress(reconciler).await?,
        })
    }

    /// Writes of the mark's reconciler to objects (not statuses) since the mark.
    pub async fn writes_since(&self, mark: &Mark) -> anyhow::Result<f64> {
        Ok(self.progress(mark.reconciler).await?.writes - mark.progress.writes)
    }

    /// Waits until the agent has handled the changes of `kind` in `cluster` (`local` or a
    /// peer's Cluster name) made after `mark`: its watch of that kind heard from the server
    /// after the mark (one watch delivers in order), the mark's reconciler finished a
    /// reconcile since the mark, and it has nothing queued. This is the proof of progress that
    /// must come before any assertion that something did not happen.
    pub async fn handled(&self, (cluster, kind): (&str, &str), mark: &Mark) -> anyhow::Result<()> {
        self.heard((cluster, kind), mark.at).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = self.progress(mark.reconciler).await?;
            if now.reconciles > mark.progress.reconciles && now.queued == 0.0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not handle the change of {kind} in {cluster}: {now:?} since {:?}",
                    mark.reconciler,
                    mark.progress
                );
            }
            // sleep: poll interval.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{sample_max, sample_sum};

    #[test]
    fn samples_are_summed_over_the_label_sets_that_match() {
        let text = "# HELP xcc_sync_writes_total Writes.\n\
            xcc_sync_writes_total{reconciler=\"resource-sync\",verb=\"apply\"} 3\n\
            xcc_sync_writes_total{reconciler=\"resource-sync\",verb=\"status\"} 2\n\
            xcc_sync_writes_total{reconciler=\"clusters\",verb=\"apply\"} 7\n\
            xcc_sync_writes_total_created{reconciler=\"resource-sync\",verb=\"apply\"} 9\n\
            xcc_up 1\n";
        let rs = [("reconciler", "resource-sync")];
        assert_eq!(sample_sum(text, "xcc_sync_writes_total", &rs), 5.0);
        assert_eq!(
            sample_sum(
                text,
                "xcc_sync_writes_total",
                &[("reconciler", "resource-sync"), ("verb", "status")]
            ),
            2.0
        );
        assert_eq!(sample_sum(text, "xcc_sync_writes_total", &[]), 12.0);
        assert_eq!(sample_sum(text, "xcc_up", &[]), 1.0);
        assert_eq!(sample_sum(text, "xcc_sync_queue_depth", &rs), 0.0);
        assert_eq!(sample_max(text, "xcc_sync_writes_total", &rs), 3.0);
        assert_eq!(sample_max(text, "xcc_sync_queue_depth", &rs), 0.0);
    }
}

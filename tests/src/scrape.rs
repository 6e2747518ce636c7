//! Scrapes of an xcc binary's `/metrics` as Prometheus makes them (with an `Accept` header), and
//! `promtool check metrics` on them.

use std::{
    io::Write as _,
    net::SocketAddr,
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::Context as _;

/// What `/metrics` answered.
#[derive(Debug)]
pub struct Scrape {
    /// The `Content-Type` header.
    pub content_type: String,
    /// The body.
    pub body: String,
}

/// `GET /metrics` on `admin`, with `accept` as the `Accept` header (none when `None`).
pub async fn scrape(admin: SocketAddr, accept: Option<&str>) -> anyhow::Result<Scrape> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(admin).await?;
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let request = format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{accept}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .context("an HTTP answer without a header end")?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "/metrics answered {head}");
    let content_type = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        })
        .context("no Content-Type")?;
    Ok(Scrape {
        content_type,
        body: body.to_string(),
    })
}

/// `promtool` (of the Debian package `prometheus`, which `tests/testbed/install.sh` installs).
/// Missing, a test fails with `CI=true`; else it is skipped after one loud line (and listed in
/// the file `XCC_SKIP_REPORT` names, if any).
pub fn require_promtool() -> Option<PathBuf> {
    let found = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(PathBuf::from("promtool"));
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "promtool is missing in CI: tests/testbed/install.sh installs it (package prometheus)"
        );
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("a metrics test")
        .to_string();
    eprintln!(
        "SKIPPED {test}: promtool is not installed — run tests/testbed/install.sh (or ./test.sh), or apt-get install prometheus"
    );
    if let Some(report) = std::env::var_os("XCC_SKIP_REPORT")
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(report)
    {
        let _ = writeln!(file, "{test}");
    }
    None
}

/// `promtool check metrics` on `text`: `Err` with what it says (its lint problems, or why it
/// cannot parse the text) unless it exits 0 saying nothing.
pub fn promtool_check(promtool: &PathBuf, text: &str) -> Result<(), String> {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run promtool: {e}"))?;
    child
        .stdin
        .take()
        .expect("a piped stdin")
        .write_all(text.as_bytes())
        .map_err(|e| format!("cannot write to promtool: {e}"))?;
    let out = child
        .wait_with_output()
        .map_err(|e| format!("promtool: {e}"))?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.success() && said.trim().is_empty() {
        true => Ok(()),
        false => Err(format!("promtool check metrics: {}: {said}", out.status)),
    }
}

//! The real `xcc-agent` binary in standalone mode, queried by a real DNS client (`dig`), over UDP
//! and TCP, while its records file changes.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream, UdpSocket},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

const RECORDS: &str = "records:
  gateway.cluster-a.dev-team.clusters.xcc.test:
    addresses: [192.0.2.10, 2001:db8::10]
  \"*.gateway.cluster-a.dev-team.clusters.xcc.test\":
    addresses: [192.0.2.10, 2001:db8::10]
";

/// `dig`, or `None` (with one loud line) when it is missing outside CI. In CI it must be there.
fn dig() -> Option<&'static str> {
    let found = Command::new("dig")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if found {
        return Some("dig");
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("dig is missing in CI: the test command installs it (package dnsutils)");
    }
    eprintln!(
        "SKIPPED: dig not installed — run ./test.sh (installs dnsutils) or apt-get install dnsutils"
    );
    None
}

struct Agent {
    child: Child,
    dns: SocketAddr,
    admin: SocketAddr,
    _dir: tempfile::TempDir,
    records: PathBuf,
}

impl Agent {
    fn start(records: &str) -> Agent {
        Agent::start_with(records, &[])
    }

    /// Standalone on `records`, with `extra` flags.
    fn start_with(records: &str, extra: &[&str]) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.yaml");
        std::fs::write(&path, records).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_xcc-agent"))
            .args(["--records", path.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args([
                "--records-poll-interval",
                "50ms",
                "--udp-sockets",
                "2",
                "--threads",
                "2",
            ])
            .args(extra)
            .env("XCC_LOG", "info")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // From here on the process is killed on drop, even if the start-up checks below panic.
        let mut agent = Agent {
            child,
            dns: SocketAddr::from(([0, 0, 0, 0], 0)),
            admin: SocketAddr::from(([0, 0, 0, 0], 0)),
            _dir: dir,
            records: path,
        };
        let stderr = agent.child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let (mut dns, mut admin) = (None, None);
        let mut seen = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            if line.contains("xcc-agent serving") {
                dns = field(&line, "dns=");
                admin = field(&line, "admin=");
                break;
            }
            seen.push(line);
        }
        // Keep draining stderr so the agent never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let log = seen.join("\n");
        agent.dns =
            dns.unwrap_or_else(|| panic!("the agent logs its DNS address; it logged:\n{log}"));
        agent.admin =
            admin.unwrap_or_else(|| panic!("the agent logs its admin address; it logged:\n{log}"));
        agent
    }

    fn dig(&self, args: &[&str]) -> String {
        let out = Command::new(dig().unwrap())
            .arg(format!("@{}", self.dns.ip()))
            .args(["-p", &self.dns.port().to_string(), "+time=2", "+tries=1"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    fn http_get(&self, path: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(self.admin).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response[9..12].parse().unwrap();
        let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
        (status, body)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn field(line: &str, key: &str) -> Option<SocketAddr> {
    let start = line.find(key)? + key.len();
    line[start..].split_whitespace().next()?.parse().ok()
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn answers_over_udp_and_tcp() {
    if dig().is_none() {
        return;
    }
    let agent = Agent::start(RECORDS);
    let name = "kuard.gateway.cluster-a.dev-team.clusters.xcc.test";
    assert_eq!(agent.dig(&[name, "A", "+short"]).trim(), "192.0.2.10");
    assert_eq!(
        agent.dig(&[name, "A", "+short", "+tcp"]).trim(),
        "192.0.2.10"
    );
    assert_eq!(agent.dig(&[name, "AAAA", "+short"]).trim(), "2001:db8::10");

    let nx = agent.dig(&["nope.clusters.xcc.test", "A"]);
    assert!(nx.contains("status: NXDOMAIN"), "{nx}");
    assert!(nx.contains("flags: qr aa rd;"), "{nx}");
    assert!(
        nx.contains("IN\tSOA\tns.xcc.test. hostmaster.xcc.test."),
        "{nx}"
    );

    let nodata = agent.dig(&["clusters.xcc.test", "A"]);
    assert!(nodata.contains("status: NOERROR"), "{nodata}");
    assert!(nodata.contains("ANSWER: 0, AUTHORITY: 1"), "{nodata}");

    let refused = agent.dig(&["example.com", "A"]);
    assert!(refused.contains("status: REFUSED"), "{refused}");

    let edns = agent.dig(&[name, "A", "+edns=0"]);
    assert!(
        edns.contains("EDNS: version: 0, flags:; udp: 1232"),
        "{edns}"
    );
    let badvers = agent.dig(&[name, "A", "+edns=1", "+noednsnegotiation"]);
    assert!(badvers.contains("status: BADVERS"), "{badvers}");
}

#[test]
fn truncated_answers_are_retried_over_tcp_in_full() {
    if dig().is_none() {
        return;
    }
    let addresses: Vec<String> = (0..100).map(|i| format!("198.51.100.{i}")).collect();
    let agent = Agent::start(&format!(
        "records:\n  big.xcc.test:\n    addresses: [{}]\n",
        addresses.join(", ")
    ));
    let out = agent.dig(&["big.xcc.test", "A", "+noall", "+answer", "+comments"]);
    assert!(out.contains("Truncated, retrying in TCP mode"), "{out}");
    let answered: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("big.xcc.test."))
        .collect();
    assert_eq!(answered.len(), 100, "{out}");
    // Without the TCP retry, the UDP answer says TC.
    let udp = agent.dig(&["big.xcc.test", "A", "+ignore"]);
    assert!(udp.contains(" tc "), "{udp}");
}

#[test]
fn reloads_the_records_file_while_answering() {
    if dig().is_none() {
        return;
    }
    let agent = Agent::start(RECORDS);
    let name = "gateway.cluster-a.dev-team.clusters.xcc.test";

    // A client hammers the server during the reloads; every query must get an answer.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = {
        let (stop, sent, failed, dns) = (stop.clone(), sent.clone(), failed.clone(), agent.dns);
        std::thread::spawn(move || {
            let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(1)))
                .unwrap();
            let query = raw_query(name);
            let mut buf = [0u8; 1500];
            while !stop.load(Ordering::Relaxed) {
                sent.fetch_add(1, Ordering::Relaxed);
                socket.send_to(&query, dns).unwrap();
                match socket.recv(&mut buf) {
                    // NOERROR with one or more answers.
                    Ok(n) if n > 12 && buf[3] & 0x0f == 0 && buf[7] > 0 => {}
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };

    write_atomically(&agent.records, &RECORDS.replace("192.0.2.10", "192.0.2.77"));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = agent.dig(&[name, "A", "+short"]);
        if now.trim() == "192.0.2.77" {
            break;
        }
        assert!(Instant::now() < deadline, "reload not seen: {now}");
        std::thread::sleep(Duration::from_millis(20));
    }

    // A broken edit: reported, and the last good table stays.
    write_atomically(
        &agent.records,
        "records:\n  a.xcc.test:\n    addresses: [999.1.1.1]\n",
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, metrics) = agent.http_get("/metrics");
        if metrics.contains("xcc_records_last_reload_success 0") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "bad file not reported: {metrics}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(agent.dig(&[name, "A", "+short"]).trim(), "192.0.2.77");

    // Back to a good file with two addresses.
    write_atomically(
        &agent.records,
        &RECORDS.replace("192.0.2.10", "192.0.2.77, 192.0.2.78"),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while sorted_lines(&agent.dig(&[name, "A", "+short"])) != ["192.0.2.77", "192.0.2.78"] {
        assert!(Instant::now() < deadline, "second reload not seen");
        std::thread::sleep(Duration::from_millis(20));
    }

    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    let (sent, failed) = (sent.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(sent > 100, "the load ran ({sent} queries)");
    assert_eq!(
        failed, 0,
        "{failed} of {sent} queries failed during reloads"
    );
}

#[test]
fn admin_endpoints_and_graceful_shutdown() {
    let mut agent = Agent::start(RECORDS);
    assert_eq!(agent.http_get("/healthz").0, 200);
    assert_eq!(agent.http_get("/readyz").0, 200);
    let (status, metrics) = agent.http_get("/metrics");
    assert_eq!(status, 200);
    documented_metrics_are_served(&metrics);
    assert!(metrics.contains("xcc_dns_table_names 2"), "{metrics}");
    assert!(
        metrics.contains("xcc_records_last_reload_success 1"),
        "{metrics}"
    );

    // One query shows up, by type and rcode.
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    socket
        .send_to(&raw_query("nope.xcc.test"), agent.dns)
        .unwrap();
    socket.recv(&mut [0u8; 512]).unwrap();
    let (_, metrics) = agent.http_get("/metrics");
    for line in [
        r#"xcc_dns_requests_total{server="dns://127.0.0.1:0",zone="xcc.test.",proto="udp",family="1",type="A"} 1"#,
        r#"xcc_dns_responses_total{server="dns://127.0.0.1:0",zone="xcc.test.",rcode="NXDOMAIN"} 1"#,
        r#"xcc_dns_request_duration_seconds_count{server="dns://127.0.0.1:0",zone="xcc.test.",type="A"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} missing in {metrics}");
    }

    // A query with two questions is answered FORMERR and counted by cause.
    let mut two_questions = raw_query("nope.xcc.test");
    two_questions[5] = 2;
    socket.send_to(&two_questions, agent.dns).unwrap();
    socket.recv(&mut [0u8; 512]).unwrap();
    let (_, metrics) = agent.http_get("/metrics");
    assert!(
        metrics.contains(r#"xcc_dns_malformed_total{cause="question_count"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"xcc_dns_malformed_total{cause="short"} 0"#),
        "{metrics}"
    );

    // SIGTERM: a clean exit, promptly.
    let pid = agent.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = agent.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

/// SIGTERM with a drain (`--shutdown-delay`): `/readyz` fails at once while DNS keeps answering,
/// then the process exits cleanly. Bounds are generous: only the order of things is asserted.
#[test]
fn sigterm_drains_readiness_first_then_stops() {
    let mut agent = Agent::start_with(RECORDS, &["--shutdown-delay", "3s"]);
    assert_eq!(agent.http_get("/readyz").0, 200);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let answered = |socket: &UdpSocket| -> bool {
        let mut buf = [0u8; 512];
        socket
            .send_to(
                &raw_query("gateway.cluster-a.dev-team.clusters.xcc.test"),
                agent.dns,
            )
            .unwrap();
        // NOERROR with one answer or more.
        matches!(socket.recv(&mut buf), Ok(n) if n > 12 && buf[3] & 0x0f == 0 && buf[7] > 0)
    };
    assert!(answered(&socket), "answers before SIGTERM");

    let pid = agent.child.id().to_string();
    let signalled = Instant::now();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    // Readiness turns red while the process still answers DNS.
    let mut drained_and_answering = false;
    while signalled.elapsed() < Duration::from_secs(2) {
        if agent.child.try_wait().unwrap().is_some() {
            break;
        }
        if agent.http_get("/readyz").0 == 503 {
            drained_and_answering = answered(&socket);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        drained_and_answering,
        "within 2 s of SIGTERM: /readyz 503 and DNS still answering"
    );
    assert_eq!(agent.http_get("/healthz").0, 200, "alive while draining");
    // Then it stops, cleanly, well within a pod's grace period.
    let status = loop {
        if let Some(status) = agent.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(20),
            "no exit within 20 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    assert!(
        signalled.elapsed() >= Duration::from_secs(2),
        "exited after {:?}, before the drain of 3 s",
        signalled.elapsed()
    );
}

#[test]
fn a_bad_records_file_at_start_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("records.yaml");
    std::fs::write(&path, "records:\n  a.xcc.test:\n    cname: [oops]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xcc-agent"))
        .args([
            "--records",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--admin-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("records.yaml"), "{stderr}");
    assert!(stderr.contains("line 3"), "{stderr}");
}

/// A minimal A query (id 0x1234, RD) for `name`, without EDNS.
fn raw_query(name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// Before any query: every metric of the reference is served with exactly the documented
/// labels, and the DNS, build and process series exist already (at 0), so that `absent()`
/// alerts stay quiet on a fresh agent. Only the sync core's families, whose label values (peers,
/// reconcilers, links) are not known before they work, and the per-target series of the gateway
/// prober, have no series yet (and so no lines).
fn documented_metrics_are_served(metrics: &str) {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md"))
        .unwrap();
    assert!(
        xcc_kube::metrics::documented(&page, "xcc-agent").len() > 20,
        "the agent's section of docs/metrics.md"
    );
    if let Err(difference) = xcc_kube::metrics::check_served(metrics, &page, "xcc-agent", |m| {
        m.starts_with("xcc_sync_")
            || m.starts_with("xcc_projection_")
            // Per probed gateway: none before a slice carries a health check.
            || matches!(
                m,
                "xcc_agent_gateway_probes_total"
                    | "xcc_agent_gateway_probe_duration_seconds"
                    | "xcc_agent_gateway_up"
            )
    }) {
        panic!("{difference}:\n{metrics}");
    }
}

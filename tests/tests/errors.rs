//! What every binary prints when its own kubeconfig is wrong or its API server does not answer,
//! run as a user runs it: a kubeconfig with a credential in it (the canary) that does not parse,
//! has a field of the wrong type, bad base64 or bad PEM, given by `--kubeconfig` and by
//! `$KUBECONFIG`, under `--log-format text` and `json`. No byte of the credential reaches stdout
//! or stderr; the line names the file and what is wrong, once, without Rust type names. No test
//! bed: the kubeconfigs are files and the API server is a closed port.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use xcc_e2e::xcc::binary;

const CANARY: &str = "s3cr3t-CANARY-7d2e";
const BINARIES: [&str; 4] = [
    "xcc-agent",
    "xcc-controller",
    "xcc-coredns-patcher",
    "kubectl-xcc",
];
/// Text that is Rust's, not a person's.
const RUST: [&str; 6] = [
    "ServiceError",
    "ApiError",
    "HyperError",
    "Status {",
    "(os error",
    "Error {",
];

fn base64(bytes: &[u8]) -> String {
    serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec()))
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

/// Every spelling of the canary that could leak: itself, its base64, a distinctive part.
fn secrets() -> Vec<String> {
    vec![
        CANARY.to_string(),
        base64(CANARY.as_bytes())[..12].to_string(),
        "7d2e".to_string(),
    ]
}

fn kubeconfig(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {cluster}\nusers:\n\
         - name: u\n  user: {user}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
         current-context: x\n"
    )
}

/// (name, kubeconfig text, what the error must say).
fn broken() -> Vec<(&'static str, String, &'static str)> {
    let server = "server: 'https://127.0.0.1:6443'";
    // PEM whose body (base64, as PEM bodies are) is the canary; all of it in base64, as
    // kubeconfigs hold PEM.
    let pem = |kind: &str| {
        let body = base64(CANARY.as_bytes());
        base64(format!("-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n").as_bytes())
    };
    vec![
        (
            "unclosed-quote",
            format!(
                "apiVersion: v1\nclusters:\n- name: c\n  cluster: {{{server}}}\nusers:\n\
                 - name: u\n  user: {{token: \"{CANARY}}}\n"
            ),
            "line 7",
        ),
        (
            "users-string",
            format!("apiVersion: v1\nkind: Config\nusers: {CANARY}\n"),
            "expected sequence",
        ),
        (
            "token-list",
            kubeconfig(&format!("{{{server}}}"), &format!("{{token: [{CANARY}]}}")),
            "line 8",
        ),
        (
            "ca-base64",
            kubeconfig(
                &format!("{{{server}, certificate-authority-data: '{CANARY}!'}}"),
                &format!("{{token: {CANARY}}}"),
            ),
            "certificate-authority-data is not valid base64",
        ),
        (
            "ca-pem",
            kubeconfig(
                &format!(
                    "{{{server}, certificate-authority-data: {}}}",
                    pem("CERTIFICATE")
                ),
                &format!("{{token: {CANARY}}}"),
            ),
            "certificate-authority-data",
        ),
        (
            "key-base64",
            kubeconfig(
                &format!("{{{server}}}"),
                &format!(
                    "{{client-certificate-data: {}, client-key-data: '{CANARY}!'}}",
                    pem("CERTIFICATE")
                ),
            ),
            "client-key-data is not valid base64",
        ),
        (
            "key-pem",
            kubeconfig(
                &format!("{{{server}}}"),
                &format!(
                    "{{client-certificate-data: {}, client-key-data: {}}}",
                    pem("CERTIFICATE"),
                    pem("PRIVATE KEY")
                ),
            ),
            "client-",
        ),
    ]
}

/// The arguments that make `bin` read its kubeconfig and stop at the first API call.
fn args(bin: &str) -> Vec<&'static str> {
    match bin {
        "xcc-agent" => vec!["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"],
        "xcc-controller" => vec!["--admin-listen", "127.0.0.1:0"],
        "xcc-coredns-patcher" => vec!["--forward-to", "192.0.2.1"],
        _ => vec!["status"],
    }
}

fn command(bin: &str, format: &str, kubeconfig: &Path, by_env: bool) -> Command {
    let mut command = Command::new(binary(bin));
    command
        .args(args(bin))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("XCC_KUBECONFIG")
        .env("XCC_LOG_FORMAT", format)
        .env("HOME", kubeconfig.parent().unwrap());
    if by_env {
        command.env("KUBECONFIG", kubeconfig);
    } else {
        command
            .env_remove("KUBECONFIG")
            .arg("--kubeconfig")
            .arg(kubeconfig);
    }
    command
}

#[test]
fn a_broken_kubeconfig_never_shows_its_credential_in_any_binary() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text, says) in broken() {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, &text).unwrap();
        for bin in BINARIES {
            for format in ["text", "json"] {
                for by_env in [false, true] {
                    let what = format!("{bin} {name} {format} env={by_env}");
                    let out = command(bin, format, &path, by_env).output().unwrap();
                    let stdout = String::from_utf8_lossy(&out.stdout);
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
                    for secret in secrets() {
                        assert!(
                            !stdout.contains(&secret) && !stderr.contains(&secret),
                            "{what}: {secret:?} shown: {stdout} {stderr}"
                        );
                    }
                    let last = stderr.lines().last().unwrap_or_default();
                    // With JSON logs the last line is JSON too: its message is the line said.
                    let message = (format == "json")
                        .then(|| serde_json::from_str::<serde_json::Value>(last).ok())
                        .flatten()
                        .and_then(|line| line["message"].as_str().map(str::to_owned));
                    let last = message.as_deref().unwrap_or(last);
                    assert!(last.contains(path.to_str().unwrap()), "{what}: {stderr}");
                    assert!(last.contains(says), "{what}: {says:?} missing: {stderr}");
                    for rust in RUST {
                        assert!(!stderr.contains(rust), "{what}: {rust:?} in {stderr}");
                    }
                    // The cause once: a clause of the line is not repeated.
                    let clauses: Vec<&str> = last.split(": ").collect();
                    for (i, clause) in clauses.iter().enumerate() {
                        assert!(
                            clause.len() <= 12 || !clauses[i + 1..].contains(clause),
                            "{what}: {clause:?} twice in {last}"
                        );
                    }
                }
            }
        }
    }
}

/// A closed port on this machine: bound, noted, closed.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `command` until a line of its stderr holds `until` (at most `timeout`), then stops
/// it; its stdout and stderr.
fn run_until(mut command: Command, until: &str, timeout: Duration) -> (String, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut lines = Vec::new();
    while start.elapsed() < timeout {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let done = line.contains(until);
                lines.push(line);
                if done {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if child.try_wait().unwrap().is_some() {
                    while let Ok(line) = rx.recv_timeout(Duration::from_millis(500)) {
                        lines.push(line);
                    }
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        lines.join("\n"),
    )
}

#[test]
fn a_refused_connection_is_said_in_words_with_the_address_by_every_binary() {
    let dir = tempfile::tempdir().unwrap();
    let server = format!("https://127.0.0.1:{}", closed_port());
    let path = dir.path().join("refused.yaml");
    std::fs::write(
        &path,
        kubeconfig(
            &format!("{{server: '{server}', insecure-skip-tls-verify: true}}"),
            &format!("{{token: {CANARY}}}"),
        ),
    )
    .unwrap();
    for bin in BINARIES {
        for format in ["text", "json"] {
            let what = format!("{bin} {format}");
            // The agent and the controller retry, and warn (once) that they cannot reach it.
            let command = command(bin, format, &path, false);
            let (stdout, stderr) = run_until(command, "refused", Duration::from_secs(60));
            let refused: Vec<&str> = stderr.lines().filter(|l| l.contains("refused")).collect();
            assert!(!refused.is_empty(), "{what}: no refusal said: {stderr}");
            assert!(
                refused.iter().any(|l| l.contains(&server)),
                "{what}: the address {server} is not named: {refused:?}"
            );
            for text in [&stdout, &stderr] {
                for rust in RUST {
                    assert!(!text.contains(rust), "{what}: {rust:?} in {text}");
                }
                for secret in secrets() {
                    assert!(!text.contains(&secret), "{what}: {secret:?} in {text}");
                }
            }
        }
    }
}

/// kubectl-xcc on kubeconfigs that parse but cannot serve the context asked for (no such
/// context, no current one, a context naming a cluster or user that is not there, a server
/// that is no URL): the line names the file, given by `--kubeconfig` or by `$KUBECONFIG`, and
/// what is wrong; never the credential, nor the server's text.
#[test]
fn kubectl_xcc_names_the_kubeconfig_file_in_every_error_about_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = "{server: 'https://127.0.0.1:6443'}";
    let user = format!("{{token: {CANARY}}}");
    let good = kubeconfig(server, &user);
    let cases: Vec<(&str, String, &[&str], &str)> = vec![
        (
            "missing-context",
            good.clone(),
            &["--context", "nope"],
            "context \"nope\" is not in kubeconfig",
        ),
        (
            "no-current-context",
            good.replace("current-context: x\n", ""),
            &[],
            "has no current context",
        ),
        (
            "missing-cluster",
            good.replace("{cluster: c, user: u}", "{cluster: gone, user: u}"),
            &[],
            "gone",
        ),
        (
            "missing-user",
            good.replace("{cluster: c, user: u}", "{cluster: c, user: gone}"),
            &[],
            "gone",
        ),
        (
            "server-not-url",
            kubeconfig(&format!("{{server: {CANARY}}}"), &user),
            &[],
            "not an http:// or https:// URL",
        ),
    ];
    for (name, text, extra, says) in cases {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, &text).unwrap();
        for by_env in [false, true] {
            let what = format!("kubectl-xcc {name} env={by_env}");
            let out = command("kubectl-xcc", "text", &path, by_env)
                .args(extra)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                matches!(out.status.code(), Some(1 | 2)),
                "{what}: {:?} {stderr}",
                out.status
            );
            let last = stderr.lines().last().unwrap_or_default();
            assert!(
                last.contains(path.to_str().unwrap()),
                "{what}: the file is not named: {stderr}"
            );
            assert!(last.contains(says), "{what}: {says:?} missing: {stderr}");
            for secret in secrets() {
                assert!(
                    !stdout.contains(&secret) && !stderr.contains(&secret),
                    "{what}: {secret:?} shown: {stdout} {stderr}"
                );
            }
            for rust in RUST {
                assert!(!stderr.contains(rust), "{what}: {rust:?} in {stderr}");
            }
        }
    }
}

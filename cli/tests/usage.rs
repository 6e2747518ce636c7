//! Usage errors as a user sees them from the binary: exit code 2, one line on stderr with clap's
//! suggestion and the help to read, nothing on stdout.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

use std::process::Command;

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-xcc");

fn usage_error(args: &[&str]) -> String {
    let out = Command::new(PLUGIN)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    stderr.trim_end().to_string()
}

#[test]
fn typos_get_clap_s_suggestion_and_exit_2() {
    assert_eq!(
        usage_error(&["stauts"]),
        "error: unrecognized subcommand 'stauts'; tip: a similar subcommand exists: 'status' \
         (see kubectl xcc --help)"
    );
    let line = usage_error(&["completions", "bsh"]);
    assert!(line.contains("[possible values: bash,"), "{line}");
    assert!(
        line.ends_with("(see kubectl xcc completion --help)"),
        "{line}"
    );
    let line = usage_error(&["status", "--all-namespace"]);
    assert!(
        line.contains("tip: a similar argument exists: '--all-namespaces'"),
        "{line}"
    );
    let line = usage_error(&[
        "link",
        "--service-context",
        "s",
        "--workload-context",
        "w",
        "--request-timeout",
        "soon",
    ]);
    assert!(line.contains("0 for no limit"), "{line}");
}

/// A kubeconfig whose only context points where nothing listens.
fn unreachable_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("config");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster: {server: \
         'https://127.0.0.1:1'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: \
         gone\n  context: {cluster: gone, user: u}\ncurrent-context: gone\n",
    )
    .unwrap();
    path
}

/// `kubectl xcc status` on an unreachable cluster with `env` set: (exit code, stderr lines).
fn failed_status(env: &[(&str, &str)], args: &[&str]) -> (Option<i32>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(PLUGIN);
    for (var, _) in std::env::vars() {
        if var.starts_with("XCC_") || var == "RUST_LOG" {
            command.env_remove(var);
        }
    }
    let out = command
        .arg("status")
        .args(args)
        .env("KUBECONFIG", unreachable_kubeconfig(dir.path()))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.stdout.is_empty(), "stdout holds only output: {out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    (
        out.status.code(),
        stderr.lines().map(String::from).collect(),
    )
}

#[test]
fn diagnostics_are_quiet_by_default_and_text_or_json_on_request() {
    let (code, lines) = failed_status(&[], &[]);
    assert_eq!(code, Some(1));
    assert_eq!(lines.len(), 1, "only the error line: {lines:?}");
    assert!(lines[0].starts_with("error: cannot list"), "{lines:?}");

    // As the flags or the variables every xcc binary reads.
    for (env, args) in [
        (vec![], vec!["-v", "debug", "--log-format", "json"]),
        (
            vec![("XCC_LOG_LEVEL", "debug"), ("XCC_LOG_FORMAT", "json")],
            vec![],
        ),
    ] {
        let (code, lines) = failed_status(&env, &args);
        assert_eq!(code, Some(1));
        // Every line is JSON, the error line last.
        let logs: Vec<serde_json::Value> = lines
            .iter()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect();
        let error = logs.last().unwrap();
        assert_eq!(error["level"], "ERROR", "{lines:?}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .starts_with("cannot list"),
            "{lines:?}"
        );
        assert!(
            logs.iter()
                .any(|l| l["level"] == "DEBUG" && l["target"] == "kube_client::client::builder"),
            "{lines:#?}"
        );
    }

    let (_, lines) = failed_status(&[("RUST_LOG", "debug")], &["--log", "warn"]);
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" ERROR ") && !l.starts_with('{')),
        "the flag wins over RUST_LOG, as text: {lines:#?}"
    );
    assert!(!lines.iter().any(|l| l.contains(" DEBUG ")), "{lines:#?}");
}

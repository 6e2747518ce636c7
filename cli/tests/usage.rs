//! Usage errors as a user sees them from the binary: exit code 2, one line on stderr with clap's
//! suggestion and the help to read, nothing on stdout.

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
        "5",
    ]);
    assert!(line.contains("0 for none"), "{line}");
}

//! Bad input as a user gives it to each binary: a usage error exits 2 with one line that says
//! what is wrong and what is accepted; a failure exits 1 with one line, each cause once. No test
//! bed: the binaries refuse before they reach any cluster.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

use std::process::Command;

use xcc_e2e::xcc::binary;

struct Outcome {
    code: Option<i32>,
    stderr: String,
}

fn run(bin: &str, args: &[&str]) -> Outcome {
    let out = Command::new(binary(bin))
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("XCC_LOG_FORMAT", "text")
        .output()
        .unwrap();
    assert!(out.stdout.is_empty(), "{bin} {args:?}: {out:?}");
    Outcome {
        code: out.status.code(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// One line, and no clause of it (a cause) said twice.
fn one_line_each_cause_once(what: &str, stderr: &str) {
    assert_eq!(stderr.lines().count(), 1, "{what}: one line: {stderr:?}");
    let clauses: Vec<&str> = stderr.trim().split(": ").collect();
    for (i, clause) in clauses.iter().enumerate() {
        if clause.len() > 12 {
            assert!(
                !clauses[i + 1..].contains(clause),
                "{what}: {clause:?} repeated in {stderr:?}"
            );
        }
    }
}

fn usage_error(bin: &str, args: &[&str], accepted: &[&str]) {
    let what = format!("{bin} {}", args.join(" "));
    let out = run(bin, args);
    assert_eq!(out.code, Some(2), "{what}: {:?}", out.stderr);
    one_line_each_cause_once(&what, &out.stderr);
    for says in accepted {
        assert!(
            out.stderr.contains(says),
            "{what}: {says:?} missing in {:?}",
            out.stderr
        );
    }
}

#[test]
fn bad_zones_are_refused_saying_what_is_wrong_and_what_a_zone_is() {
    for bin in ["xcc-agent", "xcc-controller", "xcc-coredns-patcher"] {
        usage_error(
            bin,
            &["--zone", "*.test"],
            &["wildcard", "such as xcc.test"],
        );
        usage_error(
            bin,
            &["--zone", "bad..zone"],
            &["empty label", "such as xcc.test"],
        );
    }
}

#[test]
fn listen_addresses_must_be_ip_and_port() {
    usage_error(
        "xcc-agent",
        &["--listen", "localhost:5353"],
        &["IP:PORT", "0.0.0.0:53"],
    );
    for bin in ["xcc-agent", "xcc-controller"] {
        usage_error(bin, &["--admin-listen", "localhost:9180"], &["IP:PORT"]);
    }
}

#[test]
fn flag_typos_and_bad_values_are_usage_errors_in_every_binary() {
    for bin in ["xcc-agent", "xcc-controller", "xcc-coredns-patcher"] {
        usage_error(bin, &["--log-level", "loud"], &["expected a level"]);
        usage_error(bin, &["--log-format", "yaml"], &["json"]);
        usage_error(bin, &["--kubeconfg", "x"], &["tip:", "--kubeconfig"]);
    }
    // The CLI takes the same logging flags, after any subcommand.
    usage_error(
        "kubectl-xcc",
        &["status", "--log-level", "loud"],
        &["expected a level"],
    );
    usage_error(
        "kubectl-xcc",
        &["status", "--log-format", "yaml"],
        &["json"],
    );
    usage_error(
        "xcc-controller",
        &["--leader-elect=maybe"],
        &["true", "false"],
    );
}

#[test]
fn a_records_file_of_the_wrong_shape_names_the_file_the_entry_and_the_shape() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("records.yaml");
    std::fs::write(&path, "records:\n  a.xcc.test: [192.0.2.1]\n").unwrap();
    let path = path.to_str().unwrap();
    usage_error(
        "xcc-agent",
        &[
            "--records",
            path,
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &[path, "a.xcc.test", "line 2", "`addresses`", "`cname`"],
    );
    let out = run(
        "xcc-agent",
        &[
            "--records",
            path,
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ],
    );
    assert!(!out.stderr.contains("RawEntry"), "{}", out.stderr);
}

#[test]
fn a_missing_kubeconfig_is_one_line_with_its_cause_once() {
    for bin in ["xcc-agent", "xcc-controller", "xcc-coredns-patcher"] {
        let mut args = vec!["--kubeconfig", "/nonexistent/kubeconfig"];
        if bin == "xcc-agent" {
            args.extend(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
        }
        let out = run(bin, &args);
        assert_eq!(out.code, Some(1), "{bin}: {:?}", out.stderr);
        one_line_each_cause_once(bin, &out.stderr);
        assert!(
            out.stderr.starts_with(&format!("{bin}: error: ")),
            "{:?}",
            out.stderr
        );
        for once in ["No such file or directory", "/nonexistent/kubeconfig"] {
            assert_eq!(
                out.stderr.matches(once).count(),
                1,
                "{bin}: {once:?} once in {:?}",
                out.stderr
            );
        }
    }
}

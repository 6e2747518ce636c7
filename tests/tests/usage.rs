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
fn a_missing_kubeconfig_is_a_usage_error_on_one_line_with_its_cause_once() {
    // A file named by a flag is the operator's input, as the flag's value: exit 2.
    for bin in ["xcc-agent", "xcc-controller", "xcc-coredns-patcher"] {
        let mut args = vec!["--kubeconfig", "/nonexistent/kubeconfig"];
        if bin == "xcc-agent" {
            args.extend(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
        }
        let out = run(bin, &args);
        assert_eq!(out.code, Some(2), "{bin}: {:?}", out.stderr);
        one_line_each_cause_once(bin, &out.stderr);
        assert!(
            out.stderr
                .starts_with("error: cannot read the file of --kubeconfig"),
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

/// Runs `bin` with `args` and the extra environment `env`; stdout is returned too.
fn run_env(bin: &str, args: &[&str], env: &[(&str, &str)]) -> (Outcome, String) {
    let mut command = Command::new(binary(bin));
    command
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("XCC_LOG_FORMAT", "text");
    for name in ["NAMESPACE", "DOMAIN_SUFFIX", "GATEWAY_DNS_POLLING_INTERVAL"] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    let out = command.output().unwrap();
    (
        Outcome {
            code: out.status.code(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        },
        String::from_utf8(out.stdout).unwrap(),
    )
}

/// A kubeconfig whose API server refuses connections (nothing listens on port 1).
fn unreachable_kubeconfig(dir: &std::path::Path) -> String {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    \
         server: https://127.0.0.1:1\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\n\
         users:\n- name: u\n  user: {token: t}\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn every_number_and_duration_has_a_range_and_the_error_says_the_form_and_the_range() {
    const SECONDS: &str = "expected a whole number of seconds from 1 to 86400";
    let table: &[(&str, &[&str], &str)] = &[
        (
            "xcc-agent",
            &["--ttl", "abc"],
            "invalid value 'abc' for '--ttl <SECONDS>': expected a whole number of seconds \
             from 1 to 86400",
        ),
        ("xcc-agent", &["--ttl", "4294967295"], SECONDS),
        ("xcc-agent", &["--ttl", "0"], SECONDS),
        (
            "xcc-agent",
            &["--negative-ttl", "90000"],
            "seconds from 0 to 86400",
        ),
        ("xcc-agent", &["--udp-sockets", "5000"], "from 0 to 1024"),
        (
            "xcc-agent",
            &["--tcp-max-connections", "0"],
            "whole number of connections from 1 to 1000000",
        ),
        (
            "xcc-agent",
            &["--tcp-idle-timeout", "0s"],
            "expected a duration with its unit, such as 500ms, 30s, 5m or 1h30m, from 100ms \
             to 1h",
        ),
        (
            "xcc-agent",
            &["--records-poll-interval", "5"],
            "duration with its unit",
        ),
        (
            "xcc-agent",
            &["--records-max-removed-share", "2"],
            "expected a share from 0 to 1",
        ),
        ("xcc-agent", &["--shutdown-delay", "1h"], "from 0s to 10m"),
        (
            "xcc-agent",
            &["--leader-elect-retry-period", "0s"],
            "'--leader-elect-retry-period <DURATION>': expected a duration",
        ),
        ("xcc-agent", &["--namespace", "Bad_NS"], "namespace name"),
        ("xcc-agent", &["-v", "11"], "klog verbosity"),
        (
            "xcc-controller",
            &["--probe-interval", "0s"],
            "'--probe-interval <DURATION>': expected a duration with its unit, such as 500ms, \
             30s, 5m or 1h30m, from 1s to 10m",
        ),
        (
            "xcc-controller",
            &["--resync-interval", "abc"],
            "from 1s to 24h",
        ),
        (
            "xcc-controller",
            &["--announcement-ttl", "0s"],
            "from 1s to 1h",
        ),
        (
            "xcc-controller",
            &["--max-writes-in-flight", "0"],
            "whole number of writes from 1 to 10000",
        ),
        (
            "xcc-coredns-patcher",
            &["--service-wait", "2h"],
            "from 0s to 1h",
        ),
        (
            "kubectl-xcc",
            &["status", "--request-timeout", "soon"],
            "expected seconds (5) or a duration with its unit (5s, 1m, 1h30m) up to 24h, 0 for \
             no limit",
        ),
        (
            "kubectl-xcc",
            &["cluster", "join", "--context", "a,b", "--token-ttl", "1m"],
            "from 10m to 87600h",
        ),
        (
            "kubectl-xcc",
            &[
                "link",
                "--service-context",
                "a",
                "--workload-context",
                "b",
                "--timeout",
                "0s",
            ],
            "from 1s to 24h",
        ),
    ];
    for (bin, args, says) in table {
        usage_error(bin, args, &[says]);
    }
}

#[test]
fn leader_election_timing_must_be_lease_longer_than_renew_deadline_longer_than_retry_period() {
    const RULE: &str = "--leader-elect-lease-duration (1s) must be longer than \
                        --leader-elect-renew-deadline (10s), and that longer than \
                        --leader-elect-retry-period (2s)";
    for bin in ["xcc-agent", "xcc-controller"] {
        usage_error(bin, &["--leader-elect-lease-duration", "1s"], &[RULE]);
        usage_error(
            bin,
            &[
                "--leader-elect-renew-deadline",
                "20s",
                "--leader-elect-retry-period",
                "20s",
            ],
            &["(15s) must be longer than --leader-elect-renew-deadline (20s)"],
        );
    }
    // The former name is checked by the same rule.
    usage_error("xcc-agent", &["--lease-duration", "1s"], &[RULE]);
    let (out, _) = run_env("xcc-agent", &["crds"], &[("XCC_LEASE_DURATION", "1s")]);
    assert_eq!(out.code, Some(2), "{:?}", out.stderr);
    assert!(out.stderr.contains(RULE), "{:?}", out.stderr);
}

#[test]
fn leader_election_flags_are_kube_controller_managers_in_every_binary_and_the_old_names_work() {
    let new = [
        "--leader-elect",
        "--leader-elect-lease-duration=30s",
        "--leader-elect-renew-deadline=20s",
        "--leader-elect-retry-period=5s",
        "--leader-elect-resource-name=lock",
        "--leader-elect-resource-namespace=ops",
        "crds",
    ];
    for bin in ["xcc-agent", "xcc-controller"] {
        let (out, stdout) = run_env(bin, &new, &[]);
        assert_eq!(out.code, Some(0), "{bin}: {:?}", out.stderr);
        assert!(stdout.contains("CustomResourceDefinition"), "{bin}");
    }
    for (bin, old) in [
        (
            "xcc-agent",
            &["--lease-name", "lock", "--lease-duration", "20s", "crds"][..],
        ),
        (
            "xcc-controller",
            &["--leader-election", "--lease-namespace", "ops", "crds"],
        ),
    ] {
        let (out, _) = run_env(bin, old, &[]);
        assert_eq!(out.code, Some(0), "{bin} {old:?}: {:?}", out.stderr);
    }
    // Each has its variable.
    let (out, _) = run_env(
        "xcc-controller",
        &["crds"],
        &[("XCC_LEADER_ELECT_RENEW_DEADLINE", "1m")],
    );
    assert_eq!(out.code, Some(2), "{:?}", out.stderr);
    assert!(
        out.stderr.contains("--leader-elect-renew-deadline (1m)"),
        "{:?}",
        out.stderr
    );
    // The new names are the advertised ones.
    for bin in ["xcc-agent", "xcc-controller"] {
        let (_, help) = run_env(bin, &["--help"], &[]);
        for flag in [
            "--leader-elect-lease-duration",
            "--leader-elect-renew-deadline",
            "--leader-elect-retry-period",
            "--leader-elect-resource-name",
            "--leader-elect-resource-namespace",
        ] {
            assert!(help.contains(flag), "{bin}: {flag} missing in --help");
        }
        assert!(!help.contains("--lease-"), "{bin}: an old name in --help");
    }
}

#[test]
fn klog_verbosities_are_accepted_and_help_says_what_they_mean() {
    for (bin, args) in [
        ("xcc-agent", &["-v", "4", "crds"][..]),
        ("xcc-agent", &["--v=2", "crds"]),
        ("xcc-controller", &["-v", "0", "crds"]),
        ("kubectl-xcc", &["completion", "bash", "-v", "5"]),
    ] {
        let (out, stdout) = run_env(bin, args, &[]);
        assert_eq!(out.code, Some(0), "{bin} {args:?}: {:?}", out.stderr);
        assert!(!stdout.is_empty(), "{bin} {args:?}");
    }
    // Without a cluster the patcher fails (1), but not on its flags.
    let (out, _) = run_env("xcc-coredns-patcher", &["-v", "4"], &[]);
    assert_eq!(out.code, Some(1), "{:?}", out.stderr);
    for bin in ["xcc-agent", "xcc-controller", "xcc-coredns-patcher"] {
        let (_, help) = run_env(bin, &["--help"], &[]);
        assert!(
            help.contains("0-1 info, 2-3 debug for xcc's own code, 4 debug, 5 and more trace"),
            "{bin}: {help}"
        );
    }
}

#[test]
fn request_timeout_reads_a_bare_number_as_seconds_as_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    for timeout in ["5", "5s", "1m"] {
        let (out, _) = run_env(
            "kubectl-xcc",
            &[
                "status",
                "--kubeconfig",
                &kubeconfig,
                "--request-timeout",
                timeout,
            ],
            &[],
        );
        // Refused by the API server's address, not by the flag.
        assert_eq!(out.code, Some(1), "{timeout}: {:?}", out.stderr);
        assert!(
            !out.stderr.contains("--request-timeout"),
            "{:?}",
            out.stderr
        );
    }
}

#[test]
fn the_original_xccs_variables_are_read_as_our_flags() {
    // Read: a bad value is refused, naming the variable (it used to be ignored).
    for (bin, var, value, says) in [
        ("xcc-agent", "DOMAIN_SUFFIX", "*.test", "wildcard"),
        ("xcc-agent", "NAMESPACE", "Bad_NS", "namespace name"),
        ("xcc-controller", "NAMESPACE", "Bad_NS", "namespace name"),
        (
            "xcc-controller",
            "GATEWAY_DNS_POLLING_INTERVAL",
            "30",
            "duration with its unit",
        ),
    ] {
        let (out, _) = run_env(bin, &["crds"], &[(var, value)]);
        assert_eq!(out.code, Some(2), "{bin} {var}: {:?}", out.stderr);
        one_line_each_cause_once(bin, &out.stderr);
        assert!(
            out.stderr.contains(says) && out.stderr.contains(var),
            "{bin} {var}: {:?}",
            out.stderr
        );
    }
    // Good values are taken; our own flag wins over the original's variable.
    for (bin, env) in [
        (
            "xcc-agent",
            &[
                ("NAMESPACE", "team-a"),
                ("DOMAIN_SUFFIX", "clusters.example.com"),
            ][..],
        ),
        (
            "xcc-controller",
            &[
                ("NAMESPACE", "team-a"),
                ("GATEWAY_DNS_POLLING_INTERVAL", "30s"),
            ],
        ),
    ] {
        let (out, _) = run_env(bin, &["crds"], env);
        assert_eq!(out.code, Some(0), "{bin}: {:?}", out.stderr);
    }
    let (out, _) = run_env(
        "xcc-agent",
        &["--zone", "xcc.test", "crds"],
        &[("DOMAIN_SUFFIX", "*.test")],
    );
    assert_eq!(out.code, Some(0), "{:?}", out.stderr);
}

#[test]
fn a_missing_records_file_is_a_usage_error() {
    usage_error(
        "xcc-agent",
        &[
            "--records",
            "/nonexistent/records.yaml",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &["--records", "/nonexistent/records.yaml", "No such file"],
    );
}

/// Every line of `stderr` is a JSON object with a level and a message; returns them.
fn json_lines(what: &str, stderr: &str) -> Vec<serde_json::Value> {
    assert!(!stderr.trim().is_empty(), "{what}: nothing on stderr");
    stderr
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {line:?}"));
            assert!(value["level"].is_string(), "{what}: {line}");
            assert!(value["message"].is_string(), "{what}: {line}");
            value
        })
        .collect()
}

#[test]
fn with_log_format_json_every_line_of_a_failing_run_is_json_the_last_one_too() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.yaml");
    std::fs::write(&records, "records:\n  a.xcc.test: [192.0.2.1]\n").unwrap();
    let records = records.to_str().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let runs: &[(&str, &[&str], i32)] = &[
        // Usage errors, before logging is set up.
        ("xcc-agent", &["--log-format", "json", "--ttl", "abc"], 2),
        (
            "xcc-controller",
            &["--log-format=json", "--probe-interval", "0s"],
            2,
        ),
        (
            "kubectl-xcc",
            &["status", "--log-format", "json", "--request-timeout", "x"],
            2,
        ),
        // Failures after it.
        (
            "xcc-agent",
            &[
                "--log-format",
                "json",
                "--records",
                records,
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
            ],
            2,
        ),
        (
            "kubectl-xcc",
            &[
                "status",
                "--log-format",
                "json",
                "--kubeconfig",
                &kubeconfig,
            ],
            1,
        ),
    ];
    for (bin, args, code) in runs {
        let what = format!("{bin} {}", args.join(" "));
        let (out, _) = run_env(bin, args, &[]);
        assert_eq!(out.code, Some(*code), "{what}: {:?}", out.stderr);
        let lines = json_lines(&what, &out.stderr);
        let last = lines.last().unwrap();
        assert_eq!(last["level"], "ERROR", "{what}: {last}");
        assert!(
            !last["message"].as_str().unwrap().starts_with("error:"),
            "{what}: {last}"
        );
    }
    // The environment variable asks for JSON as the flag does.
    let (out, _) = run_env(
        "xcc-coredns-patcher",
        &["--service-wait", "2h"],
        &[("XCC_LOG_FORMAT", "json")],
    );
    assert_eq!(out.code, Some(2), "{:?}", out.stderr);
    json_lines("xcc-coredns-patcher", &out.stderr);
}

#[test]
fn with_log_format_json_lists_are_json_arrays() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.yaml");
    std::fs::write(
        &records,
        "records:\n  a.xcc.test:\n    addresses: [192.0.2.1]\n",
    )
    .unwrap();
    let mut child = Command::new(binary("xcc-agent"))
        .args([
            "--log-format",
            "json",
            "--zone",
            "xcc.test,example.test",
            "--records",
            records.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut serving = None;
    for line in stderr.lines() {
        let line = line.unwrap();
        let value: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if value["message"] == "xcc-agent serving" {
            serving = Some(value);
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let serving = serving.expect("the agent said it serves");
    assert_eq!(
        serving["zones"],
        serde_json::json!(["xcc.test", "example.test"]),
        "{serving}"
    );
}

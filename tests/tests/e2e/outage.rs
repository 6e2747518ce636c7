//! One line per outage (issue 35): with their API server stopped for a minute and started
//! again, the agent (as Lease holder, its reconcilers on) and the controller each write at most
//! one WARN per source that failed and one "recovered" line for each, in our words (no Rust
//! `Debug` dump), instead of a WARN per retry.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};

use xcc_e2e::{
    Testbed, free_port, require_testbed, spawn,
    xcc::{binary, http_status, metrics_text, sample_sum},
};

use crate::resource_sync::{manifest, prepare_member, start_agent_with, wait_for};

/// How long the API server stays stopped.
const OUTAGE: Duration = Duration::from_secs(60);

/// The message of a log line (text format): what follows the level and the target.
fn message(line: &str) -> Option<&str> {
    let rest = line
        .split_once(" WARN ")
        .or_else(|| line.split_once(" INFO "))?
        .1;
    Some(rest.split_once(": ").map_or(rest, |(_, message)| message))
}

/// A message without its fields (`key=value` after the words).
fn words(message: &str) -> String {
    message
        .split(' ')
        .take_while(|token| {
            !token.split_once('=').is_some_and(|(key, _)| {
                !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a log says: its WARN lines by source (the outage reporter's `<source> fails (...)`, or
/// the whole message of any other WARN), and its "recovered" lines by source.
struct Said {
    warned: BTreeMap<String, Vec<String>>,
    recovered: BTreeMap<String, usize>,
}

fn said(log: &str) -> Said {
    let mut warned: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut recovered: BTreeMap<String, usize> = BTreeMap::new();
    for line in log.lines() {
        let Some(message) = message(line) else {
            continue;
        };
        if line.contains(" WARN ") {
            // The reporter's source, or the words of any other WARN without its fields (a
            // retry's delay or error differ from line to line; the words do not).
            let source = match message.split_once(" fails (") {
                Some((source, _)) => source.to_string(),
                None => words(message),
            };
            warned.entry(source).or_default().push(line.to_string());
        } else if let Some(rest) = message.strip_prefix("recovered: ")
            && let Some((source, _)) = rest.split_once(" works again")
        {
            *recovered.entry(source.to_string()).or_default() += 1;
        }
    }
    Said { warned, recovered }
}

/// Whether `line` holds a Rust `Debug` dump (`Status { code: 503, .. }`, `Api(ErrorResponse`),
/// not a span's fields (`reconciling object{object.ref=..}`).
fn debug_dump(line: &str) -> bool {
    line.contains(" { ") || line.contains("Error(") || line.contains("Some(")
}

/// Every outage that warned has said it recovered.
fn all_recovered(path: &Path) -> bool {
    let said = said(&std::fs::read_to_string(path).unwrap_or_default());
    said.warned
        .iter()
        .filter(|(_, lines)| lines.iter().any(|l| l.contains(" fails (")))
        .all(|(source, _)| said.recovered.contains_key(source))
}

fn check(name: &str, path: &Path, since: usize) {
    let log = std::fs::read_to_string(path).unwrap();
    let during = &log[since.min(log.len())..];
    let said = said(during);
    eprintln!("{name}: WARN lines by source:");
    for (source, lines) in &said.warned {
        eprintln!("  {} × {source}", lines.len());
    }
    eprintln!("{name}: recovered: {:?}", said.recovered);
    assert!(
        !said.warned.is_empty(),
        "{name} said nothing of the outage:\n{during}"
    );
    for (source, lines) in &said.warned {
        assert_eq!(
            lines.len(),
            1,
            "{name}: {} WARN lines of {source:?}:\n{}",
            lines.len(),
            lines.join("\n")
        );
        let line = &lines[0];
        // An outage (not a standing condition, said once and again only when it changes) ends
        // with its "recovered" line.
        if line.contains(" fails (") {
            assert_eq!(
                said.recovered.get(source),
                Some(&1),
                "{name}: one \"recovered\" line of {source:?}:\n{during}"
            );
        }
    }
    for line in during
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
    {
        assert!(!debug_dump(line), "{name}: a Debug dump: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_without_the_api_server_is_one_warning_and_one_recovered_line_per_source() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["solo"]).await.unwrap();
    let cluster = bed.cluster("solo");
    // The agent as installed (the RBAC of every feature), Lease holder with --leader-elect,
    // every default feature on; and the controller.
    let prepared = prepare_member(&binaries, cluster).await;
    for file in [
        "manifests/agent/plumber.yaml",
        "manifests/agent/projection.yaml",
        "manifests/controller/controller.yaml",
    ] {
        cluster
            .kubectl(&["apply", "-f", &manifest(file)])
            .await
            .unwrap();
    }
    let member = prepared.start(
        start_agent_with(
            cluster,
            "xcc-agent.log",
            &[
                "--leader-elect",
                "--pod-name=agent-0",
                "--shutdown-delay=0s",
            ],
        )
        .await,
    );
    let mut agent = member.agent;
    let agent_log = cluster.dir().join("xcc-agent.log");
    let kubeconfig = cluster
        .mint_kubeconfig("xcc-system", "xcc-controller")
        .await
        .unwrap();
    let controller_admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let controller_log = cluster.dir().join("xcc-controller.log");
    let mut controller = spawn(
        "xcc-controller",
        &binary("xcc-controller"),
        &[
            format!("--kubeconfig={}", kubeconfig.path.display()),
            format!("--admin-listen={controller_admin}"),
            "--leader-elect".into(),
            "--pod-name=controller-0".into(),
        ],
        &controller_log,
    )
    .unwrap();
    for (name, log) in [
        ("the agent", &agent_log),
        ("the controller", &controller_log),
    ] {
        wait_for(
            &format!("{name} leads"),
            Duration::from_secs(60),
            || async {
                std::fs::read_to_string(log)
                    .ok()?
                    .contains("leading: the work starts")
                    .then_some(())
            },
        )
        .await;
    }
    wait_for(
        "the controller is ready",
        Duration::from_secs(30),
        || async { (http_status(controller_admin, "/readyz").await == Some(200)).then_some(()) },
    )
    .await;
    // What each said before the outage is not counted.
    let before = |path: &Path| std::fs::read_to_string(path).map_or(0, |log| log.len());
    let (agent_since, controller_since) = (before(&agent_log), before(&controller_log));

    cluster.stop();
    let stopped = Instant::now();
    // Both saw it: the agent's EndpointSlice watch fails, and each wrote its first WARN.
    let watch_state = |state: &'static str| {
        let admin = agent.admin;
        async move {
            let text = metrics_text(admin).await.ok()?;
            // One series per EndpointSlice watch (the record feed's in the agent's namespace,
            // MCS's of every namespace): whether any is in `state`.
            (sample_sum(
                &text,
                "xcc_sync_watch_state",
                &[("kind", "EndpointSlice"), ("state", state)],
            ) >= 1.0)
                .then_some(())
        }
    };
    wait_for(
        "the agent's EndpointSlice watch fails",
        Duration::from_secs(30),
        || async {
            let synced = watch_state("synced").await;
            synced.is_none().then_some(())
        },
    )
    .await;
    for (name, log, since) in [
        ("the agent", &agent_log, agent_since),
        ("the controller", &controller_log, controller_since),
    ] {
        wait_for(&format!("{name} warns of the outage"), OUTAGE, || async {
            let log = std::fs::read_to_string(log).ok()?;
            log.get(since..)?.contains(" WARN ").then_some(())
        })
        .await;
    }
    // The outage lasts its minute (both binaries retry all along), then the API server is back.
    // sleep: the outage the scenario is made of.
    tokio::time::sleep(OUTAGE.saturating_sub(stopped.elapsed())).await;
    cluster.restart().await.unwrap();
    let restarted = Instant::now();
    wait_for(
        "the agent's EndpointSlice watch is synced again",
        Duration::from_secs(60),
        || watch_state("synced"),
    )
    .await;
    for (name, log) in [
        ("the agent", &agent_log),
        ("the controller", &controller_log),
    ] {
        wait_for(
            &format!("{name} says each source recovered"),
            Duration::from_secs(90),
            || async { all_recovered(log).then_some(()) },
        )
        .await;
    }
    eprintln!(
        "recovered {:.1} s after the API server was back",
        restarted.elapsed().as_secs_f64()
    );
    check("xcc-agent", &agent_log, agent_since);
    check("xcc-controller", &controller_log, controller_since);
    controller.stop(Duration::from_secs(5));
    agent.process.stop(Duration::from_secs(5));
}

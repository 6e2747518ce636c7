//! The dependency graph stays lean: no crate that a workspace member depends on directly is
//! built at two versions, and no deprecated crate is in the graph. Reads `cargo metadata` (the
//! lock file as it is, offline) for the platform cargo runs on (the platform xcc is built for).
//!
//! What counts:
//! - A *direct dependency* is a normal or build dependency of a workspace member; the graph is
//!   everything the members' normal and build dependencies pull, transitively: what the
//!   binaries are made of. Dev-dependencies are left out of both: they are built only for the
//!   tests (tower-test, the only way to mock the API server, pins its own versions), and a
//!   second version there costs compile time, not the shipped binaries.
//! - A deprecated crate is refused anywhere in the lock file, dev-dependencies included: code
//!   built for the tests is maintained too.
//!
//! An allowance names the crate, the package whose presence makes it necessary, and why; it
//! fails as soon as it is stale (that package left the graph, or the crate is no longer
//! duplicated), so that it is removed with its cause.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// A direct dependency allowed at two versions while package `until_gone` is in the graph.
struct Allowance {
    krate: &'static str,
    until_gone: &'static str,
    reason: &'static str,
}

const ALLOWED: &[Allowance] = &[];

/// Workspace members whose dependencies are not choices (left out of the direct ones).
const NOT_CHOICES: &[(&str, &str)] = &[(
    "xcc-workspace-hack",
    "its dependencies mirror the graph (syn 2 and syn 3 included) to unify features across \
     the binaries; they follow what the other crates pull",
)];

/// Deprecated or unmaintained crates, with why and what replaces them.
const DEPRECATED: &[(&str, &str)] = &[
    (
        "serde_yaml",
        "deprecated by its author (0.9.34+deprecated); xcc_kube::yaml (serde-saphyr)",
    ),
    ("yaml-rust", "unmaintained (RUSTSEC-2024-0320); saphyr"),
    (
        "atty",
        "unmaintained, unsound (RUSTSEC-2024-0375); std::io::IsTerminal",
    ),
    ("ansi_term", "unmaintained (RUSTSEC-2021-0139); anstyle"),
    ("instant", "unmaintained (RUSTSEC-2024-0384); std::time"),
    ("proc-macro-error", "unmaintained (RUSTSEC-2024-0370)"),
    ("derivative", "unmaintained (RUSTSEC-2024-0388)"),
    ("paste", "archived by its author (RUSTSEC-2024-0436)"),
    ("serde_cbor", "unmaintained (RUSTSEC-2021-0127)"),
    (
        "failure",
        "deprecated (RUSTSEC-2020-0036); thiserror, anyhow",
    ),
    ("net2", "deprecated (RUSTSEC-2020-0016); socket2"),
    ("tempdir", "deprecated by its authors; tempfile"),
    ("structopt", "in maintenance mode; clap's derive"),
];

struct Package {
    name: String,
    version: String,
}

/// The problems of `metadata` (cargo metadata's JSON), one line each.
fn check(
    metadata: &Value,
    allowed: &[Allowance],
    not_choices: &[(&str, &str)],
    deprecated: &[(&str, &str)],
) -> Vec<String> {
    let mut problems = Vec::new();
    let packages: BTreeMap<&str, Package> = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let text = |key: &str| p[key].as_str().unwrap_or_default().to_string();
            (
                p["id"].as_str().unwrap_or_default(),
                Package {
                    name: text("name"),
                    version: text("version"),
                },
            )
        })
        .collect();
    let name = |id: &str| packages.get(id).map_or(id.to_string(), |p| p.name.clone());
    let label = |id: &str| {
        packages
            .get(id)
            .map_or(id.to_string(), |p| format!("{} {}", p.name, p.version))
    };
    // id → its normal and build dependencies; every resolved id → all its dependencies.
    let mut shipped: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut any: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for node in metadata["resolve"]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let id = node["id"].as_str().unwrap_or_default();
        for dep in node["deps"].as_array().into_iter().flatten() {
            let pkg = dep["pkg"].as_str().unwrap_or_default();
            any.entry(id).or_default().push(pkg);
            let kinds = dep["dep_kinds"].as_array().into_iter().flatten();
            if kinds.map(|k| k["kind"].as_str()).any(|k| k != Some("dev")) {
                shipped.entry(id).or_default().push(pkg);
            }
        }
    }
    let members: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let member_names: BTreeSet<String> = members.iter().map(|id| name(id)).collect();
    for (member, why) in not_choices {
        if !member_names.contains(*member) {
            problems.push(format!(
                "stale exception: {member} is no longer a workspace member (was: {why})"
            ));
        }
    }

    // The graph: what the members' normal and build dependencies pull.
    let graph = reach(&members, &shipped);
    let everything = reach(&members, &any);
    let mut versions: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for id in &graph {
        versions.entry(name(id)).or_default().insert(id);
    }
    let in_graph = |krate: &str| versions.contains_key(krate);

    let mut direct: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for member in &members {
        if not_choices.iter().any(|(m, _)| *m == name(member)) {
            continue;
        }
        for dep in shipped.get(member).into_iter().flatten() {
            direct.entry(name(dep)).or_default().insert(name(member));
        }
    }
    let mut duplicated = BTreeSet::new();
    for (krate, users) in &direct {
        let ids = &versions[krate];
        if ids.len() < 2 {
            continue;
        }
        duplicated.insert(krate.clone());
        if allowed
            .iter()
            .any(|a| a.krate == krate && in_graph(a.until_gone))
        {
            continue;
        }
        // Who pulls each version.
        let pulled: Vec<String> = ids
            .iter()
            .map(|id| {
                let by: BTreeSet<String> = graph
                    .iter()
                    .filter(|parent| shipped.get(*parent).is_some_and(|d| d.contains(id)))
                    .map(|parent| label(parent))
                    .collect();
                format!(
                    "{} (from {})",
                    packages.get(id).map_or("?", |p| p.version.as_str()),
                    by.into_iter().collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        problems.push(format!(
            "{krate}, a direct dependency of {}, is built at {} versions: {}",
            users.iter().cloned().collect::<Vec<_>>().join(", "),
            ids.len(),
            pulled.join("; ")
        ));
    }
    for allowance in allowed {
        if !in_graph(allowance.until_gone) {
            problems.push(format!(
                "stale allowance for {}: {} is no longer in the graph (was: {})",
                allowance.krate, allowance.until_gone, allowance.reason
            ));
        } else if !duplicated.contains(allowance.krate) {
            problems.push(format!(
                "stale allowance for {}: it is no longer a direct dependency at two versions \
                 (was: {})",
                allowance.krate, allowance.reason
            ));
        }
    }

    for id in &everything {
        let krate = name(id);
        if let Some((_, why)) = deprecated.iter().find(|(d, _)| *d == krate) {
            let by: BTreeSet<String> = everything
                .iter()
                .filter(|parent| any.get(*parent).is_some_and(|d| d.contains(id)))
                .map(|parent| label(parent))
                .collect();
            problems.push(format!(
                "deprecated crate {} (from {}): {why}",
                label(id),
                by.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    problems
}

/// Every id reachable from `from` along `edges`.
fn reach<'a>(from: &[&'a str], edges: &BTreeMap<&'a str, Vec<&'a str>>) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut stack = from.to_vec();
    while let Some(id) = stack.pop() {
        if seen.insert(id) {
            stack.extend(edges.get(id).into_iter().flatten().copied());
        }
    }
    seen
}

fn cargo() -> Command {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    cargo
}

fn workspace_metadata() -> Value {
    let version = cargo().arg("-vV").output().unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let host = version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap_or_else(|| panic!("no host in cargo -vV: {version}"));
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", host])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn no_direct_dependency_twice_and_no_deprecated_crate() {
    let problems = check(&workspace_metadata(), ALLOWED, NOT_CHOICES, DEPRECATED);
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// Metadata of members `app` (depends on `shared` 1 and `lib`) and `hack` (depends on
/// `shared` 2 itself), `lib` 1 (depends on `shared` 2 and on `extra`), and `app`'s dev-dependency
/// `serde_yaml`.
fn synthetic() -> Value {
    let id = |name: &str, version: &str| format!("registry#{name}@{version}");
    let package = |name: &str, version: &str| serde_json::json!({"id": id(name, version), "name": name, "version": version});
    let dep = |name: &str, version: &str, kind: Option<&str>| {
        serde_json::json!({"name": name, "pkg": id(name, version),
                           "dep_kinds": [{"kind": kind, "target": null}]})
    };
    serde_json::json!({
        "packages": [package("app", "0.1.0"), package("hack", "0.1.0"), package("lib", "1.0.0"),
                     package("shared", "1.0.0"), package("shared", "2.0.0"),
                     package("extra", "1.0.0"), package("serde_yaml", "0.9.34")],
        "workspace_members": [id("app", "0.1.0"), id("hack", "0.1.0")],
        "resolve": {"nodes": [
            {"id": id("app", "0.1.0"), "deps": [dep("shared", "1.0.0", None),
                                              dep("lib", "1.0.0", Some("build")),
                                              dep("serde_yaml", "0.9.34", Some("dev"))]},
            {"id": id("hack", "0.1.0"), "deps": [dep("shared", "2.0.0", None)]},
            {"id": id("lib", "1.0.0"), "deps": [dep("shared", "2.0.0", None),
                                              dep("extra", "1.0.0", None)]},
            {"id": id("shared", "1.0.0"), "deps": []},
            {"id": id("shared", "2.0.0"), "deps": []},
            {"id": id("extra", "1.0.0"), "deps": []},
            {"id": id("serde_yaml", "0.9.34"), "deps": []},
        ]},
    })
}

#[test]
fn the_checker_names_a_duplicate_its_versions_and_who_pulls_each() {
    let problems = check(&synthetic(), &[], &[], &[]);
    assert_eq!(
        problems,
        [
            "shared, a direct dependency of app, hack, is built at 2 versions: \
             1.0.0 (from app 0.1.0); 2.0.0 (from hack 0.1.0, lib 1.0.0)"
        ]
    );
    // A member whose dependencies are not choices does not make them direct ones; app's own
    // dependency still counts.
    let problems = check(&synthetic(), &[], &[("hack", "mirrors")], &[]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("shared, a direct dependency of app, "));
}

#[test]
fn the_checker_finds_a_deprecated_crate_even_as_a_dev_dependency() {
    let problems = check(
        &synthetic(),
        &[Allowance {
            krate: "shared",
            until_gone: "lib",
            reason: "lib pins shared 2",
        }],
        &[],
        DEPRECATED,
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("deprecated crate serde_yaml 0.9.34 (from app 0.1.0): deprecated"),
        "{problems:?}"
    );
}

#[test]
fn an_allowance_fails_when_its_cause_is_gone() {
    // The package that made it necessary is not in the graph: the duplicate is reported, and
    // the allowance as stale.
    let gone = Allowance {
        krate: "shared",
        until_gone: "gtmpl",
        reason: "gtmpl pins shared 2",
    };
    let problems = check(&synthetic(), &[gone], &[], &[]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("shared, a direct dependency"));
    assert!(
        problems[1].starts_with("stale allowance for shared: gtmpl is no longer in the graph"),
        "{problems:?}"
    );
    // The crate is no longer duplicated.
    let no_duplicate = Allowance {
        krate: "extra",
        until_gone: "lib",
        reason: "lib pins extra 1",
    };
    let problems = check(&synthetic(), &[no_duplicate], &[("hack", "mirrors")], &[]);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("stale allowance for extra: it is no longer")),
        "{problems:?}"
    );
    let problems = check(&synthetic(), &[], &[("gone", "was a member")], &[]);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("stale exception: gone is no longer a workspace member")),
        "{problems:?}"
    );
}

//! The documentation against the code: no test bed, no cluster.
//!
//! - every relative link of `README.md` and `docs/*.md` (anchors included) leads somewhere;
//! - every flag of an `xcc-agent`, `xcc-controller`, `xcc-coredns-patcher` or `kubectl xcc`
//!   command line in the docs, and every subcommand, is in that command's `--help`;
//! - every `XCC_*` environment variable the pages name is one a binary reads, every repository
//!   path they name exists, and every `xcc_*` metric they name is in `docs/metrics.md`;
//! - the benchmark plots are what `bench/plot.py` makes of `docs/bench-data/`.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use xcc_e2e::xcc::binary;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the workspace")
        .to_path_buf()
}

/// `README.md` and every `docs/*.md`, as (path relative to the root, text).
fn pages() -> Vec<(PathBuf, String)> {
    let root = root();
    let mut paths = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(&root).expect("under the root").to_path_buf())
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(root.join(&p))
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
            (p, text)
        })
        .collect()
}

/// The pages whose prose names environment variables, paths and metrics of xcc (the others
/// name the test bed's and the benchmarks' own).
fn checked_for_names(path: &Path) -> bool {
    [
        "README.md",
        "docs/architecture.md",
        "docs/migration.md",
        "docs/troubleshooting.md",
        "docs/security.md",
        "docs/managed-coredns.md",
        "docs/install.md",
        "docs/gateway-dns.md",
        "docs/secret-replication.md",
        "docs/resource-sync.md",
        "docs/plumber.md",
        "docs/api-projection.md",
        "docs/cli.md",
        "docs/kubeconfig-trust.md",
        "docs/mcs.md",
    ]
    .iter()
    .any(|p| path == Path::new(p))
}

/// A page cut into prose lines and the lines of its shell code blocks (other fences, such as
/// program output or YAML, are left out), each with its 1-based line number.
struct Parsed<'a> {
    prose: Vec<(usize, &'a str)>,
    code: Vec<(usize, &'a str)>,
}

fn parse(text: &str) -> Parsed<'_> {
    let mut parsed = Parsed {
        prose: Vec::new(),
        code: Vec::new(),
    };
    // `None` outside a fence, else whether the fence holds shell commands.
    let mut fence: Option<bool> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(["sh", "bash", "shell", "console"].contains(&info.trim())),
            };
            continue;
        }
        match fence {
            None => parsed.prose.push((i + 1, line)),
            Some(true) => parsed.code.push((i + 1, line)),
            Some(false) => {}
        }
    }
    parsed
}

/// The inline code spans of a prose line.
fn spans(line: &str) -> Vec<&str> {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s)
        .collect()
}

/// GitHub's anchor of a heading: lower case, only letters, digits, spaces, `-` and `_` kept,
/// spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    let mut out = BTreeSet::new();
    for (_, line) in parse(text).prose {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let base = slug(heading.trim_start_matches('#'));
        let n = seen.entry(base.clone()).or_default();
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the Markdown links (and images) of a prose line.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                out.push(&after[..end]);
                rest = &after[end..];
            }
            None => break,
        }
    }
    out
}

#[test]
fn every_relative_link_leads_somewhere() {
    let root = root();
    let mut broken = Vec::new();
    for (page, text) in pages() {
        let dir = page.parent().unwrap_or(Path::new(""));
        for (n, line) in parse(&text).prose {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target, None),
                };
                let path = if file.is_empty() {
                    page.clone()
                } else {
                    dir.join(file)
                };
                let full = root.join(&path);
                if !full.exists() {
                    broken.push(format!("{}:{n}: {target}: no such file", page.display()));
                    continue;
                }
                if let Some(anchor) = anchor
                    && full.extension().is_some_and(|e| e == "md")
                {
                    let target_text = std::fs::read_to_string(&full).expect("a readable page");
                    if !anchors(&target_text).contains(anchor) {
                        broken.push(format!(
                            "{}:{n}: {target}: no heading with anchor #{anchor} in {}",
                            page.display(),
                            path.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// What `--help` says about one command: its flags (with whether each takes a value), its
/// subcommands, its environment variables.
#[derive(Default, Debug)]
struct Help {
    flags: BTreeMap<String, bool>,
    commands: BTreeSet<String>,
    env: BTreeSet<String>,
}

fn help_of(bin: &Path, path: &[&str]) -> Help {
    let out = Command::new(bin)
        .args(path)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    assert!(
        out.status.success(),
        "{} {} --help failed: {}",
        bin.display(),
        path.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut help = Help::default();
    let mut in_commands = false;
    for line in text.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
            continue;
        }
        if in_commands {
            if line.is_empty() || !line.starts_with("  ") {
                in_commands = false;
            } else if let Some(name) = line.split_whitespace().next() {
                help.commands.insert(name.to_string());
            }
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with('-') {
            // `-n, --namespace <NS>`, `--zone <ZONE>`, `-h, --help`
            let mut words = trimmed.split_whitespace().peekable();
            while let Some(word) = words.next() {
                let word = word.trim_end_matches(',');
                if !word.starts_with('-') {
                    break;
                }
                let takes_value = words.peek().is_some_and(|w| w.starts_with('<'));
                help.flags.insert(word.to_string(), takes_value);
            }
        }
        let mut rest = line;
        while let Some(at) = rest.find("[env: ") {
            let after = &rest[at + 6..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            help.env.insert(name);
            rest = after;
        }
    }
    help
}

/// Every command of the four binaries, by its path (`["kubectl-xcc", "cluster", "join"]`).
struct Helps(BTreeMap<Vec<String>, Help>);

impl Helps {
    fn load() -> Helps {
        let mut all = BTreeMap::new();
        for name in [
            "xcc-agent",
            "xcc-controller",
            "xcc-coredns-patcher",
            "kubectl-xcc",
        ] {
            let bin = binary(name);
            let mut todo = vec![Vec::<String>::new()];
            while let Some(path) = todo.pop() {
                let args: Vec<&str> = path.iter().map(String::as_str).collect();
                let help = help_of(&bin, &args);
                for command in &help.commands {
                    if command != "help" {
                        let mut next = path.clone();
                        next.push(command.clone());
                        todo.push(next);
                    }
                }
                let mut key = vec![name.to_string()];
                key.extend(path);
                all.insert(key, help);
            }
        }
        Helps(all)
    }

    fn env(&self) -> BTreeSet<&str> {
        self.0
            .values()
            .flat_map(|h| h.env.iter().map(String::as_str))
            .collect()
    }
}

/// Where a command line invokes one of our binaries: the binary's name and the words after it,
/// up to the end of that shell command. A binary counts only where a command starts (after
/// `VAR=value` words, `sudo`, `env`), as a path's last part too; `kubectl xcc` is the plugin,
/// and `cargo run -p <binary> -- ...` runs it.
fn invocations(text: &str) -> Vec<(&'static str, Vec<String>)> {
    const BINARIES: [&str; 4] = [
        "xcc-agent",
        "xcc-controller",
        "xcc-coredns-patcher",
        "kubectl-xcc",
    ];
    let mut out = Vec::new();
    let mut command: Vec<&str> = Vec::new();
    let mut commands = Vec::new();
    for word in text.split_whitespace() {
        if ["|", "||", "&&", ";"].contains(&word) {
            commands.push(std::mem::take(&mut command));
        } else {
            command.push(word);
        }
    }
    commands.push(command);
    for command in commands {
        let mut words = command
            .iter()
            .copied()
            .skip_while(|w| w.contains('=') || ["$", "sudo", "env", "time"].contains(w))
            .take_while(|w| !["#", ">", "2>", "\\"].contains(w));
        let Some(first) = words.next() else {
            continue;
        };
        let rest: Vec<&str> = words.collect();
        let program = first.rsplit('/').next().unwrap_or(first);
        let (name, args): (&'static str, &[&str]) =
            if let Some(name) = BINARIES.iter().find(|b| **b == program) {
                (name, &rest[..])
            } else if program == "kubectl" && rest.first() == Some(&"xcc") {
                ("kubectl-xcc", &rest[1..])
            } else if program == "cargo" && rest.first() == Some(&"run") {
                let package = rest
                    .windows(2)
                    .find(|w| ["-p", "--package", "--bin"].contains(&w[0]))
                    .map(|w| w[1]);
                let Some(name) = package.and_then(|p| BINARIES.iter().find(|b| **b == p)) else {
                    continue;
                };
                let after = rest
                    .iter()
                    .position(|w| *w == "--")
                    .map_or(rest.len(), |i| i + 1);
                (name, &rest[after..])
            } else {
                continue;
            };
        out.push((
            name,
            args.iter()
                .map(|a| a.trim_end_matches([',', ')', ';']).to_string())
                .collect(),
        ));
    }
    out
}

/// Whether `word` is a subcommand of the command at `path` that its help does not list.
fn alias_exists(path: &[String], word: &str) -> bool {
    let mut command = Command::new(binary(&path[0]));
    command.args(&path[1..]).args([word, "--help"]);
    command.output().is_ok_and(|out| out.status.success())
}

/// Problems of one invocation: flags and subcommands its help does not list.
fn check_invocation(helps: &Helps, name: &str, args: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut path = vec![name.to_string()];
    let mut positional = 0;
    let mut k = 0;
    while k < args.len() {
        let arg = &args[k];
        k += 1;
        if arg.starts_with('-') && arg.len() > 1 && arg != "--" {
            let flag = arg.split('=').next().unwrap_or(arg);
            // A flag of this command or of one it belongs to (clap's global flags).
            let known = (1..=path.len())
                .rev()
                .find_map(|n| helps.0.get(&path[..n]).and_then(|h| h.flags.get(flag)));
            match known {
                Some(takes_value) => {
                    if *takes_value && !arg.contains('=') {
                        k += 1;
                    }
                }
                None => problems.push(format!("{} has no flag {flag}", path.join(" "))),
            }
            continue;
        }
        let help = helps.0.get(&path).expect("a loaded command");
        if help.commands.contains(arg.as_str()) && positional == 0 {
            path.push(arg.clone());
            continue;
        }
        // A placeholder or a value of ours; a lower-case word where a subcommand is due is one
        // that no longer exists.
        let word_like = arg.chars().all(|c| c.is_ascii_lowercase() || c == '-');
        if positional == 0 && !help.commands.is_empty() && word_like {
            // A hidden alias (an old name still accepted) has a help of its own.
            if alias_exists(&path, arg) {
                return problems;
            }
            problems.push(format!("{} has no subcommand {arg}", path.join(" ")));
        }
        positional += 1;
    }
    problems
}

#[test]
fn every_documented_command_flag_and_variable_exists() {
    let helps = Helps::load();
    let env = helps.env();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        let parsed = parse(&text);
        let mut commands: Vec<(usize, String)> = Vec::new();
        for (n, line) in &parsed.prose {
            for span in spans(line) {
                commands.push((*n, span.to_string()));
            }
        }
        // Fenced blocks: a command may go on over lines ending in `\`.
        let mut joined = String::new();
        let mut start = 0;
        for (n, line) in &parsed.code {
            if joined.is_empty() {
                start = *n;
            }
            let line = line.trim_start_matches("$ ");
            match line.strip_suffix('\\') {
                Some(head) => {
                    joined.push_str(head);
                    joined.push(' ');
                }
                None => {
                    joined.push_str(line);
                    commands.push((start, std::mem::take(&mut joined)));
                }
            }
        }
        for (n, command) in &commands {
            for (name, args) in invocations(command) {
                checked += 1;
                for problem in check_invocation(&helps, name, &args) {
                    problems.push(format!("{}:{n}: `{command}`: {problem}", page.display()));
                }
            }
        }
        if checked_for_names(&page) {
            for (n, line) in &parsed.prose {
                for span in spans(line) {
                    for word in span.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                        // `XCC_<FEATURE>` is a placeholder.
                        if word.starts_with("XCC_") && !word.ends_with('_') && !env.contains(word) {
                            problems.push(format!(
                                "{}:{n}: {word} is not an environment variable of any binary",
                                page.display()
                            ));
                        }
                    }
                }
            }
        }
    }
    eprintln!("{checked} command lines of the binaries checked against their --help");
    // The docs show dozens of command lines: finding few means the parser lost them.
    assert!(
        checked >= 20,
        "only {checked} command lines of ours found in the docs"
    );
    assert!(
        problems.is_empty(),
        "the docs name what the binaries do not have:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_named_repository_path_exists() {
    let root = root();
    let tops = [
        "agent/",
        "controller/",
        "kube-support/",
        "sync/",
        "dns/",
        "cli/",
        "coredns-patcher/",
        "manifests/",
        "bench/",
        "tests/",
        "docs/",
        "examples/",
    ];
    let mut missing = Vec::new();
    for (page, text) in pages() {
        if !checked_for_names(&page) {
            continue;
        }
        for (n, line) in parse(&text).prose {
            for span in spans(line) {
                let is_path = tops.iter().any(|t| span.starts_with(t))
                    && span
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c));
                if is_path && !root.join(span).exists() {
                    missing.push(format!("{}:{n}: {span}", page.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the docs name paths that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_named_metric_is_in_the_reference() {
    let root = root();
    let reference = std::fs::read_to_string(root.join("docs/metrics.md")).expect("docs/metrics.md");
    let mut unknown = Vec::new();
    let mut named = 0;
    for (page, text) in pages() {
        if !checked_for_names(&page) {
            continue;
        }
        for (n, line) in parse(&text).prose {
            for span in spans(line) {
                let name: String = span
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                // `xcc_kube::status` is a Rust path, not a metric.
                let path = span[name.len()..].starts_with("::");
                if !name.starts_with("xcc_") || name.ends_with('_') || path {
                    continue;
                }
                named += 1;
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .unwrap_or(&name);
                // The whole name: `xcc_sync_watch_errors` is not `xcc_sync_watch_errors_total`.
                let whole = reference.match_indices(base).any(|(at, _)| {
                    !reference[at + base.len()..]
                        .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                });
                if !whole {
                    unknown.push(format!("{}:{n}: {name}", page.display()));
                }
            }
        }
    }
    assert!(named >= 5, "only {named} metric names found in the docs");
    assert!(
        unknown.is_empty(),
        "metrics not in docs/metrics.md:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn benchmark_plots_are_what_the_script_makes_of_the_data() {
    let root = root();
    let out = Command::new("python3")
        .arg(root.join("bench/plot.py"))
        .arg("--check")
        .arg(root.join("docs/bench-data"))
        .arg(root.join("docs"))
        .output()
        .expect("python3 runs (the benchmarks need it too)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And every plot is shown.
    let benchmarks =
        std::fs::read_to_string(root.join("docs/benchmarks.md")).expect("docs/benchmarks.md");
    for entry in std::fs::read_dir(root.join("docs/bench-data")).expect("docs/bench-data") {
        let path = entry.expect("an entry").path();
        let stem = path.file_stem().expect("a name").to_string_lossy();
        let svg = format!("(bench-{stem}.svg)");
        assert!(
            benchmarks.contains(&svg),
            "docs/benchmarks.md does not show {svg}"
        );
    }
}

#[test]
fn the_checks_find_what_they_look_for() {
    // The parsers on known text, so that a check that finds nothing is not a broken parser.
    assert_eq!(
        slug("The controller (`xcc-controller --help`)"),
        "the-controller-xcc-controller---help"
    );
    assert_eq!(
        link_targets("see [a](b.md#c) and ![d](e.svg)"),
        ["b.md#c", "e.svg"]
    );
    assert_eq!(spans("a `b` c `d e`"), ["b", "d e"]);
    let found = invocations("kubectl xcc cluster join --context A | sort");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, "kubectl-xcc");
    assert_eq!(found[0].1, ["cluster", "join", "--context", "A"]);
    let found = invocations(
        "cargo run --release -p xcc-agent -- --records r.yaml && X=1 xcc-controller crds",
    );
    assert_eq!(found.len(), 2);
    assert_eq!(
        found[0],
        (
            "xcc-agent",
            vec!["--records".to_string(), "r.yaml".to_string()]
        )
    );
    assert_eq!(found[1], ("xcc-controller", vec!["crds".to_string()]));
    assert!(
        invocations("kubectl -n xcc-system scale deployment xcc-controller --replicas=0")
            .is_empty()
    );
}

/// The fenced blocks of `text` whose info string is `lang`.
fn fences(text: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    // Inside a fence: whether it is wanted, and its lines so far.
    let mut current: Option<(bool, String)> = None;
    for line in text.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            match current.take() {
                Some((true, block)) => out.push(block),
                Some((false, _)) => {}
                None => current = Some((info.trim() == lang, String::new())),
            }
            continue;
        }
        if let Some((_, block)) = current.as_mut() {
            block.push_str(line);
            block.push('\n');
        }
    }
    out
}

/// The kustomize overlays the docs show (a YAML block with `resources: [../xcc/...]`, as kept
/// beside a checkout named `xcc`) build with kubectl's kustomize, and do what they say.
#[test]
fn documented_overlays_build() {
    let Some(bed) = xcc_e2e::require_testbed() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::os::unix::fs::symlink(root(), dir.path().join("xcc")).expect("a link to the checkout");
    let mut built = 0;
    for (page, text) in pages() {
        for block in fences(&text, "yaml") {
            if !block.lines().any(|l| l.starts_with("resources: [../xcc/")) {
                continue;
            }
            let overlay = dir.path().join(format!("overlay-{built}"));
            std::fs::create_dir(&overlay).expect("an overlay directory");
            std::fs::write(overlay.join("kustomization.yaml"), &block).expect("written");
            let out = Command::new(&bed.kubectl)
                .arg("kustomize")
                .arg(&overlay)
                .output()
                .expect("kubectl runs");
            assert!(
                out.status.success(),
                "the overlay in {} does not build:\n{block}\n{}",
                page.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            let manifests = String::from_utf8_lossy(&out.stdout);
            assert!(
                manifests.contains("name: xcc-agent"),
                "the overlay in {} has no agent",
                page.display()
            );
            if block.contains("components/without-coredns-patcher") {
                assert!(
                    !manifests.contains("kind: Job") && !manifests.contains("xcc-coredns-patcher"),
                    "the overlay without the patcher in {} still has some of it",
                    page.display()
                );
            }
            if block.contains("components/restart-coredns") {
                assert!(
                    manifests.contains("name: XCC_RESTART_COREDNS\n          value: \"true\""),
                    "the overlay in {} does not let the patcher restart CoreDNS",
                    page.display()
                );
            }
            if page == Path::new("docs/install.md") {
                assert!(
                    manifests.contains("value: clusters.example.com")
                        && !manifests.contains("plumber.jnytnai0613.github.io"),
                    "the install page's overlay sets the zone and leaves plumber out"
                );
            }
            built += 1;
        }
    }
    assert!(built >= 2, "only {built} overlays found in the docs");
}

/// `docs/security.md` lists the RBAC of each ServiceAccount: it names every ServiceAccount
/// (`namespace/name`), Role and ClusterRole the manifests define, so a new one cannot go
/// undocumented.
#[test]
fn the_security_page_names_every_identity_and_role() {
    let root = root();
    let page = std::fs::read_to_string(root.join("docs/security.md")).expect("docs/security.md");
    let mut files = Vec::new();
    for dir in [
        "manifests/agent",
        "manifests/controller",
        "manifests/coredns-patcher",
    ] {
        for entry in std::fs::read_dir(root.join(dir)).expect("a manifests folder") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut missing = Vec::new();
    let mut seen = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).expect("a readable manifest");
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).expect("the manifests are YAML");
        for value in docs {
            let field = |v: &serde_json::Value, k: &str| {
                v.get(k).and_then(|x| x.as_str()).map(str::to_string)
            };
            let Some(kind) = field(&value, "kind") else {
                continue;
            };
            let meta = value.get("metadata").cloned().unwrap_or_default();
            let name = field(&meta, "name").unwrap_or_default();
            let namespace = field(&meta, "namespace").unwrap_or_default();
            let wanted = match kind.as_str() {
                "ServiceAccount" => format!("`{namespace}/{name}`"),
                "Role" | "ClusterRole" => format!("`{name}`"),
                _ => continue,
            };
            seen += 1;
            if !page.contains(&wanted) {
                let file = path.strip_prefix(&root).unwrap_or(path);
                missing.push(format!("{kind} {wanted} ({})", file.display()));
            }
        }
    }
    assert!(
        seen >= 10,
        "only {seen} identities and roles found in manifests/"
    );
    assert!(
        missing.is_empty(),
        "docs/security.md does not name:\n{}",
        missing.join("\n")
    );
}

/// A kubeconfig with `cluster` and `user` as the bodies (YAML flow mappings) of its one context.
fn kubeconfig(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: peer\n\
         clusters: [{{name: c, cluster: {cluster}}}]\n\
         users: [{{name: u, user: {user}}}]\n\
         contexts: [{{name: peer, context: {{cluster: c, user: u, namespace: team-1}}}}]\n"
    )
}

/// The trust table of `docs/security.md`, run: every field it says is refused is refused by the
/// gate with that field named (and accepted with the flag it names, where it names one), and a
/// kubeconfig of everything it says is accepted passes.
#[test]
fn the_trust_rules_are_what_the_security_page_says() {
    use xcc_kube::trust::{PeerTrust, check};
    let page = std::fs::read_to_string(root().join("docs/security.md")).expect("docs/security.md");
    let server = "server: https://192.0.2.1:6443";
    let token = "token: abc";
    // Where each field the table may name goes, and a value for it.
    let sample = |field: &str| -> Option<(String, String)> {
        let user = |u: &str| Some((server.to_string(), u.to_string()));
        let cluster = |c: &str| Some((format!("{server}, {c}"), token.to_string()));
        match field {
            "exec" => user("exec: {apiVersion: client.authentication.k8s.io/v1, command: touch}"),
            "auth-provider" => user("auth-provider: {name: oidc}"),
            "tokenFile" => user("tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token"),
            "client-certificate" => user("client-certificate: /etc/cert.pem"),
            "client-key" => user("client-key: /etc/key.pem"),
            "username" => user("username: admin"),
            "password" => user("password: secret"),
            "as" => user("{token: abc, as: admin}"),
            "as-uid" => user("{token: abc, as-uid: '0'}"),
            "as-groups" => user("{token: abc, as-groups: [system:masters]}"),
            "as-user-extra" => user("{token: abc, as-user-extra: {a: [b]}}"),
            "certificate-authority" => cluster("certificate-authority: /etc/ca.pem"),
            "proxy-url" => cluster("proxy-url: http://proxy.example:3128"),
            "insecure-skip-tls-verify: true" => cluster("insecure-skip-tls-verify: true"),
            "http://" => Some((
                "server: http://192.0.2.1:8080".to_string(),
                token.to_string(),
            )),
            _ => None,
        }
    };
    let mut refused_rows = 0;
    for line in page.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | field(s) | verdict | why |
        if cells.len() < 4 || !cells[2].starts_with("refused") {
            continue;
        }
        refused_rows += 1;
        let flag = cells[2]
            .strip_prefix("refused unless `")
            .and_then(|rest| rest.split('`').next());
        for field in spans(cells[1]) {
            let field = field.trim_start_matches("an ").trim_end_matches(" server");
            let (cluster, user) = sample(field).unwrap_or_else(|| {
                panic!("docs/security.md names {field:?}, which this test has no sample for")
            });
            let user = if user.starts_with('{') {
                user
            } else {
                format!("{{{user}}}")
            };
            let text = kubeconfig(&format!("{{{cluster}}}"), &user);
            let key = field.split(':').next().unwrap_or(field);
            match check(text.as_bytes(), "the page's sample", PeerTrust::default()) {
                Ok(_) => panic!("{field} is accepted, but docs/security.md says refused:\n{text}"),
                Err(error) => assert!(
                    error.to_string().contains(key.trim_end_matches("://")),
                    "refusing {field}, the error does not name it: {error}"
                ),
            }
            if let Some(flag) = flag {
                let trust = PeerTrust {
                    allow_peer_proxy: flag == "--allow-peer-proxy",
                    allow_insecure_peers: flag == "--allow-insecure-peers",
                };
                assert!(
                    trust != PeerTrust::default(),
                    "docs/security.md names an unknown flag {flag}"
                );
                check(text.as_bytes(), "the page's sample", trust)
                    .unwrap_or_else(|e| panic!("{field} with {flag} is refused: {e}"));
            }
        }
    }
    assert!(
        refused_rows >= 6,
        "the trust table of docs/security.md was not found"
    );
    let accepted = kubeconfig(
        &format!(
            "{{{server}, certificate-authority-data: Y2E=, tls-server-name: peer.example, \
             disable-compression: true, extensions: [{{name: x, extension: {{}}}}]}}"
        ),
        "{client-certificate-data: Y2VydA==, client-key-data: a2V5}",
    );
    check(
        accepted.as_bytes(),
        "the accepted fields",
        PeerTrust::default(),
    )
    .unwrap_or_else(|e| panic!("what docs/security.md says is accepted is refused: {e}"));
    check(
        kubeconfig(&format!("{{{server}}}"), &format!("{{{token}}}")).as_bytes(),
        "a token",
        PeerTrust::default(),
    )
    .unwrap_or_else(|e| panic!("a token is refused: {e}"));
}

/// The README is the way in, not the reference: what xcc is, the quick start, the install and one
/// path per reader, each pointing into docs/. It stays short enough to read in one sitting.
#[test]
fn the_readme_is_short_and_leads_into_the_docs() {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = text.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines (at most 300): move reference into docs/"
    );
    for page in [
        "docs/install.md",
        "docs/migration.md",
        "docs/troubleshooting.md",
        "CHANGELOG.md",
    ] {
        assert!(
            text.contains(&format!("]({page}")),
            "README.md does not link {page}"
        );
    }
    assert!(
        text.contains("./test.sh"),
        "README.md lost the test command"
    );
}

//! One shutdown vocabulary: every stop is a `tokio_util::sync::CancellationToken`, handed down
//! from the signal through leader election (a child token per term) and the kit to each
//! reconciler and its loops, with no conversion on the way. This test reads the sources of every
//! workspace crate but the test bed, and fails on a `watch::Receiver<bool>` (the stop flag each
//! part used to convert the token into and back) outside [`ALLOWED`].

use std::path::Path;

use xcc_e2e::sources::{members, rust_files};

/// Files that still hold a `watch::Receiver<bool>`, each with why; an entry whose file holds
/// none fails the test, so the list only shrinks.
const ALLOWED: &[(&str, &str)] = &[
    (
        "agent/src/feed/records.rs",
        "the records file's poll loop still waits on a flag (the feed is reworked apart)",
    ),
    (
        "sync/src/kit.rs",
        "stop_flag: the flag the records file's poll loop waits on, made from the token",
    ),
    (
        "kube-support/src/scenario.rs",
        "not a stop: the mocked API server's signal that its expectations were met",
    ),
];

/// The stop flag.
const FLAG: &str = "watch::Receiver<bool>";

/// The lines (1-based) of `source` that name a stop flag, outside comments.
fn flags(source: &str) -> Vec<usize> {
    source
        .lines()
        .enumerate()
        .filter(|(_, line)| line.split("//").next().unwrap_or("").contains(FLAG))
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn every_stop_is_a_cancellation_token() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let members = members(root);
    assert!(members.len() > 5, "read the members: {members:?}");
    let mut found = Vec::new();
    let mut files = 0;
    for member in members.iter().filter(|m| *m != "tests") {
        let mut sources = Vec::new();
        rust_files(&root.join(member).join("src"), &mut sources);
        for path in sources {
            files += 1;
            let source = std::fs::read_to_string(&path).unwrap();
            let relative = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .to_string();
            for line in flags(&source) {
                found.push((relative.clone(), line));
            }
        }
    }
    assert!(files > 50, "read the workspace's sources ({files} files)");
    let unexplained: Vec<String> = found
        .iter()
        .filter(|(file, _)| !ALLOWED.iter().any(|(allowed, _)| allowed == file))
        .map(|(file, line)| format!("{file}:{line}"))
        .collect();
    assert!(
        unexplained.is_empty(),
        "stop flags (take the CancellationToken, or a child of it, instead): {unexplained:?}"
    );
    let stale: Vec<&str> = ALLOWED
        .iter()
        .filter(|(allowed, _)| !found.iter().any(|(file, _)| file == allowed))
        .map(|(allowed, _)| *allowed)
        .collect();
    assert!(
        stale.is_empty(),
        "these files hold no stop flag any more: remove them from ALLOWED: {stale:?}"
    );
}

#[test]
fn the_rule_finds_stop_flags_outside_comments() {
    let source = "async fn run(stop: tokio::sync::watch::Receiver<bool>) {}\n\
                  // a watch::Receiver<bool> in a comment\n\
                  fn lead(shutdown: &mut watch::Receiver<bool>) {}\n\
                  fn run(stop: CancellationToken) {}\n";
    assert_eq!(flags(source), [1, 3]);
}

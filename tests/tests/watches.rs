//! Every watch of xcc is opened by the sync core (`xcc_sync::sources::watch`, and the shared
//! sources, typed watches and wakers built on it), so that all of them relist after a failure
//! and retry on the same schedules. This test reads the sources of every workspace crate except
//! the core (`sync/src`) and the test bed (`tests/`), and fails on a call that opens a watch
//! itself: kube-runtime's `watcher(`, `metadata_watcher(`, `watch_object(`, `reflector(` or a
//! `Controller::new(` (which opens its own watch; `Controller::for_shared_stream` or
//! `for_stream` on the core's watches instead).
//!
//! Every controller loop is the kit's (`xcc_sync::kit::Loop`: backoff, shutdown, the span per
//! reconcile, the metrics and the result lines of every reconciler), so the second test fails on
//! a kube-runtime `Controller::` built outside the core, and on the `.owns(` and `.watches(`
//! that open a controller's own watch of another kind (`Loop::owned` and `Loop::wake_by` take
//! the core's shared watches instead).

use std::path::Path;

use xcc_e2e::sources::{members, rust_files};

/// Files that still open a watch of their own, each with why; an entry whose file opens none
/// fails the test, so the list only shrinks.
const ALLOWED: &[(&str, &str)] = &[];

/// Files that still build a controller loop of their own, each with why; as [`ALLOWED`], an
/// entry whose file builds none fails the test.
const ALLOWED_LOOPS: &[(&str, &str)] = &[(
    "controller/src/run.rs",
    "the GatewayDNS controller: it moves onto the kit with the controller on a Core (issue 39)",
)];

/// What builds a controller loop, or opens a controller's own watch of another kind.
const LOOPS: &[&str] = &["Controller::", ".owns(", ".watches("];

/// The calls that open a watch.
const OPENERS: &[&str] = &[
    "watcher(",
    "metadata_watcher(",
    "watch_object(",
    "reflector(",
    "Controller::new(",
];

/// The lines (1-based) of `source` that open a watch, outside comments.
fn watches_opened(source: &str) -> Vec<usize> {
    lines_calling(source, OPENERS)
}

/// The lines (1-based) of `source` that build a controller loop, outside comments.
fn loops_built(source: &str) -> Vec<usize> {
    lines_calling(source, LOOPS)
}

/// The lines (1-based) of `source` that call one of `calls`, outside comments.
fn lines_calling(source: &str, calls: &[&str]) -> Vec<usize> {
    let mut found = Vec::new();
    for (i, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let opens = calls.iter().any(|opener| {
            code.match_indices(opener).any(|(at, _)| {
                // A whole name: `metadata_watcher(` is not also a `watcher(`, nor is `my_watcher(`.
                !code[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        });
        if opens {
            found.push(i + 1);
        }
    }
    found
}

/// Every line of the workspace's sources (but the core's and the test bed's) that `rule` finds,
/// as (file, line), and how many files were read.
fn found_outside_the_core(rule: fn(&str) -> Vec<usize>) -> (Vec<(String, usize)>, usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let members = members(root);
    assert!(members.len() > 5, "read the members: {members:?}");
    let mut found = Vec::new();
    let mut files = 0;
    for member in members.iter().filter(|m| *m != "sync" && *m != "tests") {
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
            for line in rule(&source) {
                found.push((relative.clone(), line));
            }
        }
    }
    (found, files)
}

/// The lines of `found` in no file of `allowed`, and the files of `allowed` with none.
fn unexplained_and_stale<'a>(
    found: &[(String, usize)],
    allowed: &[(&'a str, &str)],
) -> (Vec<String>, Vec<&'a str>) {
    let unexplained = found
        .iter()
        .filter(|(file, _)| !allowed.iter().any(|(allowed, _)| allowed == file))
        .map(|(file, line)| format!("{file}:{line}"))
        .collect();
    let stale = allowed
        .iter()
        .filter(|(allowed, _)| !found.iter().any(|(file, _)| file == allowed))
        .map(|(allowed, _)| *allowed)
        .collect();
    (unexplained, stale)
}

#[test]
fn no_watch_is_opened_outside_the_sync_core() {
    let (opened, files) = found_outside_the_core(watches_opened);
    assert!(files > 50, "read the workspace's sources ({files} files)");
    let (unexplained, stale) = unexplained_and_stale(&opened, ALLOWED);
    assert!(
        unexplained.is_empty(),
        "watches opened outside the sync core (open them with xcc_sync::sources::watch, or \
         Wakers::ensure for a watch that wakes one object): {unexplained:?}"
    );
    assert!(
        stale.is_empty(),
        "these files open no watch any more: remove them from ALLOWED: {stale:?}"
    );
}

#[test]
fn every_controller_loop_is_the_kits() {
    let (built, files) = found_outside_the_core(loops_built);
    assert!(files > 50, "read the workspace's sources ({files} files)");
    let (unexplained, stale) = unexplained_and_stale(&built, ALLOWED_LOOPS);
    assert!(
        unexplained.is_empty(),
        "controller loops built outside the sync core (run them with xcc_sync::kit::Loop, \
         woken by the core's shared watches: Loop::owned, Loop::wake_by): {unexplained:?}"
    );
    assert!(
        stale.is_empty(),
        "these files build no controller loop any more: remove them from ALLOWED_LOOPS: {stale:?}"
    );
}

#[test]
fn the_rule_finds_calls_that_open_a_watch_and_passes_the_rest() {
    let opening = "let a = watcher(api, watcher::Config::default());\n\
                   let b = reflector::reflector(writer, stream);\n\
                   let c = metadata_watcher(api, config);\n\
                   let d = kube::runtime::watcher::watch_object(api, name);\n\
                   let e = Controller::new(api, config);\n";
    assert_eq!(watches_opened(opening), [1, 2, 3, 4, 5]);
    let passing = "let config = watcher::Config::default();\n\
                   // watcher(api, config) in a comment\n\
                   let events = xcc_sync::sources::watch(api, config, Schedule::Local);\n\
                   let store = events.reflect(writer);\n\
                   let mine = my_watcher(api);\n\
                   let c = Controller::for_shared_stream(handle, store);\n";
    assert!(watches_opened(passing).is_empty(), "{passing}");
}

#[test]
fn the_loop_rule_finds_controllers_and_their_own_watches_and_passes_the_kit() {
    let building = "let c = Controller::for_shared_stream(handle, store);\n\
                    let d = kube::runtime::Controller::for_stream(stream, store)\n\
                    .owns(Api::<Role>::all(client.clone()), watcher::Config::default())\n\
                    .watches(api, config, mapper);\n";
    assert_eq!(loops_built(building), [1, 2, 3, 4]);
    let passing = "let l = Loop::of(&counted, &kind).owned(roles.subscribe());\n\
                   // Controller::for_shared_stream in a comment\n\
                   let m = l.wake_by(links.subscribe(), mapper);\n\
                   let n = MyController::new();\n";
    assert!(loops_built(passing).is_empty(), "{passing}");
}

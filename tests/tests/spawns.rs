//! The work of a reconciler runs only while its replica holds the Lease: the leader aborts it
//! when the Lease is lost (and the work did not stop in time) and at shutdown. A task started
//! with `tokio::spawn` outlives the future that started it, so every task of that work is
//! started with `xcc_sync::task::spawn_owned` (aborted when its handle is dropped, with its
//! owner) or a `JoinSet` its owner holds. This test reads the sync core (`sync/src`) and the
//! reconcilers of the agent, and fails on a `tokio::spawn(` that is not in [`ALLOWED`] with
//! the reason its task ends with its owner all the same.

use std::path::Path;

use xcc_e2e::sources::rust_files;

/// The folders and files read, relative to the workspace.
const READ: &[&str] = &[
    "sync/src",
    "agent/src/clusterregistry",
    "agent/src/mcs",
    "agent/src/plumber",
    "agent/src/projection",
    "agent/src/replication",
];

/// Files whose `tokio::spawn(` calls (outside tests) end with their owner otherwise: how many
/// each has, and why. A count that no longer matches fails the test, so a new spawn in one of
/// these files is looked at too.
const ALLOWED: &[(&str, usize, &str)] = &[
    (
        "sync/src/task.rs",
        1,
        "spawn_owned itself: its handle aborts the task on drop",
    ),
    (
        "sync/src/leader.rs",
        1,
        "the leader's work: aborted by the leader after its grace",
    ),
    (
        "sync/src/kit.rs",
        1,
        "stop_flag: ends at the stop or when its receivers are dropped",
    ),
    (
        "sync/src/wakers.rs",
        1,
        "each object's watch: aborted by Wakers::stop and Wakers' Drop",
    ),
    (
        "sync/src/sources/watch.rs",
        1,
        "a shared source's watch: aborted when its last view drops it (Shared's Drop)",
    ),
    (
        "agent/src/clusterregistry/engine/watches.rs",
        1,
        "a source's forwarder: aborted by Source's Drop",
    ),
    (
        "agent/src/clusterregistry/engine/queue.rs",
        1,
        "a delayed wake: ends after its delay, and its caller aborts it on drop",
    ),
    (
        "agent/src/clusterregistry/access.rs",
        1,
        "a recheck: ends after RECHECK, only sending on a channel",
    ),
    (
        "agent/src/plumber/replicator/watch.rs",
        1,
        "a replicated kind's forwarder: aborted by the Context's Drop",
    ),
];

/// The lines (1-based) of `source` with a `tokio::spawn(`, outside comments and before its test
/// module (`mod tests {`, at the end of a file by the workspace's convention).
fn spawns(source: &str) -> Vec<usize> {
    source
        .lines()
        .take_while(|line| line.trim() != "mod tests {")
        .enumerate()
        .filter(|(_, line)| {
            line.split("//")
                .next()
                .is_some_and(|code| code.contains("tokio::spawn("))
        })
        .map(|(i, _)| i + 1)
        .collect()
}

#[test]
fn every_task_of_a_reconciler_ends_with_its_owner() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for read in READ {
        rust_files(&root.join(read), &mut files);
    }
    assert!(files.len() > 40, "read the sources ({} files)", files.len());
    let mut wrong = Vec::new();
    let mut seen = Vec::new();
    for path in files {
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .to_string();
        let found = spawns(&std::fs::read_to_string(&path).unwrap());
        if found.is_empty() {
            continue;
        }
        seen.push(relative.clone());
        match ALLOWED.iter().find(|(file, _, _)| *file == relative) {
            Some((_, count, _)) if *count == found.len() => {}
            _ => wrong.extend(found.iter().map(|line| format!("{relative}:{line}"))),
        }
    }
    assert!(
        wrong.is_empty(),
        "tasks that may outlive the reconciler that started them (start them with \
         xcc_sync::task::spawn_owned and keep the handle, or in a JoinSet the owner holds; or \
         say in ALLOWED why they end with it): {wrong:?}"
    );
    let stale: Vec<&str> = ALLOWED
        .iter()
        .filter(|(file, _, _)| !seen.iter().any(|s| s == file))
        .map(|(file, _, _)| *file)
        .collect();
    assert!(
        stale.is_empty(),
        "these files spawn no task any more: remove them from ALLOWED: {stale:?}"
    );
}

#[test]
fn the_rule_finds_spawns_outside_comments_and_tests() {
    let source = "let a = tokio::spawn(work());\n\
                  // tokio::spawn(in_a_comment());\n\
                  let b = xcc_sync::task::spawn_owned(work());\n\
                  let c = tokio::spawn(async move { more().await });\n\
                  #[cfg(test)]\n\
                  mod tests {\n\
                  fn t() { tokio::spawn(in_a_test()); }\n\
                  }\n";
    assert_eq!(spawns(source), [1, 4]);
}

//! The workspace's own sources, for the tests that read them as text (`tests/tests/stops.rs`,
//! `watches.rs`, `spawns.rs`).

use std::path::{Path, PathBuf};

/// The workspace's members, as its Cargo.toml lists them (on one line).
pub fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("the workspace lists its members on one line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// `path` itself when it is a file, else every `.rs` file below it (none when it does not
/// exist), appended to `files`.
pub fn rust_files(path: &Path, files: &mut Vec<PathBuf>) {
    if path.is_file() {
        files.push(path.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() || path.extension().is_some_and(|e| e == "rs") {
            rust_files(&path, files);
        }
    }
}

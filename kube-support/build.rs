//! The compiler's version and the source revision, for the `xcc_build_info` metric and every
//! binary's `--version`.
//!
//! The revision is `XCC_REVISION` when it is set and not empty (the Dockerfile passes its
//! `REVISION` build argument: the image's build context has no `.git`), else git's short commit
//! of `HEAD` (12 digits), `-dirty` after it when tracked files differ from it, else `unknown`
//! (no git, or not a checkout).
//!
//! The script runs again only when that can change: `XCC_REVISION`, git's `HEAD`, the branch it
//! points to (its file, or `packed-refs` and the folder a new file would appear in) and the
//! index (a commit, `git add`, a checkout). An edit not yet staged is seen at the next of these.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=XCC_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-env-changed=XCC_REVISION");
    println!("cargo:rerun-if-changed=build.rs");

    let revision = match std::env::var("XCC_REVISION") {
        Ok(given) if !given.trim().is_empty() => given.trim().to_string(),
        _ => {
            watch_git();
            git_revision().unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env=XCC_REVISION={revision}");
}

/// The output of `git ARGS` in this crate's folder, trimmed; `None` when git is missing or fails.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

fn git_revision() -> Option<String> {
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // Without optional locks, status does not rewrite the index it is watched through (else
    // every build would find the index newer than this script's run and run it again).
    let changes = git(&[
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
    ])?;
    Some(match changes.is_empty() {
        true => commit,
        false => format!("{commit}-dirty"),
    })
}

/// The path git keeps `name` at (`HEAD`, `index`, `refs/heads/main`, `packed-refs`), absolute;
/// worktrees keep `HEAD` and `index` apart from the shared refs, and git knows where.
fn git_path(name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(git(&[
        "rev-parse",
        "--path-format=absolute",
        "--git-path",
        name,
    ])?);
    path.is_absolute().then_some(path)
}

/// Asks cargo to run this script again when `HEAD`, the branch it points to or the index moves.
/// Only files that exist are named: a missing one would make cargo run the script at every build.
fn watch_git() {
    let watch = |path: &Path| {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    };
    let Some(head) = git_path("HEAD") else {
        return;
    };
    watch(&head);
    if let Some(index) = git_path("index") {
        watch(&index);
    }
    // Detached, HEAD holds the commit itself; else the branch's file, which a commit rewrites,
    // or (packed) packed-refs and the folder its loose file would be written to.
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(loose) = git_path(&branch)
    {
        if loose.exists() {
            watch(&loose);
        } else {
            if let Some(packed) = git_path("packed-refs") {
                watch(&packed);
            }
            // The nearest folder of it that exists, up to `refs` (never all of `.git`).
            let mut folder = loose.parent();
            while let Some(dir) = folder {
                if dir.exists() {
                    watch(dir);
                    break;
                }
                if dir.ends_with("refs") {
                    break;
                }
                folder = dir.parent();
            }
        }
    }
}

//! tools/krew-manifest.sh on the built binary: the archive holds what the manifest says (its
//! sha256, the `bin`, the `files`), the binary in it runs, and the manifest is krew's Plugin
//! with the fields krew and krew-index require.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

use std::{path::Path, process::Command};

use serde_json::Value;

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-xcc");

fn run(command: &mut Command) -> String {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn script(out: &Path) -> Command {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut command = Command::new("bash");
    command
        .arg(root.join("tools/krew-manifest.sh"))
        .env("KREW_MANIFEST_OUT", out)
        .env("RELEASE_REPOSITORY", "https://example.org/team/xcc/")
        .env_remove("RELEASE_VERSION");
    command
}

#[test]
fn the_krew_manifest_names_the_archive_it_was_built_with() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("krew");
    run(script(&out).arg(format!("linux/amd64={PLUGIN}")));

    let manifest: Value =
        xcc_kube::yaml::from_str(&std::fs::read_to_string(out.join("xcc.yaml")).unwrap()).unwrap();
    assert_eq!(
        manifest["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(manifest["metadata"]["name"], "xcc", "kubectl xcc");
    let spec = &manifest["spec"];
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(spec["version"].as_str(), Some(version.as_str()));
    assert_eq!(spec["homepage"], "https://example.org/team/xcc");
    let short = spec["shortDescription"].as_str().unwrap();
    assert!(!short.is_empty() && short.len() <= 50, "{short:?}");
    assert!(
        spec["description"]
            .as_str()
            .is_some_and(|d| d.contains("kubectl xcc status")),
        "{spec:?}"
    );
    let platforms = spec["platforms"].as_array().unwrap();
    assert_eq!(platforms.len(), 1);
    let platform = &platforms[0];
    assert_eq!(platform["selector"]["matchLabels"]["os"], "linux");
    assert_eq!(platform["selector"]["matchLabels"]["arch"], "amd64");
    let archive = format!("kubectl-xcc_{version}_linux_amd64.tar.gz");
    assert_eq!(
        platform["uri"].as_str().unwrap(),
        format!("https://example.org/team/xcc/releases/download/{version}/{archive}")
    );

    // The sha256 is the archive's.
    let archive = out.join(&archive);
    let sum = run(Command::new("sha256sum").arg(&archive));
    assert_eq!(
        platform["sha256"].as_str().unwrap(),
        sum.split_whitespace().next().unwrap()
    );
    // `bin` and every `files[].from` are in the archive; the binary runs.
    let listing = run(Command::new("tar").arg("-tzf").arg(&archive));
    let entries: Vec<&str> = listing.lines().collect();
    let bin = platform["bin"].as_str().unwrap();
    assert_eq!(bin, "kubectl-xcc");
    let files = platform["files"].as_array().unwrap();
    assert!(files.iter().any(|f| f["from"] == bin && f["to"] == "."));
    for file in files {
        let from = file["from"].as_str().unwrap();
        assert!(entries.contains(&from), "{from} not in {entries:?}");
    }
    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&unpacked));
    let version_line = run(Command::new(unpacked.join(bin)).arg("--version"));
    assert_eq!(
        version_line.trim(),
        format!("kubectl-xcc {}", xcc_kube::metrics::VERSION)
    );

    // The same binary gives the same archive (a release can be rebuilt and checked).
    let again = dir.path().join("again");
    run(script(&again).arg(format!("linux/amd64={PLUGIN}")));
    assert_eq!(
        std::fs::read(&archive).unwrap(),
        std::fs::read(again.join(archive.file_name().unwrap())).unwrap()
    );
}

#[test]
fn bad_platforms_are_refused_with_the_accepted_form() {
    let dir = tempfile::tempdir().unwrap();
    let out = script(&dir.path().join("krew"))
        .arg(format!("plan9/amd64={PLUGIN}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("OS/ARCH=BINARY"), "{stderr}");
    assert!(!dir.path().join("krew/xcc.yaml").exists());
}

/// A copy of the script in a tree of its own whose Cargo.toml's `[workspace.package]` holds
/// `package` (the script reads the version and the project's URL there).
fn script_in_tree(tree: &Path, package: &str) -> Command {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    std::fs::create_dir_all(tree.join("tools")).unwrap();
    std::fs::copy(
        root.join("tools/krew-manifest.sh"),
        tree.join("tools/krew-manifest.sh"),
    )
    .unwrap();
    std::fs::write(
        tree.join("Cargo.toml"),
        format!("[workspace]\nmembers = []\n\n[workspace.package]\n{package}\n"),
    )
    .unwrap();
    let mut command = Command::new("bash");
    command
        .arg(tree.join("tools/krew-manifest.sh"))
        .env("KREW_MANIFEST_OUT", tree.join("krew"))
        .env_remove("RELEASE_REPOSITORY")
        .env_remove("RELEASE_VERSION");
    command
}

#[test]
fn the_homepage_is_the_repository_of_cargo_toml() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    run(script_in_tree(
        &tree,
        "version = \"1.2.3\"\nrepository = \"https://example.net/org/xcc\"",
    )
    .arg(format!("linux/amd64={PLUGIN}")));
    let manifest: Value =
        xcc_kube::yaml::from_str(&std::fs::read_to_string(tree.join("krew/xcc.yaml")).unwrap())
            .unwrap();
    assert_eq!(manifest["spec"]["homepage"], "https://example.net/org/xcc");
    assert_eq!(manifest["spec"]["version"], "v1.2.3");
}

#[test]
fn without_a_project_url_no_manifest_with_a_placeholder_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    let out = script_in_tree(&tree, "version = \"1.2.3\"")
        .arg(format!("linux/amd64={PLUGIN}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("repository") && stderr.contains("RELEASE_REPOSITORY"),
        "{stderr}"
    );
    assert!(!tree.join("krew/xcc.yaml").exists());
}

//! The states and condition reasons the agent writes in a status are enums with their wire
//! strings (`xcc_kube::status_enum!`, one set per API, in its `api.rs`), not `&str` constants:
//! a reconciler cannot write a value its API does not declare, and a reader can match on them.
//!
//! This test reads the agent's sources and fails on what the enums replaced: a `mod reason` /
//! `mod state` of constants, or a string constant whose value is a CamelCase word (the shape of
//! every Kubernetes reason) or whose name says it is a reason, state or status (unless the value is
//! a path or a key). Condition
//! *types* (`Ready`, `InsecurePeer`) are keys, not values a condition takes: a constant named
//! `*_CONDITION` may hold one. Annotations, labels, finalizers and field managers (with a `/`, a
//! `.` or lower case) are not status values and pass.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

use std::path::{Path, PathBuf};

/// One string constant: its name and value.
struct Constant {
    name: String,
    value: String,
}

/// The `const NAME: &str = "value"` (or `&'static str`) of `source`, across line breaks.
fn string_constants(source: &str) -> Vec<Constant> {
    let flat: String = source.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut found = Vec::new();
    let mut rest = flat.as_str();
    while let Some(at) = rest.find("const ") {
        // `const` as a word, not the end of another identifier.
        let before = flat.len() - rest.len() + at;
        let word_start = before == 0 || !flat.as_bytes()[before - 1].is_ascii_alphanumeric();
        rest = &rest[at + "const ".len()..];
        if !word_start {
            continue;
        }
        let Some((name, after)) = rest.split_once(':') else {
            break;
        };
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let after = after.trim_start();
        let Some(after) = after
            .strip_prefix("&str = \"")
            .or_else(|| after.strip_prefix("&'static str = \""))
        else {
            continue;
        };
        let Some((value, _)) = after.split_once('"') else {
            continue;
        };
        found.push(Constant {
            name: name.to_string(),
            value: value.to_string(),
        });
    }
    found
}

/// Whether `value` looks like a Kubernetes reason or state: one CamelCase word.
fn camel_word(value: &str) -> bool {
    value.starts_with(|c: char| c.is_ascii_uppercase())
        && value.chars().all(|c| c.is_ascii_alphanumeric())
        && value.chars().any(|c| c.is_ascii_lowercase())
}

/// What `source` declares that should be a status enum, one line per finding.
fn status_constants(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("").trim();
        for module in ["reason", "reasons", "state", "states"] {
            if code.starts_with(&format!("pub mod {module} "))
                || code.starts_with(&format!("mod {module} "))
            {
                found.push(format!("a module of constants: `{code}`"));
            }
        }
    }
    for Constant { name, value } in string_constants(source) {
        if name.ends_with("_CONDITION") {
            continue;
        }
        // A path or a key (`/`, `.`) is not a value, whatever its name.
        let named = ["REASON", "STATE", "STATUS"]
            .iter()
            .any(|w| name.split('_').any(|part| part == *w))
            && !value.contains(['/', '.']);
        if named || camel_word(&value) {
            found.push(format!("`const {name}: &str = \"{value}\"`"));
        }
    }
    found
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_status_value_is_a_string_constant() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(
        files.len() > 30,
        "read the agent's sources in {}",
        root.display()
    );
    let mut found = Vec::new();
    for path in &files {
        let source = std::fs::read_to_string(path).unwrap();
        for finding in status_constants(&source) {
            found.push(format!(
                "{}: {finding}",
                path.strip_prefix(&root).unwrap().display()
            ));
        }
    }
    assert!(
        found.is_empty(),
        "status values declared as string constants; declare them with `xcc_kube::status_enum!` \
         in the API's api.rs instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_rule_finds_reason_and_state_constants_and_passes_the_rest() {
    let old = "/// Ready condition reasons.\npub mod reason {\n    pub const BOUND: &str = \"Bound\";\n    pub const CA_NOT_FOUND: &str = \"ClusterCANotFound\";\n}\n";
    let found = status_constants(old);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].contains("pub mod reason"));
    assert!(found[1].contains("BOUND"));
    // One constant, over two lines, of a lower-case state.
    let state = "const APPLY_STATE:\n    &'static str =\n    \"applied\";";
    assert_eq!(status_constants(state).len(), 1);
    let rejected = "pub const KUBECONFIG_REJECTED: &str = \"KubeconfigRejected\";";
    assert_eq!(status_constants(rejected).len(), 1);

    let fine = "pub const FINALIZER: &str = \"replication.xcc.test/cleanup\";\n\
                pub const INSECURE_PEER_CONDITION: &str = \"InsecurePeer\";\n\
                pub const FIELD_MANAGER: &str = \"xcc-agent\";\n\
                const LABEL_PREFIX: &str =\n    \"replication.apiresources.multicluster.x-tanzu.vmware.com/\";\n\
                const STATUS_PATH: &str = \"/apis/x.test/v1/links/a/status\";\n\
                pub const SAMPLE: &str = include_str!(\"sample.yaml\");\n\
                let reasons = 3; // pub mod reason {\n\
                pub const LIMIT: usize = 3;\n";
    assert_eq!(status_constants(fine), Vec::<String>::new());
}

//! Every write of a reconciler to the local cluster goes through the sink (`xcc_sync::sink`):
//! counted in the sync metrics (which the e2e tests' `writes_since` read), deletes conditional on
//! a UID. This test reads the reconcilers' sources and fails on a call of an `Api` write method
//! (`.patch(`, `.delete(`, `.create(`, `.replace(`, ...) or of the status writer
//! (`xcc_kube::status::write`, uncounted; `sink::write_status` counts it) outside the sink,
//! unless the allow-list below says why it belongs where it is.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

use std::path::{Path, PathBuf};

/// The write methods of `kube::Api`.
const WRITES: &[&str] = &[
    "patch",
    "patch_status",
    "patch_metadata",
    "patch_subresource",
    "delete",
    "delete_collection",
    "create",
    "create_subresource",
    "replace",
    "replace_status",
    "replace_subresource",
];

/// `(file, method, text in the call, why)`: writes that legitimately are not the sink's.
const ALLOWED: &[(&str, &str, &str, &str)] = &[
    (
        "plumber/replicator/execute.rs",
        "patch",
        "PatchParams::apply(FIELD_MANAGER)",
        "applies to the Replicator's target clusters (peers), not the local one; counted as apply",
    ),
    (
        "projection/downstream.rs",
        "create",
        "Review",
        "a SelfSubjectReview/SubjectAccessReview is a question to the API server, nothing is stored",
    ),
    (
        "projection/proxy/authz.rs",
        "create",
        "review",
        "the aggregated server's access reviews: questions, nothing is stored",
    ),
    (
        "clusterregistry/access.rs",
        "create",
        "review",
        "access reviews asked of peers: questions, nothing is stored",
    ),
    (
        "mcs/clusterset.rs",
        "create",
        "property",
        "a ClusterProperty is created only where none exists (KEP-2149: an existing one, whoever \
         wrote it, is never overwritten, which an apply would do); counted as create",
    ),
];

/// The reconciler folders of the agent.
const RECONCILERS: &[&str] = &[
    "replication",
    "plumber",
    "projection",
    "clusterregistry",
    "mcs",
];

/// The calls of an `Api` write method in `source` (its unit tests left out), as
/// `(method, the call's text)`. A call counts when its arguments name request parameters
/// (`...Params`, `Default::default()`), which every `Api` write takes and nothing else does
/// (`str::replace`, the sink's `LocalWriter::delete`).
fn writes(source: &str) -> Vec<(String, String)> {
    let source = source.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    for method in WRITES {
        let needle = format!(".{method}(");
        for (at, _) in source.match_indices(&needle) {
            let args = &source[at + needle.len()..];
            let mut depth = 1;
            let end = args
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(args.len(), |(i, _)| i);
            let call = &args[..end];
            if call.contains("Params") || call.contains("Default::default()") {
                found.push((method.to_string(), call.split_whitespace().collect()));
            }
        }
    }
    // The status writer itself: the sink's `write_status` calls it and counts the write.
    for (at, _) in source.match_indices("status::write(") {
        let call = source[at..].lines().next().unwrap_or_default();
        found.push(("status::write".to_string(), call.trim().to_string()));
    }
    found
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn reconcilers_write_only_through_the_sink() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for dir in RECONCILERS {
        sources(&root.join(dir), &mut files);
    }
    assert!(files.len() > 20, "the reconciler sources: {files:?}");
    let mut outside = Vec::new();
    let mut used = vec![false; ALLOWED.len()];
    for file in &files {
        let name = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let source = std::fs::read_to_string(file).unwrap();
        for (method, call) in writes(&source) {
            let allowed = ALLOWED.iter().position(|(f, m, text, _)| {
                *f == name && *m == method && call.to_lowercase().contains(&text.to_lowercase())
            });
            match allowed {
                Some(i) => used[i] = true,
                None => outside.push(format!("{name}: .{method}({call})")),
            }
        }
    }
    assert!(
        outside.is_empty(),
        "writes outside the sink (route them through xcc_sync::sink, or allow them with a reason):\n{}",
        outside.join("\n")
    );
    let stale: Vec<_> = ALLOWED
        .iter()
        .zip(&used)
        .filter(|(_, used)| !**used)
        .map(|(a, _)| a)
        .collect();
    assert!(
        stale.is_empty(),
        "allow-list entries that match nothing: {stale:?}"
    );
}

#[test]
fn the_scan_finds_a_write_around_the_sink_and_passes_other_calls() {
    let source = r#"
        bindings.delete(&name, &Default::default()).await?;
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(desired),
        )
        .await?;
        let text = name.replace("-", "_");
        xcc_kube::status::write(&api, obj, &status, FIELD_MANAGER).await?;
        sink::write_status(&api, obj, &status, &ctx.counted).await?;
        writer.delete(current, &origin).await?;
        #[cfg(test)]
        mod tests { api.create(&PostParams::default(), &thing); }
    "#;
    let found: Vec<String> = writes(source).into_iter().map(|(m, _)| m).collect();
    assert_eq!(found, ["patch", "delete", "status::write"]);
}

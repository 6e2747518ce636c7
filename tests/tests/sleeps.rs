//! The e2e tests wait on progress, not on time. Every `sleep(` in `tests/tests/e2e` is either
//! the pause of a polling loop (a `loop`, `while` or `for` encloses it: it waits for a
//! condition), or carries a `// sleep: <why>` comment on its line or in the comment lines right
//! above it, saying why it is not a wait for an event to be handled: an outage or a window the
//! scenario is made of, or a pace. An assertion that something did not happen must come after a
//! proof that the component saw the event (`Agent::handled`/`heard`, a status, an Event), never
//! after a bare sleep; this test finds bare sleeps.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

use std::path::Path;

/// The bare sleeps of `source`: line numbers (1-based) of each `sleep(` that is neither in a
/// loop nor explained by a `// sleep:` comment.
fn bare_sleeps(source: &str) -> Vec<usize> {
    let lines: Vec<&str> = source.lines().collect();
    let code = |line: &str| line.split("//").next().unwrap_or("").to_string();
    let indent = |line: &str| line.len() - line.trim_start().len();
    let mut bare = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let text = code(line);
        if !text.contains("sleep(") || text.contains('"') && !text.contains("time::sleep") {
            continue;
        }
        if line.contains("// sleep:") {
            continue;
        }
        // The comment lines right above.
        let explained = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.trim_start().starts_with("//"))
            .any(|l| l.trim_start().starts_with("// sleep:"));
        if explained {
            continue;
        }
        // The enclosing blocks, innermost first, up to the function.
        let mut level = indent(line);
        let mut in_loop = false;
        for (j, above) in lines[..i].iter().enumerate().rev() {
            let trimmed = above.trim();
            if trimmed.is_empty() || indent(above) >= level {
                continue;
            }
            level = indent(above);
            // A header over several lines (`while a\n    .await\n != b\n{`): its first line is
            // the nearest one above at this indentation that continues nothing.
            let continues = |l: &str| {
                let t = l.trim_start();
                [")", ".", "!=", "==", "&&", "||", "{", "}"]
                    .iter()
                    .any(|p| t.starts_with(p))
            };
            let mut head = *above;
            if continues(above)
                && let Some(first) = lines[..j]
                    .iter()
                    .rev()
                    .find(|l| !l.trim().is_empty() && indent(l) <= level && !continues(l))
            {
                head = first;
            }
            let header = code(head);
            let header = header.trim();
            if header.starts_with("loop")
                || header.starts_with("while ")
                || header.starts_with("for ")
                || header.contains("= loop {")
            {
                in_loop = true;
                break;
            }
            if header.contains("fn ") || level == 0 {
                break;
            }
        }
        if !in_loop {
            bare.push(i + 1);
        }
    }
    bare
}

#[test]
fn no_e2e_test_waits_on_time_for_an_event() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e");
    let mut found = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            files += 1;
            let source = std::fs::read_to_string(&path).unwrap();
            for line in bare_sleeps(&source) {
                found.push(format!(
                    "{}:{line}",
                    path.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(files > 10, "read the e2e sources in {}", dir.display());
    assert!(
        found.is_empty(),
        "sleeps that are neither a poll nor explained with `// sleep: <why>` (wait on progress \
         instead: Agent::handled/heard, a status, an Event): {found:?}"
    );
}

#[test]
fn the_rule_finds_a_sleep_before_an_absence_and_passes_polls_and_reasons() {
    let bare = "async fn t() {\n    delete().await;\n    tokio::time::sleep(Duration::from_secs(5)).await;\n    assert!(get().await.is_none());\n}\n";
    assert_eq!(bare_sleeps(bare), [3]);
    let poll = "async fn t() {\n    loop {\n        if done().await {\n            break;\n        }\n        tokio::time::sleep(Duration::from_millis(50)).await;\n    }\n}\n";
    assert!(bare_sleeps(poll).is_empty());
    let reasoned = "async fn t() {\n    stop();\n    // sleep: the outage itself.\n    tokio::time::sleep(Duration::from_secs(10)).await;\n}\n";
    assert!(bare_sleeps(reasoned).is_empty());
    // A comment without the marker is no reason.
    let multi_line_while = "async fn t() {\n    while holder()\n        .await\n        != Some(pod)\n    {\n        tokio::time::sleep(Duration::from_millis(50)).await;\n    }\n}\n";
    assert!(bare_sleeps(multi_line_while).is_empty());
    let vague = "async fn t() {\n    // Give it time.\n    tokio::time::sleep(Duration::from_secs(2)).await;\n}\n";
    assert_eq!(bare_sleeps(vague), [3]);
    // A pod's `sleep` command in YAML is not a sleep of the test.
    let yaml = "const POD: &str = \"command: [sleep, '3600']\";\n";
    assert!(bare_sleeps(yaml).is_empty());
}

//! Text edits of a Corefile: add, replace or take out the block between the markers, knowing
//! nothing of Kubernetes.
//!
//! The block is XCC's, byte for byte, so that a Corefile patched by XCC's `dns-config-patcher`
//! is recognised as up to date, and one patched here can be handed back to XCC:
//!
//! ```text
//! ### BEGIN CROSS CLUSTER CONNECTIVITY
//! xcc.test {
//!     forward . 10.96.0.10
//!     reload
//! }
//! ### END CROSS CLUSTER CONNECTIVITY
//! ```
//!
//! Markers are recognised as whole lines (surrounding blanks and a CR ignored). Everything outside
//! the markers is the user's and is kept; a BEGIN with no END is an error rather than a guess,
//! because stripping "to the end" could throw away the user's own server blocks.

use std::fmt::Write as _;

pub const BEGIN: &str = "### BEGIN CROSS CLUSTER CONNECTIVITY";
pub const END: &str = "### END CROSS CLUSTER CONNECTIVITY";

/// What an edit does to a Corefile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Nothing to write.
    Unchanged,
    /// The whole new Corefile.
    Changed(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorefileError {
    #[error(
        "line {line} opens a {BEGIN:?} block that no {END:?} line closes; \
         nothing was changed: repair or delete the block by hand"
    )]
    Unterminated { line: usize },
}

/// The marker block that forwards every zone to `forward_to` (an address as CoreDNS's `forward`
/// takes it: `ip` or `ip:port`), one server block per zone, lines ending in `\n` and no line
/// ending after the END marker.
///
/// Zones that CoreDNS would see as the same (case, a trailing dot) are written once: two server
/// blocks for one zone stop CoreDNS from loading the Corefile at all.
pub fn block(zones: &[String], forward_to: &str) -> String {
    let mut seen: Vec<&str> = Vec::new();
    let mut out = String::new();
    out.push_str(BEGIN);
    out.push('\n');
    for zone in zones {
        let key = zone.trim_end_matches('.');
        if seen.iter().any(|s| s.eq_ignore_ascii_case(key)) {
            continue;
        }
        seen.push(key);
        // Writing into a String cannot fail.
        let _ = write!(
            out,
            "{zone} {{\n    forward . {forward_to}\n    reload\n}}\n"
        );
    }
    out.push_str(END);
    out
}

/// Puts `block` (as [`block`] renders it) into `corefile`: unchanged when the Corefile already
/// holds exactly this block and no other; otherwise every old marker block is taken out, the rest
/// trimmed, and the block appended after it, followed by a line ending.
///
/// The Corefile's line endings (LF or CRLF) are kept for the lines written.
pub fn patch(corefile: &str, block: &str) -> Result<Edit, CorefileError> {
    let scan = Scan::new(corefile)?;
    if let [only] = scan.blocks.as_slice()
        && only == block
    {
        return Ok(Edit::Unchanged);
    }
    let rest = scan.outside.trim_start_matches(['\r', '\n']).trim_end();
    let mut out = String::with_capacity(rest.len() + block.len() + 4);
    if !rest.is_empty() {
        out.push_str(rest);
        out.push_str(scan.eol);
    }
    for line in block.lines() {
        out.push_str(line);
        out.push_str(scan.eol);
    }
    Ok(changed(corefile, out))
}

/// Takes every marker block out of `corefile`, with a blank line that only separated it from its
/// neighbours; unchanged when there is none.
pub fn remove(corefile: &str) -> Result<Edit, CorefileError> {
    let scan = Scan::new(corefile)?;
    if scan.blocks.is_empty() {
        return Ok(Edit::Unchanged);
    }
    let mut out = scan.outside;
    let kept = out.trim_end().len();
    out.truncate(kept);
    if kept > 0 {
        out.push_str(scan.eol);
    }
    Ok(changed(corefile, out))
}

/// Whether the Corefile outside the marker blocks loads the `reload` plugin (a line whose first
/// word is `reload`, comments aside). Without it a running CoreDNS never reads an edit: the
/// `reload` of xcc's own block takes effect only once CoreDNS has loaded that block.
pub fn has_reload(corefile: &str) -> Result<bool, CorefileError> {
    let scan = Scan::new(corefile)?;
    Ok(scan.outside.lines().any(|line| {
        let code = line.split('#').next().unwrap_or_default();
        code.split_whitespace().next() == Some("reload")
    }))
}

fn changed(old: &str, new: String) -> Edit {
    if new == old {
        Edit::Unchanged
    } else {
        Edit::Changed(new)
    }
}

/// A Corefile split into the user's text and our marker blocks.
struct Scan {
    /// Everything outside the marker blocks, line endings as they were.
    outside: String,
    /// Each marker block from BEGIN to END, lines joined with `\n`, CRs dropped.
    blocks: Vec<String>,
    /// The line ending new lines get.
    eol: &'static str,
}

impl Scan {
    fn new(corefile: &str) -> Result<Self, CorefileError> {
        let eol = if corefile.contains("\r\n") {
            "\r\n"
        } else {
            "\n"
        };
        let mut outside = String::with_capacity(corefile.len());
        let mut blocks = Vec::new();
        // Whether the last line kept was blank (or nothing was kept yet).
        let mut after_blank = true;
        let mut lines = corefile.split_inclusive('\n').enumerate().peekable();
        while let Some((index, line)) = lines.next() {
            if line.trim() != BEGIN {
                after_blank = line.trim().is_empty();
                outside.push_str(line);
                continue;
            }
            let mut block = String::from(BEGIN);
            loop {
                let Some((_, line)) = lines.next() else {
                    return Err(CorefileError::Unterminated { line: index + 1 });
                };
                block.push('\n');
                block.push_str(line.trim_end_matches(['\r', '\n']));
                if line.trim() == END {
                    break;
                }
            }
            blocks.push(block);
            // A blank line between the block and the text after it goes with the block, unless
            // it is all that separates that text from the text before.
            if after_blank && lines.peek().is_some_and(|(_, next)| next.trim().is_empty()) {
                lines.next();
            }
        }
        Ok(Scan {
            outside,
            blocks,
            eol,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGINAL: &str = ".:53 {\n    errors\n    forward . /etc/resolv.conf\n}\n";

    #[test]
    fn reload_counts_only_outside_the_block() {
        let kubeadm =
            ".:53 {\n    errors\n    cache 30\n    loop\n    reload\n    loadbalance\n}\n";
        assert!(has_reload(kubeadm).unwrap());
        assert!(has_reload(".:53 {\n    reload 10s 5s\n}\n").unwrap());
        assert!(has_reload(".:53 {\r\n    reload {\r\n    }\r\n}\r\n").unwrap());
        // Our block brings its own `reload`, which a CoreDNS that has not loaded it ignores.
        let patched = changed(patch(ORIGINAL, &xcc_block("10.96.0.53")));
        assert!(patched.contains("    reload\n"));
        assert!(!has_reload(&patched).unwrap());
        for without in [
            ORIGINAL,
            ".:53 {\n    # reload\n    forward . 1.1.1.1 # reload\n}\n",
            ".:53 {\n    reloaded\n}\n",
        ] {
            assert!(!has_reload(without).unwrap(), "{without}");
        }
        assert!(has_reload(&format!("{ORIGINAL}{BEGIN}\n")).is_err());
    }

    fn zones(z: &[&str]) -> Vec<String> {
        z.iter().map(|s| s.to_string()).collect()
    }

    fn xcc_block(ip: &str) -> String {
        block(&zones(&["xcc.test"]), ip)
    }

    fn changed(edit: Result<Edit, CorefileError>) -> String {
        match edit.expect("no error") {
            Edit::Changed(text) => text,
            Edit::Unchanged => panic!("expected a change"),
        }
    }

    #[test]
    fn the_block_is_xccs_byte_for_byte() {
        assert_eq!(
            xcc_block("10.96.0.10"),
            "### BEGIN CROSS CLUSTER CONNECTIVITY\n\
             xcc.test {\n    forward . 10.96.0.10\n    reload\n}\n\
             ### END CROSS CLUSTER CONNECTIVITY"
        );
    }

    #[test]
    fn several_zones_share_one_marker_pair() {
        assert_eq!(
            block(
                &zones(&["xcc.test", "other.example", "XCC.test."]),
                "10.0.0.1:5353"
            ),
            "### BEGIN CROSS CLUSTER CONNECTIVITY\n\
             xcc.test {\n    forward . 10.0.0.1:5353\n    reload\n}\n\
             other.example {\n    forward . 10.0.0.1:5353\n    reload\n}\n\
             ### END CROSS CLUSTER CONNECTIVITY"
        );
    }

    #[test]
    fn appends_after_the_trimmed_corefile() {
        // XCC's own test: trimmed old text + "\n" + block + "\n".
        let corefile = ".:53 {\n    original_zone_content\n}";
        assert_eq!(
            changed(patch(corefile, &xcc_block("1.2.3.4"))),
            ".:53 {\n    original_zone_content\n}\n\
             ### BEGIN CROSS CLUSTER CONNECTIVITY\n\
             xcc.test {\n    forward . 1.2.3.4\n    reload\n}\n\
             ### END CROSS CLUSTER CONNECTIVITY\n"
        );
    }

    #[test]
    fn trailing_blank_lines_are_trimmed() {
        let out = changed(patch(
            &format!("\n\n{ORIGINAL}\n\n  \n"),
            &xcc_block("1.2.3.4"),
        ));
        assert_eq!(out, format!("{ORIGINAL}{}\n", xcc_block("1.2.3.4")));
    }

    #[test]
    fn patching_twice_changes_nothing_the_second_time() {
        let block = xcc_block("1.2.3.4");
        let once = changed(patch(ORIGINAL, &block));
        assert_eq!(patch(&once, &block), Ok(Edit::Unchanged));
    }

    #[test]
    fn a_corefile_patched_by_xcc_is_up_to_date() {
        let corefile = ".:53 {\n    original_zone_content\n}\n\
                        ### BEGIN CROSS CLUSTER CONNECTIVITY\n\
                        xcc.test {\n    forward . 1.2.3.4\n    reload\n}\n\
                        ### END CROSS CLUSTER CONNECTIVITY\n";
        assert_eq!(patch(corefile, &xcc_block("1.2.3.4")), Ok(Edit::Unchanged));
    }

    #[test]
    fn the_block_in_the_middle_is_left_where_it_is_when_it_is_current() {
        let block = xcc_block("1.2.3.4");
        let corefile = format!("{ORIGINAL}{block}\nexample.org {{\n    whoami\n}}\n");
        assert_eq!(patch(&corefile, &block), Ok(Edit::Unchanged));
    }

    #[test]
    fn an_old_block_is_replaced() {
        let old = format!("{ORIGINAL}{}\n", xcc_block("10.0.0.1"));
        let new = changed(patch(&old, &xcc_block("10.0.0.2")));
        assert_eq!(new, format!("{ORIGINAL}{}\n", xcc_block("10.0.0.2")));
    }

    #[test]
    fn an_old_block_in_the_middle_moves_to_the_end_and_keeps_the_users_text() {
        let after = "example.org {\n    whoami\n}\n";
        let old = format!("{ORIGINAL}\n{}\n\n{after}", xcc_block("10.0.0.1"));
        let new = changed(patch(&old, &xcc_block("10.0.0.2")));
        assert_eq!(
            new,
            format!("{ORIGINAL}\n{after}{}\n", xcc_block("10.0.0.2"))
        );
    }

    #[test]
    fn a_changed_zone_list_replaces_the_block() {
        let old = format!("{ORIGINAL}{}\n", xcc_block("10.0.0.1"));
        let both = block(&zones(&["xcc.test", "b.test"]), "10.0.0.1");
        assert_eq!(changed(patch(&old, &both)), format!("{ORIGINAL}{both}\n"));
    }

    #[test]
    fn duplicate_blocks_collapse_into_one() {
        let block = xcc_block("1.2.3.4");
        let corefile = format!("{ORIGINAL}{block}\n{block}\n");
        assert_eq!(
            changed(patch(&corefile, &block)),
            format!("{ORIGINAL}{block}\n")
        );
    }

    #[test]
    fn an_empty_corefile_gets_only_the_block() {
        let block = xcc_block("1.2.3.4");
        assert_eq!(changed(patch("", &block)), format!("{block}\n"));
    }

    #[test]
    fn markers_are_whole_lines_with_blanks_and_cr_ignored() {
        let block = xcc_block("1.2.3.4");
        // Indented markers still delimit a block; a marker inside a comment does not.
        let corefile =
            format!("{ORIGINAL}# see {BEGIN} below\n  {BEGIN}  \nxcc.test {{\n}}\n\t{END}\n");
        assert_eq!(
            changed(patch(&corefile, &block)),
            format!("{ORIGINAL}# see {BEGIN} below\n{block}\n")
        );
    }

    #[test]
    fn crlf_corefiles_keep_crlf() {
        let corefile = ORIGINAL.replace('\n', "\r\n");
        let block = xcc_block("1.2.3.4");
        let once = changed(patch(&corefile, &block));
        assert_eq!(once, format!("{ORIGINAL}{block}\n").replace('\n', "\r\n"));
        assert_eq!(patch(&once, &block), Ok(Edit::Unchanged));
        assert_eq!(remove(&once), Ok(Edit::Changed(corefile)));
    }

    #[test]
    fn begin_without_end_is_an_error() {
        let corefile = format!("{ORIGINAL}{BEGIN}\nxcc.test {{\n}}\nexample.org {{\n}}\n");
        let expected = CorefileError::Unterminated { line: 5 };
        assert_eq!(
            patch(&corefile, &xcc_block("1.2.3.4")),
            Err(expected.clone())
        );
        assert_eq!(remove(&corefile), Err(expected.clone()));
        let message = expected.to_string();
        assert!(message.contains("line 5"), "{message}");
        assert!(message.contains("nothing was changed"), "{message}");
    }

    #[test]
    fn a_current_block_followed_by_an_unterminated_one_is_an_error() {
        let block = xcc_block("1.2.3.4");
        let corefile = format!("{ORIGINAL}{block}\n{BEGIN}");
        assert!(patch(&corefile, &block).is_err());
    }

    #[test]
    fn a_stray_end_marker_is_the_users_text() {
        let corefile = format!("{ORIGINAL}{END}\n");
        assert_eq!(remove(&corefile), Ok(Edit::Unchanged));
        let block = xcc_block("1.2.3.4");
        assert_eq!(
            changed(patch(&corefile, &block)),
            format!("{corefile}{block}\n")
        );
    }

    #[test]
    fn remove_undoes_patch() {
        let patched = changed(patch(ORIGINAL, &xcc_block("1.2.3.4")));
        assert_eq!(remove(&patched), Ok(Edit::Changed(ORIGINAL.to_string())));
    }

    #[test]
    fn remove_takes_the_blank_line_around_the_block() {
        let after = "example.org {\n    whoami\n}\n";
        let corefile = format!("{ORIGINAL}\n{}\n\n{after}", xcc_block("1.2.3.4"));
        assert_eq!(
            remove(&corefile),
            Ok(Edit::Changed(format!("{ORIGINAL}\n{after}")))
        );
        // At the end of the file, the blank line before it goes too.
        let corefile = format!("{ORIGINAL}\n{}\n", xcc_block("1.2.3.4"));
        assert_eq!(remove(&corefile), Ok(Edit::Changed(ORIGINAL.to_string())));
        // At the start, the blank line after it.
        let corefile = format!("{}\n\n{ORIGINAL}", xcc_block("1.2.3.4"));
        assert_eq!(remove(&corefile), Ok(Edit::Changed(ORIGINAL.to_string())));
    }

    #[test]
    fn remove_without_a_block_changes_nothing() {
        assert_eq!(remove(ORIGINAL), Ok(Edit::Unchanged));
        assert_eq!(remove(""), Ok(Edit::Unchanged));
        assert_eq!(remove(".:53 {\n}"), Ok(Edit::Unchanged));
    }

    #[test]
    fn remove_of_a_corefile_that_is_only_the_block_leaves_it_empty() {
        let corefile = format!("{}\n", xcc_block("1.2.3.4"));
        assert_eq!(remove(&corefile), Ok(Edit::Changed(String::new())));
    }

    #[test]
    fn remove_takes_every_block() {
        let a = xcc_block("1.2.3.4");
        let b = block(&zones(&["b.test"]), "5.6.7.8");
        let corefile = format!("{a}\n{ORIGINAL}{b}\n");
        assert_eq!(remove(&corefile), Ok(Edit::Changed(ORIGINAL.to_string())));
    }

    #[test]
    fn no_trailing_newline_after_end_marker() {
        let block = xcc_block("1.2.3.4");
        let corefile = format!("{ORIGINAL}{block}");
        assert_eq!(patch(&corefile, &block), Ok(Edit::Unchanged));
        assert_eq!(remove(&corefile), Ok(Edit::Changed(ORIGINAL.to_string())));
    }
}

//! What every xcc binary's command line does the same way: value parsers that refuse a bad
//! value as a usage error saying what is accepted, and usage errors on one line with exit code 2.

use std::net::SocketAddr;

/// What `--zone` accepts.
const ZONE_FORM: &str = "expected a DNS name such as xcc.test or clusters.example.com: labels of \
                         letters, digits and hyphens (1 to 63 characters, no hyphen first or \
                         last) joined by single dots, a trailing dot optional";

/// A zone name (`--zone`): a plain DNS name, no wildcard, no empty label. Returns it without a
/// trailing dot.
pub fn zone(text: &str) -> Result<String, String> {
    let bad = |why: &str| Err(format!("{text:?} is not a zone: {why}; {ZONE_FORM}"));
    let name = text.strip_suffix('.').unwrap_or(text);
    if name.is_empty() {
        return bad("the root zone cannot be served");
    }
    if name.len() > 253 {
        return bad("longer than 253 characters");
    }
    for label in name.split('.') {
        if label.is_empty() {
            return bad("empty label (two dots in a row, or a dot first)");
        }
        if label.contains('*') {
            return bad("a wildcard cannot be a zone");
        }
        if label.len() > 63 {
            return bad(&format!("label {label:?} is longer than 63 characters"));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
        {
            return bad(&format!("{c:?} in label {label:?}"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return bad(&format!("label {label:?} starts or ends with a hyphen"));
        }
    }
    Ok(name.to_ascii_lowercase())
}

/// A listen address (`--listen`, `--admin-listen`): `IP:PORT`, no host name.
pub fn listen(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!(
            "{text:?} is not IP:PORT; expected an IP address and a port such as 0.0.0.0:53, \
             127.0.0.1:5353 or [::]:53 (host names such as localhost are not resolved)"
        )
    })
}

/// A clap error as one line: its message, its tips (clap's "a similar argument exists"), and
/// where to look (`binary --help`).
pub fn usage_line(rendered: &str, binary: &str) -> String {
    let mut message = Vec::new();
    let mut tips = Vec::new();
    let mut in_message = true;
    for line in rendered.lines().map(str::trim) {
        if line.is_empty() {
            in_message = false;
        } else if line.starts_with("tip:") {
            tips.push(line);
        } else if in_message {
            message.push(line);
        }
    }
    let mut text = message.join(" ");
    for tip in tips {
        text.push_str("; ");
        text.push_str(tip);
    }
    format!("{text} (see {binary} --help)")
}

/// Parses the process's arguments; `--help` and `--version` print and exit 0, a usage error
/// prints one line and exits 2.
pub fn parse<T: clap::Parser>(binary: &str) -> T {
    match T::try_parse() {
        Ok(args) => args,
        Err(error) if !error.use_stderr() => error.exit(),
        Err(error) => usage_exit(&error.render().to_string(), binary),
    }
}

/// Prints `message` (a usage error) as one line and exits 2.
pub fn usage_exit(message: &str, binary: &str) -> ! {
    let line = usage_line(message, binary);
    let line = if line.starts_with("error:") {
        line
    } else {
        format!("error: {line}")
    };
    eprintln!("{line}");
    std::process::exit(i32::from(crate::report::EXIT_USAGE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_are_dns_names_and_the_error_says_what_is_wrong_and_what_is_accepted() {
        assert_eq!(zone("xcc.test").unwrap(), "xcc.test");
        assert_eq!(
            zone("Clusters.Example.COM.").unwrap(),
            "clusters.example.com"
        );
        assert_eq!(zone("a-1.test").unwrap(), "a-1.test");
        for (bad, why) in [
            ("*.test", "wildcard"),
            ("bad..zone", "empty label"),
            (".", "root"),
            ("-a.test", "hyphen"),
            ("a_b.test", "'_'"),
            ("a b.test", "' '"),
        ] {
            let error = zone(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
            assert!(error.contains("such as xcc.test"), "{bad}: {error}");
        }
        assert!(zone(&"a".repeat(64)).unwrap_err().contains("63"));
    }

    #[test]
    fn listen_addresses_are_ip_and_port() {
        assert_eq!(listen("0.0.0.0:53").unwrap().port(), 53);
        assert!(listen("[::]:53").unwrap().is_ipv6());
        let error = listen("localhost:5353").unwrap_err();
        assert!(
            error.contains("IP:PORT") && error.contains("0.0.0.0:53"),
            "{error}"
        );
    }

    #[test]
    fn clap_errors_become_one_line_with_the_tip() {
        let rendered = "error: unexpected argument '--leader-elction' found\n\n  tip: a similar \
                        argument exists: '--leader-elect'\n\nUsage: x [OPTIONS]\n\nFor more \
                        information, try '--help'.\n";
        assert_eq!(
            usage_line(rendered, "xcc-agent"),
            "error: unexpected argument '--leader-elction' found; tip: a similar argument \
             exists: '--leader-elect' (see xcc-agent --help)"
        );
    }
}

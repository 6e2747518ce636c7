//! What every xcc binary's command line does the same way: value parsers that refuse a bad
//! value as a usage error saying what is accepted and the range, the environment variables of
//! the original XCC read as aliases of our flags, checks across flags, and usage errors on one
//! line with exit code 2 (a JSON object with `--log-format json`).
//!
//! Every number and duration a flag takes has a range, and its error says the form and the
//! range, after clap's `invalid value 'abc' for '--ttl <SECONDS>'`: `expected a whole number of
//! seconds from 1 to 86400`. Durations take a unit (`500ms`, `30s`, `5m`, `1h30m`), as
//! Kubernetes components' flags do; only [`request_timeout`] reads a bare number as seconds, as
//! kubectl's `--request-timeout`.

use std::{ffi::OsString, fmt::Display, net::SocketAddr, path::Path, str::FromStr, time::Duration};

use clap::parser::ValueSource;

/// A whole number from `min` to `max` (a count, a size, seconds), in `unit`s: the error says
/// the unit and the range (`expected a whole number of seconds from 1 to 86400`).
pub fn number<T>(
    unit: &'static str,
    min: T,
    max: T,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: FromStr + PartialOrd + Display + Copy + Send + Sync + 'static,
{
    move |text| match text.trim().parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(format!(
            "expected a whole number of {unit} from {min} to {max}"
        )),
    }
}

/// A duration as people write it: whole seconds, minutes or hours when it is one (`30s`, `5m`,
/// `24h`), milliseconds otherwise.
pub fn show_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    let secs = duration.as_secs();
    if duration.subsec_millis() != 0 || secs == 0 && millis != 0 {
        format!("{millis}ms")
    } else if secs != 0 && secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs != 0 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// A duration with its unit (`500ms`, `30s`, `5m`, `1h30m`) from `min` to `max`; `0` alone is
/// zero when `min` is. A bare number other than 0 is refused: its unit would be a guess.
pub fn duration(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text| {
        let form = || {
            format!(
                "expected a duration with its unit, such as 500ms, 30s, 5m or 1h30m, from {} \
                 to {}",
                show_duration(min),
                show_duration(max)
            )
        };
        let text = text.trim();
        let value = if text == "0" {
            Duration::ZERO
        } else {
            humantime::parse_duration(text).map_err(|_| form())?
        };
        if value < min || value > max {
            return Err(form());
        }
        Ok(value)
    }
}

/// Longest `--request-timeout`.
const REQUEST_TIMEOUT_MAX: Duration = Duration::from_secs(24 * 3600);

/// kubectl's `--request-timeout`: a bare number is seconds (`5`), else a duration with its
/// unit (`5s`, `1m`, `1h30m`); `0` means no limit. Up to 24h.
pub fn request_timeout(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let value = match text.parse::<u64>() {
        Ok(secs) => Some(Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(text).ok(),
    };
    match value {
        Some(value) if value <= REQUEST_TIMEOUT_MAX => Ok(value),
        _ => Err(format!(
            "expected seconds (5) or a duration with its unit (5s, 1m, 1h30m) up to {}, 0 for \
             no limit",
            show_duration(REQUEST_TIMEOUT_MAX)
        )),
    }
}

/// An environment variable read as one of a binary's flags: the original XCC's names
/// (`DOMAIN_SUFFIX`, `NAMESPACE`, ...) and the former names of renamed flags, so that existing
/// manifests keep working. The flag and its own variable win over the alias.
#[derive(Clone, Copy, Debug)]
pub struct EnvAlias {
    /// The variable.
    pub var: &'static str,
    /// The flag's long name, without `--`.
    pub flag: &'static str,
}

/// What a binary's `Args` adds to clap's parsing: the variables read as aliases of its flags,
/// and a check across flags (`--leader-elect-lease-duration` longer than the renew deadline, a
/// file named by a flag exists) whose failure is a usage error.
pub trait Checked {
    /// Variables read as aliases of flags.
    const ENV_ALIASES: &'static [EnvAlias] = &[];

    /// Checks the parsed flags together; `Err` says what is wrong and what is accepted.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// `Err` naming the flag when `path`, named by `--flag`, cannot be read (a usage error: the
/// operator's input, as a flag value).
pub fn readable_file(flag: &str, path: &Path) -> Result<(), String> {
    match std::fs::File::open(path) {
        Ok(_) => Ok(()),
        Err(error) => Err(format!(
            "cannot read the file of {flag} {}: {error}",
            path.display()
        )),
    }
}

/// The error of a parse: clap's (rendered), or a failed [`Checked::check`].
enum Refused {
    Clap(clap::Error),
    Check(String),
}

/// Parses `argv` as `T`, with the alias variables `T` names read through `env`.
fn parse_from<T: clap::Parser + Checked>(
    mut argv: Vec<OsString>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<T, Refused> {
    let command = T::command();
    let matches = command
        .clone()
        .try_get_matches_from(&argv)
        .map_err(Refused::Clap)?;
    let mut read = Vec::new();
    let mut extra = Vec::new();
    for alias in T::ENV_ALIASES {
        let Some(value) = env(alias.var).filter(|v| !v.trim().is_empty()) else {
            continue;
        };
        let id = command
            .get_arguments()
            .find(|arg| arg.get_long() == Some(alias.flag))
            .map(|arg| arg.get_id().as_str().to_owned())
            .unwrap_or_else(|| panic!("no --{} for the alias {}", alias.flag, alias.var));
        if matches!(
            matches.value_source(&id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        read.push(format!("${} read as --{}", alias.var, alias.flag));
        extra.push(OsString::from(format!("--{}={value}", alias.flag)));
    }
    let matches = if extra.is_empty() {
        matches
    } else {
        let at = argv.len().min(1);
        argv.splice(at..at, extra);
        command.try_get_matches_from(&argv).map_err(|error| {
            Refused::Check(format!(
                "{} (from {})",
                clap_message(&error.render().to_string()),
                read.join(", ")
            ))
        })?
    };
    let args = T::from_arg_matches(&matches).map_err(Refused::Clap)?;
    args.check().map_err(Refused::Check)?;
    Ok(args)
}

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

/// A namespace name (`--namespace`): an RFC 1123 label, as the API server takes it.
pub fn namespace(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    if ok {
        Ok(text.to_owned())
    } else {
        Err(
            "expected a namespace name: 1 to 63 lowercase letters, digits and hyphens, no \
             hyphen first or last, such as xcc-dns"
                .to_owned(),
        )
    }
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
    format!("{} (see {binary} --help)", clap_message(rendered))
}

/// A clap error's message and tips on one line.
fn clap_message(rendered: &str) -> String {
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
    text
}

/// Parses the process's arguments (and the alias variables of [`Checked`]), then checks them;
/// `--help` and `--version` print and exit 0, a usage error prints one line and exits 2.
pub fn parse<T: clap::Parser + Checked>(binary: &str) -> T {
    let env = |name: &str| std::env::var(name).ok();
    match parse_from::<T>(std::env::args_os().collect(), &env) {
        Ok(args) => args,
        Err(Refused::Clap(error)) if !error.use_stderr() => error.exit(),
        Err(Refused::Clap(error)) => usage_exit(&error.render().to_string(), binary),
        Err(Refused::Check(message)) => usage_exit(&message, binary),
    }
}

/// Prints `message` (a usage error) as one line, a JSON object when `--log-format json` was
/// asked for, and exits 2.
pub fn usage_exit(message: &str, binary: &str) -> ! {
    let line = usage_line(message, binary);
    let line = if line.starts_with("error:") {
        line
    } else {
        format!("error: {line}")
    };
    crate::logging::fatal(binary, &line);
    std::process::exit(i32::from(crate::report::EXIT_USAGE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_durations_say_their_form_and_range() {
        let ttl = number::<u32>("seconds", 1, 86400);
        assert_eq!(ttl("30").unwrap(), 30);
        for bad in ["abc", "0", "86401", "4294967295", "-1", "1.5"] {
            assert_eq!(
                ttl(bad).unwrap_err(),
                "expected a whole number of seconds from 1 to 86400",
                "{bad}"
            );
        }
        let every = duration(Duration::from_secs(1), Duration::from_secs(3600));
        assert_eq!(every("1m30s").unwrap(), Duration::from_secs(90));
        for bad in ["0s", "500ms", "2h", "5", "soon"] {
            let error = every(bad).unwrap_err();
            assert!(error.contains("from 1s to 1h"), "{bad}: {error}");
            assert!(error.contains("such as 500ms, 30s"), "{bad}: {error}");
        }
        let drain = duration(Duration::ZERO, Duration::from_secs(600));
        assert_eq!(drain("0").unwrap(), Duration::ZERO);
        assert!(drain("0s").is_ok() && drain("10m1s").is_err());
        assert_eq!(show_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(show_duration(Duration::from_secs(90)), "90s");
    }

    #[test]
    fn namespaces_are_dns_labels() {
        assert_eq!(namespace("xcc-dns").unwrap(), "xcc-dns");
        for bad in ["", "Bad_NS", "-a", "a-", &"a".repeat(64)] {
            assert!(
                namespace(bad).unwrap_err().contains("such as xcc-dns"),
                "{bad}"
            );
        }
    }

    #[test]
    fn request_timeouts_are_kubectls_a_bare_number_is_seconds() {
        assert_eq!(request_timeout("5").unwrap(), Duration::from_secs(5));
        assert_eq!(request_timeout("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(request_timeout("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(request_timeout("0").unwrap(), Duration::ZERO);
        for bad in ["soon", "-1", "25h", "999999999999"] {
            let error = request_timeout(bad).unwrap_err();
            assert!(error.contains("0 for no limit"), "{bad}: {error}");
        }
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[arg(long, env = "TEST_XCC_ZONE", default_value = "xcc.test")]
        zone: String,
        #[arg(long, env = "TEST_XCC_TTL", default_value_t = 30, value_parser = number::<u32>("seconds", 1, 60))]
        ttl: u32,
    }

    impl Checked for Cli {
        const ENV_ALIASES: &'static [EnvAlias] = &[
            EnvAlias {
                var: "DOMAIN_SUFFIX",
                flag: "zone",
            },
            EnvAlias {
                var: "TTL",
                flag: "ttl",
            },
        ];
        fn check(&self) -> Result<(), String> {
            if self.zone == "refused.test" {
                return Err("refused".into());
            }
            Ok(())
        }
    }

    fn parse_with(argv: &[&str], env: &[(&str, &str)]) -> Result<Cli, String> {
        let env = |name: &str| {
            env.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        };
        let argv = std::iter::once("x").chain(argv.iter().copied());
        parse_from::<Cli>(argv.map(OsString::from).collect(), &env).map_err(|e| match e {
            Refused::Clap(e) => e.to_string(),
            Refused::Check(e) => e,
        })
    }

    #[test]
    fn alias_variables_are_read_unless_the_flag_or_its_variable_is_set() {
        assert_eq!(parse_with(&[], &[]).unwrap().zone, "xcc.test");
        let args = parse_with(&[], &[("DOMAIN_SUFFIX", "old.test")]).unwrap();
        assert_eq!(args.zone, "old.test");
        let args = parse_with(&["--zone", "new.test"], &[("DOMAIN_SUFFIX", "old.test")]).unwrap();
        assert_eq!(args.zone, "new.test");
        let error = parse_with(&[], &[("TTL", "90")]).unwrap_err();
        assert!(error.contains("from 1 to 60"), "{error}");
        assert!(error.ends_with("(from $TTL read as --ttl)"), "{error}");
        assert_eq!(
            parse_with(&["--zone", "refused.test"], &[]).unwrap_err(),
            "refused"
        );
    }

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

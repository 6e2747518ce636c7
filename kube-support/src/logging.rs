//! The one logging setup of every xcc binary: the same flags and environment variables, text
//! for people and JSON for log pipelines, to stderr.
//!
//! * `--log-format text|json` (`XCC_LOG_FORMAT`). JSON is one object per line with flat fields,
//!   as log pipelines index them: `{"timestamp":...,"level":"INFO","message":"...",
//!   "target":"...","cluster":"a",...}`, never nested under `"fields"`.
//!   Field values that are lists (`namespaces = ?names`) are JSON arrays, not strings. The
//!   line that ends a process with an error ([`fatal`]), and a usage error, are JSON objects
//!   too, so that every line on stderr parses.
//! * `--log-level`, `-v`, `--v` (`XCC_LOG_LEVEL`): a level (`error`, `warn`, `info`, `debug`,
//!   `trace`), a `RUST_LOG`-style filter (`info,xcc_agent::sources=debug`), or a klog verbosity
//!   number as Kubernetes components take it (`-v 4`, `--v=4`): 0 and 1 info, 2 and 3 debug for
//!   xcc's own code (libraries at info), 4 debug, 5 and more trace. When neither the flag nor
//!   `XCC_LOG_LEVEL` is set, `RUST_LOG` is read, then the binary's default (`info` and quieter
//!   libraries). `--log` and `XCC_LOG`, the older names, are still accepted.

use std::sync::OnceLock;

use clap::{Args, ValueEnum};
use tracing::field::{Field, Visit};
use tracing_subscriber::{
    EnvFilter, fmt,
    fmt::{FmtContext, FormatEvent, FormatFields, format},
    registry::LookupSpan,
};

/// Log format of `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, fields at the top level.
    Json,
}

/// The logging flags every xcc binary takes (flatten into the binary's own `Args`).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// Log level (error, warn, info, debug, trace), a RUST_LOG-style filter such as
    /// `info,xcc_agent=debug`, or a klog verbosity as Kubernetes components take it (`-v 4`,
    /// `--v=4`): 0-1 info, 2-3 debug for xcc's own code, 4 debug, 5 and more trace. Default:
    /// $RUST_LOG, else info (libraries at warn).
    #[arg(
        long = "log-level",
        short = 'v',
        visible_alias = "log",
        alias = "v",
        env = "XCC_LOG_LEVEL",
        value_name = "LEVEL|FILTER",
        value_parser = parse_filter
    )]
    pub level: Option<String>,

    /// Log format: text for people, json (one object per line, flat fields) for log pipelines.
    #[arg(
        long = "log-format",
        env = "XCC_LOG_FORMAT",
        default_value = "text",
        value_name = "FORMAT"
    )]
    pub format: LogFormat,
}

/// The crates of xcc, whose logs klog verbosities 2 and 3 turn to debug.
const XCC_TARGETS: [&str; 7] = [
    "xcc_agent",
    "xcc_controller",
    "xcc_coredns_patcher",
    "kubectl_xcc",
    "xcc_sync",
    "xcc_kube",
    "xcc_dns",
];

/// The filter of a klog verbosity (`-v 4`).
fn verbosity_filter(verbosity: u32) -> String {
    match verbosity {
        0 | 1 => "info".to_owned(),
        2 | 3 => std::iter::once("info".to_owned())
            .chain(XCC_TARGETS.iter().map(|t| format!("{t}=debug")))
            .collect::<Vec<_>>()
            .join(","),
        4 => "debug".to_owned(),
        _ => "trace".to_owned(),
    }
}

/// Checks a `--log-level` value as a usage error, before anything runs; a klog verbosity
/// becomes its filter.
fn parse_filter(text: &str) -> Result<String, String> {
    const EXPECTED: &str = "expected a level (error, warn, info, debug, trace), a filter such \
                            as info,xcc_agent=debug, or a klog verbosity from 0 to 10 (0-1 info, \
                            2-3 debug for xcc's own code, 4 debug, 5 and more trace)";
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return match trimmed.parse::<u32>() {
            Ok(verbosity) if verbosity <= 10 => Ok(verbosity_filter(verbosity)),
            _ => Err(format!("{text:?} is not a verbosity; {EXPECTED}")),
        };
    }
    // A bare word is a target in filter syntax; as a flag value it is a misspelt level.
    let bare = !text.contains(['=', ',', '[']);
    let level = ["off", "error", "warn", "info", "debug", "trace"]
        .iter()
        .any(|l| l.eq_ignore_ascii_case(text.trim()));
    if bare && !level {
        return Err(format!("{text:?} is not a level; {EXPECTED}"));
    }
    EnvFilter::try_new(text)
        .map(|_| text.to_string())
        .map_err(|error| format!("{error}; {EXPECTED}"))
}

/// The filter to use: the flag or `XCC_LOG_LEVEL`, else `RUST_LOG` (when valid), else `default`.
/// The older `XCC_LOG` is read when the newer names are not set.
pub fn filter(args: &LogArgs, default: &str) -> EnvFilter {
    let from_env = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .and_then(|v| EnvFilter::try_new(v).ok())
    };
    let filter = args
        .level
        .as_deref()
        .and_then(|level| EnvFilter::try_new(level).ok())
        .or_else(|| from_env("XCC_LOG"))
        .or_else(|| from_env("RUST_LOG"))
        .unwrap_or_else(|| EnvFilter::new(default));
    // kube-runtime's watcher logs every 403 at WARN as a Debug dump; xcc says a failing watch
    // itself, once per outage and in words (xcc_sync::outage). Shown only when asked for.
    if filter.to_string().contains("kube_runtime") {
        return filter;
    }
    match "kube_runtime::watcher=error".parse() {
        Ok(quiet) => filter.add_directive(quiet),
        Err(_) => filter,
    }
}

/// The format [`init`] installed, for [`fatal`].
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Installs the process's subscriber; `default` is the binary's filter when none is given.
pub fn init(args: &LogArgs, default: &str) {
    let _ = FORMAT.set(args.format);
    let builder = fmt()
        .with_env_filter(filter(args, default))
        .with_writer(std::io::stderr);
    match args.format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.event_format(JsonLine).init(),
    }
}

/// A JSON subscriber for `writer`, as [`init`] installs it (for tests of the format).
pub fn json_subscriber<W>(writer: W) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    fmt()
        .with_env_filter(EnvFilter::new("info"))
        .with_writer(writer)
        .event_format(JsonLine)
        .finish()
}

/// The format of this process's lines on stderr: what [`init`] installed, else (a usage error,
/// before logging is set up) what the command line or `XCC_LOG_FORMAT` asks for.
fn format_in_use() -> LogFormat {
    if let Some(format) = FORMAT.get() {
        return *format;
    }
    let mut format = std::env::var("XCC_LOG_FORMAT")
        .ok()
        .and_then(|v| LogFormat::from_str(v.trim(), true).ok())
        .unwrap_or_default();
    let args: Vec<String> = std::env::args().collect();
    for (i, arg) in args.iter().enumerate() {
        let value = match arg.strip_prefix("--log-format") {
            Some("") => args.get(i + 1).map(String::as_str),
            Some(rest) => rest.strip_prefix('='),
            None => None,
        };
        if let Some(parsed) = value.and_then(|v| LogFormat::from_str(v.trim(), true).ok()) {
            format = parsed;
        }
    }
    format
}

/// Prints an error line written outside the logs, above all the one that ends the process
/// (`xcc-agent: error: cannot ...`), and a one-shot command's failures: as given in text mode, as a JSON object (level ERROR, `target` the binary, `message` the line
/// without its `binary: error:` prefix) in JSON mode, so that every line on stderr parses.
pub fn fatal(binary: &str, line: &str) {
    match format_in_use() {
        LogFormat::Text => eprintln!("{line}"),
        LogFormat::Json => eprintln!("{}", fatal_json(binary, line)),
    }
}

/// The JSON object of [`fatal`].
fn fatal_json(binary: &str, line: &str) -> String {
    let message = match line.split_once("error:") {
        Some((before, after)) if before.trim().is_empty() || before.starts_with(binary) => {
            after.trim_start()
        }
        _ => line,
    };
    let mut out = String::new();
    push_head(&mut out, "ERROR");
    push_pair(&mut out, "message", &serde_json::Value::from(message));
    push_pair(&mut out, "target", &serde_json::Value::from(binary));
    out.push('}');
    out
}

/// `{"timestamp":"...","level":"..."` of a JSON line.
fn push_head(out: &mut String, level: &str) {
    let now = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    out.push('{');
    out.push_str("\"timestamp\":");
    out.push_str(&serde_json::Value::from(now).to_string());
    push_pair(out, "level", &serde_json::Value::from(level));
}

/// `,"key":value`.
fn push_pair(out: &mut String, key: &str, value: &serde_json::Value) {
    out.push(',');
    out.push_str(&serde_json::Value::from(key).to_string());
    out.push(':');
    out.push_str(&value.to_string());
}

/// One JSON object per event, fields at the top level: `timestamp`, `level`, the fields
/// (`message` first), `target`. A field logged with `?` whose text is a JSON array (`?names` of
/// a `Vec<String>`) is written as that array.
struct JsonLine;

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut fields = JsonFields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let target = fields.log_target.take();
        let mut out = String::new();
        push_head(&mut out, meta.level().as_str());
        for (key, value) in &fields.pairs {
            push_pair(&mut out, key, value);
        }
        let target = target.unwrap_or_else(|| meta.target().to_owned());
        push_pair(&mut out, "target", &serde_json::Value::from(target));
        out.push('}');
        writeln!(writer, "{out}")
    }
}

/// The fields of one event as JSON values, in the order they were given (`message` first).
#[derive(Default)]
struct JsonFields {
    pairs: Vec<(String, serde_json::Value)>,
    /// The target of a record of the `log` crate (`log.target`), which replaces `log`.
    log_target: Option<String>,
}

impl JsonFields {
    fn push(&mut self, field: &Field, value: serde_json::Value) {
        let name = field.name();
        if name == "log.target" {
            self.log_target = value.as_str().map(str::to_owned);
        } else if name.starts_with("log.") {
            // log.module_path, log.file, log.line: the target says where.
        } else if name == "message" {
            self.pairs.insert(0, (name.to_owned(), value));
        } else {
            self.pairs.push((name.to_owned(), value));
        }
    }
}

impl Visit for JsonFields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        let list = (field.name() != "message" && text.starts_with('['))
            .then(|| serde_json::from_str::<serde_json::Value>(&text).ok())
            .flatten()
            .filter(serde_json::Value::is_array);
        self.push(field, list.unwrap_or(serde_json::Value::String(text)));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, value.to_string().into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Lines;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        log: LogArgs,
    }

    #[test]
    fn json_lines_carry_the_message_and_fields_at_the_top_level() {
        let lines = Lines::default();
        let subscriber = json_subscriber(lines.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(cluster = "cluster-a", names = 3, "table published");
        });
        let text = lines.text();
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["message"], "table published", "{text}");
        assert_eq!(line["cluster"], "cluster-a", "{text}");
        assert_eq!(line["names"], 3, "{text}");
        assert_eq!(line["level"], "INFO", "{text}");
        assert!(line.get("fields").is_none(), "{text}");
    }

    #[test]
    fn lists_are_json_arrays_and_other_values_keep_their_type() {
        let lines = Lines::default();
        let subscriber = json_subscriber(lines.clone());
        let namespaces = vec!["a".to_owned(), "b \"c\"".to_owned()];
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(
                namespaces = ?namespaces,
                ports = ?[53_u16, 5353],
                on = true,
                text = %"[not a list",
                "[watching] namespaces"
            );
        });
        let text = lines.text();
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(
            line["namespaces"],
            serde_json::json!(["a", "b \"c\""]),
            "{text}"
        );
        assert_eq!(line["ports"], serde_json::json!([53, 5353]), "{text}");
        assert_eq!(line["on"], true, "{text}");
        assert_eq!(line["text"], "[not a list", "{text}");
        assert_eq!(line["message"], "[watching] namespaces", "{text}");
        assert_eq!(line["target"], module_path!(), "{text}");
        assert!(line["timestamp"].as_str().unwrap().ends_with('Z'), "{text}");
    }

    #[test]
    fn the_fatal_line_is_a_json_object_with_the_message_without_its_prefix() {
        for line in [
            "xcc-agent: error: cannot read /x: No such file",
            "error: cannot read /x: No such file",
        ] {
            let json: serde_json::Value =
                serde_json::from_str(&fatal_json("xcc-agent", line)).unwrap();
            assert_eq!(json["level"], "ERROR");
            assert_eq!(json["message"], "cannot read /x: No such file", "{line}");
            assert_eq!(json["target"], "xcc-agent");
        }
        let json: serde_json::Value = serde_json::from_str(&fatal_json(
            "xcc-controller",
            "xcc-controller --uninstall: error: refused",
        ))
        .unwrap();
        assert_eq!(json["message"], "refused");
    }

    #[test]
    fn klog_verbosities_are_levels() {
        for (v, level) in [("0", "info"), ("1", "info"), ("4", "debug"), ("7", "trace")] {
            let cli = Cli::try_parse_from(["x", "-v", v]).unwrap();
            assert_eq!(cli.log.level.as_deref(), Some(level), "-v {v}");
        }
        let cli = Cli::try_parse_from(["x", "--v=2"]).unwrap();
        let filter = cli.log.level.unwrap();
        assert!(
            filter.starts_with("info,") && filter.contains("xcc_agent=debug"),
            "{filter}"
        );
        EnvFilter::try_new(&filter).unwrap();
        let error = Cli::try_parse_from(["x", "-v", "11"]).unwrap_err();
        assert!(error.to_string().contains("klog verbosity"), "{error}");
    }

    #[test]
    fn levels_and_filters_are_accepted_and_nonsense_is_a_usage_error() {
        let cli = Cli::try_parse_from(["x", "-v", "debug", "--log-format", "json"]).unwrap();
        assert_eq!(cli.log.level.as_deref(), Some("debug"));
        assert_eq!(cli.log.format, LogFormat::Json);
        let cli = Cli::try_parse_from(["x", "--log-level=info,xcc_agent=trace"]).unwrap();
        assert_eq!(cli.log.level.as_deref(), Some("info,xcc_agent=trace"));
        let cli = Cli::try_parse_from(["x", "--log", "warn"]).unwrap();
        assert_eq!(cli.log.level.as_deref(), Some("warn"));
        for bad in ["loud", "xcc_agent=loud"] {
            let error = Cli::try_parse_from(["x", "--log-level", bad]).unwrap_err();
            assert_eq!(error.exit_code(), 2);
            assert!(error.to_string().contains("expected a level"), "{error}");
        }
        let error = Cli::try_parse_from(["x", "--log-format", "yaml"]).unwrap_err();
        assert!(error.to_string().contains("json"), "{error}");
    }
}

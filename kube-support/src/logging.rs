//! The one logging setup of every xcc binary: the same flags and environment variables, text
//! for people and JSON for log pipelines, to stderr.
//!
//! * `--log-format text|json` (`XCC_LOG_FORMAT`). JSON is one object per line with flat fields,
//!   as log pipelines index them: `{"timestamp":...,"level":"INFO","message":"...",
//!   "target":"...","cluster":"a",...}`, never nested under `"fields"`.
//! * `--log-level`, `-v` (`XCC_LOG_LEVEL`): a level (`error`, `warn`, `info`, `debug`, `trace`)
//!   or a `RUST_LOG`-style filter (`info,xcc_agent::sources=debug`). When neither the flag nor
//!   `XCC_LOG_LEVEL` is set, `RUST_LOG` is read, then the binary's default (`info` and quieter
//!   libraries). `--log` and `XCC_LOG`, the older names, are still accepted.

use clap::{Args, ValueEnum};
use tracing_subscriber::{EnvFilter, fmt};

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
    /// Log level (error, warn, info, debug, trace) or a RUST_LOG-style filter such as
    /// `info,xcc_agent=debug`. Default: $RUST_LOG, else info (libraries at warn).
    #[arg(
        long = "log-level",
        short = 'v',
        visible_alias = "log",
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

/// Checks a `--log-level` value as a usage error, before anything runs.
fn parse_filter(text: &str) -> Result<String, String> {
    const EXPECTED: &str = "expected a level (error, warn, info, debug, trace) or a filter such \
                            as info,xcc_agent=debug";
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

/// Installs the process's subscriber; `default` is the binary's filter when none is given.
pub fn init(args: &LogArgs, default: &str) {
    let builder = fmt()
        .with_env_filter(filter(args, default))
        .with_writer(std::io::stderr);
    match args.format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
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
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .finish()
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

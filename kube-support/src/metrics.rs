//! Metrics every xcc binary with an admin server exports beside its own: `xcc_build_info`,
//! `xcc_panics_total` and the `process_*` metrics of the Prometheus client libraries (read from
//! `/proc` at each scrape); the classic text format of a scrape ([`classic`]); and the renderer
//! of the generated metrics reference (`docs/metrics.md`).

use std::{
    fmt::Write as _,
    sync::{LazyLock, Once},
    time::SystemTime,
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric},
    metrics::{
        MetricType,
        counter::{ConstCounter, Counter},
        family::Family,
        gauge::{ConstGauge, Gauge},
    },
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    revision: &'static str,
    rustversion: &'static str,
}

pub mod classic;

/// The source revision the binary was built from: `XCC_REVISION` at build time when set, else
/// git's short commit of the checkout (`-dirty` after it when tracked files differed), else
/// `unknown` (see `build.rs`).
pub const REVISION: &str = env!("XCC_REVISION");

/// What every binary's `--version` says after its name: `<version> (<revision>)`.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("XCC_REVISION"), ")");

/// The panics of this process so far (`xcc_panics_total`), counted by the hook
/// [`count_panics`] installs.
static PANICS: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Counts every panic of the process (in any thread or task) in `xcc_panics_total`, then hands
/// it to the hook installed before (the default one writes the message and where to stderr).
/// Installed once, however often it is called.
pub fn count_panics() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.inc();
            before(info);
        }));
    });
}

/// Registers `build_info` and `panics` (under the registry's prefix: `xcc_build_info`,
/// `xcc_panics_total`) with this binary's `version`, and the `process_*` metrics, which carry
/// no prefix, on `root`; installs the panic counter ([`count_panics`]).
pub fn register_common(root: &mut Registry, xcc: &str, version: &'static str) {
    let build = Family::<BuildLabels, Gauge>::default();
    build
        .get_or_create(&BuildLabels {
            version,
            revision: REVISION,
            rustversion: env!("XCC_RUSTC_VERSION"),
        })
        .set(1);
    let prefixed = root.sub_registry_with_prefix(xcc);
    prefixed.register(
        "build_info",
        "A metric with a constant '1' value labelled by the version and revision the binary was \
         built from and the Rust compiler that built it",
        build,
    );
    count_panics();
    prefixed.register(
        "panics",
        "Panics of the process so far, in any thread or task (each one's message and place are \
         on stderr)",
        PANICS.clone(),
    );
    root.register_collector(Box::new(ProcessCollector::new()));
}

/// The `process_*` metrics of the Prometheus client libraries, read at each scrape.
#[derive(Debug)]
struct ProcessCollector {
    start_time: f64,
}

impl ProcessCollector {
    fn new() -> Self {
        let start_time = process_start_time().unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        });
        ProcessCollector { start_time }
    }
}

/// Fields of `/proc/self/stat` after the command name (field 3 onwards).
fn stat_fields() -> Option<Vec<String>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_string).collect())
}

fn clock_ticks() -> f64 {
    #[expect(unsafe_code, reason = "std cannot read sysconf values")]
    // SAFETY: sysconf reads a configuration value and has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

fn page_size() -> f64 {
    #[expect(unsafe_code, reason = "std cannot read sysconf values")]
    // SAFETY: sysconf reads a configuration value and has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as f64 } else { 4096.0 }
}

fn process_start_time() -> Option<f64> {
    // Field 22 (starttime, in clock ticks after boot) is index 19 after the name.
    let ticks: f64 = stat_fields()?.get(19)?.parse().ok()?;
    let boot: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(boot + ticks / clock_ticks())
}

fn limit(name: &str) -> Option<f64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with(name))?;
    let soft = line[name.len()..].split_whitespace().next()?;
    Some(if soft == "unlimited" {
        f64::INFINITY
    } else {
        soft.parse().ok()?
    })
}

fn encode_gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(value);
    let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    gauge.encode(metric)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(fields) = stat_fields() {
            // utime and stime (fields 14 and 15), vsize and rss (23 and 24).
            let number = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
            if let (Some(user), Some(system)) = (number(11), number(12)) {
                let cpu = ConstCounter::new((user + system) / clock_ticks());
                let metric = encoder.encode_descriptor(
                    "process_cpu_seconds",
                    "Total user and system CPU time spent in seconds",
                    None,
                    MetricType::Counter,
                )?;
                cpu.encode(metric)?;
            }
            if let Some(vsize) = number(20) {
                encode_gauge(
                    &mut encoder,
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes",
                    vsize,
                )?;
            }
            if let Some(rss) = number(21) {
                encode_gauge(
                    &mut encoder,
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes",
                    rss * page_size(),
                )?;
            }
            if let Some(threads) = number(17) {
                encode_gauge(
                    &mut encoder,
                    "process_threads",
                    "Number of OS threads in the process",
                    threads,
                )?;
            }
        }
        encode_gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            self.start_time,
        )?;
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            encode_gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors",
                fds.count() as f64,
            )?;
        }
        if let Some(max) = limit("Max open files") {
            encode_gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors",
                max,
            )?;
        }
        Ok(())
    }
}

/// One metric of a registry, as the reference page lists it.
#[derive(Debug, PartialEq)]
pub struct Descriptor {
    /// The name as scraped (`_total` on counters).
    pub name: String,
    /// `counter`, `gauge`, `histogram`, ... as the `# TYPE` line says.
    pub kind: String,
    /// The `# HELP` text.
    pub help: String,
    /// Label names of its first series, in order (histograms' `le` left out); `None` when it has
    /// no series.
    pub series_labels: Option<Vec<String>>,
}

/// The metrics in the OpenMetrics or classic text `text`, in order, series or not.
pub fn descriptors_lenient(text: &str) -> Vec<Descriptor> {
    let mut out: Vec<Descriptor> = Vec::new();
    let mut help = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (_, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = text.replace("\\n", " ").replace("\\\\", "\\");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            // OpenMetrics names a counter family without its `_total`, the classic format with.
            let name = if kind == "counter" && !name.ends_with("_total") {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            out.push(Descriptor {
                name,
                kind: kind.to_string(),
                help: std::mem::take(&mut help),
                series_labels: None,
            });
        } else if !line.starts_with('#')
            && !line.is_empty()
            && let Some(last) = out.last_mut()
            && last.series_labels.is_none()
        {
            let labels = line
                .split_once('{')
                .and_then(|(_, rest)| rest.rsplit_once('}'))
                .map(|(labels, _)| labels)
                .unwrap_or("");
            last.series_labels = Some(
                label_names(labels)
                    .into_iter()
                    .filter(|l| l != "le")
                    .collect(),
            );
        }
    }
    out
}

/// The metrics in the OpenMetrics text `text`, in order. Fails when a metric has no series
/// (its labels would be unknown).
pub fn descriptors(text: &str) -> Result<Vec<Descriptor>, String> {
    let out = descriptors_lenient(text);
    if let Some(empty) = out.iter().find(|d| d.series_labels.is_none()) {
        return Err(format!(
            "metric {} has no series: give it one in the reference instance",
            empty.name
        ));
    }
    Ok(out)
}

/// Label names of `a="x",b="y\"z"`.
fn label_names(labels: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = labels;
    while let Some((name, after)) = rest.split_once("=\"") {
        names.push(name.trim_start_matches(',').trim().to_string());
        // Skip the quoted value, escapes included.
        let mut escaped = false;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = i;
                    break;
                }
                _ => escaped = false,
            }
        }
        rest = &after[(end + 1).min(after.len())..];
    }
    names
}

/// A markdown table of the metrics of `text` (one binary's registry, every family with a series).
pub fn reference_section(text: &str) -> Result<String, String> {
    let mut out = String::new();
    writeln!(out, "| Metric | Type | Labels | Meaning |").unwrap();
    writeln!(out, "|---|---|---|---|").unwrap();
    for d in descriptors(text)? {
        let labels = d
            .series_labels
            .unwrap_or_default()
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let help = d.help.replace('|', "\\|");
        writeln!(out, "| `{}` | {} | {} | {} |", d.name, d.kind, labels, help).unwrap();
    }
    Ok(out)
}

/// The metrics the reference page `page` lists for binary `name`: metric name (as scraped) →
/// label names.
pub fn documented(page: &str, name: &str) -> Vec<(String, Vec<String>)> {
    let begin = format!("<!-- BEGIN {name} -->");
    let Some(section) = page.split(&begin).nth(1) else {
        return Vec::new();
    };
    let section = section.split("<!-- END").next().unwrap_or_default();
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let name = cells.first()?.trim_start_matches("| ").trim_matches('`');
            let labels = cells
                .get(2)?
                .split(", ")
                .map(|c| c.trim_matches('`').to_string())
                .filter(|c| !c.is_empty())
                .collect();
            Some((name.to_string(), labels))
        })
        .collect()
}

/// Checks the scrape `text` of binary `name` against the reference page `page`: every metric
/// served is documented with exactly the documented labels, and every documented metric is
/// served unless `may_be_absent` says it has no series before it has work (a family whose label
/// values are not known yet). The error names the first difference.
pub fn check_served(
    text: &str,
    page: &str,
    name: &str,
    may_be_absent: impl Fn(&str) -> bool,
) -> Result<(), String> {
    let scraped = descriptors_lenient(text);
    let documented = documented(page, name);
    if documented.is_empty() {
        return Err(format!("the reference documents no metric of {name}"));
    }
    for (metric, labels) in &documented {
        match scraped.iter().find(|d| &d.name == metric) {
            Some(served) if served.series_labels.as_ref() != Some(labels) => {
                return Err(format!(
                    "{metric}: labels served {:?} differ from the reference {labels:?}",
                    served.series_labels
                ));
            }
            Some(_) => {}
            None if may_be_absent(metric) => {}
            None => return Err(format!("{metric} is documented but not served")),
        }
    }
    if let Some(extra) = scraped
        .iter()
        .find(|d| !documented.iter().any(|(metric, _)| *metric == d.name))
    {
        return Err(format!("{} is served but not in the reference", extra.name));
    }
    Ok(())
}

/// Replaces the text between `<!-- BEGIN name -->` and `<!-- END name -->` in `page`.
pub fn replace_section(page: &str, name: &str, section: &str) -> Option<String> {
    let begin = format!("<!-- BEGIN {name} -->\n");
    let end = format!("<!-- END {name} -->");
    let start = page.find(&begin)? + begin.len();
    let stop = start + page[start..].find(&end)?;
    Some(format!("{}{}{}", &page[..start], section, &page[stop..]))
}

/// Checks the generated section `name` of the page at `path` against `section`; rewrites it
/// instead when `XCC_REGENERATE` is set. The error says how to regenerate.
pub fn check_generated_section(path: &str, name: &str, section: &str) -> Result<(), String> {
    let page = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let wanted = replace_section(&page, name, section)
        .ok_or_else(|| format!("{path} has no section markers for {name}"))?;
    if wanted == page {
        return Ok(());
    }
    if std::env::var_os("XCC_REGENERATE").is_some() {
        return std::fs::write(path, wanted).map_err(|e| format!("cannot write {path}: {e}"));
    }
    Err(format!(
        "{path} is stale for {name}: run `XCC_REGENERATE=1 cargo test -p {name} metrics_reference`"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn build_info_and_process_metrics_are_served() {
        let mut root = Registry::default();
        register_common(&mut root, "xcc", "1.2.3");
        let text = text(&root);
        assert!(
            text.contains(r#"xcc_build_info{version="1.2.3",revision=""#),
            "{text}"
        );
        for name in [
            "xcc_panics_total ",
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(text.contains(name), "{name} missing in {text}");
        }
        let start: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_start_time_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            start > now - 86_400.0 * 365.0 && start <= now + 1.0,
            "{start}"
        );
    }

    fn panics(registry: &Registry) -> u64 {
        let text = text(registry);
        text.lines()
            .find_map(|l| l.strip_prefix("xcc_panics_total "))
            .unwrap_or_else(|| panic!("no xcc_panics_total in {text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn a_panic_in_any_thread_is_counted() {
        let mut root = Registry::default();
        register_common(&mut root, "xcc", "1.2.3");
        let before = panics(&root);
        let thread = std::thread::spawn(|| panic!("a panic the test causes, to be counted"));
        assert!(thread.join().is_err());
        // Other tests of this process may panic meanwhile: at least this one is counted.
        assert!(panics(&root) > before, "{}", text(&root));
        // A second registration neither adds a second hook nor a second counter.
        let mut again = Registry::default();
        register_common(&mut again, "xcc", "1.2.3");
        assert_eq!(panics(&again), panics(&root));
    }

    /// In a git checkout, the revision is the commit of HEAD (not `unknown`), and `--version`
    /// says it after the version.
    #[test]
    fn the_revision_is_the_checkouts_commit() {
        assert_eq!(
            VERSION,
            format!("{} ({REVISION})", env!("CARGO_PKG_VERSION"))
        );
        if std::env::var_os("XCC_REVISION").is_some() {
            eprintln!("SKIPPED: XCC_REVISION is set, so the revision is not git's");
            return;
        }
        let head = std::process::Command::new("git")
            .args([
                "-C",
                env!("CARGO_MANIFEST_DIR"),
                "rev-parse",
                "--short=12",
                "HEAD",
            ])
            .output();
        let head = match head {
            Ok(out) if out.status.success() => String::from_utf8(out.stdout).unwrap(),
            _ if std::env::var("CI").as_deref() == Ok("true") => {
                panic!("CI runs in a git checkout with git installed")
            }
            _ => {
                eprintln!("SKIPPED: not a git checkout, or no git: the revision is {REVISION}");
                return;
            }
        };
        let head = head.trim();
        assert_eq!(head.len(), 12, "{head}");
        assert!(
            REVISION == head || REVISION == format!("{head}-dirty"),
            "the revision {REVISION} is not HEAD's {head}"
        );
        let mut root = Registry::default();
        register_common(&mut root, "xcc", "1.2.3");
        let text = text(&root);
        assert!(
            text.contains(&format!(r#"revision="{REVISION}""#)),
            "{text}"
        );
    }

    #[test]
    fn descriptors_list_names_types_and_label_names() {
        let text = "# HELP a_requests Requests.\n# TYPE a_requests counter\n\
                    a_requests_total{zone=\"x.\",proto=\"udp\"} 0\n\
                    # HELP a_lat Time.\n# TYPE a_lat histogram\n\
                    a_lat_bucket{type=\"A\",le=\"0.1\"} 0\n\
                    # HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n# EOF\n";
        let found = descriptors(text).unwrap();
        assert_eq!(found[0].name, "a_requests_total");
        assert_eq!(
            found[0].series_labels.as_deref().unwrap(),
            ["zone", "proto"]
        );
        assert_eq!(found[1].series_labels.as_deref().unwrap(), ["type"]);
        assert_eq!(found[2].kind, "gauge");
        assert!(found[2].series_labels.as_deref().unwrap().is_empty());
        let empty = "# HELP b Nothing.\n# TYPE b gauge\n# EOF\n";
        assert!(descriptors(empty).unwrap_err().contains("no series"));
        assert_eq!(label_names(r#"a="x\"}",b="",c="y""#), ["a", "b", "c"]);
    }
}

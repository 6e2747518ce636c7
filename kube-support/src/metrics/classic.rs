//! The classic Prometheus text format (version 0.0.4) of an OpenMetrics text, for scrapers that
//! ask for it (`Accept: text/plain;version=0.0.4`) or ask for nothing: what the Prometheus Go
//! client answers them.
//!
//! The two formats differ in these points, and the conversion does each:
//!
//! | OpenMetrics | classic |
//! |---|---|
//! | `# TYPE x counter`, samples `x_total`, `x_created` | `# HELP x_total`, `# TYPE x_total counter`, samples `x_total`; no `_created` |
//! | `_created` of histograms and summaries | left out |
//! | `# TYPE x info`, samples `x_info` | `# TYPE x_info gauge` |
//! | `stateset` | `gauge` |
//! | `gaugehistogram` (`_gcount`, `_gsum`) | `histogram` (`_count`, `_sum`) |
//! | `unknown` | `untyped` |
//! | `# UNIT x seconds` | left out (the unit is the name's suffix) |
//! | `\"` in a `# HELP` text | `"` (only `\\` and `\n` are escaped there) |
//! | exemplars (`... # {trace_id="a"} 1`) | left out |
//! | timestamps in seconds (`1.5`) | in milliseconds (`1500`) |
//! | `# EOF` | left out |

/// The content type of the classic text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One metric family as the OpenMetrics text declares it.
#[derive(Default)]
struct Family {
    name: String,
    kind: String,
    help: Option<String>,
    /// Whether its `# HELP` and `# TYPE` lines are written already.
    announced: bool,
}

impl Family {
    /// The family's name in the classic format.
    fn classic_name(&self) -> String {
        match self.kind.as_str() {
            "counter" => format!("{}_total", self.name),
            "info" => format!("{}_info", self.name),
            _ => self.name.clone(),
        }
    }

    fn classic_kind(&self) -> &str {
        match self.kind.as_str() {
            "info" | "stateset" => "gauge",
            "gaugehistogram" => "histogram",
            "unknown" | "" => "untyped",
            other => other,
        }
    }

    /// Writes its `# HELP` and `# TYPE` lines once.
    fn announce(&mut self, out: &mut String) {
        if self.announced || self.name.is_empty() {
            return;
        }
        self.announced = true;
        let name = self.classic_name();
        if let Some(help) = &self.help {
            out.push_str(&format!("# HELP {name} {}\n", classic_help(help)));
        }
        if !self.kind.is_empty() {
            out.push_str(&format!("# TYPE {name} {}\n", self.classic_kind()));
        }
    }

    /// The classic name of sample `name` of this family, `None` when the classic format has no
    /// such sample (`_created`).
    fn sample_name<'a>(&self, name: &'a str) -> Option<std::borrow::Cow<'a, str>> {
        let suffix = name.strip_prefix(self.name.as_str()).unwrap_or("");
        match (self.kind.as_str(), suffix) {
            ("counter" | "histogram" | "summary" | "gaugehistogram", "_created") => None,
            ("gaugehistogram", "_gcount") => Some(format!("{}_count", self.name).into()),
            ("gaugehistogram", "_gsum") => Some(format!("{}_sum", self.name).into()),
            _ => Some(name.into()),
        }
    }
}

/// A `# HELP` text of OpenMetrics (`\\`, `\n` and `\"` escaped) as the classic format escapes it
/// (`\\` and `\n` only).
fn classic_help(help: &str) -> String {
    let mut out = String::with_capacity(help.len());
    let mut chars = help.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('"') => out.push('"'),
                Some(next) => {
                    out.push('\\');
                    out.push(next);
                }
                None => out.push_str("\\\\"),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// One sample line cut into its name, its label set (`{...}` or empty) and what follows.
fn split_sample(line: &str) -> (&str, &str, &str) {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let (name, rest) = line.split_at(name_end);
    if !rest.starts_with('{') {
        return (name, "", rest);
    }
    // The closing brace outside every quoted value.
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in rest.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return (name, &rest[..=i], &rest[i + 1..]),
            _ => {}
        }
    }
    (name, rest, "")
}

/// A sample line in the classic format: exemplar left out, timestamp in milliseconds.
fn classic_sample(name: &str, labels: &str, rest: &str, out: &mut String) {
    let values = rest.split_once(" # ").map_or(rest, |(values, _)| values);
    let mut words = values.split_whitespace();
    let value = words.next().unwrap_or("");
    out.push_str(name);
    out.push_str(labels);
    out.push(' ');
    out.push_str(value);
    if let Some(seconds) = words.next() {
        match seconds.parse::<f64>() {
            Ok(seconds) => out.push_str(&format!(" {}", (seconds * 1000.0).round() as i64)),
            Err(_) => {
                out.push(' ');
                out.push_str(seconds);
            }
        }
    }
    out.push('\n');
}

/// The classic text format (0.0.4) of `openmetrics`, the OpenMetrics text of a registry.
pub fn from_openmetrics(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut family = Family::default();
    for line in openmetrics.lines() {
        if line == "# EOF" {
            break;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (keyword, name, text) = (
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
            );
            if !["HELP", "TYPE", "UNIT"].contains(&keyword) {
                continue;
            }
            if name != family.name {
                family.announce(&mut out);
                family = Family {
                    name: name.to_string(),
                    ..Family::default()
                };
            }
            match keyword {
                "HELP" => family.help = Some(text.to_string()),
                "TYPE" => family.kind = text.to_string(),
                _ => {}
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        family.announce(&mut out);
        let (name, labels, rest) = split_sample(line);
        if let Some(name) = family.sample_name(name) {
            classic_sample(&name, labels, rest, &mut out);
        }
    }
    family.announce(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_difference_of_the_formats_is_converted() {
        let openmetrics = concat!(
            "# HELP http_requests Requests, by \\\"code\\\"; a \\\\ and\\na new line.\n",
            "# TYPE http_requests counter\n",
            "http_requests_total{code=\"200\",path=\"/a # b}\"} 3 # {trace_id=\"x\"} 1 1.5\n",
            "http_requests_created{code=\"200\",path=\"/a # b}\"} 1700000000.25\n",
            "# HELP request_seconds Time.\n",
            "# TYPE request_seconds histogram\n",
            "# UNIT request_seconds seconds\n",
            "request_seconds_bucket{le=\"0.1\"} 1\n",
            "request_seconds_bucket{le=\"+Inf\"} 2 # {trace_id=\"y\"} 0.05\n",
            "request_seconds_sum 0.25\n",
            "request_seconds_count 2\n",
            "request_seconds_created 1700000000\n",
            "# HELP build Build.\n",
            "# TYPE build info\n",
            "build_info{version=\"1\"} 1\n",
            "# HELP mode Mode.\n",
            "# TYPE mode stateset\n",
            "mode{mode=\"a\"} 1\n",
            "mode{mode=\"b\"} 0\n",
            "# HELP queue_bytes Sizes.\n",
            "# TYPE queue_bytes gaugehistogram\n",
            "queue_bytes_bucket{le=\"+Inf\"} 4\n",
            "queue_bytes_gcount 4\n",
            "queue_bytes_gsum 100\n",
            "# HELP temperature Now.\n",
            "# TYPE temperature gauge\n",
            "temperature{room=\"a\\\"b\"} -Inf 1700000000.5\n",
            "# TYPE mystery unknown\n",
            "mystery NaN\n",
            "# HELP empty Nothing yet.\n",
            "# TYPE empty counter\n",
            "# EOF\n",
        );
        let classic = concat!(
            "# HELP http_requests_total Requests, by \"code\"; a \\\\ and\\na new line.\n",
            "# TYPE http_requests_total counter\n",
            "http_requests_total{code=\"200\",path=\"/a # b}\"} 3\n",
            "# HELP request_seconds Time.\n",
            "# TYPE request_seconds histogram\n",
            "request_seconds_bucket{le=\"0.1\"} 1\n",
            "request_seconds_bucket{le=\"+Inf\"} 2\n",
            "request_seconds_sum 0.25\n",
            "request_seconds_count 2\n",
            "# HELP build_info Build.\n",
            "# TYPE build_info gauge\n",
            "build_info{version=\"1\"} 1\n",
            "# HELP mode Mode.\n",
            "# TYPE mode gauge\n",
            "mode{mode=\"a\"} 1\n",
            "mode{mode=\"b\"} 0\n",
            "# HELP queue_bytes Sizes.\n",
            "# TYPE queue_bytes histogram\n",
            "queue_bytes_bucket{le=\"+Inf\"} 4\n",
            "queue_bytes_count 4\n",
            "queue_bytes_sum 100\n",
            "# HELP temperature Now.\n",
            "# TYPE temperature gauge\n",
            "temperature{room=\"a\\\"b\"} -Inf 1700000000500\n",
            "# TYPE mystery untyped\n",
            "mystery NaN\n",
            "# HELP empty_total Nothing yet.\n",
            "# TYPE empty_total counter\n",
        );
        assert_eq!(from_openmetrics(openmetrics), classic);
    }

    #[test]
    fn a_registrys_text_converts_to_what_the_go_client_writes() {
        use prometheus_client::{
            metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
            registry::{Registry, Unit},
        };
        let mut registry = Registry::default();
        let sub = registry.sub_registry_with_prefix("xcc");
        let requests = Family::<Vec<(String, String)>, Counter>::default();
        sub.register("requests", "Requests by code", requests.clone());
        requests
            .get_or_create(&vec![("code".into(), "200".into())])
            .inc_by(2);
        let latency = Histogram::new([0.5, 1.0]);
        sub.register_with_unit("latency", "Latency", Unit::Seconds, latency.clone());
        latency.observe(0.75);
        let up = Gauge::<i64>::default();
        sub.register("up", "Whether it is up", up.clone());
        up.set(1);
        let mut openmetrics = String::new();
        prometheus_client::encoding::text::encode(&mut openmetrics, &registry).unwrap();

        assert_eq!(
            from_openmetrics(&openmetrics),
            concat!(
                "# HELP xcc_requests_total Requests by code.\n",
                "# TYPE xcc_requests_total counter\n",
                "xcc_requests_total{code=\"200\"} 2\n",
                "# HELP xcc_latency_seconds Latency.\n",
                "# TYPE xcc_latency_seconds histogram\n",
                "xcc_latency_seconds_sum 0.75\n",
                "xcc_latency_seconds_count 1\n",
                "xcc_latency_seconds_bucket{le=\"0.5\"} 0\n",
                "xcc_latency_seconds_bucket{le=\"1.0\"} 1\n",
                "xcc_latency_seconds_bucket{le=\"+Inf\"} 1\n",
                "# HELP xcc_up Whether it is up.\n",
                "# TYPE xcc_up gauge\n",
                "xcc_up 1\n",
            )
        );
    }
}

//! Prometheus metrics of the agent (OpenMetrics text on `/metrics`).

use std::{
    sync::atomic::{AtomicI64, AtomicU64},
    time::Duration,
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use xcc_dns::{
    Cause, QueryObserver,
    proto::{op::ResponseCode, rr::RecordType},
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueryLabels {
    qtype: &'static str,
    rcode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MalformedLabels {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

/// Every metric the agent exports.
pub struct Metrics {
    registry: Registry,
    queries: Family<QueryLabels, Counter>,
    latency: Histogram,
    malformed: Family<MalformedLabels, Counter>,
    dropped: Counter,
    table_names: Gauge,
    table_serial: Gauge<i64, AtomicI64>,
    reloads: Family<ReloadLabels, Counter>,
    last_reload_ok: Gauge,
    last_reload_time: Gauge<f64, AtomicU64>,
    /// The sync core's watches and reconcilers.
    pub sync: crate::sync_metrics::SyncMetrics,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("xcc");
        let queries = Family::<QueryLabels, Counter>::default();
        registry.register(
            "dns_queries",
            "DNS responses sent, by question type and response code",
            queries.clone(),
        );
        // 5 µs .. ~80 ms: time in the handler, from parsed request to response handed to the socket.
        let latency = Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
            5e-6, 2.0, 15,
        ));
        registry.register(
            "dns_query_duration_seconds",
            "Time to answer one DNS query",
            latency.clone(),
        );
        let malformed = Family::<MalformedLabels, Counter>::default();
        registry.register(
            "dns_malformed",
            "Malformed DNS messages, answered FORMERR or dropped, by cause",
            malformed.clone(),
        );
        // Every cause from the start, so that a rate over the series needs no first hit.
        for cause in Cause::ALL {
            if cause != Cause::NotImplemented {
                let _ = malformed.get_or_create(&MalformedLabels {
                    cause: cause.label(),
                });
            }
        }
        let dropped = Counter::default();
        registry.register(
            "dns_udp_queue_full_drops",
            "UDP queries dropped unanswered because the queue to the general (hickory) path was full",
            dropped.clone(),
        );
        let table_names = Gauge::default();
        registry.register(
            "dns_table_names",
            "Host names in the record table",
            table_names.clone(),
        );
        let table_serial = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "dns_table_serial",
            "SOA serial of the published record table",
            table_serial.clone(),
        );
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "records_reloads",
            "Loads of the records file, by result",
            reloads.clone(),
        );
        let last_reload_ok = Gauge::default();
        registry.register(
            "records_last_reload_success",
            "1 if the last load of the records file succeeded, 0 if it failed",
            last_reload_ok.clone(),
        );
        let last_reload_time = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "records_last_reload_timestamp_seconds",
            "Unix time of the last load attempt of the records file",
            last_reload_time.clone(),
        );
        let sync = crate::sync_metrics::SyncMetrics::register(&mut registry);
        Metrics {
            sync,
            registry,
            queries,
            latency,
            malformed,
            dropped,
            table_names,
            table_serial,
            reloads,
            last_reload_ok,
            last_reload_time,
        }
    }

    /// Records the state of the table after a change.
    pub fn table_published(&self, names: usize, serial: u32) {
        self.table_names.set(names as i64);
        self.table_serial.set(i64::from(serial));
    }

    /// Records one load of the records file; `error` is the error's metric label on failure.
    pub fn records_loaded(&self, error: Option<&'static str>) {
        let result = error.unwrap_or("ok");
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
        self.last_reload_ok.set(i64::from(error.is_none()));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.last_reload_time.set(now);
    }

    /// OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

impl QueryObserver for Metrics {
    fn observe(&self, qtype: Option<RecordType>, rcode: ResponseCode, elapsed: Duration) {
        let qtype: &'static str = qtype.map_or("none", Into::into);
        self.queries
            .get_or_create(&QueryLabels {
                qtype,
                rcode: rcode_label(rcode),
            })
            .inc();
        self.latency.observe(elapsed.as_secs_f64());
    }

    fn malformed(&self, cause: Cause) {
        self.malformed
            .get_or_create(&MalformedLabels {
                cause: cause.label(),
            })
            .inc();
    }

    fn dropped(&self) {
        self.dropped.inc();
    }
}

/// The conventional (dig) spelling of a response code.
fn rcode_label(rcode: ResponseCode) -> &'static str {
    match u16::from(rcode) {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        16 => "BADVERS",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_counted_by_type_and_rcode() {
        let metrics = Metrics::new();
        metrics.observe(
            Some(RecordType::A),
            ResponseCode::NoError,
            Duration::from_micros(7),
        );
        metrics.observe(
            Some(RecordType::A),
            ResponseCode::NoError,
            Duration::from_micros(9),
        );
        metrics.observe(
            Some(RecordType::AAAA),
            ResponseCode::NXDomain,
            Duration::ZERO,
        );
        metrics.malformed(Cause::QuestionCount);
        metrics.malformed(Cause::QuestionCount);
        metrics.malformed(Cause::Opt);
        metrics.dropped();
        metrics.records_loaded(Some("invalid_records"));
        metrics.table_published(3, 77);
        let text = metrics.encode();
        assert!(
            text.contains(r#"xcc_dns_queries_total{qtype="A",rcode="NOERROR"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"qtype="AAAA",rcode="NXDOMAIN"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("xcc_dns_query_duration_seconds_count 3"),
            "{text}"
        );
        assert!(
            text.contains(r#"xcc_records_reloads_total{result="invalid_records"} 1"#),
            "{text}"
        );
        assert!(text.contains("xcc_records_last_reload_success 0"), "{text}");
        assert!(
            text.contains(r#"xcc_dns_malformed_total{cause="question_count"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"xcc_dns_malformed_total{cause="bad_opt"} 1"#),
            "{text}"
        );
        // Causes not seen yet are listed at zero; NOTIMP answers are not malformed.
        assert!(
            text.contains(r#"xcc_dns_malformed_total{cause="short"} 0"#),
            "{text}"
        );
        assert!(!text.contains("not_implemented"), "{text}");
        assert!(
            text.contains("xcc_dns_udp_queue_full_drops_total 1"),
            "{text}"
        );
        assert!(text.contains("xcc_dns_table_names 3"), "{text}");
        assert!(text.contains("xcc_dns_table_serial 77"), "{text}");
    }
}

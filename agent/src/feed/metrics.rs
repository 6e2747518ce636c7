//! Prometheus metrics of the agent (OpenMetrics text on `/metrics`).
//!
//! The DNS series are named and labelled as CoreDNS's (`coredns_dns_requests_total{server,zone,
//! proto,family,type}`, `..._responses_total{server,zone,rcode}`,
//! `..._request_duration_seconds{server,zone,type}`, `..._request_size_bytes{server,zone,proto}`,
//! `..._response_size_bytes{server,zone,proto}`): a CoreDNS dashboard or alert works with the
//! prefix `xcc_` instead of `coredns_`. The per-query path touches only handles resolved in
//! advance (an index into a table of counters, an atomic increment): no label set is built or
//! hashed per query, and the size histograms take no lock ([`SizeHistogram`]).
//!
//! Every series of a known label set exists from the start at 0 (each zone × proto × family for
//! A and AAAA, each zone × response code), so that `absent()` and `rate()` need no first query.
//! `docs/metrics.md` is generated from this registry (`metrics_reference` test).

use std::sync::{
    Arc, OnceLock,
    atomic::{AtomicI64, AtomicU64, Ordering},
};

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::{
        MetricType, TypedMetric, counter::Counter, family::Family, gauge::Gauge,
        histogram::Histogram,
    },
    registry::Registry,
};
use xcc_dns::{
    Answered, Cause, QueryObserver,
    proto::{op::ResponseCode, rr::RecordType},
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    server: String,
    zone: String,
    proto: &'static str,
    family: &'static str,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResponseLabels {
    server: String,
    zone: String,
    rcode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    server: String,
    zone: String,
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SizeLabels {
    server: String,
    zone: String,
    proto: &'static str,
}

/// CoreDNS's buckets of its request and response size histograms, in bytes (511: the largest
/// classic UDP message; 1023 .. 64e3: EDNS and TCP).
const SIZE_BUCKETS: [u64; 14] = [
    0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16_000, 32_000, 48_000, 64_000,
];

/// A histogram of message sizes in bytes, CoreDNS's buckets, that takes no lock: one atomic
/// counter per bucket, the count and the sum (sizes are whole bytes).
#[derive(Clone, Debug, Default)]
pub struct SizeHistogram {
    inner: Arc<SizeInner>,
}

#[derive(Debug, Default)]
struct SizeInner {
    /// Observations per bucket (not cumulative); the last one is +Inf.
    buckets: [AtomicU64; SIZE_BUCKETS.len() + 1],
    count: AtomicU64,
    sum: AtomicU64,
}

impl SizeHistogram {
    /// One message of `bytes` bytes.
    pub fn observe(&self, bytes: usize) {
        let bytes = bytes as u64;
        let bucket = SIZE_BUCKETS.partition_point(|bound| *bound < bytes);
        let inner = &*self.inner;
        inner.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        inner.sum.fetch_add(bytes, Ordering::Relaxed);
        inner.count.fetch_add(1, Ordering::Relaxed);
    }
}

impl TypedMetric for SizeHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for SizeHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let inner = &*self.inner;
        let buckets: Vec<(f64, u64)> = SIZE_BUCKETS
            .iter()
            .map(|bound| *bound as f64)
            .chain(std::iter::once(f64::INFINITY))
            .zip(inner.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect();
        // The count as the buckets add up, so that a scrape during an observation stays
        // consistent (`_count` equal to the +Inf bucket).
        let count = buckets.iter().map(|(_, n)| n).sum();
        encoder.encode_histogram::<NoLabelSet>(
            inner.sum.load(Ordering::Relaxed) as f64,
            count,
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MalformedLabels {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

/// The query types with a `type` label of their own, as CoreDNS's; every other is `other`.
const TYPES: [(RecordType, &str); 18] = [
    (RecordType::A, "A"),
    (RecordType::AAAA, "AAAA"),
    (RecordType::CNAME, "CNAME"),
    (RecordType::NS, "NS"),
    (RecordType::SOA, "SOA"),
    (RecordType::PTR, "PTR"),
    (RecordType::MX, "MX"),
    (RecordType::TXT, "TXT"),
    (RecordType::SRV, "SRV"),
    (RecordType::CAA, "CAA"),
    (RecordType::HTTPS, "HTTPS"),
    (RecordType::SVCB, "SVCB"),
    (RecordType::DS, "DS"),
    (RecordType::DNSKEY, "DNSKEY"),
    (RecordType::ANY, "ANY"),
    (RecordType::AXFR, "AXFR"),
    (RecordType::IXFR, "IXFR"),
    (RecordType::NULL, "NULL"),
];
const OTHER_TYPE: usize = TYPES.len();
const TYPE_COUNT: usize = TYPES.len() + 1;

fn type_index(qtype: Option<RecordType>) -> usize {
    let Some(qtype) = qtype else {
        return OTHER_TYPE;
    };
    TYPES
        .iter()
        .position(|(t, _)| *t == qtype)
        .unwrap_or(OTHER_TYPE)
}

fn type_label(index: usize) -> &'static str {
    TYPES.get(index).map_or("other", |(_, label)| label)
}

/// Response codes as CoreDNS spells them (dig's spelling); `OTHER` for the rest.
const RCODES: [&str; 8] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "BADVERS", "OTHER",
];

fn rcode_index(rcode: ResponseCode) -> usize {
    match u16::from(rcode) {
        code @ 0..=5 => usize::from(code),
        16 => 6,
        _ => 7,
    }
}

/// The `zone` label of queries for a name in no zone served (and of messages answered before
/// their question was read), as CoreDNS labels the queries no server block takes.
const NO_ZONE: &str = "dropped";
const PROTOS: [&str; 2] = ["udp", "tcp"];
/// CoreDNS's `family`: 1 for IPv4, 2 for IPv6.
const FAMILIES: [&str; 2] = ["1", "2"];

/// Counters and histograms of one label set, created on first use and then reused.
struct Slots<M> {
    slots: Box<[OnceLock<M>]>,
}

impl<M: Clone> Slots<M> {
    fn new(len: usize) -> Self {
        Slots {
            slots: (0..len).map(|_| OnceLock::new()).collect(),
        }
    }

    fn get(&self, index: usize, create: impl FnOnce() -> M) -> &M {
        self.slots[index].get_or_init(create)
    }
}

fn duration_histogram() -> Histogram {
    // 50 µs .. ~1.6 s (CoreDNS's lowest bucket is 0.25 ms; ours starts lower: answers from
    // memory take microseconds).
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        5e-5, 2.0, 16,
    ))
}

/// The records-file series, registered only in standalone mode (a cluster-fed agent loads no
/// file, and a `last_reload_success 0` there would read as a failure).
struct RecordsMetrics {
    reloads: Family<ReloadLabels, Counter>,
    last_reload_ok: Gauge,
    last_reload_time: Gauge<f64, AtomicU64>,
}

/// Every metric the agent exports.
pub struct Metrics {
    registry: Registry,
    server: String,
    /// `zone` labels: each zone of the table (with its trailing dot), then [`NO_ZONE`].
    zones: Vec<String>,
    requests: Family<RequestLabels, Counter>,
    responses: Family<ResponseLabels, Counter>,
    durations: Family<DurationLabels, Histogram>,
    request_slots: Slots<Counter>,
    response_slots: Slots<Counter>,
    duration_slots: Slots<Histogram>,
    request_sizes: Family<SizeLabels, SizeHistogram>,
    response_sizes: Family<SizeLabels, SizeHistogram>,
    /// Per zone × proto: the request's and the response's histogram.
    size_slots: Slots<(SizeHistogram, SizeHistogram)>,
    malformed: Family<MalformedLabels, Counter>,
    dropped: Counter,
    table_names: Gauge,
    table_serial: Gauge<i64, AtomicI64>,
    records: Option<RecordsMetrics>,
    /// The sync core's watches and reconcilers.
    pub sync: xcc_sync::metrics::SyncMetrics,
    /// The gateway prober's series.
    pub health: Arc<super::health::HealthMetrics>,
}

impl Metrics {
    /// The metrics of an agent serving `zones` (as [`xcc_dns::RecordTable::zones`] lists them,
    /// whose positions [`Answered::zone`] gives) on `server` (`dns://ADDR:PORT`, CoreDNS's
    /// `server` label); `records_file` in standalone mode.
    #[expect(
        clippy::too_many_lines,
        reason = "the registration list of every series the agent exports, each with its help text, in the order /metrics shows them"
    )]
    pub fn new(server: &str, zones: &[String], records_file: bool) -> Self {
        let mut registry = Registry::default();
        xcc_kube::metrics::register_common(&mut registry, "xcc", env!("CARGO_PKG_VERSION"));
        let xcc = registry.sub_registry_with_prefix("xcc");
        let mut zone_labels: Vec<String> = zones
            .iter()
            .map(|z| format!("{}.", z.trim_end_matches('.')))
            .collect();
        zone_labels.push(NO_ZONE.to_string());

        let requests = Family::<RequestLabels, Counter>::default();
        xcc.register(
            "dns_requests",
            "DNS requests answered, by server, zone, transport (udp, tcp), address family (1 \
             IPv4, 2 IPv6) and query type (other for uncommon ones); zone \"dropped\" for names \
             in no zone served",
            requests.clone(),
        );
        let responses = Family::<ResponseLabels, Counter>::default();
        xcc.register(
            "dns_responses",
            "DNS responses sent, by server, zone and response code",
            responses.clone(),
        );
        let durations =
            Family::<DurationLabels, Histogram>::new_with_constructor(duration_histogram);
        xcc.register(
            "dns_request_duration_seconds",
            "Time to answer one DNS request, from the parsed request to the response handed to \
             the socket, by server, zone and query type",
            durations.clone(),
        );
        let request_sizes = Family::<SizeLabels, SizeHistogram>::default();
        xcc.register(
            "dns_request_size_bytes",
            "Size of DNS requests in bytes, by server, zone and transport (udp, tcp)",
            request_sizes.clone(),
        );
        let response_sizes = Family::<SizeLabels, SizeHistogram>::default();
        xcc.register(
            "dns_response_size_bytes",
            "Size of DNS responses in bytes, by server, zone and transport (udp, tcp)",
            response_sizes.clone(),
        );
        let malformed = Family::<MalformedLabels, Counter>::default();
        xcc.register(
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
        xcc.register(
            "dns_udp_queue_full_drops",
            "UDP queries dropped unanswered because the queue to the general (hickory) path was full",
            dropped.clone(),
        );
        let table_names = Gauge::default();
        xcc.register(
            "dns_table_names",
            "Host names in the record table",
            table_names.clone(),
        );
        let table_serial = Gauge::<i64, AtomicI64>::default();
        xcc.register(
            "dns_table_serial",
            "SOA serial of the published record table",
            table_serial.clone(),
        );
        let records = records_file.then(|| {
            let reloads = Family::<ReloadLabels, Counter>::default();
            xcc.register(
                "records_reloads",
                "Loads of the records file, by result (ok or the error); standalone mode only",
                reloads.clone(),
            );
            let _ = reloads.get_or_create(&ReloadLabels { result: "ok" });
            let last_reload_ok = Gauge::default();
            xcc.register(
                "records_last_reload_success",
                "1 if the last load of the records file succeeded, 0 if it failed; standalone \
                 mode only",
                last_reload_ok.clone(),
            );
            let last_reload_time = Gauge::<f64, AtomicU64>::default();
            xcc.register(
                "records_last_reload_timestamp_seconds",
                "Unix time of the last load attempt of the records file; standalone mode only",
                last_reload_time.clone(),
            );
            RecordsMetrics {
                reloads,
                last_reload_ok,
                last_reload_time,
            }
        });
        let sync = xcc_sync::metrics::SyncMetrics::register(xcc);
        let health = Arc::new(super::health::HealthMetrics::register(xcc));

        let zone_count = zone_labels.len();
        let metrics = Metrics {
            health,
            registry,
            server: server.to_string(),
            request_slots: Slots::new(zone_count * PROTOS.len() * FAMILIES.len() * TYPE_COUNT),
            response_slots: Slots::new(zone_count * RCODES.len()),
            duration_slots: Slots::new(zone_count * TYPE_COUNT),
            size_slots: Slots::new(zone_count * PROTOS.len()),
            zones: zone_labels,
            requests,
            responses,
            durations,
            request_sizes,
            response_sizes,
            malformed,
            dropped,
            table_names,
            table_serial,
            records,
            sync,
        };
        // The series of the common label sets, at 0 from the start.
        for zone in 0..zone_count {
            for common in [RecordType::A, RecordType::AAAA] {
                let kind = type_index(Some(common));
                for proto in 0..PROTOS.len() {
                    for family in 0..FAMILIES.len() {
                        metrics.request(zone, proto, family, kind);
                    }
                }
                metrics.duration(zone, kind);
            }
            for rcode in 0..RCODES.len() {
                metrics.response(zone, rcode);
            }
            for proto in 0..PROTOS.len() {
                metrics.sizes(zone, proto);
            }
        }
        metrics
    }

    fn sizes(&self, zone: usize, proto: usize) -> &(SizeHistogram, SizeHistogram) {
        self.size_slots.get(zone * PROTOS.len() + proto, || {
            let labels = SizeLabels {
                server: self.server.clone(),
                zone: self.zones[zone].clone(),
                proto: PROTOS[proto],
            };
            (
                self.request_sizes.get_or_create(&labels).clone(),
                self.response_sizes.get_or_create(&labels).clone(),
            )
        })
    }

    fn request(&self, zone: usize, proto: usize, family: usize, kind: usize) -> &Counter {
        let index = ((zone * PROTOS.len() + proto) * FAMILIES.len() + family) * TYPE_COUNT + kind;
        self.request_slots.get(index, || {
            self.requests
                .get_or_create(&RequestLabels {
                    server: self.server.clone(),
                    zone: self.zones[zone].clone(),
                    proto: PROTOS[proto],
                    family: FAMILIES[family],
                    r#type: type_label(kind),
                })
                .clone()
        })
    }

    fn response(&self, zone: usize, rcode: usize) -> &Counter {
        self.response_slots.get(zone * RCODES.len() + rcode, || {
            self.responses
                .get_or_create(&ResponseLabels {
                    server: self.server.clone(),
                    zone: self.zones[zone].clone(),
                    rcode: RCODES[rcode],
                })
                .clone()
        })
    }

    fn duration(&self, zone: usize, kind: usize) -> &Histogram {
        self.duration_slots.get(zone * TYPE_COUNT + kind, || {
            self.durations
                .get_or_create(&DurationLabels {
                    server: self.server.clone(),
                    zone: self.zones[zone].clone(),
                    r#type: type_label(kind),
                })
                .clone()
        })
    }

    /// Records the state of the table after a change.
    pub fn table_published(&self, names: usize, serial: u32) {
        self.table_names.set(names as i64);
        self.table_serial.set(i64::from(serial));
    }

    /// Records one load of the records file; `error` is the error's metric label on failure.
    pub fn records_loaded(&self, error: Option<&'static str>) {
        let Some(records) = &self.records else {
            return;
        };
        let result = error.unwrap_or("ok");
        records
            .reloads
            .get_or_create(&ReloadLabels { result })
            .inc();
        records.last_reload_ok.set(i64::from(error.is_none()));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        records.last_reload_time.set(now);
    }

    /// OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
impl Default for Metrics {
    /// An agent's metrics as in standalone mode, for zone `xcc.test` on `0.0.0.0:53`.
    fn default() -> Self {
        Metrics::new("dns://0.0.0.0:53", &["xcc.test".into()], true)
    }
}

impl QueryObserver for Metrics {
    fn observe(&self, answered: &Answered) {
        let zone = answered
            .zone
            .filter(|z| *z < self.zones.len() - 1)
            .unwrap_or(self.zones.len() - 1);
        let kind = type_index(answered.qtype);
        self.request(
            zone,
            usize::from(answered.tcp),
            usize::from(answered.ipv6),
            kind,
        )
        .inc();
        self.response(zone, rcode_index(answered.rcode)).inc();
        self.duration(zone, kind)
            .observe(answered.elapsed.as_secs_f64());
        let (request, response) = self.sizes(zone, usize::from(answered.tcp));
        request.observe(answered.request_bytes);
        if answered.response_bytes > 0 {
            response.observe(answered.response_bytes);
        }
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

/// The server label of an agent listening on `listen`, as CoreDNS writes it.
pub fn server_label(listen: std::net::SocketAddr) -> String {
    format!("dns://{listen}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn answered(qtype: RecordType, rcode: ResponseCode, zone: Option<usize>) -> Answered {
        Answered {
            qtype: Some(qtype),
            rcode,
            zone,
            tcp: false,
            ipv6: false,
            elapsed: Duration::from_micros(7),
            request_bytes: 40,
            response_bytes: 56,
        }
    }

    #[test]
    fn requests_and_responses_are_counted_with_corednss_labels() {
        let metrics = Metrics::new(
            "dns://0.0.0.0:53",
            &["b.test".into(), "a.test".into()],
            true,
        );
        // Every common series is there before the first query.
        let text = metrics.encode();
        for line in [
            r#"xcc_dns_requests_total{server="dns://0.0.0.0:53",zone="a.test.",proto="tcp",family="2",type="AAAA"} 0"#,
            r#"xcc_dns_requests_total{server="dns://0.0.0.0:53",zone="dropped",proto="udp",family="1",type="A"} 0"#,
            r#"xcc_dns_responses_total{server="dns://0.0.0.0:53",zone="b.test.",rcode="SERVFAIL"} 0"#,
            r#"xcc_dns_request_duration_seconds_count{server="dns://0.0.0.0:53",zone="b.test.",type="A"} 0"#,
            r#"xcc_records_last_reload_success 0"#,
            r#"xcc_records_reloads_total{result="ok"} 0"#,
            r#"xcc_dns_request_size_bytes_count{server="dns://0.0.0.0:53",zone="a.test.",proto="tcp"} 0"#,
            r#"xcc_dns_response_size_bytes_bucket{le="+Inf",server="dns://0.0.0.0:53",zone="dropped",proto="udp"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        metrics.observe(&answered(RecordType::A, ResponseCode::NoError, Some(0)));
        metrics.observe(&answered(RecordType::A, ResponseCode::NoError, Some(0)));
        metrics.observe(&Answered {
            tcp: true,
            ipv6: true,
            ..answered(RecordType::MX, ResponseCode::NXDomain, Some(1))
        });
        metrics.observe(&answered(RecordType::A, ResponseCode::Refused, None));
        metrics.observe(&Answered {
            qtype: Some(RecordType::Unknown(999)),
            ..answered(RecordType::A, ResponseCode::NoError, Some(0))
        });
        metrics.observe(&Answered {
            tcp: true,
            request_bytes: 500,
            response_bytes: 9000,
            ..answered(RecordType::TXT, ResponseCode::NoError, Some(1))
        });
        metrics.malformed(Cause::QuestionCount);
        metrics.malformed(Cause::QuestionCount);
        metrics.malformed(Cause::Opt);
        metrics.dropped();
        metrics.records_loaded(Some("invalid_records"));
        metrics.table_published(3, 77);
        let text = metrics.encode();
        for line in [
            r#"xcc_dns_requests_total{server="dns://0.0.0.0:53",zone="b.test.",proto="udp",family="1",type="A"} 2"#,
            r#"xcc_dns_requests_total{server="dns://0.0.0.0:53",zone="a.test.",proto="tcp",family="2",type="MX"} 1"#,
            r#"xcc_dns_requests_total{server="dns://0.0.0.0:53",zone="b.test.",proto="udp",family="1",type="other"} 1"#,
            r#"xcc_dns_responses_total{server="dns://0.0.0.0:53",zone="b.test.",rcode="NOERROR"} 3"#,
            r#"xcc_dns_responses_total{server="dns://0.0.0.0:53",zone="a.test.",rcode="NXDOMAIN"} 1"#,
            r#"xcc_dns_responses_total{server="dns://0.0.0.0:53",zone="dropped",rcode="REFUSED"} 1"#,
            r#"xcc_dns_request_duration_seconds_count{server="dns://0.0.0.0:53",zone="b.test.",type="A"} 2"#,
            // Three requests of 40 bytes in b.test. over UDP, answered with 56 bytes each.
            r#"xcc_dns_request_size_bytes_sum{server="dns://0.0.0.0:53",zone="b.test.",proto="udp"} 120"#,
            r#"xcc_dns_request_size_bytes_bucket{le="0.0",server="dns://0.0.0.0:53",zone="b.test.",proto="udp"} 0"#,
            r#"xcc_dns_request_size_bytes_bucket{le="100.0",server="dns://0.0.0.0:53",zone="b.test.",proto="udp"} 3"#,
            r#"xcc_dns_response_size_bytes_count{server="dns://0.0.0.0:53",zone="b.test.",proto="udp"} 3"#,
            r#"xcc_dns_response_size_bytes_sum{server="dns://0.0.0.0:53",zone="b.test.",proto="udp"} 168"#,
            // 500 bytes: above 400, within 511; 9000: above 8291, within 16000.
            r#"xcc_dns_request_size_bytes_bucket{le="400.0",server="dns://0.0.0.0:53",zone="a.test.",proto="tcp"} 1"#,
            r#"xcc_dns_request_size_bytes_bucket{le="511.0",server="dns://0.0.0.0:53",zone="a.test.",proto="tcp"} 2"#,
            r#"xcc_dns_response_size_bytes_bucket{le="8291.0",server="dns://0.0.0.0:53",zone="a.test.",proto="tcp"} 1"#,
            r#"xcc_dns_response_size_bytes_bucket{le="16000.0",server="dns://0.0.0.0:53",zone="a.test.",proto="tcp"} 2"#,
            r#"xcc_dns_response_size_bytes_bucket{le="+Inf",server="dns://0.0.0.0:53",zone="a.test.",proto="tcp"} 2"#,
            r#"xcc_dns_response_size_bytes_count{server="dns://0.0.0.0:53",zone="a.test.",proto="tcp"} 2"#,
            r#"xcc_records_reloads_total{result="invalid_records"} 1"#,
            "xcc_records_last_reload_success 0",
            r#"xcc_dns_malformed_total{cause="question_count"} 2"#,
            r#"xcc_dns_malformed_total{cause="bad_opt"} 1"#,
            // Causes not seen yet are listed at zero; NOTIMP answers are not malformed.
            r#"xcc_dns_malformed_total{cause="short"} 0"#,
            "xcc_dns_udp_queue_full_drops_total 1",
            "xcc_dns_table_names 3",
            "xcc_dns_table_serial 77",
            "xcc_build_info{",
            "process_resident_memory_bytes ",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        assert!(!text.contains("not_implemented"), "{text}");
    }

    #[test]
    fn a_cluster_fed_agent_has_no_records_file_series() {
        let metrics = Metrics::new("dns://0.0.0.0:53", &["xcc.test".into()], false);
        metrics.records_loaded(None);
        let text = metrics.encode();
        assert!(!text.contains("xcc_records_"), "{text}");
    }

    /// `docs/metrics.md`'s agent section is this registry's (`XCC_REGENERATE=1` rewrites it).
    #[test]
    fn metrics_reference() {
        let metrics = Metrics::default();
        metrics.sync.touch_every_family();
        metrics.health.touch_every_family();
        let section = xcc_kube::metrics::reference_section(&metrics.encode()).unwrap();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md");
        xcc_kube::metrics::check_generated_section(path, "xcc-agent", &section).unwrap();
    }
}

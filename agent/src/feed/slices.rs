//! The Kubernetes feed: EndpointSlices in the agent's namespace → the record table.
//!
//! The management-cluster controller writes one slice per gateway cluster, annotated with the
//! host name it answers for (XCC's contract). Each slice is one table source (`<ns>/<name>`), so
//! slices with the same host name merge, and deleting one withdraws only its addresses.
//! A relist (`InitDone`) replaces the whole set: slices that vanished while the watch was down
//! are dropped. A malformed slice is reported (log + Event) and its last good records are kept.

use std::{
    collections::{BTreeMap, HashSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use dashmap::DashMap;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        events::{Event as KubeEvent, EventType, Recorder},
        watcher,
    },
};
use xcc_dns::{HostRecords, RecordTable, Srv, proto::rr::Name};
use xcc_kube::announcement::{GLOBAL_HOSTNAME_ANNOTATION, GLOBAL_TTL_ANNOTATION};
use xcc_sync::sources::Schedule;

use super::{
    health::{HEALTH_CHECK_ANNOTATION, Health, HealthCheck, HealthCheckError},
    metrics::Metrics,
};

/// Annotation naming the host name a slice answers for (`*.gateway.<cluster>.<ns>.clusters.<zone>`).
pub const HOSTNAME_ANNOTATION: &str = "connectivity.tanzu.vmware.com/dns-hostname";
/// Longest TTL a slice may ask for (one day).
const MAX_TTL: u32 = 86_400;
/// Annotation naming the GatewayDNS (`<ns>/<name>`) that made a slice.
pub const REF_ANNOTATION: &str = "connectivity.tanzu.vmware.com/gateway-dns-ref";

/// Where the records of one table source (one slice) came from, as the slice says: what the
/// admin API's `/explain` reports next to an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceOrigin {
    pub namespace: String,
    pub name: String,
    /// The host name annotation.
    pub hostname: String,
    /// The GatewayDNS ref annotation (`<ns>/<name>`), when present.
    pub gateway_dns: Option<String>,
    pub labels: BTreeMap<String, String>,
}

impl SliceOrigin {
    fn of(slice: &EndpointSlice) -> Option<SliceOrigin> {
        let annotations = slice.annotations();
        Some(SliceOrigin {
            namespace: slice.namespace().unwrap_or_default(),
            name: slice.name_any(),
            hostname: annotations.get(HOSTNAME_ANNOTATION)?.clone(),
            gateway_dns: annotations.get(REF_ANNOTATION).cloned(),
            labels: slice.labels().clone(),
        })
    }
}

/// The origin of every source the slice index feeds into the table, keyed like the table's
/// sources (`<ns>/<name>`). Written only by the index, next to the table; read by the admin API's
/// concurrent requests (a concurrent map: the index's sweep does not stop them all).
#[derive(Clone, Default)]
pub struct SliceOrigins(Arc<DashMap<String, SliceOrigin>>);

impl SliceOrigins {
    /// The origin of table source `source`, if it is a slice.
    pub fn get(&self, source: &str) -> Option<SliceOrigin> {
        self.0.get(source).map(|origin| origin.clone())
    }

    fn set(&self, source: String, origin: Option<SliceOrigin>) {
        match origin {
            Some(origin) => self.0.insert(source, origin),
            None => self.0.remove(&source).map(|(_, origin)| origin),
        };
    }

    fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.0.retain(|s, _| keep(s));
    }
}

/// Why a slice cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SliceError {
    #[error("annotation {HOSTNAME_ANNOTATION} = {hostname:?} is not a valid host name: {reason}")]
    BadHostname { hostname: String, reason: String },
    #[error("endpoint address {address:?} is not a valid {address_type} address")]
    BadAddress {
        address: String,
        address_type: String,
    },
    #[error("addressType {0:?} is not supported (IPv4, IPv6 or FQDN)")]
    UnknownAddressType(String),
    #[error("an FQDN slice must name one host, found {0:?}")]
    SeveralHostnames(Vec<String>),
    #[error("{0}")]
    Table(String),
    /// The records are served, without probing.
    #[error("{0}; its records are served without probing")]
    HealthCheck(HealthCheckError),
}

impl SliceError {
    /// Event reason.
    fn reason(&self) -> &'static str {
        match self {
            SliceError::BadHostname { .. } => "InvalidHostname",
            SliceError::BadAddress { .. } => "InvalidAddress",
            SliceError::UnknownAddressType(_) => "UnsupportedAddressType",
            SliceError::SeveralHostnames(_) => "InvalidAddress",
            SliceError::Table(_) => "OutsideZone",
            SliceError::HealthCheck(_) => "InvalidHealthCheck",
        }
    }
}

/// The table entries a slice stands for; `None` when the slice is not ours (no annotation).
///
/// `*.X` answers for the names below X *and* for X itself (the gateway's own name). Endpoints
/// whose `ready` condition is explicitly false are left out. An address endpoint with a
/// `hostname` also answers `<hostname>.X` alone (node names); each named port of an address
/// slice is an SRV record `_<port>._<protocol>.X` → X ([`srv_records`]).
pub fn records_of(slice: &EndpointSlice) -> Result<Option<Vec<(Name, HostRecords)>>, SliceError> {
    let Some(hostname) = slice.annotations().get(HOSTNAME_ANNOTATION) else {
        return Ok(None);
    };
    let name = host_name(hostname)?;
    let mut records = ready_records(slice)?;
    if records.addresses.is_empty() && records.cname.is_none() {
        return Ok(Some(Vec::new()));
    }
    // A TTL the controller chose for these answers (global names); one that does not parse or
    // is out of range is ignored: the zone's TTL is always a safe answer.
    records.ttl = ttl(slice, xcc_kube::announcement::TTL_ANNOTATION);
    let mut entries = vec![(name.clone(), records.clone())];
    let base = if name.is_wildcard() {
        entries.push((name.base_name(), records.clone()));
        name.base_name()
    } else {
        name.clone()
    };
    entries.extend(endpoint_names(slice, &base, records.ttl)?);
    entries.extend(srv_records(slice, &base, records.ttl));
    // The global name this gateway also answers on this cluster (the controller sets it only
    // where the global answer includes it), with the TTL of its answers.
    if let Some(global) = slice.annotations().get(GLOBAL_HOSTNAME_ANNOTATION) {
        let global_name = host_name(global)?;
        records.ttl = ttl(slice, GLOBAL_TTL_ANNOTATION);
        let base = global_name.is_wildcard().then(|| global_name.base_name());
        entries.push((global_name, records.clone()));
        if let Some(base) = base {
            entries.push((base, records));
        }
    }
    Ok(Some(entries))
}

/// The names of the slice's ready address endpoints that have a `hostname`: `<hostname>.<base>`,
/// each with that endpoint's addresses.
fn endpoint_names(
    slice: &EndpointSlice,
    base: &Name,
    ttl: Option<u32>,
) -> Result<Vec<(Name, HostRecords)>, SliceError> {
    if slice.address_type == "FQDN" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for endpoint in &slice.endpoints {
        let Some(hostname) = endpoint.hostname.as_deref() else {
            continue;
        };
        if endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
            continue;
        }
        let Some(name) = super::mcs::name_below(base, &[hostname]) else {
            continue;
        };
        let one = EndpointSlice {
            endpoints: vec![endpoint.clone()],
            ..slice.clone()
        };
        let mut records = ready_records(&one)?;
        records.ttl = ttl;
        if !records.addresses.is_empty() {
            out.push((name, records));
        }
    }
    Ok(out)
}

/// Weight of every SRV record of a slice: there is one record per named port, whose target
/// name answers every address of the gateway, so the weight chooses nothing.
pub const SRV_WEIGHT: u16 = 1;

/// The SRV records of the named ports of an address slice: `_<name>._<protocol>.<base>` →
/// priority 0, weight [`SRV_WEIGHT`], the port, target `<base>` (whose A/AAAA records the slice
/// gives). An FQDN slice (a CNAME at `<base>`, which an SRV target must not be) gives none.
fn srv_records(slice: &EndpointSlice, base: &Name, ttl: Option<u32>) -> Vec<(Name, HostRecords)> {
    if slice.address_type == "FQDN" {
        return Vec::new();
    }
    slice
        .ports
        .iter()
        .flatten()
        .filter_map(|port| {
            let name = port.name.as_deref().filter(|n| !n.is_empty())?;
            let number = u16::try_from(port.port?).ok().filter(|p| *p != 0)?;
            let protocol = port
                .protocol
                .as_deref()
                .unwrap_or("TCP")
                .to_ascii_lowercase();
            let owner =
                super::mcs::name_below(base, &[&format!("_{name}"), &format!("_{protocol}")])?;
            let records = HostRecords {
                srv: vec![Srv {
                    priority: 0,
                    weight: SRV_WEIGHT,
                    port: number,
                    target: base.clone(),
                }],
                ttl,
                ..Default::default()
            };
            Some((owner, records))
        })
        .collect()
}

/// A host name annotation as a fully qualified name with no empty label.
fn host_name(hostname: &str) -> Result<Name, SliceError> {
    let bad_host = |reason: String| SliceError::BadHostname {
        hostname: hostname.to_string(),
        reason,
    };
    let mut name = Name::from_ascii(hostname.trim()).map_err(|e| bad_host(e.to_string()))?;
    name.set_fqdn(true);
    if name.num_labels() == 0 || name.iter().any(|l| l.is_empty()) {
        return Err(bad_host("empty label".into()));
    }
    Ok(name)
}

/// The TTL in annotation `key`, if it parses and is at most [`MAX_TTL`].
fn ttl(slice: &EndpointSlice, key: &str) -> Option<u32> {
    slice
        .annotations()
        .get(key)
        .and_then(|t| t.trim().parse::<u32>().ok())
        .filter(|t| *t <= MAX_TTL)
}

/// The addresses (or the one CNAME target) of the slice's endpoints that are not marked not
/// ready, as its address type says, without a TTL.
fn ready_records(slice: &EndpointSlice) -> Result<HostRecords, SliceError> {
    let addresses = slice
        .endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .flat_map(|e| e.addresses.iter());
    let bad = |address: &String| SliceError::BadAddress {
        address: address.clone(),
        address_type: slice.address_type.clone(),
    };
    let mut records = HostRecords::default();
    match slice.address_type.as_str() {
        "IPv4" => {
            for a in addresses {
                let ip: Ipv4Addr = a.trim().parse().map_err(|_| bad(a))?;
                records.addresses.push(IpAddr::V4(ip));
            }
        }
        "IPv6" => {
            for a in addresses {
                let ip: Ipv6Addr = a.trim().parse().map_err(|_| bad(a))?;
                records.addresses.push(IpAddr::V6(ip));
            }
        }
        "FQDN" => {
            let mut hosts: Vec<String> = addresses.map(|a| a.trim().to_ascii_lowercase()).collect();
            hosts.sort();
            hosts.dedup();
            if hosts.len() > 1 {
                return Err(SliceError::SeveralHostnames(hosts));
            }
            if let Some(host) = hosts.first() {
                let mut target = Name::from_ascii(host).map_err(|_| bad(host))?;
                target.set_fqdn(true);
                records.cname = Some(target);
            }
        }
        other => return Err(SliceError::UnknownAddressType(other.to_string())),
    }
    Ok(records)
}

/// The slice's health check: `None` without the annotation (or when it does not pass: the
/// error, and the records served unprobed).
fn check_of(slice: &EndpointSlice) -> (Option<HealthCheck>, Option<SliceError>) {
    match slice
        .annotations()
        .get(HEALTH_CHECK_ANNOTATION)
        .map(|v| HealthCheck::parse(v))
    {
        None => (None, None),
        Some(Ok(check)) => (Some(check), None),
        Some(Err(error)) => (None, Some(SliceError::HealthCheck(error))),
    }
}

fn source_of(slice: &EndpointSlice) -> String {
    format!(
        "{}/{}",
        slice.namespace().unwrap_or_default(),
        slice.name_any()
    )
}

/// Applies watch events to the table. Kept free of I/O so it is tested without a cluster; the
/// problems it finds are returned for the caller to log and publish as Events.
pub struct SliceIndex {
    table: Arc<RecordTable>,
    origins: SliceOrigins,
    /// Where the records of slices with a health check go (filtered) instead of the table.
    health: Option<Arc<Health>>,
}

impl SliceIndex {
    pub fn new(table: Arc<RecordTable>) -> Self {
        SliceIndex {
            table,
            origins: SliceOrigins::default(),
            health: None,
        }
    }

    /// An index whose slices with a health check are served through `health`.
    pub fn with_health(table: Arc<RecordTable>, health: Arc<Health>) -> Self {
        SliceIndex {
            health: Some(health),
            ..SliceIndex::new(table)
        }
    }

    /// Writes `source`'s entries into `batch`, and hands them to the health filter (which
    /// rewrites them) when the slice has a check.
    fn write(
        &self,
        batch: &mut xcc_dns::Batch<'_>,
        source: &str,
        check: Option<HealthCheck>,
        entries: Vec<(Name, HostRecords)>,
    ) -> Result<(), xcc_dns::Error> {
        let Some(health) = &self.health else {
            return batch.set_source(source, entries);
        };
        batch.set_source(source, entries.clone())?;
        match check {
            Some(check) => health.track(source, check, entries),
            None => {
                health.forget(source);
            }
        }
        Ok(())
    }

    /// The table this index writes.
    pub fn table(&self) -> &Arc<RecordTable> {
        &self.table
    }

    /// The origins of the sources this index writes (shared, kept up to date by the index).
    pub fn origins(&self) -> SliceOrigins {
        self.origins.clone()
    }

    /// A slice was added or changed.
    pub fn apply(&self, slice: &EndpointSlice) -> Result<(), SliceError> {
        let source = source_of(slice);
        let (check, check_error) = check_of(slice);
        match records_of(slice)? {
            Some(entries) => {
                self.table
                    .update(|batch| {
                        self.write(batch, &source, check, entries)?;
                        if let Some(health) = &self.health {
                            health.write(batch);
                        }
                        Ok(())
                    })
                    .map_err(|e| SliceError::Table(e.to_string()))?;
                self.origins.set(source, SliceOrigin::of(slice));
                check_error.map_or(Ok(()), Err)
            }
            // The annotation was removed: the slice no longer speaks for any name.
            None => {
                self.forget(&source);
                Ok(())
            }
        }
    }

    /// A slice was deleted.
    pub fn delete(&self, slice: &EndpointSlice) {
        self.forget(&source_of(slice));
    }

    fn forget(&self, source: &str) {
        let tracked = self.health.as_ref().is_some_and(|h| h.forget(source));
        self.table.remove_source(source);
        if let (true, Some(health)) = (tracked, &self.health) {
            health.refresh();
        }
        self.origins.set(source.to_string(), None);
    }

    /// A full relist: exactly these slices exist. Returns the slices that could not be served.
    pub fn reset(&self, slices: &[EndpointSlice]) -> Vec<(usize, SliceError)> {
        let mut problems = Vec::new();
        let present: HashSet<String> = slices.iter().map(source_of).collect();
        self.origins.retain(|s| present.contains(s));
        if let Some(health) = &self.health {
            health.retain(|s| present.contains(s));
        }
        let _ = self.table.update(|batch| {
            // The clusterset names are another feed's.
            batch.retain_sources(|s| present.contains(s) || super::mcs::is_clusterset_source(s));
            for (i, slice) in slices.iter().enumerate() {
                let source = source_of(slice);
                let (check, check_error) = check_of(slice);
                match records_of(slice) {
                    Ok(Some(entries)) => match self.write(batch, &source, check, entries) {
                        Ok(()) => {
                            self.origins.set(source, SliceOrigin::of(slice));
                            problems.extend(check_error.map(|e| (i, e)));
                        }
                        Err(e) => problems.push((i, SliceError::Table(e.to_string()))),
                    },
                    Ok(None) => {
                        batch.remove_source(&source);
                        if let Some(health) = &self.health {
                            health.forget(&source);
                        }
                        self.origins.set(source, None);
                    }
                    Err(e) => problems.push((i, e)),
                }
            }
            if let Some(health) = &self.health {
                health.write(batch);
            }
            Ok(())
        });
        problems
    }
}

/// Watches EndpointSlices in `namespace` until the stream ends (it retries forever).
///
/// Retries as the sync core's watches of the local cluster do ([`xcc_sync::sources::watch`] on
/// its local schedule): a new list after every failure, on [`xcc_kube::Backoff::local`] (jittered, never more than 2 s, back to the start once the
/// server answers). kube's default schedule grows to 30 s and only starts over after two
/// quiet minutes, so an API server that restarted was answering for up to half a minute before
/// the table saw a change made right after.
pub async fn run(
    client: Client,
    namespace: String,
    index: SliceIndex,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
) {
    let api: Api<EndpointSlice> = Api::namespaced(client, &namespace);
    // Its outages are said by the watch's report (one WARN, one "recovered"), and counted in
    // xcc_sync_watch_state{cluster="local",kind="EndpointSlice",watch_namespace=NAMESPACE}.
    let watch_report = xcc_sync::sources::Report {
        cluster: xcc_sync::sources::LOCAL.into(),
        kind: "EndpointSlice".into(),
        metrics: Some(metrics.sync.clone()),
    };
    let (mut events, _) = xcc_sync::sources::watch_reported(
        api,
        watcher::Config::default(),
        Schedule::Local,
        watch_report,
    );
    let mut pending: Vec<EndpointSlice> = Vec::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => pending.clear(),
            Ok(watcher::Event::InitApply(slice)) => pending.push(slice),
            Ok(watcher::Event::InitDone) => {
                let slices = std::mem::take(&mut pending);
                for (i, error) in index.reset(&slices) {
                    report(&recorder, &slices[i], &error).await;
                }
                publish_metrics(&index, &metrics);
                if !ready.swap(true, Ordering::AcqRel) {
                    tracing::info!(%namespace, slices = slices.len(), "first full list of EndpointSlices loaded; ready");
                }
            }
            Ok(watcher::Event::Apply(slice)) => {
                if let Err(error) = index.apply(&slice) {
                    report(&recorder, &slice, &error).await;
                }
                publish_metrics(&index, &metrics);
            }
            Ok(watcher::Event::Delete(slice)) => {
                index.delete(&slice);
                publish_metrics(&index, &metrics);
            }
            // Said by the report; the table keeps its records meanwhile.
            Err(_) => {}
        }
    }
}

fn publish_metrics(index: &SliceIndex, metrics: &Metrics) {
    let snapshot = index.table.snapshot();
    metrics.table_published(snapshot.len(), snapshot.serial());
}

async fn report(recorder: &Recorder, slice: &EndpointSlice, error: &SliceError) {
    let slice_name = source_of(slice);
    let unprobed = matches!(error, SliceError::HealthCheck(_));
    if unprobed {
        tracing::warn!(slice = %slice_name, error = %xcc_kube::bounded(&error), "EndpointSlice served without probing its addresses");
    } else {
        tracing::warn!(slice = %slice_name, error = %xcc_kube::bounded(&error), "EndpointSlice not served; keeping its last good records");
    }
    let note = if unprobed {
        format!("xcc-agent serves this EndpointSlice without probing: {error}")
    } else {
        format!("xcc-agent cannot serve this EndpointSlice: {error}")
    };
    let event = KubeEvent {
        type_: EventType::Warning,
        reason: error.reason().to_string(),
        note: Some(note),
        action: "Serve".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &slice.object_ref(&())).await {
        tracing::debug!(slice = %slice_name, error = %e, "could not publish an Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
    use kube::api::ObjectMeta;
    use xcc_dns::{Zone, ZoneSettings, proto::rr::RecordType};

    const HOST: &str = "*.gateway.cluster-a.dev-team.clusters.xcc.test";

    fn slice(
        name: &str,
        host: Option<&str>,
        address_type: &str,
        addresses: &[&str],
    ) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("xcc-dns".into()),
                annotations: host
                    .map(|h| [(HOSTNAME_ANNOTATION.to_string(), h.to_string())].into()),
                ..Default::default()
            },
            address_type: address_type.into(),
            endpoints: vec![Endpoint {
                addresses: addresses.iter().map(|a| a.to_string()).collect(),
                ..Default::default()
            }],
            ports: None,
        }
    }

    fn table() -> Arc<RecordTable> {
        Arc::new(
            RecordTable::new(
                vec![Zone::new("xcc.test").unwrap()],
                ZoneSettings::default(),
            )
            .unwrap(),
        )
    }

    fn answers(table: &RecordTable, qname: &str, qtype: RecordType) -> Vec<String> {
        let snapshot = table.snapshot();
        let name = Name::from_ascii(qname).unwrap();
        let resolution = snapshot.resolve(&name, qtype);
        let mut out: Vec<String> = resolution
            .answers
            .iter()
            .map(|r| r.data.to_string())
            .collect();
        out.sort();
        out
    }

    fn port(
        name: Option<&str>,
        protocol: &str,
        number: i32,
    ) -> k8s_openapi::api::discovery::v1::EndpointPort {
        k8s_openapi::api::discovery::v1::EndpointPort {
            name: name.map(Into::into),
            protocol: Some(protocol.into()),
            port: Some(number),
            app_protocol: None,
        }
    }

    #[test]
    fn named_slice_ports_are_srv_records_to_the_gateway_name() {
        let t = table();
        let index = SliceIndex::new(t.clone());
        let mut v4 = slice("a-gateway", Some(HOST), "IPv4", &["10.1.0.1", "10.1.0.2"]);
        v4.ports = Some(vec![
            port(Some("http"), "TCP", 30080),
            port(Some("dns"), "UDP", 30053),
            port(None, "TCP", 30081),
        ]);
        let mut v6 = slice("a-gateway-ipv6", Some(HOST), "IPv6", &["fd00::2"]);
        v6.ports = v4.ports.clone();
        index.apply(&v4).unwrap();
        index.apply(&v6).unwrap();
        let base = "gateway.cluster-a.dev-team.clusters.xcc.test.";
        // Both slices say the same: one record.
        assert_eq!(
            answers(&t, &format!("_http._tcp.{base}"), RecordType::SRV),
            [format!("0 {SRV_WEIGHT} 30080 {base}")]
        );
        assert_eq!(
            answers(&t, &format!("_dns._udp.{base}"), RecordType::SRV),
            [format!("0 {SRV_WEIGHT} 30053 {base}")]
        );
        // The target answers the nodes, both families.
        assert_eq!(answers(&t, base, RecordType::A), ["10.1.0.1", "10.1.0.2"]);
        assert_eq!(answers(&t, base, RecordType::AAAA), ["fd00::2"]);
        // Deleting the slices withdraws the records.
        index.delete(&v4);
        index.delete(&v6);
        assert!(answers(&t, &format!("_http._tcp.{base}"), RecordType::SRV).is_empty());
        // An FQDN slice (a CNAME at the name) gives none: an SRV target is no alias.
        let mut fqdn = slice("a-gateway-fqdn", Some(HOST), "FQDN", &["lb.example.com"]);
        fqdn.ports = Some(vec![port(Some("http"), "TCP", 80)]);
        index.apply(&fqdn).unwrap();
        let srv = answers(&t, &format!("_http._tcp.{base}"), RecordType::SRV);
        assert!(!srv.iter().any(|a| a.starts_with("0 ")), "{srv:?}");
    }

    #[test]
    fn an_endpoint_hostname_answers_below_the_name_alone() {
        let t = table();
        let index = SliceIndex::new(t.clone());
        let nodes = "nodes.cluster-a.dev-team.clusters.xcc.test";
        let mut v4 = slice("a-nodes", Some(nodes), "IPv4", &[]);
        v4.endpoints = vec![
            Endpoint {
                addresses: vec!["10.1.0.1".into()],
                hostname: Some("node-1".into()),
                ..Default::default()
            },
            Endpoint {
                addresses: vec!["10.1.0.2".into()],
                hostname: Some("node-2".into()),
                ..Default::default()
            },
            Endpoint {
                addresses: vec!["10.1.0.5".into()],
                ..Default::default()
            },
        ];
        index.apply(&v4).unwrap();
        assert_eq!(
            answers(&t, &format!("{nodes}."), RecordType::A),
            ["10.1.0.1", "10.1.0.2", "10.1.0.5"]
        );
        assert_eq!(
            answers(&t, &format!("node-2.{nodes}."), RecordType::A),
            ["10.1.0.2"]
        );
        assert!(answers(&t, &format!("node-3.{nodes}."), RecordType::A).is_empty());
    }

    #[test]
    fn wildcard_hostname_serves_the_gateway_and_everything_below() {
        let t = table();
        let index = SliceIndex::new(t.clone());
        index
            .apply(&slice(
                "dev-team-cluster-a-gateway",
                Some(HOST),
                "IPv4",
                &["10.0.0.1", "10.0.0.2"],
            ))
            .unwrap();
        let want = ["10.0.0.1", "10.0.0.2"];
        assert_eq!(
            answers(
                &t,
                "kuard.gateway.cluster-a.dev-team.clusters.xcc.test.",
                RecordType::A
            ),
            want
        );
        assert_eq!(
            answers(
                &t,
                "gateway.cluster-a.dev-team.clusters.xcc.test.",
                RecordType::A
            ),
            want
        );
    }

    #[test]
    fn address_types_map_to_a_aaaa_and_cname() {
        let t = table();
        let index = SliceIndex::new(t.clone());
        index
            .apply(&slice("v6", Some(HOST), "IPv6", &["fd00::1"]))
            .unwrap();
        assert_eq!(
            answers(
                &t,
                "x.gateway.cluster-a.dev-team.clusters.xcc.test.",
                RecordType::AAAA
            ),
            ["fd00::1"]
        );
        let host_b = "*.gateway.cluster-b.dev-team.clusters.xcc.test";
        index
            .apply(&slice("fqdn", Some(host_b), "FQDN", &["lb.example.com"]))
            .unwrap();
        assert_eq!(
            answers(
                &t,
                "x.gateway.cluster-b.dev-team.clusters.xcc.test.",
                RecordType::A
            ),
            ["lb.example.com."]
        );
    }

    #[test]
    fn slices_with_one_hostname_merge_and_deleting_one_withdraws_only_it() {
        let t = table();
        let index = SliceIndex::new(t.clone());
        let one = slice("one", Some(HOST), "IPv4", &["10.0.0.1"]);
        let two = slice("two", Some(HOST), "IPv4", &["10.0.0.2"]);
        index.apply(&one).unwrap();
        index.apply(&two).unwrap();
        let q = "k.gateway.cluster-a.dev-team.clusters.xcc.test.";
        assert_eq!(answers(&t, q, RecordType::A), ["10.0.0.1", "10.0.0.2"]);
        index.delete(&one);
        assert_eq!(answers(&t, q, RecordType::A), ["10.0.0.2"]);
    }

    #[test]
    fn slices_without_the_annotation_are_ignored() {
        let t = table();
        let index = SliceIndex::new(t.clone());
        index
            .apply(&slice("kube-made", None, "IPv4", &["10.0.0.9"]))
            .unwrap();
        assert!(t.snapshot().is_empty());
        // Removing the annotation from a served slice withdraws it.
        index
            .apply(&slice("s", Some(HOST), "IPv4", &["10.0.0.1"]))
            .unwrap();
        index
            .apply(&slice("s", None, "IPv4", &["10.0.0.1"]))
            .unwrap();
        assert!(t.snapshot().is_empty());
    }

    #[test]
    fn malformed_slices_are_errors_and_keep_the_last_good_records() {
        let t = table();
        let index = SliceIndex::new(t.clone());
        index
            .apply(&slice("s", Some(HOST), "IPv4", &["10.0.0.1"]))
            .unwrap();
        let q = "k.gateway.cluster-a.dev-team.clusters.xcc.test.";
        for (bad, want) in [
            (
                slice("s", Some(HOST), "IPv4", &["10.0.0.999"]),
                "10.0.0.999",
            ),
            (slice("s", Some(HOST), "IPv4", &["fd00::1"]), "fd00::1"),
            (
                slice("s", Some("bad..name"), "IPv4", &["10.0.0.1"]),
                "bad..name",
            ),
            (
                slice("s", Some("x.example.com"), "IPv4", &["10.0.0.1"]),
                "outside",
            ),
            (slice("s", Some(HOST), "Appletalk", &["1"]), "Appletalk"),
            (
                slice("s", Some(HOST), "FQDN", &["a.example.", "b.example."]),
                "one host",
            ),
        ] {
            let err = index.apply(&bad).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
            assert_eq!(answers(&t, q, RecordType::A), ["10.0.0.1"], "{err}");
        }
    }

    #[test]
    fn endpoints_marked_not_ready_are_left_out() {
        let mut s = slice("s", Some(HOST), "IPv4", &["10.0.0.1"]);
        s.endpoints.push(Endpoint {
            addresses: vec!["10.0.0.2".into()],
            conditions: Some(EndpointConditions {
                ready: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        });
        let entries = records_of(&s).unwrap().unwrap();
        assert_eq!(entries[0].1.addresses, [IpAddr::from([10, 0, 0, 1])]);
    }

    #[test]
    fn a_relist_drops_slices_that_disappeared() {
        let t = table();
        let index = SliceIndex::new(t.clone());
        let host_b = "*.gateway.cluster-b.dev-team.clusters.xcc.test";
        index
            .apply(&slice("a", Some(HOST), "IPv4", &["10.0.0.1"]))
            .unwrap();
        index
            .apply(&slice("b", Some(host_b), "IPv4", &["10.0.0.2"]))
            .unwrap();
        let problems = index.reset(&[
            slice("b", Some(host_b), "IPv4", &["10.0.0.3"]),
            slice("c", Some(HOST), "IPv4", &["nope"]),
        ]);
        assert_eq!(problems.len(), 1);
        assert!(
            answers(
                &t,
                "k.gateway.cluster-a.dev-team.clusters.xcc.test.",
                RecordType::A
            )
            .is_empty()
        );
        assert_eq!(
            answers(
                &t,
                "k.gateway.cluster-b.dev-team.clusters.xcc.test.",
                RecordType::A
            ),
            ["10.0.0.3"]
        );
    }

    #[test]
    fn a_slice_may_carry_the_ttl_of_its_answers() {
        let mut global = slice(
            "dev-team-cluster-a-global",
            Some("*.gateway.dev-team.global.xcc.test"),
            "IPv4",
            &["10.0.0.1"],
        );
        let ttl_of = |s: &EndpointSlice| records_of(s).unwrap().unwrap()[0].1.ttl;
        assert_eq!(ttl_of(&global), None, "no annotation: the zone's TTL");
        let annotations = global.metadata.annotations.as_mut().unwrap();
        annotations.insert(xcc_kube::announcement::TTL_ANNOTATION.into(), "5".into());
        assert_eq!(ttl_of(&global), Some(5));
        // Nonsense or more than a day is ignored, never an error.
        for bad in ["-1", "soon", "86401"] {
            global
                .metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert(xcc_kube::announcement::TTL_ANNOTATION.into(), bad.into());
            assert_eq!(ttl_of(&global), None, "{bad}");
        }
    }

    #[test]
    fn a_per_cluster_slice_may_answer_the_global_name_too_with_its_own_ttl() {
        const GLOBAL: &str = "*.gateway.dev-team.global.xcc.test";
        let t = table();
        let index = SliceIndex::new(t.clone());
        let with_global = |name: &str, host: &str, ip: &str| {
            let mut s = slice(name, Some(host), "IPv4", &[ip]);
            let annotations = s.metadata.annotations.as_mut().unwrap();
            annotations.insert(GLOBAL_HOSTNAME_ANNOTATION.into(), GLOBAL.into());
            annotations.insert(GLOBAL_TTL_ANNOTATION.into(), "5".into());
            s
        };
        let host_b = "*.gateway.cluster-b.dev-team.clusters.xcc.test";
        index.apply(&with_global("a", HOST, "10.0.0.1")).unwrap();
        index.apply(&with_global("b", host_b, "10.0.0.2")).unwrap();
        let ttls = |qname: &str| -> Vec<u32> {
            let snapshot = t.snapshot();
            let name = Name::from_ascii(qname).unwrap();
            snapshot
                .resolve(&name, RecordType::A)
                .answers
                .iter()
                .map(|r| r.ttl)
                .collect()
        };
        let own = "kuard.gateway.cluster-a.dev-team.clusters.xcc.test.";
        let global = "kuard.gateway.dev-team.global.xcc.test.";
        assert_eq!(answers(&t, own, RecordType::A), ["10.0.0.1"]);
        assert_eq!(answers(&t, global, RecordType::A), ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(
            answers(&t, "gateway.dev-team.global.xcc.test.", RecordType::A),
            ["10.0.0.1", "10.0.0.2"],
            "the wildcard's own name too"
        );
        assert_eq!(ttls(global), [5, 5]);
        assert!(
            ttls(own).iter().all(|ttl| *ttl != 5),
            "the cluster's own name keeps the zone's TTL: {:?}",
            ttls(own)
        );
        // The controller takes cluster-a out of the global answer: its own name stays.
        index
            .apply(&slice("a", Some(HOST), "IPv4", &["10.0.0.1"]))
            .unwrap();
        assert_eq!(answers(&t, global, RecordType::A), ["10.0.0.2"]);
        assert_eq!(answers(&t, own, RecordType::A), ["10.0.0.1"]);
        // A global name that is not a name is reported, the last good records stay.
        let mut bad = with_global("b", host_b, "10.0.0.3");
        bad.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(GLOBAL_HOSTNAME_ANNOTATION.into(), "a..b".into());
        assert!(index.apply(&bad).is_err());
        assert_eq!(answers(&t, global, RecordType::A), ["10.0.0.2"]);
    }
}

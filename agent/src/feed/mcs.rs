//! The Multi-Cluster Services names (KEP-1645, the MCS DNS specification) in the clusterset zone
//! (`clusterset.local` unless `--clusterset-zone` says otherwise), from the ServiceImports and
//! MCS EndpointSlices of the agent's own cluster, served by the same record table as the xcc zone.
//!
//! ```text
//!   <svc>.<ns>.svc.<zone>                      A/AAAA: the ClusterSet IPs (ClusterSetIP), or every
//!                                              ready endpoint of every cluster (Headless);
//!                                              SRV: one per port (ClusterSetIP, to the name
//!                                              itself) or per ready endpoint (Headless)
//!   _<port>._<proto>.<svc>.<ns>.svc.<zone>     SRV of one named port
//!   <host>.<cluster>.<svc>.<ns>.svc.<zone>     A/AAAA of one endpoint (Headless); <host> is the
//!                                              endpoint's hostname, else its address with dashes
//! ```
//!
//! Each ServiceImport is one table source (`clusterset:<ns>/<svc>`) holding every name of the
//! service, rebuilt from the import and its slices when either changes. One watch of each kind
//! (ServiceImports, and EndpointSlices that carry the service-name label), in every replica;
//! events that arrive together are applied as one table update.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::IpAddr,
    sync::Arc,
    time::Duration,
};

use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{
    Api, Client, ResourceExt as _,
    api::ListParams,
    runtime::watcher::{self, Event},
};
use xcc_dns::{HostRecords, RecordTable, Srv, proto::rr::Name};
use xcc_sync::sources::Schedule;

use super::metrics::Metrics;
use crate::mcs::api::{
    LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER, ServiceImport, ServiceImportType, ServicePort,
};

/// Prefix of the table sources this feed writes; other feeds leave such sources alone.
pub const SOURCE_PREFIX: &str = "clusterset:";
/// How often the feed checks again whether ServiceImports can be read, while they cannot.
const PROBE_INTERVAL: Duration = Duration::from_secs(30);

/// The table source of the service `<ns>/<svc>`.
pub fn source_of(namespace: &str, service: &str) -> String {
    format!("{SOURCE_PREFIX}{namespace}/{service}")
}

/// The names of the clusterset zone, and the TTL of their answers.
#[derive(Clone, Debug)]
pub struct ClustersetZone {
    /// The zone's origin, fully qualified.
    pub origin: Name,
    /// TTL of every answer at the names of this feed.
    pub ttl: u32,
}

impl ClustersetZone {
    /// The zone `--clusterset-zone` names, with `ttl`; `None` when it is empty (switched off) or
    /// not a zone.
    pub fn from_flag(zone: &str, ttl: u32) -> Option<ClustersetZone> {
        if zone.trim().is_empty() {
            return None;
        }
        let zone = xcc_dns::Zone::new(zone).ok()?;
        Some(ClustersetZone {
            origin: zone.origin().clone(),
            ttl,
        })
    }
}

/// The table entries of one imported service: `import` and the MCS EndpointSlices labelled with
/// its name, in its namespace. Also returns what had to be left out, in words.
///
/// Endpoints whose `ready` condition is false are left out (unset counts as ready, as the
/// EndpointSlice API says). The SRV records of a name share its weight (100 divided by their
/// count, as CoreDNS does), after identical records are merged.
pub fn names_of(
    zone: &ClustersetZone,
    import: &ServiceImport,
    slices: &[&EndpointSlice],
) -> (Vec<(Name, HostRecords)>, Vec<String>) {
    let mut skipped = Vec::new();
    let namespace = import.namespace().unwrap_or_default();
    let Some(base) = name_below(&zone.origin, &[&import.name_any(), &namespace, "svc"]) else {
        skipped.push(format!("{namespace}/{}: not a DNS name", import.name_any()));
        return (Vec::new(), skipped);
    };
    let mut names: BTreeMap<Name, HostRecords> = BTreeMap::new();
    // The service's own name exists as long as it is imported, records or not (NODATA).
    names.insert(base.clone(), HostRecords::default());
    match import.spec.type_ {
        ServiceImportType::ClusterSetIP => {
            for ip in &import.spec.ips {
                match ip.trim().parse::<IpAddr>() {
                    Ok(ip) => entry(&mut names, &base).addresses.push(ip),
                    Err(_) => skipped.push(format!("ClusterSet IP {ip:?} is not an address")),
                }
            }
            for port in ports_of(&import.spec.ports) {
                add_srv(&mut names, &base, &port, &base);
            }
        }
        ServiceImportType::Headless => {
            for slice in slices {
                headless_slice(&mut names, &base, import, slice, &mut skipped);
            }
        }
    }
    let entries = names
        .into_iter()
        .map(|(name, mut records)| {
            records.srv.sort();
            records.srv.dedup();
            let weight = u16::try_from(100 / records.srv.len().max(1))
                .unwrap_or(100)
                .max(1);
            for srv in &mut records.srv {
                srv.weight = weight;
            }
            records.ttl = Some(zone.ttl);
            (name, records)
        })
        .collect();
    (entries, skipped)
}

/// One port as SRV records name it: its name (if any), its protocol in lowercase, its number.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Port {
    name: Option<String>,
    protocol: String,
    number: u16,
}

fn port(name: Option<&String>, protocol: Option<&String>, number: Option<i32>) -> Option<Port> {
    Some(Port {
        name: name.filter(|n| !n.is_empty()).cloned(),
        protocol: protocol.map_or("tcp".into(), |p| p.to_ascii_lowercase()),
        number: u16::try_from(number?).ok().filter(|n| *n > 0)?,
    })
}

fn ports_of(ports: &[ServicePort]) -> Vec<Port> {
    ports
        .iter()
        .filter_map(|p| port(p.name.as_ref(), p.protocol.as_ref(), Some(p.port)))
        .collect()
}

/// The names of one slice of a headless service: each ready endpoint's own name, its addresses
/// at the service's name, and an SRV record per port to it. The slice's ports are those its
/// endpoints listen on; a slice without ports has the import's.
fn headless_slice(
    names: &mut BTreeMap<Name, HostRecords>,
    base: &Name,
    import: &ServiceImport,
    slice: &EndpointSlice,
    skipped: &mut Vec<String>,
) {
    let slice_name = slice.name_any();
    let Some(cluster) = slice.labels().get(LABEL_SOURCE_CLUSTER) else {
        skipped.push(format!(
            "slice {slice_name}: no {LABEL_SOURCE_CLUSTER} label"
        ));
        return;
    };
    let ports = match slice.ports.as_deref() {
        Some(ports) if !ports.is_empty() => ports
            .iter()
            .filter_map(|p| port(p.name.as_ref(), p.protocol.as_ref(), p.port))
            .collect(),
        _ => ports_of(&import.spec.ports),
    };
    let family_ok = |ip: &IpAddr| match slice.address_type.as_str() {
        "IPv4" => ip.is_ipv4(),
        "IPv6" => ip.is_ipv6(),
        _ => false,
    };
    for endpoint in &slice.endpoints {
        if endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
            continue;
        }
        for address in &endpoint.addresses {
            let Some(ip) = address.trim().parse::<IpAddr>().ok().filter(family_ok) else {
                skipped.push(format!(
                    "slice {slice_name}: {address:?} is not an {} address",
                    slice.address_type
                ));
                continue;
            };
            let host = match endpoint.hostname.as_deref().filter(|h| !h.is_empty()) {
                Some(hostname) => hostname.to_string(),
                // The address as the slice writes it, as CoreDNS and the conformance suite
                // derive the name.
                None => address.trim().to_ascii_lowercase().replace(['.', ':'], "-"),
            };
            let Some(own) = Name::from_ascii(format!("{host}.{cluster}"))
                .ok()
                .filter(|n| n.num_labels() == 2)
                .and_then(|n| n.append_domain(base).ok())
            else {
                skipped.push(format!(
                    "slice {slice_name}: {host}.{cluster} is not a DNS name"
                ));
                continue;
            };
            entry(names, &own).addresses.push(ip);
            entry(names, base).addresses.push(ip);
            for port in &ports {
                add_srv(names, base, port, &own);
            }
        }
    }
}

/// SRV records to `target` on `port`: at the service's name, and at `_<port>._<proto>.<svc>`
/// for a named port.
fn add_srv(names: &mut BTreeMap<Name, HostRecords>, base: &Name, port: &Port, target: &Name) {
    let srv = Srv {
        priority: 0,
        weight: 0,
        port: port.number,
        target: target.clone(),
    };
    entry(names, base).srv.push(srv.clone());
    if let Some(named) = port
        .name
        .as_ref()
        .and_then(|name| name_below(base, &[&format!("_{name}"), &format!("_{}", port.protocol)]))
    {
        entry(names, &named).srv.push(srv);
    }
}

fn entry<'n>(names: &'n mut BTreeMap<Name, HostRecords>, name: &Name) -> &'n mut HostRecords {
    names.entry(name.clone()).or_default()
}

/// `labels` (each one label, first the lowest) prepended to `origin`.
pub(super) fn name_below(origin: &Name, labels: &[&str]) -> Option<Name> {
    let relative = Name::from_labels(labels.iter().map(|l| l.as_bytes())).ok()?;
    (relative.num_labels() as usize == labels.len())
        .then(|| relative.append_domain(origin).ok())
        .flatten()
        .map(|n| n.to_lowercase())
}

/// A service: namespace and name.
type Key = (String, String);

/// What the two watches have said: every ServiceImport and every MCS EndpointSlice, by service.
/// Kept free of I/O so it is tested without a cluster.
pub struct McsIndex {
    table: Arc<RecordTable>,
    zone: ClustersetZone,
    imports: HashMap<Key, ServiceImport>,
    /// The slices of each service, by slice name.
    slices: HashMap<Key, BTreeMap<String, EndpointSlice>>,
    /// The service each slice was last filed under (its label may change).
    slice_service: HashMap<(String, String), Key>,
    /// Objects of a relist in progress.
    listing_imports: Vec<ServiceImport>,
    listing_slices: Vec<EndpointSlice>,
}

/// One watch event of either kind.
pub enum Change {
    /// From the ServiceImport watch.
    Import(Event<ServiceImport>),
    /// From the MCS EndpointSlice watch.
    Slice(Event<EndpointSlice>),
}

impl McsIndex {
    /// An index writing the names of `zone` into `table`.
    pub fn new(table: Arc<RecordTable>, zone: ClustersetZone) -> Self {
        McsIndex {
            table,
            zone,
            imports: HashMap::new(),
            slices: HashMap::new(),
            slice_service: HashMap::new(),
            listing_imports: Vec::new(),
            listing_slices: Vec::new(),
        }
    }

    /// Takes one event in; returns the services whose names it changed (not yet published).
    pub fn take(&mut self, change: Change) -> HashSet<Key> {
        let mut touched = HashSet::new();
        match change {
            Change::Import(Event::Init) => self.listing_imports.clear(),
            Change::Import(Event::InitApply(import)) => self.listing_imports.push(import),
            Change::Import(Event::InitDone) => {
                touched.extend(self.imports.keys().cloned());
                self.imports = std::mem::take(&mut self.listing_imports)
                    .into_iter()
                    .map(|i| (key_of_import(&i), i))
                    .collect();
                touched.extend(self.imports.keys().cloned());
            }
            Change::Import(Event::Apply(import)) => {
                let key = key_of_import(&import);
                self.imports.insert(key.clone(), import);
                touched.insert(key);
            }
            Change::Import(Event::Delete(import)) => {
                let key = key_of_import(&import);
                self.imports.remove(&key);
                touched.insert(key);
            }
            Change::Slice(Event::Init) => self.listing_slices.clear(),
            Change::Slice(Event::InitApply(slice)) => self.listing_slices.push(slice),
            Change::Slice(Event::InitDone) => {
                touched.extend(self.slices.keys().cloned());
                self.slices.clear();
                self.slice_service.clear();
                for slice in std::mem::take(&mut self.listing_slices) {
                    touched.extend(self.file_slice(slice));
                }
            }
            Change::Slice(Event::Apply(slice)) => {
                touched.extend(self.unfile_slice(&slice));
                touched.extend(self.file_slice(slice));
            }
            Change::Slice(Event::Delete(slice)) => touched.extend(self.unfile_slice(&slice)),
        }
        touched
    }

    /// Publishes the names of `touched` services as one table update; returns what had to be
    /// left out.
    pub fn publish(&self, touched: &HashSet<Key>) -> Vec<String> {
        if touched.is_empty() {
            return Vec::new();
        }
        let mut skipped = Vec::new();
        let result = self.table.update(|batch| {
            for key in touched {
                let source = source_of(&key.0, &key.1);
                let Some(import) = self.imports.get(key) else {
                    batch.remove_source(&source);
                    continue;
                };
                let slices: Vec<&EndpointSlice> = self
                    .slices
                    .get(key)
                    .map(|s| s.values().collect())
                    .unwrap_or_default();
                let (entries, problems) = names_of(&self.zone, import, &slices);
                skipped.extend(problems);
                if let Err(error) = batch.set_source(&source, entries) {
                    skipped.push(error.to_string());
                }
            }
            Ok(())
        });
        if let Err(error) = result {
            skipped.push(error.to_string());
        }
        skipped
    }

    fn file_slice(&mut self, slice: EndpointSlice) -> Option<Key> {
        let service = slice.labels().get(LABEL_SERVICE_NAME)?.clone();
        let namespace = slice.namespace().unwrap_or_default();
        let key = (namespace.clone(), service);
        self.slice_service
            .insert((namespace, slice.name_any()), key.clone());
        self.slices
            .entry(key.clone())
            .or_default()
            .insert(slice.name_any(), slice);
        Some(key)
    }

    fn unfile_slice(&mut self, slice: &EndpointSlice) -> Option<Key> {
        let id = (slice.namespace().unwrap_or_default(), slice.name_any());
        let key = self.slice_service.remove(&id)?;
        if let Some(slices) = self.slices.get_mut(&key) {
            slices.remove(&id.1);
            if slices.is_empty() {
                self.slices.remove(&key);
            }
        }
        Some(key)
    }
}

fn key_of_import(import: &ServiceImport) -> Key {
    (import.namespace().unwrap_or_default(), import.name_any())
}

/// Whether table source `source` is one of this feed's (other feeds leave those alone).
pub fn is_clusterset_source(source: &str) -> bool {
    source.starts_with(SOURCE_PREFIX)
}

/// Watches ServiceImports and MCS EndpointSlices cluster-wide until the streams end (they retry
/// forever). While ServiceImports cannot be read (the API is not installed, or the agent may not
/// read them), the zone is served empty and the feed checks again every [`PROBE_INTERVAL`].
pub async fn run(client: Client, mut index: McsIndex, metrics: Arc<Metrics>) {
    let imports: Api<ServiceImport> = Api::all(client.clone());
    let slices: Api<EndpointSlice> = Api::all(client);
    wait_until_readable(&imports, &slices, &index.zone.origin).await;
    let report = |kind: &str| xcc_sync::sources::Report {
        cluster: xcc_sync::sources::LOCAL.into(),
        kind: kind.into(),
        metrics: Some(metrics.sync.clone()),
    };
    let (import_events, _) = xcc_sync::sources::watch_reported(
        imports,
        watcher::Config::default(),
        Schedule::Local,
        report("ServiceImport"),
    );
    let (slice_events, _) = xcc_sync::sources::watch_reported(
        slices,
        watcher::Config::default().labels(LABEL_SERVICE_NAME),
        Schedule::Local,
        report("EndpointSlice (MCS)"),
    );
    // Errors are said by each watch's report; the table keeps its names meanwhile.
    let mut events = futures::stream::select(
        import_events.filter_map(|e| futures::future::ready(e.ok().map(Change::Import))),
        slice_events.filter_map(|e| futures::future::ready(e.ok().map(Change::Slice))),
    );
    while let Some(change) = events.next().await {
        let mut touched = index.take(change);
        // What has arrived meanwhile goes into the same update.
        while let Some(Some(change)) = events.next().now_or_never() {
            touched.extend(index.take(change));
        }
        for problem in index.publish(&touched) {
            tracing::debug!(%problem, "left out of the clusterset zone");
        }
        let snapshot = index.table.snapshot();
        metrics.table_published(snapshot.len(), snapshot.serial());
    }
}

/// Returns once ServiceImports and EndpointSlices can be listed cluster-wide, or the API server
/// answers otherwise than "not found" or "forbidden" (the watches then report the outage).
async fn wait_until_readable(
    imports: &Api<ServiceImport>,
    slices: &Api<EndpointSlice>,
    zone: &Name,
) {
    let probe = ListParams::default().limit(1);
    let mut said = false;
    loop {
        let refused = match imports.list_metadata(&probe).await {
            Ok(_) => match slices
                .list_metadata(&probe.clone().labels(LABEL_SERVICE_NAME))
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 403 => Some(status.message),
                _ => None,
            },
            Err(kube::Error::Api(status)) if matches!(status.code, 403 | 404) => {
                Some(status.message)
            }
            Err(_) => None,
        };
        let Some(why) = refused else {
            if said {
                tracing::info!(%zone, "ServiceImports and MCS EndpointSlices readable; serving the clusterset zone");
            }
            return;
        };
        if !said {
            tracing::info!(
                %zone,
                why = %xcc_kube::bounded(&why),
                "ServiceImports or MCS EndpointSlices cannot be read (the MCS API is not installed, or the agent may not list them cluster-wide): the clusterset zone answers NXDOMAIN; checking again every {}s",
                PROBE_INTERVAL.as_secs()
            );
            said = true;
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use kube::api::ObjectMeta;
    use xcc_dns::{
        Zone, ZoneSettings,
        proto::{
            op::ResponseCode,
            rr::{RData, RecordType},
        },
    };

    use super::*;
    use crate::mcs::api::ServiceImportSpec;

    const NS: &str = "demo";

    fn zone() -> ClustersetZone {
        ClustersetZone::from_flag("clusterset.local", 5).unwrap()
    }

    fn table() -> Arc<RecordTable> {
        let zones = vec![
            Zone::new("xcc.test").unwrap(),
            Zone::new("clusterset.local").unwrap(),
        ];
        Arc::new(RecordTable::new(zones, ZoneSettings::default()).unwrap())
    }

    fn service_port(name: Option<&str>, protocol: &str, port: i32) -> ServicePort {
        ServicePort {
            name: name.map(Into::into),
            protocol: Some(protocol.into()),
            app_protocol: None,
            port,
        }
    }

    fn import(
        name: &str,
        type_: ServiceImportType,
        ips: &[&str],
        ports: Vec<ServicePort>,
    ) -> ServiceImport {
        ServiceImport {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NS.into()),
                ..Default::default()
            },
            spec: ServiceImportSpec {
                ports,
                ips: ips.iter().map(|s| s.to_string()).collect(),
                type_,
                ..Default::default()
            },
            status: None,
        }
    }

    /// An endpoint: its addresses, hostname and whether it is ready (`None`: unset).
    fn endpoint(addresses: &[&str], hostname: Option<&str>, ready: Option<bool>) -> Endpoint {
        Endpoint {
            addresses: addresses.iter().map(|s| s.to_string()).collect(),
            hostname: hostname.map(Into::into),
            conditions: Some(EndpointConditions {
                ready,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn mcs_slice(
        name: &str,
        service: &str,
        cluster: &str,
        address_type: &str,
        endpoints: Vec<Endpoint>,
        ports: &[(Option<&str>, &str, i32)],
    ) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NS.into()),
                labels: Some(
                    [
                        (LABEL_SERVICE_NAME.to_string(), service.to_string()),
                        (LABEL_SOURCE_CLUSTER.to_string(), cluster.to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            address_type: address_type.into(),
            endpoints,
            ports: Some(
                ports
                    .iter()
                    .map(|(name, protocol, port)| EndpointPort {
                        name: name.map(Into::into),
                        protocol: Some(protocol.to_string()),
                        port: Some(*port),
                        app_protocol: None,
                    })
                    .collect(),
            ),
        }
    }

    /// What a client asking `qname`/`qtype` gets: the rcode and the answers' data, sorted.
    fn ask(table: &RecordTable, qname: &str, qtype: RecordType) -> (ResponseCode, Vec<String>) {
        let snapshot = table.snapshot();
        let resolution = snapshot.resolve(&Name::from_ascii(qname).unwrap(), qtype);
        let mut answers: Vec<String> = resolution
            .answers
            .iter()
            .map(|r| match &r.data {
                RData::SRV(srv) => format!(
                    "{} {} {} {}",
                    srv.priority, srv.weight, srv.port, srv.target
                ),
                other => other.to_string(),
            })
            .collect();
        answers.sort();
        if answers.is_empty() {
            let soa = resolution.authority.map(|r| r.record_type());
            assert_eq!(
                soa,
                Some(RecordType::SOA),
                "{qname} {qtype}: SOA in authority"
            );
        }
        (resolution.rcode, answers)
    }

    fn answers(table: &RecordTable, qname: &str, qtype: RecordType) -> Vec<String> {
        let (rcode, answers) = ask(table, qname, qtype);
        assert_eq!(rcode, ResponseCode::NoError, "{qname} {qtype}");
        answers
    }

    fn apply(index: &mut McsIndex, changes: Vec<Change>) {
        let mut touched = HashSet::new();
        for change in changes {
            touched.extend(index.take(change));
        }
        assert!(index.publish(&touched).is_empty());
    }

    const HELLO: &str = "hello.demo.svc.clusterset.local.";

    #[test]
    fn a_clusterset_ip_service_answers_its_ips_and_one_srv_record_per_port() {
        let t = table();
        let mut index = McsIndex::new(t.clone(), zone());
        let hello = import(
            "hello",
            ServiceImportType::ClusterSetIP,
            &["10.96.0.10", "fd00:96::10"],
            vec![
                service_port(Some("tcp"), "TCP", 42),
                service_port(Some("udp"), "UDP", 42),
            ],
        );
        // A slice of the service does not add addresses to a ClusterSetIP name.
        let slice = mcs_slice(
            "hello-c1",
            "hello",
            "c1",
            "IPv4",
            vec![endpoint(&["10.0.0.5"], None, None)],
            &[(Some("tcp"), "TCP", 42)],
        );
        apply(
            &mut index,
            vec![
                Change::Import(Event::Apply(hello)),
                Change::Slice(Event::Apply(slice)),
            ],
        );
        assert_eq!(answers(&t, HELLO, RecordType::A), ["10.96.0.10"]);
        assert_eq!(answers(&t, HELLO, RecordType::AAAA), ["fd00:96::10"]);
        // tcp/42 and udp/42: one record, as the conformance suite expects.
        assert_eq!(
            answers(&t, HELLO, RecordType::SRV),
            [format!("0 100 42 {HELLO}")]
        );
        assert_eq!(
            answers(&t, &format!("_tcp._tcp.{HELLO}"), RecordType::SRV),
            [format!("0 100 42 {HELLO}")]
        );
        assert_eq!(
            answers(&t, &format!("_udp._udp.{HELLO}"), RecordType::SRV),
            [format!("0 100 42 {HELLO}")]
        );
        // No per-endpoint names for a ClusterSetIP service.
        let (rcode, _) = ask(&t, &format!("10-0-0-5.c1.{HELLO}"), RecordType::A);
        assert_eq!(rcode, ResponseCode::NXDomain);
        // Every answer carries the clusterset TTL.
        let snapshot = t.snapshot();
        let resolution = snapshot.resolve(&Name::from_ascii(HELLO).unwrap(), RecordType::A);
        assert!(resolution.answers.iter().all(|r| r.ttl == 5));
    }

    #[test]
    fn unnamed_ports_have_no_port_name_and_several_ports_share_the_weight() {
        let t = table();
        let mut index = McsIndex::new(t.clone(), zone());
        let hello = import(
            "hello",
            ServiceImportType::ClusterSetIP,
            &["10.96.0.10"],
            vec![
                service_port(None, "TCP", 42),
                service_port(Some("http"), "TCP", 80),
            ],
        );
        apply(&mut index, vec![Change::Import(Event::Apply(hello))]);
        assert_eq!(
            answers(&t, HELLO, RecordType::SRV),
            [format!("0 50 42 {HELLO}"), format!("0 50 80 {HELLO}")]
        );
        assert_eq!(
            answers(&t, &format!("_http._tcp.{HELLO}"), RecordType::SRV),
            [format!("0 100 80 {HELLO}")]
        );
        // `_tcp.hello...` is only the parent of `_http._tcp.hello...`: NODATA.
        assert!(answers(&t, &format!("_tcp.{HELLO}"), RecordType::SRV).is_empty());
        for missing in [format!("_42._tcp.{HELLO}"), format!("_http._udp.{HELLO}")] {
            assert_eq!(
                ask(&t, &missing, RecordType::SRV).0,
                ResponseCode::NXDomain,
                "{missing}"
            );
        }
    }

    #[test]
    fn a_headless_service_answers_every_ready_endpoint_of_every_cluster() {
        let t = table();
        let mut index = McsIndex::new(t.clone(), zone());
        let hello = import(
            "hello",
            ServiceImportType::Headless,
            &[],
            vec![
                service_port(Some("tcp"), "TCP", 42),
                service_port(Some("udp"), "UDP", 42),
            ],
        );
        let c1 = mcs_slice(
            "hello-c1",
            "hello",
            "c1",
            "IPv4",
            vec![
                endpoint(&["10.0.0.1"], Some("web-0"), Some(true)),
                endpoint(&["10.0.0.2"], Some("web-1"), None),
                endpoint(&["10.0.0.3"], Some("web-2"), Some(false)),
            ],
            &[(Some("tcp"), "TCP", 42), (Some("udp"), "UDP", 42)],
        );
        let c1_v6 = mcs_slice(
            "hello-c1-v6",
            "hello",
            "c1",
            "IPv6",
            vec![endpoint(&["fd00::1"], Some("web-0"), None)],
            &[(Some("tcp"), "TCP", 42)],
        );
        // Another cluster, whose endpoints have no hostname, on its own port (a node port).
        let c2 = mcs_slice(
            "hello-c2",
            "hello",
            "c2",
            "IPv4",
            vec![endpoint(&["10.1.0.5"], None, None)],
            &[(Some("tcp"), "TCP", 30042)],
        );
        apply(
            &mut index,
            vec![
                Change::Import(Event::Apply(hello)),
                Change::Slice(Event::Apply(c1)),
                Change::Slice(Event::Apply(c1_v6)),
                Change::Slice(Event::Apply(c2.clone())),
            ],
        );
        assert_eq!(
            answers(&t, HELLO, RecordType::A),
            ["10.0.0.1", "10.0.0.2", "10.1.0.5"],
            "web-2 is not ready"
        );
        assert_eq!(answers(&t, HELLO, RecordType::AAAA), ["fd00::1"]);
        assert_eq!(
            answers(&t, &format!("web-0.c1.{HELLO}"), RecordType::A),
            ["10.0.0.1"]
        );
        assert_eq!(
            answers(&t, &format!("web-0.c1.{HELLO}"), RecordType::AAAA),
            ["fd00::1"]
        );
        assert_eq!(
            answers(&t, &format!("10-1-0-5.c2.{HELLO}"), RecordType::A),
            ["10.1.0.5"]
        );
        assert_eq!(
            ask(&t, &format!("web-2.c1.{HELLO}"), RecordType::A).0,
            ResponseCode::NXDomain
        );
        // The cluster's label is an empty non-terminal.
        assert!(answers(&t, &format!("c1.{HELLO}"), RecordType::A).is_empty());
        // One SRV record per ready endpoint (web-0's two families and tcp/udp 42 merged).
        assert_eq!(
            answers(&t, HELLO, RecordType::SRV),
            [
                format!("0 33 30042 10-1-0-5.c2.{HELLO}"),
                format!("0 33 42 web-0.c1.{HELLO}"),
                format!("0 33 42 web-1.c1.{HELLO}"),
            ]
        );
        assert_eq!(
            answers(&t, &format!("_udp._udp.{HELLO}"), RecordType::SRV),
            [
                format!("0 50 42 web-0.c1.{HELLO}"),
                format!("0 50 42 web-1.c1.{HELLO}"),
            ]
        );
        // c2's endpoint becomes not ready, then its slice goes.
        let mut c2_down = c2.clone();
        c2_down.endpoints = vec![endpoint(&["10.1.0.5"], None, Some(false))];
        apply(&mut index, vec![Change::Slice(Event::Apply(c2_down))]);
        assert_eq!(answers(&t, HELLO, RecordType::A), ["10.0.0.1", "10.0.0.2"]);
        apply(&mut index, vec![Change::Slice(Event::Delete(c2))]);
        assert_eq!(
            ask(&t, &format!("10-1-0-5.c2.{HELLO}"), RecordType::A).0,
            ResponseCode::NXDomain
        );
        assert_eq!(answers(&t, HELLO, RecordType::SRV).len(), 2);
    }

    #[test]
    fn an_ipv6_endpoint_without_hostname_is_named_by_its_address() {
        let hello = import("hello", ServiceImportType::Headless, &[], vec![]);
        let slice = mcs_slice(
            "hello-c1",
            "hello",
            "c1",
            "IPv6",
            vec![endpoint(&["fd00::5"], None, None)],
            &[(None, "TCP", 42)],
        );
        let (entries, skipped) = names_of(&zone(), &hello, &[&slice]);
        assert!(skipped.is_empty(), "{skipped:?}");
        let names: Vec<String> = entries.iter().map(|(n, _)| n.to_string()).collect();
        assert!(names.contains(&format!("fd00--5.c1.{HELLO}")), "{names:?}");
        // An unnamed port: an SRV record at the service's name, no `_<port>._<proto>` name.
        assert!(names.iter().all(|n| !n.starts_with('_')), "{names:?}");
    }

    #[test]
    fn removal_leaves_the_zone_empty_but_for_its_apex() {
        let t = table();
        let mut index = McsIndex::new(t.clone(), zone());
        let hello = import(
            "hello",
            ServiceImportType::ClusterSetIP,
            &["10.96.0.10"],
            vec![service_port(None, "TCP", 42)],
        );
        apply(
            &mut index,
            vec![Change::Import(Event::Apply(hello.clone()))],
        );
        // The namespace and `svc` labels are empty non-terminals; anything else is NXDOMAIN.
        for ent in ["demo.svc.clusterset.local.", "svc.clusterset.local."] {
            assert!(answers(&t, ent, RecordType::A).is_empty(), "{ent}");
        }
        for missing in [
            "other.demo.svc.clusterset.local.",
            "hello.other.svc.clusterset.local.",
            "x.clusterset.local.",
        ] {
            assert_eq!(ask(&t, missing, RecordType::A).0, ResponseCode::NXDomain);
        }
        assert_eq!(
            answers(&t, "clusterset.local.", RecordType::SOA).len(),
            1,
            "SOA at the apex"
        );
        apply(&mut index, vec![Change::Import(Event::Delete(hello))]);
        for gone in [HELLO, "demo.svc.clusterset.local.", "svc.clusterset.local."] {
            assert_eq!(
                ask(&t, gone, RecordType::A).0,
                ResponseCode::NXDomain,
                "{gone}"
            );
        }
        assert!(t.sources().is_empty());
    }

    #[test]
    fn a_relist_replaces_everything_and_slices_wait_for_their_import() {
        let t = table();
        let mut index = McsIndex::new(t.clone(), zone());
        let slice = mcs_slice(
            "db-c1",
            "db",
            "c1",
            "IPv4",
            vec![endpoint(&["10.0.0.9"], Some("db-0"), None)],
            &[],
        );
        // A slice without its ServiceImport is not served.
        apply(&mut index, vec![Change::Slice(Event::Apply(slice.clone()))]);
        assert!(t.snapshot().is_empty());
        let old = import(
            "old",
            ServiceImportType::ClusterSetIP,
            &["10.96.0.1"],
            vec![],
        );
        apply(&mut index, vec![Change::Import(Event::Apply(old))]);
        assert!(!answers(&t, "old.demo.svc.clusterset.local.", RecordType::A).is_empty());
        // A relist (the watch was down): `old` went, `db` came.
        let db = import(
            "db",
            ServiceImportType::Headless,
            &[],
            vec![service_port(Some("sql"), "TCP", 5432)],
        );
        apply(
            &mut index,
            vec![
                Change::Import(Event::Init),
                Change::Import(Event::InitApply(db)),
                Change::Import(Event::InitDone),
            ],
        );
        assert_eq!(
            ask(&t, "old.demo.svc.clusterset.local.", RecordType::A).0,
            ResponseCode::NXDomain
        );
        // The slice has no ports: the import's.
        assert_eq!(
            answers(
                &t,
                "_sql._tcp.db.demo.svc.clusterset.local.",
                RecordType::SRV
            ),
            ["0 100 5432 db-0.c1.db.demo.svc.clusterset.local."]
        );
        // A slice relabelled to another service leaves the first.
        let mut moved = slice;
        moved
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_SERVICE_NAME.into(), "other".into());
        apply(&mut index, vec![Change::Slice(Event::Apply(moved))]);
        assert!(answers(&t, "db.demo.svc.clusterset.local.", RecordType::A).is_empty());
    }

    #[test]
    fn a_relist_of_the_xcc_slices_keeps_the_clusterset_names() {
        let t = table();
        let mut index = McsIndex::new(t.clone(), zone());
        let hello = import(
            "hello",
            ServiceImportType::ClusterSetIP,
            &["10.96.0.10"],
            vec![],
        );
        apply(&mut index, vec![Change::Import(Event::Apply(hello))]);
        let slices = super::super::slices::SliceIndex::new(t.clone());
        assert!(slices.reset(&[]).is_empty());
        assert_eq!(answers(&t, HELLO, RecordType::A), ["10.96.0.10"]);
    }
}

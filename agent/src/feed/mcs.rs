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
                None => ip.to_string().replace(['.', ':'], "-"),
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
fn name_below(origin: &Name, labels: &[&str]) -> Option<Name> {
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
                tracing::info!(%zone, "ServiceImports readable; serving the clusterset zone");
            }
            return;
        };
        if !said {
            tracing::info!(
                %zone,
                why = %xcc_kube::bounded(&why),
                "ServiceImports cannot be read (the MCS API is not installed, or the agent may not read it): the clusterset zone answers NXDOMAIN; checking again every {}s",
                PROBE_INTERVAL.as_secs()
            );
            said = true;
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

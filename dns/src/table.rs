//! The record table: many writers, each owning the records of one *source* (a records file, one
//! EndpointSlice, ...), and readers that never wait.
//!
//! ```text
//!  writers ──► Mutex<Writer> ──(patch the changed names, publish)──► ArcSwap<Snapshot> ◄── readers
//! ```
//!
//! A reader loads the current [`Snapshot`] with one atomic operation and resolves against it; a
//! writer holds the mutex only against other writers. Each publication bumps the SOA serial.
//! Publishing clones the name map (reference counts, no record copies), so an update costs
//! O(names) pointer copies plus the changed names, and a batch of updates publishes once.

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::{Arc, Mutex},
    time::{SystemTime, UNIX_EPOCH},
};

use arc_swap::ArcSwap;
use hickory_proto::rr::Name;

use crate::{
    Error,
    name::{ancestors, in_zone, key_of},
    zone::{Apex, Zone, ZoneSettings},
};

type Key = Arc<[u8]>;
pub(crate) type NodeMap = HashMap<Key, Arc<Node>, foldhash::fast::FixedState>;

/// What one source says about one host name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostRecords {
    /// Addresses: IPv4 ones answer A queries, IPv6 ones AAAA queries.
    pub addresses: Vec<IpAddr>,
    /// Canonical name. A name cannot have both (RFC 1034 §3.6.2): when any source gives addresses
    /// for a name, a CNAME from another source for it is ignored.
    pub cname: Option<Name>,
    /// TTL of the answers at this name; `None`: the zone's positive TTL. Several sources that
    /// set one for a name: the shortest wins.
    pub ttl: Option<u32>,
    /// Service records (RFC 2782) at this name. Identical records (from one source or several)
    /// are served once. Like addresses, they make a CNAME for the name ignored.
    pub srv: Vec<Srv>,
}

/// One SRV record's data: where a service at a name is reached (RFC 2782).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Srv {
    /// Lower is tried first.
    pub priority: u16,
    /// Relative share among records of one priority.
    pub weight: u16,
    /// The port the service listens on.
    pub port: u16,
    /// The host that serves it.
    pub target: Name,
}

/// The data served at one name, built once per change and shared by every snapshot after it.
/// Kept compact (no prebuilt `Record`s): answers are built per query with the question's owner
/// name, which a wildcard or a differently-cased question needs anyway.
#[derive(Debug, Default)]
pub(crate) struct Node {
    pub a: Box<[Ipv4Addr]>,
    pub aaaa: Box<[Ipv6Addr]>,
    pub cname: Option<Box<Name>>,
    /// Sorted, without duplicates.
    pub srv: Box<[Srv]>,
    /// `None`: the snapshot's TTL.
    pub ttl: Option<u32>,
}

impl Node {
    fn build(contributions: &[Contribution]) -> Node {
        let mut addresses: Vec<IpAddr> = contributions
            .iter()
            .flat_map(|c| c.addresses.iter().copied())
            .collect();
        addresses.sort_unstable();
        addresses.dedup();
        let (mut a, mut aaaa) = (Vec::new(), Vec::new());
        for ip in addresses {
            match ip {
                IpAddr::V4(v4) => a.push(v4),
                IpAddr::V6(v6) => aaaa.push(v6),
            }
        }
        let mut srv: Vec<Srv> = contributions
            .iter()
            .flat_map(|c| c.srv.iter().cloned())
            .collect();
        srv.sort_unstable();
        srv.dedup();
        let cname = if a.is_empty() && aaaa.is_empty() && srv.is_empty() {
            // Contributions are kept sorted by source: the choice is stable.
            contributions.iter().find_map(|c| c.cname.clone())
        } else {
            None
        };
        Node {
            a: a.into(),
            aaaa: aaaa.into(),
            cname,
            srv: srv.into(),
            ttl: contributions.iter().filter_map(|c| c.ttl).min(),
        }
    }

    /// TTL of the answers at this name, given the snapshot's.
    pub fn ttl_or(&self, default: u32) -> u32 {
        self.ttl.unwrap_or(default)
    }

    /// Whether the name has any data (an empty node is an empty non-terminal).
    pub fn has_data(&self) -> bool {
        !self.a.is_empty() || !self.aaaa.is_empty() || self.cname.is_some() || !self.srv.is_empty()
    }
}

/// One zone in a snapshot: its key and the apex records of that version.
#[derive(Debug)]
pub(crate) struct ZoneEntry {
    /// Position in [`RecordTable::zones`].
    pub index: usize,
    pub key: Box<[u8]>,
    pub apex: Apex,
}

/// An immutable version of the table. Readers hold it for the length of one query.
#[derive(Debug)]
pub struct Snapshot {
    serial: u32,
    /// TTL of positive answers.
    pub(crate) ttl: u32,
    /// Longest origin first, so the first zone that contains a name is its closest zone.
    pub(crate) zones: Vec<ZoneEntry>,
    pub(crate) nodes: NodeMap,
    names: usize,
}

impl Snapshot {
    /// SOA serial of this version.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// Number of host names with records (empty non-terminals not counted).
    pub fn len(&self) -> usize {
        self.names
    }

    /// Whether the table holds no host names.
    pub fn is_empty(&self) -> bool {
        self.names == 0
    }
}

/// What one source says about one name, stored compactly (there is one per name and source).
struct Contribution {
    source: Arc<str>,
    addresses: Box<[IpAddr]>,
    cname: Option<Box<Name>>,
    ttl: Option<u32>,
    srv: Box<[Srv]>,
}

/// Per-name bookkeeping on the writer side.
#[derive(Default)]
struct NameState {
    /// What each source says, sorted by source (usually one entry).
    contributions: Vec<Contribution>,
    /// How many names with records lie below this one (it is an empty non-terminal if > 0).
    below: u32,
}

struct Writer {
    sources: HashMap<Arc<str>, Vec<Key>>,
    names: HashMap<Key, NameState>,
    /// Names with records (not counting empty non-terminals).
    with_data: usize,
    serial: u32,
}

/// The table. Cheap to share: wrap it in an `Arc`.
pub struct RecordTable {
    zones: Vec<Zone>,
    settings: ZoneSettings,
    writer: Mutex<Writer>,
    current: ArcSwap<Snapshot>,
}

impl std::fmt::Debug for RecordTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordTable")
            .field("zones", &self.zones)
            .field("settings", &self.settings)
            .field("serial", &self.current.load().serial)
            .finish()
    }
}

impl RecordTable {
    /// An empty table serving `zones`. Zones may nest; a name belongs to its closest zone.
    pub fn new(zones: Vec<Zone>, settings: ZoneSettings) -> Result<Self, Error> {
        if zones.is_empty() {
            return Err(Error::NoZones);
        }
        let mut zones = zones;
        zones.sort_by_key(|z| std::cmp::Reverse(z.key().len()));
        zones.dedup_by(|a, b| a.key() == b.key());
        // Start from the clock so that a restarted server's serial still rises (RFC 1982 space).
        let serial = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(1);
        let writer = Writer {
            sources: HashMap::new(),
            names: HashMap::new(),
            with_data: 0,
            serial,
        };
        let first = Self::snapshot_of(&zones, &settings, &writer, NodeMap::default());
        Ok(RecordTable {
            zones,
            settings,
            writer: Mutex::new(writer),
            current: ArcSwap::from_pointee(first),
        })
    }

    /// The zones served, closest (longest) first.
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// The zone settings (TTLs).
    pub fn settings(&self) -> &ZoneSettings {
        &self.settings
    }

    /// The current version. Never blocks.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Replaces everything `source` says with `entries`, and publishes.
    pub fn set_source(&self, source: &str, entries: Vec<(Name, HostRecords)>) -> Result<(), Error> {
        self.update(|batch| batch.set_source(source, entries))
    }

    /// Replaces everything `source` says with `entries` within `limit` (see
    /// [`Batch::set_source_limited`]), and publishes.
    pub fn set_source_limited(
        &self,
        source: &str,
        entries: Vec<(Name, HostRecords)>,
        limit: ShrinkLimit,
    ) -> Result<(), Error> {
        self.update(|batch| batch.set_source_limited(source, entries, limit))
    }

    /// Forgets `source`, and publishes.
    pub fn remove_source(&self, source: &str) {
        self.update(|batch| {
            batch.remove_source(source);
            Ok(())
        })
        .expect("removing a source cannot fail");
    }

    /// What each source says about exactly `name` (no wildcard or CNAME step), sorted by source:
    /// the provenance of an answer, for the agent's admin API. Takes the writer lock for the
    /// length of one lookup; DNS queries never take it.
    pub fn contributions(&self, name: &Name) -> Vec<(String, HostRecords)> {
        let Some(key) = key_of(name) else {
            return Vec::new();
        };
        let writer = self.lock();
        writer
            .names
            .get(&*key)
            .map(|state| {
                state
                    .contributions
                    .iter()
                    .map(|c| {
                        (
                            c.source.to_string(),
                            HostRecords {
                                addresses: c.addresses.to_vec(),
                                cname: c.cname.as_deref().cloned(),
                                ttl: c.ttl,
                                srv: c.srv.to_vec(),
                            },
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Names of the sources that currently contribute records.
    pub fn sources(&self) -> Vec<String> {
        let writer = self.lock();
        let mut names: Vec<String> = writer.sources.keys().map(|s| s.to_string()).collect();
        names.sort();
        names
    }

    /// Applies several changes and publishes once, as one new serial. If `f` fails, the changes it
    /// made before failing are still applied (each call on the batch is atomic on its own).
    pub fn update<T>(
        &self,
        f: impl FnOnce(&mut Batch<'_>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let mut writer = self.lock();
        let mut batch = Batch {
            zones: &self.zones,
            writer: &mut writer,
            touched: HashSet::new(),
        };
        let result = f(&mut batch);
        let touched = std::mem::take(&mut batch.touched);
        if !touched.is_empty() {
            // Only writers touch `current`'s map, and we hold the writer lock: the clone is the
            // latest version. It copies pointers, not records; the old version goes when its
            // last reader does.
            let mut nodes = self.current.load().nodes.clone();
            writer.rebuild(&touched, &mut nodes);
            writer.serial = writer.serial.wrapping_add(1);
            let next = Self::snapshot_of(&self.zones, &self.settings, &writer, nodes);
            let old = self.current.swap(Arc::new(next));
            release(old);
        }
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        // A writer that panicked left the bookkeeping consistent up to its last completed step:
        // keep serving rather than poisoning every later update.
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn snapshot_of(
        zones: &[Zone],
        settings: &ZoneSettings,
        writer: &Writer,
        nodes: NodeMap,
    ) -> Snapshot {
        Snapshot {
            serial: writer.serial,
            ttl: settings.ttl,
            zones: zones
                .iter()
                .enumerate()
                .map(|(index, z)| ZoneEntry {
                    index,
                    key: z.key().into(),
                    apex: z.apex(settings, writer.serial),
                })
                .collect(),
            nodes,
            names: writer.with_data,
        }
    }
}

/// Frees a replaced snapshot on the writer's thread. A query that still holds it would otherwise
/// be the last owner and free it on a serving thread: for a large table, tens of milliseconds
/// added to one unlucky answer. Queries hold a snapshot for microseconds, so a short wait for
/// them is enough; after the wait the snapshot goes its way either way.
fn release(old: Arc<Snapshot>) {
    let started = std::time::Instant::now();
    while Arc::strong_count(&old) > 1 && started.elapsed() < std::time::Duration::from_millis(2) {
        std::thread::yield_now();
    }
    drop(old);
}

/// How much a reload of a source may take away at once. A records file truncated by a half-done
/// copy, or replaced by the wrong one, should not empty the zone: such a reload is refused and
/// the source keeps what it said before.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShrinkLimit {
    /// Whether a source that has names may be replaced by none.
    pub allow_empty: bool,
    /// Largest share (0.0 to 1.0) of a source's names that one reload may remove; 1.0 allows any.
    pub max_removed_share: f64,
}

impl ShrinkLimit {
    /// No limit at all.
    pub const NONE: ShrinkLimit = ShrinkLimit {
        allow_empty: true,
        max_removed_share: 1.0,
    };
}

impl Default for ShrinkLimit {
    /// Refuse an empty reload, and one that removes more than half of the names.
    fn default() -> Self {
        ShrinkLimit {
            allow_empty: false,
            max_removed_share: 0.5,
        }
    }
}

/// Changes made under one lock and published together; see [`RecordTable::update`].
pub struct Batch<'t> {
    zones: &'t [Zone],
    writer: &'t mut Writer,
    touched: HashSet<Key>,
}

impl Batch<'_> {
    /// Replaces everything `source` says. Every name must lie in a served zone; if one does not,
    /// nothing of this source changes and the error names the offenders.
    pub fn set_source(
        &mut self,
        source: &str,
        entries: Vec<(Name, HostRecords)>,
    ) -> Result<(), Error> {
        let keyed = self.keyed(source, entries)?;
        self.apply(source, keyed);
        Ok(())
    }

    /// Like [`Batch::set_source`], but refused with [`Error::EmptyReload`] or
    /// [`Error::TooManyRemoved`] (and nothing changed) when `entries` would take away more of the
    /// source's current names than `limit` allows. A source without names yet is not limited.
    pub fn set_source_limited(
        &mut self,
        source: &str,
        entries: Vec<(Name, HostRecords)>,
        limit: ShrinkLimit,
    ) -> Result<(), Error> {
        let keyed = self.keyed(source, entries)?;
        let current = self.writer.sources.get(source).map_or(&[][..], |k| &k[..]);
        if !current.is_empty() {
            if keyed.is_empty() && !limit.allow_empty {
                return Err(Error::EmptyReload {
                    source_name: source.to_string(),
                    names: current.len(),
                });
            }
            let kept: HashSet<&[u8]> = keyed.iter().map(|(k, _)| &k[..]).collect();
            let removed = current.iter().filter(|k| !kept.contains(&k[..])).count();
            if removed as f64 > limit.max_removed_share * current.len() as f64 {
                return Err(Error::TooManyRemoved {
                    source_name: source.to_string(),
                    removed,
                    names: current.len(),
                    max_share: limit.max_removed_share,
                });
            }
        }
        self.apply(source, keyed);
        Ok(())
    }

    /// The table keys of `entries`; an error naming every name outside the served zones.
    fn keyed(
        &self,
        source: &str,
        entries: Vec<(Name, HostRecords)>,
    ) -> Result<Vec<(Key, HostRecords)>, Error> {
        let mut outside = Vec::new();
        let mut keyed = Vec::with_capacity(entries.len());
        for (name, records) in entries {
            match key_of(&name).filter(|k| self.zone_of(k).is_some()) {
                Some(key) => keyed.push((Key::from(key), records)),
                None => outside.push(name.to_string()),
            }
        }
        if !outside.is_empty() {
            return Err(Error::OutsideZones {
                source_name: source.to_string(),
                names: outside,
            });
        }
        Ok(keyed)
    }

    /// Replaces what `source` says with `keyed` (checked by [`Batch::keyed`]).
    fn apply(&mut self, source: &str, keyed: Vec<(Key, HostRecords)>) {
        self.remove_source(source);
        let source: Arc<str> = Arc::from(source);
        let mut keys = Vec::with_capacity(keyed.len());
        for (key, records) in keyed {
            let zone_len = self.zone_of(&key).map_or(0, |z| z.len());
            let state = self.writer.names.entry(key.clone()).or_default();
            let had_records = !state.contributions.is_empty();
            match state
                .contributions
                .binary_search_by(|c| c.source.cmp(&source))
            {
                // Two entries for one name in one source: merge them rather than drop one.
                Ok(at) => {
                    let existing = &mut state.contributions[at];
                    let mut addresses = std::mem::take(&mut existing.addresses).into_vec();
                    addresses.extend(records.addresses);
                    existing.addresses = addresses.into();
                    if existing.cname.is_none() {
                        existing.cname = records.cname.as_ref().map(|n| Box::new(n.clone()));
                    }
                    existing.ttl = match (existing.ttl, records.ttl) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    if !records.srv.is_empty() {
                        let mut srv = std::mem::take(&mut existing.srv).into_vec();
                        srv.extend(records.srv);
                        existing.srv = srv.into();
                    }
                }
                Err(at) => {
                    let contribution = Contribution {
                        source: source.clone(),
                        // Fresh copies rather than the caller's buffers: those were made while
                        // parsing, among the parser's short-lived garbage, and kept for the life
                        // of the table they would pin its pages (a reload of 150,000 names kept
                        // 80 MB more).
                        addresses: records.addresses.as_slice().into(),
                        cname: records.cname.as_ref().map(|n| Box::new(n.clone())),
                        ttl: records.ttl,
                        srv: records.srv.as_slice().into(),
                    };
                    state.contributions.insert(at, contribution);
                    state.contributions.shrink_to_fit();
                    keys.push(key.clone());
                }
            }
            if !had_records {
                self.writer.with_data += 1;
                self.adjust_ancestors(&key, zone_len, 1);
            }
            self.touched.insert(key);
        }
        if !keys.is_empty() {
            keys.shrink_to_fit();
            self.writer.sources.insert(source, keys);
        }
    }

    /// Forgets everything `source` said.
    pub fn remove_source(&mut self, source: &str) {
        let Some(keys) = self.writer.sources.remove(source) else {
            return;
        };
        for key in keys {
            let zone_len = self.zone_of(&key).map_or(0, |z| z.len());
            let Some(state) = self.writer.names.get_mut(&key) else {
                continue;
            };
            let before = state.contributions.len();
            state.contributions.retain(|c| &*c.source != source);
            if before > 0 && state.contributions.is_empty() {
                self.writer.with_data -= 1;
                self.adjust_ancestors(&key, zone_len, -1);
            }
            self.touched.insert(key);
        }
    }

    /// Forgets every source for which `keep` returns false (used after a full relist).
    pub fn retain_sources(&mut self, keep: impl Fn(&str) -> bool) {
        let gone: Vec<Arc<str>> = self
            .writer
            .sources
            .keys()
            .filter(|s| !keep(s))
            .cloned()
            .collect();
        for source in gone {
            self.remove_source(&source);
        }
    }

    fn zone_of(&self, key: &[u8]) -> Option<&[u8]> {
        self.zones.iter().map(|z| z.key()).find(|z| in_zone(key, z))
    }

    /// Counts a name with records in (+1) or out (-1) of every ancestor below its zone's apex.
    fn adjust_ancestors(&mut self, key: &[u8], zone_len: usize, delta: i32) {
        for ancestor in ancestors(key).filter(|a| a.len() > zone_len) {
            let ancestor: Key = Key::from(ancestor);
            let state = self.writer.names.entry(ancestor.clone()).or_default();
            state.below = state.below.saturating_add_signed(delta);
            self.touched.insert(ancestor);
        }
    }
}

impl Writer {
    /// Rebuilds the reader-visible node of every touched name.
    fn rebuild(&mut self, touched: &HashSet<Key>, nodes: &mut NodeMap) {
        static EMPTY: std::sync::OnceLock<Arc<Node>> = std::sync::OnceLock::new();
        for key in touched {
            let Some(state) = self.names.get(key) else {
                nodes.remove(key);
                continue;
            };
            if !state.contributions.is_empty() {
                let node = Node::build(&state.contributions);
                nodes.insert(key.clone(), Arc::new(node));
            } else if state.below > 0 {
                let empty = EMPTY.get_or_init(|| Arc::new(Node::default())).clone();
                nodes.insert(key.clone(), empty);
            } else {
                nodes.remove(key);
                self.names.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> RecordTable {
        RecordTable::new(
            vec![Zone::new("xcc.test").unwrap()],
            ZoneSettings::default(),
        )
        .unwrap()
    }

    fn hosts(range: std::ops::Range<usize>) -> Vec<(Name, HostRecords)> {
        range
            .map(|i| {
                let name = Name::from_ascii(format!("h{i}.xcc.test.")).unwrap();
                let records = HostRecords {
                    addresses: vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))],
                    cname: None,
                    ttl: None,
                    srv: Vec::new(),
                };
                (name, records)
            })
            .collect()
    }

    #[test]
    fn an_empty_reload_is_refused_and_the_names_stay() {
        let t = table();
        t.set_source_limited("file", hosts(0..10), ShrinkLimit::default())
            .unwrap();
        let serial = t.snapshot().serial();
        let err = t
            .set_source_limited("file", Vec::new(), ShrinkLimit::default())
            .unwrap_err();
        assert!(matches!(err, Error::EmptyReload { names: 10, .. }), "{err}");
        assert_eq!(t.snapshot().len(), 10);
        assert_eq!(t.snapshot().serial(), serial, "nothing published");

        let allow = ShrinkLimit {
            allow_empty: true,
            max_removed_share: 1.0,
        };
        t.set_source_limited("file", Vec::new(), allow).unwrap();
        assert_eq!(t.snapshot().len(), 0);
    }

    #[test]
    fn a_first_load_is_not_limited() {
        let t = table();
        t.set_source_limited("file", Vec::new(), ShrinkLimit::default())
            .unwrap();
        t.set_source_limited("file", hosts(0..3), ShrinkLimit::default())
            .unwrap();
        assert_eq!(t.snapshot().len(), 3);
    }

    #[test]
    fn removing_more_than_the_share_is_refused_up_to_it_allowed() {
        let t = table();
        let limit = ShrinkLimit {
            allow_empty: false,
            max_removed_share: 0.3,
        };
        t.set_source_limited("file", hosts(0..10), limit).unwrap();
        // 4 of 10 removed (and 20 added): over 30%.
        let err = t
            .set_source_limited("file", hosts(4..30), limit)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::TooManyRemoved {
                    removed: 4,
                    names: 10,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(t.snapshot().len(), 10);
        // Exactly 3 of 10: allowed.
        t.set_source_limited("file", hosts(3..30), limit).unwrap();
        assert_eq!(t.snapshot().len(), 27);
        // Other sources are not counted against this one.
        t.set_source("other", hosts(100..200)).unwrap();
        t.set_source_limited("file", hosts(10..30), limit).unwrap();
        assert_eq!(t.snapshot().len(), 120);
    }

    #[test]
    fn a_name_answers_with_its_own_ttl_the_shortest_of_its_sources() {
        let t = table();
        let name = Name::from_ascii("g.gateway.dev-team.global.xcc.test.").unwrap();
        let records = |ip: u8, ttl: Option<u32>| HostRecords {
            addresses: vec![IpAddr::V4(Ipv4Addr::new(192, 0, 2, ip))],
            cname: None,
            ttl,
            srv: Vec::new(),
        };
        t.set_source("a", vec![(name.clone(), records(1, Some(7)))])
            .unwrap();
        let ttls = |t: &RecordTable| -> Vec<u32> {
            t.snapshot()
                .resolve(&name, hickory_proto::rr::RecordType::A)
                .answers
                .iter()
                .map(|r| r.ttl)
                .collect()
        };
        assert_eq!(ttls(&t), [7]);
        t.set_source("b", vec![(name.clone(), records(2, Some(5)))])
            .unwrap();
        assert_eq!(ttls(&t), [5, 5]);
        // A name without one answers with the zone's.
        t.set_source("a", hosts(0..1)).unwrap();
        t.set_source("b", Vec::new()).unwrap();
        let plain = Name::from_ascii("h0.xcc.test.").unwrap();
        let snapshot = t.snapshot();
        let answers = snapshot
            .resolve(&plain, hickory_proto::rr::RecordType::A)
            .answers;
        assert_eq!(answers[0].ttl, ZoneSettings::default().ttl);
    }
}

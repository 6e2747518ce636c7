//! Data-path health of the gateways, as seen from this agent's cluster: which addresses of the
//! slices that carry a health check ([`HEALTH_CHECK_ANNOTATION`]) are in this cluster's answers.
//!
//! The slice index hands every checked slice's records here ([`Health::track`]) instead of to
//! the table; [`Health::write`] puts them in the table without the addresses that failed their
//! check (`failureThreshold` probes in a row, back after `successThreshold`). The prober
//! ([`super::prober`]) reports each probe ([`Health::record`]); the table is rewritten only when
//! an address changes state, never per query: the DNS path reads the same snapshots as before.
//!
//! Per name (the per-cluster name, the global name, each wildcard's base): the addresses that
//! pass, of every checked source answering it. When none passes, the name fails open: it keeps
//! the last set it answered with (every address, if it never answered), said by a log line and
//! the gauge `xcc_agent_gateway_fail_open`. An address not probed yet counts as passing.
//! Host names (FQDN slices) are never probed. Addresses of slices without a check are served as
//! they are and take no part in the choice.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    net::IpAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use xcc_dns::{Batch, HostRecords, RecordTable, proto::rr::Name};
pub use xcc_kube::health_check::{HEALTH_CHECK_ANNOTATION, HealthCheck, HealthCheckError};

/// Longest error text kept per target.
const MAX_ERROR: usize = 200;

/// One address probed with one check.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// The gateway's address.
    pub address: IpAddr,
    /// How it is probed.
    pub check: HealthCheck,
}

impl Target {
    /// `kind://address:port[path]`: the metrics' `target` label and what `/explain` shows.
    pub fn label(&self) -> String {
        let address = match self.address {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        format!(
            "{}://{address}:{}{}",
            self.check.kind.as_str(),
            self.check.port,
            self.check.path.as_deref().unwrap_or_default()
        )
    }
}

/// What a probe found wrong.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProbeError {
    /// No answer within the check's timeout.
    #[error("timed out")]
    Timeout,
    /// The connection was refused.
    #[error("connection refused")]
    Refused,
    /// An HTTP status outside `expectedStatus`.
    #[error("HTTP status {0}")]
    Status(u16),
    /// Anything else (reset, TLS, an answer that is not HTTP).
    #[error("{0}")]
    Other(String),
}

impl ProbeError {
    /// The metrics' `result` label.
    pub fn label(&self) -> &'static str {
        match self {
            ProbeError::Timeout => "timeout",
            ProbeError::Refused => "refused",
            ProbeError::Status(_) => "bad_status",
            ProbeError::Other(_) => "error",
        }
    }
}

/// The probe state of one target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetState {
    /// In the answers: not failed `failureThreshold` times in a row since it last came back.
    pub up: bool,
    /// Probes so far.
    pub probes: u64,
    successes: u32,
    failures: u32,
    /// The last failure, bounded.
    pub last_error: Option<String>,
    /// The duration of the last probe.
    pub last_latency: Option<Duration>,
}

/// A slice's records held back for filtering, with its check.
#[derive(Clone, Debug)]
struct Tracked {
    check: HealthCheck,
    entries: Vec<(Name, HostRecords)>,
}

#[derive(Default)]
struct State {
    sources: BTreeMap<String, Tracked>,
    targets: HashMap<Target, TargetState>,
    /// What each name last answered with while some address passed.
    last_served: HashMap<Name, BTreeSet<IpAddr>>,
    fail_open: BTreeSet<Name>,
    /// What each name answers with now (of the probed addresses).
    served: HashMap<Name, BTreeSet<IpAddr>>,
}

/// A probed gateway address that answers for a name, and why it is in or out of this
/// cluster's answer (`/explain`).
#[derive(Clone, Debug, serde::Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProbedAddress {
    /// The table source (`<ns>/<slice>`) it comes from.
    pub source: String,
    /// The name of the source's entry (the name itself or the wildcard covering it).
    pub owner: String,
    pub address: String,
    /// `kind://address:port[path]`.
    pub target: String,
    /// In this cluster's answer now.
    pub in_answer: bool,
    /// `up`, `down` (failed `failureThreshold` probes in a row) or `unprobed` (not yet).
    pub state: &'static str,
    /// The name's every probed address fails here: it answers with its last healthy set.
    pub fail_open: bool,
    pub probes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_latency_ms: Option<f64>,
}

/// The health of every probed gateway address, and the filter between the checked slices and
/// the table. Shared by the slice index, the prober and `/explain`.
pub struct Health {
    table: Arc<RecordTable>,
    state: Mutex<State>,
    targets_changed: tokio::sync::Notify,
    metrics: Arc<HealthMetrics>,
}

impl Health {
    /// The health of the checked slices written to `table`.
    pub fn new(table: Arc<RecordTable>, metrics: Arc<HealthMetrics>) -> Arc<Health> {
        Arc::new(Health {
            table,
            state: Mutex::new(State::default()),
            targets_changed: tokio::sync::Notify::new(),
            metrics,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `source`'s records, to be written filtered by `check`'s results ([`Health::write`]).
    pub fn track(&self, source: &str, check: HealthCheck, entries: Vec<(Name, HostRecords)>) {
        let mut state = self.lock();
        state
            .sources
            .insert(source.to_string(), Tracked { check, entries });
        self.sync_targets(&mut state);
    }

    /// `source` is no longer filtered here; whether it was.
    pub fn forget(&self, source: &str) -> bool {
        let mut state = self.lock();
        let was = state.sources.remove(source).is_some();
        if was {
            self.sync_targets(&mut state);
        }
        was
    }

    /// Forgets every source `keep` refuses.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut state = self.lock();
        let before = state.sources.len();
        state.sources.retain(|s, _| keep(s));
        if state.sources.len() != before {
            self.sync_targets(&mut state);
        }
    }

    /// Adds the targets of the tracked sources, drops the others (and their series), and wakes
    /// the prober if the set changed.
    fn sync_targets(&self, state: &mut State) {
        let wanted: HashSet<Target> = state
            .sources
            .values()
            .flat_map(|t| {
                t.entries
                    .iter()
                    .flat_map(|(_, r)| r.addresses.iter())
                    .map(|a| Target {
                        address: *a,
                        check: t.check.clone(),
                    })
            })
            .collect();
        let before = state.targets.len();
        state.targets.retain(|t, _| {
            let keep = wanted.contains(t);
            if !keep {
                self.metrics.forget(&t.label());
            }
            keep
        });
        let mut changed = state.targets.len() != before;
        for target in wanted {
            state.targets.entry(target).or_insert_with(|| {
                changed = true;
                TargetState {
                    up: true,
                    ..Default::default()
                }
            });
        }
        self.metrics.targets.set(state.targets.len() as i64);
        if changed {
            self.targets_changed.notify_one();
        }
    }

    /// Every target to probe.
    pub fn targets(&self) -> Vec<Target> {
        let mut out: Vec<Target> = self.lock().targets.keys().cloned().collect();
        out.sort();
        out
    }

    /// Waits until the set of targets may have changed since the last wait.
    pub async fn targets_changed(&self) {
        self.targets_changed.notified().await;
    }

    /// The probed addresses answering for `name` (its own entries, or a wildcard's that covers
    /// it), at most `limit`.
    pub fn explain(&self, name: &Name, limit: usize) -> Vec<ProbedAddress> {
        let state = self.lock();
        let mut out = Vec::new();
        for (source, tracked) in &state.sources {
            for (owner, records) in &tracked.entries {
                let covers = owner == name
                    || (owner.is_wildcard()
                        && owner.base_name().zone_of(name)
                        && owner.base_name() != *name);
                if !covers {
                    continue;
                }
                for address in &records.addresses {
                    let target = Target {
                        address: *address,
                        check: tracked.check.clone(),
                    };
                    let probe = state.targets.get(&target).cloned().unwrap_or_default();
                    out.push(ProbedAddress {
                        source: source.clone(),
                        owner: owner.to_string(),
                        address: address.to_string(),
                        target: target.label(),
                        in_answer: state.served.get(owner).is_some_and(|s| s.contains(address)),
                        state: match (probe.probes, probe.up) {
                            (0, _) => "unprobed",
                            (_, true) => "up",
                            (_, false) => "down",
                        },
                        fail_open: state.fail_open.contains(owner),
                        probes: probe.probes,
                        last_error: probe.last_error,
                        last_latency_ms: probe.last_latency.map(|l| l.as_secs_f64() * 1000.0),
                    });
                    if out.len() == limit {
                        return out;
                    }
                }
            }
        }
        out
    }

    /// The names answered fail-open now.
    #[cfg(test)]
    pub fn failing_open(&self) -> Vec<Name> {
        self.lock().fail_open.iter().cloned().collect()
    }

    /// Records one probe of `target` (`latency`: how long it took); rewrites the table when the
    /// target changed state. Whether it did.
    pub fn record(
        &self,
        target: &Target,
        result: Result<(), ProbeError>,
        latency: Duration,
    ) -> bool {
        let label = target.label();
        self.metrics.observe(&label, result.as_ref().err(), latency);
        let flipped = {
            let mut state = self.lock();
            let Some(target_state) = state.targets.get_mut(target) else {
                return false;
            };
            let flipped = target_state.observe(&target.check, result, latency);
            self.metrics.set_up(&label, target_state.up);
            if let Some(up) = flipped {
                tracing::info!(
                    target = %label,
                    up,
                    error = target_state.last_error.as_deref().unwrap_or_default(),
                    "gateway health changed as seen from this cluster"
                );
            }
            flipped.is_some()
        };
        if flipped {
            self.refresh();
        }
        flipped
    }

    /// Rewrites every tracked source in the table, filtered.
    pub fn refresh(&self) {
        let result = self.table.update(|batch| {
            self.write(batch);
            Ok(())
        });
        if let Err(error) = result {
            tracing::warn!(error = %xcc_kube::bounded(&error), "cannot rewrite the probed gateways' records");
        }
    }

    /// Writes every tracked source into `batch`, without the addresses that fail.
    pub fn write(&self, batch: &mut Batch<'_>) {
        let mut state = self.lock();
        let filtered = state.filtered();
        self.metrics.fail_open.set(state.fail_open.len() as i64);
        drop(state);
        for (source, entries) in filtered {
            if let Err(error) = batch.set_source(&source, entries) {
                tracing::warn!(%source, error = %xcc_kube::bounded(&error), "cannot write a probed gateway's records");
            }
        }
    }
}

impl TargetState {
    /// Counts one probe; `Some(up)` when it changed state.
    fn observe(
        &mut self,
        check: &HealthCheck,
        result: Result<(), ProbeError>,
        latency: Duration,
    ) -> Option<bool> {
        self.probes += 1;
        self.last_latency = Some(latency);
        match result {
            Ok(()) => {
                self.failures = 0;
                self.successes = self.successes.saturating_add(1);
                if !self.up && self.successes >= check.success_threshold {
                    self.up = true;
                    return Some(true);
                }
            }
            Err(error) => {
                self.successes = 0;
                self.failures = self.failures.saturating_add(1);
                self.last_error = Some(xcc_kube::bounded(&error).chars().take(MAX_ERROR).collect());
                if self.up && self.failures >= check.failure_threshold {
                    self.up = false;
                    return Some(false);
                }
            }
        }
        None
    }
}

impl State {
    /// Every tracked source's entries without the addresses left out of their name's answer;
    /// updates the last served sets and the fail-open names.
    fn filtered(&mut self) -> Vec<(String, Vec<(Name, HostRecords)>)> {
        // Per name: every address, and those that pass.
        let mut all: BTreeMap<Name, (BTreeSet<IpAddr>, BTreeSet<IpAddr>)> = BTreeMap::new();
        for tracked in self.sources.values() {
            for (name, records) in &tracked.entries {
                let (every, passing) = all.entry(name.clone()).or_default();
                for address in &records.addresses {
                    every.insert(*address);
                    let target = Target {
                        address: *address,
                        check: tracked.check.clone(),
                    };
                    if self.targets.get(&target).is_none_or(|s| s.up) {
                        passing.insert(*address);
                    }
                }
            }
        }
        let mut served: HashMap<Name, BTreeSet<IpAddr>> = HashMap::new();
        let mut fail_open = BTreeSet::new();
        for (name, (every, passing)) in all {
            let answer = if every.is_empty() || !passing.is_empty() {
                passing
            } else {
                fail_open.insert(name.clone());
                let last: BTreeSet<IpAddr> = self
                    .last_served
                    .get(&name)
                    .map(|l| l.intersection(&every).copied().collect())
                    .unwrap_or_default();
                if last.is_empty() { every } else { last }
            };
            served.insert(name, answer);
        }
        for name in fail_open.difference(&self.fail_open) {
            tracing::warn!(name = %name, addresses = ?served.get(name), "every probed gateway of this name fails from this cluster; answering with the last healthy set (fail-open)");
        }
        for name in self.fail_open.difference(&fail_open) {
            tracing::info!(name = %name, "a probed gateway of this name passes again; no longer failing open");
        }
        self.fail_open = fail_open;
        for (name, answer) in &served {
            if !self.fail_open.contains(name) && !answer.is_empty() {
                self.last_served.insert(name.clone(), answer.clone());
            }
        }
        self.last_served.retain(|name, _| served.contains_key(name));
        self.served.clone_from(&served);
        self.sources
            .iter()
            .map(|(source, tracked)| {
                let entries = tracked
                    .entries
                    .iter()
                    .filter_map(|(name, records)| {
                        let mut records = records.clone();
                        let keep = &served[name];
                        let had = !records.addresses.is_empty();
                        records.addresses.retain(|a| keep.contains(a));
                        let empty = had
                            && records.addresses.is_empty()
                            && records.srv.is_empty()
                            && records.cname.is_none();
                        (!empty).then(|| (name.clone(), records))
                    })
                    .collect();
                (source.clone(), entries)
            })
            .collect()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabels {
    target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeLabels {
    target: String,
    result: &'static str,
}

/// The prober's series (`xcc_agent_gateway_*`).
pub struct HealthMetrics {
    probes: Family<ProbeLabels, Counter>,
    durations: Family<TargetLabels, Histogram>,
    up: Family<TargetLabels, Gauge>,
    targets: Gauge,
    fail_open: Gauge,
}

const PROBE_RESULTS: [&str; 5] = ["ok", "timeout", "refused", "bad_status", "error"];

fn probe_histogram() -> Histogram {
    Histogram::new([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0])
}

impl HealthMetrics {
    /// Registers the series in `registry` (the agent's, prefix `xcc`).
    pub fn register(registry: &mut Registry) -> HealthMetrics {
        let metrics = HealthMetrics {
            probes: Family::default(),
            durations: Family::new_with_constructor(probe_histogram),
            up: Family::default(),
            targets: Gauge::default(),
            fail_open: Gauge::default(),
        };
        registry.register(
            "agent_gateway_probes",
            "Health-check probes of gateway addresses from this cluster (spec.healthCheck), by \
             target (kind://address:port[path]) and result (ok, timeout, refused, bad_status, \
             error)",
            metrics.probes.clone(),
        );
        registry.register(
            "agent_gateway_probe_duration_seconds",
            "Time one health-check probe took, by target",
            metrics.durations.clone(),
        );
        registry.register(
            "agent_gateway_up",
            "Whether a probed gateway address is in this cluster's answers (1) or left out \
             after failing failureThreshold probes in a row (0), by target",
            metrics.up.clone(),
        );
        registry.register(
            "agent_gateway_probe_targets",
            "Gateway addresses probed from this cluster (0: no slice carries a health check)",
            metrics.targets.clone(),
        );
        registry.register(
            "agent_gateway_fail_open",
            "Names whose every probed gateway fails from this cluster, answered with their last \
             healthy set (fail-open)",
            metrics.fail_open.clone(),
        );
        metrics
    }

    fn observe(&self, target: &str, error: Option<&ProbeError>, latency: Duration) {
        let result = error.map_or("ok", ProbeError::label);
        self.probes
            .get_or_create(&ProbeLabels {
                target: target.to_string(),
                result,
            })
            .inc();
        self.durations
            .get_or_create(&TargetLabels {
                target: target.to_string(),
            })
            .observe(latency.as_secs_f64());
    }

    fn set_up(&self, target: &str, up: bool) {
        self.up
            .get_or_create(&TargetLabels {
                target: target.to_string(),
            })
            .set(i64::from(up));
    }

    /// A series in every per-target family (for the generated reference).
    #[cfg(test)]
    pub fn touch_every_family(&self) {
        self.observe("tcp://192.0.2.1:443", None, Duration::ZERO);
        self.set_up("tcp://192.0.2.1:443", true);
    }

    fn forget(&self, target: &str) {
        let labels = TargetLabels {
            target: target.to_string(),
        };
        self.up.remove(&labels);
        self.durations.remove(&labels);
        for result in PROBE_RESULTS {
            self.probes.remove(&ProbeLabels {
                target: target.to_string(),
                result,
            });
        }
    }
}

#[cfg(test)]
mod tests;

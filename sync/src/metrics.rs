//! Metrics of the sync core: each watch source's state per cluster, kind and namespace, and each
//! reconciler's work (queue, reconciles, their duration, writes).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, atomic::AtomicU64},
    time::{Duration, SystemTime},
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    cluster: String,
    kind: String,
    /// The one namespace watched; empty for a watch of every namespace. Not `namespace`: a
    /// scrape by the Prometheus Operator labels every series with the pod's namespace.
    watch_namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchStateLabels {
    cluster: String,
    kind: String,
    watch_namespace: String,
    state: &'static str,
}

impl WatchLabels {
    fn with_state(&self, state: &'static str) -> WatchStateLabels {
        WatchStateLabels {
            cluster: self.cluster.clone(),
            kind: self.kind.clone(),
            watch_namespace: self.watch_namespace.clone(),
            state,
        }
    }
}

/// The states of a watch, the `state` label of `xcc_sync_watch_state`: exactly one is 1.
pub const WATCH_STATES: [&str; 7] = [
    "listing",
    "synced",
    "forbidden",
    "unauthorized",
    "not_found",
    "unreachable",
    "failing",
];

/// The states from worst to best: the series of several watches with the same labels (one kind
/// of one cluster and namespace watched twice, with two field selectors or two clients) says
/// the worst of their states. A refusal needs the operator (credentials, RBAC, CRDs), no answer
/// may heal by itself, and a watch still listing is better than a failed one.
const WORST_FIRST: [&str; 7] = [
    "unauthorized",
    "forbidden",
    "not_found",
    "unreachable",
    "failing",
    "listing",
    "synced",
];

fn badness(state: &str) -> usize {
    WORST_FIRST.len() - WORST_FIRST.iter().position(|s| *s == state).unwrap_or(0)
}

/// What one running watch last reported.
struct WatchEntry {
    state: &'static str,
    /// Unix time of its last contact, if it had one.
    contact: Option<f64>,
}

/// The running watches, by the labels of their series.
#[derive(Default)]
struct Watches {
    next: u64,
    running: HashMap<WatchLabels, BTreeMap<u64, WatchEntry>>,
}

/// The state of a watch whose list or watch request failed with `error`: the API server's
/// refusals (403, 401, 404 for a kind it does not serve) apart from a network fault (no answer)
/// and any other failure.
pub fn failed_watch_state(error: &kube::runtime::watcher::Error) -> &'static str {
    use kube::runtime::watcher::Error as W;
    let code = match error {
        W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => match e {
            kube::Error::Api(status) => Some(status.code),
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
                return "unreachable";
            }
            _ => None,
        },
        W::WatchError(status) => Some(status.code),
        W::NoResourceVersion => None,
    };
    match code {
        Some(403) => "forbidden",
        Some(401) => "unauthorized",
        Some(404) => "not_found",
        _ => "failing",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcilerLabels {
    reconciler: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    reconciler: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    reconciler: &'static str,
    error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    reconciler: &'static str,
    verb: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    reconciler: &'static str,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProxyLabels {
    link: String,
    verb: &'static str,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LinkLabels {
    link: String,
}

fn duration_histogram() -> Histogram {
    // 1 ms .. ~33 s.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        1e-3, 2.0, 16,
    ))
}

/// Cheap to clone: every clone counts into the same metrics.
#[derive(Clone)]
pub struct SyncMetrics {
    watches: Arc<Mutex<Watches>>,
    watch_state: Family<WatchStateLabels, Gauge>,
    watch_errors: Family<WatchLabels, Counter>,
    watch_contact: Family<WatchLabels, Gauge<f64, AtomicU64>>,
    peer_answers: Family<ServerLabels, Gauge>,
    queue: Family<ReconcilerLabels, Gauge>,
    reconciles: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    duration: Family<ReconcilerLabels, Histogram>,
    writes: Family<WriteLabels, Counter>,
    churning: Family<KindLabels, Counter>,
    proxy_requests: Family<ProxyLabels, Counter>,
    proxy_upstream: Family<LinkLabels, Histogram>,
}

impl SyncMetrics {
    /// The metrics, registered in `registry` under `xcc_sync_` (every series of the help
    /// text present from the start).
    #[expect(
        clippy::too_many_lines,
        reason = "the registration list of every sync series, each with its help text, in the order /metrics shows them"
    )]
    pub fn register(registry: &mut Registry) -> SyncMetrics {
        let metrics = SyncMetrics {
            watches: Arc::default(),
            watch_state: Family::default(),
            watch_errors: Family::default(),
            watch_contact: Family::default(),
            peer_answers: Family::default(),
            queue: Family::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            writes: Family::default(),
            churning: Family::default(),
            proxy_requests: Family::default(),
            proxy_upstream: Family::new_with_constructor(duration_histogram),
        };
        registry.register(
            "sync_watch_state",
            "State of each watch per cluster (local or the peer's Cluster name), kind and \
             watch_namespace (the namespace watched; empty for every namespace): 1 for its current state, 0 for \
             the others (listing: first list pending; synced; forbidden, unauthorized: the API \
             server refused with 403, 401; not_found: the kind is not served; unreachable: no \
             answer; failing: any other failure); several watches with the same labels show \
             the worst of their states; the series go when the last such watch stops",
            metrics.watch_state.clone(),
        );
        registry.register(
            "sync_watch_errors",
            "Failed list or watch requests per cluster, kind and watch_namespace",
            metrics.watch_errors.clone(),
        );
        registry.register(
            "sync_watch_last_contact_timestamp_seconds",
            "Unix time of the last list or watch event received per cluster, kind and \
             watch_namespace (by any of the watches with the same labels)",
            metrics.watch_contact.clone(),
        );
        registry.register(
            "sync_peer_answers",
            "Whether each peer API server in use answered its last probe (GET /version, \
             every 5 s, 3 s deadline): 1 yes, 0 silent",
            metrics.peer_answers.clone(),
        );
        registry.register(
            "sync_queue_depth",
            "Objects waiting to be reconciled, per reconciler",
            metrics.queue.clone(),
        );
        registry.register(
            "sync_reconciles",
            "Reconciles per reconciler and result",
            metrics.reconciles.clone(),
        );
        registry.register(
            "sync_reconcile_errors",
            "Failed reconciles per reconciler and kind of error, a fixed set: unauthorized, \
             forbidden, not_found, conflict, invalid (the API server answered 401, 403, 404, \
             409, 422), api (another refusal), unreachable (no answer), kube (a failure on this \
             side), finalizer, encode, certificate",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "sync_reconcile_duration_seconds",
            "Time of one reconcile, per reconciler",
            metrics.duration.clone(),
        );
        registry.register(
            "sync_writes",
            "Writes to the local cluster per reconciler and verb (apply, create, replace, patch, status, delete)",
            metrics.writes.clone(),
        );
        registry.register(
            "sync_churning_objects",
            "Objects written more than 5 times within a minute, per reconciler and kind; an \
             object is counted again each minute it goes on (its Warning Event is Churn)",
            metrics.churning.clone(),
        );
        registry.register(
            "projection_proxy_requests",
            "Requests answered by the aggregated API server of API projection, per \
             DownstreamClusterLink (namespace/name; empty before one is known), verb and code",
            metrics.proxy_requests.clone(),
        );
        registry.register(
            "projection_proxy_upstream_seconds",
            "Time until the service cluster answered a forwarded request with its headers, per \
             DownstreamClusterLink",
            metrics.proxy_upstream.clone(),
        );
        metrics
    }

    /// The aggregated API server answered `code` to a `verb` request for `link`.
    pub fn proxy_request(&self, link: &str, verb: &'static str, code: u16) {
        self.proxy_requests
            .get_or_create(&ProxyLabels {
                link: link.to_string(),
                verb,
                code: code.to_string(),
            })
            .inc();
    }

    /// The service cluster of `link` answered a forwarded request after `took`.
    pub fn proxy_upstream(&self, link: &str, took: Duration) {
        self.proxy_upstream
            .get_or_create(&LinkLabels {
                link: link.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// The series of one watch of `kind` on `cluster`, in `namespace` (`None`: every
    /// namespace), from now until the handle is dropped; it starts listing. Several watches with
    /// the same labels share their series (the worst state, the latest contact, the sum of
    /// errors); the series are removed when the last of them is dropped.
    pub fn watch(&self, cluster: &str, kind: &str, namespace: Option<&str>) -> WatchSeries {
        let labels = WatchLabels {
            cluster: cluster.to_string(),
            kind: kind.to_string(),
            watch_namespace: namespace.unwrap_or_default().to_string(),
        };
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        watches.next += 1;
        let id = watches.next;
        watches.running.entry(labels.clone()).or_default().insert(
            id,
            WatchEntry {
                state: "listing",
                contact: None,
            },
        );
        self.show(&watches, &labels);
        WatchSeries {
            metrics: self.clone(),
            labels,
            id,
        }
    }

    /// Sets the series of `labels` from the watches running with them, or removes them when
    /// none is left. Called under the lock of `watches`, so that the series follow the watches'
    /// reports in order.
    fn show(&self, watches: &Watches, labels: &WatchLabels) {
        let Some(running) = watches.running.get(labels).filter(|r| !r.is_empty()) else {
            for state in WATCH_STATES {
                self.watch_state.remove(&labels.with_state(state));
            }
            self.watch_errors.remove(labels);
            self.watch_contact.remove(labels);
            return;
        };
        let worst = running
            .values()
            .map(|w| w.state)
            .max_by_key(|state| badness(state))
            .unwrap_or("listing");
        for state in WATCH_STATES {
            self.watch_state
                .get_or_create(&labels.with_state(state))
                .set(i64::from(state == worst));
        }
        // The latest: an idle watch hears nothing for as long as nothing changes, so its old
        // contact says nothing of the other's progress.
        match running.values().filter_map(|w| w.contact).reduce(f64::max) {
            Some(latest) => {
                self.watch_contact.get_or_create(labels).set(latest);
            }
            None => {
                self.watch_contact.remove(labels);
            }
        }
    }

    /// Changes what the watch `id` of `labels` reports, and its series.
    fn report(&self, labels: &WatchLabels, id: u64, change: impl FnOnce(&mut WatchEntry)) {
        let mut watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = watches
            .running
            .get_mut(labels)
            .and_then(|running| running.get_mut(&id))
        {
            change(entry);
        }
        self.show(&watches, labels);
    }

    /// One series of every family (placeholder label values), for the metrics reference (the
    /// test that generates `docs/metrics.md` in the binaries that export these series).
    pub fn touch_every_family(&self) {
        let series = self.watch("<cluster>", "<kind>", Some("<namespace>"));
        series.state("synced");
        series.error();
        series.contact();
        // Kept: the reference lists the series of a running watch.
        std::mem::forget(series);
        self.peer_reach([("<server>", true)]);
        self.queue_depth("<reconciler>", 0);
        self.reconciled("<reconciler>", true, Duration::ZERO);
        self.reconcile_failed("<reconciler>", "<error>");
        self.wrote("<reconciler>", "apply");
        self.churning("<reconciler>", "<kind>");
        self.proxy_request("<link>", "get", 200);
        self.proxy_upstream("<link>", Duration::ZERO);
    }

    /// The prober's last round: `answers` per server URL; servers no longer in use are dropped.
    pub fn peer_reach<'a>(&self, answers: impl IntoIterator<Item = (&'a str, bool)>) {
        let answers: Vec<(ServerLabels, bool)> = answers
            .into_iter()
            .map(|(server, yes)| {
                (
                    ServerLabels {
                        server: server.into(),
                    },
                    yes,
                )
            })
            .collect();
        // No way to list a family's labels: clear it and set the servers of this round.
        self.peer_answers.clear();
        for (labels, yes) in answers {
            self.peer_answers.get_or_create(&labels).set(i64::from(yes));
        }
    }

    /// `reconciler` has `depth` objects waiting for a reconcile.
    pub fn queue_depth(&self, reconciler: &'static str, depth: usize) {
        self.queue
            .get_or_create(&ReconcilerLabels { reconciler })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// One reconcile of `reconciler` ended (`ok` or not) after `took`.
    pub fn reconciled(&self, reconciler: &'static str, ok: bool, took: Duration) {
        let result = if ok { "ok" } else { "error" };
        self.reconciles
            .get_or_create(&ResultLabels { reconciler, result })
            .inc();
        self.duration
            .get_or_create(&ReconcilerLabels { reconciler })
            .observe(took.as_secs_f64());
    }

    /// A reconcile of `reconciler` failed with an error of kind `error` (its
    /// [`ReconcileError::metric_label`](crate::kit::ReconcileError::metric_label)).
    pub fn reconcile_failed(&self, reconciler: &'static str, error: &'static str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels { reconciler, error })
            .inc();
    }

    /// `reconciler` made one write of `verb` (apply, create, patch, delete, status) through the
    /// sink.
    pub fn wrote(&self, reconciler: &'static str, verb: &'static str) {
        self.writes
            .get_or_create(&WriteLabels { reconciler, verb })
            .inc();
    }

    /// An object of `kind` was written more than 5 times within a minute.
    pub fn churning(&self, reconciler: &'static str, kind: &str) {
        self.churning
            .get_or_create(&KindLabels {
                reconciler,
                kind: kind.to_string(),
            })
            .inc();
    }
}

/// The series of one running watch ([`SyncMetrics::watch`]); dropping it says the watch
/// stopped.
pub struct WatchSeries {
    metrics: SyncMetrics,
    labels: WatchLabels,
    id: u64,
}

impl WatchSeries {
    /// The watch is in `state` (one of [`WATCH_STATES`]).
    pub fn state(&self, state: &'static str) {
        self.metrics
            .report(&self.labels, self.id, |entry| entry.state = state);
    }

    /// A list or watch request of the watch failed once.
    pub fn error(&self) {
        self.metrics.watch_errors.get_or_create(&self.labels).inc();
    }

    /// The watch heard from its API server now.
    pub fn contact(&self) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.metrics
            .report(&self.labels, self.id, |entry| entry.contact = Some(now));
    }
}

impl Drop for WatchSeries {
    fn drop(&mut self) {
        let mut watches = self
            .metrics
            .watches
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(running) = watches.running.get_mut(&self.labels) {
            running.remove(&self.id);
            if running.is_empty() {
                watches.running.remove(&self.labels);
            }
        }
        self.metrics.show(&watches, &self.labels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_told_apart_from_a_network_fault() {
        use kube::runtime::watcher::Error as W;
        let status = |code| {
            kube::Error::Api(
                kube::core::Status::failure("no", "Forbidden")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert_eq!(
            failed_watch_state(&W::InitialListFailed(status(403))),
            "forbidden"
        );
        assert_eq!(
            failed_watch_state(&W::WatchStartFailed(status(401))),
            "unauthorized"
        );
        assert_eq!(
            failed_watch_state(&W::InitialListFailed(status(404))),
            "not_found"
        );
        assert_eq!(failed_watch_state(&W::WatchFailed(status(500))), "failing");
        let refused: tower::BoxError =
            Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(
            failed_watch_state(&W::InitialListFailed(kube::Error::Service(refused))),
            "unreachable"
        );
    }

    #[test]
    fn watches_and_reconcilers_are_counted_by_their_labels() {
        let mut registry = Registry::with_prefix("xcc");
        let metrics = SyncMetrics::register(&mut registry);
        let peer = metrics.watch("cluster-b", "Secret", None);
        peer.state("forbidden");
        peer.error();
        let local = metrics.watch("local", "Secret", Some("xcc-dns"));
        local.contact();
        metrics.queue_depth("resource-sync", 7);
        metrics.reconciled("resource-sync", true, Duration::from_millis(3));
        metrics.wrote("resource-sync", "apply");
        metrics.churning("resource-sync", "Secret");
        metrics.peer_reach([("https://gone:6443/", true)]);
        metrics.peer_reach([("https://a:6443/", true), ("https://b:6443/", false)]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"xcc_sync_watch_state{cluster="cluster-b",kind="Secret",watch_namespace="",state="forbidden"} 1"#,
            r#"xcc_sync_watch_state{cluster="cluster-b",kind="Secret",watch_namespace="",state="listing"} 0"#,
            r#"xcc_sync_watch_state{cluster="cluster-b",kind="Secret",watch_namespace="",state="unreachable"} 0"#,
            r#"xcc_sync_watch_errors_total{cluster="cluster-b",kind="Secret",watch_namespace=""} 1"#,
            r#"xcc_sync_queue_depth{reconciler="resource-sync"} 7"#,
            r#"xcc_sync_reconciles_total{reconciler="resource-sync",result="ok"} 1"#,
            r#"xcc_sync_reconcile_duration_seconds_count{reconciler="resource-sync"} 1"#,
            r#"xcc_sync_writes_total{reconciler="resource-sync",verb="apply"} 1"#,
            r#"xcc_sync_churning_objects_total{reconciler="resource-sync",kind="Secret"} 1"#,
            r#"xcc_sync_peer_answers{server="https://a:6443/"} 1"#,
            r#"xcc_sync_peer_answers{server="https://b:6443/"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        assert!(
            !text.contains("gone"),
            "a server no longer in use is dropped"
        );
        assert!(text.contains(
            r#"xcc_sync_watch_last_contact_timestamp_seconds{cluster="local",kind="Secret",watch_namespace="xcc-dns"}"#
        ));
    }

    #[test]
    fn watches_with_the_same_labels_show_the_worst_state_until_the_last_one_stops() {
        let mut registry = Registry::with_prefix("xcc");
        let metrics = SyncMetrics::register(&mut registry);
        let text = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
            text
        };
        let at_one = |registry: &Registry| -> Vec<String> {
            text(registry)
                .lines()
                .filter(|l| l.starts_with("xcc_sync_watch_state{") && l.ends_with(" 1"))
                .map(str::to_string)
                .collect()
        };
        let line = |state: &str| {
            format!(
                r#"xcc_sync_watch_state{{cluster="local",kind="Secret",watch_namespace="",state="{state}"}} 1"#
            )
        };
        // Two watches of local Secrets in every namespace (two field selectors).
        let tls = metrics.watch("local", "Secret", None);
        let opaque = metrics.watch("local", "Secret", None);
        tls.state("synced");
        tls.contact();
        opaque.state("forbidden");
        assert_eq!(at_one(&registry), [line("forbidden")], "the worst wins");
        opaque.state("synced");
        assert_eq!(at_one(&registry), [line("synced")]);
        opaque.state("unreachable");
        drop(opaque);
        assert_eq!(at_one(&registry), [line("synced")], "the one left says");
        drop(tls);
        assert!(
            !text(&registry).contains("xcc_sync_watch_state{"),
            "no watch left, no series: {}",
            text(&registry)
        );
        assert!(!text(&registry).contains("last_contact_timestamp_seconds{"));
    }
}

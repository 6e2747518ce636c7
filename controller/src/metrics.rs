//! Prometheus metrics of the controller (OpenMetrics text on `/metrics`): reconciles by result
//! (the error's metric label on failure), their duration, and the state of every selected
//! cluster of every GatewayDNS, so that an operator can alert on `KubeconfigRejected` or
//! `Unreachable` without reading statuses. Beside them, `xcc_build_info` and the `process_*`
//! metrics; `docs/metrics.md` is generated from this registry (`metrics_reference` test).

use std::time::Duration;

use dashmap::{DashMap, mapref::entry::Entry};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    gatewaydns: String,
    cluster: String,
    state: String,
}

pub struct Metrics {
    registry: Registry,
    reconciles: Family<ReconcileLabels, Counter>,
    duration: Histogram,
    clusters: Family<ClusterLabels, Gauge>,
    /// The label sets last set per GatewayDNS, so that a cluster that changed state or left the
    /// selection stops being reported under its old labels. Concurrent reconciles write it.
    reported: DashMap<String, Vec<ClusterLabels>>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut root = Registry::default();
        xcc_kube::metrics::register_common(&mut root, "xcc", env!("CARGO_PKG_VERSION"));
        let registry = root.sub_registry_with_prefix("xcc_controller");
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        registry.register(
            "reconciles",
            "GatewayDNS reconciles, by result (ok or the error kind)",
            reconciles.clone(),
        );
        // A successful reconcile's series from the start.
        let _ = reconciles.get_or_create(&ReconcileLabels { result: "ok" });
        // 1 ms .. ~16 s: one reconcile asks every selected cluster.
        let duration = Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
            0.001, 2.0, 15,
        ));
        registry.register(
            "reconcile_duration_seconds",
            "Time of one GatewayDNS reconcile",
            duration.clone(),
        );
        let clusters = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "cluster_state",
            "1 for the current state of each selected cluster of each GatewayDNS (Published, Unreachable, KubeconfigRejected, ...)",
            clusters.clone(),
        );
        Metrics {
            registry: root,
            reconciles,
            duration,
            clusters,
            reported: DashMap::new(),
        }
    }

    /// One reconcile ended after `elapsed`; `error` is the error's metric label on failure.
    pub fn reconciled(&self, elapsed: Duration, error: Option<&'static str>) {
        let result = error.unwrap_or("ok");
        self.reconciles
            .get_or_create(&ReconcileLabels { result })
            .inc();
        self.duration.observe(elapsed.as_secs_f64());
    }

    /// The states of the clusters of GatewayDNS `gatewaydns` (`namespace/name`); `None` when it
    /// is gone.
    pub fn cluster_states<'a>(
        &self,
        gatewaydns: &str,
        states: Option<impl Iterator<Item = (&'a str, &'a str)>>,
    ) {
        let now: Option<Vec<ClusterLabels>> = states.map(|states| {
            states
                .map(|(cluster, state)| ClusterLabels {
                    gatewaydns: gatewaydns.to_string(),
                    cluster: cluster.to_string(),
                    state: state.to_string(),
                })
                .collect()
        });
        let publish = |now: &[ClusterLabels]| {
            for labels in now {
                self.clusters.get_or_create(labels).set(1);
            }
        };
        // The GatewayDNS's entry is held while its series change, so that two updates of one
        // GatewayDNS cannot interleave.
        match (self.reported.entry(gatewaydns.to_string()), now) {
            (Entry::Occupied(mut reported), now) => {
                for old in reported.get() {
                    self.clusters.remove(old);
                }
                match now {
                    Some(now) => {
                        publish(&now);
                        reported.insert(now);
                    }
                    None => {
                        reported.remove();
                    }
                }
            }
            (Entry::Vacant(vacant), Some(now)) => {
                publish(&now);
                vacant.insert(now);
            }
            (Entry::Vacant(_), None) => {}
        }
    }

    /// OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/metrics.md`'s controller section is this registry's (`XCC_REGENERATE=1` rewrites it).
    #[test]
    fn metrics_reference() {
        let metrics = Metrics::new();
        metrics.cluster_states(
            "<namespace>/<gatewaydns>",
            Some([("<cluster>", "<state>")].into_iter()),
        );
        let section = xcc_kube::metrics::reference_section(&metrics.encode()).unwrap();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md");
        xcc_kube::metrics::check_generated_section(path, "xcc-controller", &section).unwrap();
    }

    #[test]
    fn a_fresh_controller_serves_build_process_and_reconcile_series() {
        let text = Metrics::new().encode();
        for line in [
            "xcc_build_info{version=",
            "process_start_time_seconds ",
            "process_resident_memory_bytes ",
            "xcc_controller_reconciles_total{result=\"ok\"} 0",
            "xcc_controller_reconcile_duration_seconds_count 0",
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
    }

    #[test]
    fn reconciles_and_cluster_states_are_exported_and_old_states_withdrawn() {
        let metrics = Metrics::new();
        metrics.reconciled(Duration::from_millis(3), None);
        metrics.reconciled(Duration::from_millis(3), Some("kube"));
        metrics.cluster_states(
            "dev-team/gw",
            Some(
                [
                    ("cluster-a", "Published"),
                    ("cluster-b", "KubeconfigRejected"),
                ]
                .into_iter(),
            ),
        );
        let text = metrics.encode();
        assert!(
            text.contains("xcc_controller_reconciles_total{result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("xcc_controller_reconciles_total{result=\"kube\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "xcc_controller_cluster_state{gatewaydns=\"dev-team/gw\",cluster=\"cluster-b\",state=\"KubeconfigRejected\"} 1"
            ),
            "{text}"
        );
        // cluster-b fixed, cluster-a gone from the selection.
        metrics.cluster_states(
            "dev-team/gw",
            Some([("cluster-b", "Published")].into_iter()),
        );
        let text = metrics.encode();
        assert!(!text.contains("state=\"KubeconfigRejected\""), "{text}");
        assert!(!text.contains("cluster=\"cluster-a\""), "{text}");
        metrics.cluster_states("dev-team/gw", None::<std::iter::Empty<(&str, &str)>>);
        assert!(!metrics.encode().contains("cluster=\"cluster-b\""));
    }
}

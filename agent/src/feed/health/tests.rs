use super::*;
use xcc_dns::{Zone, ZoneSettings, proto::rr::RecordType};
use xcc_kube::health_check::ProbeKind;

const GLOBAL: &str = "gateway.dev-team.global.xcc.test.";

fn check() -> HealthCheck {
    HealthCheck {
        kind: ProbeKind::Tcp,
        port: 443,
        path: None,
        host: None,
        expected_status: (200, 399),
        interval_ms: 250,
        timeout_ms: 200,
        failure_threshold: 2,
        success_threshold: 3,
    }
}

fn setup() -> (Arc<RecordTable>, Arc<Health>) {
    let table = Arc::new(
        RecordTable::new(
            vec![Zone::new("xcc.test").unwrap()],
            ZoneSettings::default(),
        )
        .unwrap(),
    );
    let mut registry = Registry::default();
    let metrics = Arc::new(HealthMetrics::register(&mut registry));
    let health = Health::new(table.clone(), metrics);
    (table, health)
}

fn entries(name: &str, ips: &[&str]) -> Vec<(Name, HostRecords)> {
    vec![(
        Name::from_ascii(name).unwrap(),
        HostRecords {
            addresses: ips.iter().map(|a| a.parse().unwrap()).collect(),
            ..Default::default()
        },
    )]
}

fn answers(table: &RecordTable, name: &str) -> Vec<String> {
    let snapshot = table.snapshot();
    let mut out: Vec<String> = snapshot
        .resolve(&Name::from_ascii(name).unwrap(), RecordType::A)
        .answers
        .iter()
        .map(|r| r.data.to_string())
        .collect();
    out.sort();
    out
}

fn target(ip: &str) -> Target {
    Target {
        address: ip.parse().unwrap(),
        check: check(),
    }
}

fn fail(health: &Health, ip: &str) -> bool {
    health.record(
        &target(ip),
        Err(ProbeError::Refused),
        Duration::from_millis(1),
    )
}

fn pass(health: &Health, ip: &str) -> bool {
    health.record(&target(ip), Ok(()), Duration::from_millis(1))
}

#[test]
fn a_gateway_leaves_after_failure_threshold_and_returns_after_success_threshold() {
    let (table, health) = setup();
    health.track("xcc-dns/a", check(), entries(GLOBAL, &["10.0.0.1"]));
    health.track("xcc-dns/b", check(), entries(GLOBAL, &["10.0.0.2"]));
    health.refresh();
    assert_eq!(
        answers(&table, GLOBAL),
        ["10.0.0.1", "10.0.0.2"],
        "unprobed counts as up"
    );
    assert_eq!(health.targets().len(), 2);
    let serial = table.snapshot().serial();
    assert!(!fail(&health, "10.0.0.1"), "one failure of two");
    assert_eq!(
        table.snapshot().serial(),
        serial,
        "no state change, no rewrite"
    );
    assert!(fail(&health, "10.0.0.1"));
    assert_eq!(answers(&table, GLOBAL), ["10.0.0.2"]);
    let serial = table.snapshot().serial();
    // More failures, and passes below the threshold: nothing is rewritten.
    assert!(!fail(&health, "10.0.0.1"));
    assert!(!pass(&health, "10.0.0.1"));
    assert!(!pass(&health, "10.0.0.1"));
    assert!(!pass(&health, "10.0.0.2"));
    assert_eq!(table.snapshot().serial(), serial);
    assert_eq!(answers(&table, GLOBAL), ["10.0.0.2"]);
    // A failure in between starts the count again.
    assert!(!fail(&health, "10.0.0.1"));
    assert!(!pass(&health, "10.0.0.1"));
    assert!(!pass(&health, "10.0.0.1"));
    assert!(pass(&health, "10.0.0.1"), "the third pass in a row");
    assert_eq!(answers(&table, GLOBAL), ["10.0.0.1", "10.0.0.2"]);
}

#[test]
fn every_gateway_failing_keeps_the_last_healthy_set() {
    let (table, health) = setup();
    health.track("xcc-dns/a", check(), entries(GLOBAL, &["10.0.0.1"]));
    health.track("xcc-dns/b", check(), entries(GLOBAL, &["10.0.0.2"]));
    health.refresh();
    fail(&health, "10.0.0.1");
    fail(&health, "10.0.0.1");
    assert_eq!(answers(&table, GLOBAL), ["10.0.0.2"]);
    assert!(health.failing_open().is_empty());
    fail(&health, "10.0.0.2");
    assert!(fail(&health, "10.0.0.2"));
    assert_eq!(
        answers(&table, GLOBAL),
        ["10.0.0.2"],
        "the last healthy set"
    );
    assert_eq!(health.failing_open(), [Name::from_ascii(GLOBAL).unwrap()]);
    assert_eq!(health.metrics.fail_open.get(), 1);
    let explained = health.explain(&Name::from_ascii(GLOBAL).unwrap(), 10);
    assert_eq!(explained.len(), 2);
    assert!(explained.iter().all(|p| p.fail_open && p.state == "down"));
    assert_eq!(
        explained.iter().filter(|p| p.in_answer).count(),
        1,
        "{explained:?}"
    );
    assert_eq!(
        explained[0].last_error.as_deref(),
        Some("connection refused")
    );
    // One comes back: it alone answers, no longer fail-open.
    for _ in 0..3 {
        pass(&health, "10.0.0.1");
    }
    assert_eq!(answers(&table, GLOBAL), ["10.0.0.1"]);
    assert!(health.failing_open().is_empty());
    assert_eq!(health.metrics.fail_open.get(), 0);
}

#[test]
fn a_name_that_never_passed_fails_open_with_every_address() {
    let (table, health) = setup();
    let own = "gateway.cluster-a.dev-team.clusters.xcc.test.";
    health.track(
        "xcc-dns/a",
        check(),
        entries(own, &["10.0.0.1", "10.0.0.3"]),
    );
    health.refresh();
    for ip in ["10.0.0.1", "10.0.0.3"] {
        fail(&health, ip);
        fail(&health, ip);
    }
    // Both failed one after the other: the last healthy set is the one that failed last.
    assert_eq!(answers(&table, own), ["10.0.0.3"]);
    // The slice changes to an address never seen: nothing healthy was answered with it, so
    // every address is.
    health.track("xcc-dns/a", check(), entries(own, &["10.0.0.9"]));
    health.refresh();
    assert_eq!(answers(&table, own), ["10.0.0.9"]);
    fail(&health, "10.0.0.9");
    fail(&health, "10.0.0.9");
    assert_eq!(answers(&table, own), ["10.0.0.9"]);
    assert_eq!(
        health.targets(),
        [target("10.0.0.9")],
        "old targets are dropped"
    );
}

#[test]
fn forgetting_a_source_drops_its_targets() {
    let (_, health) = setup();
    health.track("xcc-dns/a", check(), entries(GLOBAL, &["10.0.0.1"]));
    assert!(health.forget("xcc-dns/a"));
    assert!(!health.forget("xcc-dns/a"));
    assert!(health.targets().is_empty());
    assert_eq!(health.metrics.targets.get(), 0);
    assert!(
        !fail(&health, "10.0.0.1"),
        "a target no longer probed is ignored"
    );
}

mod slices {
    use super::*;
    use crate::feed::slices::{HOSTNAME_ANNOTATION, SliceIndex};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
    use kube::api::ObjectMeta;

    const HOST: &str = "*.gateway.cluster-a.dev-team.clusters.xcc.test";
    const ASKED: &str = "kuard.gateway.cluster-a.dev-team.clusters.xcc.test.";

    fn slice(check: Option<&str>) -> EndpointSlice {
        let mut annotations =
            std::collections::BTreeMap::from([(HOSTNAME_ANNOTATION.to_string(), HOST.to_string())]);
        if let Some(check) = check {
            annotations.insert(HEALTH_CHECK_ANNOTATION.to_string(), check.to_string());
        }
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some("dev-team-cluster-a-gateway".into()),
                namespace: Some("xcc-dns".into()),
                annotations: Some(annotations),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: vec![Endpoint {
                addresses: vec!["10.0.0.1".into(), "10.0.0.2".into()],
                ..Default::default()
            }],
            ports: None,
        }
    }

    #[test]
    fn a_slice_with_a_check_is_served_filtered_and_a_malformed_check_unprobed() {
        let (table, health) = setup();
        let index = SliceIndex::with_health(table.clone(), health.clone());
        index.apply(&slice(Some(&check().to_annotation()))).unwrap();
        assert_eq!(health.targets(), [target("10.0.0.1"), target("10.0.0.2")]);
        fail(&health, "10.0.0.1");
        fail(&health, "10.0.0.1");
        assert_eq!(answers(&table, ASKED), ["10.0.0.2"]);
        // The same slice changed (a label, say) keeps the probe state.
        index.apply(&slice(Some(&check().to_annotation()))).unwrap();
        assert_eq!(answers(&table, ASKED), ["10.0.0.2"]);
        // A malformed check: an error to report, the records served, nothing probed.
        for bad in ["{", r#"{"type":"tcp"}"#] {
            let error = index.apply(&slice(Some(bad))).unwrap_err();
            assert!(
                error.to_string().contains("served without probing"),
                "{error}"
            );
            assert_eq!(answers(&table, ASKED), ["10.0.0.1", "10.0.0.2"]);
            assert!(health.targets().is_empty());
        }
        // In a relist too.
        let problems = index.reset(&[slice(Some("[]"))]);
        assert_eq!(problems.len(), 1);
        assert_eq!(answers(&table, ASKED), ["10.0.0.1", "10.0.0.2"]);
        // The check removed: no probing, every address.
        index.apply(&slice(Some(&check().to_annotation()))).unwrap();
        index.apply(&slice(None)).unwrap();
        assert!(health.targets().is_empty());
        assert_eq!(answers(&table, ASKED), ["10.0.0.1", "10.0.0.2"]);
        // Deleted: gone from the table and the prober.
        index.apply(&slice(Some(&check().to_annotation()))).unwrap();
        index.delete(&slice(None));
        assert!(health.targets().is_empty());
        assert!(answers(&table, ASKED).is_empty());
    }
}

use super::{plan::*, print::*, writes::*, *};
use crate::{
    gatewaydns::{
        ClusterGatewayStatus, GatewayDNSSpec, GatewayHealth, GatewayState, GlobalStrategy,
        NoneHealthy, ResolutionType,
    },
    settings::Global,
};
use k8s_openapi::{
    api::{
        core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceSpec, ServiceStatus},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, Time},
    jiff::Timestamp,
};
use xcc_kube::{
    Announcement, Feature,
    announcement::{GLOBAL_HOSTNAME_ANNOTATION, GLOBAL_TTL_ANNOTATION, TTL_ANNOTATION},
};

pub(super) fn gateway(name: &str, age_secs: i64, selector: &[(&str, &str)]) -> GatewayDNS {
    let mut g = GatewayDNS::new(
        name,
        GatewayDNSSpec {
            cluster_selector: LabelSelector {
                match_labels: Some(
                    selector
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            service: "projectcontour/envoy".into(),
            resolution_type: ResolutionType::LoadBalancer,
            node_address_type: None,
            node_names: None,
            stale_records: None,
            global: None,
            resolve_from: None,
            health_check: None,
        },
    );
    g.metadata.namespace = Some("dev-team".into());
    g.metadata.creation_timestamp = Some(Time(
        Timestamp::from_second(1_700_000_000 + age_secs).unwrap(),
    ));
    g
}

fn cluster(name: &str, labels: &[(&str, &str)]) -> ClusterInfo {
    ClusterInfo {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn lb(ips: &[&str], hostnames: &[&str]) -> Service {
    let ingress = ips
        .iter()
        .map(|ip| LoadBalancerIngress {
            ip: Some(ip.to_string()),
            ..Default::default()
        })
        .chain(hostnames.iter().map(|h| LoadBalancerIngress {
            hostname: Some(h.to_string()),
            ..Default::default()
        }))
        .collect();
    Service {
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ..Default::default()
        }),
        status: Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(ingress),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn contour() -> Vec<ClusterInfo> {
    vec![
        cluster("cluster-a", &[("hasContour", "true")]),
        cluster("cluster-b", &[("hasContour", "true")]),
        cluster("cluster-c", &[]),
    ]
}

#[test]
fn the_walkthrough_publishes_each_selected_cluster_with_xccs_names() {
    let g = gateway("dev-team-gateway-dns", 0, &[("hasContour", "true")]);
    let plan = plan(
        &g,
        std::slice::from_ref(&g),
        &contour(),
        "xcc.test",
        |c| match c {
            "cluster-a" => observe(Some(&lb(&["10.0.0.1"], &[]))),
            _ => observe(Some(&lb(&["10.0.0.2"], &[]))),
        },
    );
    assert_eq!(plan.clusters.len(), 2, "cluster-c is not selected");
    let a = &plan.slices[0];
    assert_eq!(a.name_any(), "dev-team-cluster-a-gateway");
    assert_eq!(a.namespace().as_deref(), Some("xcc-dns"));
    assert_eq!(a.address_type, "IPv4");
    assert_eq!(a.endpoints[0].addresses, ["10.0.0.1"]);
    assert_eq!(
        a.annotations()[HOSTNAME_ANNOTATION],
        "*.gateway.cluster-a.dev-team.clusters.xcc.test"
    );
    assert_eq!(
        a.annotations()[REF_ANNOTATION],
        "dev-team/dev-team-gateway-dns"
    );
    assert_eq!(a.labels()[SERVICE_NAME_LABEL], "dev-team-cluster-a-gateway");
    assert!(
        plan.clusters
            .iter()
            .all(|c| c.state == GatewayState::Published)
    );
}

#[test]
fn ipv6_and_hostnames_get_their_own_slices() {
    let g = gateway("g", 0, &[("hasContour", "true")]);
    let plan = plan(
        &g,
        std::slice::from_ref(&g),
        &contour()[..1],
        "xcc.test",
        |_| observe(Some(&lb(&["10.0.0.1", "fd00::1"], &["LB.Example.com"]))),
    );
    let kinds: Vec<(String, String)> = plan
        .slices
        .iter()
        .map(|s| (s.name_any(), s.address_type.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("dev-team-cluster-a-gateway".into(), "IPv4".into()),
            ("dev-team-cluster-a-gateway-ipv6".into(), "IPv6".into()),
            ("dev-team-cluster-a-gateway-fqdn".into(), "FQDN".into()),
        ]
    );
    assert_eq!(plan.slices[2].endpoints[0].addresses, ["lb.example.com"]);
}

#[test]
fn every_failure_is_explained_and_unreachable_keeps_records() {
    let g = gateway("g", 0, &[]);
    let clusters = vec![
        cluster("missing", &[]),
        cluster("clusterip", &[]),
        cluster("pending", &[]),
        cluster("down", &[]),
        cluster("refused", &[]),
    ];
    let mut clusterip = lb(&[], &[]);
    clusterip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    let plan = plan(
        &g,
        std::slice::from_ref(&g),
        &clusters,
        "xcc.test",
        |c| match c {
            "missing" => observe(None),
            "clusterip" => observe(Some(&clusterip)),
            "pending" => observe(Some(&lb(&[], &[]))),
            "refused" => Observation::KubeconfigRejected("exec".into()),
            _ => Observation::Unreachable("connection refused".into()),
        },
    );
    assert!(plan.slices.is_empty());
    let states: Vec<&str> = plan.clusters.iter().map(|c| c.state.as_str()).collect();
    assert_eq!(
        states,
        [
            "NotLoadBalancer",
            "Unreachable",
            "ServiceNotFound",
            "NoAddress",
            "KubeconfigRejected"
        ]
    );
    assert!(plan.clusters[0].message.contains("ClusterIP"));
    assert!(plan.clusters[1].message.contains("connection refused"));
    // An unreachable cluster's slices are kept, the others' are withdrawn.
    assert!(!plan.should_delete("dev-team-down-gateway"));
    assert!(!plan.should_delete("dev-team-down-gateway-ipv6"));
    // So are those of a cluster whose kubeconfig is refused.
    assert!(!plan.should_delete("dev-team-refused-gateway"));
    assert!(plan.clusters[4].message.contains("exec"));
    assert!(plan.should_delete("dev-team-missing-gateway"));
}

#[test]
fn two_gateways_on_one_cluster_the_older_wins() {
    let old = gateway("old", 0, &[("hasContour", "true")]);
    let new = gateway("new", 10, &[]);
    let all = vec![new.clone(), old.clone()];
    let seen = |_: &str| observe(Some(&lb(&["10.0.0.1"], &[])));
    let new_plan = plan(&new, &all, &contour(), "xcc.test", seen);
    let conflicts: Vec<&str> = new_plan
        .clusters
        .iter()
        .filter(|c| c.state == GatewayState::Conflict)
        .map(|c| c.cluster.as_str())
        .collect();
    assert_eq!(conflicts, ["cluster-a", "cluster-b"]);
    assert!(new_plan.clusters[0].message.contains("dev-team/old"));
    assert_eq!(new_plan.slices.len(), 1, "cluster-c is new's alone");
    let old_plan = plan(&old, &all, &contour(), "xcc.test", seen);
    assert_eq!(old_plan.slices.len(), 2);
}

#[test]
fn selectors_follow_the_api_semantics() {
    let labels: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
    let expr = |op: &str, values: &[&str]| LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "env".into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }]),
        ..Default::default()
    };
    assert!(
        selects(&LabelSelector::default(), &labels),
        "empty selects all"
    );
    assert!(selects(&expr("In", &["prod", "dev"]), &labels));
    assert!(!selects(&expr("NotIn", &["prod"]), &labels));
    assert!(selects(&expr("Exists", &[]), &labels));
    assert!(!selects(&expr("DoesNotExist", &[]), &labels));
    assert!(!selects(&expr("Bogus", &[]), &labels));
    // matchLabels and matchExpressions together: both must hold.
    let both = |env: &str, tier_op: &str| LabelSelector {
        match_labels: Some([("env".to_string(), env.to_string())].into()),
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "tier".into(),
            operator: tier_op.into(),
            values: Some(vec!["edge".into()]),
        }]),
    };
    assert!(selects(&both("prod", "NotIn"), &labels));
    assert!(!selects(&both("prod", "In"), &labels));
    assert!(!selects(&both("dev", "NotIn"), &labels));
    let edge: BTreeMap<String, String> = [
        ("env".to_string(), "prod".to_string()),
        ("tier".to_string(), "edge".to_string()),
    ]
    .into();
    assert!(selects(&both("prod", "In"), &edge));
    assert!(!selects(&both("prod", "NotIn"), &edge));
    // Without values, as the hand-written matcher read them: an empty set.
    let no_values = |op: &str| LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "env".into(),
            operator: op.into(),
            values: None,
        }]),
        ..Default::default()
    };
    assert!(!selects(&no_values("In"), &labels));
    assert!(selects(&no_values("NotIn"), &labels));
    assert!(selects(&no_values("Exists"), &labels));
}

#[test]
fn ownership_and_sameness() {
    let g = gateway("g", 0, &[]);
    let plan = plan(
        &g,
        std::slice::from_ref(&g),
        &contour()[..1],
        "xcc.test",
        |_| observe(Some(&lb(&["10.0.0.1"], &[]))),
    );
    let mine = plan.slices[0].clone();
    assert!(is_owned(&mine, "dev-team/g"));
    assert!(!is_owned(&mine, "dev-team/other"));
    let mut by_hand = mine.clone();
    by_hand.metadata.annotations = None;
    assert!(
        !is_owned(&by_hand, "dev-team/g"),
        "a slice made by a person is never ours"
    );
    assert!(same_content(&Print::of(&mine), &Print::of(&plan.slices[0])));
    let mut moved = mine.clone();
    moved.endpoints[0].addresses = vec!["10.0.0.9".into()];
    assert!(!same_content(
        &Print::of(&moved),
        &Print::of(&plan.slices[0])
    ));
}

fn mixed_plan(ips: &[&str], hostnames: &[&str]) -> Plan {
    let g = gateway("g", 0, &[("hasContour", "true")]);
    plan(
        &g,
        std::slice::from_ref(&g),
        &contour()[..1],
        "xcc.test",
        |_| observe(Some(&lb(ips, hostnames))),
    )
}

fn names(slices: &[EndpointSlice]) -> Vec<String> {
    slices.iter().map(|s| s.name_any()).collect()
}

pub(super) fn xcc_agent() -> Announcement {
    Announcement::current("test")
}

#[test]
fn what_the_original_reads() {
    let all = mixed_plan(&["10.0.0.1", "fd00::1"], &["lb.example.com"]).slices;
    let kinds: Vec<(&str, bool)> = all
        .iter()
        .map(|s| (s.address_type.as_str(), original_reads(s)))
        .collect();
    assert_eq!(kinds, [("IPv4", true), ("IPv6", false), ("FQDN", true)]);
    assert_eq!(feature_needed(&all[1]), Some(Feature::Ipv6));
    let mut unannotated = all[0].clone();
    unannotated.metadata.annotations = None;
    assert!(
        !original_reads(&unannotated),
        "the original never stores a slice without the host-name annotation"
    );
    assert!(!readable_by(&unannotated, Some(&xcc_agent())));
}

#[test]
fn an_unannounced_cluster_is_sent_only_what_the_original_reads() {
    let plan = mixed_plan(&["10.0.0.1", "fd00::1"], &["lb.example.com"]);
    let none = cluster_writes(&plan, &[], "dev-team/g", None);
    assert_eq!(
        names(&none.apply),
        [
            "dev-team-cluster-a-gateway",
            "dev-team-cluster-a-gateway-fqdn"
        ]
    );
    assert_eq!(none.withheld, ["dev-team-cluster-a-gateway-ipv6"]);
    assert!(none.delete.is_empty() && none.kept_unreadable.is_empty());

    let announced = cluster_writes(&plan, &[], "dev-team/g", Some(&xcc_agent()));
    assert_eq!(names(&announced.apply).len(), 3, "{announced:?}");
    assert!(announced.withheld.is_empty());

    // An agent that reads FQDN but announced no IPv6 (an older or newer protocol) is not
    // sent IPv6 either.
    let fqdn_only = Announcement {
        features: [Feature::Fqdn].into(),
        version: None,
    };
    let older = cluster_writes(&plan, &[], "dev-team/g", Some(&fqdn_only));
    assert_eq!(older.withheld, ["dev-team-cluster-a-gateway-ipv6"]);
}

#[test]
fn an_unannounced_cluster_never_loses_a_slice_the_original_cannot_read() {
    // An earlier xcc version wrote all three; the gateway is back to IPv4 only.
    let before = mixed_plan(&["10.0.0.1", "fd00::1"], &["lb.example.com"]).slices;
    let after = mixed_plan(&["10.0.0.1"], &[]);
    let none = cluster_writes(&after, &before, "dev-team/g", None);
    assert_eq!(none.delete, ["dev-team-cluster-a-gateway-fqdn"]);
    assert_eq!(
        none.kept_unreadable,
        [(
            "dev-team-cluster-a-gateway-ipv6".to_string(),
            "IPv6".to_string()
        )]
    );
    assert!(none.apply.is_empty(), "the IPv4 slice is unchanged");
    let announced = cluster_writes(&after, &before, "dev-team/g", Some(&xcc_agent()));
    assert_eq!(
        announced.delete,
        [
            "dev-team-cluster-a-gateway-fqdn",
            "dev-team-cluster-a-gateway-ipv6"
        ]
    );
    assert!(announced.kept_unreadable.is_empty());

    // Still wanted but unreadable there: not rewritten either, even with new addresses.
    let moved = mixed_plan(&["10.0.0.1", "fd00::2"], &[]);
    let none = cluster_writes(&moved, &before, "dev-team/g", None);
    assert!(names(&none.apply).is_empty(), "{none:?}");
    assert_eq!(none.withheld, ["dev-team-cluster-a-gateway-ipv6"]);
    assert_eq!(none.kept_unreadable.len(), 1);
}

#[test]
fn a_deleted_gateway_withdraws_only_what_the_original_reads_from_an_unannounced_cluster() {
    let before = mixed_plan(&["10.0.0.1", "fd00::1"], &["lb.example.com"]).slices;
    let mut by_hand = before[1].clone();
    by_hand.metadata.name = Some("by-hand".into());
    by_hand.metadata.annotations = None;
    let existing = [before.clone(), vec![by_hand]].concat();
    let gone = Plan::default();
    let none = cluster_writes(&gone, &existing, "dev-team/g", None);
    assert_eq!(
        none.delete,
        [
            "dev-team-cluster-a-gateway",
            "dev-team-cluster-a-gateway-fqdn"
        ]
    );
    assert_eq!(none.kept_unreadable.len(), 1);
    let announced = cluster_writes(&gone, &existing, "dev-team/g", Some(&xcc_agent()));
    assert_eq!(announced.delete.len(), 3, "never the person's slice");
    // Another GatewayDNS's slices are never touched.
    let other = cluster_writes(&gone, &existing, "dev-team/other", Some(&xcc_agent()));
    assert!(other.delete.is_empty() && other.kept_unreadable.is_empty());
}

fn global_plan(global: &Global, healthy: &[&str]) -> Plan {
    let g = gateway("g", 0, &[("hasContour", "true")]);
    plan_with_health(
        &g,
        std::slice::from_ref(&g),
        &contour(),
        "xcc.test",
        global,
        |c| match c {
            "cluster-a" => observe(Some(&lb(&["10.0.0.1"], &[]))),
            _ => observe(Some(&lb(&["10.0.0.2"], &[]))),
        },
        |c| HealthView {
            health: Some(if healthy.contains(&c) {
                GatewayHealth::Healthy
            } else {
                GatewayHealth::NoReadyEndpoints
            }),
            ..Default::default()
        },
    )
}

fn global_addresses(plan: &Plan, target: &str) -> Vec<String> {
    plan.global_for(target)
        .iter()
        .flat_map(|s| s.endpoints[0].addresses.clone())
        .collect()
}

#[test]
fn the_global_name_answers_with_the_healthy_gateways_by_strategy() {
    let round_robin = global_plan(&Global::default(), &["cluster-a", "cluster-b"]);
    assert_eq!(
        global_addresses(&round_robin, "cluster-c"),
        ["10.0.0.1", "10.0.0.2"]
    );
    let slice = round_robin.global_for("cluster-c")[0];
    assert_eq!(slice.name_any(), "dev-team-cluster-a-global");
    assert_eq!(
        slice.annotations()[HOSTNAME_ANNOTATION],
        "*.gateway.dev-team.global.xcc.test"
    );
    assert_eq!(slice.annotations()[TTL_ANNOTATION], "5");
    assert_eq!(feature_needed(slice), Some(Feature::Global));
    assert!(
        !original_reads(slice),
        "the original never gets a global name"
    );

    // One gateway without ready endpoints leaves the global name (not its own name).
    let one = global_plan(&Global::default(), &["cluster-b"]);
    assert_eq!(global_addresses(&one, "cluster-a"), ["10.0.0.2"]);
    assert_eq!(one.slices.len(), 2, "per-cluster names stay");

    let local = Global {
        strategy: GlobalStrategy::LocalFirst,
        ..Global::default()
    };
    let both = global_plan(&local, &["cluster-a", "cluster-b"]);
    assert_eq!(global_addresses(&both, "cluster-a"), ["10.0.0.1"]);
    assert_eq!(global_addresses(&both, "cluster-b"), ["10.0.0.2"]);
    assert_eq!(
        global_addresses(&both, "cluster-c"),
        ["10.0.0.1", "10.0.0.2"],
        "a cluster without a gateway gets every healthy one"
    );
    let a_down = global_plan(&local, &["cluster-b"]);
    assert_eq!(global_addresses(&a_down, "cluster-a"), ["10.0.0.2"]);

    let failover = Global {
        strategy: GlobalStrategy::Failover,
        failover_order: vec!["cluster-b".into(), "cluster-a".into()],
        ..Global::default()
    };
    let first = global_plan(&failover, &["cluster-a", "cluster-b"]);
    assert_eq!(global_addresses(&first, "cluster-a"), ["10.0.0.2"]);
    let second = global_plan(&failover, &["cluster-a"]);
    assert_eq!(global_addresses(&second, "cluster-b"), ["10.0.0.1"]);

    // Nobody healthy: everyone (serveAll), or nothing (nxdomain).
    assert_eq!(
        global_addresses(&global_plan(&Global::default(), &[]), "cluster-a"),
        ["10.0.0.1", "10.0.0.2"]
    );
    let nx = Global {
        when_none_healthy: NoneHealthy::Nxdomain,
        ..Global::default()
    };
    assert!(global_addresses(&global_plan(&nx, &[]), "cluster-a").is_empty());
}

/// A cluster without slices.
const NONE: &[EndpointSlice] = &[];

/// An xcc-agent of the version before [`Feature::GlobalHostname`]: it reads the separate
/// global slices.
fn earlier_agent() -> Announcement {
    Announcement {
        features: [Feature::Fqdn, Feature::Global, Feature::Ipv6].into(),
        version: Some("earlier".into()),
    }
}

#[test]
fn global_names_go_only_to_clusters_that_announced_them_and_leave_when_unhealthy() {
    let plan = global_plan(&Global::default(), &["cluster-a", "cluster-b"]);
    let none = cluster_writes_for(&plan, NONE, "dev-team/g", None, "cluster-c");
    assert_eq!(names(&none.apply).len(), 2, "{none:?}");
    assert!(none.withheld_global && none.withheld.is_empty());
    assert!(
        none.apply
            .iter()
            .all(|s| !s.annotations().contains_key(GLOBAL_HOSTNAME_ANNOTATION)),
        "{none:?}"
    );
    let xcc_agent = earlier_agent;
    let announced = cluster_writes_for(&plan, NONE, "dev-team/g", Some(&xcc_agent()), "cluster-c");
    assert_eq!(names(&announced.apply).len(), 4, "{announced:?}");
    // cluster-a loses its ready endpoints: its global slice goes, its own name stays.
    let existing: Vec<EndpointSlice> = announced.apply.clone();
    let after = global_plan(&Global::default(), &["cluster-b"]);
    let writes = cluster_writes_for(
        &after,
        &existing,
        "dev-team/g",
        Some(&xcc_agent()),
        "cluster-c",
    );
    assert_eq!(writes.delete, ["dev-team-cluster-a-global"]);
    assert!(writes.apply.is_empty());
    // An unannounced cluster never loses one either (it never had one).
    let writes = cluster_writes_for(&after, &existing, "dev-team/g", None, "cluster-c");
    assert!(writes.delete.is_empty(), "{writes:?}");
}

/// The global name on the per-cluster slices of the clusters `target` is to answer it with.
fn global_on(writes: &ClusterWrites) -> Vec<(String, String, String)> {
    writes
        .apply
        .iter()
        .filter_map(|s| {
            let a = s.annotations();
            Some((
                s.name_any(),
                a.get(GLOBAL_HOSTNAME_ANNOTATION)?.clone(),
                a.get(GLOBAL_TTL_ANNOTATION)?.clone(),
            ))
        })
        .collect()
}

/// What cluster `target` has after `writes` were made on `existing`.
fn after_writes(existing: &[EndpointSlice], writes: &ClusterWrites) -> Vec<EndpointSlice> {
    let mut out: Vec<EndpointSlice> = existing
        .iter()
        .filter(|s| !writes.delete.contains(&s.name_any()))
        .filter(|s| !writes.apply.iter().any(|w| w.name_any() == s.name_any()))
        .cloned()
        .collect();
    out.extend(writes.apply.iter().cloned());
    out
}

#[test]
fn the_global_name_rides_on_the_per_cluster_slices_one_write_per_change() {
    let agent = xcc_agent();
    let write = |plan: &Plan, existing: &[EndpointSlice], target: &str| {
        cluster_writes_for(plan, existing, "dev-team/g", Some(&agent), target)
    };
    let both = global_plan(&Global::default(), &["cluster-a", "cluster-b"]);
    let first = write(&both, NONE, "cluster-c");
    // Two slices, each naming both its cluster's name and the global one.
    assert_eq!(
        names(&first.apply),
        ["dev-team-cluster-a-gateway", "dev-team-cluster-b-gateway"]
    );
    let host = "*.gateway.dev-team.global.xcc.test".to_string();
    assert_eq!(
        global_on(&first),
        [
            (
                "dev-team-cluster-a-gateway".into(),
                host.clone(),
                "5".into()
            ),
            (
                "dev-team-cluster-b-gateway".into(),
                host.clone(),
                "5".into()
            ),
        ]
    );
    assert!(!first.withheld_global);
    assert!(
        first.apply.iter().all(original_reads),
        "the original reads them as before (and ignores the global name)"
    );
    let have = after_writes(&[], &first);
    // Nothing changed: nothing to write.
    assert_eq!(write(&both, &have, "cluster-c"), ClusterWrites::default());

    // One gateway's address changes: one write on this cluster.
    let g = gateway("g", 0, &[("hasContour", "true")]);
    let moved = plan_with_health(
        &g,
        std::slice::from_ref(&g),
        &contour(),
        "xcc.test",
        &Global::default(),
        |c| match c {
            "cluster-a" => observe(Some(&lb(&["10.0.0.9"], &[]))),
            _ => observe(Some(&lb(&["10.0.0.2"], &[]))),
        },
        |_| HealthView {
            health: Some(GatewayHealth::Healthy),
            ..Default::default()
        },
    );
    let change = write(&moved, &have, "cluster-c");
    assert_eq!(names(&change.apply), ["dev-team-cluster-a-gateway"]);
    assert_eq!(change.apply[0].endpoints[0].addresses, ["10.0.0.9"]);
    assert_eq!(global_on(&change).len(), 1, "it keeps the global name");
    assert!(change.delete.is_empty());

    // cluster-a turns unhealthy: its slice loses the global name (a rewrite, not a delete).
    let b_only = global_plan(&Global::default(), &["cluster-b"]);
    let left = write(&b_only, &have, "cluster-c");
    assert_eq!(names(&left.apply), ["dev-team-cluster-a-gateway"]);
    assert!(global_on(&left).is_empty(), "{left:?}");
    assert!(left.delete.is_empty());
    let have = after_writes(&have, &left);
    assert_eq!(write(&b_only, &have, "cluster-c"), ClusterWrites::default());

    // localFirst: each cluster with a healthy gateway answers with its own.
    let local = global_plan(
        &Global {
            strategy: GlobalStrategy::LocalFirst,
            ..Global::default()
        },
        &["cluster-a", "cluster-b"],
    );
    let on_a = write(&local, &[], "cluster-a");
    assert_eq!(
        global_on(&on_a),
        [(
            "dev-team-cluster-a-gateway".into(),
            host.clone(),
            "5".into()
        )]
    );
    assert_eq!(global_on(&write(&local, &[], "cluster-c")).len(), 2);
}

#[test]
fn an_agent_that_reads_global_names_off_the_slices_loses_the_separate_global_slices() {
    let plan = global_plan(&Global::default(), &["cluster-a", "cluster-b"]);
    // What an earlier controller wrote for an earlier agent.
    let earlier = cluster_writes_for(&plan, NONE, "dev-team/g", Some(&earlier_agent()), "c");
    assert_eq!(earlier.apply.len(), 4);
    assert!(global_on(&earlier).is_empty());
    let have = after_writes(&[], &earlier);
    // The agent is upgraded: the per-cluster slices gain the name, the global ones go.
    let now = cluster_writes_for(&plan, &have, "dev-team/g", Some(&xcc_agent()), "c");
    assert_eq!(global_on(&now).len(), 2, "{now:?}");
    let mut deleted = now.delete.clone();
    deleted.sort();
    assert_eq!(
        deleted,
        ["dev-team-cluster-a-global", "dev-team-cluster-b-global"]
    );
    // Going back to an agent without it: the name leaves the per-cluster slices.
    let have = after_writes(&have, &now);
    let back = cluster_writes_for(&plan, &have, "dev-team/g", None, "c");
    assert_eq!(back.apply.len(), 2);
    assert!(global_on(&back).is_empty());
    assert!(back.withheld_global);
}

#[test]
fn an_unreachable_cluster_keeps_its_last_addresses_under_the_global_name() {
    let g = gateway("g", 0, &[("hasContour", "true")]);
    let mut g_with_status = g.clone();
    g_with_status.status = Some(crate::gatewaydns::GatewayDNSStatus {
        clusters: vec![ClusterGatewayStatus {
            cluster: "cluster-a".into(),
            addresses: vec!["10.0.0.1".into()],
            ..Default::default()
        }],
        ..Default::default()
    });
    // Nobody healthy, serveAll: cluster-a (unreachable) answers with its last address.
    let plan = plan_with_health(
        &g_with_status,
        std::slice::from_ref(&g_with_status),
        &contour(),
        "xcc.test",
        &Global::default(),
        |c| match c {
            "cluster-a" => Observation::Unreachable("down".into()),
            _ => observe(Some(&lb(&["10.0.0.2"], &[]))),
        },
        |_| HealthView::default(),
    );
    let writes = cluster_writes_for(&plan, NONE, "dev-team/g", Some(&xcc_agent()), "c");
    assert_eq!(global_on(&writes).len(), 2, "{writes:?}");
    let a = writes
        .apply
        .iter()
        .find(|s| s.name_any() == "dev-team-cluster-a-gateway")
        .expect("cluster-a's last records");
    assert_eq!(a.endpoints[0].addresses, ["10.0.0.1"]);
    // Its slices are never deleted while it is unreachable.
    assert!(plan.keep.contains("dev-team-cluster-a-gateway-ipv6"));
}

#[test]
fn the_same_name_goes_to_the_oldest_then_by_name_and_to_the_next_once_it_is_deleted() {
    let a = cluster("cluster-a", &[("site", "a"), ("hasContour", "true")]);
    let b = cluster("cluster-b", &[("site", "b"), ("hasContour", "true")]);
    let first = gateway("first", 0, &[("site", "a")]);
    let second = gateway("second", 10, &[("site", "b")]);
    // Distinct names: each publishes its own cluster.
    let all = vec![second.clone(), first.clone()];
    assert_eq!(
        publisher_of(&all, &a).map(gateway_ref).as_deref(),
        Some("dev-team/first")
    );
    assert_eq!(
        publisher_of(&all, &b).map(gateway_ref).as_deref(),
        Some("dev-team/second")
    );
    let seen = |_: &str| observe(Some(&lb(&["10.0.0.1"], &[])));
    let clusters = [a.clone(), b.clone()];
    for g in [&first, &second] {
        let p = plan(g, &all, &clusters, "xcc.test", seen);
        assert!(
            p.clusters
                .iter()
                .all(|c| c.state == GatewayState::Published),
            "{p:?}"
        );
        assert_eq!(p.slices.len(), 1);
    }
    // The later one selects cluster-a too: the same name; the older keeps it.
    let mut wide = gateway("second", 10, &[("hasContour", "true")]);
    let all = vec![wide.clone(), first.clone()];
    assert_eq!(
        publisher_of(&all, &a).map(gateway_ref).as_deref(),
        Some("dev-team/first")
    );
    let p = plan(&wide, &all, &clusters, "xcc.test", seen);
    assert_eq!(p.clusters[0].state, GatewayState::Conflict);
    assert!(
        p.clusters[0].message.contains("dev-team/first")
            && p.clusters[0]
                .message
                .contains("*.gateway.cluster-a.dev-team.clusters.xcc.test"),
        "{}",
        p.clusters[0].message
    );
    assert_eq!(p.clusters[1].state, GatewayState::Published);
    assert_eq!(p.sources.values().collect::<Vec<_>>(), ["cluster-b"]);
    // Same creation time: the first by namespace/name.
    let twin = gateway("a-twin", 10, &[("hasContour", "true")]);
    let all = vec![wide.clone(), twin.clone()];
    assert_eq!(
        publisher_of(&all, &a).map(gateway_ref).as_deref(),
        Some("dev-team/a-twin")
    );
    // The older one is being deleted: the later one takes the name over.
    let mut going = first.clone();
    going.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(1_800_000_000).unwrap()));
    let kept = plan(
        &first,
        std::slice::from_ref(&first),
        &clusters,
        "xcc.test",
        seen,
    )
    .slices;
    let all = vec![wide.clone(), going];
    let p = plan(&wide, &all, &clusters, "xcc.test", seen);
    assert!(
        p.clusters
            .iter()
            .all(|c| c.state == GatewayState::Published),
        "{p:?}"
    );
    assert_eq!(p.slices.len(), 2);
    // Its slice, still in a store a moment behind, is taken over, not reported as someone else's.
    let writes = cluster_writes(&p, &kept, "dev-team/second", None);
    assert!(writes.foreign.is_empty(), "{writes:?}");
    assert_eq!(writes.apply.len(), 2);
    // A live GatewayDNS's slice is never taken over.
    let live = plan(
        &wide,
        std::slice::from_ref(&wide),
        &clusters,
        "xcc.test",
        seen,
    );
    let writes = cluster_writes(&live, &kept, "dev-team/second", None);
    assert_eq!(writes.foreign, ["dev-team-cluster-a-gateway"]);
    // Nobody selects it: nobody publishes it.
    wide.spec.cluster_selector = LabelSelector {
        match_labels: Some([("site".to_string(), "z".to_string())].into()),
        ..Default::default()
    };
    assert!(publisher_of(&[wide], &a).is_none());
}

#[test]
fn resolve_from_lists_other_namespaces_and_those_its_selector_matches() {
    let mut g = gateway("g", 0, &[]);
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let namespaces: crate::gatewaydns::NamespaceLabels = [
        ("dev-team".to_string(), labels(&[("xcc", "resolve")])),
        ("ops".to_string(), labels(&[("xcc", "resolve")])),
        ("web".to_string(), labels(&[])),
    ]
    .into();
    assert!(
        g.spec
            .resolving_namespaces("dev-team", Some(&namespaces))
            .is_empty(),
        "unset: own namespace only"
    );
    g.spec.resolve_from = Some(crate::gatewaydns::ResolveFrom {
        namespaces: vec!["ops".into(), "dev-team".into(), "edge".into(), "ops".into()],
        namespace_selector: None,
    });
    assert_eq!(
        g.spec.resolving_namespaces("dev-team", None),
        ["edge", "ops"]
    );
    // A selector, as NetworkPolicy's: the namespaces whose labels match, its own left out.
    g.spec.resolve_from = Some(crate::gatewaydns::ResolveFrom {
        namespaces: vec!["edge".into()],
        namespace_selector: Some(LabelSelector {
            match_labels: Some([("xcc".to_string(), "resolve".to_string())].into()),
            ..Default::default()
        }),
    });
    assert_eq!(
        g.spec.resolving_namespaces("dev-team", Some(&namespaces)),
        ["edge", "ops"]
    );
    assert_eq!(
        g.spec.resolving_namespaces("dev-team", None),
        ["edge"],
        "labels unknown: the listed ones"
    );
    // `{}` selects every namespace.
    g.spec.resolve_from.as_mut().unwrap().namespace_selector = Some(LabelSelector::default());
    assert_eq!(
        g.spec.resolving_namespaces("dev-team", Some(&namespaces)),
        ["edge", "ops", "web"]
    );
}

//! The zone rules: positive answers, NODATA, NXDOMAIN, wildcards, CNAMEs, apex, case.

use hickory_proto::{
    op::ResponseCode,
    rr::{RData, RecordType},
};

use crate::support::*;

#[test]
fn a_query_gets_every_address_authoritatively() {
    let table = fixture();
    let q = query(GW, RecordType::A);
    let resp = exchange(&table, &q);
    assert_response_of(&resp, &q);
    assert_eq!(rcode(&resp), ResponseCode::NoError);
    assert!(resp.metadata.authoritative);
    assert_eq!(answer_ips(&resp), ips(&["192.0.2.10", "192.0.2.11"]));
    assert!(resp.answers.iter().all(|r| r.ttl == 30));
    assert!(resp.authorities.is_empty());
}

#[test]
fn aaaa_query_gets_the_ipv6_addresses() {
    let table = fixture();
    let resp = exchange(&table, &query(GW, RecordType::AAAA));
    assert_eq!(rcode(&resp), ResponseCode::NoError);
    assert_eq!(answer_ips(&resp), ips(&["2001:db8::10"]));
}

#[test]
fn existing_name_without_the_type_is_nodata_with_the_soa() {
    let table = fixture();
    let resp = exchange(&table, &query("v4only.xcc.test.", RecordType::AAAA));
    assert_eq!(rcode(&resp), ResponseCode::NoError);
    assert!(resp.metadata.authoritative);
    assert!(resp.answers.is_empty());
    assert_eq!(resp.authorities.len(), 1);
    let soa = &resp.authorities[0];
    assert_eq!(soa.record_type(), RecordType::SOA);
    assert_eq!(soa.name, name("xcc.test."));
    // RFC 2308 §5: negative TTL = min(SOA TTL, SOA MINIMUM).
    assert_eq!(soa.ttl, 15);
    let RData::SOA(data) = &soa.data else {
        panic!()
    };
    assert_eq!(data.minimum, 15);
}

#[test]
fn empty_non_terminals_are_nodata_not_nxdomain() {
    let table = fixture();
    for ent in [
        "clusters.xcc.test.",
        "dev-team.clusters.xcc.test.",
        "cluster-a.dev-team.clusters.xcc.test.",
        "w.xcc.test.",
    ] {
        let resp = exchange(&table, &query(ent, RecordType::A));
        assert_eq!(rcode(&resp), ResponseCode::NoError, "{ent}");
        assert!(resp.answers.is_empty(), "{ent}");
        assert_eq!(resp.authorities[0].record_type(), RecordType::SOA, "{ent}");
    }
}

#[test]
fn missing_name_is_nxdomain_with_the_soa() {
    let table = fixture();
    for missing in [
        "nope.xcc.test.",
        "gateway.cluster-b.dev-team.clusters.xcc.test.",
        "a.b.clusters.xcc.test.",
    ] {
        let resp = exchange(&table, &query(missing, RecordType::A));
        assert_eq!(rcode(&resp), ResponseCode::NXDomain, "{missing}");
        assert!(resp.metadata.authoritative);
        assert!(resp.answers.is_empty());
        assert_eq!(resp.authorities.len(), 1);
        assert_eq!(resp.authorities[0].record_type(), RecordType::SOA);
        assert_eq!(resp.authorities[0].ttl, 15);
    }
}

#[test]
fn wildcards_match_any_depth_and_answer_with_the_query_name() {
    let table = fixture();
    for qname in [
        format!("kuard.{GW}"),
        format!("a.b.c.{GW}"),
        "x.w.xcc.test.".to_string(),
    ] {
        let resp = exchange(&table, &query(&qname, RecordType::A));
        assert_eq!(rcode(&resp), ResponseCode::NoError, "{qname}");
        assert!(!resp.answers.is_empty(), "{qname}");
        assert!(
            resp.answers.iter().all(|r| r.name == name(&qname)),
            "{qname}"
        );
    }
    // The wildcard does not cover its parent: w.xcc.test exists only as an empty non-terminal.
    let resp = exchange(&table, &query("w.xcc.test.", RecordType::A));
    assert!(resp.answers.is_empty());
    // A wildcard AAAA with no IPv6 data is NODATA, not NXDOMAIN.
    let resp = exchange(&table, &query("x.w.xcc.test.", RecordType::AAAA));
    assert_eq!(rcode(&resp), ResponseCode::NoError);
    assert!(resp.answers.is_empty());
    assert_eq!(resp.authorities[0].record_type(), RecordType::SOA);
}

#[test]
fn matching_ignores_case_and_answers_echo_it() {
    let table = fixture();
    let qname = "KuArD.GateWay.Cluster-A.dev-team.CLUSTERS.xcc.Test.";
    let q = query(qname, RecordType::A);
    let resp = exchange(&table, &q);
    assert_response_of(&resp, &q);
    assert_eq!(answer_ips(&resp).len(), 2);
    for r in &resp.answers {
        assert!(r.name.eq_case(&name(qname)), "{} echoes the case", r.name);
    }
    let resp = exchange(&table, &query("V4ONLY.xcc.test.", RecordType::A));
    assert!(resp.answers[0].name.eq_case(&name("V4ONLY.xcc.test.")));
}

#[test]
fn cnames_are_chased_inside_the_zone() {
    let table = fixture();
    let resp = exchange(&table, &query("alias2.xcc.test.", RecordType::A));
    assert_eq!(rcode(&resp), ResponseCode::NoError);
    let types: Vec<RecordType> = resp.answers.iter().map(|r| r.record_type()).collect();
    assert_eq!(
        types,
        [RecordType::CNAME, RecordType::CNAME, RecordType::A],
        "{:?}",
        resp.answers
    );
    assert_eq!(answer_ips(&resp), ips(&["192.0.2.1"]));

    // A CNAME query gets the CNAME itself, not its target.
    let resp = exchange(&table, &query("alias.xcc.test.", RecordType::CNAME));
    assert_eq!(resp.answers.len(), 1);
    assert_eq!(resp.answers[0].record_type(), RecordType::CNAME);

    // Out of zone: the CNAME alone; the resolver goes on.
    let resp = exchange(&table, &query("external.xcc.test.", RecordType::A));
    assert_eq!(rcode(&resp), ResponseCode::NoError);
    assert_eq!(resp.answers.len(), 1);
    assert!(resp.authorities.is_empty());

    // A CNAME to a missing in-zone name: NXDOMAIN with the chain (RFC 6604).
    let resp = exchange(&table, &query("dangling.xcc.test.", RecordType::A));
    assert_eq!(rcode(&resp), ResponseCode::NXDomain);
    assert_eq!(resp.answers.len(), 1);
    assert_eq!(resp.authorities[0].record_type(), RecordType::SOA);

    // A loop ends.
    let resp = exchange(&table, &query("loop1.xcc.test.", RecordType::A));
    assert!(resp.answers.len() <= 8);
}

#[test]
fn apex_has_soa_and_ns_and_serial_rises_with_every_change() {
    let table = fixture();
    let soa = |table| {
        let resp = exchange(table, &query("xcc.test.", RecordType::SOA));
        assert_eq!(rcode(&resp), ResponseCode::NoError);
        assert!(resp.metadata.authoritative);
        assert_eq!(resp.answers.len(), 1);
        assert_eq!(resp.answers[0].ttl, 30);
        let RData::SOA(soa) = &resp.answers[0].data else {
            panic!()
        };
        soa.serial
    };
    let first = soa(&table);
    table
        .set_source(
            "more",
            vec![(name("new.xcc.test."), addresses(&["192.0.2.99"]))],
        )
        .unwrap();
    let second = soa(&table);
    assert!(second > first, "{second} > {first}");
    table.remove_source("more");
    assert!(soa(&table) > second);

    let resp = exchange(&table, &query("xcc.test.", RecordType::NS));
    assert_eq!(resp.answers.len(), 1);
    let RData::NS(ns) = &resp.answers[0].data else {
        panic!()
    };
    assert_eq!(ns.0, name("ns.xcc.test."));

    let resp = exchange(&table, &query("xcc.test.", RecordType::A));
    assert_eq!(rcode(&resp), ResponseCode::NoError);
    assert!(resp.answers.is_empty());
    assert_eq!(resp.authorities[0].record_type(), RecordType::SOA);
}

#[test]
fn names_outside_every_zone_are_refused() {
    let table = fixture();
    for qname in ["example.com.", "test.", ".", "xxcc.test."] {
        let resp = exchange(&table, &query(qname, RecordType::A));
        assert_eq!(rcode(&resp), ResponseCode::Refused, "{qname}");
        assert!(!resp.metadata.authoritative);
        assert!(resp.answers.is_empty() && resp.authorities.is_empty());
    }
}

#[test]
fn several_zones_are_served() {
    let table = fixture();
    let resp = exchange(&table, &query("host.other.test.", RecordType::A));
    assert_eq!(answer_ips(&resp), ips(&["203.0.113.7"]));
    let resp = exchange(&table, &query("nope.other.test.", RecordType::A));
    assert_eq!(rcode(&resp), ResponseCode::NXDomain);
    let RData::SOA(_) = &resp.authorities[0].data else {
        panic!()
    };
    assert_eq!(resp.authorities[0].name, name("other.test."));
}

/// SRV answers as `dig +short SRV` would list them: `priority weight port target`, sorted.
fn srv_answers(resp: &hickory_proto::op::Message) -> Vec<String> {
    let mut out: Vec<String> = resp
        .answers
        .iter()
        .map(|r| {
            let RData::SRV(srv) = &r.data else {
                panic!("not an SRV record: {r:?}")
            };
            format!(
                "{} {} {} {}",
                srv.priority,
                srv.weight,
                srv.port,
                srv.target.to_lowercase()
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn srv_records_are_answered_once_each() {
    let table = fixture();
    // Three contributions of `0 100 42 svc.xcc.test.` (tcp/42 and udp/42 of one source, and
    // another source spelling the target in capitals): one record.
    let q = query("svc.xcc.test.", RecordType::SRV);
    let resp = exchange(&table, &q);
    assert_response_of(&resp, &q);
    assert_eq!(rcode(&resp), ResponseCode::NoError);
    assert!(resp.metadata.authoritative);
    assert_eq!(srv_answers(&resp), ["0 100 42 svc.xcc.test."]);
    assert!(resp.answers.iter().all(|r| r.ttl == 30));
    assert!(resp.authorities.is_empty());
    // The addresses at the same name are still there, and an A query gets only them.
    let resp = exchange(&table, &query("svc.xcc.test.", RecordType::A));
    assert_eq!(answer_ips(&resp), ips(&["192.0.2.42"]));
    // ANY: both.
    let resp = exchange(&table, &query("svc.xcc.test.", RecordType::ANY));
    let types: Vec<RecordType> = resp.answers.iter().map(|r| r.record_type()).collect();
    assert_eq!(types, [RecordType::A, RecordType::SRV]);

    let resp = exchange(&table, &query("_hi._tcp.svc.xcc.test.", RecordType::SRV));
    assert_eq!(srv_answers(&resp), ["0 100 42 svc.xcc.test."]);

    let resp = exchange(&table, &query("headless.xcc.test.", RecordType::SRV));
    assert_eq!(
        srv_answers(&resp),
        [
            "0 50 42 web-0.c1.headless.xcc.test.",
            "0 50 42 web-1.c1.headless.xcc.test."
        ]
    );
    // Answers echo the question's case.
    let resp = exchange(&table, &query("HeadLess.xcc.test.", RecordType::SRV));
    assert!(
        resp.answers
            .iter()
            .all(|r| r.name.eq_case(&name("HeadLess.xcc.test.")))
    );
}

#[test]
fn srv_names_keep_nodata_and_nxdomain_apart() {
    let table = fixture();
    // A name with only SRV records: NODATA for A and AAAA, with the SOA (also on the fast path's
    // type, A, through the handler here).
    for qtype in [RecordType::A, RecordType::AAAA, RecordType::TXT] {
        let resp = exchange(&table, &query("headless.xcc.test.", qtype));
        assert_eq!(rcode(&resp), ResponseCode::NoError, "{qtype}");
        assert!(resp.answers.is_empty(), "{qtype}");
        assert_eq!(
            resp.authorities[0].record_type(),
            RecordType::SOA,
            "{qtype}"
        );
    }
    // A name with addresses and no SRV: NODATA for SRV.
    let resp = exchange(&table, &query("v4only.xcc.test.", RecordType::SRV));
    assert_eq!(rcode(&resp), ResponseCode::NoError);
    assert!(resp.answers.is_empty());
    assert_eq!(resp.authorities[0].record_type(), RecordType::SOA);
    // `_tcp.svc` exists only as the parent of `_hi._tcp.svc`: NODATA.
    let resp = exchange(&table, &query("_tcp.svc.xcc.test.", RecordType::SRV));
    assert_eq!(rcode(&resp), ResponseCode::NoError);
    assert!(resp.answers.is_empty());
    assert_eq!(resp.authorities[0].record_type(), RecordType::SOA);
    // A port name nobody has: NXDOMAIN with the SOA.
    let resp = exchange(&table, &query("_nope._tcp.svc.xcc.test.", RecordType::SRV));
    assert_eq!(rcode(&resp), ResponseCode::NXDomain);
    assert_eq!(resp.authorities[0].record_type(), RecordType::SOA);
    assert_eq!(resp.authorities[0].ttl, 15);
}

#[test]
fn a_cname_beside_srv_records_is_ignored() {
    let table = fixture();
    table
        .set_source(
            "alias",
            vec![(name("headless.xcc.test."), cname("v4only.xcc.test."))],
        )
        .unwrap();
    let resp = exchange(&table, &query("headless.xcc.test.", RecordType::A));
    assert!(resp.answers.is_empty(), "{:?}", resp.answers);
    let resp = exchange(&table, &query("headless.xcc.test.", RecordType::SRV));
    assert_eq!(resp.answers.len(), 2);
    // Removing the SRV source leaves the CNAME in force.
    table.remove_source("fixture");
    let resp = exchange(&table, &query("headless.xcc.test.", RecordType::A));
    assert_eq!(resp.answers[0].record_type(), RecordType::CNAME);
}

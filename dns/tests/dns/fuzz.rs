//! Garbage in never panics the handler, and whatever comes out parses.

use hickory_proto::{op::Message, rr::RecordType};
use hickory_server::net::xfer::Protocol;
use proptest::prelude::*;

use crate::support::*;

fn valid_queries() -> Vec<Vec<u8>> {
    [
        query(GW, RecordType::A),
        with_edns(
            query(
                "kuard.gateway.cluster-a.dev-team.clusters.xcc.test.",
                RecordType::AAAA,
            ),
            1232,
            0,
        ),
        query("alias2.xcc.test.", RecordType::A),
        with_edns(query("big.xcc.test.", RecordType::ANY), 512, 0),
        query("xcc.test.", RecordType::SOA),
        with_edns(query("headless.xcc.test.", RecordType::SRV), 512, 0),
    ]
    .iter()
    .map(|m| m.to_vec().unwrap())
    .collect()
}

fn check(bytes: Vec<u8>, tcp: bool) {
    let table = fixture_shared();
    let protocol = if tcp { Protocol::Tcp } else { Protocol::Udp };
    if let Some(out) = exchange_bytes(table, bytes.clone(), protocol) {
        if let Err(e) = Message::from_vec(&out) {
            panic!("response does not parse ({e}):\n query    {bytes:02x?}\n response {out:02x?}");
        }
        if !tcp {
            assert!(out.len() <= 1232);
        }
    }
}

fn fixture_shared() -> &'static std::sync::Arc<xcc_dns::RecordTable> {
    static TABLE: std::sync::OnceLock<std::sync::Arc<xcc_dns::RecordTable>> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(fixture)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 50_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600), tcp in any::<bool>()) {
        check(bytes, tcp);
    }

    #[test]
    fn mutated_queries(
        which in 0usize..6,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in proptest::option::of(any::<usize>()),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
        tcp in any::<bool>(),
    ) {
        let mut bytes = valid_queries()[which].clone();
        for (at, value) in flips {
            let len = bytes.len();
            bytes[at % len] = value;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut % (bytes.len() + 1));
        }
        bytes.extend(tail);
        check(bytes, tcp);
    }
}

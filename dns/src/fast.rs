//! The UDP fast path: the common queries — A or AAAA for a name below an apex, whether it has
//! such addresses (directly or through a wildcard), exists without them (NODATA) or does not
//! exist (NXDOMAIN) — answered straight from their bytes and the snapshot, with no decoding into
//! hickory types and no allocation. Anything else (other types, CNAMEs, the apex, EDNS versions
//! other than 0, answers that need TC) returns `None` and goes the general way through hickory
//! and the [`Handler`](crate::Handler), whose rules this path must match: a unit test compares
//! the two on every query shape it takes.

use hickory_proto::{op::ResponseCode, rr::RecordType};

use crate::{lookup::Found, name::KeyBuf, precheck::HEADER_LEN, table::Snapshot};

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;
const CLASS_IN: u16 = 1;

/// Answers `msg` into `out` when it is a query this path handles, returning the question's type,
/// the response code and the zone's position in [`RecordTable::zones`](crate::RecordTable::zones);
/// `None` leaves `out` empty. `msg` has passed
/// [`precheck`](crate::precheck::precheck).
#[expect(
    clippy::too_many_lines,
    reason = "the DNS hot path: one pass over the query bytes into the answer bytes, no allocation; helpers would pass its parse state around on every query"
)]
pub(crate) fn answer(
    msg: &[u8],
    snapshot: &Snapshot,
    out: &mut Vec<u8>,
) -> Option<(RecordType, ResponseCode, usize)> {
    out.clear();
    let header = msg.get(..HEADER_LEN)?;
    let count = |at: usize| u16::from_be_bytes([header[at], header[at + 1]]);
    // A plain query (QR 0, opcode QUERY), one question, no records but an optional OPT.
    if header[2] & 0xF8 != 0 || count(4) != 1 || count(6) != 0 || count(8) != 0 || count(10) > 1 {
        return None;
    }
    // The question's name: labels only (a compressed question goes the general way), lowercased
    // into the table's key form.
    let mut key = KeyBuf::empty();
    let mut at = HEADER_LEN;
    loop {
        let len = usize::from(*msg.get(at)?);
        if len == 0 {
            at += 1;
            break;
        }
        key.push_label(msg.get(at + 1..at + 1 + len)?)?;
        at += 1 + len;
    }
    let fixed = msg.get(at..at + 4)?;
    let qtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    if u16::from_be_bytes([fixed[2], fixed[3]]) != CLASS_IN || !matches!(qtype, TYPE_A | TYPE_AAAA)
    {
        return None;
    }
    let question_end = at + 4;

    // The OPT, if any: version 0 only (the handler answers others BADVERS); its options are
    // ignored, as the handler ignores them. The message must end with it.
    let payload = if count(10) == 1 {
        let opt = msg.get(question_end..question_end + 11)?;
        let rdlen = usize::from(u16::from_be_bytes([opt[9], opt[10]]));
        if opt[0] != 0
            || u16::from_be_bytes([opt[1], opt[2]]) != TYPE_OPT
            || opt[6] != 0
            || question_end + 11 + rdlen != msg.len()
        {
            return None;
        }
        // RFC 6891 §6.2.5: below 512 counts as 512; we advertise at most 1232.
        Some(u16::from_be_bytes([opt[3], opt[4]]).clamp(512, crate::ADVERTISED_UDP_PAYLOAD))
    } else if question_end == msg.len() {
        None
    } else {
        return None;
    };

    // The same walk as the handler's (`Snapshot::find`): the name's own node, a wildcard's, or
    // none. The apex (SOA, NS) and CNAMEs go the general way.
    let zone = snapshot.zone_of(key.key())?;
    let (rcode, node) = match snapshot.find(&key, zone) {
        Found::Name { apex: true, .. } => return None,
        Found::Name { node, apex: false } => (ResponseCode::NoError, node),
        Found::NxDomain => (ResponseCode::NXDomain, None),
    };
    if node.is_some_and(|node| node.cname.is_some()) {
        return None;
    }
    let (count_answers, rdlen) = match (qtype, node) {
        (TYPE_A, Some(node)) => (node.a.len(), 4u16),
        (_, Some(node)) => (node.aaaa.len(), 16u16),
        (_, None) => (0, 0),
    };
    // NODATA and NXDOMAIN carry the zone's SOA in authority (RFC 2308).
    let soa: &[u8] = if count_answers == 0 {
        &zone.apex.soa_negative_wire
    } else {
        &[]
    };
    let max = usize::from(payload.unwrap_or(512));
    let size = question_end
        + count_answers * (12 + usize::from(rdlen))
        + soa.len()
        + payload.map_or(0, |_| 11);
    if size > max {
        return None;
    }

    out.reserve(size);
    out.extend_from_slice(&header[..2]);
    // QR and AA set, RD and CD echoed (as hickory's `response_from_request`), the RCODE.
    out.push(0x80 | 0x04 | (header[2] & 0x01));
    out.push((header[3] & 0x10) | u16::from(rcode) as u8);
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&(count_answers as u16).to_be_bytes());
    out.extend_from_slice(&u16::from(!soa.is_empty()).to_be_bytes());
    out.extend_from_slice(&u16::from(payload.is_some()).to_be_bytes());
    // The question as the client wrote it: answers echo its case.
    out.extend_from_slice(&msg[HEADER_LEN..question_end]);
    if let Some(node) = node {
        let ttl = node.ttl_or(snapshot.ttl);
        let mut record = |rdata: &[u8]| {
            // Owner: a pointer to the question's name at offset 12 (a wildcard's answers too
            // carry the name asked, RFC 4592 §3.4.3).
            out.extend_from_slice(&[0xC0, HEADER_LEN as u8]);
            out.extend_from_slice(&qtype.to_be_bytes());
            out.extend_from_slice(&CLASS_IN.to_be_bytes());
            out.extend_from_slice(&ttl.to_be_bytes());
            out.extend_from_slice(&rdlen.to_be_bytes());
            out.extend_from_slice(rdata);
        };
        if qtype == TYPE_A {
            node.a.iter().for_each(|ip| record(&ip.octets()));
        } else {
            node.aaaa.iter().for_each(|ip| record(&ip.octets()));
        }
    }
    out.extend_from_slice(soa);
    if let Some(payload) = payload {
        // Our OPT: root owner, our payload size, extended RCODE 0, version 0, no flags, no
        // options.
        out.push(0);
        out.extend_from_slice(&TYPE_OPT.to_be_bytes());
        out.extend_from_slice(&payload.to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    Some((RecordType::from(qtype), rcode, zone.index))
}

#[cfg(test)]
mod tests {
    use std::{net::IpAddr, sync::Arc};

    use hickory_proto::{
        op::{Edns, Message, Query},
        rr::Name,
    };
    use hickory_server::net::xfer::Protocol;

    use crate::{
        Handler, HostRecords, NoObserver, RecordTable, Zone, ZoneSettings, ratelog::MalformedLog,
        respond::Answerer,
    };

    use super::*;

    fn table() -> Arc<RecordTable> {
        let table = RecordTable::new(
            vec![Zone::new("xcc.test").unwrap()],
            ZoneSettings {
                ttl: 30,
                negative_ttl: 15,
            },
        )
        .unwrap();
        let host = |name: &str, ips: Vec<IpAddr>, cname: Option<&str>| {
            (
                Name::from_ascii(name).unwrap(),
                HostRecords {
                    addresses: ips,
                    cname: cname.map(|c| Name::from_ascii(c).unwrap()),
                    ttl: None,
                    srv: Vec::new(),
                },
            )
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let big = (0..40).map(|i| ip(&format!("198.51.100.{i}"))).collect();
        table
            .set_source(
                "test",
                vec![
                    host("a.xcc.test.", vec![ip("192.0.2.2"), ip("192.0.2.1")], None),
                    host("v6.xcc.test.", vec![ip("2001:db8::1")], None),
                    host(
                        "both.xcc.test.",
                        vec![ip("192.0.2.3"), ip("2001:db8::3")],
                        None,
                    ),
                    host("big.xcc.test.", big, None),
                    host("alias.xcc.test.", vec![], Some("a.xcc.test.")),
                    host("*.w.xcc.test.", vec![ip("192.0.2.50")], None),
                    host("deep.b.xcc.test.", vec![ip("192.0.2.60")], None),
                    (
                        Name::from_ascii("srv.xcc.test.").unwrap(),
                        HostRecords {
                            srv: vec![crate::Srv {
                                priority: 0,
                                weight: 100,
                                port: 42,
                                target: Name::from_ascii("a.xcc.test.").unwrap(),
                            }],
                            ..HostRecords::default()
                        },
                    ),
                ],
            )
            .unwrap();
        Arc::new(table)
    }

    /// Every query shape the fast path might take, answered with and without it: the parsed
    /// responses must be equal, and the fast path must have taken the common ones.
    #[test]
    fn the_fast_path_answers_exactly_as_the_handler() {
        let table = table();
        let handler = Handler::new(table.clone(), Arc::new(NoObserver));
        let log = Arc::new(MalformedLog::default());
        let fast = Answerer::new(handler.clone(), log.clone(), Protocol::Udp);
        let slow = Answerer::new(handler, log, Protocol::Udp).without_fast_path();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let names = [
            "a.xcc.test.",
            "A.XCC.test.",
            "v6.xcc.test.",
            "BoTh.xCc.TeSt.",
            "big.xcc.test.",
            "alias.xcc.test.",
            "*.w.xcc.test.",
            "x.w.xcc.test.",
            "b.xcc.test.",
            "deep.b.xcc.test.",
            "srv.xcc.test.",
            "xcc.test.",
            "missing.xcc.test.",
            "a.example.",
        ];
        let types = [
            RecordType::A,
            RecordType::AAAA,
            RecordType::CNAME,
            RecordType::MX,
            RecordType::SRV,
            RecordType::ANY,
        ];
        let edns = [
            None,
            Some((512, 0)),
            Some((1232, 0)),
            Some((4096, 0)),
            Some((100, 0)),
            Some((1232, 1)),
        ];
        let (mut compared, mut taken) = (0, 0);
        let peer = "127.0.0.1:5353".parse().unwrap();
        for name in names {
            for qtype in types {
                for opt in edns {
                    for (rd, cd, dnssec_ok) in [(true, false, false), (false, true, true)] {
                        let mut q = Message::query();
                        q.metadata.id = 4242;
                        q.metadata.recursion_desired = rd;
                        q.metadata.checking_disabled = cd;
                        q.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
                        if let Some((payload, version)) = opt {
                            let mut e = Edns::new();
                            e.set_max_payload(payload);
                            e.set_version(version);
                            e.set_dnssec_ok(dnssec_ok);
                            q.set_edns(e);
                        }
                        let bytes = q.to_vec().unwrap();
                        let (mut a, mut b) = (Vec::new(), Vec::new());
                        runtime.block_on(async {
                            assert!(fast.answer(&bytes, peer, &mut a).await);
                            assert!(slow.answer(&bytes, peer, &mut b).await);
                        });
                        // Parsed, not byte for byte: the fast path points the answers' owner
                        // at the question, where hickory spells the first one out. Record
                        // equality ignores TTLs, so those are compared on their own.
                        let (a, b) = (
                            Message::from_vec(&a).unwrap(),
                            Message::from_vec(&b).unwrap(),
                        );
                        // Names compare without case; answers must echo the question's.
                        let ttls = |m: &Message| -> Vec<(u32, String)> {
                            m.answers
                                .iter()
                                .chain(&m.authorities)
                                .chain(&m.additionals)
                                .map(|r| (r.ttl, r.name.to_string()))
                                .collect()
                        };
                        let case = format!("{name} {qtype} {opt:?} rd={rd} cd={cd}");
                        assert_eq!(a, b, "{case}");
                        assert_eq!(ttls(&a), ttls(&b), "{case}");
                        compared += 1;
                        let mut out = Vec::new();
                        if answer(&bytes, &table.snapshot(), &mut out).is_some() {
                            taken += 1;
                        }
                    }
                }
            }
        }
        // A and AAAA on a, A.XCC, v6, both, the literal wildcard, a name under it, the empty
        // non-terminal b, deep.b, srv (NODATA: it has only SRV records) and missing (NODATA and
        // NXDOMAIN included), and big where it fits: 214 shapes. Anything short of that means
        // the fast path quietly stopped working.
        assert!(taken >= 214, "fast path taken {taken} times of {compared}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 20_000, failure_persistence: None, ..Default::default() })]

        /// Mutated queries never panic the fast path, and whatever it sends parses.
        #[test]
        fn mutated_queries_never_panic(
            flips in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..6),
            cut in proptest::prelude::any::<usize>(),
            edns in proptest::prelude::any::<bool>(),
        ) {
            static TABLE: std::sync::OnceLock<Arc<RecordTable>> = std::sync::OnceLock::new();
            let table = TABLE.get_or_init(table);
            let mut q = Message::query();
            q.add_query(Query::query(Name::from_ascii("both.xcc.test.").unwrap(), RecordType::A));
            if edns {
                q.set_edns(Edns::new());
            }
            let mut bytes = q.to_vec().unwrap();
            for (at, value) in flips {
                let len = bytes.len();
                bytes[at % len] = value;
            }
            bytes.truncate(cut % (bytes.len() + 1));
            let mut out = Vec::new();
            if answer(&bytes, &table.snapshot(), &mut out).is_some() {
                Message::from_vec(&out).unwrap();
            }
        }
    }
}

//! A walk over a query's bytes before hickory decodes it.
//!
//! hickory sizes some of its buffers from the header's counts (`Queries::read` reserves room for
//! `qdcount` questions, 65,535 of them for a 12-byte packet), and a freed burst of such buffers
//! stays in the allocator's arenas: garbage traffic used to grow the resident set five-fold and
//! keep it there. This walk reads the header, the one question and the few records a query may
//! carry, allocates nothing, and lets only a well-formed query through; everything else is
//! answered with a bare header (FORMERR, or NOTIMP for other opcodes) or dropped. It also checks
//! the EDNS options, which hickory would otherwise skip with a warning per packet.

use crate::ratelog::Cause;

/// Length of the DNS header.
pub const HEADER_LEN: usize = 12;
/// Longest query accepted. A question with an OPT, a cookie and RFC 8467 padding stays well
/// below this; anything longer is not a query this server answers.
pub const MAX_QUERY_LEN: usize = 4096;
/// Records a query may carry in its additional section (OPT, and room for TSIG or a stray
/// record). Each is walked here, so the bound only keeps the walk short.
const MAX_ADDITIONALS: u16 = 4;
/// Records a message with another opcode may carry in all its sections before we stop reading it
/// and answer NOTIMP from the header alone (a NOTIFY carries one SOA, an UPDATE a few records).
const MAX_OTHER_RECORDS: u16 = 8;
/// Compression pointers followed in one name; pointers must also point backwards, so a loop is
/// impossible anyway and this only bounds the work.
const MAX_POINTERS: usize = 16;

const TYPE_OPT: u16 = 41;
const EDNS_COOKIE: u16 = 10;
const OPCODE_QUERY: u8 = 0;

/// Response codes this module answers with (RFC 1035 §4.1.1).
pub(crate) const FORMERR: u8 = 1;
pub(crate) const NOTIMP: u8 = 4;

/// What to do with a message, decided from its bytes alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A well-formed query (or a small message with another opcode): decode and answer it.
    Decode,
    /// Answer with a bare header carrying this response code.
    Reply {
        /// The response code (FORMERR, NOTIMP, ...).
        rcode: u8,
        /// Why the message gets it (the metric label).
        cause: Cause,
    },
    /// Send nothing: too short to have a header, or a response (answering those would let anyone
    /// bounce traffic off us).
    Drop(Cause),
}

/// Classifies `msg`, the bytes of one DNS message (without the TCP length prefix).
pub fn precheck(msg: &[u8]) -> Verdict {
    if msg.len() < HEADER_LEN {
        return Verdict::Drop(Cause::Short);
    }
    if msg[2] & 0x80 != 0 {
        return Verdict::Drop(Cause::Response);
    }
    let count = |at: usize| u16::from_be_bytes([msg[at], msg[at + 1]]);
    let (qd, an, ns, ar) = (count(4), count(6), count(8), count(10));
    let query = (msg[2] >> 3) & 0x0F == OPCODE_QUERY;
    let formerr = |cause| Verdict::Reply {
        rcode: FORMERR,
        cause,
    };
    if msg.len() > MAX_QUERY_LEN {
        return formerr(Cause::TooLong);
    }
    if query {
        // One question (RFC 9619), nothing in the answer and authority sections of a query.
        if qd != 1 {
            return formerr(Cause::QuestionCount);
        }
        if an != 0 || ns != 0 || ar > MAX_ADDITIONALS {
            return formerr(Cause::RecordCounts);
        }
    } else if qd > 1 || u32::from(an) + u32::from(ns) + u32::from(ar) > u32::from(MAX_OTHER_RECORDS)
    {
        // Not a query: NOTIMP whatever it holds, without reading further.
        return Verdict::Reply {
            rcode: NOTIMP,
            cause: Cause::NotImplemented,
        };
    }
    match walk(msg, qd, an, ns, ar) {
        Ok(()) => Verdict::Decode,
        Err(cause) => formerr(cause),
    }
}

/// Walks the question and every record, checking that each lies inside the message.
fn walk(msg: &[u8], qd: u16, an: u16, ns: u16, ar: u16) -> Result<(), Cause> {
    let mut at = HEADER_LEN;
    for _ in 0..qd {
        at = skip_name(msg, at)?;
        at = advance(msg, at, 4)?;
    }
    let mut opt_seen = false;
    for index in 0..(u32::from(an) + u32::from(ns) + u32::from(ar)) {
        let name_at = at;
        at = skip_name(msg, at)?;
        let fixed = msg.get(at..at + 10).ok_or(Cause::Truncated)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        at += 10;
        let rdata = msg.get(at..at + rdlen).ok_or(Cause::Truncated)?;
        at += rdlen;
        if rtype == TYPE_OPT {
            // RFC 6891 §6.1.1: one OPT, owned by the root, in the additional section.
            let additional = index >= u32::from(an) + u32::from(ns);
            if opt_seen || !additional || msg[name_at] != 0 {
                return Err(Cause::Opt);
            }
            opt_seen = true;
            check_options(rdata)?;
        }
    }
    Ok(())
}

fn advance(msg: &[u8], at: usize, by: usize) -> Result<usize, Cause> {
    let end = at + by;
    if end > msg.len() {
        Err(Cause::Truncated)
    } else {
        Ok(end)
    }
}

/// Skips the name at `at` and returns the offset after it (after its first pointer, if any).
/// Applies hickory's own rules, so that whatever passes here decodes there: labels of at most
/// 63 bytes, names shorter than 255, and pointers only to bytes before the name they occur in.
fn skip_name(msg: &[u8], at: usize) -> Result<usize, Cause> {
    let mut pos = at;
    // Start of the name (or pointed-to suffix) being read: pointers must go before it.
    let mut segment_start = at;
    let mut end_after = None;
    let mut name_len = 0usize;
    let mut pointers = 0;
    loop {
        let len = *msg.get(pos).ok_or(Cause::Truncated)?;
        match len & 0xC0 {
            0x00 if len == 0 => return Ok(end_after.unwrap_or(pos + 1)),
            0x00 => {
                let len = usize::from(len);
                // A label adds its length and one length byte to the name, and the root's zero
                // byte is still to come: at most 255 bytes in all (RFC 1035 §3.1).
                name_len += len + 1;
                if name_len + 1 > 255 {
                    return Err(Cause::Name);
                }
                pos = advance(msg, pos + 1, len)?;
            }
            0xC0 => {
                let low = *msg.get(pos + 1).ok_or(Cause::Truncated)?;
                let target = usize::from(u16::from_be_bytes([len & 0x3F, low]));
                pointers += 1;
                if target >= segment_start || pointers > MAX_POINTERS {
                    return Err(Cause::Name);
                }
                end_after.get_or_insert(pos + 2);
                segment_start = target;
                pos = target;
            }
            // 0x40 and 0x80: reserved label types (RFC 6891 §5 retired the extended ones).
            _ => return Err(Cause::Name),
        }
    }
}

/// Checks the options of an OPT record: each option whole, together filling the RDATA exactly,
/// and a COOKIE of a legal length (RFC 7873 §5.2.2: 8, or 16 to 40 bytes).
fn check_options(mut rdata: &[u8]) -> Result<(), Cause> {
    while !rdata.is_empty() {
        let head = rdata.get(..4).ok_or(Cause::Opt)?;
        let code = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        if rdata.len() < 4 + len {
            return Err(Cause::Opt);
        }
        if code == EDNS_COOKIE && !(len == 8 || (16..=40).contains(&len)) {
            return Err(Cause::Opt);
        }
        rdata = &rdata[4 + len..];
    }
    Ok(())
}

/// A bare response header to `msg` (which holds at least a header): the query's ID, opcode, RD
/// and CD flags, QR set, `rcode`, every count zero (RFC 1035 §4.1.1; no question echoed, since the
/// question could not be trusted).
pub fn bare_reply(msg: &[u8], rcode: u8) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[0] = msg[0];
    out[1] = msg[1];
    // QR, the opcode, RD; AA, TC, RA, Z and AD clear; CD echoed (as hickory's responses do).
    out[2] = 0x80 | (msg[2] & 0x78) | (msg[2] & 0x01);
    out[3] = (msg[3] & 0x10) | (rcode & 0x0F);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `a.xcc.test A`, with an OPT of `options` when given.
    fn query(options: Option<&[u8]>) -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(b"\x01a\x03xcc\x04test\x00\x00\x01\x00\x01");
        if let Some(options) = options {
            m[11] = 1;
            m.extend_from_slice(&[0, 0, 41, 0x04, 0xD0, 0, 0, 0, 0]);
            m.extend_from_slice(&(options.len() as u16).to_be_bytes());
            m.extend_from_slice(options);
        }
        m
    }

    fn cookie(len: usize) -> Vec<u8> {
        let mut o = vec![0, 10];
        o.extend_from_slice(&(len as u16).to_be_bytes());
        o.extend(std::iter::repeat_n(0xAB, len));
        o
    }

    fn rcode_of(v: Verdict) -> Option<u8> {
        match v {
            Verdict::Reply { rcode, .. } => Some(rcode),
            _ => None,
        }
    }

    #[test]
    fn well_formed_queries_pass() {
        assert_eq!(precheck(&query(None)), Verdict::Decode);
        assert_eq!(precheck(&query(Some(&[]))), Verdict::Decode);
        assert_eq!(precheck(&query(Some(&cookie(8)))), Verdict::Decode);
        assert_eq!(precheck(&query(Some(&cookie(24)))), Verdict::Decode);
    }

    #[test]
    fn huge_counts_are_formerr_from_the_header_alone() {
        for (at, value) in [(4, 0xFFFF), (4, 0), (4, 2), (6, 1), (8, 0xFFFF), (10, 5)] {
            let mut m = query(None);
            m[at..at + 2].copy_from_slice(&u16::to_be_bytes(value));
            assert_eq!(
                rcode_of(precheck(&m)),
                Some(FORMERR),
                "count at {at} = {value}"
            );
        }
    }

    #[test]
    fn short_messages_and_responses_are_dropped() {
        assert_eq!(precheck(&[0; 11]), Verdict::Drop(Cause::Short));
        let mut m = query(None);
        m[2] |= 0x80;
        assert_eq!(precheck(&m), Verdict::Drop(Cause::Response));
    }

    #[test]
    fn truncated_or_bad_names_are_formerr() {
        let m = query(None);
        for cut in HEADER_LEN..m.len() {
            assert_eq!(rcode_of(precheck(&m[..cut])), Some(FORMERR), "cut at {cut}");
        }
        let mut long_label = query(None);
        long_label[12] = 64;
        assert_eq!(rcode_of(precheck(&long_label)), Some(FORMERR));
        let mut reserved = query(None);
        reserved[12] = 0x80;
        assert_eq!(rcode_of(precheck(&reserved)), Some(FORMERR));
    }

    #[test]
    fn compression_loops_and_forward_pointers_are_formerr() {
        // The question's name is a pointer to itself, then one to a later byte.
        for target in [12u8, 14] {
            let mut m = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, target, 0, 1, 0, 1];
            m.extend_from_slice(&[0; 4]);
            assert_eq!(rcode_of(precheck(&m)), Some(FORMERR));
        }
        // A pointer into the header (before the name) is legal and passes: hickory decodes it.
        let m = [0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 11, 0, 1, 0, 1];
        assert_eq!(precheck(&m), Verdict::Decode);
    }

    #[test]
    fn names_of_255_bytes_or_more_are_formerr() {
        let mut m = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        for _ in 0..4 {
            m.push(63);
            m.extend(std::iter::repeat_n(b'a', 63));
        }
        m.extend_from_slice(&[0, 0, 1, 0, 1]);
        assert_eq!(rcode_of(precheck(&m)), Some(FORMERR));
    }

    #[test]
    fn malformed_edns_options_are_formerr() {
        // A cookie one byte short of the client cookie, an option running past the RDATA, and a
        // stray byte after the last option.
        assert_eq!(rcode_of(precheck(&query(Some(&cookie(7))))), Some(FORMERR));
        assert_eq!(rcode_of(precheck(&query(Some(&cookie(41))))), Some(FORMERR));
        let mut past = cookie(8);
        past[3] = 9;
        assert_eq!(rcode_of(precheck(&query(Some(&past)))), Some(FORMERR));
        let mut stray = cookie(8);
        stray.push(0);
        assert_eq!(rcode_of(precheck(&query(Some(&stray)))), Some(FORMERR));
        // Two OPTs.
        let mut two = query(Some(&[]));
        two[11] = 2;
        two.extend_from_slice(&[0, 0, 41, 0x04, 0xD0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(rcode_of(precheck(&two)), Some(FORMERR));
    }

    #[test]
    fn other_opcodes_are_notimp_when_big_and_decoded_when_small() {
        let mut notify = query(None);
        notify[2] = 4 << 3;
        assert_eq!(precheck(&notify), Verdict::Decode);
        notify[6..8].copy_from_slice(&[0xFF, 0xFF]);
        assert_eq!(rcode_of(precheck(&notify)), Some(NOTIMP));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 20_000, failure_persistence: None, ..Default::default() })]

        /// Never a panic, and every bare reply parses as a DNS response to the same ID.
        #[test]
        fn any_bytes_get_a_verdict(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            check_any(&bytes);
        }

        #[test]
        fn mutated_queries_get_a_verdict(
            flips in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..6),
            cut in proptest::prelude::any::<usize>(),
        ) {
            let mut bytes = query(Some(&cookie(8)));
            for (at, value) in flips {
                let len = bytes.len();
                bytes[at % len] = value;
            }
            bytes.truncate(HEADER_LEN + cut % (bytes.len() - HEADER_LEN + 1));
            check_any(&bytes);
        }
    }

    fn check_any(bytes: &[u8]) {
        if let Verdict::Reply { rcode, .. } = precheck(bytes) {
            let reply = hickory_proto::op::Message::from_vec(&bare_reply(bytes, rcode)).unwrap();
            assert_eq!(reply.metadata.id, u16::from_be_bytes([bytes[0], bytes[1]]));
            assert_eq!(
                reply.metadata.message_type,
                hickory_proto::op::MessageType::Response
            );
        }
    }

    #[test]
    fn bare_replies_echo_id_opcode_and_rd() {
        let mut m = query(None);
        m[2] = (4 << 3) | 0x01 | 0x04;
        let r = bare_reply(&m, NOTIMP);
        assert_eq!(&r[..2], &[0x12, 0x34]);
        assert_eq!(r[2], 0x80 | (4 << 3) | 0x01);
        assert_eq!(r[3], NOTIMP);
        assert!(r[4..].iter().all(|b| *b == 0));
    }
}

//! Resolution of one question against one snapshot: the DNS rules of the zone, free of any
//! wire or socket concern.
//!
//! - exact name → its records; name without the asked type (including empty non-terminals)
//!   → NODATA with the SOA;
//! - no such name → the wildcard `*.<closest encloser>` if it exists (RFC 4592), else NXDOMAIN
//!   with the SOA; a wildcard never covers its own parent;
//! - a CNAME is followed while its target stays inside a served zone (RFC 1034 §4.3.2, RFC 6604);
//! - SRV answers carry no additional records: the targets' addresses are a query of their own.
//!   (`nslookup`, which the MCS conformance suite parses, prints the additional section of a
//!   non-authoritative SRV answer as `internet address = ...` lines, which its SRV pattern would
//!   count as records.)

use std::borrow::Cow;

use hickory_proto::{
    op::ResponseCode,
    rr::{
        Name, RData, Record, RecordType,
        rdata::{A, AAAA, CNAME, SRV},
    },
};

use crate::{
    name::{KeyBuf, MAX_KEY_LEN, in_zone, wildcard_key},
    table::{Node, Snapshot, ZoneEntry},
};

/// Longest CNAME chain followed inside our zones; a longer one is a loop or a mistake.
const MAX_CNAME_HOPS: usize = 8;

/// What to send back for one question.
#[derive(Debug)]
pub struct Resolution<'s> {
    /// NOERROR, NXDOMAIN or REFUSED.
    pub rcode: ResponseCode,
    /// Whether the answer comes from a zone we are authoritative for.
    pub authoritative: bool,
    /// Answer section, owners in the case the question used.
    pub answers: Vec<Cow<'s, Record>>,
    /// Authority section: the zone's SOA on negative answers.
    pub authority: Option<&'s Record>,
    /// The zone of the question (its position in [`RecordTable::zones`](crate::RecordTable::zones));
    /// `None` for a name outside every zone.
    pub zone: Option<usize>,
}

impl<'s> Resolution<'s> {
    fn refused() -> Self {
        Resolution {
            rcode: ResponseCode::Refused,
            authoritative: false,
            answers: Vec::new(),
            authority: None,
            zone: None,
        }
    }
}

pub(crate) enum Found<'s> {
    /// The name exists; `node` is `None` for the apex without host records or an empty
    /// non-terminal. `synthesized` when it came from a wildcard.
    Name {
        node: Option<&'s Node>,
        apex: bool,
    },
    NxDomain,
}

impl Snapshot {
    /// Resolves `qname`/`qtype` (class IN). `qname` keeps its case: answers echo it.
    #[expect(
        clippy::too_many_lines,
        reason = "the general DNS path's resolution loop: each CNAME hop updates the key, the zone, the owner and the answer together, on every query"
    )]
    pub fn resolve(&self, qname: &Name, qtype: RecordType) -> Resolution<'_> {
        let Some(mut key) = KeyBuf::from_name(qname) else {
            return Resolution::refused();
        };
        let Some(mut zone) = self.zone_of(key.key()) else {
            return Resolution::refused();
        };
        let mut out = Resolution {
            rcode: ResponseCode::NoError,
            authoritative: true,
            answers: Vec::new(),
            authority: None,
            zone: Some(zone.index),
        };
        // Owner of the records at the current step: the question's own name first, then each
        // CNAME target as written in the table.
        let mut owner: Cow<'_, Name> = Cow::Borrowed(qname);
        for _ in 0..MAX_CNAME_HOPS {
            let (node, apex) = match self.find(&key, zone) {
                Found::Name { node, apex } => (node, apex),
                Found::NxDomain => {
                    out.rcode = ResponseCode::NXDomain;
                    out.authority = Some(&zone.apex.soa_negative);
                    return out;
                }
            };
            let before = out.answers.len();
            if apex {
                match qtype {
                    RecordType::SOA => push(&mut out.answers, &zone.apex.soa_answer, &owner),
                    RecordType::NS => push(&mut out.answers, &zone.apex.ns, &owner),
                    RecordType::ANY => {
                        push(&mut out.answers, &zone.apex.soa_answer, &owner);
                        push(&mut out.answers, &zone.apex.ns, &owner);
                    }
                    _ => {}
                }
            }
            let Some(node) = node else {
                if out.answers.len() == before {
                    out.authority = Some(&zone.apex.soa_negative);
                }
                return out;
            };
            let ttl = node.ttl_or(self.ttl);
            let record =
                |data: RData| Cow::Owned(Record::from_rdata(owner.clone().into_owned(), ttl, data));
            if let Some(target) = &node.cname
                && qtype != RecordType::CNAME
                && qtype != RecordType::ANY
            {
                out.answers
                    .push(record(RData::CNAME(CNAME((**target).clone()))));
                let Some(next_key) = KeyBuf::from_name(target) else {
                    return out;
                };
                match self.zone_of(next_key.key()) {
                    Some(next_zone) => {
                        key = next_key;
                        zone = next_zone;
                        owner = Cow::Owned((**target).clone());
                        continue;
                    }
                    // Out of our zones: the resolver follows it from here.
                    None => return out,
                }
            }
            let (a, aaaa, cname, srv) = match qtype {
                RecordType::A => (true, false, false, false),
                RecordType::AAAA => (false, true, false, false),
                RecordType::CNAME => (false, false, true, false),
                RecordType::SRV => (false, false, false, true),
                RecordType::ANY => (true, true, true, true),
                _ => (false, false, false, false),
            };
            if a {
                out.answers
                    .extend(node.a.iter().map(|ip| record(RData::A(A(*ip)))));
            }
            if aaaa {
                out.answers
                    .extend(node.aaaa.iter().map(|ip| record(RData::AAAA(AAAA(*ip)))));
            }
            if srv {
                out.answers.extend(node.srv.iter().map(|s| {
                    record(RData::SRV(SRV::new(
                        s.priority,
                        s.weight,
                        s.port,
                        s.target.clone(),
                    )))
                }));
            }
            if let (true, Some(target)) = (cname, &node.cname) {
                out.answers
                    .push(record(RData::CNAME(CNAME((**target).clone()))));
            }
            if out.answers.len() == before {
                out.authority = Some(&zone.apex.soa_negative);
            }
            return out;
        }
        out
    }

    /// The closest zone containing `key`.
    pub(crate) fn zone_of(&self, key: &[u8]) -> Option<&ZoneEntry> {
        self.zones.iter().find(|z| in_zone(key, &z.key))
    }

    /// The node that answers for `key` in `zone`: its own, a wildcard's, or none.
    pub(crate) fn find(&self, key: &KeyBuf, zone: &ZoneEntry) -> Found<'_> {
        let full = key.key();
        if let Some(node) = self.nodes.get(full) {
            let apex = full.len() == zone.key.len();
            return Found::Name {
                node: node_with_data(node),
                apex,
            };
        }
        if full.len() == zone.key.len() {
            return Found::Name {
                node: None,
                apex: true,
            };
        }
        // Closest encloser: the nearest existing ancestor (the apex always exists).
        let mut wildcard = [0u8; MAX_KEY_LEN + 2];
        for up in 1..key.label_count() {
            let ancestor = key.ancestor(up);
            if ancestor.len() < zone.key.len() {
                break;
            }
            if ancestor.len() == zone.key.len() || self.nodes.contains_key(ancestor) {
                return match self.nodes.get(wildcard_key(ancestor, &mut wildcard)) {
                    Some(node) => Found::Name {
                        node: node_with_data(node),
                        apex: false,
                    },
                    None => Found::NxDomain,
                };
            }
        }
        Found::NxDomain
    }
}

fn node_with_data(node: &Node) -> Option<&Node> {
    node.has_data().then_some(node)
}

/// Adds `record` under `owner`'s spelling, copying it only when the spelling differs.
fn push<'s>(answers: &mut Vec<Cow<'s, Record>>, record: &'s Record, owner: &Name) {
    if record.name.eq_case(owner) {
        answers.push(Cow::Borrowed(record));
    } else {
        let mut copy = record.clone();
        copy.name = owner.clone();
        answers.push(Cow::Owned(copy));
    }
}

//! Zone settings: origin, TTLs, and the SOA and NS records served at each apex.

use hickory_proto::rr::{
    DNSClass, Name, RData, Record, RecordType,
    rdata::{NS, SOA},
};

use crate::Error;

/// Default zone served when none is configured.
pub const DEFAULT_ZONE: &str = "xcc.test";

/// TTLs and names shared by every zone the table serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneSettings {
    /// TTL of positive answers, and of the SOA and NS records when asked for directly.
    pub ttl: u32,
    /// TTL of negative answers (RFC 2308): the SOA MINIMUM field and the SOA's TTL in authority.
    pub negative_ttl: u32,
}

impl Default for ZoneSettings {
    fn default() -> Self {
        ZoneSettings {
            ttl: 30,
            negative_ttl: 30,
        }
    }
}

/// One zone the table is authoritative for.
#[derive(Clone, Debug)]
pub struct Zone {
    origin: Name,
    key: Box<[u8]>,
}

impl Zone {
    /// Parses a zone origin such as `xcc.test` (a trailing dot is optional).
    pub fn new(origin: &str) -> Result<Self, Error> {
        let name = parse_fqdn(origin).map_err(|reason| Error::InvalidZone {
            zone: origin.to_string(),
            reason,
        })?;
        if name.is_root() {
            return Err(Error::InvalidZone {
                zone: origin.to_string(),
                reason: "the root zone cannot be served".into(),
            });
        }
        let name = name.to_lowercase();
        let key = crate::name::key_of(&name).ok_or_else(|| Error::InvalidZone {
            zone: origin.to_string(),
            reason: "name too long".into(),
        })?;
        Ok(Zone { origin: name, key })
    }

    /// The zone's origin, lowercase and fully qualified.
    pub fn origin(&self) -> &Name {
        &self.origin
    }

    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Name of the zone's name server (`ns.<zone>`), the SOA MNAME and the NS target.
    pub fn ns_name(&self) -> Name {
        Name::from_ascii("ns")
            .and_then(|n| n.append_domain(&self.origin))
            .expect("ns.<zone> is valid whenever <zone> is")
    }

    /// The apex records for one published version of the table.
    pub(crate) fn apex(&self, settings: &ZoneSettings, serial: u32) -> Apex {
        let rname = Name::from_ascii("hostmaster")
            .and_then(|n| n.append_domain(&self.origin))
            .expect("hostmaster.<zone> is valid whenever <zone> is");
        let soa = SOA::new(
            self.ns_name(),
            rname,
            serial,
            3600,
            600,
            86400,
            settings.negative_ttl,
        );
        let soa_answer = Record::from_rdata(self.origin.clone(), settings.ttl, RData::SOA(soa));
        let mut soa_negative = soa_answer.clone();
        // RFC 2308 §5: the SOA in a negative answer lives for min(SOA TTL, MINIMUM).
        soa_negative.ttl = settings.ttl.min(settings.negative_ttl);
        let ns = Record::from_rdata(
            self.origin.clone(),
            settings.ttl,
            RData::NS(NS(self.ns_name())),
        );
        let soa_negative_wire = record_wire(&soa_negative);
        Apex {
            soa_answer,
            soa_negative,
            soa_negative_wire,
            ns,
        }
    }
}

/// SOA and NS of one zone in one snapshot.
#[derive(Debug)]
pub(crate) struct Apex {
    pub soa_answer: Record,
    pub soa_negative: Record,
    /// `soa_negative` in wire form, names spelled out (no compression), for the fast path's
    /// negative answers.
    pub soa_negative_wire: Box<[u8]>,
    pub ns: Record,
}

/// An SOA record in wire form with every name written out, so that it can be copied into any
/// message as it is.
fn record_wire(record: &Record) -> Box<[u8]> {
    fn name(name: &Name, out: &mut Vec<u8>) {
        for label in name.iter() {
            out.push(label.len() as u8);
            out.extend_from_slice(label);
        }
        out.push(0);
    }
    let RData::SOA(soa) = &record.data else {
        return Box::default();
    };
    let mut rdata = Vec::with_capacity(64);
    name(&soa.mname, &mut rdata);
    name(&soa.rname, &mut rdata);
    for value in [
        soa.serial,
        soa.refresh as u32,
        soa.retry as u32,
        soa.expire as u32,
        soa.minimum,
    ] {
        rdata.extend_from_slice(&value.to_be_bytes());
    }
    let mut out = Vec::with_capacity(rdata.len() + 32);
    name(&record.name, &mut out);
    out.extend_from_slice(&u16::from(RecordType::SOA).to_be_bytes());
    out.extend_from_slice(&u16::from(DNSClass::IN).to_be_bytes());
    out.extend_from_slice(&record.ttl.to_be_bytes());
    out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    out.extend_from_slice(&rdata);
    out.into_boxed_slice()
}

/// Parses a host or zone name written by a person; relative names are taken as absolute.
pub(crate) fn parse_fqdn(text: &str) -> Result<Name, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("empty name".into());
    }
    let mut name = Name::from_ascii(trimmed).map_err(|e| e.to_string())?;
    name.set_fqdn(true);
    if name.iter().any(|label| label.is_empty()) {
        return Err("empty label".into());
    }
    Ok(name)
}

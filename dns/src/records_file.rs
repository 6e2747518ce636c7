//! The standalone records file: a YAML map from host name to addresses or a canonical name.
//!
//! ```yaml
//! records:
//!   gateway.cluster-a.dev-team.clusters.xcc.test:
//!     addresses: [192.0.2.10, 2001:db8::10]
//!   "*.gateway.cluster-a.dev-team.clusters.xcc.test":
//!     addresses: [192.0.2.10]
//!   db.xcc.test:
//!     cname: postgres.example.com
//! ```

use std::{collections::BTreeMap, net::IpAddr, path::Path};

use hickory_proto::rr::Name;
use serde::Deserialize;

use crate::{Error, HostRecords, zone::parse_fqdn};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordsFile {
    #[serde(default)]
    records: Records,
}

/// The host map, rejecting a host name given twice (a YAML map would silently keep the last).
#[derive(Default)]
struct Records(BTreeMap<HostName, Entry>);

impl<'de> Deserialize<'de> for Records {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Records;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map from host name to `addresses` or `cname`")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Records, A::Error> {
                let mut records = BTreeMap::new();
                while let Some(host) = map.next_key::<HostName>()? {
                    let entry: Entry = map.next_value().map_err(|e| {
                        serde::de::Error::custom(format_args!("host {}: {e}", host.0))
                    })?;
                    if records.contains_key(&host) {
                        return Err(serde::de::Error::custom(format_args!(
                            "duplicate host name {}",
                            host.0
                        )));
                    }
                    records.insert(host, entry);
                }
                Ok(Records(records))
            }
        }
        d.deserialize_map(Visitor)
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct HostName(Name);

impl<'de> Deserialize<'de> for HostName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_fqdn(&text)
            .map(HostName)
            .map_err(|reason| serde::de::Error::custom(format!("host name {text:?}: {reason}")))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawEntry")]
struct Entry(HostRecords);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(default)]
    addresses: Vec<IpAddr>,
    #[serde(default)]
    cname: Option<String>,
}

impl TryFrom<RawEntry> for Entry {
    type Error = String;

    fn try_from(raw: RawEntry) -> Result<Self, String> {
        let cname = match raw.cname {
            Some(text) => Some(parse_fqdn(&text).map_err(|e| format!("cname {text:?}: {e}"))?),
            None => None,
        };
        match (raw.addresses.is_empty(), &cname) {
            (true, None) => Err("give `addresses` or `cname`".into()),
            (false, Some(_)) => {
                Err("`addresses` and `cname` cannot both be set (RFC 1034 §3.6.2)".into())
            }
            _ => Ok(Entry(HostRecords {
                addresses: raw.addresses,
                cname,
            })),
        }
    }
}

/// Parses records-file text. Errors say where (line, column) and what is wrong.
pub fn parse_records(text: &str) -> Result<Vec<(Name, HostRecords)>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let file: RecordsFile = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    Ok(file
        .records
        .0
        .into_iter()
        .map(|(name, entry)| (name.0, entry.0))
        .collect())
}

/// Reads and parses a records file.
pub fn load_records(path: &Path) -> Result<Vec<(Name, HostRecords)>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::ReadRecords {
        path: path.to_path_buf(),
        source,
    })?;
    parse_records(&text).map_err(|message| Error::InvalidRecords {
        path: path.to_path_buf(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addresses_and_cnames() {
        let recs = parse_records(
            "records:\n  A.xcc.test:\n    addresses: [192.0.2.1, 2001:db8::1]\n  b.xcc.test.:\n    cname: a.xcc.test\n",
        )
        .unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].0, Name::from_ascii("a.xcc.test.").unwrap());
        assert_eq!(recs[0].1.addresses.len(), 2);
        assert_eq!(
            recs[1].1.cname,
            Some(Name::from_ascii("a.xcc.test.").unwrap())
        );
    }

    #[test]
    fn empty_file_is_an_empty_table() {
        assert!(parse_records("").unwrap().is_empty());
        assert!(parse_records("records: {}\n").unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let err =
            parse_records("records:\n  a.xcc.test:\n    addresses: [192.0.2.300]\n").unwrap_err();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("addresses"), "{err}");

        let err =
            parse_records("records:\n  a.xcc.test:\n    adresses: [192.0.2.1]\n").unwrap_err();
        assert!(err.contains("unknown field `adresses`"), "{err}");
        assert!(err.contains("line 3"), "{err}");

        let err = parse_records(
            "records:\n  a.xcc.test:\n    addresses: [192.0.2.1]\n    cname: b.xcc.test\n",
        )
        .unwrap_err();
        assert!(err.contains("cannot both be set"), "{err}");
        assert!(err.contains("host a.xcc.test"), "{err}");

        let err =
            parse_records("records:\n  a..xcc.test:\n    addresses: [192.0.2.1]\n").unwrap_err();
        assert!(err.contains("a..xcc.test"), "{err}");
    }

    #[test]
    fn duplicate_host_names_are_an_error_not_a_silent_overwrite() {
        let err = parse_records(
            "records:\n  a.xcc.test:\n    addresses: [192.0.2.1]\n  a.xcc.test:\n    addresses: [192.0.2.2]\n",
        )
        .unwrap_err();
        assert!(err.contains("duplicate"), "{err}");
    }
}

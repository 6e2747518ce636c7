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

/// The host map, each entry checked as it is read (so that a large file's raw text and its
/// parsed records are not held twice), rejecting a host name given twice (a YAML map would
/// silently keep the last).
#[derive(Default)]
struct Records(BTreeMap<Name, HostRecords>);

/// A host whose entry failed its checks: its name as written, and what is wrong.
struct EntryError {
    raw: String,
    message: String,
    duplicate: bool,
}

thread_local! {
    /// The entry error of the parse running on this thread. A custom serde error would carry
    /// the position of the enclosing map, not the host's; the visitor leaves the error here
    /// instead and [`parse_records`] adds the host's own line.
    static ENTRY_ERROR: std::cell::RefCell<Option<EntryError>> = const { std::cell::RefCell::new(None) };
    /// The host whose entry is not what YAML-level deserialization expects (a wrong type, an
    /// unknown field), to name it in the error.
    static ENTRY_HOST: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

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
                while let Some(raw) = map.next_key::<String>()? {
                    // A YAML-level error has its own position; [`parse_records`] adds the host.
                    let entry = map.next_value::<RawEntry>().inspect_err(|_| {
                        ENTRY_HOST.with(|h| *h.borrow_mut() = Some(raw.clone()));
                    })?;
                    let checked = parse_fqdn(&raw)
                        .map_err(|reason| format!("host name {raw:?}: {reason}"))
                        .and_then(|name| {
                            let host = entry
                                .check()
                                .map_err(|reason| format!("host {raw}: {reason}"))?;
                            Ok((name, host))
                        });
                    let failure = match checked {
                        Ok((name, host)) => match records.insert(name, host) {
                            None => continue,
                            Some(_) => (format!("duplicate host name {raw}"), true),
                        },
                        Err(message) => (message, false),
                    };
                    let (message, duplicate) = failure;
                    ENTRY_ERROR.with(|e| {
                        *e.borrow_mut() = Some(EntryError {
                            raw,
                            message,
                            duplicate,
                        })
                    });
                    return Err(serde::de::Error::custom("invalid entry"));
                }
                Ok(Records(records))
            }
        }
        d.deserialize_map(Visitor)
    }
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a host entry: a mapping with `addresses` (a list of IP addresses, e.g. \
                 `addresses: [192.0.2.10]`) or `cname` (a host name)"
)]
struct RawEntry {
    #[serde(default, deserialize_with = "addresses")]
    addresses: Vec<IpAddr>,
    #[serde(default)]
    cname: Option<String>,
}

/// The `addresses` list; a bad one is named with its index.
fn addresses<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<IpAddr>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .enumerate()
        .map(|(i, text)| {
            text.parse().map_err(|_| {
                serde::de::Error::custom(format!("addresses[{i}]: {text:?} is not an IP address"))
            })
        })
        .collect()
}

impl RawEntry {
    fn check(self) -> Result<HostRecords, String> {
        let cname = match self.cname {
            Some(text) => Some(parse_fqdn(&text).map_err(|e| format!("cname {text:?}: {e}"))?),
            None => None,
        };
        match (self.addresses.is_empty(), &cname) {
            (true, None) => Err("give `addresses` or `cname`".into()),
            (false, Some(_)) => {
                Err("`addresses` and `cname` cannot both be set (RFC 1034 §3.6.2)".into())
            }
            _ => Ok(HostRecords {
                addresses: self.addresses,
                cname,
                ttl: None,
                srv: Vec::new(),
            }),
        }
    }
}

/// The 1-based line on which `host` is written as a key (plain or quoted), at or after the line
/// `from`, for error messages.
fn line_of(text: &str, host: &str, from: usize) -> Option<usize> {
    text.lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find(|(_, line)| {
            let line = line.trim_start();
            [("", ""), ("\"", "\""), ("'", "'")]
                .iter()
                .any(|(open, close)| {
                    line.strip_prefix(open)
                        .and_then(|l| l.strip_prefix(host))
                        .and_then(|l| l.strip_prefix(close))
                        .is_some_and(|l| l.trim_start().starts_with(':'))
                })
        })
        .map(|(i, _)| i + 1)
}

/// What a host entry looks like, for a person whose entry is not one.
const ENTRY_SHAPE: &str = "a host entry is a mapping with `addresses` (a list of IP addresses, \
                           e.g. `addresses: [192.0.2.10]`) or `cname` (a host name)";

/// Parses records-file text into its hosts (an empty file has none). Errors say where (line,
/// column) and what is wrong.
pub fn parse_records(text: &str) -> Result<Vec<(Name, HostRecords)>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    ENTRY_ERROR.with(|e| e.borrow_mut().take());
    ENTRY_HOST.with(|h| h.borrow_mut().take());
    let mut options = serde_saphyr::Options::default();
    // YAML 1.2 scalars; errors on one line (they go to logs and metrics).
    options.strict_booleans = true;
    options.with_snippet = false;
    // A host given twice is reported by [`Records`] (which also sees `a.test` and `a.test.`).
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::PassThrough;
    options.budget = Some(budget_for(text.len()));
    match serde_saphyr::from_str_with_options::<RecordsFile>(text, options) {
        Ok(file) => Ok(file.records.0.into_iter().collect()),
        Err(error) => Err(match ENTRY_ERROR.with(|e| e.borrow_mut().take()) {
            Some(EntryError {
                raw,
                message,
                duplicate,
            }) => {
                // The second of two entries is the one to point at.
                let from = if duplicate {
                    line_of(text, &raw, 1).map_or(1, |first| first + 1)
                } else {
                    1
                };
                match line_of(text, &raw, from) {
                    Some(line) => format!("{message} at line {line}"),
                    None => message,
                }
            }
            None => match ENTRY_HOST.with(|h| h.borrow_mut().take()) {
                Some(host) => format!("host {host}: {error}; {ENTRY_SHAPE}"),
                None => error.to_string(),
            },
        }),
    }
}

/// The parser's limits for a records file of `len` bytes. The file is the operator's own and is
/// already in memory, so what the limits guard against is a document that expands beyond its
/// text (aliases), not a long one: the default caps (250,000 nodes, 1,000,000 events) refuse a
/// file of about 50,000 hosts, which a large fleet reaches. Every node and every event takes at
/// least one byte of text, so counts bounded by the length refuse nothing that is written out.
fn budget_for(len: usize) -> serde_saphyr::budget::Budget {
    let mut budget = serde_saphyr::budget::Budget::default();
    budget.max_nodes = budget.max_nodes.max(len);
    budget.max_events = budget.max_events.max(len.saturating_mul(2));
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(len);
    budget
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
    fn a_file_of_100_000_hosts_is_read() {
        let mut text = String::from("records:\n");
        for i in 0..100_000u32 {
            let [_, _, a, b] = i.to_be_bytes();
            text.push_str(&format!(
                "  h{i}.xcc.test:\n    addresses: [10.1.{a}.{b}]\n"
            ));
        }
        let records = parse_records(&text).unwrap();
        assert_eq!(records.len(), 100_000);
        assert_eq!(
            records[99_999].0,
            Name::from_ascii("h99999.xcc.test.").unwrap()
        );
    }

    #[test]
    fn a_document_that_expands_beyond_its_text_is_refused() {
        // Aliases nested ten deep: 10^9 nodes from a few hundred bytes.
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let prev = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        text.push_str("records: {}\n");
        assert!(parse_records(&text).is_err());
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
    fn errors_name_one_position_the_right_one() {
        let mut text = String::from("records:\n");
        for i in 0..50 {
            text.push_str(&format!("  h{i}.xcc.test:\n    addresses: [192.0.2.1]\n"));
        }
        text.push_str("  bad.xcc.test:\n    addresses: [192.0.2.1, 192.0.2.300]\n");
        let err = parse_records(&text).unwrap_err();
        assert_eq!(err.matches(" line ").count(), 1, "{err}");
        assert!(err.contains("line 103"), "{err}");
        assert!(err.contains("host bad.xcc.test: "), "{err}");
        assert!(err.contains("addresses[1]: \"192.0.2.300\""), "{err}");

        let err = parse_records(
            "records:\n  a.xcc.test:\n    addresses: [192.0.2.1]\n  \"a.xcc.test\":\n    addresses: [192.0.2.2]\n",
        )
        .unwrap_err();
        assert!(
            err.ends_with("duplicate host name a.xcc.test at line 4"),
            "{err}"
        );

        let err = parse_records("records:\n  a.xcc.test:\n    addresses: [192.0.2.1]\n  b.xcc.test:\n    cname: a..xcc.test\n").unwrap_err();
        assert!(
            err.starts_with("host b.xcc.test: cname \"a..xcc.test\""),
            "{err}"
        );
        assert!(err.ends_with(" at line 4"), "{err}");
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

//! `/explain`: why the agent answers what it answers for a name.
//!
//! The answer comes from the same snapshot DNS queries read; its provenance from the record
//! table's per-source contributions (the exact name, else the wildcard `*.<ancestor>` that
//! covers it) and the slice index's record of where each source came from (EndpointSlice,
//! GatewayDNS ref, the slice's labels). Read-only and bounded: a name is at most 253 characters
//! and at most [`MAX_ANSWERS`] answers and [`MAX_SOURCES`] sources are returned.

use std::collections::BTreeMap;

use serde::Serialize;
use xcc_dns::{
    RecordTable,
    proto::{
        op::ResponseCode,
        rr::{Name, RData, RecordType},
    },
};

use super::slices::SliceOrigins;

/// Longest name accepted (RFC 1035's 253 characters of text, trailing dot not counted).
pub const MAX_NAME_LEN: usize = 253;
/// Most answer records returned; `truncated` says when there were more.
pub const MAX_ANSWERS: usize = 64;
/// Most sources returned; `truncated` says when there were more.
pub const MAX_SOURCES: usize = 64;

/// Why a request cannot be explained (a client error: HTTP 400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExplainError {
    #[error("parameter name is required (GET /explain?name=NAME[&type=A|AAAA|SRV])")]
    MissingName,
    #[error("name is {0} characters long; at most {MAX_NAME_LEN} are allowed")]
    TooLong(usize),
    #[error("name {name:?} is not a valid DNS name: {why}")]
    BadName { name: String, why: String },
    #[error("type {0:?} is not supported: use A, AAAA or SRV")]
    BadType(String),
}

#[derive(Debug, Serialize)]
pub struct Explanation {
    pub name: String,
    #[serde(rename = "type")]
    pub qtype: String,
    /// NOERROR, NXDOMAIN or REFUSED (outside every zone).
    pub rcode: String,
    pub answers: Vec<Answer>,
    pub sources: Vec<Source>,
    /// The probed gateway addresses that answer for the name (`spec.healthCheck`): in or out
    /// of this cluster's answer, and why (probe state, last error). Empty without a check.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub probed: Vec<super::health::ProbedAddress>,
    /// Whether answers or sources were cut at their bound.
    pub truncated: bool,
}

#[derive(Debug, Serialize)]
pub struct Answer {
    pub name: String,
    #[serde(rename = "type")]
    pub rtype: String,
    pub ttl: u32,
    pub data: String,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// The record table's source (`<ns>/<slice>` for EndpointSlices, `clusterset:<ns>/<svc>`
    /// for the names of a ServiceImport).
    pub source: String,
    /// The table name whose records answered (the name itself, or the wildcard covering it).
    pub owner: String,
    pub addresses: Vec<String>,
    /// SRV records (`priority weight port target`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub srv: Vec<String>,
    /// The ServiceImport whose names these are (clusterset zone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_import: Option<SliceRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint_slice: Option<SliceRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_dns: Option<String>,
    /// The gateway cluster and its namespace, as the slice's host name annotation names them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterRef>,
    /// The labels found on the slice.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct SliceRef {
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct ClusterRef {
    pub name: String,
    pub namespace: String,
}

/// Parses the query string of `/explain` into a name and a type.
pub fn parse_query(query: Option<&str>) -> Result<(Name, RecordType), ExplainError> {
    let mut name = None;
    let mut qtype = None;
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*key {
            "name" => name = Some(value.into_owned()),
            "type" => qtype = Some(value.into_owned()),
            _ => {}
        }
    }
    let name = name
        .filter(|n| !n.trim().is_empty())
        .ok_or(ExplainError::MissingName)?;
    let text = name.trim().trim_end_matches('.');
    if text.len() > MAX_NAME_LEN {
        return Err(ExplainError::TooLong(text.len()));
    }
    let bad = |why: String| ExplainError::BadName {
        name: text.to_string(),
        why,
    };
    let mut parsed = Name::from_ascii(text).map_err(|e| bad(e.to_string()))?;
    if parsed.iter().any(|l| l.is_empty()) {
        return Err(bad("empty label".into()));
    }
    parsed.set_fqdn(true);
    let qtype = match qtype.as_deref().map(str::to_ascii_uppercase).as_deref() {
        None | Some("A") => RecordType::A,
        Some("AAAA") => RecordType::AAAA,
        Some("SRV") => RecordType::SRV,
        Some(other) => return Err(ExplainError::BadType(other.to_string())),
    };
    Ok((parsed, qtype))
}

/// The answer to `name`/`qtype` and where it came from, with the probe state of the gateway
/// addresses `health` probes for it.
pub fn explain_probed(
    table: &RecordTable,
    origins: &SliceOrigins,
    health: Option<&super::health::Health>,
    name: &Name,
    qtype: RecordType,
) -> Explanation {
    let mut out = explain(table, origins, name, qtype);
    if let Some(health) = health {
        out.probed = health.explain(name, MAX_SOURCES);
    }
    out
}

/// The answer to `name`/`qtype` and where it came from.
pub fn explain(
    table: &RecordTable,
    origins: &SliceOrigins,
    name: &Name,
    qtype: RecordType,
) -> Explanation {
    let snapshot = table.snapshot();
    let resolution = snapshot.resolve(name, qtype);
    let mut truncated = resolution.answers.len() > MAX_ANSWERS;
    let answers: Vec<Answer> = resolution
        .answers
        .iter()
        .take(MAX_ANSWERS)
        .map(|r| Answer {
            name: r.name.to_string(),
            rtype: r.record_type().to_string(),
            ttl: r.ttl,
            data: r.data.to_string(),
        })
        .collect();
    // The names whose records make up the answer: the question, then each CNAME target.
    let mut owners = Vec::new();
    if !resolution.answers.is_empty() {
        owners.push(name.clone());
        for record in resolution.answers.iter() {
            if let RData::CNAME(target) = &record.data {
                owners.push(target.0.clone());
            }
        }
    }
    let mut sources = Vec::new();
    for owner in owners {
        let (matched, contributions) = contributions_for(table, &owner);
        for (source, records) in contributions {
            if sources.len() == MAX_SOURCES {
                truncated = true;
                break;
            }
            let origin = origins.get(&source);
            sources.push(Source {
                owner: matched.to_string(),
                addresses: records.addresses.iter().map(|a| a.to_string()).collect(),
                srv: records
                    .srv
                    .iter()
                    .map(|s| format!("{} {} {} {}", s.priority, s.weight, s.port, s.target))
                    .collect(),
                service_import: service_import_of(&source),
                cname: records.cname.as_ref().map(|c| c.to_string()),
                endpoint_slice: origin.as_ref().map(|o| SliceRef {
                    namespace: o.namespace.clone(),
                    name: o.name.clone(),
                }),
                gateway_dns: origin.as_ref().and_then(|o| o.gateway_dns.clone()),
                cluster: origin.as_ref().and_then(|o| cluster_of(&o.hostname)),
                labels: origin.map(|o| o.labels).unwrap_or_default(),
                source,
            });
        }
    }
    Explanation {
        name: name.to_string(),
        qtype: qtype.to_string(),
        rcode: match resolution.rcode {
            ResponseCode::NoError => "NOERROR".to_string(),
            ResponseCode::NXDomain => "NXDOMAIN".to_string(),
            ResponseCode::Refused => "REFUSED".to_string(),
            other => other.to_string(),
        },
        answers,
        sources,
        probed: Vec::new(),
        truncated,
    }
}

/// The contributions that answer for `name`: its own, else those of the nearest wildcard
/// `*.<ancestor>` (the one a DNS lookup synthesizes from).
fn contributions_for(
    table: &RecordTable,
    name: &Name,
) -> (Name, Vec<(String, xcc_dns::HostRecords)>) {
    let own = table.contributions(name);
    if !own.is_empty() {
        return (name.clone(), own);
    }
    let mut ancestor = name.base_name();
    while !ancestor.is_root() {
        if let Ok(wildcard) = Name::from_ascii("*").and_then(|star| star.append_name(&ancestor)) {
            let found = table.contributions(&wildcard);
            if !found.is_empty() {
                return (wildcard, found);
            }
        }
        ancestor = ancestor.base_name();
    }
    (name.clone(), Vec::new())
}

/// The ServiceImport behind a source of the clusterset zone (`clusterset:<ns>/<svc>`).
fn service_import_of(source: &str) -> Option<SliceRef> {
    let (namespace, name) = source
        .strip_prefix(super::mcs::SOURCE_PREFIX)?
        .split_once('/')?;
    Some(SliceRef {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

/// The cluster and namespace in a host name `*.gateway.<cluster>.<ns>.clusters.<zone>`.
fn cluster_of(hostname: &str) -> Option<ClusterRef> {
    let rest = hostname.trim().trim_start_matches("*.");
    let mut labels = rest.strip_prefix("gateway.")?.split('.');
    let name = labels.next()?.to_string();
    let namespace = labels.next()?.to_string();
    (labels.next()? == "clusters").then_some(ClusterRef { name, namespace })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
    use kube::api::ObjectMeta;
    use xcc_dns::{Zone, ZoneSettings};

    use super::*;
    use crate::feed::slices::{HOSTNAME_ANNOTATION, REF_ANNOTATION, SliceIndex};

    fn slice(name: &str, cluster: &str, addresses: &[&str]) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("xcc-dns".into()),
                annotations: Some(
                    [
                        (
                            HOSTNAME_ANNOTATION.to_string(),
                            format!("*.gateway.{cluster}.dev-team.clusters.xcc.test"),
                        ),
                        (REF_ANNOTATION.to_string(), "dev-team/gateway-dns".into()),
                    ]
                    .into(),
                ),
                labels: Some([("kubernetes.io/service-name".to_string(), name.into())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: vec![Endpoint {
                addresses: addresses.iter().map(|a| a.to_string()).collect(),
                ..Default::default()
            }],
            ports: None,
        }
    }

    fn setup() -> (Arc<RecordTable>, SliceIndex) {
        let table = Arc::new(
            RecordTable::new(
                vec![Zone::new("xcc.test").unwrap()],
                ZoneSettings::default(),
            )
            .unwrap(),
        );
        let index = SliceIndex::new(table.clone());
        (table, index)
    }

    fn query(q: &str) -> Result<(Name, RecordType), ExplainError> {
        parse_query(Some(q))
    }

    #[test]
    fn a_wildcard_answer_names_its_slice_gatewaydns_and_cluster() {
        let (table, index) = setup();
        index
            .apply(&slice(
                "dev-team-cluster-a-gateway",
                "cluster-a",
                &["10.0.0.1"],
            ))
            .unwrap();
        let (name, qtype) =
            query("name=Kuard.gateway.cluster-a.dev-team.clusters.xcc.test&type=A").unwrap();
        let out = explain(&table, &index.origins(), &name, qtype);
        assert_eq!(out.rcode, "NOERROR");
        assert_eq!(out.answers.len(), 1);
        assert_eq!(out.answers[0].data, "10.0.0.1");
        assert_eq!(
            out.answers[0].name,
            "Kuard.gateway.cluster-a.dev-team.clusters.xcc.test."
        );
        assert_eq!(out.sources.len(), 1);
        let source = &out.sources[0];
        assert_eq!(source.source, "xcc-dns/dev-team-cluster-a-gateway");
        assert_eq!(
            source.owner,
            "*.gateway.cluster-a.dev-team.clusters.xcc.test."
        );
        assert_eq!(
            source.endpoint_slice,
            Some(SliceRef {
                namespace: "xcc-dns".into(),
                name: "dev-team-cluster-a-gateway".into()
            })
        );
        assert_eq!(source.gateway_dns.as_deref(), Some("dev-team/gateway-dns"));
        assert_eq!(
            source.cluster,
            Some(ClusterRef {
                name: "cluster-a".into(),
                namespace: "dev-team".into()
            })
        );
        assert_eq!(
            source
                .labels
                .get("kubernetes.io/service-name")
                .map(String::as_str),
            Some("dev-team-cluster-a-gateway")
        );
        assert!(!out.truncated);

        // The slice goes: no answer, no source.
        index.delete(&slice("dev-team-cluster-a-gateway", "cluster-a", &[]));
        let out = explain(&table, &index.origins(), &name, qtype);
        assert!(out.answers.is_empty() && out.sources.is_empty(), "{out:?}");
        assert_eq!(out.rcode, "NXDOMAIN");
    }

    #[test]
    fn two_slices_for_one_name_are_both_sources() {
        let (table, index) = setup();
        let mut second = slice("copy", "cluster-a", &["10.0.0.2"]);
        second
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(REF_ANNOTATION);
        index
            .apply(&slice("first", "cluster-a", &["10.0.0.1"]))
            .unwrap();
        index.apply(&second).unwrap();
        let (name, qtype) = query("name=gateway.cluster-a.dev-team.clusters.xcc.test").unwrap();
        let out = explain(&table, &index.origins(), &name, qtype);
        let data: Vec<&str> = out.answers.iter().map(|a| a.data.as_str()).collect();
        assert_eq!(data, ["10.0.0.1", "10.0.0.2"]);
        let sources: Vec<&str> = out.sources.iter().map(|s| s.source.as_str()).collect();
        assert_eq!(sources, ["xcc-dns/copy", "xcc-dns/first"]);
        assert_eq!(out.sources[0].gateway_dns, None);
    }

    #[test]
    fn bad_requests_are_refused_with_a_reason() {
        assert_eq!(query("type=A"), Err(ExplainError::MissingName));
        assert_eq!(query("name="), Err(ExplainError::MissingName));
        let long = format!("name={}.xcc.test", "a.".repeat(130));
        assert!(matches!(query(&long), Err(ExplainError::TooLong(_))));
        assert!(matches!(
            query("name=a..b.xcc.test"),
            Err(ExplainError::BadName { .. })
        ));
        assert_eq!(
            query("name=x.xcc.test&type=TXT"),
            Err(ExplainError::BadType("TXT".into()))
        );
        assert_eq!(
            query("name=x.xcc.test&type=aaaa").unwrap().1,
            RecordType::AAAA
        );
    }

    #[test]
    fn a_clusterset_name_names_its_service_import() {
        use crate::{
            feed::mcs::{Change, ClustersetZone, McsIndex},
            mcs::api::{ServiceImport, ServiceImportSpec, ServicePort},
        };
        let table = Arc::new(
            RecordTable::new(
                vec![Zone::new("clusterset.local").unwrap()],
                ZoneSettings::default(),
            )
            .unwrap(),
        );
        let zone = ClustersetZone::from_flag("clusterset.local", 5).unwrap();
        let mut index = McsIndex::new(table.clone(), zone);
        let import = ServiceImport {
            metadata: ObjectMeta {
                name: Some("hello".into()),
                namespace: Some("demo".into()),
                ..Default::default()
            },
            spec: ServiceImportSpec {
                ips: vec!["10.96.0.10".into()],
                ports: vec![ServicePort {
                    port: 42,
                    ..Default::default()
                }],
                ..Default::default()
            },
            status: None,
        };
        let touched = index.take(Change::Import(kube::runtime::watcher::Event::Apply(import)));
        assert!(index.publish(&touched).is_empty());
        let (name, qtype) = query("name=hello.demo.svc.clusterset.local&type=SRV").unwrap();
        let out = explain(&table, &SliceOrigins::default(), &name, qtype);
        assert_eq!(out.rcode, "NOERROR");
        assert_eq!(out.answers[0].ttl, 5);
        assert_eq!(out.sources.len(), 1);
        let source = &out.sources[0];
        assert_eq!(source.source, "clusterset:demo/hello");
        assert_eq!(
            source.service_import,
            Some(SliceRef {
                namespace: "demo".into(),
                name: "hello".into()
            })
        );
        assert_eq!(source.srv, ["0 100 42 hello.demo.svc.clusterset.local."]);
        assert_eq!(source.addresses, ["10.96.0.10"]);
    }

    #[test]
    fn answers_are_capped() {
        let (table, index) = setup();
        let addresses: Vec<String> = (0..100).map(|i| format!("10.0.1.{i}")).collect();
        let addresses: Vec<&str> = addresses.iter().map(String::as_str).collect();
        index.apply(&slice("big", "cluster-b", &addresses)).unwrap();
        let (name, qtype) = query("name=gateway.cluster-b.dev-team.clusters.xcc.test").unwrap();
        let out = explain(&table, &index.origins(), &name, qtype);
        assert_eq!(out.answers.len(), MAX_ANSWERS);
        assert!(out.truncated);
    }
}

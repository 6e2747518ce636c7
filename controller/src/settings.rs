//! The optional fields xcc adds to a GatewayDNS, read and checked once per reconcile. The CRD
//! schema refuses most bad values already; this is the check for objects stored before a
//! schema change (or written with validation off), and the source of the condition that names
//! the bad field.

use crate::{
    gatewaydns::{GatewayDNSSpec, GlobalStrategy, NoneHealthy},
    health::{DEFAULT_READMIT_AFTER, MAX_READMIT_AFTER, Policy, parse_withdraw_after},
};

/// Default of `spec.global.ttlSeconds`.
pub const DEFAULT_GLOBAL_TTL: u32 = 5;
/// Largest `spec.global.ttlSeconds` (the CRD's maximum).
pub const MAX_GLOBAL_TTL: u32 = 3600;

/// What a GatewayDNS's optional fields say, with their defaults filled in.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    pub stale: Policy,
    pub global: Global,
}

/// The global name's settings (`spec.global`).
#[derive(Clone, Debug, PartialEq)]
pub struct Global {
    pub strategy: GlobalStrategy,
    pub failover_order: Vec<String>,
    pub when_none_healthy: NoneHealthy,
    pub ttl: u32,
}

impl Default for Global {
    fn default() -> Self {
        Global {
            strategy: GlobalStrategy::RoundRobin,
            failover_order: Vec::new(),
            when_none_healthy: NoneHealthy::ServeAll,
            ttl: DEFAULT_GLOBAL_TTL,
        }
    }
}

/// A field whose value the controller cannot use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidField {
    /// Its path, as `kubectl explain` spells it (`spec.staleRecords.withdrawAfter`).
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for InvalidField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Reads and checks the optional fields of `spec`.
pub fn read(spec: &GatewayDNSSpec) -> Result<Settings, InvalidField> {
    let mut settings = Settings::default();
    if let Some(stale) = &spec.stale_records {
        if let Some(text) = &stale.withdraw_after {
            settings.stale.withdraw_after =
                parse_withdraw_after(text).map_err(|message| InvalidField {
                    field: "spec.staleRecords.withdrawAfter",
                    message,
                })?;
        }
        let readmit = stale.readmit_after.unwrap_or(DEFAULT_READMIT_AFTER);
        if !(1..=MAX_READMIT_AFTER).contains(&readmit) {
            return Err(InvalidField {
                field: "spec.staleRecords.readmitAfter",
                message: format!("{readmit} is not between 1 and {MAX_READMIT_AFTER}"),
            });
        }
        settings.stale.readmit_after = readmit;
    }
    if let Some(global) = &spec.global {
        let strategy = global.strategy.unwrap_or_default();
        if strategy == GlobalStrategy::Failover && global.failover_order.is_empty() {
            return Err(InvalidField {
                field: "spec.global.failoverOrder",
                message: "strategy failover needs at least one cluster name, the preferred first"
                    .into(),
            });
        }
        if let Some(bad) = global
            .failover_order
            .iter()
            .find(|name| !is_dns_label(name))
        {
            return Err(InvalidField {
                field: "spec.global.failoverOrder",
                message: format!("{bad:?} is not a cluster name (a DNS label)"),
            });
        }
        let ttl = global.ttl_seconds.unwrap_or(DEFAULT_GLOBAL_TTL);
        if ttl > MAX_GLOBAL_TTL {
            return Err(InvalidField {
                field: "spec.global.ttlSeconds",
                message: format!("{ttl} is more than {MAX_GLOBAL_TTL}"),
            });
        }
        settings.global = Global {
            strategy,
            failover_order: global.failover_order.clone(),
            when_none_healthy: global.when_none_healthy.unwrap_or_default(),
            ttl,
        };
    }
    check_health_check(spec)?;
    Ok(settings)
}

/// `spec.healthCheck`, resolved with any port, passes the agents' checks (`expectedStatus`
/// as a range, the timeout below the interval, ...), or the field that does not.
fn check_health_check(spec: &GatewayDNSSpec) -> Result<(), InvalidField> {
    let Some(check) = &spec.health_check else {
        return Ok(());
    };
    if let Some(status) = &check.expected_status {
        let parts: Vec<Option<u16>> = status.split('-').map(|p| p.parse().ok()).collect();
        let ordered = match parts.as_slice() {
            [Some(_)] => true,
            [Some(low), Some(high)] => low <= high,
            _ => false,
        };
        if !ordered {
            return Err(InvalidField {
                field: "spec.healthCheck.expectedStatus",
                message: format!("{status:?} is not a status (200) or a range (200-399)"),
            });
        }
    }
    match check.resolve(Some(1)).map(|c| c.validate()) {
        Some(Err(message)) => Err(InvalidField {
            field: "spec.healthCheck",
            message,
        }),
        _ => Ok(()),
    }
}

fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gatewaydns::StaleRecords;
    use std::time::Duration;

    fn spec(yaml: &str) -> GatewayDNSSpec {
        xcc_kube::yaml::from_str(yaml).expect("a spec")
    }

    #[test]
    fn the_reference_spec_gets_the_defaults() {
        let reference = spec(
            "clusterSelector: {matchLabels: {hasContour: 'true'}}\nservice: projectcontour/envoy\nresolutionType: loadBalancer\n",
        );
        assert_eq!(reference.stale_records, None);
        assert_eq!(read(&reference), Ok(Settings::default()));
    }

    #[test]
    fn every_bad_value_names_its_field() {
        let mut s = spec("service: a/b\nstaleRecords: {withdrawAfter: 10s, readmitAfter: 2}\n");
        let read_back = read(&s).unwrap();
        assert_eq!(
            read_back.stale.withdraw_after,
            Some(Duration::from_secs(10))
        );
        assert_eq!(read_back.stale.readmit_after, 2);
        s.stale_records = Some(StaleRecords {
            withdraw_after: Some("soon".into()),
            readmit_after: None,
        });
        let bad = read(&s).unwrap_err();
        assert_eq!(bad.field, "spec.staleRecords.withdrawAfter");
        assert!(bad.to_string().contains("\"soon\""), "{bad}");
        s.stale_records = Some(StaleRecords {
            withdraw_after: None,
            readmit_after: Some(0),
        });
        assert_eq!(
            read(&s).unwrap_err().field,
            "spec.staleRecords.readmitAfter"
        );
    }

    #[test]
    fn a_health_check_the_agents_would_refuse_names_its_field() {
        let good = spec(
            "service: a/b\nhealthCheck: {type: http, path: /healthz, expectedStatus: 200-299}\n",
        );
        assert_eq!(read(&good), Ok(Settings::default()));
        let bad = spec("service: a/b\nhealthCheck: {type: http, expectedStatus: 399-200}\n");
        assert_eq!(
            read(&bad).unwrap_err().field,
            "spec.healthCheck.expectedStatus"
        );
        let bad = spec("service: a/b\nhealthCheck: {intervalMilliseconds: 100}\n");
        let error = read(&bad).unwrap_err();
        assert!(
            error.to_string().contains("less than intervalMs"),
            "{error}"
        );
    }
}

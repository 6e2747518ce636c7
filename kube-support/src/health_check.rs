//! The data-path health check of a gateway, as xcc-controller passes it to the xcc-agents: JSON
//! in the annotation [`HEALTH_CHECK_ANNOTATION`] of the EndpointSlices in `xcc-dns` it writes
//! (per-cluster and global), every default already applied and the port resolved. Each agent
//! probes the slice's addresses from its own cluster with it ([`HealthCheck::parse`] checks what
//! it reads: an annotation that does not pass leaves the records served unprobed).

use serde::{Deserialize, Serialize};

/// Annotation carrying a slice's [`HealthCheck`] (absent: its addresses are not probed).
pub const HEALTH_CHECK_ANNOTATION: &str = "connectivity.tanzu.vmware.com/health-check";
/// Longest annotation value an agent reads.
pub const MAX_ANNOTATION_BYTES: usize = 1024;
/// Bounds of the probe interval, in milliseconds.
pub const INTERVAL_MS: (u32, u32) = (50, 60_000);
/// Most consecutive results a threshold may ask for.
pub const MAX_THRESHOLD: u32 = 100;
/// Longest path.
pub const MAX_PATH: usize = 256;
/// Longest host.
pub const MAX_HOST: usize = 253;

/// How a gateway is probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeKind {
    /// A TCP connection is opened (and closed).
    Tcp,
    /// `GET path` over HTTP/1.1; the status must be in `expectedStatus`.
    Http,
    /// The same over TLS (SNI `host`; the certificate is not verified: a load balancer's
    /// certificate rarely names its address).
    Https,
}

impl ProbeKind {
    /// The name, as the spec spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Tcp => "tcp",
            ProbeKind::Http => "http",
            ProbeKind::Https => "https",
        }
    }
}

/// One gateway's health check, resolved (every field set).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// How it is probed.
    #[serde(rename = "type")]
    pub kind: ProbeKind,
    /// Port probed on each address.
    pub port: u16,
    /// HTTP(S) only: the path asked for (starts with `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// HTTP(S) only: the `Host` header and TLS server name (default: the address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// HTTP(S) only: the statuses that pass, inclusive.
    pub expected_status: (u16, u16),
    /// Milliseconds between two probes of one address.
    pub interval_ms: u32,
    /// Milliseconds one probe may take (less than the interval).
    pub timeout_ms: u32,
    /// Failures in a row that take an address out.
    pub failure_threshold: u32,
    /// Successes in a row that bring it back.
    pub success_threshold: u32,
}

/// Why a health-check annotation is not used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HealthCheckError {
    #[error(
        "annotation {HEALTH_CHECK_ANNOTATION} is {0} bytes long, more than {MAX_ANNOTATION_BYTES}"
    )]
    /// Longer than [`MAX_ANNOTATION_BYTES`].
    TooLong(usize),
    #[error("annotation {HEALTH_CHECK_ANNOTATION} is not a health check: {0}")]
    /// Not the JSON of a health check.
    Syntax(String),
    #[error("annotation {HEALTH_CHECK_ANNOTATION}: {0}")]
    /// A value out of bounds.
    Invalid(String),
}

impl HealthCheck {
    /// Reads and checks an annotation value.
    pub fn parse(value: &str) -> Result<HealthCheck, HealthCheckError> {
        if value.len() > MAX_ANNOTATION_BYTES {
            return Err(HealthCheckError::TooLong(value.len()));
        }
        let check: HealthCheck = serde_json::from_str(value)
            .map_err(|e| HealthCheckError::Syntax(crate::bounded(&e).to_string()))?;
        check.validate().map_err(HealthCheckError::Invalid)?;
        Ok(check)
    }

    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a health check serializes")
    }

    /// Whether the values are within bounds, or what is not.
    pub fn validate(&self) -> Result<(), String> {
        let (min, max) = INTERVAL_MS;
        if !(min..=max).contains(&self.interval_ms) {
            return Err(format!(
                "intervalMs {} is not within {min}..={max}",
                self.interval_ms
            ));
        }
        if self.timeout_ms == 0 || self.timeout_ms >= self.interval_ms {
            return Err(format!(
                "timeoutMs {} must be more than 0 and less than intervalMs {}",
                self.timeout_ms, self.interval_ms
            ));
        }
        for (name, value) in [
            ("failureThreshold", self.failure_threshold),
            ("successThreshold", self.success_threshold),
        ] {
            if !(1..=MAX_THRESHOLD).contains(&value) {
                return Err(format!("{name} {value} is not within 1..={MAX_THRESHOLD}"));
            }
        }
        if self.port == 0 {
            return Err("port 0".into());
        }
        if let Some(path) = &self.path
            && (!path.starts_with('/')
                || path.len() > MAX_PATH
                || path.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(format!(
                "path {:?} must start with / and have no spaces (at most {MAX_PATH} bytes)",
                crate::bounded(path)
            ));
        }
        if let Some(host) = &self.host
            && (host.is_empty()
                || host.len() > MAX_HOST
                || !host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '[' | ']')))
        {
            return Err(format!(
                "host {:?} is not a host name",
                crate::bounded(host)
            ));
        }
        let (low, high) = self.expected_status;
        if !(100..=599).contains(&low) || !(100..=599).contains(&high) || low > high {
            return Err(format!(
                "expectedStatus {low}-{high} is not a range of HTTP statuses (100..=599)"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check() -> HealthCheck {
        HealthCheck {
            kind: ProbeKind::Http,
            port: 8080,
            path: Some("/healthz".into()),
            host: Some("gw.example".into()),
            expected_status: (200, 399),
            interval_ms: 250,
            timeout_ms: 200,
            failure_threshold: 2,
            success_threshold: 2,
        }
    }

    #[test]
    fn the_annotation_round_trips() {
        let value = check().to_annotation();
        assert!(value.contains(r#""type":"http""#), "{value}");
        assert!(value.contains(r#""expectedStatus":[200,399]"#), "{value}");
        assert_eq!(HealthCheck::parse(&value).unwrap(), check());
    }

    #[test]
    fn malformed_annotations_say_what_is_wrong() {
        let too_long = format!(r#"{{"path":"/{}"}}"#, "a".repeat(2000));
        let cases: Vec<(String, &str)> = vec![
            ("not json".into(), "not a health check"),
            (r#"{"type":"icmp"}"#.into(), "not a health check"),
            (too_long, "bytes long"),
        ];
        for (value, want) in cases {
            let error = HealthCheck::parse(&value).unwrap_err().to_string();
            assert!(error.contains(want), "{value}: {error}");
        }
        let mut bad = check();
        bad.timeout_ms = 250;
        assert!(bad.validate().unwrap_err().contains("less than intervalMs"));
        let mut bad = check();
        bad.failure_threshold = 0;
        assert!(bad.validate().unwrap_err().contains("failureThreshold"));
        let mut bad = check();
        bad.path = Some("healthz".into());
        assert!(bad.validate().unwrap_err().contains("start with /"));
        let mut bad = check();
        bad.expected_status = (400, 200);
        assert!(bad.validate().unwrap_err().contains("expectedStatus"));
        let mut bad = check();
        bad.host = Some("a b".into());
        assert!(bad.validate().unwrap_err().contains("host"));
        let value = bad.to_annotation();
        assert!(matches!(
            HealthCheck::parse(&value),
            Err(HealthCheckError::Invalid(_))
        ));
    }
}

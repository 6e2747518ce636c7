//! How an xcc-agent tells xcc-controller, on its own cluster, which parts of the record feed it
//! reads: the ConfigMap `xcc-dns/xcc-agent`, data key `features` (a comma-separated list, e.g.
//! `fqdn,ipv6`) and `version` (the agent's version, for people).
//!
//! Why it exists: the original XCC dns-server reads EndpointSlices of addressType IPv4 and FQDN
//! only, and its process dies whenever a slice it never stored (an IPv6 one, say) is deleted in
//! its namespace. So xcc-controller writes a slice the original cannot read only to a cluster
//! whose agent has announced the matching feature; a later protocol change (global names, ...)
//! gets a feature name of its own and is gated the same way.
//!
//! Why a ConfigMap with a fixed name:
//! - the controller needs one `get` by name (RBAC `resourceNames: [xcc-agent]`), no list and no
//!   watch, and learns nothing else about the cluster;
//! - the agent's manifest creates it empty and the agent fills it in with server-side apply, so
//!   its Role grants `patch` on that one name only and no `create` at all (`create` cannot be
//!   limited to a name); an agent whose ConfigMap is missing cannot announce anything, which is
//!   the safe side (a Lease would do too, but the agent's Lease belongs to leader election, which
//!   rewrites it every few seconds);
//! - it outlives agent restarts and upgrades (the next start rewrites it), and removing it is
//!   the one step that makes a cluster safe for the original dns-server again (see docs/gateway-dns.md,
//!   "Going back to the original XCC").

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;

/// Namespace of the announcement (the agent's and the slices' namespace).
pub const ANNOUNCEMENT_NAMESPACE: &str = "xcc-dns";
/// Name of the announcement ConfigMap.
pub const ANNOUNCEMENT_NAME: &str = "xcc-agent";
/// Data key listing the features the agent reads.
pub const FEATURES_KEY: &str = "features";
/// Data key with the agent's version (informational).
pub const VERSION_KEY: &str = "version";

/// A part of the record feed that the original XCC dns-server does not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// EndpointSlices of addressType IPv6 (AAAA records).
    Ipv6,
    /// EndpointSlices of addressType FQDN (CNAME records). The original reads them too; named so
    /// that the list says everything this agent reads.
    Fqdn,
    /// Slices of cluster-agnostic names (annotation [`GLOBAL_ANNOTATION`]) with the TTL of their
    /// answers in [`TTL_ANNOTATION`]. The original would serve them with its own TTL and
    /// without the health selection behind them, so they go only where this is announced.
    Global,
    /// The per-cluster slice of a gateway names the global name too (annotation
    /// [`GLOBAL_HOSTNAME_ANNOTATION`], the TTL of its answers in [`GLOBAL_TTL_ANNOTATION`]), set
    /// only on the clusters whose global answer includes that gateway. One slice per gateway and
    /// cluster carries both names, so a change is one write per cluster, not two. An agent that
    /// announces only [`Feature::Global`] (an earlier xcc-agent) is sent the separate global
    /// slices instead.
    GlobalHostname,
}

/// Annotation on an EndpointSlice: the TTL, in seconds, of the answers it gives (xcc-agent).
pub const TTL_ANNOTATION: &str = "xcc.test/ttl";
/// Annotation on an EndpointSlice: it carries a cluster-agnostic (global) name, `"true"`.
pub const GLOBAL_ANNOTATION: &str = "xcc.test/global";
/// Annotation on a per-cluster EndpointSlice: the global name its addresses answer too.
pub const GLOBAL_HOSTNAME_ANNOTATION: &str = "xcc.test/global-hostname";
/// Annotation on a per-cluster EndpointSlice: the TTL, in seconds, of its global name's answers.
pub const GLOBAL_TTL_ANNOTATION: &str = "xcc.test/global-ttl";

impl Feature {
    /// Every feature this version of xcc-agent reads.
    pub const ALL: [Feature; 4] = [
        Feature::Fqdn,
        Feature::Global,
        Feature::GlobalHostname,
        Feature::Ipv6,
    ];

    /// The feature's name in the announcement.
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::Ipv6 => "ipv6",
            Feature::Fqdn => "fqdn",
            Feature::Global => "global",
            Feature::GlobalHostname => "global-hostname",
        }
    }

    fn parse(word: &str) -> Option<Feature> {
        match word.trim().to_ascii_lowercase().as_str() {
            "ipv6" => Some(Feature::Ipv6),
            "fqdn" => Some(Feature::Fqdn),
            "global" => Some(Feature::Global),
            "global-hostname" => Some(Feature::GlobalHostname),
            _ => None,
        }
    }
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a cluster's announcement says. `None` from [`Announcement::read`]: no agent announced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Announcement {
    /// The features the agent reads (those this build does not know are left out).
    pub features: BTreeSet<Feature>,
    /// The agent's version, if it says.
    pub version: Option<String>,
}

impl Announcement {
    /// What this build of the agent announces.
    pub fn current(version: &str) -> Announcement {
        Announcement {
            features: Feature::ALL.into_iter().collect(),
            version: Some(version.to_string()),
        }
    }

    /// Reads an announcement ConfigMap. Words it does not know (a newer agent's features) are
    /// skipped: a feature this controller does not know is one it never gates on.
    pub fn read(config_map: &ConfigMap) -> Announcement {
        let data = config_map.data.as_ref();
        let features = data
            .and_then(|d| d.get(FEATURES_KEY))
            .map(|list| list.split(',').filter_map(Feature::parse).collect())
            .unwrap_or_default();
        let version = data.and_then(|d| d.get(VERSION_KEY)).cloned();
        Announcement { features, version }
    }

    /// Whether the agent reads `feature`.
    pub fn reads(&self, feature: Feature) -> bool {
        self.features.contains(&feature)
    }

    /// The `features` value: sorted, comma-separated.
    pub fn features_value(&self) -> String {
        self.features
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The ConfigMap to apply (server-side) in [`ANNOUNCEMENT_NAMESPACE`].
    pub fn to_config_map(&self) -> ConfigMap {
        let mut data = std::collections::BTreeMap::new();
        data.insert(FEATURES_KEY.to_string(), self.features_value());
        if let Some(version) = &self.version {
            data.insert(VERSION_KEY.to_string(), version.clone());
        }
        ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(ANNOUNCEMENT_NAME.to_string()),
                namespace: Some(ANNOUNCEMENT_NAMESPACE.to_string()),
                labels: Some(
                    [(
                        "app.kubernetes.io/name".to_string(),
                        "xcc-agent".to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_agent_writes_the_controller_reads_back() {
        let announced = Announcement::current("1.2.3");
        let cm = announced.to_config_map();
        assert_eq!(
            cm.data.as_ref().unwrap()[FEATURES_KEY],
            "ipv6,fqdn,global,global-hostname"
        );
        assert_eq!(Announcement::read(&cm), announced);
        assert!(Announcement::read(&cm).reads(Feature::Ipv6));
    }

    #[test]
    fn unknown_words_and_spacing_are_tolerated() {
        let cm = ConfigMap {
            data: Some(
                [(
                    FEATURES_KEY.to_string(),
                    " FQDN, global-names ,".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let read = Announcement::read(&cm);
        assert_eq!(read.features, [Feature::Fqdn].into());
        assert!(!read.reads(Feature::Ipv6));
        assert_eq!(
            Announcement::read(&ConfigMap::default()),
            Announcement::default()
        );
    }
}

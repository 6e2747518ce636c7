//! What the writes compare of an EndpointSlice, in a few dozen bytes ([`Print`]), and what
//! kind of slice it is.

use std::{
    collections::HashMap,
    hash::{Hash, Hasher},
};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

use xcc_kube::{
    announcement::{
        GLOBAL_ANNOTATION, GLOBAL_HOSTNAME_ANNOTATION, GLOBAL_TTL_ANNOTATION, TTL_ANNOTATION,
    },
    health_check::HEALTH_CHECK_ANNOTATION,
};

use super::{
    HOSTNAME_ANNOTATION, MANAGED_BY_LABEL, REF_ANNOTATION, SERVICE_NAME_LABEL, global::is_global,
};

/// The annotations and labels the writes compare, in [`Print::keys`] order.
const KEYS: [(&str, bool); 9] = [
    (HOSTNAME_ANNOTATION, true),
    (REF_ANNOTATION, true),
    (TTL_ANNOTATION, true),
    (GLOBAL_ANNOTATION, true),
    (GLOBAL_HOSTNAME_ANNOTATION, true),
    (GLOBAL_TTL_ANNOTATION, true),
    (SERVICE_NAME_LABEL, false),
    (MANAGED_BY_LABEL, false),
    (HEALTH_CHECK_ANNOTATION, true),
];
/// Positions in [`KEYS`].
const HOSTNAME_KEY: usize = 0;
const REF_KEY: usize = 1;
const GLOBAL_HOSTNAME_KEY: usize = 4;
const GLOBAL_TTL_KEY: usize = 5;
/// Compared exactly, as the global name: a check removed from the spec is removed from the slice.
const HEALTH_KEY: usize = 8;

pub(super) fn hash_of(value: &str) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    value.hash(&mut hasher);
    // 0 stands for "absent".
    hasher.finish().max(1)
}

/// What the writes need to know of an EndpointSlice, in a few dozen bytes: its address type,
/// a hash of its addresses, and a hash of each annotation and label they compare (0: absent).
/// The controller keeps this of every slice in `xcc-dns` of every cluster, never the object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Print {
    pub address_type: AddressType,
    /// Of the sorted addresses (each with its endpoint's hostname) and the sorted ports, however
    /// the addresses are spread over endpoints; 0 for a slice without an address.
    pub addresses: u64,
    pub keys: [u64; 9],
}

/// An EndpointSlice's `addressType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AddressType {
    #[default]
    IPv4,
    IPv6,
    Fqdn,
    Other,
}

impl AddressType {
    pub fn of(address_type: &str) -> AddressType {
        match address_type {
            "IPv4" => AddressType::IPv4,
            "IPv6" => AddressType::IPv6,
            "FQDN" => AddressType::Fqdn,
            _ => AddressType::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AddressType::IPv4 => "IPv4",
            AddressType::IPv6 => "IPv6",
            AddressType::Fqdn => "FQDN",
            AddressType::Other => "other",
        }
    }
}

impl Print {
    pub fn of(slice: &EndpointSlice) -> Print {
        let address_type = AddressType::of(&slice.address_type);
        let addresses = content_hash(slice);
        let (annotations, labels) = (slice.annotations(), slice.labels());
        let keys = KEYS.map(|(key, annotation)| {
            let value = if annotation {
                annotations.get(key)
            } else {
                labels.get(key)
            };
            value.map_or(0, |v| hash_of(v))
        });
        Print {
            address_type,
            addresses,
            keys,
        }
    }

    /// Whether this (a slice on a cluster) already says what `desired` says, with the global
    /// name (host, TTL hashes) `global` or without one: every annotation and label `desired`
    /// has is here with its value, and the global name is exactly `global`.
    pub fn says(&self, desired: &Print, global: Option<(u64, u64)>) -> bool {
        let (host, ttl) = global.unwrap_or_default();
        self.address_type == desired.address_type
            && self.addresses != 0
            && self.addresses == desired.addresses
            && self.keys[GLOBAL_HOSTNAME_KEY] == host
            && self.keys[GLOBAL_TTL_KEY] == ttl
            && self.keys[HEALTH_KEY] == desired.keys[HEALTH_KEY]
            && self
                .keys
                .iter()
                .zip(desired.keys)
                .enumerate()
                .filter(|(i, _)| ![GLOBAL_HOSTNAME_KEY, GLOBAL_TTL_KEY, HEALTH_KEY].contains(i))
                .all(|(_, (have, want))| want == 0 || *have == want)
    }

    /// Whether this is a slice that `reference` (`<ns>/<name>`) wrote: the host-name
    /// annotation, and the ref annotation naming it.
    pub fn owned_by(&self, reference: u64) -> bool {
        self.keys[HOSTNAME_KEY] != 0 && self.keys[REF_KEY] == reference
    }

    /// The global name (host, TTL) this says, if any.
    pub fn global_name(&self) -> Option<(u64, u64)> {
        let global = (self.keys[GLOBAL_HOSTNAME_KEY], self.keys[GLOBAL_TTL_KEY]);
        (global != (0, 0)).then_some(global)
    }
}

/// A hash of what a slice answers: its addresses (with their endpoint's hostname) and its ports,
/// each sorted; 0 when it has no address.
fn content_hash(slice: &EndpointSlice) -> u64 {
    let mut addresses: Vec<(&str, Option<&str>)> = slice
        .endpoints
        .iter()
        .flat_map(|e| {
            e.addresses
                .iter()
                .map(move |a| (a.as_str(), e.hostname.as_deref()))
        })
        .collect();
    if addresses.is_empty() {
        return 0;
    }
    addresses.sort_unstable();
    let mut ports: Vec<(Option<&str>, Option<&str>, Option<i32>)> = slice
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.as_deref(), p.protocol.as_deref(), p.port))
        .collect();
    ports.sort_unstable();
    let mut hasher = std::hash::DefaultHasher::new();
    addresses.hash(&mut hasher);
    ports.hash(&mut hasher);
    hasher.finish().max(1)
}

/// The slices in `xcc-dns` of one cluster, by name.
pub type Slices = HashMap<String, Print>;

/// What [`original_reads`] and [`readable_by`] look at.
pub trait SliceKind {
    fn kind(&self) -> AddressType;
    fn has_hostname(&self) -> bool;
    /// Carries a global name as a separate slice (`xcc.test/global: "true"`).
    fn global(&self) -> bool;
}

impl SliceKind for Print {
    fn kind(&self) -> AddressType {
        self.address_type
    }
    fn has_hostname(&self) -> bool {
        self.keys[HOSTNAME_KEY] != 0
    }
    fn global(&self) -> bool {
        self.keys[3] == hash_of("true")
    }
}

impl SliceKind for EndpointSlice {
    fn kind(&self) -> AddressType {
        AddressType::of(&self.address_type)
    }
    fn has_hostname(&self) -> bool {
        self.annotations().contains_key(HOSTNAME_ANNOTATION)
    }
    fn global(&self) -> bool {
        is_global(self)
    }
}

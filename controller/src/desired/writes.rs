//! What one cluster of the namespace is sent: only the slices it reads, and only what changed.

use std::collections::HashSet;

use k8s_openapi::api::discovery::v1::EndpointSlice;

use xcc_kube::{
    Announcement, Feature,
    announcement::{GLOBAL_HOSTNAME_ANNOTATION, GLOBAL_TTL_ANNOTATION},
};

use super::{
    global::is_global,
    plan::Plan,
    print::{AddressType, Print, SliceKind, Slices, hash_of},
};

/// Whether the original XCC dns-server reads `slice`: addressType IPv4 or FQDN, with the host-name
/// annotation. It stores only those, and its process dies when any other slice of its namespace
/// is deleted; so these are the only slices that may be created or deleted on a cluster where
/// no xcc-agent is announced.
pub fn original_reads(slice: &impl SliceKind) -> bool {
    matches!(slice.kind(), AddressType::IPv4 | AddressType::Fqdn)
        && slice.has_hostname()
        && !slice.global()
}

/// The announced feature an agent needs before it is sent `slice`; `None` for a slice the
/// original reads, or one no xcc-agent feature covers.
pub fn feature_needed(slice: &impl SliceKind) -> Option<Feature> {
    if original_reads(slice) {
        return None;
    }
    if slice.global() && slice.has_hostname() {
        return Some(Feature::Global);
    }
    match slice.kind() {
        AddressType::IPv6 if slice.has_hostname() => Some(Feature::Ipv6),
        _ => None,
    }
}

/// Whether a cluster whose agent announced `agent` (`None`: nothing announced, perhaps the
/// original dns-server runs there) may be sent, or have deleted, `slice`.
pub fn readable_by(slice: &impl SliceKind, agent: Option<&Announcement>) -> bool {
    let needs = |f: Feature| agent.is_some_and(|a| a.reads(f));
    original_reads(slice)
        || (feature_needed(slice).is_some_and(needs)
            // A global IPv6 slice needs both.
            && (!slice.global() || slice.kind() != AddressType::IPv6 || needs(Feature::Ipv6)))
}

/// What to do with one GatewayDNS's slices on one cluster of the namespace.
#[derive(Debug, Default, PartialEq)]
pub struct ClusterWrites {
    /// Slices to create or update (server-side apply).
    pub apply: Vec<EndpointSlice>,
    /// Owned slices to delete.
    pub delete: Vec<String>,
    /// Wanted slices not written because this cluster cannot read them.
    pub withheld: Vec<String>,
    /// Owned slices this cluster cannot read, left as they are: deleting (or rewriting) one
    /// would crash an original dns-server. Written by an earlier xcc version.
    pub kept_unreadable: Vec<(String, String)>,
    /// Wanted names taken by a slice this GatewayDNS does not own.
    pub foreign: Vec<String>,
    /// Global-name slices not sent: the cluster announced no agent that serves them (not a
    /// problem to report: the original never serves global names).
    pub withheld_global: bool,
}

/// [`cluster_writes_for`] without the global name.
#[cfg(test)]
pub fn cluster_writes(
    plan: &Plan,
    existing: &[EndpointSlice],
    reference: &str,
    agent: Option<&Announcement>,
) -> ClusterWrites {
    cluster_writes_for(plan, existing, reference, agent, "")
}

/// [`cluster_writes_in`] for slices given as objects.
#[cfg(test)]
pub fn cluster_writes_for(
    plan: &Plan,
    existing: &[EndpointSlice],
    reference: &str,
    agent: Option<&Announcement>,
    target: &str,
) -> ClusterWrites {
    use kube::ResourceExt;
    let existing: Slices = existing
        .iter()
        .map(|s| (s.name_any(), Print::of(s)))
        .collect();
    cluster_writes_in(plan, &existing, reference, agent, target)
}

/// Brings `existing` (the slices in `xcc-dns` of cluster `target`) to `plan`, sending only what
/// a cluster with announcement `agent` reads: without one, no slice the original cannot read is
/// ever created, changed or deleted there. Deletions and kept slices come sorted by name.
pub fn cluster_writes_in(
    plan: &Plan,
    existing: &Slices,
    reference: &str,
    agent: Option<&Announcement>,
    target: &str,
) -> ClusterWrites {
    let mut out = ClusterWrites::default();
    let owner = hash_of(reference);
    // An agent that reads the global name off the per-cluster slices gets it there: one slice
    // per gateway, one write per change. An earlier one gets the separate global slices.
    let on_slices =
        agent.is_some_and(|a| a.reads(Feature::GlobalHostname)) && !plan.global_hostname.is_empty();
    let members: HashSet<&str> = if on_slices {
        plan.global_members_for(target).into_iter().collect()
    } else {
        HashSet::new()
    };
    let global_keys = (hash_of(&plan.global_hostname), hash_of(&plan.global_ttl));
    let member = |slice: &EndpointSlice| {
        on_slices
            && slice
                .metadata
                .name
                .as_deref()
                .and_then(|n| plan.sources.get(n))
                .is_some_and(|c| members.contains(c.as_str()))
    };
    let global = if on_slices {
        Vec::new()
    } else {
        plan.global_for(target)
    };
    let mut wanted: HashSet<&str> = HashSet::new();
    for want in plan.slices.iter().chain(global) {
        let name = want.metadata.name.as_deref().unwrap_or_default();
        if !readable_by(want, agent) {
            if is_global(want) {
                out.withheld_global = true;
            } else {
                out.withheld.push(name.to_string());
            }
            continue;
        }
        wanted.insert(name);
        let global = member(want);
        let print = plan
            .prints
            .get(name)
            .cloned()
            .unwrap_or_else(|| Print::of(want));
        match existing.get(name) {
            // A slice of a GatewayDNS being deleted is taken over (its deletions went first).
            Some(have)
                if !have.owned_by(owner) && !plan.released.iter().any(|r| have.owned_by(*r)) =>
            {
                out.foreign.push(name.to_string())
            }
            Some(have) if have.says(&print, global.then_some(global_keys)) => {}
            _ => out.apply.push(if global {
                with_global_hostname(want, &plan.global_hostname, &plan.global_ttl)
            } else {
                want.clone()
            }),
        }
    }
    for (name, have) in existing.iter().filter(|(_, s)| s.owned_by(owner)) {
        if !readable_by(have, agent) {
            out.kept_unreadable
                .push((name.clone(), have.address_type.as_str().to_string()));
        } else if !wanted.contains(name.as_str()) && !plan.keep.contains(name) {
            out.delete.push(name.clone());
        }
    }
    out.delete.sort();
    out.kept_unreadable.sort();
    out
}

/// `slice` also answering the global name `host`, with TTL `ttl`.
pub fn with_global_hostname(slice: &EndpointSlice, host: &str, ttl: &str) -> EndpointSlice {
    let mut slice = slice.clone();
    let annotations = slice.metadata.annotations.get_or_insert_default();
    annotations.insert(GLOBAL_HOSTNAME_ANNOTATION.to_string(), host.to_string());
    annotations.insert(GLOBAL_TTL_ANNOTATION.to_string(), ttl.to_string());
    slice
}

/// Whether `existing` is a slice this GatewayDNS wrote (both annotations, matching ref).
#[cfg(test)]
pub fn is_owned(existing: &EndpointSlice, reference: &str) -> bool {
    Print::of(existing).owned_by(hash_of(reference))
}

/// Whether `existing` already says what `desired` says (no write needed), the global name
/// included.
pub fn same_content(existing: &Print, desired: &Print) -> bool {
    existing.says(desired, desired.global_name())
}

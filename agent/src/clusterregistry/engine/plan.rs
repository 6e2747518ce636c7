//! Which watches the engine should hold for the rules and peers it has, and how that differs from
//! the ones it holds: pure functions, so that a refresh only carries out the difference.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::super::{api::GroupVersionKind, builtin, grants::SecretScope, rules::RuleSet};
use crate::sources::LOCAL;

/// Where a source watches: a kind in the local cluster or in a peer's, in every namespace or in
/// one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    /// `None`: the local cluster; otherwise a peer's Cluster name.
    pub cluster: Option<String>,
    pub gvk: GroupVersionKind,
    /// `None`: every namespace; otherwise the one namespace watched (peer Secrets, which the
    /// peer's reader may read only where the group's rules and Clusters name them).
    pub namespace: Option<String>,
}

impl Place {
    pub fn local(gvk: &GroupVersionKind) -> Place {
        Place {
            cluster: None,
            gvk: gvk.clone(),
            namespace: None,
        }
    }

    pub fn peer(name: &str, gvk: &GroupVersionKind) -> Place {
        Place {
            cluster: Some(name.to_string()),
            gvk: gvk.clone(),
            namespace: None,
        }
    }

    /// Whether this place's watch sees objects of namespace `namespace` (`None`: a
    /// cluster-scoped object).
    pub fn covers(&self, namespace: Option<&str>) -> bool {
        self.namespace.is_none() || self.namespace.as_deref() == namespace
    }
}

/// A live peer as the plan sees it: its Cluster name and who its client is.
pub struct PeerId<'a> {
    pub name: &'a str,
    pub identity: &'a str,
}

/// What the admitted rules need read.
pub struct Needs<'a> {
    /// The admitted rules by kind.
    pub rules: &'a HashMap<GroupVersionKind, Vec<RuleSet>>,
    /// Per rule kind, the kinds its copies are written as.
    pub targets: &'a HashMap<GroupVersionKind, BTreeSet<GroupVersionKind>>,
    /// Some rule reads the peers' ClusterFeatures (`clusterFeatureMatch`).
    pub features: bool,
    /// (peer, kind) pairs this agent may not list and watch.
    pub unreadable: &'a BTreeSet<Place>,
    /// Where the peers let this agent read Secrets.
    pub secrets: &'a SecretScope,
}

/// The ClusterFeature kind, read on the peers when a rule matches peers by feature.
pub fn feature_gvk() -> GroupVersionKind {
    GroupVersionKind {
        group: super::super::api::GROUP.into(),
        version: "v1alpha1".into(),
        kind: "ClusterFeature".into(),
    }
}

/// The watches `needs` asks for, each with the identity of the reader it is read with ([`LOCAL`]
/// here; the peer client's identity, with the watch's field selector, on a peer). Here: the
/// rules' kinds and the kinds their copies are written as. On each peer: the rules' kinds (and
/// ClusterFeature when a rule reads features), unless that peer refuses the kind. Kinds that
/// discovery did not resolve (`served`) are not watched.
pub fn wanted(
    needs: &Needs<'_>,
    served: impl Fn(&GroupVersionKind) -> bool,
    peers: &[PeerId<'_>],
) -> BTreeMap<Place, String> {
    let mut wanted = BTreeMap::new();
    let local_kinds = needs.rules.keys().chain(needs.targets.values().flatten());
    for gvk in local_kinds.filter(|g| served(g)) {
        wanted.insert(Place::local(gvk), LOCAL.to_string());
    }
    let feature = needs.features.then(feature_gvk);
    for gvk in needs.rules.keys().chain(&feature).filter(|g| served(g)) {
        let fields = peer_field_selector(gvk, needs.rules.get(gvk).map(Vec::as_slice));
        for peer in peers {
            let place = Place::peer(peer.name, gvk);
            if needs.unreadable.contains(&place) {
                continue;
            }
            // The selector is part of the identity: when a rule widens the kind, the source is
            // restarted unfiltered.
            let identity = match &fields {
                Some(fields) => format!("{}?fieldSelector={fields}", peer.identity),
                None => peer.identity.to_string(),
            };
            // Peer Secrets are read in the namespaces the peer grants, one watch each, unless a
            // rule reads them everywhere.
            if is_secret(gvk) && !needs.secrets.everywhere {
                for namespace in &needs.secrets.namespaces {
                    let place = Place {
                        namespace: Some(namespace.clone()),
                        ..place.clone()
                    };
                    wanted.insert(place, identity.clone());
                }
            } else {
                wanted.insert(place, identity);
            }
        }
    }
    wanted
}

/// How the watches held differ from the ones wanted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Held and no longer wanted, or wanted through another reader.
    pub stop: Vec<Place>,
    /// Wanted and not held (or stopped above), with the identity to read with.
    pub start: Vec<(Place, String)>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.stop.is_empty() && self.start.is_empty()
    }
}

/// The difference between the watches `held` (place → identity) and `wanted`.
pub fn diff<'a>(
    held: impl IntoIterator<Item = (&'a Place, &'a str)>,
    wanted: &BTreeMap<Place, String>,
) -> Diff {
    let held: BTreeMap<&Place, &str> = held.into_iter().collect();
    let stop = held
        .iter()
        .filter(|(place, identity)| wanted.get(**place).is_none_or(|w| w != *identity))
        .map(|(place, _)| (*place).clone())
        .collect();
    let start = wanted
        .iter()
        .filter(|(place, identity)| held.get(place) != Some(&identity.as_str()))
        .map(|(place, identity)| (place.clone(), identity.clone()))
        .collect();
    Diff { stop, start }
}

/// The field selector of a peer's watch of `gvk`, when the rules reading that kind only want
/// objects of one API-defined type: the built-in rule for peer Secrets wants those of type
/// [`SECRET_TYPE`](super::super::SECRET_TYPE), so unless a ResourceSyncRule also reads Secrets, a
/// peer is asked for those alone (`type=...`), not for every Secret it holds. Local watches are
/// never filtered: a local object of any type must be seen to win over a copy.
pub fn peer_field_selector(gvk: &GroupVersionKind, rules: Option<&[RuleSet]>) -> Option<String> {
    let secrets = is_secret(gvk);
    let rules = rules?;
    (secrets && !rules.is_empty() && rules.iter().all(builtin::is_core))
        .then(|| format!("type={}", super::super::SECRET_TYPE))
}

/// Whether `gvk` is core/v1 Secret.
pub fn is_secret(gvk: &GroupVersionKind) -> bool {
    gvk.group.is_empty() && gvk.version == "v1" && gvk.kind == "Secret"
}

/// Whether a peer source whose identity carries a `type=` field selector lists objects of
/// `local_type` (the type of the local object under the key, if any).
pub fn filter_covers(identity: &str, local_type: Option<&str>) -> bool {
    match identity.split_once("?fieldSelector=type=") {
        Some((_, wanted)) => local_type.is_none_or(|t| t == wanted),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filtered_peer_source_decides_nothing_about_other_types() {
        let filtered =
            "cluster-registry/second@u/1?fieldSelector=type=k8s.cisco.com/cluster-registry-secret";
        assert!(filter_covers(
            filtered,
            Some("k8s.cisco.com/cluster-registry-secret")
        ));
        assert!(filter_covers(filtered, None));
        assert!(!filter_covers(filtered, Some("Opaque")));
        assert!(filter_covers("cluster-registry/second@u/1", Some("Opaque")));
    }

    fn gvk(group: &str, kind: &str) -> GroupVersionKind {
        GroupVersionKind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
        }
    }

    fn secret_gvk() -> GroupVersionKind {
        gvk("", "Secret")
    }

    fn rule(name: &str, spec: serde_json::Value) -> RuleSet {
        RuleSet::compile(name, &serde_json::from_value(spec).unwrap()).unwrap()
    }

    /// A user's rule copying Secrets `test-secret`.
    fn secrets_rule() -> RuleSet {
        rule(
            "test-secret-sink",
            serde_json::json!({
                "groupVersionKind": {"version": "v1", "kind": "Secret"},
                "rules": [{"match": [{"objectKey": {"name": "test-secret", "namespace": "cluster-registry"}}]}],
            }),
        )
    }

    /// A rule copying ConfigMaps as Secrets.
    fn maps_as_secrets() -> RuleSet {
        rule(
            "maps-as-secrets",
            serde_json::json!({
                "groupVersionKind": {"version": "v1", "kind": "ConfigMap"},
                "rules": [{"mutations": {"groupVersionKind": {"version": "v1", "kind": "Secret"}}}],
            }),
        )
    }

    #[test]
    fn peers_are_asked_only_for_peer_secrets_unless_a_rule_reads_secrets() {
        let core: Vec<RuleSet> = builtin::core_rules()
            .into_iter()
            .filter(|r| r.gvk == secret_gvk())
            .collect();
        assert_eq!(
            peer_field_selector(&secret_gvk(), Some(&core)).as_deref(),
            Some("type=k8s.cisco.com/cluster-registry-secret")
        );
        let mut with_user_rule = core.clone();
        with_user_rule.push(secrets_rule());
        assert_eq!(
            peer_field_selector(&secret_gvk(), Some(&with_user_rule)),
            None
        );
        let clusters = builtin::core_rules().into_iter().next().unwrap();
        assert_eq!(
            peer_field_selector(&clusters.gvk.clone(), Some(&[clusters])),
            None
        );
        assert_eq!(peer_field_selector(&secret_gvk(), None), None);
    }

    /// The wanted watches as `cluster/kind identity` lines.
    fn lines(wanted: &BTreeMap<Place, String>) -> Vec<String> {
        wanted
            .iter()
            .map(|(place, identity)| {
                let cluster = place.cluster.as_deref().unwrap_or("here");
                let namespace = place
                    .namespace
                    .as_ref()
                    .map(|n| format!(" in {n}"))
                    .unwrap_or_default();
                format!("{cluster}/{}{namespace} {identity}", place.gvk.kind)
            })
            .collect()
    }

    #[test]
    fn the_watches_wanted_for_the_rules_and_peers() {
        let peers = [
            PeerId {
                name: "second",
                identity: "ns/second@u",
            },
            PeerId {
                name: "third",
                identity: "ns/third@u",
            },
        ];
        let feature = rule(
            "featured",
            serde_json::json!({
                "groupVersionKind": {"version": "v1", "kind": "ConfigMap"},
                "clusterFeatureMatch": [{"featureName": "f"}],
                "rules": [{}],
            }),
        );
        let core_secrets: Vec<RuleSet> = builtin::core_rules()
            .into_iter()
            .filter(|r| r.gvk == secret_gvk())
            .collect();
        let refused = BTreeSet::from([Place::peer("third", &gvk("", "ConfigMap"))]);
        let everywhere = rule(
            "every-secret",
            serde_json::json!({
                "groupVersionKind": {"version": "v1", "kind": "Secret"},
                "rules": [{"match": [{"labels": [{"matchLabels": {"sync": "yes"}}]}]}],
            }),
        );
        let nothing = BTreeSet::new();
        // (what, rules, features, unreadable, kinds not served, the watches wanted)
        type Case<'a> = (
            &'a str,
            Vec<RuleSet>,
            bool,
            &'a BTreeSet<Place>,
            &'a [&'a str],
            Vec<&'a str>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "no rule: nothing is watched",
                vec![],
                false,
                &nothing,
                &[],
                vec![],
            ),
            (
                "a rule's kind is watched here and on each peer",
                vec![secrets_rule()],
                false,
                &nothing,
                &[],
                vec![
                    "here/Secret local",
                    "second/Secret in cluster-registry ns/second@u",
                    "third/Secret in cluster-registry ns/third@u",
                ],
            ),
            (
                "the kind copies are written as is watched here only",
                vec![maps_as_secrets()],
                false,
                &nothing,
                &[],
                vec![
                    "here/ConfigMap local",
                    "here/Secret local",
                    "second/ConfigMap ns/second@u",
                    "third/ConfigMap ns/third@u",
                ],
            ),
            (
                "a peer that refuses the kind is not read",
                vec![maps_as_secrets()],
                false,
                &refused,
                &[],
                vec![
                    "here/ConfigMap local",
                    "here/Secret local",
                    "second/ConfigMap ns/second@u",
                ],
            ),
            (
                "a kind not served is watched nowhere",
                vec![maps_as_secrets()],
                false,
                &nothing,
                &["Secret"],
                vec![
                    "here/ConfigMap local",
                    "second/ConfigMap ns/second@u",
                    "third/ConfigMap ns/third@u",
                ],
            ),
            (
                "features are read on the peers only",
                vec![feature],
                true,
                &nothing,
                &[],
                vec![
                    "here/ConfigMap local",
                    "second/ConfigMap ns/second@u",
                    "second/ClusterFeature ns/second@u",
                    "third/ConfigMap ns/third@u",
                    "third/ClusterFeature ns/third@u",
                ],
            ),
            (
                "peer Secrets of the built-in rule alone are read filtered",
                core_secrets,
                false,
                &nothing,
                &[],
                vec![
                    "here/Secret local",
                    "second/Secret in cluster-registry ns/second@u?fieldSelector=type=k8s.cisco.com/cluster-registry-secret",
                    "third/Secret in cluster-registry ns/third@u?fieldSelector=type=k8s.cisco.com/cluster-registry-secret",
                ],
            ),
            (
                "peer Secrets of a rule that names no namespace are read everywhere",
                vec![everywhere.clone()],
                false,
                &nothing,
                &[],
                vec![
                    "here/Secret local",
                    "second/Secret ns/second@u",
                    "third/Secret ns/third@u",
                ],
            ),
        ];
        for (what, rule_list, features, unreadable, unserved, want) in cases {
            let mut rules: HashMap<GroupVersionKind, Vec<RuleSet>> = HashMap::new();
            let mut targets: HashMap<GroupVersionKind, BTreeSet<GroupVersionKind>> = HashMap::new();
            for rule in rule_list {
                targets
                    .entry(rule.gvk.clone())
                    .or_default()
                    .extend(rule.targets());
                rules.entry(rule.gvk.clone()).or_default().push(rule);
            }
            // Where the peers grant Secrets: the Clusters' default Secret namespace, and what
            // the rules name.
            let mut secrets = SecretScope::default();
            for rule in rules.values().flatten() {
                match rule.namespaces() {
                    _ if builtin::is_core(rule) => {}
                    Some(namespaces) => secrets.namespaces.extend(namespaces),
                    None => secrets.everywhere |= is_secret(&rule.gvk),
                }
            }
            secrets.namespaces.insert("cluster-registry".into());
            let needs = Needs {
                rules: &rules,
                targets: &targets,
                features,
                unreadable,
                secrets: &secrets,
            };
            let served = |g: &GroupVersionKind| !unserved.contains(&g.kind.as_str());
            let mut got = lines(&wanted(&needs, served, &peers));
            got.sort();
            let mut want: Vec<String> = want.into_iter().map(String::from).collect();
            want.sort();
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn only_the_watches_that_differ_are_stopped_and_started() {
        let here = Place::local(&secret_gvk());
        let peer = Place::peer("second", &secret_gvk());
        let other = Place::peer("third", &secret_gvk());
        let held = |list: &[(&Place, &str)]| -> Vec<(Place, String)> {
            list.iter()
                .map(|(p, i)| ((*p).clone(), i.to_string()))
                .collect()
        };
        let want = |list: &[(&Place, &str)]| -> BTreeMap<Place, String> {
            list.iter()
                .map(|(p, i)| ((*p).clone(), i.to_string()))
                .collect()
        };
        // (what, held, wanted, stopped, started)
        type Case<'a> = (
            &'a str,
            Vec<(Place, String)>,
            BTreeMap<Place, String>,
            Vec<&'a Place>,
            Vec<(&'a Place, &'a str)>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "the same watches: nothing to do",
                held(&[(&here, "local"), (&peer, "s@u")]),
                want(&[(&here, "local"), (&peer, "s@u")]),
                vec![],
                vec![],
            ),
            (
                "a new peer: its watch starts",
                held(&[(&here, "local")]),
                want(&[(&here, "local"), (&peer, "s@u")]),
                vec![],
                vec![(&peer, "s@u")],
            ),
            (
                "a peer gone: its watch stops",
                held(&[(&here, "local"), (&peer, "s@u"), (&other, "t@u")]),
                want(&[(&here, "local"), (&other, "t@u")]),
                vec![&peer],
                vec![],
            ),
            (
                "another reader (a new kubeconfig, a wider selector): restarted",
                held(&[(&peer, "s@u?fieldSelector=type=x")]),
                want(&[(&peer, "s@u")]),
                vec![&peer],
                vec![(&peer, "s@u")],
            ),
        ];
        for (what, held, wanted, stop, start) in cases {
            let got = diff(held.iter().map(|(p, i)| (p, i.as_str())), &wanted);
            let want = Diff {
                stop: stop.into_iter().cloned().collect(),
                start: start
                    .into_iter()
                    .map(|(p, i)| (p.clone(), i.to_string()))
                    .collect(),
            };
            assert_eq!(got, want, "{what}");
            assert_eq!(got.is_empty(), what.contains("nothing"), "{what}");
        }
    }
}

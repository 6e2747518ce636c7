//! Group formation as a pure simulation of [`decide`] under the built-in rules: three clusters
//! with every order of their names, and every way the third one joins (an exchange with the
//! member the other two exchanged from, or with the other member). Each cluster holds what the
//! installation and the hand exchanges put there; each round, every cluster decides every key
//! from its peers and applies what it decided.
//!
//! What it shows:
//! - the group converges to every Cluster and peer Secret on every member, and then stays still;
//! - a cluster writes each object at most twice from the exchange on (once from the peer it
//!   knows when the object first reaches it, once more when the object's owner becomes its peer),
//!   and at most once after it knows all its peers: decisions converge in one pass;
//! - at every step, any set of live peers whose watches have not listed (just started or
//!   restarted) changes no decision: it either holds the decision back or is irrelevant to it.
//!   Restarted watches are also injected where the bug of issue 25 restarted them (the peer
//!   whose Secret was just written).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::{
    SECRET_TYPE,
    builtin::core_rules,
    decide::{Action, Decision, Key, LocalView, PeerView, decide},
    rules::RuleSet,
};

const REGISTRY_NS: &str = "cluster-registry";

fn id(name: &str) -> String {
    format!("id-{name}")
}

fn cluster_object(name: &str) -> Value {
    json!({
        "apiVersion": "clusterregistry.k8s.cisco.com/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {"clusterID": id(name),
                 "authInfo": {"secretRef": {"name": name, "namespace": REGISTRY_NS}}},
    })
}

fn secret_object(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": SECRET_TYPE,
        "metadata": {"name": name, "namespace": REGISTRY_NS},
        "data": {"kubeconfig": format!("reader of {name}")},
    })
}

/// One cluster's objects, by key.
#[derive(Default, Clone)]
struct Holdings {
    objects: BTreeMap<Key, Value>,
    /// Writes (apply or delete) per key since the exchange that joined the third cluster.
    writes: BTreeMap<Key, usize>,
    /// Writes per key decided while this cluster knew every peer.
    writes_since_peers_complete: BTreeMap<Key, usize>,
    /// Peers whose watches restarted: not listed for the next round.
    restarted: BTreeSet<String>,
}

struct Group {
    names: Vec<String>,
    held: BTreeMap<String, Holdings>,
    serial: usize,
    rules: Vec<RuleSet>,
}

impl Group {
    /// Each cluster as installed: its own Cluster and the Secret with its reader kubeconfig.
    fn installed(names: &[&str]) -> Group {
        let mut group = Group {
            names: names.iter().map(|n| n.to_string()).collect(),
            held: BTreeMap::new(),
            serial: 0,
            rules: core_rules(),
        };
        for name in names {
            for object in [cluster_object(name), secret_object(name)] {
                group.put(name, object);
            }
        }
        group
    }

    fn put(&mut self, on: &str, mut object: Value) {
        self.serial += 1;
        object["metadata"]["uid"] = json!(format!("uid-{}", self.serial));
        object["metadata"]["resourceVersion"] = json!(self.serial.to_string());
        let key = Key::of(&object).expect("a key");
        self.held
            .entry(on.to_string())
            .or_default()
            .objects
            .insert(key, object);
    }

    /// The hand exchange: `a`'s own Cluster and Secret applied on `b`, and the other way round.
    fn exchange(&mut self, a: &str, b: &str) {
        for (from, to) in [(a, b), (b, a)] {
            self.put(to, cluster_object(from));
            self.put(to, secret_object(from));
        }
    }

    /// The peers of `name`: every other cluster it holds a Cluster and a peer Secret for.
    fn peers_of(&self, name: &str) -> Vec<String> {
        let held = &self.held[name].objects;
        self.names
            .iter()
            .filter(|peer| *peer != name)
            .filter(|peer| {
                held.contains_key(&Key::of(&cluster_object(peer)).unwrap())
                    && held.contains_key(&Key::of(&secret_object(peer)).unwrap())
            })
            .cloned()
            .collect()
    }

    /// Every key any cluster holds.
    fn keys(&self) -> BTreeSet<Key> {
        self.held
            .values()
            .flat_map(|h| h.objects.keys().cloned())
            .collect()
    }

    /// `on`'s decision for `key`, with the peers in `unlisted` not listed yet.
    fn decision(&self, on: &str, key: &Key, unlisted: &BTreeSet<String>) -> Decision {
        let peers = self.peers_of(on);
        let ids: Vec<String> = peers.iter().map(|p| id(p)).collect();
        let views: Vec<PeerView<'_>> = peers
            .iter()
            .zip(&ids)
            .map(|(peer, id)| {
                let listed = !unlisted.contains(peer);
                PeerView {
                    name: peer,
                    id,
                    live: true,
                    listed,
                    features: &[],
                    // A watch that has not listed holds nothing yet.
                    object: self.held[peer.as_str()].objects.get(key).filter(|_| listed),
                }
            })
            .collect();
        let local = &self.held[on].objects;
        let local = LocalView {
            at_key: local.get(key),
            moved: &[],
            get: &|k| local.get(k).cloned(),
            namespaced: &|gvk| gvk.kind == "Secret",
        };
        let rules: Vec<RuleSet> = self
            .rules
            .iter()
            .filter(|r| r.gvk == key.gvk)
            .cloned()
            .collect();
        decide(&id(on), key, &local, &views, &rules, &[])
    }

    /// One round: every cluster, in name order, decides every key and writes. Returns the
    /// number of writes, plus the decisions held back by a restarted watch (due next round).
    fn round(&mut self) -> usize {
        let mut writes = 0;
        for on in self.names.clone() {
            let restarted = std::mem::take(&mut self.held.get_mut(&on).unwrap().restarted);
            for key in self.keys() {
                let full = self.decision(&on, &key, &BTreeSet::new());
                self.check_unknown_never_decides(&on, &key, &full);
                let decision = self.decision(&on, &key, &restarted);
                let knows_every_peer = self.peers_of(&on).len() == self.names.len() - 1;
                if decision != full {
                    // Held back: the restarted watch lists before the next round.
                    writes += 1;
                }
                for action in decision.actions {
                    let written = match action {
                        Action::Apply { desired, .. } => {
                            let target = Key::of(&desired).unwrap();
                            self.put(&on, desired);
                            Some(target)
                        }
                        Action::Delete(object) => {
                            let target = Key::of(&object).unwrap();
                            self.held.get_mut(&on).unwrap().objects.remove(&target);
                            Some(target)
                        }
                        Action::Keep(_) => None,
                        Action::Invalid { rule, message } => panic!("{rule}: {message}"),
                    };
                    if let Some(target) = written {
                        writes += 1;
                        let held = self.held.get_mut(&on).unwrap();
                        *held.writes.entry(target.clone()).or_default() += 1;
                        if knows_every_peer {
                            *held
                                .writes_since_peers_complete
                                .entry(target.clone())
                                .or_default() += 1;
                        }
                        // Where issue 25 restarted the watches: the peer whose Secret changed.
                        if target.gvk.kind == "Secret" {
                            held.restarted.insert(target.name.clone());
                        }
                    }
                }
            }
        }
        writes
    }

    /// With any set of peers not listed, the decision is the full one, or it waits (`Keep`).
    fn check_unknown_never_decides(&self, on: &str, key: &Key, full: &Decision) {
        let peers = self.peers_of(on);
        for mask in 1..(1u32 << peers.len()) {
            let unlisted: BTreeSet<String> = peers
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, p)| p.clone())
                .collect();
            let partial = self.decision(on, key, &unlisted);
            let waits = partial.actions.iter().all(|a| matches!(a, Action::Keep(_)));
            assert!(
                waits || partial == *full,
                "on {on}, {key:?} with {unlisted:?} not listed: {partial:?}, all listed: {full:?}"
            );
        }
    }
}

/// The six orders of three names, each as (first, second, third) by role.
fn orders() -> Vec<[&'static str; 3]> {
    let names = ["a", "b", "c"];
    let mut orders = Vec::new();
    for i in 0..3 {
        for j in 0..3 {
            for k in 0..3 {
                if i != j && j != k && i != k {
                    orders.push([names[i], names[j], names[k]]);
                }
            }
        }
    }
    orders
}

#[test]
fn a_group_of_three_converges_in_one_pass_whatever_the_join_path_and_name_order() {
    let orders = orders();
    assert_eq!(orders.len(), 6);
    for [first, second, third] in orders {
        // The third joins through the member the group was described from, or the other one.
        for through in [first, second] {
            let case = format!("{first} ⇄ {second}, then {third} ⇄ {through}");
            let mut group = Group::installed(&[first, second, third]);
            group.exchange(first, second);
            while group.round() > 0 {}
            group.exchange(third, through);
            for held in group.held.values_mut() {
                held.writes.clear();
                held.writes_since_peers_complete.clear();
            }
            let mut rounds = 0;
            while group.round() > 0 {
                rounds += 1;
                assert!(rounds <= 6, "{case}: still writing after {rounds} rounds");
            }
            // Still: one more round writes nothing.
            assert_eq!(group.round(), 0, "{case}");
            for (on, held) in &group.held {
                assert_eq!(group.peers_of(on).len(), 2, "{case}: {on} knows its peers");
                for name in [first, second, third] {
                    for object in [cluster_object(name), secret_object(name)] {
                        let key = Key::of(&object).unwrap();
                        assert!(
                            held.objects.contains_key(&key),
                            "{case}: {on} lacks {key:?}"
                        );
                    }
                }
                for (key, writes) in &held.writes {
                    assert!(*writes <= 2, "{case}: {on} wrote {key:?} {writes} times");
                }
                for (key, writes) in &held.writes_since_peers_complete {
                    assert!(
                        *writes <= 1,
                        "{case}: {on} wrote {key:?} {writes} times after it knew every peer"
                    );
                }
            }
        }
    }
}

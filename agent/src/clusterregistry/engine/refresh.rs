//! A refresh of the engine's topology, in steps: each rule admitted (compiled, its kinds served,
//! this agent's permissions here and on each peer) and told so; the built-in rules added; the
//! watches the admitted rules need planned ([`plan`](super::plan)) and changed to match.

use std::collections::{BTreeSet, HashMap};

use kube::{Client, ResourceExt, api::ApiResource};

use super::{
    Engine,
    plan::{self, Needs, PeerId, Place, feature_gvk},
    queue::Wake,
    report::Reason,
    watches::Starter,
};
use crate::clusterregistry::{
    access::Access,
    api::{GroupVersionKind, ResourceSyncRule},
    builtin,
    grants::secret_scope,
    rules::RuleSet,
};

/// A peer the engine reads from: live, its Cluster present and not disabled.
struct LivePeer {
    name: String,
    client: Client,
    identity: String,
}

/// The rules a refresh admits, and what it found out on the way.
#[derive(Default)]
struct Admitted {
    rules: HashMap<GroupVersionKind, Vec<RuleSet>>,
    /// Per rule kind, the kinds its copies are written as.
    targets: HashMap<GroupVersionKind, BTreeSet<GroupVersionKind>>,
    /// (peer, kind) pairs whose objects this agent may not list and watch: not read.
    unreadable: BTreeSet<Place>,
    /// Some permission was missing: they are asked again soon.
    denied: bool,
}

impl Admitted {
    fn add(&mut self, rule: RuleSet) {
        self.targets
            .entry(rule.gvk.clone())
            .or_default()
            .extend(rule.targets());
        self.rules.entry(rule.gvk.clone()).or_default().push(rule);
    }
}

/// Why a rule cannot work at all.
struct NotAdmitted {
    reason: Reason,
    message: String,
    /// A permission is missing (asked again soon).
    denied: bool,
}

impl NotAdmitted {
    fn unknown_kind(field: &str, gvk: &GroupVersionKind, error: kube::Error) -> NotAdmitted {
        NotAdmitted {
            reason: Reason::UnknownKind,
            message: format!(
                "{field}: the API server does not serve {}/{} {}: {error}",
                gvk.group, gvk.version, gvk.kind
            ),
            denied: false,
        }
    }
}

impl Engine {
    /// Recompiles the rules, resolves their kinds, and starts and stops sources to match.
    pub(super) async fn refresh(&mut self, rule_objects: &[ResourceSyncRule]) {
        let mut objects = rule_objects.to_vec();
        objects.sort_by_key(|r| r.name_any());
        let peers = self.peers();
        let mut admitted = Admitted::default();
        for rule in &objects {
            self.admit(rule, &peers, &mut admitted).await;
        }
        if self.group.group_sync {
            self.add_builtin(&mut admitted).await;
        }
        if admitted.denied {
            // Permissions are checked again soon, so that a fix takes effect by itself.
            self.memory
                .access
                .recheck_later(self.queue.sender(), Wake::Topology);
        }
        self.memory
            .reported
            .retain(|name, _| objects.iter().any(|r| r.name_any() == *name));
        let features = admitted
            .rules
            .values()
            .flatten()
            .any(RuleSet::uses_features);
        if features && self.resolve(&feature_gvk()).await.is_err() {
            tracing::warn!("ClusterFeature is not served; rules with clusterFeatureMatch wait");
        }
        self.rewatch(&admitted, features, &peers);
        self.catalog.rules = admitted.rules;
        self.catalog.targets = admitted.targets;
        // Rules or peers changed: every key of every kind may decide differently now.
        for gvk in self.catalog.rules.keys() {
            self.queue.wake(Wake::Kind(gvk.clone()));
        }
    }

    /// Live peers (the Cluster reconciler's last check passed), whose Cluster exists and is not
    /// disabled. A peer that is not live is neither checked nor
    /// listed: a peer answering errors gets only the Cluster reconciler's backed-off checks,
    /// and its copies are kept (nothing is decided about a peer without a source).
    fn peers(&self) -> Vec<LivePeer> {
        let table = self.group.table.borrow();
        self.group
            .clusters
            .state()
            .iter()
            .filter(|c| c.spec.cluster_id != self.group.local_id)
            .filter(|c| !crate::clusterregistry::disabled(c))
            .filter_map(|c| {
                let name = c.name_any();
                let state = table.get(&name).filter(|state| state.live)?;
                let peer = state.client.clone()?;
                Some(LivePeer {
                    name,
                    client: peer.client,
                    identity: peer.identity,
                })
            })
            .collect()
    }

    /// Admits `rule` into `admitted` when it can work, from every peer or from those that let
    /// this agent read its kind, and says which (log, Event, status).
    async fn admit(
        &mut self,
        rule: &ResourceSyncRule,
        peers: &[LivePeer],
        admitted: &mut Admitted,
    ) {
        let compiled = match self.check_here(rule).await {
            Ok(compiled) => compiled,
            Err(not) => {
                admitted.denied |= not.denied;
                self.report(rule, false, not.reason, not.message).await;
                return;
            }
        };
        let resource = self.catalog.kinds[&compiled.gvk].resource.clone();
        let mut refused = Vec::new();
        // Secrets of the namespaces a rule names are granted by each peer's agent as the rule
        // reaches it (grants.rs), so a check now would only see the moment before: their
        // watches retry until the grant is there. A rule that reads Secrets everywhere is
        // checked like any kind.
        let granted = plan::is_secret(&compiled.gvk) && compiled.namespaces().is_some();
        let refusals = if granted {
            Vec::new()
        } else {
            self.peer_refusals(&resource, peers).await
        };
        for (peer, missing) in refusals {
            refused.push(format!("{peer} ({missing})"));
            admitted
                .unreadable
                .insert(Place::peer(&peer, &compiled.gvk));
        }
        if refused.is_empty() {
            let message = format!(
                "copying matching {} objects from the peer clusters",
                compiled.gvk.kind
            );
            self.report(rule, true, Reason::Ready, message).await;
        } else {
            admitted.denied = true;
            let message = format!(
                "the peer kubeconfig may not read {} on {}; grant it there with a \
                 ClusterRole labelled cluster-registry.k8s.cisco.com/reader-aggregated: \
                 \"true\". Copying from the other peers",
                resource.plural,
                refused.join(", ")
            );
            self.report(rule, false, Reason::MissingPermission, message)
                .await;
        }
        admitted.add(compiled);
    }

    /// Compiles `rule` and checks what it needs here: its kind and the kinds of its copies
    /// served, and this agent's permission to read the one and write the others.
    async fn check_here(&mut self, rule: &ResourceSyncRule) -> Result<RuleSet, NotAdmitted> {
        let compiled =
            RuleSet::compile(&rule.name_any(), &rule.spec).map_err(|error| NotAdmitted {
                reason: error.reason(),
                message: error.to_string(),
                denied: false,
            })?;
        if let Err(error) = self.resolve(&compiled.gvk).await {
            return Err(NotAdmitted::unknown_kind(
                "spec.groupVersionKind",
                &compiled.gvk,
                error,
            ));
        }
        let targets = compiled.targets();
        for target in &targets {
            if let Err(error) = self.resolve(target).await {
                return Err(NotAdmitted::unknown_kind(
                    "spec.rules[].mutations.groupVersionKind",
                    target,
                    error,
                ));
            }
        }
        // Copies are written as the target kinds; the rule's own kind is watched here too.
        let kind = |gvk: &GroupVersionKind| self.catalog.kinds[gvk].resource.clone();
        let mut needs = vec![(kind(&compiled.gvk), Access::READ)];
        needs.extend(targets.iter().map(|t| (kind(t), Access::WRITE)));
        for (resource, verbs) in needs {
            if let Some(missing) = self
                .memory
                .access
                .missing("local", &self.io.client, &resource, verbs)
                .await
            {
                let plural = resource.plural;
                return Err(NotAdmitted {
                    reason: Reason::MissingPermission,
                    message: format!(
                        "this agent may not {missing} {plural} here; grant it with a ClusterRole \
                         labelled cluster-registry.k8s.cisco.com/controller-aggregated: \"true\""
                    ),
                    denied: true,
                });
            }
        }
        Ok(compiled)
    }

    /// The peers that do not let this agent read `resource`, each with the verbs missing. Every
    /// peer is asked at once; a silent one costs one deadline (see `Access`).
    async fn peer_refusals(
        &self,
        resource: &ApiResource,
        peers: &[LivePeer],
    ) -> Vec<(String, String)> {
        let access = &self.memory.access;
        let answers = futures::future::join_all(peers.iter().map(|peer| async move {
            let missing = access
                .missing(&peer.identity, &peer.client, resource, Access::READ)
                .await;
            (peer.name.clone(), missing)
        }))
        .await;
        answers
            .into_iter()
            .filter_map(|(peer, missing)| Some((peer, missing?)))
            .collect()
    }

    /// The built-in rules that form the group, those whose kind is served.
    async fn add_builtin(&mut self, admitted: &mut Admitted) {
        for rule in builtin::core_rules() {
            if self.resolve(&rule.gvk).await.is_err() {
                tracing::debug!(rule = %rule.name, "kind not served; built-in rule waits");
                continue;
            }
            admitted.add(rule);
        }
    }

    /// Starts and stops watches to match what `admitted` needs ([`plan::wanted`],
    /// [`plan::diff`]).
    fn rewatch(&mut self, admitted: &Admitted, features: bool, peers: &[LivePeer]) {
        let secrets = secret_scope(
            admitted.rules.values().flatten(),
            &self.group.clusters.state(),
            self.group.group_sync,
        );
        let needs = Needs {
            rules: &admitted.rules,
            targets: &admitted.targets,
            features,
            unreadable: &admitted.unreadable,
            secrets: &secrets,
        };
        let ids: Vec<PeerId<'_>> = peers
            .iter()
            .map(|p| PeerId {
                name: &p.name,
                identity: &p.identity,
            })
            .collect();
        let kinds = &self.catalog.kinds;
        let wanted = plan::wanted(&needs, |g| kinds.contains_key(g), &ids);
        let held = self
            .watches
            .sources
            .iter()
            .map(|(place, source)| (place, source.identity.as_str()));
        let diff = plan::diff(held, &wanted);
        let client_of = |place: &Place| match &place.cluster {
            None => Some(self.io.client.clone()),
            Some(name) => peers
                .iter()
                .find(|p| p.name == *name)
                .map(|p| p.client.clone()),
        };
        let starter = Starter {
            registry: &self.io.registry,
            wake: self.queue.sender(),
        };
        if self.watches.change(diff, kinds, client_of, &starter) {
            tracing::debug!(
                sources = self.watches.sources.len(),
                "resource sync watches changed"
            );
        }
    }
}

//! One key, in three steps: observe what the local cluster and each peer hold for it (from the
//! watches, no request), [`decide`] (pure), and carry out the actions (the only writes).

use kube::{Api, Resource, ResourceExt, api::DynamicObject, runtime::events::EventType};
use serde_json::Value;

use super::{
    Engine, RETRY, SETTLE,
    plan::{Place, feature_gvk, filter_covers},
    queue::Wake,
    to_value,
    watches::object,
};
use crate::{
    clusterregistry::{
        api::{GroupVersionKind, ResourceSyncRule},
        decide::{Action, Decision, Key, LocalView, PeerView, decide},
        rules::RuleSet,
    },
    sink,
};

/// What one peer holds for one key.
struct PeerHolding {
    name: String,
    /// Its cluster ID.
    id: String,
    live: bool,
    /// Its source holds a complete list that covers the local object's type.
    listed: bool,
    features: Vec<Value>,
    object: Option<Value>,
}

/// What the watches hold for one key.
struct Observed {
    /// The local object under the key.
    at_key: Option<Value>,
    /// Local copies under other keys that name this key as their source.
    moved: Vec<Value>,
    /// What each peer with a source of the kind holds.
    peers: Vec<PeerHolding>,
}

impl Engine {
    /// Decides and writes what `key` needs; false when a write failed (it is retried).
    pub(super) async fn reconcile(&self, key: &Key) -> bool {
        // Rules are kept only for kinds discovery resolved.
        let Some(rules) = self.catalog.rules.get(&key.gvk) else {
            return true;
        };
        if !self.ready_to_decide(&key.gvk) {
            return true;
        }
        let observed = self.observe(key);
        let decision = self.decide(key, rules, &observed);
        if let Some(target) = decision.target.filter(|t| t != key) {
            self.watches.links.routes.insert(target, key.clone());
        }
        let failed = self.execute(key, decision.actions).await;
        if failed {
            self.queue.wake_after(Wake::Key(key.clone()), RETRY);
        }
        !failed
    }

    /// Whether keys of `gvk` can be decided: nothing is decided before the local lists are
    /// complete (a copy could overwrite an object not seen yet), nor, right after a start, while
    /// a peer may still hold objects not seen yet ([`SETTLE`]).
    fn ready_to_decide(&self, gvk: &GroupVersionKind) -> bool {
        let targets = self.catalog.targets.get(gvk).into_iter().flatten();
        let listed = std::iter::once(gvk).chain(targets).all(|local_kind| {
            self.watches
                .sources
                .get(&Place::local(local_kind))
                .is_some_and(|source| source.view.listed())
        });
        listed && !(self.group.started.elapsed() < SETTLE && self.unsettled(gvk))
    }

    /// Whether some peer may still hold objects of `gvk` this engine has not seen: a Cluster not
    /// checked yet, or a live peer whose list of the kind has not arrived.
    fn unsettled(&self, gvk: &GroupVersionKind) -> bool {
        let table = self.group.table.borrow();
        self.group
            .clusters
            .state()
            .iter()
            .filter(|c| {
                c.spec.cluster_id != self.group.local_id && !crate::clusterregistry::disabled(c)
            })
            .any(|c| {
                let name = c.name_any();
                match table.get(&name) {
                    None => true,
                    Some(state) if !state.live => false,
                    Some(_) => {
                        // Every watch of the kind on the peer (one per namespace for Secrets).
                        let mut held = self.watches.sources.iter().filter(|(place, _)| {
                            place.cluster.as_ref() == Some(&name) && place.gvk == *gvk
                        });
                        let mut any = false;
                        let all_listed = held.all(|(_, source)| {
                            any = true;
                            source.view.listed()
                        });
                        !(any && all_listed)
                    }
                }
            })
    }

    /// What the local cluster and each peer with a source of the kind hold for `key`.
    fn observe(&self, key: &Key) -> Observed {
        let gvk = &key.gvk;
        let kinds = &self.catalog.kinds;
        let at_key = self.local_object(key);
        let moved = self
            .watches
            .copies_of(key)
            .iter()
            .filter_map(|copy| self.local_object(copy))
            .filter(|o| Key::source_of(o).as_ref() == Some(key))
            .collect();
        let table = self.group.table.borrow().clone();
        let local_type = at_key
            .as_ref()
            .and_then(|o| o.get("type").and_then(Value::as_str).map(str::to_string));
        let sources = &self.watches.sources;
        let peers = sources
            .iter()
            .filter(|(place, _)| {
                place.cluster.is_some()
                    && place.gvk == *gvk
                    && place.covers(key.namespace.as_deref())
            })
            .filter_map(|(place, source)| {
                let name = place.cluster.as_ref()?;
                let state = table.get(name)?;
                let feature_source = sources.get(&Place::peer(name, &feature_gvk()));
                let features = feature_source
                    .map(|f| f.view.store().state().iter().map(|o| to_value(o)).collect())
                    .unwrap_or_default();
                // Features not listed yet are unknown too: which rules read the peer is not
                // known.
                let features_listed = feature_source.is_none_or(|f| f.view.listed());
                Some(PeerHolding {
                    name: name.clone(),
                    id: state.id.clone(),
                    live: state.live,
                    // A source filtered by type says nothing of objects of another type: their
                    // absence there is no deletion.
                    listed: source.view.listed()
                        && features_listed
                        && filter_covers(&source.identity, local_type.as_deref()),
                    features,
                    object: object(kinds, source, key),
                })
            })
            .collect();
        Observed {
            at_key,
            moved,
            peers,
        }
    }

    /// [`decide`] on what was observed.
    fn decide(&self, key: &Key, rules: &[RuleSet], observed: &Observed) -> Decision {
        let peers: Vec<PeerView<'_>> = observed
            .peers
            .iter()
            .map(|holding| PeerView {
                name: &holding.name,
                id: &holding.id,
                live: holding.live,
                listed: holding.listed,
                features: &holding.features,
                object: holding.object.as_ref(),
            })
            .collect();
        let get = |k: &Key| self.local_object(k);
        let namespaced =
            |g: &GroupVersionKind| self.catalog.kinds.get(g).is_none_or(|k| k.namespaced);
        let local = LocalView {
            at_key: observed.at_key.as_ref(),
            moved: &observed.moved,
            get: &get,
            namespaced: &namespaced,
        };
        decide(
            &self.group.local_id,
            key,
            &local,
            &peers,
            rules,
            &self.group.clusters.state(),
        )
    }

    /// Carries out `actions` for `key`; true when a write failed (said in the log and in a
    /// Warning Event on the rule).
    async fn execute(&self, key: &Key, actions: Vec<Action>) -> bool {
        let gvk = &key.gvk;
        let mut failed = false;
        for action in actions {
            if let Err(error) = self.act(key, action).await {
                tracing::warn!(kind = %gvk.kind, namespace = ?key.namespace, name = %key.name, error = %xcc_kube::bounded(&error), "cannot write the copy; retrying");
                if let Some(rule) = self.rule_object(gvk) {
                    let note = format!(
                        "cannot write the copy of {} {}: {error}",
                        gvk.kind,
                        key.to_annotation()
                    );
                    self.event(&rule, EventType::Warning, "WriteFailed", note)
                        .await;
                }
                failed = true;
            }
        }
        failed
    }

    /// Carries out one action of the decision for `key`.
    async fn act(&self, key: &Key, action: Action) -> Result<(), kube::Error> {
        let kind = &key.gvk.kind;
        let namespace = key.namespace.as_deref().unwrap_or_default();
        let name = &key.name;
        match action {
            Action::Keep(why) => {
                tracing::trace!(%kind, %namespace, %name, why, "nothing to write");
                Ok(())
            }
            // Not retried early: the same inputs fail the same way. A change to the object or the
            // rule wakes this key, and the resync looks again.
            Action::Invalid { rule, message } => {
                tracing::warn!(%rule, %kind, %namespace, %name, %message, "cannot make the copy; nothing written");
                let reference = ResourceSyncRule::new(&rule, Default::default()).object_ref(&());
                let note = format!("cannot copy {kind} {namespace}/{name}: {message}");
                self.event(&reference, EventType::Warning, "TemplateFailed", note)
                    .await;
                Ok(())
            }
            Action::Apply { desired, from } => {
                let target = Key::of(&desired).expect("a placed copy has a key");
                let Some(api) = self.api(&target) else {
                    return Ok(());
                };
                sink::apply_whole(&api, &target.name, desired, &self.counted()).await?;
                self.guard(&target).await;
                if target == *key {
                    tracing::info!(%kind, %namespace, %name, %from, "copied from peer");
                } else {
                    tracing::info!(%kind, %namespace, %name, %from, to = %target.to_annotation(), "copied from peer");
                }
                Ok(())
            }
            Action::Delete(local) => {
                let Some(copy) = Key::of(&local) else {
                    return Ok(());
                };
                let Some(api) = self.api(&copy) else {
                    return Ok(());
                };
                let field = |f: &str| local["metadata"][f].as_str().map(String::from);
                let deleted = sink::delete_exact(
                    &api,
                    &copy.name,
                    field("uid"),
                    field("resourceVersion"),
                    &self.counted(),
                )
                .await?;
                if deleted {
                    tracing::info!(%kind, %namespace, %name, copy = %copy.to_annotation(), "copy deleted");
                    self.guard(&copy).await;
                }
                Ok(())
            }
        }
    }

    /// An API for the objects of `key`'s kind in its namespace.
    fn api(&self, key: &Key) -> Option<Api<DynamicObject>> {
        let resource = &self.catalog.kinds.get(&key.gvk)?.resource;
        Some(match &key.namespace {
            Some(ns) => Api::namespaced_with(self.io.client.clone(), ns, resource),
            None => Api::all_with(self.io.client.clone(), resource),
        })
    }
}

//! ClusterDetectors: one per context of plumber's kubeconfig Secret, named `<cluster>.<user>`,
//! labelled primary (the cluster this agent runs in, found by kube-system UID) or secondary,
//! with the health of its API server.
//!
//! One loop, woken by the Secret (the process's one watch of local Secrets), by the peer
//! prober's reach changes and by a steady tick: it reads the Secret, builds each context's
//! client through the trust gate (cached in [`PeerClients`]), writes the detectors that changed,
//! deletes those whose context left the Secret, and publishes the contexts to the Replicator
//! ([`Registry`]). Health comes from the shared prober, which asks every server in use for its
//! version every [`xcc_kube::PROBE_INTERVAL`] with TLS verified: a silent cluster turns
//! `Unknown` one probe deadline after it stops answering.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{Api, Client, ResourceExt, api::ListParams, runtime::reflector::ObjectRef};
use serde_json::json;
use xcc_kube::{PeerClients, Reach};

use super::{
    Registry, Target,
    api::{ClusterDetector, ClusterDetectorStatus, ClusterState},
    contexts,
    contexts::Location,
};
use crate::{
    sink::Counted,
    sources::{LocalSecrets, SecretChange},
};

/// Label of every ClusterDetector: primary or secondary.
pub const ROLE_LABEL: &str = "app.kubernetes.io/role";
/// Label that marks the detectors this agent manages (and may delete).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const MANAGED_BY_VALUE: &str = "xcc-agent";

/// How often the detectors are looked at without being woken (probes arrive at this pace).
const TICK: Duration = Duration::from_secs(5);
/// How long finding a cluster's kube-system UID may take.
const UID_DEADLINE: Duration = Duration::from_secs(3);

pub struct Detector {
    pub client: Client,
    pub namespace: String,
    pub peers: PeerClients,
    pub registry: Registry,
    pub counted: Counted,
    /// kube-system UID of each cluster, by client identity.
    uids: HashMap<String, String>,
    local_uid: Option<String>,
    /// `(namespace, client key)` of the clients in use (to forget those whose context went).
    in_use: BTreeSet<(String, String)>,
    /// The last refusal of a whole Secret that was logged.
    said: Option<String>,
    /// The contexts of the legacy Secret last logged as shadowed by the original's location.
    said_shadowed: Vec<String>,
    /// The kubeconfig Secrets as last read.
    secrets: BTreeMap<Location, Secret>,
    /// Whether the missing CRDs or RBAC were logged (once).
    said_rbac: std::sync::atomic::AtomicBool,
}

/// What one context comes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub entry: contexts::Entry,
    pub primary: bool,
    pub status: ClusterDetectorStatus,
}

impl Detector {
    pub fn new(
        client: Client,
        namespace: String,
        peers: PeerClients,
        registry: Registry,
        counted: Counted,
    ) -> Detector {
        Detector {
            client,
            namespace,
            peers,
            registry,
            counted,
            uids: HashMap::new(),
            local_uid: None,
            in_use: BTreeSet::new(),
            said: None,
            said_shadowed: Vec::new(),
            secrets: BTreeMap::new(),
            said_rbac: Default::default(),
        }
    }

    /// Runs until `stop` resolves.
    pub async fn run(mut self, secrets: LocalSecrets, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let mut changes = std::pin::pin!(secrets.changes());
        let mut reach = self.peers.reach_changes();
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if let Err(error) = self.round(Some(&secrets)).await {
                tracing::debug!(namespace = %self.namespace, error = %xcc_kube::bounded(&error), "ClusterDetectors: round failed; retrying");
            }
            loop {
                tokio::select! {
                    () = &mut stop => return,
                    _ = ticks.tick() => break,
                    _ = reach.recv() => break,
                    change = changes.next() => match change {
                        None => return,
                        Some(SecretChange::Listed | SecretChange::Missed) => break,
                        Some(change) => {
                            if self.watched(change.key()) {
                                break;
                            }
                        }
                    },
                }
            }
        }
    }

    /// The kubeconfig Secret at `at`: read only when the shared watch of local Secrets
    /// (metadata) shows it with a resourceVersion not read yet, so the steady tick costs no
    /// request.
    async fn read(
        &mut self,
        local: Option<&LocalSecrets>,
        at: Location,
    ) -> Result<Option<Secret>, kube::Error> {
        let plumber_namespace = self.namespace.clone();
        let (namespace, name) = at.key(&plumber_namespace);
        let listed = local.is_some_and(|l| l.listed().load(std::sync::atomic::Ordering::Acquire));
        if let Some(local) = local.filter(|_| listed) {
            let key = ObjectRef::new(name).within(namespace);
            let Some(meta) = local.store().get(&key) else {
                self.secrets.remove(&at);
                return Ok(None);
            };
            if let Some(cached) = self.secrets.get(&at)
                && cached.resource_version() == meta.resource_version()
                && cached.uid() == meta.uid()
            {
                return Ok(Some(cached.clone()));
            }
        }
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let found = match secrets.get_opt(name).await {
            Ok(secret) => secret,
            // No RBAC for plumber, or the namespace is not there: nothing to detect.
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => None,
            Err(e) => return Err(e),
        };
        match &found {
            Some(secret) => self.secrets.insert(at, secret.clone()),
            None => self.secrets.remove(&at),
        };
        Ok(found)
    }

    /// Whether a Secret change concerns one of the kubeconfig Secrets.
    fn watched(&self, key: Option<(String, String)>) -> bool {
        [Location::Original, Location::Legacy].iter().any(|at| {
            let (namespace, name) = at.key(&self.namespace);
            key.as_ref()
                .is_some_and(|(n, m)| n == namespace && m == name)
        })
    }

    /// Reads the Secrets, updates the registry and the detectors.
    pub async fn round(&mut self, local: Option<&LocalSecrets>) -> Result<(), kube::Error> {
        let original = self.read(local, Location::Original).await?;
        let legacy = self.read(local, Location::Legacy).await?;
        let any_secret = original.is_some() || legacy.is_some();
        let Some(entries) = self.entries([original, legacy]) else {
            return Ok(());
        };
        if self.local_uid.is_none() {
            let namespaces: Api<Namespace> = Api::all(self.client.clone());
            self.local_uid = namespaces
                .get_opt("kube-system")
                .await
                .ok()
                .flatten()
                .and_then(|n| n.uid());
        }
        let checks = self.check(&entries).await;
        let Assessed {
            mut targets,
            mut found,
            in_use,
            verified_elsewhere,
        } = self.assess(checks);
        self.forget_unused(&targets, in_use);
        if any_secret && self.local_uid.is_some() {
            mark_local(&mut found, &mut targets, &verified_elsewhere);
        }
        if let Some(local) = found.iter().find(|f| f.primary) {
            self.registry.set_local(local.entry.detector());
        }
        self.registry.set(targets);
        self.write(&found).await
    }

    /// Every context with the Secret it comes from; the original's location first, so a
    /// context in both is taken from there. None (logged once) when a Secret is unusable: the
    /// detectors then stay as they are, as a broken edit must not remove them all.
    fn entries(&mut self, secrets: [Option<Secret>; 2]) -> Option<Vec<(contexts::Entry, Secret)>> {
        let mut entries: Vec<(contexts::Entry, Secret)> = Vec::new();
        let mut shadowed = Vec::new();
        for secret in secrets.into_iter().flatten() {
            match contexts::entries(&secret) {
                Ok(list) => {
                    for entry in list {
                        if entries.iter().any(|(e, _)| e.context == entry.context) {
                            shadowed.push(entry.context);
                        } else {
                            entries.push((entry, secret.clone()));
                        }
                    }
                }
                Err(error) => {
                    let text = error.to_string();
                    if self.said.as_ref() != Some(&text) {
                        tracing::warn!(namespace = %self.namespace, error = %text, "plumber kubeconfig Secret unusable");
                        self.said = Some(text);
                    }
                    return None;
                }
            }
        }
        if shadowed != self.said_shadowed {
            if !shadowed.is_empty() {
                let (namespace, name) = Location::Legacy.key(&self.namespace);
                tracing::warn!(
                    contexts = ?shadowed,
                    "contexts in both plumber kubeconfig Secrets: taken from {}/{}, not from {namespace}/{name} (read for one release; move its contexts and delete it)",
                    contexts::NAMESPACE,
                    contexts::SECRET,
                );
            }
            self.said_shadowed = shadowed;
        }
        self.said = None;
        Some(entries)
    }

    /// Each context's client through the trust gate and, when it has one, its cluster's
    /// kube-system UID (remembered by client identity), all at once.
    async fn check(&self, entries: &[(contexts::Entry, Secret)]) -> Vec<Check> {
        let checks = entries.iter().map(|(entry, secret)| async move {
            let client = match contexts::for_context(secret, &entry.context) {
                Ok(one) => self
                    .peers
                    .client_for(&one)
                    .await
                    .map_err(|e| xcc_kube::bounded(&e)),
                Err(e) => Err(xcc_kube::bounded(&e)),
            };
            let uid = match &client {
                Ok(peer) => match self.uids.get(&peer.identity) {
                    Some(uid) => Some(Ok(uid.clone())),
                    None => Some(kube_system_uid(&peer.client).await),
                },
                Err(_) => None,
            };
            let key = (
                secret.namespace().unwrap_or_default(),
                contexts::client_key(&secret.name_any(), &entry.context),
            );
            Check {
                entry: entry.clone(),
                key,
                client,
                uid,
            }
        });
        futures::future::join_all(checks).await
    }

    /// The health, role and target of each checked context; remembers the UIDs found.
    fn assess(&mut self, checks: Vec<Check>) -> Assessed {
        let mut out = Assessed::default();
        for Check {
            entry,
            key,
            client,
            uid,
        } in checks
        {
            out.in_use.insert(key);
            let status = match (&client, &uid) {
                (Err(why), _) => down(why.clone()),
                (Ok(peer), uid) => match self.peers.reach(&peer.server) {
                    Reach::Answers => up(),
                    Reach::Silent { error } => down(error),
                    // Not probed yet: the UID request is the first probe.
                    Reach::Unknown => match uid {
                        Some(Ok(_)) => up(),
                        Some(Err(why)) => down(why.clone()),
                        None => down("not probed yet".into()),
                    },
                },
            };
            if let (Ok(peer), Some(Ok(uid))) = (&client, &uid) {
                self.uids.insert(peer.identity.clone(), uid.clone());
            }
            let primary = matches!((&uid, &self.local_uid), (Some(Ok(u)), Some(l)) if u == l);
            if matches!((&uid, &self.local_uid), (Some(Ok(u)), Some(l)) if u != l) {
                out.verified_elsewhere.insert(entry.detector());
            }
            out.targets.push(Target {
                detector: entry.detector(),
                context: entry.context.clone(),
                primary,
                client,
            });
            out.found.push(Found {
                entry,
                primary,
                status,
            });
        }
        out
    }

    /// Drops the UIDs and the cached clients no longer in use.
    fn forget_unused(&mut self, targets: &[Target], in_use: BTreeSet<(String, String)>) {
        let identities: BTreeSet<String> = targets
            .iter()
            .filter_map(|t| t.client.as_ref().ok().map(|p| p.identity.clone()))
            .collect();
        self.uids
            .retain(|identity, _| identities.contains(identity));
        for (namespace, gone) in self.in_use.difference(&in_use) {
            self.peers.forget(namespace, gone);
        }
        self.in_use = in_use;
    }

    /// Makes the detectors what `found` says; deletes ours that are not in it.
    async fn write(&self, found: &[Found]) -> Result<(), kube::Error> {
        let api: Api<ClusterDetector> = Api::namespaced(self.client.clone(), &self.namespace);
        let existing = match api
            .list(&ListParams::default().labels(&format!("{MANAGED_BY}={MANAGED_BY_VALUE}")))
            .await
        {
            Ok(list) => {
                self.said_rbac
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                list.items
            }
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => {
                if !found.is_empty()
                    && !self
                        .said_rbac
                        .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!(namespace = %self.namespace, "cannot list ClusterDetectors: are the plumber CRDs and RBAC (manifests/agent/plumber.yaml) installed?");
                }
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let existing: BTreeMap<String, ClusterDetector> =
            existing.into_iter().map(|d| (d.name_any(), d)).collect();
        let mut seen = BTreeSet::new();
        for one in found {
            let name = one.entry.detector();
            if !seen.insert(name.clone()) {
                // Two contexts of one cluster and user: the first one names the detector.
                continue;
            }
            let role = if one.primary { "primary" } else { "secondary" };
            let mut current = existing.get(&name).cloned();
            let spec_same = current.as_ref().is_some_and(|c| {
                c.spec.context == one.entry.context
                    && c.spec.cluster == one.entry.cluster
                    && c.spec.user == one.entry.user
                    && c.labels().get(ROLE_LABEL).map(String::as_str) == Some(role)
            });
            if !spec_same {
                let desired = json!({
                    "apiVersion": "plumber.jnytnai0613.github.io/v1",
                    "kind": "ClusterDetector",
                    "metadata": {
                        "name": name,
                        "labels": {ROLE_LABEL: role, MANAGED_BY: MANAGED_BY_VALUE},
                    },
                    "spec": {
                        "context": one.entry.context,
                        "cluster": one.entry.cluster,
                        "user": one.entry.user,
                    },
                });
                current =
                    Some(crate::sink::apply_whole(&api, &name, desired, &self.counted).await?);
            }
            if let Some(current) = &current
                && crate::sink::write_status(&api, current, &one.status, &self.counted).await?
            {
                tracing::info!(namespace = %self.namespace, detector = %name, role, status = ?one.status.clusterstatus, reason = ?one.status.reason, "ClusterDetector");
            }
        }
        for (name, detector) in &existing {
            if !seen.contains(name) {
                crate::sink::delete_exact(
                    &api,
                    name,
                    detector.uid(),
                    detector.resource_version(),
                    &self.counted,
                )
                .await?;
                tracing::info!(namespace = %self.namespace, detector = %name, "ClusterDetector removed: its context left the Secret");
            }
        }
        Ok(())
    }
}

/// One context of the Secrets, checked: its client key, its client (or why it has none) and its
/// cluster's kube-system UID (none without a client).
struct Check {
    entry: contexts::Entry,
    key: (String, String),
    client: Result<xcc_kube::PeerClient, String>,
    uid: Option<Result<String, String>>,
}

/// What the checks found: the registry's targets and the detectors, in the same order.
#[derive(Default)]
struct Assessed {
    targets: Vec<Target>,
    found: Vec<Found>,
    /// `(namespace, client key)` of the clients in use.
    in_use: BTreeSet<(String, String)>,
    /// The detectors whose cluster is shown (by its kube-system UID) not to be this one.
    verified_elsewhere: BTreeSet<String>,
}

/// Marks the cluster this agent runs in when no context is shown to reach it.
///
/// The original registers the cluster it runs in itself, as context `primary`
/// (`kubernetes.kubernetes-admin`, with the in-cluster address and no credentials the agent
/// could use); `plumberctl` (and `kubectl xcc plumber`) add only the secondaries. When no context
/// is shown (by its kube-system UID) to reach this cluster, the original's primary context is
/// this cluster unless shown to reach another one, and without one the agent registers this
/// cluster under the original's name itself.
fn mark_local(
    found: &mut Vec<Found>,
    targets: &mut [Target],
    verified_elsewhere: &BTreeSet<String>,
) {
    if found.iter().any(|f| f.primary) {
        return;
    }
    let local = local_entry();
    match found
        .iter()
        .position(|f| f.entry.detector() == local.detector())
    {
        Some(at) if !verified_elsewhere.contains(&local.detector()) => {
            found[at].primary = true;
            found[at].status = up();
            targets[at].primary = true;
        }
        Some(_) => found.push(Found {
            entry: fallback_local_entry(),
            primary: true,
            status: up(),
        }),
        None => found.push(Found {
            entry: local,
            primary: true,
            status: up(),
        }),
    }
}

/// The detector of the cluster this agent runs in when no context of the Secret reaches it:
/// the original's primary (`pkg/constants`: context `primary`, cluster `kubernetes`, user
/// `kubernetes-admin`), so that Replicator status names it as the original does.
pub fn local_entry() -> contexts::Entry {
    contexts::Entry {
        context: "primary".into(),
        cluster: "kubernetes".into(),
        user: "kubernetes-admin".into(),
    }
}

/// The detector of this cluster when a context named like the original's primary is shown to
/// reach another cluster (a kubeadm cluster's default names).
fn fallback_local_entry() -> contexts::Entry {
    contexts::Entry {
        context: "in-cluster".into(),
        cluster: "local".into(),
        user: "xcc-agent".into(),
    }
}

fn up() -> ClusterDetectorStatus {
    ClusterDetectorStatus {
        clusterstatus: Some(ClusterState::Running),
        reason: None,
    }
}

fn down(reason: String) -> ClusterDetectorStatus {
    ClusterDetectorStatus {
        clusterstatus: Some(ClusterState::Unknown),
        reason: Some(xcc_kube::bounded(&reason)),
    }
}

/// The kube-system UID of a cluster, or why it could not be read (bounded).
async fn kube_system_uid(client: &Client) -> Result<String, String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match tokio::time::timeout(UID_DEADLINE, namespaces.get("kube-system")).await {
        Ok(Ok(ns)) => Ok(ns.uid().unwrap_or_default()),
        Ok(Err(error)) => Err(xcc_kube::bounded(&error)),
        Err(_) => Err(format!("no answer within {UID_DEADLINE:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use xcc_kube::scenario::Scenario;

    const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: gone-cluster
  cluster: {server: 'https://127.0.0.1:1', certificate-authority-data: Zm9v}
users:
- name: admin
  user: {token: a}
- name: runner
  user: {exec: {command: touch, args: [/tmp/xcc-plumber-detector-test-ran]}}
contexts:
- name: dead
  context: {cluster: gone-cluster, user: admin}
- name: hostile
  context: {cluster: gone-cluster, user: runner}
";

    fn detector(name: &str) -> Value {
        json!({
            "apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "ClusterDetector",
            "metadata": {"name": name, "namespace": "plumber-system", "uid": "d", "resourceVersion": "3",
                         "labels": {MANAGED_BY: MANAGED_BY_VALUE, ROLE_LABEL: "secondary"}},
            "spec": {"context": "old", "cluster": "gone", "user": "user"},
        })
    }

    /// The API server's answer to the apply of detector `body`: the detector as applied.
    fn applied(body: &Value) -> (u16, Value) {
        let mut written = body.clone();
        written["metadata"]["namespace"] = "plumber-system".into();
        written["metadata"]["uid"] = "d".into();
        written["metadata"]["resourceVersion"] = "4".into();
        (200, written)
    }

    #[tokio::test]
    async fn every_context_gets_a_detector_with_its_reason_and_a_removed_one_goes() {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "config", "namespace": "kubeconfig", "uid": "s", "resourceVersion": "1"},
            "data": {"config": xcc_kube::wire::encode_base64(KUBECONFIG)},
        });
        let ok = json!({"kind": "Status", "apiVersion": "v1", "status": "Success"});
        let not_found = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404});
        let detectors =
            "/apis/plumber.jnytnai0613.github.io/v1/namespaces/plumber-system/clusterdetectors";
        let (client, server) = Scenario::new()
            .expect("GET", "/api/v1/namespaces/kubeconfig/secrets/config")
            .reply((200, secret))
            // xcc 0.1's location, read for one release.
            .expect("GET", "/api/v1/namespaces/plumber-system/secrets/kubeconfig")
            .reply((404, not_found))
            .expect("GET", "/api/v1/namespaces/kube-system")
            .reply((
                200,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system", "uid": "here"}}),
            ))
            .expect("GET", detectors)
            .reply((
                200,
                json!({"apiVersion": "plumber.jnytnai0613.github.io/v1", "kind": "ClusterDetectorList",
                         "metadata": {"resourceVersion": "5"}, "items": [detector("gone.user")]}),
            ))
            .expect("PATCH", format!("{detectors}/gone-cluster.admin"))
            .reply_with(applied)
            .expect("PATCH", format!("{detectors}/gone-cluster.admin/status"))
            .reply((200, detector("gone-cluster.admin")))
            .expect("PATCH", format!("{detectors}/gone-cluster.runner"))
            .reply_with(applied)
            .expect("PATCH", format!("{detectors}/gone-cluster.runner/status"))
            .reply((200, detector("gone-cluster.runner")))
            // No context reaches this cluster: it is registered as the primary anyway, under
            // the original's name for it.
            .expect("PATCH", format!("{detectors}/kubernetes.kubernetes-admin"))
            .reply_with(applied)
            .expect(
                "PATCH",
                format!("{detectors}/kubernetes.kubernetes-admin/status"),
            )
            .reply((200, detector("kubernetes.kubernetes-admin")))
            .expect("DELETE", format!("{detectors}/gone.user"))
            .reply((200, ok))
            .run();
        let mut registry = prometheus_client::registry::Registry::default();
        let registry_metrics = crate::sync_metrics::SyncMetrics::register(&mut registry);
        let shared = Registry::default();
        let mut detector = Detector::new(
            client,
            "plumber-system".into(),
            PeerClients::default(),
            shared.clone(),
            Counted {
                metrics: registry_metrics,
                reconciler: "test",
            },
        );
        detector.round(None).await.unwrap();
        let seen: Vec<(String, String)> = server
            .done()
            .await
            .into_iter()
            .map(|r| (r.line(), r.text))
            .collect();
        // The dead cluster is Unknown with why; the refused one names the field; neither is
        // the primary.
        assert!(seen[5].1.contains("\"UNKNOWN\""), "{}", seen[5].1);
        assert!(seen[7].1.contains("exec"), "{}", seen[7].1);
        assert!(seen[4].1.contains("\"secondary\""), "{}", seen[4].1);
        assert!(seen[8].1.contains("\"primary\""), "{}", seen[8].1);
        assert!(
            seen[8].1.contains("\"context\":\"primary\""),
            "{}",
            seen[8].1
        );
        assert!(seen[9].1.contains("\"RUNNING\""), "{}", seen[9].1);
        assert!(
            !std::path::Path::new("/tmp/xcc-plumber-detector-test-ran").exists(),
            "nothing was run"
        );
        assert!(shared.find("hostile").unwrap().unwrap().client.is_err());
        assert!(
            shared
                .find("gone-cluster.admin")
                .unwrap()
                .unwrap()
                .client
                .is_ok()
        );
        assert_eq!(shared.primary(), "kubernetes.kubernetes-admin");
    }
}

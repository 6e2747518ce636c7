//! After the Corefile is written: wait until every CoreDNS replica forwards the zones, by asking
//! each one directly, so that the Job completes only when pods' lookups of the zone work.
//!
//! A replica loads the new Corefile once the kubelet has refreshed the ConfigMap in its volume
//! (up to a minute with the kubelet's default sync) and its `reload` plugin has seen the change
//! (every 30 s, jittered by up to 15 s): each replica on its own clock. Every round lists the
//! ready replicas again (a rollout replaces them) and asks those that have not answered from the
//! agent yet for the SOA of each zone ([`crate::probe`]).

use std::{collections::BTreeMap, fmt, future::Future, time::Duration};

use tokio::{task::JoinSet, time::Instant};

use crate::{
    probe::{self, Answer},
    replicas::Replica,
};

/// Pause between two rounds.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How long one replica is given to answer one question.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(1);

/// What the checks are about, for the messages.
#[derive(Debug, Clone)]
pub struct Target {
    /// The zones asked for (their SOA).
    pub zones: Vec<String>,
    /// The namespace of CoreDNS (its ConfigMap, Service and Deployment).
    pub namespace: String,
    /// CoreDNS's Service, whose EndpointSlices list the replicas.
    pub service: String,
    /// CoreDNS's ConfigMap.
    pub configmap: String,
    /// CoreDNS's Deployment.
    pub deployment: String,
    /// Whether the Corefile, outside xcc's block, has the `reload` plugin.
    pub reload: bool,
}

/// How long and how often.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub timeout: Duration,
    pub interval: Duration,
    pub query_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// Replicas were found, and some never answered from the agent.
    #[error("{}", not_forwarded(.target, .waited, .total, .pending))]
    NotForwarded {
        target: Box<Target>,
        waited: Duration,
        total: usize,
        /// Each replica that did not switch, with what it answered last.
        pending: Vec<(Replica, String)>,
    },
    /// No ready replica in the Service's EndpointSlices (or they could not be read).
    #[error("{}", no_replica(.target, .waited, .cause.as_deref()))]
    NoReplica {
        target: Box<Target>,
        waited: Duration,
        /// Why the slices could not be read, the last time.
        cause: Option<String>,
    },
}

fn no_replica(target: &Target, waited: &Duration, cause: Option<&str>) -> String {
    format!(
        "no ready CoreDNS replica found in the EndpointSlices of Service {}/{} within {}{}; is \
         CoreDNS running, and is that its Service (--coredns-service, XCC_COREDNS_SERVICE)?",
        target.namespace,
        target.service,
        humantime::format_duration(*waited),
        cause.map(|c| format!(" ({c})")).unwrap_or_default()
    )
}

fn not_forwarded(
    target: &Target,
    waited: &Duration,
    total: &usize,
    pending: &[(Replica, String)],
) -> String {
    let ns = &target.namespace;
    let names: Vec<&str> = pending.iter().map(|(r, _)| r.name.as_str()).collect();
    let answers: Vec<String> = pending
        .iter()
        .map(|(r, answer)| format!("{} ({}) {answer}", r.name, r.address))
        .collect();
    let mut out = format!(
        "{} of {total} CoreDNS replicas do not forward zone {} to xcc-agent after {}: {}; ",
        pending.len(),
        target.zones.join(","),
        humantime::format_duration(*waited),
        answers.join(", ")
    );
    if target.reload {
        out.push_str(&format!(
            "check the kubelet's sync of ConfigMap {ns}/{cm} into their volume (about a minute \
             with the kubelet's default --sync-frequency), that their `reload` plugin loaded \
             the new Corefile (kubectl -n {ns} logs {first} says `Reloading` or names an \
             error), or restart the pods that did not switch (kubectl -n {ns} delete pod {all})",
            cm = target.configmap,
            first = names.first().unwrap_or(&""),
            all = names.join(" "),
        ));
    } else {
        out.push_str(&no_reload(target));
    }
    if pending
        .iter()
        .any(|(_, a)| a.starts_with("does not answer") || a.starts_with("cannot be asked"))
    {
        out.push_str(
            "; a replica that does not answer at all: can this pod reach the CoreDNS pods on \
             port 53 (a NetworkPolicy)? (Before its reload, a replica's own forward of the zone \
             to its upstream resolvers may time out too.)",
        );
    }
    out
}

/// What to say about a Corefile without `reload`.
pub fn no_reload(target: &Target) -> String {
    format!(
        "the Corefile of ConfigMap {ns}/{cm} has no `reload` plugin, so CoreDNS reads it only \
         when it starts: restart it (kubectl -n {ns} rollout restart deployment {deploy}), or \
         run the patcher with --restart-coredns (XCC_RESTART_COREDNS=true)",
        ns = target.namespace,
        cm = target.configmap,
        deploy = target.deployment,
    )
}

/// What one replica answered for each zone: the first answer that is not from the agent, or
/// `None` when every zone is.
pub type Verdict = Option<Answer>;

/// Asks every replica for every zone at once; one verdict per replica, in the given order.
pub async fn ask_all(replicas: &[Replica], zones: &[String], wait: Duration) -> Vec<Verdict> {
    let mut tasks = JoinSet::new();
    for (index, replica) in replicas.iter().enumerate() {
        for zone in zones {
            let (address, zone) = (replica.address, zone.clone());
            tasks.spawn(async move { (index, probe::ask(address, &zone, wait).await) });
        }
    }
    let mut verdicts: Vec<Verdict> = vec![None; replicas.len()];
    while let Some(joined) = tasks.join_next().await {
        // A probe does not panic; a panicked one counts as no answer.
        let (index, answer) = joined.unwrap_or((usize::MAX, Answer::Failed("aborted".into())));
        if let Some(verdict) = verdicts.get_mut(index)
            && !answer.forwards()
            && verdict.is_none()
        {
            *verdict = Some(answer);
        }
    }
    verdicts
}

/// Rounds until every ready replica (at least one) answers every zone from the agent, or the
/// timeout. `list` gives the ready replicas, or why they could not be listed. Returns the
/// replicas of the last round.
pub async fn until_forwarded<L, F>(
    mut list: L,
    target: &Target,
    pace: Pace,
) -> Result<Vec<Replica>, VerifyError>
where
    L: FnMut() -> F,
    F: Future<Output = Result<Vec<Replica>, String>>,
{
    let deadline = Instant::now() + pace.timeout;
    // What each replica that has not switched answered last; the replicas that have.
    let mut last: BTreeMap<Replica, String> = BTreeMap::new();
    let mut switched: Vec<Replica> = Vec::new();
    let mut current: Vec<Replica> = Vec::new();
    loop {
        // Why the replicas could not be listed this round.
        let mut cause = None;
        match list().await {
            Err(why) => cause = Some(why),
            Ok(replicas) => {
                let asked: Vec<Replica> = replicas
                    .iter()
                    .filter(|r| !switched.contains(r))
                    .cloned()
                    .collect();
                let verdicts = ask_all(&asked, &target.zones, pace.query_timeout).await;
                for (replica, verdict) in asked.into_iter().zip(verdicts) {
                    note(&mut last, &mut switched, replica, verdict);
                }
                current = replicas;
                if !current.is_empty() && current.iter().all(|r| switched.contains(r)) {
                    return Ok(current);
                }
            }
        }
        let now = Instant::now();
        if now >= deadline {
            let waited = pace.timeout;
            let target = Box::new(target.clone());
            if current.is_empty() {
                return Err(VerifyError::NoReplica {
                    target,
                    waited,
                    cause,
                });
            }
            let pending: Vec<(Replica, String)> = current
                .iter()
                .filter(|r| !switched.contains(r))
                .map(|r| (r.clone(), last.get(r).cloned().unwrap_or_default()))
                .collect();
            return Err(VerifyError::NotForwarded {
                target,
                waited,
                total: current.len(),
                pending,
            });
        }
        tokio::time::sleep_until((now + pace.interval).min(deadline)).await;
    }
}

/// Records a replica's verdict, logging each change once.
fn note(
    last: &mut BTreeMap<Replica, String>,
    switched: &mut Vec<Replica>,
    replica: Replica,
    verdict: Verdict,
) {
    match verdict {
        None => {
            tracing::info!(
                replica = %replica.name,
                address = %replica.address,
                "CoreDNS replica forwards the zone to xcc-agent"
            );
            last.remove(&replica);
            switched.push(replica);
        }
        Some(answer) => {
            let answer = answer.to_string();
            if last.get(&replica) != Some(&answer) {
                tracing::info!(
                    replica = %replica.name,
                    address = %replica.address,
                    %answer,
                    "CoreDNS replica does not forward the zone yet"
                );
                last.insert(replica, answer);
            }
        }
    }
}

impl fmt::Display for Replica {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::tests::coredns;
    use std::{
        net::SocketAddr,
        sync::{
            Arc,
            atomic::{AtomicBool, Ordering},
        },
    };
    use tokio::net::UdpSocket;

    async fn replica(name: &str, switch: Arc<AtomicBool>) -> Replica {
        Replica {
            name: name.to_string(),
            address: coredns(switch).await,
        }
    }

    /// An address where nothing answers.
    async fn silent() -> (UdpSocket, SocketAddr) {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let address = socket.local_addr().unwrap();
        (socket, address)
    }

    fn target(reload: bool) -> Target {
        Target {
            zones: vec!["xcc.test".into(), "other.test".into()],
            namespace: "kube-system".into(),
            service: "kube-dns".into(),
            configmap: "coredns".into(),
            deployment: "coredns".into(),
            reload,
        }
    }

    fn pace(timeout: Duration) -> Pace {
        Pace {
            timeout,
            interval: Duration::from_millis(20),
            query_timeout: Duration::from_millis(200),
        }
    }

    #[tokio::test]
    async fn completes_when_each_replica_has_switched_on_its_own_clock() {
        let (a_on, b_on) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let a = replica("coredns-a", a_on.clone()).await;
        let b = replica("coredns-b", b_on.clone()).await;
        let replicas = vec![a, b];
        let mut rounds = 0;
        let done = until_forwarded(
            || {
                rounds += 1;
                // a reloads after the 3rd round, b after the 6th; until then the patcher waits.
                a_on.store(rounds > 3, Ordering::SeqCst);
                b_on.store(rounds > 6, Ordering::SeqCst);
                let replicas = replicas.clone();
                async move { Ok(replicas) }
            },
            &target(true),
            pace(Duration::from_secs(30)),
        )
        .await
        .unwrap();
        assert_eq!(done, replicas);
        assert_eq!(
            rounds, 7,
            "done in the round in which the last one switched"
        );
    }

    #[tokio::test]
    async fn times_out_naming_each_replica_that_did_not_switch_and_what_to_check() {
        let a = replica("coredns-a", Arc::new(AtomicBool::new(true))).await;
        let b = replica("coredns-b", Arc::new(AtomicBool::new(false))).await;
        let (_quiet, address) = silent().await;
        let c = Replica {
            name: "coredns-c".into(),
            address,
        };
        let replicas = vec![a, b.clone(), c.clone()];
        let err = until_forwarded(
            || {
                let replicas = replicas.clone();
                async move { Ok(replicas) }
            },
            &target(true),
            pace(Duration::from_millis(500)),
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(
                "2 of 3 CoreDNS replicas do not forward zone xcc.test,other.test to xcc-agent after "
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!("coredns-b ({}) answers SERVFAIL", b.address)),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "coredns-c ({}) does not answer within 200ms",
                c.address
            )),
            "{text}"
        );
        assert!(!text.contains("coredns-a ("), "{text}");
        for check in [
            "the kubelet's sync of ConfigMap kube-system/coredns",
            "`reload` plugin",
            "kubectl -n kube-system logs coredns-b",
            "kubectl -n kube-system delete pod coredns-b coredns-c",
            "can this pod reach the CoreDNS pods on port 53",
        ] {
            assert!(text.contains(check), "{check:?} not in {text}");
        }
    }

    #[tokio::test]
    async fn without_reload_the_timeout_says_to_restart() {
        let b = replica("coredns-b", Arc::new(AtomicBool::new(false))).await;
        let err = until_forwarded(
            || {
                let replicas = vec![b.clone()];
                async move { Ok(replicas) }
            },
            &target(false),
            pace(Duration::from_millis(100)),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("has no `reload` plugin"), "{err}");
        assert!(
            err.contains("kubectl -n kube-system rollout restart deployment coredns"),
            "{err}"
        );
        assert!(err.contains("--restart-coredns"), "{err}");
    }

    #[tokio::test]
    async fn no_replica_is_an_error_that_names_the_service_and_the_last_cause() {
        let mut calls = 0;
        let err = until_forwarded(
            || {
                calls += 1;
                let result = if calls == 1 {
                    Ok(Vec::new())
                } else {
                    Err("endpointslices.discovery.k8s.io is forbidden".to_string())
                };
                async move { result }
            },
            &target(true),
            pace(Duration::from_millis(100)),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(
                "no ready CoreDNS replica found in the EndpointSlices of Service \
                 kube-system/kube-dns within "
            ),
            "{err}"
        );
        assert!(
            err.contains("(endpointslices.discovery.k8s.io is forbidden)"),
            "{err}"
        );
        assert!(calls > 1);
    }

    #[tokio::test]
    async fn a_replaced_replica_is_asked_and_a_gone_one_is_not_waited_for() {
        // An old replica that never reloads is replaced by a new one that answers (a rollout).
        let old = replica("coredns-old", Arc::new(AtomicBool::new(false))).await;
        let new = replica("coredns-new", Arc::new(AtomicBool::new(true))).await;
        let mut rounds = 0;
        let done = until_forwarded(
            || {
                rounds += 1;
                let replicas = if rounds < 3 {
                    vec![old.clone()]
                } else {
                    vec![new.clone()]
                };
                async move { Ok(replicas) }
            },
            &target(false),
            pace(Duration::from_secs(30)),
        )
        .await
        .unwrap();
        assert_eq!(done, [new]);
    }
}

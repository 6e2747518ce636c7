//! Gateway health and the stale-record policy.
//!
//! Per workload cluster the controller remembers since when it cannot be reached, when it last
//! answered, and how many health checks in a row it has passed ([`Tracker`]). Two sources feed
//! it: every reconcile (the gateway Service's watch failed, or the kubeconfig is unusable) and
//! the peer prober, which asks every cluster's API server for its version once per
//! `--probe-interval`. What a GatewayDNS does with that is [`decide`]d without I/O:
//!
//! ```text
//!   reachable ──(unreachable)──► Unreachable since T ──(T + withdrawAfter)──► withdrawn
//!       ▲                              │ (answers before that)                  │ (answers)
//!       └──────────────────────────────┘                                        ▼
//!       └───────────────(readmitAfter health checks in a row)─────────── damped: still withdrawn
//! ```
//!
//! A withdrawn cluster's slices are deleted everywhere (its per-cluster and global names stop
//! answering); nothing is withdrawn while the controller cannot reach the management cluster,
//! since it cannot reconcile at all then, and the agents keep serving what they have.

use std::time::{Duration, SystemTime};

use dashmap::DashMap;

/// Default of `spec.staleRecords.withdrawAfter`.
pub const DEFAULT_WITHDRAW_AFTER: Duration = Duration::from_secs(5 * 60);
/// Default of `spec.staleRecords.readmitAfter`.
pub const DEFAULT_READMIT_AFTER: u32 = 3;
/// Largest `spec.staleRecords.readmitAfter` (the CRD's maximum).
pub const MAX_READMIT_AFTER: u32 = 100;

/// What the controller knows of one cluster's reachability.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Since when it cannot be reached; `None` while it can.
    pub unreachable_since: Option<SystemTime>,
    /// When its API server last answered.
    pub last_seen: Option<SystemTime>,
    /// Health checks passed in a row since it was last unreachable.
    pub streak: u32,
    /// It was unreachable at some point (so its streak may be counted towards re-admission).
    pub was_down: bool,
}

/// Reachability of every workload cluster, keyed by (namespace, cluster): the prober and the
/// reconciles update it at once.
#[derive(Default)]
pub struct Tracker {
    clusters: DashMap<(String, String), Seen>,
}

impl Tracker {
    /// `f` on the cluster's entry, under its guard (`f` must not touch the tracker).
    fn with<T>(&self, namespace: &str, cluster: &str, f: impl FnOnce(&mut Seen) -> T) -> T {
        f(&mut self
            .clusters
            .entry((namespace.to_string(), cluster.to_string()))
            .or_default())
    }

    /// The cluster could not be reached at `now`: the streak starts again.
    pub fn unreachable(&self, namespace: &str, cluster: &str, now: SystemTime) -> Seen {
        self.with(namespace, cluster, |seen| {
            seen.unreachable_since.get_or_insert(now);
            seen.streak = 0;
            seen.was_down = true;
            seen.clone()
        })
    }

    /// A reconcile found the cluster reachable (its watches list and answer).
    pub fn reachable(&self, namespace: &str, cluster: &str, now: SystemTime) -> Seen {
        self.with(namespace, cluster, |seen| {
            seen.unreachable_since = None;
            seen.last_seen = Some(now);
            seen.clone()
        })
    }

    /// One health check by the prober: `answered` or not. Returns what changed the decision
    /// for anyone: the cluster turned unreachable or counted one more check.
    pub fn probed(&self, namespace: &str, cluster: &str, answered: bool, now: SystemTime) -> Seen {
        if !answered {
            return self.unreachable(namespace, cluster, now);
        }
        self.with(namespace, cluster, |seen| {
            seen.last_seen = Some(now);
            seen.streak = seen.streak.saturating_add(1);
            seen.clone()
        })
    }

    /// What is known of the cluster.
    pub fn get(&self, namespace: &str, cluster: &str) -> Seen {
        self.with(namespace, cluster, |seen| seen.clone())
    }
}

/// A GatewayDNS's stale-record policy, read from `spec.staleRecords`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// `None`: never withdraw (the original's behaviour).
    pub withdraw_after: Option<Duration>,
    pub readmit_after: u32,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            withdraw_after: Some(DEFAULT_WITHDRAW_AFTER),
            readmit_after: DEFAULT_READMIT_AFTER,
        }
    }
}

/// What the policy says about one cluster now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Its records are to be withdrawn (or stay withdrawn).
    pub withdrawn: bool,
    /// Look again after this long: the moment the cluster's time runs out.
    pub recheck_in: Option<Duration>,
}

/// Whether a cluster's records are withdrawn, given what is known of it (`seen`), whether they
/// were withdrawn before (`was_withdrawn`, from the status), the policy and the time.
pub fn decide(seen: &Seen, was_withdrawn: bool, policy: Policy, now: SystemTime) -> Decision {
    match (seen.unreachable_since, policy.withdraw_after) {
        (Some(_), None) => Decision {
            withdrawn: false,
            recheck_in: None,
        },
        (Some(since), Some(after)) => {
            let away = now.duration_since(since).unwrap_or_default();
            if away >= after {
                Decision {
                    withdrawn: true,
                    recheck_in: None,
                }
            } else {
                Decision {
                    withdrawn: was_withdrawn,
                    recheck_in: Some(after - away),
                }
            }
        }
        (None, _) => Decision {
            withdrawn: was_withdrawn
                && policy.withdraw_after.is_some()
                && seen.streak < policy.readmit_after,
            recheck_in: None,
        },
    }
}

/// Parses `withdrawAfter`: `never` and `0` mean never, otherwise a duration (`90s`, `1h30m`).
pub fn parse_withdraw_after(text: &str) -> Result<Option<Duration>, String> {
    match text.trim() {
        "never" | "0" => Ok(None),
        other => match humantime::parse_duration(other) {
            Ok(d) if d.is_zero() => Ok(None),
            Ok(d) => Ok(Some(d)),
            Err(e) => Err(format!(
                "{other:?} is not a duration such as 30s, 5m or 1h, nor 0 or never: {e}"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn policy(secs: u64, readmit: u32) -> Policy {
        Policy {
            withdraw_after: Some(Duration::from_secs(secs)),
            readmit_after: readmit,
        }
    }

    #[test]
    fn an_unreachable_cluster_is_withdrawn_when_its_time_is_up_and_comes_back_after_the_damping_count()
     {
        let tracker = Tracker::default();
        let p = policy(10, 3);
        let seen = tracker.unreachable("ns", "a", at(0));
        assert_eq!(
            decide(&seen, false, p, at(4)),
            Decision {
                withdrawn: false,
                recheck_in: Some(Duration::from_secs(6))
            }
        );
        // Still unreachable later: the first time counts.
        let seen = tracker.unreachable("ns", "a", at(9));
        assert_eq!(seen.unreachable_since, Some(at(0)));
        assert!(decide(&seen, false, p, at(10)).withdrawn);
        // Back: reachable, but withdrawn until three checks in a row passed.
        let seen = tracker.reachable("ns", "a", at(20));
        assert!(decide(&seen, true, p, at(20)).withdrawn);
        tracker.probed("ns", "a", true, at(21));
        let seen = tracker.probed("ns", "a", true, at(22));
        assert!(decide(&seen, true, p, at(22)).withdrawn, "two of three");
        // A failed check starts the count again.
        tracker.probed("ns", "a", false, at(23));
        let seen = tracker.reachable("ns", "a", at(24));
        assert_eq!(seen.streak, 0);
        for t in 25..28 {
            tracker.probed("ns", "a", true, at(t));
        }
        let seen = tracker.get("ns", "a");
        assert!(!decide(&seen, true, p, at(28)).withdrawn, "{seen:?}");
    }

    #[test]
    fn never_and_zero_keep_the_records_as_the_original_does() {
        for text in ["never", "0", "0s"] {
            assert_eq!(parse_withdraw_after(text), Ok(None), "{text}");
        }
        assert_eq!(
            parse_withdraw_after("1m30s"),
            Ok(Some(Duration::from_secs(90)))
        );
        assert!(parse_withdraw_after("soon").is_err());
        let keep = Policy {
            withdraw_after: None,
            readmit_after: 3,
        };
        let tracker = Tracker::default();
        let seen = tracker.unreachable("ns", "a", at(0));
        assert!(!decide(&seen, false, keep, at(1_000_000)).withdrawn);
        // A cluster withdrawn under an earlier policy comes back at once under `never`.
        let seen = tracker.reachable("ns", "a", at(1));
        assert!(!decide(&seen, true, keep, at(1)).withdrawn);
    }

    #[test]
    fn a_cluster_that_never_left_is_never_damped() {
        let tracker = Tracker::default();
        let seen = tracker.reachable("ns", "a", at(0));
        assert!(!decide(&seen, false, Policy::default(), at(0)).withdrawn);
        assert_eq!(
            Policy::default().withdraw_after,
            Some(DEFAULT_WITHDRAW_AFTER)
        );
    }
}

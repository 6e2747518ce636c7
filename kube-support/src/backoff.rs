//! The one retry schedule of calls to other clusters: exponential with jitter, so that many
//! watches failing together (a peer restarting, a token expiring) do not retry in step, and a
//! peer that keeps failing (401 to everything, say) is asked about twice a minute, not four times
//! a second. Built on `backon`, the schedule kube-runtime itself uses.

use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Exponential backoff with jitter, back to the start after a success (kube-runtime calls
/// `reset` when a watch delivers an event). Two schedules, both starting at 250 ms because most
/// failures are a server restarting:
/// - [`Backoff::peer`] for calls to other clusters: doubling to 15 s, each delay stretched by a
///   random 0–100 % (so 15–30 s once at the top). A peer that still fails after a minute is
///   misconfigured or down, and every request to it may carry a credential.
/// - [`Backoff::local`] for this process's own cluster: doubling to 1 s, jittered the same way,
///   so never more than 2 s. Its API server is the one this process serves; after it restarts
///   (RBAC caches cold, watches expired) the process sees a change made once it answers within
///   2 s, not half a minute.
///
/// kube-runtime's watcher emits `Event::Init` before every attempt to list, also when the list
/// then fails, and its stream adapter resets the backoff on any such event: a schedule reset at
/// once would retry a peer answering 401 three times a second forever. So for peers a reset only
/// takes effect once no delay was handed out for [`Backoff::quiet`], longer than any one delay:
/// after a real recovery, not between two failures. The local schedule resets the same way, but
/// its top is low: right after its API server restarts, watches fail with `410 Expired` several
/// times in a row while its caches warm up, and each retry still comes within seconds; a kind
/// this process may not list (its optional RBAC not applied) is asked every 1–2 s, not three
/// times a second.
#[derive(Debug)]
pub struct Backoff {
    inner: ExponentialBackoff,
    max: Duration,
    quiet: Duration,
    last_delay: Option<Instant>,
}

impl Backoff {
    /// The first delay before jitter.
    pub const MIN: Duration = Duration::from_millis(250);
    /// Top of [`Backoff::peer`] before jitter.
    pub const PEER_MAX: Duration = Duration::from_secs(15);
    /// Top of [`Backoff::local`] before jitter.
    pub const LOCAL_MAX: Duration = Duration::from_secs(1);

    /// The schedule of calls and watches to another cluster.
    pub fn peer() -> Backoff {
        Self::up_to(Self::PEER_MAX, Self::PEER_MAX * 4)
    }

    /// The schedule of watches of this process's own cluster.
    pub fn local() -> Backoff {
        Self::up_to(Self::LOCAL_MAX, Self::LOCAL_MAX * 4)
    }

    fn up_to(max: Duration, quiet: Duration) -> Backoff {
        let inner = ExponentialBuilder::new()
            .with_min_delay(Self::MIN)
            .with_max_delay(max)
            .with_jitter()
            .without_max_times()
            .build();
        Backoff {
            inner,
            max,
            quiet,
            last_delay: None,
        }
    }

    /// How long without a failure before a reset takes effect: four times the top delay (which
    /// jitter may double).
    pub fn quiet(&self) -> Duration {
        self.quiet
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.last_delay = Some(Instant::now());
        self.inner.next()
    }
}

impl kube::runtime::utils::Backoff for Backoff {
    fn reset(&mut self) {
        if self
            .last_delay
            .is_none_or(|at| at.elapsed() >= self.quiet())
        {
            *self = Self::up_to(self.max, self.quiet);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_to_the_cap_with_jitter_and_reset() {
        use kube::runtime::utils::Backoff as _;
        let mut backoff = Backoff::peer();
        let delays: Vec<Duration> = backoff.by_ref().take(12).collect();
        for (i, delay) in delays.iter().enumerate() {
            let base = Backoff::MIN
                .saturating_mul(1u32 << i.min(10))
                .min(Backoff::PEER_MAX);
            assert!(
                *delay >= base && *delay <= base * 2,
                "{i}: {delay:?} vs {base:?}"
            );
        }
        // Jittered: twelve delays are not all exactly the schedule.
        assert!(delays.iter().enumerate().any(|(i, d)| {
            *d != Backoff::MIN
                .saturating_mul(1u32 << i.min(10))
                .min(Backoff::PEER_MAX)
        }));
        // A reset between two failures (the watcher's Init before a list that fails again)
        // does not start the schedule over.
        backoff.reset();
        assert!(backoff.next().unwrap() >= Backoff::PEER_MAX);
        // After a quiet period it does.
        backoff.last_delay = Some(Instant::now() - backoff.quiet());
        backoff.reset();
        assert!(backoff.next().unwrap() < Backoff::MIN * 2);
        let mut local = Backoff::local();
        local.by_ref().take(5).for_each(drop);
        local.reset();
        assert!(
            local.next().unwrap() >= Backoff::LOCAL_MAX,
            "a local reset between two failures does not start over"
        );
        local.last_delay = Some(Instant::now() - local.quiet());
        local.reset();
        assert!(local.next().unwrap() < Backoff::MIN * 2);
        let local: Vec<Duration> = Backoff::local().take(12).collect();
        assert!(
            local.iter().all(|d| *d <= Backoff::LOCAL_MAX * 2),
            "{local:?}"
        );
        assert!(local[11] >= Backoff::LOCAL_MAX);
    }

    #[test]
    fn a_peer_failing_for_a_minute_is_asked_at_most_a_few_times_in_the_next() {
        // Worst case (no jitter): the attempts that fall in the second minute.
        let mut at = Duration::ZERO;
        let mut in_second_minute = 0;
        for delay in Backoff::peer() {
            at += delay;
            if at > Duration::from_secs(120) {
                break;
            }
            if at > Duration::from_secs(60) {
                in_second_minute += 1;
            }
        }
        assert!(in_second_minute <= 4, "{in_second_minute}");
    }
}

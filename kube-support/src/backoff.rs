//! The one retry schedule of calls to other clusters: exponential with jitter, so that many
//! watches failing together (a peer restarting, a token expiring) do not retry in step, and a
//! peer that keeps failing (401 to everything, say) is asked about twice a minute, not four times
//! a second. Built on `backon`, the schedule kube-runtime itself uses.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Exponential backoff with jitter: 250 ms doubling to 15 s, each delay stretched by a random
/// 0–100 % (so 15–30 s once at the top), back to the start after a success (kube-runtime calls
/// `reset` when a watch delivers an event). Fast at first, because most failures are a peer
/// restarting; then slow, because a peer that still fails after a minute is misconfigured or
/// down, and every request to it may carry a credential.
#[derive(Debug)]
pub struct Backoff {
    inner: ExponentialBackoff,
}

impl Backoff {
    pub const MIN: Duration = Duration::from_millis(250);
    pub const MAX: Duration = Duration::from_secs(15);

    fn builder() -> ExponentialBuilder {
        ExponentialBuilder::new()
            .with_min_delay(Self::MIN)
            .with_max_delay(Self::MAX)
            .with_jitter()
            .without_max_times()
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            inner: Self::builder().build(),
        }
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.inner.next()
    }
}

impl kube::runtime::utils::Backoff for Backoff {
    fn reset(&mut self) {
        *self = Backoff::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_to_the_cap_with_jitter_and_reset() {
        use kube::runtime::utils::Backoff as _;
        let mut backoff = Backoff::default();
        let delays: Vec<Duration> = backoff.by_ref().take(12).collect();
        for (i, delay) in delays.iter().enumerate() {
            let base = Backoff::MIN
                .saturating_mul(1u32 << i.min(10))
                .min(Backoff::MAX);
            assert!(
                *delay >= base && *delay <= base * 2,
                "{i}: {delay:?} vs {base:?}"
            );
        }
        // Jittered: twelve delays are not all exactly the schedule.
        assert!(delays.iter().enumerate().any(|(i, d)| {
            *d != Backoff::MIN
                .saturating_mul(1u32 << i.min(10))
                .min(Backoff::MAX)
        }));
        backoff.reset();
        assert!(backoff.next().unwrap() < Backoff::MIN * 2);
    }

    #[test]
    fn a_peer_failing_for_a_minute_is_asked_at_most_a_few_times_in_the_next() {
        // Worst case (no jitter): the attempts that fall in the second minute.
        let mut at = Duration::ZERO;
        let mut in_second_minute = 0;
        for delay in Backoff::default() {
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

//! The churn guard: an object that resource sync writes again and again (two sources taking turns,
//! a copy fought over with another writer) is what a group that does not settle looks like from
//! outside. Each write of each key is remembered for a minute; a key written more than
//! [`LIMIT`] times within a minute is reported once per minute it keeps doing so: a counter per
//! kind (bounded: one series per kind a rule copies), a warning in the log and a Warning Event on
//! the object, so operators see it without reading debug logs.

use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, Instant},
};

use super::decide::Key;

/// Writes of one object within [`WINDOW`] beyond which it is reported.
pub const LIMIT: usize = 5;
/// How far back writes are counted.
pub const WINDOW: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct ChurnGuard {
    /// Each key's writes within the window, oldest first, and when it was last reported.
    writes: HashMap<Key, (VecDeque<Instant>, Option<Instant>)>,
    /// Writes recorded since the last sweep of keys with no recent write.
    since_sweep: usize,
}

impl ChurnGuard {
    /// Records a write of `key` at `now`; returns the writes within the window when the key is
    /// to be reported now (over [`LIMIT`], and not reported within the last window).
    pub fn record(&mut self, key: &Key, now: Instant) -> Option<usize> {
        self.since_sweep += 1;
        if self.since_sweep >= 1024 {
            self.since_sweep = 0;
            self.writes.retain(|_, (times, _)| {
                times
                    .back()
                    .is_some_and(|last| now.saturating_duration_since(*last) < WINDOW)
            });
        }
        let (times, reported) = self.writes.entry(key.clone()).or_default();
        times.push_back(now);
        while times
            .front()
            .is_some_and(|first| now.saturating_duration_since(*first) >= WINDOW)
        {
            times.pop_front();
        }
        let due = reported.is_none_or(|at| now.saturating_duration_since(at) >= WINDOW);
        (times.len() > LIMIT && due).then(|| {
            *reported = Some(now);
            times.len()
        })
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.writes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(name: &str) -> Key {
        Key::of(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"namespace": "cluster-registry", "name": name}}))
        .unwrap()
    }

    #[test]
    fn an_object_written_more_than_five_times_a_minute_is_reported_once_a_minute() {
        let mut guard = ChurnGuard::default();
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        // Five writes a minute is within bounds, however long it goes on.
        for minute in 0..3 {
            for i in 0..5 {
                assert_eq!(guard.record(&key("calm"), at(minute * 60 + i * 12)), None);
            }
        }
        // The sixth within a minute is reported, the next ones of that minute are not.
        for i in 0..5 {
            assert_eq!(guard.record(&key("a"), at(i)), None);
        }
        assert_eq!(guard.record(&key("a"), at(5)), Some(6));
        assert_eq!(guard.record(&key("a"), at(6)), None);
        assert_eq!(guard.record(&key("a"), at(59)), None);
        // Still churning a minute later: reported again.
        for s in 60..66 {
            let reported = guard.record(&key("a"), at(s));
            assert_eq!(reported.is_some(), s == 65, "{s}");
        }
        // Other keys are counted on their own.
        assert_eq!(guard.record(&key("b"), at(66)), None);
    }

    #[test]
    fn keys_with_no_recent_write_are_forgotten() {
        let mut guard = ChurnGuard::default();
        let start = Instant::now();
        for i in 0..1000 {
            guard.record(&key(&format!("k{i}")), start);
        }
        assert_eq!(guard.tracked(), 1000);
        let later = start + WINDOW;
        for _ in 0..30 {
            guard.record(&key("busy"), later);
        }
        assert_eq!(guard.tracked(), 1);
    }
}

//! Warnings that a flood cannot turn into a flood of log lines: each cause logs at most once per
//! interval, with the number of times it happened since the last line.

use std::{
    net::SocketAddr,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crate::{NoObserver, QueryObserver};

/// How often one cause may log.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Why a message was not decoded (or a socket call failed), with a stable label for logs and
/// metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// Shorter than a DNS header.
    Short,
    /// A response sent to us.
    Response,
    /// Longer than any query we answer.
    TooLong,
    /// A query without exactly one question.
    QuestionCount,
    /// A query with answer or authority records, or too many additional ones.
    RecordCounts,
    /// A section runs past the end of the message.
    Truncated,
    /// A name with a bad label, a forward pointer or over 255 bytes.
    Name,
    /// A malformed EDNS OPT record or option.
    Opt,
    /// An opcode other than QUERY, too big to read (answered NOTIMP; not logged).
    NotImplemented,
    /// Passed the walk, but hickory could not decode it (a bad RDATA, say).
    Undecodable,
    /// A TCP connection sent a length prefix beyond any query, or stalled mid-message.
    TcpFraming,
}

impl Cause {
    /// Every cause, in a stable order (for metrics that list each one from the start).
    pub const ALL: [Cause; 11] = [
        Cause::Short,
        Cause::Response,
        Cause::TooLong,
        Cause::QuestionCount,
        Cause::RecordCounts,
        Cause::Truncated,
        Cause::Name,
        Cause::Opt,
        Cause::NotImplemented,
        Cause::Undecodable,
        Cause::TcpFraming,
    ];

    /// Short, stable label.
    pub fn label(self) -> &'static str {
        match self {
            Cause::Short => "short",
            Cause::Response => "response",
            Cause::TooLong => "too_long",
            Cause::QuestionCount => "question_count",
            Cause::RecordCounts => "record_counts",
            Cause::Truncated => "truncated",
            Cause::Name => "bad_name",
            Cause::Opt => "bad_opt",
            Cause::NotImplemented => "not_implemented",
            Cause::Undecodable => "undecodable",
            Cause::TcpFraming => "tcp_framing",
        }
    }

    fn index(self) -> usize {
        Cause::ALL.iter().position(|c| *c == self).unwrap_or(0)
    }
}

/// One rate limit: [`Every::hit`] says when to log and how many hits the line stands for.
#[derive(Debug, Default)]
pub struct Every {
    /// Milliseconds since [`base`] before which no line is written (0: log the next hit).
    next_at: AtomicU64,
    /// Hits since the last line.
    count: AtomicU64,
}

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

impl Every {
    /// Counts one hit; `Some(n)` when this hit should be logged, standing for `n` hits.
    pub fn hit(&self, interval: Duration) -> Option<u64> {
        self.count.fetch_add(1, Ordering::Relaxed);
        let now = base().elapsed().as_millis() as u64;
        let next = self.next_at.load(Ordering::Relaxed);
        if now < next {
            return None;
        }
        let until = now + interval.as_millis() as u64;
        // One thread wins the right to log this interval; the others just counted.
        if self
            .next_at
            .compare_exchange(next, until, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        // The swap takes this hit and any other thread's made since the last line.
        Some(self.count.swap(0, Ordering::Relaxed).max(1))
    }
}

/// The per-cause limits for malformed messages, and the observer that counts every one of them.
pub struct MalformedLog {
    causes: [Every; Cause::ALL.len()],
    observer: Arc<dyn QueryObserver>,
}

impl std::fmt::Debug for MalformedLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MalformedLog")
            .field("causes", &self.causes)
            .finish_non_exhaustive()
    }
}

impl Default for MalformedLog {
    fn default() -> Self {
        MalformedLog::new(Arc::new(NoObserver))
    }
}

impl MalformedLog {
    /// A log that also tells `observer` of every malformed message (the log lines are rate
    /// limited, the counts are not).
    pub fn new(observer: Arc<dyn QueryObserver>) -> Self {
        MalformedLog {
            causes: Default::default(),
            observer,
        }
    }

    /// Notes one malformed message from `peer`: counts it, and logs a warning at most once per
    /// interval per cause. NOTIMP answers are not malformed input: neither counted nor logged.
    pub fn note(&self, cause: Cause, peer: SocketAddr) {
        if cause == Cause::NotImplemented {
            return;
        }
        self.observer.malformed(cause);
        if let Some(count) = self.causes[cause.index()].hit(LOG_INTERVAL) {
            tracing::warn!(
                cause = cause.label(),
                count,
                last_peer = %peer,
                interval_s = LOG_INTERVAL.as_secs(),
                "malformed DNS messages (at most one line per cause and interval)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_the_first_hit_then_counts_until_the_interval_passes() {
        let every = Every::default();
        assert_eq!(every.hit(Duration::from_secs(3600)), Some(1));
        for _ in 0..5 {
            assert_eq!(every.hit(Duration::from_secs(3600)), None);
        }
        // A zero interval logs again at once, carrying the hits it stood for.
        let every = Every::default();
        assert_eq!(every.hit(Duration::ZERO), Some(1));
        assert_eq!(every.hit(Duration::ZERO), Some(1));
    }

    #[test]
    fn suppressed_hits_are_reported_with_the_next_line() {
        let every = Every::default();
        assert_eq!(every.hit(Duration::from_millis(20)), Some(1));
        assert_eq!(every.hit(Duration::from_millis(20)), None);
        assert_eq!(every.hit(Duration::from_millis(20)), None);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(every.hit(Duration::from_millis(20)), Some(3));
    }

    #[test]
    fn every_cause_has_its_own_slot() {
        for (i, cause) in Cause::ALL.iter().enumerate() {
            assert_eq!(cause.index(), i);
        }
    }
}

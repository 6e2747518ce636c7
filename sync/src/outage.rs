//! The outage reporter: what every retry loop of xcc says about a source it cannot reach (a
//! watch, a read retried until it works, the Lease), so that an outage reads as two lines
//! however long it lasts and however often the loop retries meanwhile.
//!
//! ```text
//!   works ──(fails)──► failing: DEBUG per retry ──(lasted `warn_after`)──► one WARN: what, the
//!     ▲                     │ (works before that: DEBUG only)                server, since when,
//!     │                     ▼                                                 the cause
//!     └──────────── works again: one INFO "recovered" (what, the server, how long), if it warned
//! ```
//!
//! - **One WARN per outage**, in our words around the cause (its `Display`, bounded, never a
//!   `Debug` dump), with the server and since when; every retry meanwhile is at DEBUG.
//! - **One INFO when it ends**, saying "recovered", how long it lasted and since when; an outage
//!   that never warned ends at DEBUG.
//! - **Flapping** (a list that works while its watch keeps failing): a failure within `quiet` of
//!   the last success belongs to the same outage, which warned already.
//!
//! A standing condition (a setting missing, a feature with nothing to do) is not an outage:
//! [`Standing`] says it once and again only when it changes.

use std::{
    fmt::Display,
    sync::OnceLock,
    time::{Duration, SystemTime},
};

use tokio::time::Instant;

/// How long a watch may fail before its outage is said at WARN: a single failure (an API server
/// restarting, a new CRD's storage still initializing, a watch expired) heals within a retry or
/// two and stays at DEBUG.
pub const WATCH_WARN_AFTER: Duration = Duration::from_secs(10);

/// The URL of the process's own API server, for the log lines of its sources (set once by the
/// binary at start; `the API server` until then).
static LOCAL_SERVER: OnceLock<String> = OnceLock::new();

/// Names the process's own API server (its URL) in the outage lines of its local sources.
pub fn set_local_server(url: &str) {
    let _ = LOCAL_SERVER.set(url.to_string());
}

/// The process's own API server, as its outage lines name it.
pub fn local_server() -> String {
    LOCAL_SERVER
        .get()
        .cloned()
        .unwrap_or_else(|| "the API server".into())
}

/// What one source says about its outages (see the module).
#[derive(Debug)]
pub struct Outage {
    what: String,
    server: String,
    warn_after: Duration,
    quiet: Duration,
    down: Option<Down>,
}

/// Outages that warned and whose reporter was dropped before they ended (a watch stopped with
/// its reconciler when the Lease was lost), by source and server: the next reporter of the same
/// source takes the outage over, so that it is not warned of twice and its end is said.
static PARKED: std::sync::Mutex<Vec<(String, String, Down)>> = std::sync::Mutex::new(Vec::new());

#[derive(Debug)]
struct Down {
    since: Instant,
    began: SystemTime,
    warned: bool,
    /// When it last worked since the outage began (flapping), and whether "recovered" was said.
    worked: Option<Instant>,
    told: bool,
}

impl Outage {
    /// The reporter of `what` (`"the EndpointSlice watch"`, `"the cluster ID read"`) on `server`
    /// (a URL, or a cluster's name): warns at the first failure, and an outage ends at the
    /// first success.
    pub fn new(what: impl Into<String>, server: impl Into<String>) -> Outage {
        let (what, server) = (what.into(), server.into());
        let down = {
            let mut parked = PARKED.lock().unwrap_or_else(|e| e.into_inner());
            parked
                .iter()
                .position(|(w, s, _)| *w == what && *s == server)
                .map(|at| parked.swap_remove(at).2)
        };
        Outage {
            what,
            server,
            warn_after: Duration::ZERO,
            quiet: Duration::ZERO,
            down,
        }
    }

    /// Warns only once an outage has lasted `grace` (a restarting API server, an expired watch
    /// heal within a retry or two and stay at DEBUG).
    #[must_use]
    pub fn warn_after(mut self, grace: Duration) -> Outage {
        self.warn_after = grace;
        self
    }

    /// A failure within `quiet` of a success belongs to the outage before it.
    #[must_use]
    pub fn quiet(mut self, quiet: Duration) -> Outage {
        self.quiet = quiet;
        self
    }

    /// Whether the source is failing now.
    pub fn is_down(&self) -> bool {
        self.down.as_ref().is_some_and(|d| d.worked.is_none())
    }

    /// Since when it fails, while it does.
    pub fn since(&self) -> Option<SystemTime> {
        self.down
            .as_ref()
            .filter(|d| d.worked.is_none())
            .map(|d| d.began)
    }

    /// One attempt failed with `cause`: the WARN of the outage once it lasted `warn_after`,
    /// DEBUG otherwise. Returns whether this line was the WARN.
    pub fn failed(&mut self, cause: &dyn Display) -> bool {
        let now = Instant::now();
        if self
            .down
            .as_ref()
            .and_then(|d| d.worked)
            .is_some_and(|at| now.duration_since(at) >= self.quiet)
        {
            self.down = None;
        }
        let down = self.down.get_or_insert_with(|| Down {
            since: now,
            began: SystemTime::now(),
            warned: false,
            worked: None,
            told: false,
        });
        down.worked = None;
        let cause = xcc_kube::bounded(&cause);
        let (what, server) = (&self.what, &self.server);
        let failing = now.duration_since(down.since);
        if down.warned || failing < self.warn_after {
            tracing::debug!(source = %what, %server, %cause, "{what} failed; retrying");
            return false;
        }
        down.warned = true;
        tracing::warn!(
            source = %what,
            %server,
            since = %timestamp(down.began),
            %cause,
            "{what} fails ({server}): {cause}; retrying quietly, the next line says when it works again"
        );
        true
    }

    /// One attempt worked: the INFO "recovered" of an outage that warned. Returns whether this
    /// line was that INFO.
    pub fn recovered(&mut self) -> bool {
        let Some(down) = &mut self.down else {
            return false;
        };
        let now = Instant::now();
        if down.worked.is_some() {
            return false;
        }
        down.worked = Some(now);
        let (what, server) = (&self.what, &self.server);
        let lasted = seconds(now.duration_since(down.since));
        if !down.warned || down.told {
            tracing::debug!(source = %what, %server, %lasted, "{what} works again");
            if self.quiet.is_zero() {
                self.down = None;
            }
            return false;
        }
        down.told = true;
        tracing::info!(
            source = %what,
            %server,
            since = %timestamp(down.began),
            %lasted,
            "recovered: {what} works again ({server}) after {lasted}"
        );
        if self.quiet.is_zero() {
            self.down = None;
        }
        true
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        if let Some(down) = self.down.take()
            && down.warned
            && !down.told
        {
            PARKED.lock().unwrap_or_else(|e| e.into_inner()).push((
                std::mem::take(&mut self.what),
                std::mem::take(&mut self.server),
                down,
            ));
        }
    }
}

/// A standing condition of one thing (a setting missing, a feature with nothing to do): said at
/// WARN the first time, and again only when it changes; its end is said at INFO.
#[derive(Debug, Default)]
pub struct Standing {
    said: Option<String>,
}

impl Standing {
    /// The condition is `now` (a sentence): a WARN when it differs from what was said last.
    /// Returns whether it was said.
    pub fn is(&mut self, what: &str, now: &str) -> bool {
        if self.said.as_deref() == Some(now) {
            tracing::debug!(condition = %what, "{what}: {now} (said before)");
            return false;
        }
        tracing::warn!(condition = %what, "{what}: {now}");
        self.said = Some(now.to_string());
        true
    }

    /// The condition is over: an INFO if it was said.
    pub fn cleared(&mut self, what: &str, how: &str) -> bool {
        if self.said.take().is_none() {
            return false;
        }
        tracing::info!(condition = %what, "{what}: {how}");
        true
    }
}

/// `2026-01-02T03:04:05Z`.
fn timestamp(at: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(at)
        .map(|t| {
            t.round(k8s_openapi::jiff::Unit::Second)
                .unwrap_or(t)
                .to_string()
        })
        .unwrap_or_else(|_| "an unknown time".into())
}

/// `62.3s`.
fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use xcc_kube::testing::Lines;

    fn logged() -> (Lines, tracing::subscriber::DefaultGuard) {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || writer.clone())
            .finish();
        (lines, tracing::subscriber::set_default(subscriber))
    }

    fn warn_lines(lines: &Lines) -> Vec<String> {
        lines
            .text()
            .lines()
            .filter(|l| l.contains(" WARN "))
            .map(String::from)
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_of_a_minute_retried_every_three_seconds_is_one_warn_and_one_recovered_line()
    {
        let (lines, _log) = logged();
        let mut outage = Outage::new("the cluster ID read", "https://10.0.0.1:6443");
        for _ in 0..20 {
            outage.failed(&"connection refused (os error 111)");
            assert!(outage.is_down());
            tokio::time::advance(Duration::from_secs(3)).await;
        }
        assert!(outage.recovered());
        assert!(!outage.is_down());
        let warns = warn_lines(&lines);
        assert_eq!(warns.len(), 1, "{}", lines.text());
        let warn = &warns[0];
        for part in [
            "the cluster ID read fails",
            "https://10.0.0.1:6443",
            "connection refused",
            "since=",
        ] {
            assert!(warn.contains(part), "{part} missing in {warn}");
        }
        // The cause in words, as every bounded text: no errno of Rust's I/O error.
        assert!(!warn.contains("os error"), "{warn}");
        assert_eq!(lines.matching(" INFO "), 1, "{}", lines.text());
        assert_eq!(
            lines.matching("recovered: the cluster ID read works again"),
            1
        );
        assert_eq!(lines.matching("after 60.0s"), 1, "{}", lines.text());
        assert_eq!(lines.matching(" DEBUG "), 19, "the retries between");

        // The next outage warns again.
        outage.failed(&"no answer within 3s");
        assert_eq!(warn_lines(&lines).len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_outage_stays_at_debug_and_a_flapping_one_warns_once() {
        let (lines, _log) = logged();
        let mut outage = Outage::new("the Secret watch", "cluster-a")
            .warn_after(Duration::from_secs(10))
            .quiet(Duration::from_secs(4));
        outage.failed(&"watch expired");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!outage.recovered());
        assert!(lines.text().lines().all(|l| l.contains(" DEBUG ")));

        // It lists (works for a moment) and its watch fails again, for a minute.
        tokio::time::advance(Duration::from_secs(5)).await;
        for _ in 0..15 {
            outage.failed(&"403 forbidden");
            tokio::time::advance(Duration::from_secs(2)).await;
            outage.recovered();
            tokio::time::advance(Duration::from_secs(2)).await;
        }
        assert_eq!(warn_lines(&lines).len(), 1, "{}", lines.text());
        assert_eq!(lines.matching("recovered:"), 1, "{}", lines.text());
        assert!(!lines.text().contains('{'), "{}", lines.text());
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_outlives_its_reporter_and_the_next_one_says_it_recovered() {
        let (lines, _log) = logged();
        let what = "the Lease watch (parked)";
        let mut outage = Outage::new(what, "https://10.0.0.2:6443");
        outage.failed(&"connection refused");
        // The loop stops mid-outage (its reconciler stopped) and a new one starts.
        drop(outage);
        tokio::time::advance(Duration::from_secs(30)).await;
        let mut again = Outage::new(what, "https://10.0.0.2:6443");
        assert!(again.is_down());
        assert!(!again.failed(&"connection refused"), "warned already");
        assert!(again.recovered());
        assert_eq!(warn_lines(&lines).len(), 1, "{}", lines.text());
        assert_eq!(lines.matching("after 30.0s"), 1, "{}", lines.text());
        // Over: a third reporter starts afresh.
        drop(again);
        assert!(!Outage::new(what, "https://10.0.0.2:6443").is_down());
    }

    #[test]
    fn a_standing_condition_is_said_once_and_again_when_it_changes() {
        let (lines, _log) = logged();
        let mut standing = Standing::default();
        let what = "the aggregated API server";
        for _ in 0..10 {
            standing.is(what, "the API server has no front-proxy settings");
        }
        assert_eq!(warn_lines(&lines).len(), 1);
        standing.is(what, "the front-proxy CA does not parse");
        assert_eq!(warn_lines(&lines).len(), 2);
        assert!(standing.cleared(what, "front-proxy settings in use"));
        assert!(!standing.cleared(what, "front-proxy settings in use"));
        assert_eq!(lines.matching(" INFO "), 1);
    }
}

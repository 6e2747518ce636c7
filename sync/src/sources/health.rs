//! The health of one watch (its metric, its [`Health`], its log lines) and the relist after
//! every failure that lets a watch say it is back.

use std::{
    sync::{Arc, Mutex},
    time::SystemTime,
};

use futures::{Stream, StreamExt};
use kube::runtime::watcher;

use super::{Events, Health};
use crate::{
    metrics::{SyncMetrics, WatchSeries},
    outage::Outage,
};

/// How long a watch may fail before it says so at WARN.
pub(super) const WARN_AFTER: std::time::Duration = crate::outage::WATCH_WARN_AFTER;

/// The health of one watch, kept in its metric, its [`Health`] and its log lines.
///
/// - Every failure counts in `xcc_sync_watch_errors` and makes the watch reconnecting (state 2)
///   since the outage began; it is synced (state 1) again once the server answers with a list
///   or an event. With [`relisting`] under the watch, every failure is followed by a list, so
///   a watch that recovers always says so, also when its kind has no objects.
/// - The log lines are its [`Outage`]'s: one WARN per outage, when it has lasted
///   [`WARN_AFTER`], and one INFO "recovered" when the watch listed again; every other failure
///   is at DEBUG. An outage ends when the watch has listed and then gone the backoff's quiet
///   period without a failure (so a kind that lists but may not be watched warns once, not at
///   every list).
pub(super) struct Tracker {
    /// Its series while it runs: dropped with the watch, which removes them if no other watch
    /// of the same cluster, kind and namespace runs.
    series: Option<WatchSeries>,
    health: Arc<Mutex<Health>>,
    outage: Outage,
}

impl Tracker {
    /// The tracker of a watch of `kind` on `cluster`, in `namespace` (`None`: every namespace).
    pub(super) fn new(
        cluster: &str,
        kind: &str,
        namespace: Option<&str>,
        local: bool,
        metrics: Option<SyncMetrics>,
        health: Arc<Mutex<Health>>,
    ) -> Tracker {
        let quiet = if local {
            xcc_kube::Backoff::local().quiet()
        } else {
            xcc_kube::Backoff::peer().quiet()
        };
        let server = if local {
            crate::outage::local_server()
        } else {
            format!("the API server of cluster {cluster}")
        };
        let what = match namespace {
            Some(namespace) => format!("the {kind} watch in namespace {namespace}"),
            None => format!("the {kind} watch"),
        };
        let outage = Outage::new(what, server)
            .warn_after(WARN_AFTER)
            .quiet(quiet);
        Tracker {
            series: metrics.map(|m| m.watch(cluster, kind, namespace)),
            health,
            outage,
        }
    }

    fn set(&self, health: Health) {
        self.set_as(health.state(), health);
    }

    fn set_as(&self, state: &'static str, health: Health) {
        if let Some(series) = &self.series {
            series.state(state);
        }
        *self.health.lock().unwrap_or_else(|e| e.into_inner()) = health;
    }

    /// The first list has not arrived yet.
    pub(super) fn listing(&self) {
        self.set(Health::Listing {
            since: SystemTime::now(),
        });
    }

    /// A list or watch request failed; the watch retries on its backoff.
    pub(super) fn failed(&mut self, error: &watcher::Error) {
        let state = crate::metrics::failed_watch_state(error);
        self.outage.failed(error);
        if let Some(series) = &self.series {
            series.error();
        }
        let since = self.outage.since().unwrap_or_else(SystemTime::now);
        let error = xcc_kube::bounded(error);
        self.set_as(state, Health::Reconnecting { since, error });
    }

    /// Takes note of one event of the watch: a failure, or the server's answer (a list or a
    /// change); `Init` and `InitApply` come before every list attempt, failed ones too.
    pub(super) fn observe<K>(&mut self, event: &Result<watcher::Event<K>, watcher::Error>) {
        match event {
            Ok(watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                self.answered();
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Err(error) => self.failed(error),
        }
    }

    /// The server answered with a list or a change.
    pub(super) fn answered(&mut self) {
        if let Some(series) = &self.series {
            series.contact();
        }
        self.outage.recovered();
        let synced = matches!(
            *self.health.lock().unwrap_or_else(|e| e.into_inner()),
            Health::Synced { .. }
        );
        if !synced {
            self.set(Health::Synced {
                since: SystemTime::now(),
            });
        }
    }
}

/// A watcher that starts over with a list after every failure: `watch` makes a new one.
///
/// kube-runtime's watcher retries a watch that failed to start (or broke) from the
/// resourceVersion it had listed, and says nothing when that retry works: a kind without
/// objects would look failed until its next change. A new list after a failure costs one list
/// (the watcher relists after an expired watch anyway) and ends in `InitDone`, so the source
/// knows it is back. Put the backoff around it: the new watcher is polled after the delay.
pub(super) fn relisting<K: Send + 'static>(
    watch: impl Fn() -> Events<K> + Send + 'static,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {
    let events = watch();
    futures::stream::unfold((watch, events), |(watch, mut events)| async move {
        let event = events.next().await?;
        if event.is_err() {
            events = watch();
        }
        Some((event, (watch, events)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::LOCAL;
    use std::time::Duration;
    use xcc_kube::testing::Lines;

    #[tokio::test(start_paused = true)]
    async fn a_failing_watch_warns_once_per_outage_and_says_when_it_listed_again() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || writer.clone())
            .finish();
        let _log = tracing::subscriber::set_default(subscriber);
        let health = Arc::new(Mutex::new(Health::Listing {
            since: SystemTime::now(),
        }));
        let mut tracker = Tracker::new(LOCAL, "Secret", None, true, None, health.clone());
        let fail = |tracker: &mut Tracker| tracker.failed(&watcher::Error::NoResourceVersion);
        let warned = "the Secret watch fails";
        let listed_again = "recovered: the Secret watch works again";

        // A short outage: DEBUG only.
        fail(&mut tracker);
        tokio::time::advance(Duration::from_secs(1)).await;
        tracker.answered();
        assert!(matches!(*health.lock().unwrap(), Health::Synced { .. }));
        assert_eq!(lines.matching(warned), 0);
        assert_eq!(lines.matching("the Secret watch failed; retrying"), 1);

        // A long one (it lists, but its watch keeps failing): one WARN, one INFO.
        tokio::time::advance(xcc_kube::Backoff::local().quiet()).await;
        for _ in 0..8 {
            fail(&mut tracker);
            tokio::time::advance(Duration::from_secs(3)).await;
            tracker.answered();
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        fail(&mut tracker);
        assert!(matches!(
            *health.lock().unwrap(),
            Health::Reconnecting { .. }
        ));
        assert_eq!(lines.matching(warned), 1);
        assert_eq!(lines.matching(" WARN "), 1);
        assert_eq!(lines.matching(listed_again), 1);

        // Back for the quiet period: the next failure starts a new outage, which warns again.
        tracker.answered();
        tokio::time::advance(xcc_kube::Backoff::local().quiet()).await;
        fail(&mut tracker);
        assert_eq!(lines.matching(warned), 1);
        tokio::time::advance(WARN_AFTER).await;
        fail(&mut tracker);
        assert_eq!(lines.matching(warned), 2);
    }
}

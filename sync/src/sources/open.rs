//! The one way a watch is opened in xcc: [`watch`]. Every watch of every binary goes through it
//! (the shared [`Sources`](super::Sources), the typed watches, the [`Wakers`](crate::wakers::Wakers),
//! the record feed, leader election, the controller's watches), so that all of them retry alike;
//! a test of the workspace fails when `watcher(` is called anywhere else.
//!
//! - **Relist after a failure**: each failure is followed by a new list (`Init`, `InitApply`…,
//!   `InitDone`) instead of kube-runtime's silent retry from the last resourceVersion, so a
//!   consumer always hears that its watch is back, also for a kind without objects.
//! - **Backoff**: between attempts, [`Schedule::Local`] for the process's own cluster (at most
//!   about 2 s, back to the start as soon as the server answers, so a restarted API server is
//!   watched again within seconds) and [`Schedule::Peer`] for other clusters (jittered, up to
//!   15 s, so that many watches of one peer do not retry in step).
//! - **Metadata only**: pass an `Api<PartialObjectMeta<K>>`; only metadata crosses the wire.
//! - **Health** (optional): [`watch_reported`] also keeps a [`WatchHealth`], counts the watch in
//!   the sync metrics (`xcc_sync_watch_state`, `…_errors_total`, `…_last_contact`) when given
//!   them, and logs a failing watch at WARN once per outage, as the shared sources do.
//!
//! ```no_run
//! use k8s_openapi::api::{coordination::v1::Lease, core::v1::Service};
//! use kube::{Api, Client, runtime::{WatchStreamExt, reflector, watcher}};
//! use xcc_sync::sources::{self, Schedule};
//!
//! fn example(client: Client) {
//!     // The objects applied (listed or changed), here of one Lease of the own cluster:
//!     let config = watcher::Config::default().fields("metadata.name=xcc-agent");
//!     let leases = sources::watch(Api::<Lease>::default_namespaced(client.clone()), config, Schedule::Local)
//!         .applied_objects();
//!     // A store fed by a watch of another cluster (`.reflect`, not `reflector(writer, watcher(..))`):
//!     let (store, writer) = reflector::store::<Service>();
//!     let events = sources::watch(Api::all(client), watcher::Config::default(), Schedule::Peer)
//!         .reflect(writer);
//! #   drop((leases, store, events));
//! }
//! ```
//!
//! A per-object watch that wakes a reconciler is opened by [`Wakers::ensure`](crate::wakers::Wakers::ensure),
//! which calls [`watch`] itself.

use std::{
    fmt::Debug,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use futures::{StreamExt, stream::BoxStream};
use kube::{
    Api, Resource,
    runtime::{WatchStreamExt, watcher},
};
use serde::de::DeserializeOwned;

use super::{Health, health::Tracker, relisting};
use crate::metrics::SyncMetrics;

/// The events of a watch opened by [`watch`].
pub type Events<K> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// How a watch retries after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// The process's own cluster: [`xcc_kube::Backoff::local`].
    Local,
    /// Another cluster: [`xcc_kube::Backoff::peer`].
    Peer,
}

impl Schedule {
    /// A fresh backoff of this schedule.
    pub fn backoff(self) -> xcc_kube::Backoff {
        match self {
            Schedule::Local => xcc_kube::Backoff::local(),
            Schedule::Peer => xcc_kube::Backoff::peer(),
        }
    }
}

/// Opens a watch of `api` with `config`: lists, then watches; after every failure it waits on
/// `schedule` and lists again. The stream never ends; drop it to stop the watch. Nothing is
/// requested before the stream is first polled.
pub fn watch<K>(api: Api<K>, config: watcher::Config, schedule: Schedule) -> Events<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    relisting(move || watcher(api.clone(), config.clone()).boxed())
        .backoff(schedule.backoff())
        .boxed()
}

/// Where [`watch_reported`] reports: the labels of its metrics and log lines (with the
/// namespace of its `Api`, if it watches one namespace).
#[derive(Clone)]
pub struct Report {
    /// The cluster watched (`local` for the process's own, else the peer's name).
    pub cluster: String,
    /// The kind watched.
    pub kind: String,
    /// The sync metrics to count the watch in, if any.
    pub metrics: Option<SyncMetrics>,
}

/// What a watch of [`watch_reported`] knows of its cluster, as its last events say (cheap to
/// clone; every clone reads the same watch).
#[derive(Clone, Debug)]
pub struct WatchHealth(Arc<Mutex<Health>>);

impl WatchHealth {
    /// The watch's health now.
    pub fn get(&self) -> Health {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// [`watch`], which also keeps its health (listing until the first list, synced while the server
/// answers, reconnecting since the first failure of an outage and why), counts it in
/// `report.metrics`, and logs its failures: at DEBUG, and once per outage at WARN when it has
/// lasted 10 s, then at INFO when the watch listed again.
pub fn watch_reported<K>(
    api: Api<K>,
    config: watcher::Config,
    schedule: Schedule,
    report: Report,
) -> (Events<K>, WatchHealth)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let health = Arc::new(Mutex::new(Health::Listing {
        since: SystemTime::now(),
    }));
    let mut tracker = Tracker::new(
        &report.cluster,
        &report.kind,
        api.namespace(),
        schedule == Schedule::Local,
        report.metrics,
        health.clone(),
    );
    tracker.listing();
    let events = watch(api, config, schedule)
        .map(move |event| {
            tracker.observe(&event);
            event
        })
        .boxed();
    (events, WatchHealth(health))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::test_server::*;
    use k8s_openapi::api::core::v1::Secret;
    use kube::core::PartialObjectMeta;

    /// The events' kinds, in order: what a consumer sees.
    fn kind<K>(event: &Result<watcher::Event<K>, watcher::Error>) -> &'static str {
        match event {
            Ok(watcher::Event::Init) => "init",
            Ok(watcher::Event::InitApply(_)) => "init-apply",
            Ok(watcher::Event::InitDone) => "listed",
            Ok(watcher::Event::Apply(_)) => "apply",
            Ok(watcher::Event::Delete(_)) => "delete",
            Err(_) => "failed",
        }
    }

    #[tokio::test]
    async fn a_watch_that_fails_lists_again_and_its_report_says_it_is_back() {
        // The first list works; the watch from its resourceVersion answers 429 once.
        let (client, server) = mock_failing(0, 1);
        let mut registry = prometheus_client::registry::Registry::with_prefix("xcc");
        let report = Report {
            cluster: "cluster-a".into(),
            kind: "Secret".into(),
            metrics: Some(SyncMetrics::register(&mut registry)),
        };
        let (mut events, health) = watch_reported(
            Api::<Secret>::all(client),
            watcher::Config::default(),
            Schedule::Peer,
            report,
        );
        assert!(matches!(health.get(), Health::Listing { .. }));
        let seen: Vec<&str> =
            tokio::time::timeout(LIST_WAIT, (&mut events).take(7).collect::<Vec<_>>())
                .await
                .expect("the watch lists again after its failure")
                .iter()
                .map(kind)
                .collect();
        assert_eq!(
            seen,
            [
                "init",
                "init-apply",
                "listed",
                "failed",
                "init",
                "init-apply",
                "listed"
            ]
        );
        assert_eq!(count(&server, "list full"), 2, "{:?}", requests(&server));
        assert!(matches!(health.get(), Health::Synced { .. }));
        let text = metrics_text(&registry);
        for line in [
            r#"xcc_sync_watch_state{cluster="cluster-a",kind="Secret",watch_namespace="",state="synced"} 1"#,
            r#"xcc_sync_watch_errors_total{cluster="cluster-a",kind="Secret",watch_namespace=""} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
        drop(events);
        assert!(
            !metrics_text(&registry).contains("xcc_sync_watch_state{"),
            "a watch dropped leaves no series"
        );
    }

    #[tokio::test]
    async fn a_watch_of_partial_objects_asks_for_metadata_only() {
        let (client, server) = mock();
        let api = Api::<PartialObjectMeta<Secret>>::all(client);
        let listed: Vec<_> = tokio::time::timeout(
            LIST_WAIT,
            watch(api, watcher::Config::default(), Schedule::Local)
                .take(3)
                .collect::<Vec<_>>(),
        )
        .await
        .expect("the watch lists");
        let Some(Ok(watcher::Event::InitApply(secret))) = listed.get(1) else {
            panic!("no object listed: {listed:?}");
        };
        assert_eq!(secret.metadata.name.as_deref(), Some("dumbo"));
        assert_eq!(requests(&server), ["list meta"]);
    }
}

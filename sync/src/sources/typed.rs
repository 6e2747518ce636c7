//! One watch of a typed kind of the agent's own cluster, shared by kube-runtime `Controller`s.

use futures::StreamExt;
use kube::{
    Api,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};

use super::{LOCAL, Report, Schedule, watch_reported};
use crate::metrics::SyncMetrics;

/// A kind kube-runtime Controllers can reconcile from a shared typed store.
pub trait TypedKind:
    kube::Resource<DynamicType: Eq + std::hash::Hash + Clone + Default>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> TypedKind for K where
    K: kube::Resource<DynamicType: Eq + std::hash::Hash + Clone + Default>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// How many changes of a typed kind may wait for its slowest subscriber before the watch waits.
pub(super) const TYPED_BUFFER: usize = 1024;

/// One watch of a typed kind of the agent's own cluster, shared by the kube-runtime
/// `Controller`s that reconcile it or are woken by it (`for_shared_stream`, `owns_shared_stream`,
/// `watches_shared_stream`): the Secret replication reconcilers and the monitors that generate
/// their objects, for instance, read one watch of SecretImports instead of two.
///
/// Every subscriber must be taken ([`Typed::subscribe`]) before the watch runs ([`Typed::run`]),
/// and must be polled: the watch waits for the slowest one (at most [`TYPED_BUFFER`] behind).
pub struct Typed<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    reader: Store<K>,
    writer: reflector::store::Writer<K>,
    /// A label selector: only the objects it selects are watched.
    labels: Option<String>,
}

impl<K: TypedKind> Default for Typed<K> {
    fn default() -> Typed<K> {
        Typed::new()
    }
}

impl<K: TypedKind> Typed<K> {
    /// A watch not yet running, with an empty store and no subscriber.
    pub fn new() -> Typed<K> {
        let (reader, writer) = reflector::store_shared(TYPED_BUFFER);
        Typed {
            reader,
            writer,
            labels: None,
        }
    }

    /// A watch of only the objects `selector` selects (a label selector: what a reconciler
    /// labels as its own), rather than every object of the kind.
    #[must_use]
    pub fn labelled(selector: &str) -> Typed<K> {
        Typed {
            labels: Some(selector.to_string()),
            ..Typed::new()
        }
    }

    /// The store every subscriber reads.
    pub fn store(&self) -> Store<K> {
        self.reader.clone()
    }

    /// A stream of every object applied from now on, for one Controller.
    pub fn subscribe(&self) -> reflector::ReflectHandle<K> {
        self.writer
            .subscribe()
            .expect("a store made by store_shared hands out subscribers")
    }

    /// Runs the watch until the future is dropped: lists again after a failure, retries on the
    /// local schedule, and reports its state in the sync metrics under cluster [`LOCAL`].
    pub async fn run(self, api: Api<K>, metrics: SyncMetrics) {
        let report = Report {
            cluster: LOCAL.into(),
            kind: K::kind(&K::DynamicType::default()).to_string(),
            metrics: Some(metrics),
        };
        let mut config = watcher::Config::default();
        if let Some(labels) = &self.labels {
            config = config.labels(labels);
        }
        let (events, _) = watch_reported(api, config, Schedule::Local, report);
        let mut events = std::pin::pin!(events.reflect_shared(self.writer));
        while events.next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::test_server::*;
    use k8s_openapi::api::core::v1::Secret;

    #[tokio::test]
    async fn a_typed_watch_of_a_kind_not_served_yet_is_synced_once_it_lists_and_watches() {
        // Two lists answer 404 (the CRD not served yet), then the first watch answers 429.
        let (client, server) = mock_failing(2, 1);
        let mut registry = prometheus_client::registry::Registry::with_prefix("xcc");
        let metrics = SyncMetrics::register(&mut registry);
        let typed = Typed::<Secret>::new();
        let store = typed.store();
        let mut subscriber = typed.subscribe();
        let run = tokio::spawn(typed.run(Api::all(client), metrics));
        let drain = tokio::spawn(async move { while subscriber.next().await.is_some() {} });
        let synced = r#"xcc_sync_watch_state{cluster="local",kind="Secret",watch_namespace="",state="synced"} 1"#;
        wait_until("the typed watch is synced after three failures", || {
            count(&server, "list full") == 4 && metrics_text(&registry).contains(synced)
        })
        .await;
        let text = metrics_text(&registry);
        assert!(
            text.contains(
                r#"xcc_sync_watch_errors_total{cluster="local",kind="Secret",watch_namespace=""} 3"#
            ),
            "{text}"
        );
        assert_eq!(store.state().len(), 1);
        run.abort();
        drain.abort();
    }

    #[tokio::test]
    async fn a_labelled_typed_watch_lists_and_watches_only_what_its_selector_selects() {
        let (client, server) = mock();
        let mut registry = prometheus_client::registry::Registry::with_prefix("xcc");
        let metrics = SyncMetrics::register(&mut registry);
        let typed = Typed::<Secret>::labelled("replication.xcc.test/secretexport=true");
        let store = typed.store();
        let run = tokio::spawn(typed.run(Api::all(client), metrics));
        wait_until("the labelled watch lists and watches", || {
            count(&server, "list full") >= 1 && count(&server, "watch full") >= 1
        })
        .await;
        let seen = server.seen();
        assert!(
            seen.iter()
                .all(|r| r.param("labelSelector")
                    == Some("replication.xcc.test%2Fsecretexport%3Dtrue")),
            "{:?}",
            seen.iter()
                .map(xcc_kube::scenario::Request::uri)
                .collect::<Vec<_>>()
        );
        wait_until("the store holds the list", || store.state().len() == 1).await;
        run.abort();
    }
}

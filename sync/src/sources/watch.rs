//! The shared watch of a kind in a cluster: [`Sources`] starts one per [`SourceId`] and keeps
//! it while a view of it lives; its task lists and watches, in metadata or whole objects as its
//! views ask, into one store and one broadcast of changes.

use std::{
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicU8, Ordering},
    },
    time::SystemTime,
};

use dashmap::DashMap;
use futures::StreamExt;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
    core::PartialObjectMeta,
    runtime::{
        reflector::{self, Store},
        watcher,
    },
};
use tokio::sync::{broadcast, watch};

use super::{
    CAPACITY, Change, Detail, Events, Health, Schedule, SourceId, health::Tracker, view::View,
};
use crate::metrics::SyncMetrics;

/// State shared by a source's task and its views.
pub(super) struct State {
    pub(super) id: SourceId,
    pub(super) store: Store<DynamicObject>,
    /// The detail of the list in the store (0: none yet).
    pub(super) listed: AtomicU8,
    pub(super) changes: broadcast::Sender<Change>,
    pub(super) health: Arc<Mutex<Health>>,
}

/// One running watch, kept alive by its views.
pub(super) struct Shared {
    pub(super) state: Arc<State>,
    /// How many views need whole objects.
    pub(super) full_views: watch::Sender<usize>,
    task: tokio::task::AbortHandle,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The process's sources, one per [`SourceId`].
#[derive(Clone, Default)]
pub struct Sources {
    /// Every reconciler asks for views at once: a concurrent map (a source is started under its
    /// entry's guard, which is synchronous, so two views of one id share one watch).
    running: Arc<DashMap<SourceId, Weak<Shared>>>,
    metrics: Option<SyncMetrics>,
}

impl Sources {
    /// No watches yet; their health is counted in `metrics`, when given.
    pub fn new(metrics: Option<SyncMetrics>) -> Sources {
        Sources {
            running: Arc::default(),
            metrics,
        }
    }

    /// A view of `resource` as `id` names it, through `client`, starting the watch if no view of
    /// it exists yet (or upgrading it to whole objects if `detail` asks for them).
    pub fn view(
        &self,
        id: SourceId,
        client: Client,
        resource: &ApiResource,
        detail: Detail,
    ) -> View {
        self.running.retain(|_, shared| shared.strong_count() > 0);
        let mut running = self.running.entry(id.clone()).or_default();
        let shared = match running.upgrade() {
            Some(shared) => shared,
            None => {
                let shared = Arc::new(self.start(id, client, resource, detail));
                *running = Arc::downgrade(&shared);
                shared
            }
        };
        drop(running);
        if detail == Detail::Full {
            shared.full_views.send_modify(|n| *n += 1);
        }
        View { shared, detail }
    }

    /// Every source running now, with its health.
    #[cfg(test)]
    fn health(&self) -> Vec<(SourceId, Health)> {
        self.running
            .iter()
            .filter_map(|running| running.upgrade())
            .map(|s| {
                let health = s.state.health.lock().unwrap_or_else(|e| e.into_inner());
                (s.state.id.clone(), health.clone())
            })
            .collect()
    }

    fn start(
        &self,
        id: SourceId,
        client: Client,
        resource: &ApiResource,
        detail: Detail,
    ) -> Shared {
        let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
        let (changes, _) = broadcast::channel(CAPACITY);
        let state = Arc::new(State {
            id: id.clone(),
            store: writer.as_reader(),
            listed: AtomicU8::new(0),
            changes,
            health: Arc::new(Mutex::new(Health::Listing {
                since: SystemTime::now(),
            })),
        });
        let (full_views, wanted) = watch::channel(usize::from(detail == Detail::Full));
        let apis = match &id.namespace {
            Some(namespace) => Apis {
                full: Api::namespaced_with(client.clone(), namespace, resource),
                metadata: Api::namespaced_with(client, namespace, resource),
            },
            None => Apis {
                full: Api::all_with(client.clone(), resource),
                metadata: Api::all_with(client, resource),
            },
        };
        let task = tokio::spawn(run_source(
            state.clone(),
            writer,
            apis,
            wanted,
            self.metrics.clone(),
        ));
        tracing::debug!(cluster = %id.cluster, kind = %id.gvk.kind, fields = ?id.fields, namespace = ?id.namespace, "watch started");
        Shared {
            state,
            full_views,
            task: task.abort_handle(),
        }
    }
}

/// Lists and watches one source until aborted, switching between metadata and whole objects as
/// its views ask.
async fn run_source(
    state: Arc<State>,
    mut writer: reflector::store::Writer<DynamicObject>,
    apis: Apis,
    mut wanted: watch::Receiver<usize>,
    metrics: Option<SyncMetrics>,
) {
    let id = &state.id;
    let mut tracker = Tracker::new(
        &id.cluster,
        &id.gvk.kind,
        id.namespace.as_deref(),
        id.is_local(),
        metrics,
        state.health.clone(),
    );
    tracker.listing();
    loop {
        let detail = if *wanted.borrow_and_update() > 0 {
            Detail::Full
        } else {
            Detail::Metadata
        };
        // A list in the new detail replaces what the store holds; until then, views that need
        // more than the store has are not listed.
        state
            .listed
            .fetch_min(Detail::Metadata as u8, Ordering::AcqRel);
        let mut events = events(&apis, id, detail);
        loop {
            let event = tokio::select! {
                changed = wanted.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let now = if *wanted.borrow() > 0 { Detail::Full } else { Detail::Metadata };
                    if now != detail {
                        tracing::debug!(cluster = %id.cluster, kind = %id.gvk.kind, ?now, "watch detail changed; listing again");
                        break;
                    }
                    continue;
                }
                event = events.next() => event,
            };
            let Some(event) = event else { return };
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    tracker.failed(&error);
                    continue;
                }
            };
            writer.apply_watcher_event(&event);
            let change = match event {
                watcher::Event::Apply(object) => Change::Applied(Arc::new(object)),
                watcher::Event::Delete(object) => Change::Deleted(Arc::new(object)),
                watcher::Event::InitDone => {
                    state.listed.store(detail as u8, Ordering::Release);
                    Change::Listed
                }
                // Emitted before every list attempt, failed ones included: no contact yet.
                watcher::Event::Init | watcher::Event::InitApply(_) => continue,
            };
            tracker.answered();
            // No subscriber is fine: views read the store when they start.
            let _ = state.changes.send(change);
        }
    }
}

/// A source's kind, as whole objects and as metadata.
struct Apis {
    full: Api<DynamicObject>,
    metadata: Api<PartialObjectMeta<DynamicObject>>,
}

/// The watch events of the kind in `detail`, with metadata-only objects as `DynamicObject`s
/// without content; a list after every failure, on the source's schedule.
fn events(apis: &Apis, id: &SourceId, detail: Detail) -> Events<DynamicObject> {
    let mut config = watcher::Config::default();
    if let Some(fields) = &id.fields {
        config = config.fields(fields);
    }
    let schedule = if id.is_local() {
        Schedule::Local
    } else {
        Schedule::Peer
    };
    match detail {
        Detail::Full => super::watch(apis.full.clone(), config, schedule),
        Detail::Metadata => super::watch(apis.metadata.clone(), config, schedule)
            .map(|event| event.map(|event| map_event(event, without_content)))
            .boxed(),
    }
}

fn without_content(meta: PartialObjectMeta<DynamicObject>) -> DynamicObject {
    DynamicObject {
        types: meta.types,
        metadata: meta.metadata,
        data: serde_json::Value::Object(Default::default()),
    }
}

fn map_event<A, B>(event: watcher::Event<A>, f: impl Fn(A) -> B) -> watcher::Event<B> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(f(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(f(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(f(o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::{secret_gvk, test_server::*};
    use k8s_openapi::api::core::v1::Secret;
    use std::time::Duration;
    use xcc_kube::scenario::{self, Request, Scenario};

    #[tokio::test]
    async fn views_of_one_kind_share_one_watch_which_carries_content_only_while_asked() {
        let (client, server) = mock();
        let sources = Sources::default();
        let resource = ApiResource::erase::<Secret>(&());
        let id = SourceId::local(secret_gvk());
        let meta = sources.view(id.clone(), client.clone(), &resource, Detail::Metadata);
        wait_listed(&meta).await;
        let second = sources.view(id.clone(), client.clone(), &resource, Detail::Metadata);
        assert!(
            second.listed(),
            "a second view uses the running watch's list"
        );
        let stored = meta.store().state();
        assert_eq!(stored.len(), 1);
        assert!(stored[0].data.get("data").is_none(), "metadata only");
        assert_eq!(sources.health().len(), 1, "one source for both views");

        // A view that needs whole objects upgrades the one watch; it is not listed before.
        let full = sources.view(id.clone(), client.clone(), &resource, Detail::Full);
        wait_listed(&full).await;
        assert!(meta.listed(), "metadata views stay listed meanwhile");
        assert_eq!(full.store().state()[0].data["data"]["password"], "MQ==");
        assert_eq!(sources.health().len(), 1);
        drop(full);
        tokio::time::timeout(LIST_WAIT, async {
            while count(&server, "list meta") < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("back to metadata once no view needs content");
        drop((meta, second));
        assert!(sources.health().is_empty(), "the last view stops the watch");
        assert_eq!(count(&server, "list full"), 1, "{:?}", requests(&server));
    }

    #[tokio::test]
    async fn a_typed_view_feeds_a_controller_store_from_the_shared_watch() {
        let (client, server) = mock();
        let sources = Sources::default();
        let resource = ApiResource::erase::<Secret>(&());
        let id = SourceId::local(secret_gvk());
        let other = sources.view(id.clone(), client.clone(), &resource, Detail::Full);
        let view = sources.view(id, client, &resource, Detail::Full);
        let (store, mut handle, feed) = view.typed::<Secret>();
        let feed = tokio::spawn(feed);
        tokio::time::timeout(LIST_WAIT, store.wait_until_ready())
            .await
            .expect("the typed store is filled from the list")
            .unwrap();
        let typed = store.state();
        assert_eq!(typed.len(), 1);
        assert_eq!(
            typed[0].data.as_ref().unwrap()["password"].0,
            b"1".to_vec(),
            "whole typed objects"
        );
        let announced = tokio::time::timeout(LIST_WAIT, handle.next())
            .await
            .expect("the subscriber hears of it")
            .unwrap();
        assert_eq!(announced.metadata.name.as_deref(), Some("dumbo"));
        assert_eq!(sources.health().len(), 1, "no second watch");
        assert_eq!(
            count(&server, "list meta") + count(&server, "list full"),
            1,
            "{:?}",
            requests(&server)
        );
        feed.abort();
        drop(other);
    }

    #[tokio::test]
    async fn a_watch_that_fails_to_start_after_its_list_lists_again_and_is_synced() {
        // The list works; the watch from its resourceVersion answers 429 once, as a new CRD's
        // watch cache does while it initializes. No object ever changes.
        let (client, server) = mock_failing(0, 1);
        let mut registry = prometheus_client::registry::Registry::with_prefix("xcc");
        let sources = Sources::new(Some(SyncMetrics::register(&mut registry)));
        let view = sources.view(
            SourceId::local(secret_gvk()),
            client,
            &ApiResource::erase::<Secret>(&()),
            Detail::Metadata,
        );
        wait_until("the watch lists again after its failed start", || {
            count(&server, "list meta") == 2
                && matches!(sources.health()[0].1, Health::Synced { .. })
        })
        .await;
        assert!(view.listed());
        let text = metrics_text(&registry);
        for line in [
            r#"xcc_sync_watch_state{cluster="local",kind="Secret",watch_namespace="",state="synced"} 1"#,
            r#"xcc_sync_watch_errors_total{cluster="local",kind="Secret",watch_namespace=""} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in {text}");
        }
    }

    #[tokio::test]
    async fn watches_of_one_kind_in_two_namespaces_each_show_their_own_state_until_they_stop() {
        // The reader may list Secrets in `allowed` only, as a peer's reader whose Role the
        // group's rules wrote there; in `denied` every request is refused.
        let (allowed, denied) = (
            "/api/v1/namespaces/allowed/secrets",
            "/api/v1/namespaces/denied/secrets",
        );
        let (client, _server) = Scenario::new()
            .in_any_order()
            .always("GET", allowed)
            .when(Request::is_watch)
            .hang()
            .always("GET", allowed)
            .reply((
                200,
                serde_json::json!({"apiVersion": "v1", "kind": "SecretList",
                    "metadata": {"resourceVersion": "1"}, "items": []}),
            ))
            .always("GET", denied)
            .reply(scenario::status(
                403,
                "Forbidden",
                "secrets is forbidden: User \"reader\" cannot list resource \"secrets\"",
            ))
            .run();
        let mut registry = prometheus_client::registry::Registry::with_prefix("xcc");
        let sources = Sources::new(Some(SyncMetrics::register(&mut registry)));
        let resource = ApiResource::erase::<Secret>(&());
        let id = |namespace: &str| SourceId {
            cluster: "cluster-b".into(),
            identity: "xcc-system/cluster-b-kubeconfig".into(),
            gvk: secret_gvk(),
            fields: None,
            namespace: Some(namespace.into()),
        };
        let view =
            |namespace| sources.view(id(namespace), client.clone(), &resource, Detail::Metadata);
        let (in_allowed, in_denied) = (view("allowed"), view("denied"));
        let state = |namespace: &str, state: &str, value: u8| {
            format!(
                r#"xcc_sync_watch_state{{cluster="cluster-b",kind="Secret",watch_namespace="{namespace}",state="{state}"}} {value}"#
            )
        };
        let both = [
            state("allowed", "synced", 1),
            state("allowed", "forbidden", 0),
            state("denied", "forbidden", 1),
            state("denied", "synced", 0),
        ];
        wait_until("each namespace's watch shows its own state", || {
            let text = metrics_text(&registry);
            both.iter().all(|line| text.contains(line.as_str()))
        })
        .await;
        let text = metrics_text(&registry);
        assert!(
            text.contains(
                r#"xcc_sync_watch_errors_total{cluster="cluster-b",kind="Secret",watch_namespace="denied"}"#
            ),
            "{text}"
        );
        assert!(
            !text.contains(r#"xcc_sync_watch_errors_total{cluster="cluster-b",kind="Secret",watch_namespace="allowed"}"#),
            "the watch that works failed no request: {text}"
        );
        assert!(
            text.contains(r#"xcc_sync_watch_last_contact_timestamp_seconds{cluster="cluster-b",kind="Secret",watch_namespace="allowed"}"#),
            "{text}"
        );

        // The failing watch stops (its rule was deleted): its series go, the other's stay.
        drop(in_denied);
        wait_until("the stopped watch's series go", || {
            !metrics_text(&registry).contains(r#"watch_namespace="denied""#)
        })
        .await;
        let text = metrics_text(&registry);
        assert!(text.contains(&state("allowed", "synced", 1)), "{text}");
        drop(in_allowed);
        wait_until("no watch, no series", || {
            !metrics_text(&registry).contains("watch_namespace=")
        })
        .await;
    }
}

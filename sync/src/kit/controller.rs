//! The one controller loop of every reconciler ([`Loop`]): a reconciler gives its kind (a shared
//! watch of the core), its wakes, its context, its reconcile and its error policy; the loop
//! builds kube-runtime's `Controller` on them with what every reconciler shares.
//!
//! ```text
//!  Typed<K> / View::typed ──► Loop::of ─┬─ wake_on(refs)          (a Secret changed, a server answers)
//!                                       ├─ wake_by(other, mapper) (an object it names changed)
//!                                       ├─ owned(children)        (what it made changed)
//!                                       └─ run(reconcile, error_policy, ctx, stop)
//!                                             │ trigger backoff: Backoff::local()
//!                                             │ per reconcile: span `reconcile{reconciler, kind, namespace, name}`,
//!                                             │   xcc_sync_reconciles_total / _duration_seconds,
//!                                             │   xcc_sync_reconcile_errors_total{error = its metric label}
//!                                             │ per result: `<Kind> reconciled` (DEBUG),
//!                                             │   `<Kind> reconcile failed; retrying` (WARN)
//!                                             └ returns once `stop` is cancelled and the reconciles
//!                                               in flight have ended (graceful shutdown)
//! ```

use std::{future::Future, sync::Arc, time::Instant};

use futures::{Stream, StreamExt};
use kube::{
    Resource, ResourceExt,
    runtime::{
        Controller,
        controller::{Action, Config},
        reflector::{ObjectRef, ReflectHandle, Store},
    },
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::ReconcileError;
use crate::{
    metrics::SyncMetrics,
    sink::Counted,
    sources::{Typed, TypedKind},
};

/// The controller loop of one reconciler of kind `K`: what wakes it, how many of its objects it
/// reconciles at once, and its name in the metrics and the reconcile span. Built with
/// [`Loop::of`] (or [`Loop::new`]), run with [`Loop::run`].
pub struct Loop<K: TypedKind> {
    reconciler: &'static str,
    metrics: SyncMetrics,
    controller: Controller<K>,
    config: Config,
    routine: bool,
}

impl<K> Loop<K>
where
    K: TypedKind + Resource<DynamicType = ()>,
{
    /// A loop over the shared watch `kind` (a subscriber is taken now: build every loop of a
    /// kind before its watch runs), counted as `counted.reconciler`.
    pub fn of(counted: &Counted, kind: &Typed<K>) -> Loop<K> {
        Loop::new(counted, kind.subscribe(), kind.store())
    }

    /// A loop over `objects` and their store `store` (a typed view of the core:
    /// [`View::typed`](crate::sources::View::typed)).
    pub fn new(
        counted: &Counted,
        objects: impl Stream<Item = Arc<K>> + Send + 'static,
        store: Store<K>,
    ) -> Loop<K> {
        Loop {
            reconciler: counted.reconciler,
            metrics: counted.metrics.clone(),
            controller: Controller::for_shared_stream(objects, store),
            config: Config::default(),
            routine: false,
        }
    }

    /// The store the loop reads its objects from (for wakes that look objects up).
    pub fn store(&self) -> Store<K> {
        self.controller.store()
    }

    /// At most `concurrency` objects reconciled at once (unbounded unless set).
    #[must_use]
    pub fn concurrency(mut self, concurrency: u16) -> Loop<K> {
        self.config = self.config.concurrency(concurrency);
        self
    }

    /// Its objects are reconciled all the time (a check every few seconds): each success is
    /// logged at TRACE rather than DEBUG.
    #[must_use]
    pub fn routine(mut self) -> Loop<K> {
        self.routine = true;
        self
    }

    /// Also reconciles each object `wakes` names (a Secret it reads changed, a server it reads
    /// answers again).
    #[must_use]
    pub fn wake_on(mut self, wakes: impl Stream<Item = ObjectRef<K>> + Send + 'static) -> Loop<K> {
        self.controller = self.controller.reconcile_on(wakes);
        self
    }

    /// Also reconciles the objects `mapper` names for each change of an object of `others` (a
    /// shared watch of the core: the object it refers to changed).
    #[must_use]
    pub fn wake_by<Other, I>(
        mut self,
        others: ReflectHandle<Other>,
        mapper: impl Fn(Arc<Other>) -> I + Sync + Send + 'static,
    ) -> Loop<K>
    where
        Other: TypedKind,
        Other::DynamicType: std::fmt::Debug,
        I: 'static + IntoIterator<Item = ObjectRef<K>>,
        I::IntoIter: Send,
    {
        self.controller = self.controller.watches_shared_stream(others, mapper);
        self
    }

    /// Also reconciles the owner (by ownerReference) of each changed object of `children` (a
    /// shared watch of the core of what the reconciler makes).
    #[must_use]
    pub fn owned<Child>(
        mut self,
        children: impl Stream<Item = Arc<Child>> + Send + 'static,
    ) -> Loop<K>
    where
        Child: Resource<DynamicType = ()> + Send + 'static,
    {
        self.controller = self.controller.owns_shared_stream(children);
        self
    }

    /// Runs the loop until `stop` is cancelled and the reconciles in flight have ended: each
    /// trigger after a burst waits on the local backoff schedule; each reconcile runs in a span
    /// `reconcile` (reconciler, kind, namespace, name), is counted (result, duration, and a
    /// failure under its error's [`metric_label`](ReconcileError::metric_label)), and hands its
    /// failure to `error_policy` for when to try again; each result is logged.
    pub async fn run<Ctx, E, Fut>(
        self,
        reconcile: impl Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + 'static,
        error_policy: impl Fn(Arc<K>, &E, Arc<Ctx>) -> Action + Send + Sync + 'static,
        ctx: Arc<Ctx>,
        stop: CancellationToken,
    ) where
        Ctx: Send + Sync + 'static,
        E: ReconcileError + Send + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let Loop {
            reconciler,
            metrics,
            controller,
            config,
            routine,
        } = self;
        let kind = K::kind(&()).to_string();
        let counted = Counted {
            metrics,
            reconciler,
        };
        let span_kind = kind.clone();
        controller
            .with_config(config)
            .trigger_backoff(xcc_kube::Backoff::local())
            .graceful_shutdown_on(stop.cancelled_owned())
            .run(
                move |object: Arc<K>, ctx| {
                    let span = tracing::info_span!(
                        "reconcile",
                        reconciler = %reconciler,
                        kind = %span_kind,
                        namespace = %object.namespace().unwrap_or_default(),
                        name = %object.name_any(),
                    );
                    let work = span.in_scope(|| reconcile(object, ctx));
                    let counted = counted.clone();
                    async move {
                        let started = Instant::now();
                        let result = work.await;
                        counted
                            .metrics
                            .reconciled(reconciler, result.is_ok(), started.elapsed());
                        if let Err(error) = &result {
                            counted.failed(error);
                        }
                        result
                    }
                    .instrument(span)
                },
                error_policy,
                ctx,
            )
            .for_each(|result| {
                log_result(&kind, routine, result);
                std::future::ready(())
            })
            .await;
    }
}

/// The line of one result of a loop over `kind`.
fn log_result<K: Resource, E: std::fmt::Display>(
    kind: &str,
    routine: bool,
    result: Result<
        (ObjectRef<K>, Action),
        kube::runtime::controller::Error<E, kube::runtime::watcher::Error>,
    >,
) where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    use kube::runtime::controller::Error;
    match result {
        Ok((object, _)) if routine => tracing::trace!(object = %object, "{kind} reconciled"),
        Ok((object, _)) => tracing::debug!(object = %object, "{kind} reconciled"),
        Err(Error::ReconcilerFailed(error, object)) => {
            tracing::warn!(object = %object, error = %xcc_kube::bounded(&error), "{kind} reconcile failed; retrying");
        }
        Err(error) => tracing::debug!(%error, "{kind} controller"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::test_server::{metrics_text, mock, wait_until};
    use k8s_openapi::api::core::v1::Secret;
    use kube::Api;
    use std::{
        sync::{Mutex, atomic::AtomicUsize, atomic::Ordering},
        time::Duration,
    };

    /// What the test's subscriber wrote.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Written {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Written {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    /// A reconcile that fails the first time (the API server refused a write) and then works.
    async fn reconcile(_: Arc<Secret>, tries: Arc<AtomicUsize>) -> Result<Action, kube::Error> {
        tracing::info!("working");
        if tries.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(kube::Error::Api(
                kube::core::Status::failure("taken", "Conflict")
                    .with_code(409)
                    .boxed(),
            ));
        }
        Ok(Action::await_change())
    }

    #[tokio::test]
    async fn a_loop_reconciles_in_a_span_counts_and_logs_each_result_and_stops_on_its_token() {
        let written = Written::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer({
                let written = written.clone();
                move || written.clone()
            })
            .finish();
        // The test's runtime has one thread: every task of the loop logs to this subscriber.
        let _guard = tracing::subscriber::set_default(subscriber);
        let (client, _server) = mock();
        let mut registry = prometheus_client::registry::Registry::with_prefix("xcc");
        let counted = Counted {
            metrics: SyncMetrics::register(&mut registry),
            reconciler: "test",
        };
        let kind = Typed::<Secret>::new();
        let stop = CancellationToken::new();
        let tries = Arc::new(AtomicUsize::new(0));
        let looping = tokio::spawn(Loop::of(&counted, &kind).run(
            reconcile,
            |_, _: &kube::Error, _| Action::requeue(Duration::from_millis(10)),
            tries.clone(),
            stop.clone(),
        ));
        let watch = tokio::spawn(kind.run(Api::all(client), counted.metrics.clone()));
        wait_until("the failed reconcile is tried again", || {
            tries.load(Ordering::SeqCst) >= 2
        })
        .await;
        let text = metrics_text(&registry);
        for line in [
            r#"xcc_sync_reconciles_total{reconciler="test",result="error"} 1"#,
            r#"xcc_sync_reconciles_total{reconciler="test",result="ok"} 1"#,
            r#"xcc_sync_reconcile_errors_total{reconciler="test",error="conflict"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), looping)
            .await
            .expect("the loop returns once its token is cancelled")
            .unwrap();
        watch.abort();
        let log = written.text();
        let span = "reconcile{reconciler=test kind=Secret namespace=project-1 name=dumbo}";
        let working = log
            .lines()
            .filter(|l| l.contains("working"))
            .collect::<Vec<_>>();
        assert_eq!(working.len(), 2, "{log}");
        assert!(working.iter().all(|l| l.contains(span)), "{log}");
        assert!(
            log.lines().any(|l| l.contains(" WARN ")
                && l.contains("Secret reconcile failed; retrying")
                && l.contains("object=Secret.v1./dumbo.project-1")),
            "{log}"
        );
        assert!(
            log.lines()
                .any(|l| l.contains(" DEBUG ") && l.contains("Secret reconciled")),
            "{log}"
        );
    }
}

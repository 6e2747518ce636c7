//! The reconciler kit: what every reconciler of a process says about itself ([`Reconciler`]) and
//! the one runner that starts the enabled ones on one [`Core`] ([`run`]).
//!
//! A process keeps one list of its reconcilers (the agent: `agent/src/reconcilers.rs`); its flags,
//! `crds` output, the check whether any sync runs, the start-up log and the spawns all read that
//! list, so adding a reconciler is its module plus one line there.
//!
//! Inside a reconciler, each kind it reconciles runs one [`Loop`]: the controller loop, its
//! backoff, shutdown, span, metrics and result lines, the same for every reconciler.

mod controller;

pub use controller::Loop;

use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use xcc_kube::PeerClients;

use crate::{
    Core,
    metrics::SyncMetrics,
    sources::{LocalSecrets, Sources},
    task::spawn_owned,
};

/// One reconciler, as the process runs it. Implemented by the reconciler's flags (a `clap::Args`
/// struct flattened into the process's), so that the value that says whether it is on also knows
/// how to start it.
pub trait Reconciler: Send + Sync {
    /// What the process hands every reconciler beside the core (the agent: its namespace, its
    /// kubeconfig, its API server's URL).
    type Env;

    /// Its switch (`--<name>`, env `XCC_<NAME>`) and its name in the start-up log.
    fn name(&self) -> &'static str;

    /// How log lines name it ("secret replication").
    fn title(&self) -> &'static str;

    /// Whether its switch is on.
    fn enabled(&self) -> bool;

    /// The CustomResourceDefinitions of its API, in the order `crds` prints them.
    fn crds(&self) -> Vec<CustomResourceDefinition>;

    /// Runs it on `core` until `stop` is cancelled.
    fn start(&self, core: Core, env: &Self::Env, stop: CancellationToken)
    -> BoxFuture<'static, ()>;
}

/// What a [`Core`] is built from, once per process; the core itself (its watches) is built anew
/// for each term of leadership by [`run`].
#[derive(Clone)]
pub struct CoreParts {
    /// The process's own cluster.
    pub client: Client,
    /// The pod name, for Events.
    pub instance: Option<String>,
    /// The one cache of peer clients, behind the trust gate.
    pub peers: PeerClients,
    /// Where the process's sync metrics are counted.
    pub metrics: SyncMetrics,
}

/// Whether any of `reconcilers` is switched on.
pub fn any_enabled<E>(reconcilers: &[&dyn Reconciler<Env = E>]) -> bool {
    reconcilers.iter().any(|r| r.enabled())
}

/// The names of the enabled reconcilers, comma-separated (the start-up log's `sync=`).
pub fn enabled_names<E>(reconcilers: &[&dyn Reconciler<Env = E>]) -> String {
    reconcilers
        .iter()
        .filter(|r| r.enabled())
        .map(|r| r.name())
        .collect::<Vec<_>>()
        .join(",")
}

/// Every CRD of `reconcilers`, in list order (on or off: the CRDs are installed either way).
pub fn crds<E>(reconcilers: &[&dyn Reconciler<Env = E>]) -> Vec<CustomResourceDefinition> {
    reconcilers.iter().flat_map(|r| r.crds()).collect()
}

/// Runs every enabled reconciler until `stop` is cancelled, on one core: one watch per (cluster,
/// kind) for all of them, the local Secret view, and the peer API servers probed at a steady
/// pace. Returns once every reconciler has returned. Dropped (the leader's work aborted), it
/// ends every task it started, the reconcilers' included; each reconciler ends the tasks it
/// starts itself with [`spawn_owned`](crate::task::spawn_owned).
pub async fn run<E>(
    parts: &CoreParts,
    env: &E,
    reconcilers: &[&dyn Reconciler<Env = E>],
    stop: CancellationToken,
) {
    let sources = Sources::new(Some(parts.metrics.clone()));
    let (local_secrets, secrets_watch) =
        LocalSecrets::start(&sources, parts.client.clone(), parts.peers.clone());
    let peers = parts.peers.clone();
    let metrics = parts.metrics.clone();
    let prober_stop = stop.clone();
    let prober = spawn_owned(async move {
        peers
            .probe_forever(
                xcc_kube::PROBE_INTERVAL,
                prober_stop.cancelled_owned(),
                |found| {
                    metrics.peer_reach(found.iter().map(|(server, reach)| {
                        (server.as_str(), *reach == xcc_kube::Reach::Answers)
                    }))
                },
            )
            .await
    });
    let core = Core {
        client: parts.client.clone(),
        instance: parts.instance.clone(),
        peers: parts.peers.clone(),
        sources,
        local_secrets,
        metrics: parts.metrics.clone(),
    };
    let tasks: Vec<_> = reconcilers
        .iter()
        .filter(|r| r.enabled())
        .map(|r| {
            let task = spawn_owned(r.start(core.clone(), env, stop.clone()));
            (r.title(), task)
        })
        .collect();
    // Each in turn: the ones not awaited yet are aborted with this future if it is dropped.
    for (name, task) in tasks {
        if let Err(error) = task.await {
            tracing::error!(%error, reconciler = name, "reconciler task ended abnormally");
        }
    }
    drop((secrets_watch, prober));
}

/// A `watch` flag raised when `stop` is cancelled, for what still waits on one (the agent's
/// record feed); everything else takes the token itself.
pub fn stop_flag(stop: &CancellationToken) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(stop.is_cancelled());
    let stop = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => {
                let _ = tx.send(true);
            }
            () = tx.closed() => {}
        }
    });
    rx
}

/// A reconciler's error, as the sync metrics count it: every reconciler's error enum implements
/// this, and its error policy hands each failure to
/// [`Counted::failed`](crate::sink::Counted::failed), which counts it in
/// `xcc_sync_reconcile_errors_total{reconciler, error}`.
pub trait ReconcileError: std::error::Error {
    /// The `error` label: a short snake_case word from a small fixed set, chosen by the kind of
    /// failure (a variant), never made from the error's text. Kubernetes API failures use
    /// `kube::Error`'s labels below.
    fn metric_label(&self) -> &'static str;
}

/// What the API server said (by status code), or that it did not answer, or a failure on this
/// side of the wire (`kube`).
impl ReconcileError for kube::Error {
    fn metric_label(&self) -> &'static str {
        match self {
            kube::Error::Api(status) => match status.code {
                401 => "unauthorized",
                403 => "forbidden",
                404 => "not_found",
                409 => "conflict",
                422 => "invalid",
                _ => "api",
            },
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
                "unreachable"
            }
            _ => "kube",
        }
    }
}

/// The reconciler's own error when applying or cleaning up failed; `finalizer` when adding or
/// removing the finalizer did.
impl<E: ReconcileError + 'static> ReconcileError for kube::runtime::finalizer::Error<E> {
    fn metric_label(&self) -> &'static str {
        use kube::runtime::finalizer::Error as F;
        match self {
            F::ApplyFailed(error) | F::CleanupFailed(error) => error.metric_label(),
            F::AddFinalizer(_) | F::RemoveFinalizer(_) | F::UnnamedObject | F::InvalidFinalizer => {
                "finalizer"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::Counted;
    use kube::runtime::finalizer;
    use std::time::Duration;

    /// A reconciler's error enum, as each reconciler implements the label.
    #[derive(Debug, thiserror::Error)]
    enum Error {
        #[error(transparent)]
        Kube(#[from] kube::Error),
        #[error("bad certificate")]
        Certificate,
    }

    impl ReconcileError for Error {
        fn metric_label(&self) -> &'static str {
            match self {
                Error::Kube(error) => error.metric_label(),
                Error::Certificate => "certificate",
            }
        }
    }

    fn refused(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("no", "Refused")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn failed_reconciles_are_counted_by_a_label_of_their_kind() {
        let mut registry = prometheus_client::registry::Registry::with_prefix("xcc");
        let counted = Counted {
            metrics: SyncMetrics::register(&mut registry),
            reconciler: "secret-import",
        };
        let unreachable = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        let failures: Vec<Error> = vec![
            refused(409).into(),
            refused(409).into(),
            refused(403).into(),
            refused(503).into(),
            unreachable.into(),
            Error::Certificate,
        ];
        for error in &failures {
            counted.failed(error);
        }
        // Through the finalizer helper: the reconciler's own label, or `finalizer`.
        counted.failed(&finalizer::Error::ApplyFailed(Error::Certificate));
        counted.failed(&finalizer::Error::<Error>::RemoveFinalizer(refused(409)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let mut counts: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("xcc_sync_reconcile_errors_total{"))
            .collect();
        counts.sort_unstable();
        let label = |error: &str, n: u32| {
            format!(
                r#"xcc_sync_reconcile_errors_total{{reconciler="secret-import",error="{error}"}} {n}"#
            )
        };
        assert_eq!(
            counts,
            [
                label("api", 1),
                label("certificate", 2),
                label("conflict", 2),
                label("finalizer", 1),
                label("forbidden", 1),
                label("unreachable", 1),
            ]
        );
    }

    /// A reconciler whose work never looks at its stop token (as one stuck in a write to a
    /// server that does not answer), and that started a task of its own: each sends a `Weak`
    /// of what it holds while it runs.
    struct Stuck(tokio::sync::mpsc::UnboundedSender<std::sync::Weak<()>>);

    impl Reconciler for Stuck {
        type Env = ();

        fn name(&self) -> &'static str {
            "stuck"
        }

        fn title(&self) -> &'static str {
            "stuck"
        }

        fn enabled(&self) -> bool {
            true
        }

        fn crds(&self) -> Vec<CustomResourceDefinition> {
            Vec::new()
        }

        fn start(&self, _: Core, (): &(), _: CancellationToken) -> BoxFuture<'static, ()> {
            let running = self.0.clone();
            Box::pin(async move {
                let held = std::sync::Arc::new(());
                let _ = running.send(std::sync::Arc::downgrade(&held));
                let own = std::sync::Arc::new(());
                let _ = running.send(std::sync::Arc::downgrade(&own));
                let _forwarder = spawn_owned(async move {
                    let _own = own;
                    std::future::pending::<()>().await;
                });
                std::future::pending::<()>().await;
                drop(held);
            })
        }
    }

    #[tokio::test]
    async fn aborted_leader_work_ends_the_reconcilers_and_the_tasks_they_started() {
        let (client, _server) = crate::sources::test_server::mock();
        let mut registry = prometheus_client::registry::Registry::with_prefix("xcc");
        let parts = CoreParts {
            client,
            instance: None,
            peers: PeerClients::default(),
            metrics: SyncMetrics::register(&mut registry),
        };
        let (running, mut ran) = tokio::sync::mpsc::unbounded_channel();
        let stuck = Stuck(running);
        // As the leader runs it: in a task of its own, aborted when the Lease is lost and the
        // work did not stop within its grace.
        let work = tokio::spawn(async move {
            let reconcilers: [&dyn Reconciler<Env = ()>; 1] = [&stuck];
            run(&parts, &(), &reconcilers, CancellationToken::new()).await;
        });
        let mut held = Vec::new();
        for _ in 0..2 {
            let weak = tokio::time::timeout(Duration::from_secs(5), ran.recv())
                .await
                .expect("the reconciler and its task run")
                .unwrap();
            assert!(weak.upgrade().is_some());
            held.push(weak);
        }
        work.abort();
        let _ = work.await;
        tokio::time::timeout(Duration::from_secs(5), async {
            while held.iter().any(|weak| weak.upgrade().is_some()) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the reconciler's work and the task it started end with the leader's work");
    }
}

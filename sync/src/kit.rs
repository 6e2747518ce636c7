//! The reconciler kit: what every reconciler of a process says about itself ([`Reconciler`]) and
//! the one runner that starts the enabled ones on one [`Core`] ([`run`]).
//!
//! A process keeps one list of its reconcilers (the agent: `agent/src/reconcilers.rs`); its flags,
//! `crds` output, the check whether any sync runs, the start-up log and the spawns all read that
//! list, so adding a reconciler is its module plus one line there.

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
/// pace. Returns once every reconciler has returned.
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
    let prober = tokio::spawn(async move {
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
            let task = tokio::spawn(r.start(core.clone(), env, stop.clone()));
            (r.title(), task)
        })
        .collect();
    for (name, task) in tasks {
        if let Err(error) = task.await {
            tracing::error!(%error, reconciler = name, "reconciler task ended abnormally");
        }
    }
    secrets_watch.abort();
    prober.abort();
}

/// A `watch` flag raised when `stop` is cancelled, for reconcilers that wait on one.
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
}

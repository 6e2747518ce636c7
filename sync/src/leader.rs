//! Leader election over a Lease (`coordination.k8s.io/v1`), for work that only one replica may
//! do at a time (the agent's sync reconcilers, the controller), part of the process skeleton
//! both share: [`run_while_leading`] runs that work while this process holds the Lease, stops it
//! when the Lease is lost, and on shutdown stops it first and then releases the Lease, so that a
//! rolling update hands over at once.
//!
//! The Lease itself is kept by `kube-lease-manager` (server-side apply, renewal before expiry,
//! forced takeover of an expired Lease). What it lacks is a fast handover: a replica waiting for
//! the Lease sleeps until the holder's lease would expire, also when the holder has released it
//! on shutdown. So a waiting replica also watches the Lease (with [`sources::watch`], on the
//! local schedule), and when it sees it without a holder it asks again at once.
//!
//! ```text
//!   waiting ──(lease acquired)──► leading: work runs ──(lease lost)──► work stopped ─┐
//!      ▲  └──(Lease released by the holder: ask again now)                              │
//!      └─────────────────────────────────────────────────────────────────────────────────┘
//!   shutdown at any point: work stopped, then the Lease released
//! ```

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};

use crate::{
    outage::Outage,
    sources::{self, Schedule},
};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio_util::sync::CancellationToken;

/// Leader election's flags, as kube-controller-manager names them: `--leader-elect` (alone, or
/// `=true`/`=false`), `--leader-elect-lease-duration`, `--leader-elect-renew-deadline`,
/// `--leader-elect-retry-period`, `--leader-elect-resource-name`,
/// `--leader-elect-resource-namespace`, each with its variable (`XCC_LEADER_ELECT...`); the
/// former names (`--lease-duration`, `--lease-name`, `--lease-namespace`) are hidden aliases
/// for one release. Flatten it into a binary's `Args`; each binary says in its help what the
/// Lease guards (`#[command(mut_arg("leader_elect", |a| a.help(...)))]` on the struct that
/// flattens it) and which Lease it is by default, and calls [`LeaderElectArgs::check`].
#[derive(Clone, Debug, Default, clap::Args)]
pub struct LeaderElectArgs {
    /// Elect a leader through a Lease, so that several replicas are safe.
    #[arg(
        long,
        env = "XCC_LEADER_ELECT",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub leader_elect: bool,

    /// How long the Lease stays valid without renewal: how long a replica that died without
    /// releasing it holds up the others. Longer than --leader-elect-renew-deadline; 1s to 1h.
    #[arg(
        long,
        alias = "lease-duration",
        env = "XCC_LEADER_ELECT_LEASE_DURATION",
        default_value = "15s",
        value_name = "DURATION",
        value_parser = xcc_kube::flags::duration(MIN_PERIOD, MAX_LEASE)
    )]
    pub leader_elect_lease_duration: Duration,

    /// How long after its last renewal the leader renews the Lease at the latest (the rest of
    /// the lease duration is the margin for clock skew). Longer than --leader-elect-retry-period;
    /// 1s to 1h.
    #[arg(
        long,
        env = "XCC_LEADER_ELECT_RENEW_DEADLINE",
        default_value = "10s",
        value_name = "DURATION",
        value_parser = xcc_kube::flags::duration(MIN_PERIOD, MAX_LEASE)
    )]
    pub leader_elect_renew_deadline: Duration,

    /// How long a replica waits before it tries again after a failed attempt to take the Lease
    /// (1s to 1h).
    #[arg(
        long,
        env = "XCC_LEADER_ELECT_RETRY_PERIOD",
        default_value = "2s",
        value_name = "DURATION",
        value_parser = xcc_kube::flags::duration(MIN_PERIOD, MAX_LEASE)
    )]
    pub leader_elect_retry_period: Duration,

    /// Name of the Lease (default: the binary's name).
    #[arg(
        long,
        alias = "lease-name",
        env = "XCC_LEADER_ELECT_RESOURCE_NAME",
        value_name = "NAME"
    )]
    pub leader_elect_resource_name: Option<String>,

    /// Namespace of the Lease (default: the binary's namespace).
    #[arg(
        long,
        alias = "lease-namespace",
        env = "XCC_LEADER_ELECT_RESOURCE_NAMESPACE",
        value_name = "NAMESPACE",
        value_parser = xcc_kube::flags::namespace
    )]
    pub leader_elect_resource_namespace: Option<String>,
}

/// Shortest lease duration, renew deadline and retry period.
const MIN_PERIOD: Duration = Duration::from_secs(1);
/// Longest lease duration (and so renew deadline and retry period).
const MAX_LEASE: Duration = Duration::from_secs(3600);

impl LeaderElectArgs {
    /// Lease duration > renew deadline > retry period, as Kubernetes components require;
    /// `Err` says the rule and the values given.
    pub fn check(&self) -> Result<(), String> {
        let (lease, renew, retry) = (
            self.leader_elect_lease_duration,
            self.leader_elect_renew_deadline,
            self.leader_elect_retry_period,
        );
        if lease > renew && renew > retry {
            return Ok(());
        }
        let show = xcc_kube::flags::show_duration;
        Err(format!(
            "invalid leader election timing: --leader-elect-lease-duration ({}) must be longer \
             than --leader-elect-renew-deadline ({}), and that longer than \
             --leader-elect-retry-period ({}), each at least 1s (Kubernetes components' defaults: \
             15s, 10s, 2s)",
            show(lease),
            show(renew),
            show(retry)
        ))
    }
}

/// Where the Lease lives and who this replica is.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This replica's identity in the Lease (the pod name).
    pub identity: String,
    /// How long a Lease is valid without renewal: how long a replica that died without
    /// releasing it (kill -9, a lost node) holds up the others.
    pub duration: Duration,
    /// How long after its last renewal the holder renews the Lease at the latest.
    pub renew_deadline: Duration,
    /// The wait before trying again after a failed attempt to take the Lease.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// The Lease of `args` (name and namespace, or the binary's defaults) held as `identity`.
    pub fn new(args: &LeaderElectArgs, name: &str, namespace: &str, identity: String) -> Self {
        Self {
            namespace: args
                .leader_elect_resource_namespace
                .clone()
                .unwrap_or_else(|| namespace.to_owned()),
            name: args
                .leader_elect_resource_name
                .clone()
                .unwrap_or_else(|| name.to_owned()),
            identity,
            duration: args.leader_elect_lease_duration,
            renew_deadline: args.leader_elect_renew_deadline,
            retry_period: args.leader_elect_retry_period,
        }
    }
}

/// How long the work gets to stop when leadership ends; then it is aborted.
pub const STOP_GRACE: Duration = Duration::from_millis(500);
/// Longest wait for the Lease to be released on shutdown.
pub const RELEASE_TIMEOUT: Duration = Duration::from_millis(700);
/// The longest [`run_while_leading`] takes to return once `shutdown` is cancelled: the work's
/// stop, then the Lease's release, each bounded (an API server that does not answer holds up
/// neither).
pub const SHUTDOWN_BOUND: Duration = Duration::from_millis(1200);

/// Runs `work` whenever this replica holds the Lease, until `shutdown` is cancelled. `work` gets
/// a token it must honour (a child of `shutdown`, cancelled when the Lease is lost or at
/// shutdown) and is awaited before anything else happens, so two replicas never work at once. `leading` tells the admin server
/// (and metrics) whether this replica leads; readiness must not depend on it.
///
/// Returns within [`SHUTDOWN_BOUND`] of `shutdown`, whatever the API server does. An API server
/// that cannot be reached is one outage of the Lease in the log (one WARN, one "recovered").
pub async fn run_while_leading<W, F>(
    client: Client,
    config: LeaseConfig,
    leading: Arc<AtomicBool>,
    shutdown: CancellationToken,
    work: W,
) where
    W: Fn(CancellationToken) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let released = released_notices(client.clone(), &config);
    let mut released = std::pin::pin!(released);
    let mut failures = xcc_kube::Backoff::local();
    let mut outage = Outage::new(
        format!(
            "leader election (Lease {}/{})",
            config.namespace, config.name
        ),
        crate::outage::local_server(),
    )
    .quiet(xcc_kube::Backoff::local().quiet());
    let mut said_waiting = false;
    loop {
        let manager = tokio::select! {
            built = manager(&client, &config) => built,
            () = shutdown.cancelled() => return,
        };
        let manager = match manager {
            Ok(manager) => {
                outage.recovered();
                manager
            }
            Err(error) => {
                outage.failed(&error);
                let delay = failures.next().unwrap_or(xcc_kube::Backoff::LOCAL_MAX);
                if sleep_or_shutdown(delay, &shutdown).await {
                    return;
                }
                continue;
            }
        };
        if !said_waiting {
            said_waiting = true;
            tracing::info!(identity = %config.identity, lease = %config.name, "waiting for the Lease");
        }
        let acquired = loop {
            tokio::select! {
                changed = manager.changed() => match changed {
                    Ok(true) => break Ok(true),
                    Ok(false) => {
                        outage.recovered();
                    }
                    Err(error) => break Err(error),
                },
                // Released by its holder: a new manager reads the Lease afresh and takes it.
                Some(()) = released.next() => break Ok(false),
                () = shutdown.cancelled() => return,
            }
        };
        let delay = match acquired {
            Ok(true) => None,
            Ok(false) => Some(Duration::from_millis(100)),
            // Not acquired after an error: ask again in --leader-elect-retry-period.
            Err(error) => {
                outage.failed(&error);
                Some(config.retry_period)
            }
        };
        if let Some(delay) = delay {
            if sleep_or_shutdown(delay, &shutdown).await {
                return;
            }
            continue;
        }
        outage.recovered();
        failures = xcc_kube::Backoff::local();
        said_waiting = false;
        let (shut_down, lost) = lead(&manager, &config, &leading, &shutdown, &work).await;
        if shut_down {
            return;
        }
        if let Some(error) = lost {
            outage.failed(&error);
        }
    }
}

/// Sleeps `delay`; whether `shutdown` was cancelled meanwhile.
async fn sleep_or_shutdown(delay: Duration, shutdown: &CancellationToken) -> bool {
    let stopped = tokio::select! {
        () = tokio::time::sleep(delay) => false,
        () = shutdown.cancelled() => true,
    };
    stopped || shutdown.is_cancelled()
}

/// Leads until the Lease is lost or `shutdown` is cancelled: `work` runs meanwhile, and is stopped
/// (aborted after [`STOP_GRACE`]) before this returns; on shutdown the Lease is released too
/// (given up after [`RELEASE_TIMEOUT`]). Returns whether it was the shutdown, and the error
/// that lost the Lease, if one did.
async fn lead<W, F>(
    manager: &LeaseManager,
    config: &LeaseConfig,
    leading: &AtomicBool,
    shutdown: &CancellationToken,
    work: &W,
) -> (bool, Option<kube_lease_manager::LeaseManagerError>)
where
    W: Fn(CancellationToken) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    tracing::info!(identity = %config.identity, lease = %config.name, "leading: the work starts");
    leading.store(true, Ordering::Release);
    let stop = shutdown.child_token();
    let mut task = tokio::spawn(work(stop.clone()));
    let (shut_down, lost) = loop {
        tokio::select! {
            changed = manager.changed() => match changed {
                Ok(true) => {}
                Ok(false) => break (false, None),
                Err(error) => break (false, Some(error)),
            },
            () = shutdown.cancelled() => break (true, None),
        }
    };
    // The work stops before anyone else can start it: first here, then the Lease goes.
    stop.cancel();
    // A reconciler that does not stop in time (a write to a server that does not answer) must
    // not hold up the handover or the exit: it is aborted, and the Lease goes all the same.
    match tokio::time::timeout(STOP_GRACE, &mut task).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::error!(%error, "the leader's work ended abnormally"),
        Err(_) => {
            tracing::info!("the leader's work did not stop within {STOP_GRACE:?}; aborted");
            task.abort();
        }
    }
    leading.store(false, Ordering::Release);
    if shut_down {
        match tokio::time::timeout(RELEASE_TIMEOUT, manager.release()).await {
            Ok(Ok(())) => tracing::info!(lease = %config.name, "Lease released"),
            Ok(Err(error)) => {
                tracing::warn!(lease = %config.name, %error, "cannot release the Lease; the next leader takes it when it expires");
            }
            Err(_) => tracing::warn!(
                lease = %config.name,
                "the API server did not answer the Lease's release within {RELEASE_TIMEOUT:?}; the next leader takes it when it expires"
            ),
        }
        return (true, None);
    }
    match &lost {
        // The outage's WARN says why.
        Some(_) => {
            tracing::info!(lease = %config.name, "the Lease could not be renewed: the work stopped")
        }
        None => tracing::warn!(lease = %config.name, "lost the Lease: the work stopped"),
    }
    (false, lost)
}

async fn manager(
    client: &Client,
    config: &LeaseConfig,
) -> Result<LeaseManager, kube_lease_manager::LeaseManagerError> {
    // Renewed when `grace` is left: at the renew deadline after the last renewal (whole
    // seconds, as the Lease counts them).
    let grace = config
        .duration
        .saturating_sub(config.renew_deadline)
        .as_secs()
        .max(1);
    let duration = config.duration.as_secs().max(grace + 1);
    LeaseManagerBuilder::new(client.clone(), config.name.clone())
        .with_namespace(config.namespace.clone())
        .with_identity(config.identity.clone())
        .with_duration(duration)
        .with_grace(grace)
        .build()
        .await
}

/// A notice each time the Lease is seen without a holder.
fn released_notices(
    client: Client,
    config: &LeaseConfig,
) -> impl futures::Stream<Item = ()> + Send + use<> {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let fields = format!("metadata.name={}", config.name);
    sources::watch(
        api,
        watcher::Config::default().fields(&fields),
        Schedule::Local,
    )
    .applied_objects()
    .filter_map(|lease| {
        let free = lease.ok().is_some_and(|lease| {
            lease
                .spec
                .and_then(|spec| spec.holder_identity)
                .is_none_or(|holder| holder.is_empty())
        });
        std::future::ready(free.then_some(()))
    })
}

//! Watch sources shared by every reconciler of the process: one watch per (cluster, kind), with
//! a metadata-only variant. A reconciler asks [`Sources`] for a [`View`] of a kind in a cluster
//! instead of opening its own watch; views of the same kind in the same cluster share one watch
//! and one store.
//!
//! ```text
//!   API server ──one watch──► store (read by every view)
//!                             └─► broadcast: Applied / Deleted / Listed ──► each view's changes()
//! ```
//!
//! - **Detail**: a source watches metadata only (`PartialObjectMeta`: no Secret data crosses the
//!   wire) while every view asks for that; the first view that needs whole objects upgrades it to
//!   a full watch (one relist), and it goes back to metadata when the last such view is dropped.
//!   A view counts as listed only once a list in the detail it asked for is in the store.
//! - **Order**: the store is updated before a change is announced. A subscriber that falls behind
//!   gets [`Change::Missed`] and must look at the whole store again.
//! - **Health**: each source says whether it is synced, still listing, or reconnecting since when
//!   and why ([`Health`]); the agent exports that per cluster, kind and namespace ([`SyncMetrics`](crate::metrics::SyncMetrics)).
//! - **Lifetime**: a source lives while a view of it does; the last view dropped stops its watch.
//! - **Retries**: every watch retries on [`xcc_kube::Backoff`]: the local schedule for the agent's
//!   own cluster, the jittered peer schedule for the others.
//! - **Opening a watch**: [`watch`] (or [`watch_reported`]) is the one way any part of xcc opens a
//!   watch, these sources included: a new list after every failure, on a [`Schedule`]. See
//!   [`open`](self::watch) for how to use it for a store or a stream of objects.

mod health;
mod open;
mod secrets;
#[cfg(test)]
pub(crate) mod test_server;
mod typed;
mod view;
mod watch;

use std::{sync::Arc, time::SystemTime};

use futures::Stream;
use kube::{api::DynamicObject, core::GroupVersionKind};
use tokio::sync::broadcast;

use health::relisting;
pub use open::{Events, Report, Schedule, WatchHealth, watch, watch_reported};
pub use secrets::{LocalSecrets, SecretChange, secret_gvk};
pub use typed::{Typed, TypedKind};
pub use view::View;
pub use watch::Sources;

/// The cluster name of the agent's own cluster in a [`SourceId`].
pub const LOCAL: &str = "local";

/// Changes a burst may queue per subscriber before it is told to look at everything again.
const CAPACITY: usize = 4096;

/// How much of each object a view needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Detail {
    /// Metadata only (names, labels, annotations, owners, UID, resourceVersion).
    Metadata = 1,
    /// The whole object.
    Full = 2,
}

/// One watch: a kind in a cluster, as seen through one client, optionally filtered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourceId {
    /// [`LOCAL`] or the peer's Cluster name (for logs and metrics).
    pub cluster: String,
    /// Who the client is: [`LOCAL`], or the peer client's identity (the Secret it was built
    /// from). Two clients of one cluster are two sources.
    pub identity: String,
    /// The kind watched.
    pub gvk: GroupVersionKind,
    /// A field selector (`type=...`), when the source watches only part of the kind.
    pub fields: Option<String>,
    /// The one namespace watched, when the client may read the kind only there (a peer's
    /// reader that may read Secrets in the namespaces the group's rules name, not in all);
    /// `None`: every namespace.
    pub namespace: Option<String>,
}

impl SourceId {
    /// The agent's own cluster, kind `gvk`, unfiltered.
    pub fn local(gvk: GroupVersionKind) -> SourceId {
        SourceId {
            cluster: LOCAL.into(),
            identity: LOCAL.into(),
            gvk,
            fields: None,
            namespace: None,
        }
    }

    fn is_local(&self) -> bool {
        self.identity == LOCAL
    }
}

/// A change of a source's objects, as subscribers see it.
#[derive(Clone, Debug)]
pub enum Change {
    /// An object was created or changed.
    Applied(Arc<DynamicObject>),
    /// An object was deleted.
    Deleted(Arc<DynamicObject>),
    /// A full list is now in the store (after a start, a broken watch or a change of detail).
    Listed,
    /// This subscriber fell behind and missed changes: it must look at everything again.
    Missed,
}

/// What a source knows of its cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// The first list has not arrived yet.
    Listing {
        /// Since when.
        since: SystemTime,
    },
    /// Listed and watching.
    Synced {
        /// Since when.
        since: SystemTime,
    },
    /// The watch failed; it retries with backoff.
    Reconnecting {
        /// Since when.
        since: SystemTime,
        /// Why, bounded.
        error: String,
    },
}

impl Health {
    /// The `state` label of a watch that is listing or synced; a failed one's is its error's.
    fn state(&self) -> &'static str {
        match self {
            Health::Listing { .. } => "listing",
            Health::Synced { .. } => "synced",
            Health::Reconnecting { .. } => "failing",
        }
    }
}

fn broadcast_stream<T>(
    receiver: broadcast::Receiver<T>,
    id: &SourceId,
) -> impl Stream<Item = T> + Send + use<T>
where
    T: Clone + Send + 'static + From<Lagged>,
{
    let kind = id.gvk.kind.clone();
    futures::stream::unfold(receiver, move |mut receiver| {
        let kind = kind.clone();
        async move {
            let item = match receiver.recv().await {
                Ok(item) => item,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(%kind, missed, "a subscriber fell behind; it looks again");
                    T::from(Lagged)
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            Some((item, receiver))
        }
    })
}

/// A subscriber fell behind its broadcast.
pub struct Lagged;

impl From<Lagged> for Change {
    fn from(_: Lagged) -> Change {
        Change::Missed
    }
}

//! `xcc-agent`: one process per member cluster. It serves the xcc DNS zone from an in-memory
//! record table fed either by the EndpointSlices of its namespace or, standalone, by a records file.
//!
//! ```text
//!  EndpointSlices (watch) ─┐
//!                          ├─► RecordTable ──► DNS :53 (UDP × N, TCP)
//!  records file (poll) ────┘        │
//!  admin HTTP: /healthz /readyz /metrics
//!
//!  sync reconcilers (each can be switched off): Secret replication (SecretExport, SecretImport,
//!  the monitors and their bindings)
//!  peers (kubeconfig Secret → client) ─► read ─► sink (SSA + origin annotation) ─► local cluster
//! ```
//!
//! - `feed/`: the record feed (EndpointSlices or a records file → the table), `/explain`, the
//!   announcement, the DNS metrics;
//! - the reconcilers on the sync core (crate `xcc-sync`): `replication/`, `clusterregistry/`,
//!   `plumber/`, `projection/`, `mcs/`;
//! - `reconcilers.rs`: the one list of the reconcilers;
//! - [`process`]: flags, wiring, the admin server; all that `main.rs` calls.
//!
//! Only [`process`] is public: the rest is reached through it, so an unused item still warns.
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "a test is one scenario read top to bottom; the line limit is for production code"
    )
)]

mod clusterregistry;
mod feed;
mod mcs;
mod plumber;
pub mod process;
mod projection;
mod reconcilers;
mod replication;

// The sync core under the paths the reconcilers have always used (`crate::sink`, ...).
use xcc_sync::{metrics as sync_metrics, sink, sources, wakers};

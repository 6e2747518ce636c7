//! The crate's error type.

use std::{io, net::SocketAddr, path::PathBuf};

/// Everything that can go wrong in the DNS engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("invalid zone {zone:?}: {reason}")]
    InvalidZone { zone: String, reason: String },

    #[error("no zone configured: give at least one --zone")]
    NoZones,

    #[error("source {source_name:?} has names outside every served zone: {}", names.join(", "))]
    OutsideZones {
        source_name: String,
        names: Vec<String>,
    },

    #[error("cannot read records file {path}")]
    ReadRecords {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("records file {path}: {message}")]
    InvalidRecords { path: PathBuf, message: String },

    #[error("cannot bind DNS sockets on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },

    #[error(
        "source {source_name:?} would go from {names} names to none; refused, the last good \
         records are kept (allow it with --records-allow-empty)"
    )]
    EmptyReload { source_name: String, names: usize },

    #[error(
        "source {source_name:?} would lose {removed} of its {names} names, more than the allowed \
         share {max_share}; refused, the last good records are kept (raise \
         --records-max-removed-share to allow it)"
    )]
    TooManyRemoved {
        source_name: String,
        removed: usize,
        names: usize,
        max_share: f64,
    },

    #[error("DNS server failed: {0}")]
    Serve(String),
}

impl Error {
    /// Short, stable label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Error::InvalidZone { .. } => "invalid_zone",
            Error::NoZones => "no_zones",
            Error::OutsideZones { .. } => "outside_zones",
            Error::ReadRecords { .. } => "read_records",
            Error::InvalidRecords { .. } => "invalid_records",
            Error::Bind { .. } => "bind",
            Error::EmptyReload { .. } => "empty_reload",
            Error::TooManyRemoved { .. } => "too_many_removed",
            Error::Serve(_) => "serve",
        }
    }
}

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

    #[error("cannot read records file {path}: {source}")]
    ReadRecords {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("records file {path}: {message}")]
    InvalidRecords { path: PathBuf, message: String },

    #[error("cannot bind DNS sockets on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
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
            Error::Serve(_) => "serve",
        }
    }
}

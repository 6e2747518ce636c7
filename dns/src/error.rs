//! The crate's error type.

use std::{io, net::SocketAddr, path::PathBuf};

/// Everything that can go wrong in the DNS engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configured zone is not a valid DNS name.
    #[error("invalid zone {zone:?}: {reason}")]
    InvalidZone {
        /// The zone as given.
        zone: String,
        /// Why it is not a valid name.
        reason: String,
    },

    /// The server was started without any zone to serve.
    #[error("no zone configured: give at least one --zone")]
    NoZones,

    /// A source's records name hosts that no served zone contains.
    #[error("source {source_name:?} has names outside every served zone: {}", names.join(", "))]
    OutsideZones {
        /// The source (`<ns>/<name>` of a slice, or the records file).
        source_name: String,
        /// The names outside every zone.
        names: Vec<String>,
    },

    /// The records file could not be read.
    #[error("cannot read records file {path}")]
    ReadRecords {
        /// The file.
        path: PathBuf,
        /// What reading it failed with.
        #[source]
        source: io::Error,
    },

    /// The records file was read but does not parse.
    #[error("records file {path}: {message}")]
    InvalidRecords {
        /// The file.
        path: PathBuf,
        /// What is wrong with it, and where.
        message: String,
    },

    /// The UDP or TCP socket could not be bound.
    #[error("cannot bind DNS sockets on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What binding failed with.
        #[source]
        source: io::Error,
    },

    #[error(
        "source {source_name:?} would go from {names} names to none; refused, the last good \
         records are kept (allow it with --records-allow-empty)"
    )]
    /// A reload would leave a source without names (refused unless allowed).
    EmptyReload {
        /// The source.
        source_name: String,
        /// How many names it has now.
        names: usize,
    },

    #[error(
        "source {source_name:?} would lose {removed} of its {names} names, more than the allowed \
         share {max_share}; refused, the last good records are kept (raise \
         --records-max-removed-share to allow it)"
    )]
    /// A reload would remove more than the allowed share of a source's names.
    TooManyRemoved {
        /// The source.
        source_name: String,
        /// How many names the reload would remove.
        removed: usize,
        /// How many names the source has now.
        names: usize,
        /// The largest share of names a reload may remove (`--records-max-removed-share`).
        max_share: f64,
    },

    /// The server stopped with an error.
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

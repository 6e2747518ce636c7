//! The xcc DNS engine, free of Kubernetes.
//!
//! ```text
//!   sources (records file, EndpointSlices, ...)
//!        │ set_source / remove_source (writers, serialized by a mutex)
//!        ▼
//!   RecordTable ── publishes ──► Arc<Snapshot>  (arc-swap: readers never wait)
//!                                     │ resolve(qname, qtype)
//!   UDP (SO_REUSEPORT) / TCP ──► precheck ──► Handler (hickory-server RequestHandler) ──► response
//!                                       └──► fast path (UDP A/AAAA hits, no allocation) ──► response
//! ```
//!
//! The serving loops are our own (one OS thread per UDP socket receiving and answering in
//! batches, a TCP accept loop with a connection cap and deadlines); the common queries are
//! answered from their bytes with no allocation, and hickory decodes the other messages that
//! pass the allocation-free precheck and builds their responses.
//!
//! The rules served are those of the zone design: A, AAAA, CNAME and SRV (RFC 2782, identical
//! records served once) at host names, SOA/NS at each apex, NODATA vs NXDOMAIN with the
//! SOA in authority (RFC 2308), empty non-terminals exist (RFC 8020), wildcards by closest
//! encloser (RFC 4592), CNAMEs chased inside our zones, EDNS(0) with BADVERS and a 1232-byte
//! advertised payload (RFC 6891), TC over UDP when an answer does not fit, REFUSED outside our
//! zones and NOTIMP for opcodes other than QUERY.
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "a test is one scenario read top to bottom; the line limit is for production code"
    )
)]

mod error;
mod fast;
mod handler;
mod lookup;
pub mod name;
pub mod precheck;
mod ratelog;
mod records_file;
mod respond;
mod server;
mod table;
mod tcp;
mod udp;
mod zone;

pub use error::Error;
pub use handler::{ADVERTISED_UDP_PAYLOAD, Answered, Handler, NoObserver, QueryObserver};
pub use lookup::Resolution;
pub use ratelog::Cause;
pub use records_file::{load_records, parse_records};
pub use server::{ServeOptions, Sockets, UDP_RECV_BUFFER, raise_fd_limit, serve, serve_with};
pub use table::{Batch, HostRecords, RecordTable, ShrinkLimit, Snapshot, Srv};
pub use zone::{DEFAULT_ZONE, Zone, ZoneSettings};

/// Re-exported so that users of this crate name DNS types without a direct dependency.
pub use hickory_proto as proto;

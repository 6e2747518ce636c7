//! The hickory-server [`RequestHandler`]: message-level rules (opcode, EDNS, question count,
//! class) around [`Snapshot::resolve`](crate::Snapshot::resolve).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hickory_proto::serialize::binary::{BinDecoder, BinEncodable, BinEncoder};
use hickory_proto::{
    op::{Edns, Header, HeaderCounts, Metadata, OpCode, ResponseCode},
    rr::{DNSClass, RecordType},
};
use hickory_server::{
    net::runtime::Time,
    server::{Request, RequestHandler, ResponseHandler, ResponseInfo},
    zone_handler::{MessageResponseBuilder, Queries},
};

use crate::{Cause, RecordTable};

/// UDP payload size we advertise (the DNS Flag Day 2020 value, safe from fragmentation).
pub const ADVERTISED_UDP_PAYLOAD: u16 = 1232;

/// One response sent, as a [`QueryObserver`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct Answered {
    /// The question's type; `None` when the message had no usable question.
    pub qtype: Option<RecordType>,
    /// The response code answered.
    pub rcode: ResponseCode,
    /// The zone of the question, as its position in [`RecordTable::zones`]; `None` when the name
    /// is in no zone served (REFUSED) or the message was answered before its question was read.
    pub zone: Option<usize>,
    /// Over TCP (else UDP).
    pub tcp: bool,
    /// From an IPv6 client (IPv4-mapped addresses count as IPv4).
    pub ipv6: bool,
    /// From the parsed request to the response handed to the socket.
    pub elapsed: Duration,
    /// Size of the request message in bytes (over TCP without its 2-byte length prefix).
    pub request_bytes: usize,
    /// Size of the response message in bytes; 0 when none could be sent.
    pub response_bytes: usize,
}

impl Answered {
    /// Whether `peer` is an IPv6 client.
    pub fn is_ipv6(peer: std::net::SocketAddr) -> bool {
        peer.ip().to_canonical().is_ipv6()
    }
}

/// Sees every answered query; the agent turns these into metrics.
pub trait QueryObserver: Send + Sync + 'static {
    /// Called once per response sent.
    fn observe(&self, answered: &Answered);

    /// Called once per malformed message (answered FORMERR or dropped), with its cause. NOTIMP
    /// answers are well-formed and not reported here.
    fn malformed(&self, _cause: Cause) {}

    /// Called once per UDP query dropped unanswered because the queue to the general path was
    /// full (the serving thread never waits for it).
    fn dropped(&self) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct NoObserver;

impl QueryObserver for NoObserver {
    fn observe(&self, _: &Answered) {}
}

/// Answers queries from a [`RecordTable`].
#[derive(Clone)]
pub struct Handler {
    table: Arc<RecordTable>,
    observer: Arc<dyn QueryObserver>,
}

impl Handler {
    /// A handler over `table` that reports each query to `observer`.
    pub fn new(table: Arc<RecordTable>, observer: Arc<dyn QueryObserver>) -> Self {
        Handler { table, observer }
    }

    /// The observer told of every response.
    pub(crate) fn observer(&self) -> &dyn QueryObserver {
        &*self.observer
    }

    /// The observer, shared.
    pub(crate) fn shared_observer(&self) -> Arc<dyn QueryObserver> {
        self.observer.clone()
    }

    /// The table this handler serves.
    pub fn table(&self) -> &Arc<RecordTable> {
        &self.table
    }
}

/// The question section to echo, when the request's own bytes cannot be copied as they are.
///
/// The server copies the question's raw bytes into the response. A question name that uses a
/// compression pointer (legal, if odd) points at request offsets, which hold other bytes in the
/// response: copied, it would make the response unparseable. Such a question is re-encoded; so
/// is a FORMERR for several questions, which echoes none. The common case allocates nothing.
fn echoed_question(queries: &Queries) -> Option<Queries> {
    let empty = || Queries::read(&mut BinDecoder::new(&[]), 0).ok();
    if queries.len() != 1 {
        return empty();
    }
    let raw = queries.as_bytes();
    let mut at = 0;
    loop {
        match raw.get(at) {
            Some(0) => return None,
            Some(len) if len & 0xC0 == 0 => at += 1 + *len as usize,
            _ => break,
        }
    }
    let mut bytes = Vec::with_capacity(raw.len() + 16);
    let mut encoder = BinEncoder::new(&mut bytes);
    // One name cannot be compressed against itself, so the new bytes hold no pointer.
    if queries.queries()[0].original().emit(&mut encoder).is_err() {
        return empty();
    }
    Queries::read(&mut BinDecoder::new(&bytes), 1)
        .ok()
        .or_else(empty)
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    /// Answers `request`. The observer is not told: the servers tell it once the response's
    /// encoded size is known ([`Handler::respond`]).
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        response_handle: R,
    ) -> ResponseInfo {
        self.respond(request, response_handle).await.0
    }
}

impl Handler {
    /// Answers `request` through `response_handle`; returns what was sent and what the observer
    /// is to be told of it, but for the response's size (0: the caller knows the bytes).
    pub(crate) async fn respond<R: ResponseHandler>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> (ResponseInfo, Answered) {
        let started = Instant::now();
        let mut metadata = Metadata::response_from_request(&request.metadata);

        // RFC 6891 §7: answer an OPT with an OPT. We advertise 1232 bytes, but never more than the
        // client said it can take, since the server encodes UDP answers to our OPT's size.
        let response_edns = request.edns.as_ref().map(|edns| {
            let mut ours = Edns::new();
            ours.set_max_payload(edns.max_payload().clamp(512, ADVERTISED_UDP_PAYLOAD));
            ours.set_version(0);
            ours
        });
        let query = request.queries.queries();
        let echoed = echoed_question(&request.queries);
        let builder = MessageResponseBuilder::new(
            echoed.as_ref().unwrap_or(&request.queries),
            response_edns.as_ref(),
        );
        let qtype = (query.len() == 1).then(|| query[0].query_type());

        let error = if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
            Some(ResponseCode::BADVERS)
        } else if request.metadata.op_code != OpCode::Query {
            Some(ResponseCode::NotImp)
        } else if query.len() != 1 {
            Some(ResponseCode::FormErr)
        } else if !matches!(query[0].query_class(), DNSClass::IN) {
            Some(ResponseCode::Refused)
        } else {
            None
        };

        let mut zone = None;
        let sent = if let Some(rcode) = error {
            metadata.response_code = rcode;
            response_handle
                .send_response(builder.build_no_records(metadata))
                .await
        } else {
            let snapshot = self.table.snapshot();
            let question = query[0].original();
            let resolution = snapshot.resolve(question.name(), question.query_type());
            metadata.response_code = resolution.rcode;
            zone = resolution.zone;
            metadata.authoritative = resolution.authoritative;
            let response = builder.build(
                metadata,
                resolution.answers.iter().map(|r| r.as_ref()),
                resolution.authority,
                std::iter::empty(),
                std::iter::empty(),
            );
            response_handle.send_response(response).await
        };

        let info = sent.unwrap_or_else(|error| {
            tracing::debug!(%error, "could not send a DNS response");
            let mut failed = Metadata::response_from_request(&request.metadata);
            failed.response_code = ResponseCode::ServFail;
            ResponseInfo::from(Header {
                metadata: failed,
                counts: HeaderCounts::default(),
            })
        });
        let answered = Answered {
            qtype,
            rcode: info.response_code,
            zone,
            tcp: request.protocol() == hickory_server::net::xfer::Protocol::Tcp,
            ipv6: Answered::is_ipv6(request.src()),
            elapsed: started.elapsed(),
            request_bytes: request.as_slice().len(),
            response_bytes: 0,
        };
        (info, answered)
    }
}

//! The hickory-server [`RequestHandler`]: message-level rules (opcode, EDNS, question count,
//! class) around [`Snapshot::resolve`](crate::Snapshot::resolve).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hickory_proto::{
    op::{Edns, Header, HeaderCounts, Metadata, OpCode, ResponseCode},
    rr::{DNSClass, RecordType},
};
use hickory_server::{
    net::runtime::Time,
    server::{Request, RequestHandler, ResponseHandler, ResponseInfo},
    zone_handler::MessageResponseBuilder,
};

use crate::RecordTable;

/// UDP payload size we advertise (the DNS Flag Day 2020 value, safe from fragmentation).
pub const ADVERTISED_UDP_PAYLOAD: u16 = 1232;

/// Sees every answered query; the agent turns these into metrics.
pub trait QueryObserver: Send + Sync + 'static {
    /// Called once per response sent. `qtype` is `None` when the message had no usable question.
    fn observe(&self, qtype: Option<RecordType>, rcode: ResponseCode, elapsed: Duration);
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct NoObserver;

impl QueryObserver for NoObserver {
    fn observe(&self, _: Option<RecordType>, _: ResponseCode, _: Duration) {}
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

    /// The table this handler serves.
    pub fn table(&self) -> &Arc<RecordTable> {
        &self.table
    }
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
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
        let builder = MessageResponseBuilder::new(&request.queries, response_edns.as_ref());
        let query = request.queries.queries();
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
        self.observer
            .observe(qtype, info.response_code, started.elapsed());
        info
    }
}

//! One message in, at most one response out: the pre-decode walk, hickory's decoder, the
//! [`Handler`], and the encoding, shared by the UDP and TCP loops.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Instant,
};

use hickory_proto::{
    op::{Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode},
    rr::Record,
    serialize::binary::{BinEncodable, BinEncoder},
};
use hickory_server::{
    net::{NetError, xfer::Protocol},
    server::{Request, ResponseHandler, ResponseInfo},
    zone_handler::MessageResponse,
};

use crate::{
    Handler,
    precheck::{FORMERR, Verdict, bare_reply, precheck},
    ratelog::{Cause, MalformedLog},
};

/// Encodes the handler's response into a buffer the caller owns and reuses.
///
/// hickory hands the response to a `ResponseHandler` by value and keeps it, so the buffer is
/// shared through an `Arc`; only the task that owns the `Answerer` call uses it, so the lock is
/// never contended.
#[derive(Clone)]
struct Collect {
    protocol: Protocol,
    out: Arc<Mutex<Vec<u8>>>,
}

#[async_trait::async_trait]
impl ResponseHandler for Collect {
    async fn send_response<'a>(
        &mut self,
        response: MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
        >,
    ) -> Result<ResponseInfo, NetError> {
        let id = response.metadata().id;
        // RFC 1035 §4.2.1 and RFC 6891 §6.2.5: over UDP, the size the OPT we send advertises
        // (the handler clamps it to what the client can take), 512 without one; the encoder sets
        // TC when the answer does not fit. TCP takes any size.
        let max = match (self.protocol, response.edns()) {
            (Protocol::Udp, Some(edns)) => edns.max_payload().max(512),
            (Protocol::Udp, None) => 512,
            _ => u16::MAX,
        };
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        out.clear();
        let mut encoder = BinEncoder::new(&mut out);
        encoder.set_max_size(max);
        match response.destructive_emit(&mut encoder) {
            Ok(info) => Ok(info),
            Err(error) => {
                // As hickory's own server does: a response that cannot be encoded becomes a
                // SERVFAIL header.
                tracing::debug!(%error, "cannot encode a DNS response; sending SERVFAIL");
                out.clear();
                let mut metadata = Metadata::new(id, MessageType::Response, OpCode::Query);
                metadata.response_code = ResponseCode::ServFail;
                let header = Header {
                    metadata,
                    counts: HeaderCounts::default(),
                };
                let mut encoder = BinEncoder::new(&mut out);
                header.emit(&mut encoder)?;
                Ok(ResponseInfo::from(header))
            }
        }
    }
}

/// Answers messages for one socket or connection, reusing its buffers.
pub(crate) struct Answerer {
    handler: Handler,
    log: Arc<MalformedLog>,
    collect: Collect,
    /// Whether the common UDP queries skip hickory ([`crate::fast`]).
    fast_path: bool,
}

impl Answerer {
    pub fn new(handler: Handler, log: Arc<MalformedLog>, protocol: Protocol) -> Self {
        Answerer {
            handler,
            log,
            collect: Collect {
                protocol,
                out: Arc::new(Mutex::new(Vec::with_capacity(512))),
            },
            // TCP stays on hickory: its connections are few and long, the fast path is for the
            // datagram flood.
            fast_path: protocol == Protocol::Udp,
        }
    }

    /// The same answerer without the fast path, to compare the two.
    #[cfg(test)]
    pub fn without_fast_path(mut self) -> Self {
        self.fast_path = false;
        self
    }

    /// Answers `msg` from `peer` into `out` (cleared first). Returns false when nothing is to be
    /// sent.
    pub async fn answer(&self, msg: &[u8], peer: SocketAddr, out: &mut Vec<u8>) -> bool {
        match self.answer_now(msg, peer, out) {
            Some(send) => send,
            None => self.answer_general(msg, peer, out).await,
        }
    }

    /// The part of [`Answerer::answer`] that needs neither hickory nor an allocation: the
    /// pre-decode walk's verdicts and the fast path. `Some(send)` when that settles the message
    /// (`out` holds the answer when `send`), `None` when it needs [`Answerer::answer_general`].
    pub fn answer_now(&self, msg: &[u8], peer: SocketAddr, out: &mut Vec<u8>) -> Option<bool> {
        let started = Instant::now();
        out.clear();
        match precheck(msg) {
            Verdict::Drop(cause) => {
                self.log.note(cause, peer);
                Some(false)
            }
            Verdict::Reply { rcode, cause } => {
                self.log.note(cause, peer);
                Some(self.bare(msg, rcode, peer, started, out))
            }
            Verdict::Decode if self.fast_path => {
                let snapshot = self.handler.table().snapshot();
                let (qtype, rcode, zone) = crate::fast::answer(msg, &snapshot, out)?;
                self.handler.observer().observe(&crate::Answered {
                    qtype: Some(qtype),
                    rcode,
                    zone: Some(zone),
                    tcp: self.collect.protocol == Protocol::Tcp,
                    ipv6: crate::Answered::is_ipv6(peer),
                    elapsed: started.elapsed(),
                    request_bytes: msg.len(),
                    response_bytes: out.len(),
                });
                Some(true)
            }
            Verdict::Decode => None,
        }
    }

    /// Answers, through hickory and the [`Handler`], a message that passed the pre-decode walk
    /// and that [`Answerer::answer_now`] left. Returns false when nothing is to be sent.
    pub async fn answer_general(&self, msg: &[u8], peer: SocketAddr, out: &mut Vec<u8>) -> bool {
        let started = Instant::now();
        out.clear();
        match Request::from_bytes(msg.to_vec(), peer, self.collect.protocol) {
            Ok(request) => {
                let (_, answered) = self.handler.respond(&request, self.collect.clone()).await;
                // Swap buffers rather than copy: both stay allocated for the next one.
                {
                    let mut collected = self.collect.out.lock().unwrap_or_else(|e| e.into_inner());
                    std::mem::swap(&mut *collected, out);
                }
                self.handler.observer().observe(&crate::Answered {
                    response_bytes: out.len(),
                    ..answered
                });
                !out.is_empty()
            }
            Err(error) => {
                tracing::debug!(%peer, %error, "undecodable DNS message");
                self.log.note(Cause::Undecodable, peer);
                self.bare(msg, FORMERR, peer, started, out)
            }
        }
    }

    /// A bare header with `rcode` into `out`, reported to the observer.
    fn bare(
        &self,
        msg: &[u8],
        rcode: u8,
        peer: SocketAddr,
        started: Instant,
        out: &mut Vec<u8>,
    ) -> bool {
        out.extend_from_slice(&bare_reply(msg, rcode));
        self.handler.observer().observe(&crate::Answered {
            qtype: None,
            rcode: ResponseCode::from(0, rcode),
            zone: None,
            tcp: self.collect.protocol == Protocol::Tcp,
            ipv6: crate::Answered::is_ipv6(peer),
            elapsed: started.elapsed(),
            request_bytes: msg.len(),
            response_bytes: out.len(),
        });
        true
    }
}

use std::{
    net::{IpAddr, SocketAddr},
    str::FromStr,
    sync::{Arc, Mutex},
};

use hickory_proto::{
    op::{Edns, Message, MessageType, Query, ResponseCode},
    rr::{Name, Record, RecordType},
    serialize::binary::BinEncoder,
};
use hickory_server::{
    net::{NetError, runtime::TokioTime, xfer::Protocol},
    server::{Request, RequestHandler, ResponseHandler, ResponseInfo},
    zone_handler::MessageResponse,
};
use xcc_dns::{Handler, HostRecords, NoObserver, RecordTable, Srv, Zone, ZoneSettings};

/// Encodes responses the way the server does for the protocol, and keeps the bytes.
#[derive(Clone)]
pub struct Capture {
    protocol: Protocol,
    pub bytes: Arc<Mutex<Option<Vec<u8>>>>,
}

#[async_trait::async_trait]
impl ResponseHandler for Capture {
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
        let max = match (self.protocol, response.edns()) {
            (Protocol::Udp, Some(edns)) => edns.max_payload(),
            (Protocol::Udp, None) => 512,
            _ => u16::MAX,
        };
        let mut bytes = Vec::new();
        let mut encoder = BinEncoder::new(&mut bytes);
        encoder.set_max_size(max);
        let info = response.destructive_emit(&mut encoder)?;
        *self.bytes.lock().unwrap() = Some(bytes);
        Ok(info)
    }
}

pub fn name(s: &str) -> Name {
    Name::from_str(s).unwrap()
}

pub fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

pub fn addresses(list: &[&str]) -> HostRecords {
    HostRecords {
        addresses: ips(list),
        cname: None,
        ttl: None,
        srv: Vec::new(),
    }
}

pub fn cname(target: &str) -> HostRecords {
    HostRecords {
        addresses: vec![],
        cname: Some(name(target)),
        ttl: None,
        srv: Vec::new(),
    }
}

/// SRV records to `targets`, each `0 <weight> <port> <target>`.
pub fn srv(weight: u16, port: u16, targets: &[&str]) -> HostRecords {
    HostRecords {
        srv: targets
            .iter()
            .map(|t| Srv {
                priority: 0,
                weight,
                port,
                target: name(t),
            })
            .collect(),
        ..HostRecords::default()
    }
}

pub const GW: &str = "gateway.cluster-a.dev-team.clusters.xcc.test.";

/// The table most tests use: XCC gateway names, plain hosts, CNAMEs, and a big record set.
pub fn fixture() -> Arc<RecordTable> {
    let table = RecordTable::new(
        vec![
            Zone::new("xcc.test").unwrap(),
            Zone::new("other.test").unwrap(),
        ],
        ZoneSettings {
            ttl: 30,
            negative_ttl: 15,
        },
    )
    .unwrap();
    let gw = addresses(&["192.0.2.11", "192.0.2.10", "2001:db8::10"]);
    let big: Vec<String> = (0..100).map(|i| format!("198.51.100.{i}")).collect();
    let big: Vec<&str> = big.iter().map(String::as_str).collect();
    table
        .set_source(
            "fixture",
            vec![
                (name(GW), gw.clone()),
                (name(&format!("*.{GW}")), gw),
                (name("*.w.xcc.test."), addresses(&["192.0.2.50"])),
                (name("v4only.xcc.test."), addresses(&["192.0.2.1"])),
                (name("alias.xcc.test."), cname("v4only.xcc.test.")),
                (name("alias2.xcc.test."), cname("ALIAS.xcc.test.")),
                (name("external.xcc.test."), cname("example.com.")),
                (name("dangling.xcc.test."), cname("missing.xcc.test.")),
                (name("loop1.xcc.test."), cname("loop2.xcc.test.")),
                (name("loop2.xcc.test."), cname("loop1.xcc.test.")),
                (name("big.xcc.test."), addresses(&big)),
                (name("host.other.test."), addresses(&["203.0.113.7"])),
                // A service with a virtual address, on tcp/42 and udp/42: one SRV record at its
                // name, to itself, and one per named port.
                (name("svc.xcc.test."), addresses(&["192.0.2.42"])),
                (name("svc.xcc.test."), srv(100, 42, &["svc.xcc.test."])),
                (name("svc.xcc.test."), srv(100, 42, &["svc.xcc.test."])),
                (
                    name("_hi._tcp.svc.xcc.test."),
                    srv(100, 42, &["svc.xcc.test."]),
                ),
                // A service without one: an SRV record per endpoint, nothing else.
                (
                    name("headless.xcc.test."),
                    srv(
                        50,
                        42,
                        &["web-0.c1.headless.xcc.test.", "web-1.c1.headless.xcc.test."],
                    ),
                ),
                (
                    name("web-0.c1.headless.xcc.test."),
                    addresses(&["10.0.0.1"]),
                ),
                (
                    name("web-1.c1.headless.xcc.test."),
                    addresses(&["10.0.0.2"]),
                ),
            ],
        )
        .unwrap();
    // The same record from another source is served once.
    table
        .set_source(
            "fixture-2",
            vec![(name("svc.xcc.test."), srv(100, 42, &["SVC.xcc.test."]))],
        )
        .unwrap();
    Arc::new(table)
}

/// A query message; `edns` adds an OPT with that payload size.
pub fn query(qname: &str, qtype: RecordType) -> Message {
    let mut msg = Message::query();
    msg.metadata.id = 4242;
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(name(qname), qtype));
    msg
}

pub fn with_edns(mut msg: Message, payload: u16, version: u8) -> Message {
    let mut edns = Edns::new();
    edns.set_max_payload(payload);
    edns.set_version(version);
    msg.set_edns(edns);
    msg
}

/// Runs `bytes` through the handler; `None` when the handler sent nothing.
pub fn exchange_bytes(
    table: &Arc<RecordTable>,
    bytes: Vec<u8>,
    protocol: Protocol,
) -> Option<Vec<u8>> {
    let src: SocketAddr = "127.0.0.1:53000".parse().unwrap();
    let request = Request::from_bytes(bytes, src, protocol).ok()?;
    let handler = Handler::new(table.clone(), Arc::new(NoObserver));
    let capture = Capture {
        protocol,
        bytes: Arc::default(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(handler.handle_request::<_, TokioTime>(&request, capture.clone()));
    capture.bytes.lock().unwrap().take()
}

pub fn exchange_on(table: &Arc<RecordTable>, msg: &Message, protocol: Protocol) -> Message {
    let bytes = exchange_bytes(table, msg.to_vec().unwrap(), protocol).expect("a response");
    Message::from_vec(&bytes).expect("the response parses")
}

pub fn exchange(table: &Arc<RecordTable>, msg: &Message) -> Message {
    exchange_on(table, msg, Protocol::Udp)
}

/// Asserts the parts every response shares with its query.
pub fn assert_response_of(resp: &Message, q: &Message) {
    assert_eq!(resp.metadata.id, q.metadata.id);
    assert_eq!(resp.metadata.message_type, MessageType::Response);
    assert_eq!(resp.metadata.op_code, q.metadata.op_code);
    assert_eq!(
        resp.metadata.recursion_desired,
        q.metadata.recursion_desired
    );
    assert!(!resp.metadata.recursion_available);
    assert_eq!(resp.queries, q.queries, "question echoed byte for byte");
}

pub fn rcode(resp: &Message) -> ResponseCode {
    resp.metadata.response_code
}

pub fn answer_ips(resp: &Message) -> Vec<IpAddr> {
    resp.answers
        .iter()
        .filter_map(|r| r.data.ip_addr())
        .collect()
}

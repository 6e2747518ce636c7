//! The serving loops over real sockets on 127.0.0.1: answers over UDP and TCP, malformed input
//! answered from the header alone, and the TCP bounds (connection cap, stalled queries).

use std::{net::SocketAddr, sync::Arc, time::Duration};

use hickory_proto::{
    op::{Message, ResponseCode},
    rr::RecordType,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpStream, UdpSocket},
};
use xcc_dns::{Handler, NoObserver, ServeOptions, Sockets};

use crate::support::*;

/// Generous bound for anything the server should do "soon": a hang fails the test instead of
/// blocking it. Not a performance bar.
const PATIENCE: Duration = Duration::from_secs(20);

async fn start(options: ServeOptions) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let (addr, stop, _serving) = start_serving(options).await;
    (addr, stop)
}

/// Like [`start`], with the server's task to see how it ends.
async fn start_serving(
    options: ServeOptions,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), xcc_dns::Error>>,
) {
    // Port 0 picks a free UDP port; TCP then binds the same number, which another process may
    // hold on a busy machine: pick again then.
    let sockets = (0..20)
        .find_map(|_| Sockets::bind("127.0.0.1:0".parse().unwrap(), 2).ok())
        .expect("a port free for both UDP and TCP");
    let addr = sockets.local_addr().unwrap();
    let handler = Handler::new(fixture(), Arc::new(NoObserver));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(xcc_dns::serve_with(handler, sockets, options, async {
        let _ = stopped.await;
    }));
    (addr, stop, serving)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn udp_exchange(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(bytes, addr).await.unwrap();
    let mut buf = vec![0u8; 65535];
    let (len, _) = tokio::time::timeout(PATIENCE, socket.recv_from(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    buf.truncate(len);
    buf
}

async fn tcp_send(stream: &mut TcpStream, bytes: &[u8]) {
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(bytes);
    stream.write_all(&framed).await.unwrap();
}

async fn tcp_receive(stream: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 2];
    tokio::time::timeout(PATIENCE, stream.read_exact(&mut len))
        .await
        .expect("an answer")
        .unwrap();
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut buf).await.unwrap();
    buf
}

/// Waits until the server closes `stream` (a read returns end of file or an error).
async fn closed_by_server(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => continue,
            Err(_) => panic!("the server kept the connection open"),
        }
    }
}

#[test]
fn udp_and_tcp_answer_the_same() {
    runtime().block_on(async {
        let (addr, _stop) = start(ServeOptions::default()).await;
        let q = with_edns(query(GW, RecordType::A), 1232, 0);
        let udp = Message::from_vec(&udp_exchange(addr, &q.to_vec().unwrap()).await).unwrap();
        assert_response_of(&udp, &q);
        assert_eq!(rcode(&udp), ResponseCode::NoError);
        assert_eq!(answer_ips(&udp).len(), 2);

        let mut stream = TcpStream::connect(addr).await.unwrap();
        // Two queries pipelined on one connection, both answered, in order.
        let big = query("big.xcc.test.", RecordType::A);
        tcp_send(&mut stream, &q.to_vec().unwrap()).await;
        tcp_send(&mut stream, &big.to_vec().unwrap()).await;
        let first = Message::from_vec(&tcp_receive(&mut stream).await).unwrap();
        assert_eq!(answer_ips(&first), answer_ips(&udp));
        let second = Message::from_vec(&tcp_receive(&mut stream).await).unwrap();
        assert_response_of(&second, &big);
        assert_eq!(answer_ips(&second).len(), 100, "TCP serves the full answer");
        assert!(!second.metadata.truncation);

        // The same big answer over UDP without EDNS is truncated to 512 bytes.
        let udp_big = udp_exchange(addr, &big.to_vec().unwrap()).await;
        assert!(udp_big.len() <= 512);
        assert!(Message::from_vec(&udp_big).unwrap().metadata.truncation);
    });
}

#[test]
fn malformed_messages_get_a_bare_formerr_or_nothing() {
    runtime().block_on(async {
        let (addr, _stop) = start(ServeOptions::default()).await;
        let mut huge_counts = query(GW, RecordType::A).to_vec().unwrap();
        huge_counts[4..12].copy_from_slice(&[0xFF; 8]);
        let reply = udp_exchange(addr, &huge_counts).await;
        assert_eq!(reply.len(), 12);
        let reply = Message::from_vec(&reply).unwrap();
        assert_eq!(reply.metadata.id, 4242);
        assert_eq!(rcode(&reply), ResponseCode::FormErr);

        // An EDNS cookie one byte short of a client cookie (RFC 7873 §5.2.2).
        let mut short_cookie = with_edns(query(GW, RecordType::A), 1232, 0)
            .to_vec()
            .unwrap();
        let opt_rdlen = short_cookie.len() - 2;
        short_cookie[opt_rdlen..].copy_from_slice(&11u16.to_be_bytes());
        short_cookie.extend_from_slice(&[0, 10, 0, 7, 1, 2, 3, 4, 5, 6, 7]);
        let reply = Message::from_vec(&udp_exchange(addr, &short_cookie).await).unwrap();
        assert_eq!(rcode(&reply), ResponseCode::FormErr);

        // A response sent to the server gets nothing back; the next query is still answered.
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut response = query(GW, RecordType::A).to_vec().unwrap();
        response[2] |= 0x80;
        socket.send_to(&response, addr).await.unwrap();
        let q = query(GW, RecordType::A);
        socket.send_to(&q.to_vec().unwrap(), addr).await.unwrap();
        let mut buf = vec![0u8; 1500];
        let (len, _) = tokio::time::timeout(PATIENCE, socket.recv_from(&mut buf))
            .await
            .unwrap()
            .unwrap();
        let reply = Message::from_vec(&buf[..len]).unwrap();
        assert_response_of(&reply, &q);

        // Over TCP too, and the connection stays usable.
        let mut stream = TcpStream::connect(addr).await.unwrap();
        tcp_send(&mut stream, &huge_counts).await;
        let reply = Message::from_vec(&tcp_receive(&mut stream).await).unwrap();
        assert_eq!(rcode(&reply), ResponseCode::FormErr);
        tcp_send(&mut stream, &q.to_vec().unwrap()).await;
        let reply = Message::from_vec(&tcp_receive(&mut stream).await).unwrap();
        assert_eq!(rcode(&reply), ResponseCode::NoError);
    });
}

#[test]
fn tcp_length_beyond_any_query_closes_the_connection() {
    runtime().block_on(async {
        let (addr, _stop) = start(ServeOptions::default()).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&[0xFF, 0xFF, 0, 0]).await.unwrap();
        closed_by_server(&mut stream).await;
    });
}

#[test]
fn at_the_cap_a_new_connection_closes_the_longest_idle_one() {
    runtime().block_on(async {
        let (addr, _stop) = start(ServeOptions {
            tcp_max_connections: 2,
            ..ServeOptions::default()
        })
        .await;
        let q = query(GW, RecordType::A).to_vec().unwrap();
        let mut first = TcpStream::connect(addr).await.unwrap();
        // A round trip on each proves the server has accepted (and registered) it.
        tcp_send(&mut first, &q).await;
        tcp_receive(&mut first).await;
        let mut second = TcpStream::connect(addr).await.unwrap();
        tcp_send(&mut second, &q).await;
        tcp_receive(&mut second).await;
        let mut third = TcpStream::connect(addr).await.unwrap();
        tcp_send(&mut third, &q).await;
        tcp_receive(&mut third).await;
        closed_by_server(&mut first).await;
        // The survivors still answer.
        tcp_send(&mut second, &q).await;
        tcp_receive(&mut second).await;
    });
}

#[test]
fn a_half_sent_query_is_dropped_after_the_read_timeout() {
    runtime().block_on(async {
        let (addr, _stop) = start(ServeOptions {
            tcp_read_timeout: Duration::from_millis(200),
            ..ServeOptions::default()
        })
        .await;
        let q = query(GW, RecordType::A).to_vec().unwrap();
        let mut stalled = TcpStream::connect(addr).await.unwrap();
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q[..5]);
        stalled.write_all(&framed).await.unwrap();
        closed_by_server(&mut stalled).await;
    });
}

/// A burst of queries of every kind, sent without waiting so that the server receives several
/// in one call: the fast path's hits, queries that need the general path, malformed ones and a
/// response that must go unanswered. Each gets the answer it would get alone.
#[test]
fn a_burst_of_mixed_queries_is_answered_in_full() {
    runtime().block_on(async {
        let (addr, _stop) = start(ServeOptions::default()).await;
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut huge_counts = query(GW, RecordType::A).to_vec().unwrap();
        huge_counts[4..12].copy_from_slice(&[0xFF; 8]);
        let kinds: Vec<(Vec<u8>, &str)> = vec![
            (query(GW, RecordType::A).to_vec().unwrap(), "A hit"),
            (
                with_edns(query(GW, RecordType::AAAA), 1232, 0)
                    .to_vec()
                    .unwrap(),
                "AAAA hit",
            ),
            (query("xcc.test.", RecordType::SOA).to_vec().unwrap(), "SOA"),
            (
                query("missing.xcc.test.", RecordType::A).to_vec().unwrap(),
                "NXDOMAIN",
            ),
            (
                query("v4only.xcc.test.", RecordType::AAAA)
                    .to_vec()
                    .unwrap(),
                "NODATA",
            ),
            (
                query("a.example.com.", RecordType::A).to_vec().unwrap(),
                "REFUSED",
            ),
            (
                with_edns(query(GW, RecordType::A), 1232, 1)
                    .to_vec()
                    .unwrap(),
                "BADVERS",
            ),
            (huge_counts, "FORMERR"),
        ];
        let rounds = 12u16;
        let mut expected = 0;
        for round in 0..rounds {
            for (index, (bytes, _)) in kinds.iter().enumerate() {
                let mut bytes = bytes.clone();
                let id = round * 100 + index as u16;
                bytes[..2].copy_from_slice(&id.to_be_bytes());
                socket.send_to(&bytes, addr).await.unwrap();
                expected += 1;
            }
            // A response sent to the server, in the middle of the burst: no answer.
            let mut response = query(GW, RecordType::A).to_vec().unwrap();
            response[..2].copy_from_slice(&9999u16.to_be_bytes());
            response[2] |= 0x80;
            socket.send_to(&response, addr).await.unwrap();
        }
        let mut seen = std::collections::HashSet::new();
        let mut buf = vec![0u8; 65535];
        while seen.len() < expected {
            let (len, _) = tokio::time::timeout(PATIENCE, socket.recv_from(&mut buf))
                .await
                .expect("every query answered")
                .unwrap();
            let reply = Message::from_vec(&buf[..len]).unwrap();
            let id = reply.metadata.id;
            assert_ne!(id, 9999, "a response was answered");
            assert!(seen.insert(id), "query {id} answered twice");
            let kind = kinds[usize::from(id % 100)].1;
            let code = rcode(&reply);
            match kind {
                "A hit" => {
                    assert_eq!(code, ResponseCode::NoError, "{kind}");
                    assert_eq!(answer_ips(&reply).len(), 2, "{kind}");
                    assert!(reply.metadata.authoritative, "{kind}");
                }
                "AAAA hit" => {
                    assert_eq!(code, ResponseCode::NoError, "{kind}");
                    assert_eq!(
                        answer_ips(&reply),
                        vec!["2001:db8::10".parse::<std::net::IpAddr>().unwrap()],
                        "{kind}"
                    );
                    assert!(reply.edns.is_some(), "{kind}");
                }
                "SOA" => {
                    assert_eq!(code, ResponseCode::NoError, "{kind}");
                    assert_eq!(reply.answers.len(), 1, "{kind}");
                    assert_eq!(reply.answers[0].record_type(), RecordType::SOA, "{kind}");
                }
                "NXDOMAIN" => {
                    assert_eq!(code, ResponseCode::NXDomain, "{kind}");
                    assert_eq!(reply.authorities.len(), 1, "{kind}: the SOA");
                }
                "NODATA" => {
                    assert_eq!(code, ResponseCode::NoError, "{kind}");
                    assert!(reply.answers.is_empty(), "{kind}");
                    assert_eq!(reply.authorities.len(), 1, "{kind}: the SOA");
                }
                "REFUSED" => assert_eq!(code, ResponseCode::Refused, "{kind}"),
                // BADVERS and BADSIG share the code 16; decoders name it BADSIG.
                "BADVERS" => assert_eq!(u16::from(code), 16, "{kind}"),
                "FORMERR" => {
                    assert_eq!(code, ResponseCode::FormErr, "{kind}");
                    assert_eq!(len, 12, "{kind}: a bare header");
                }
                _ => unreachable!(),
            }
        }
    });
}

/// Shutdown ends the server with success, promptly, and releases the port.
#[test]
fn shutdown_stops_serving_and_releases_the_port() {
    runtime().block_on(async {
        let (addr, stop, serving) = start_serving(ServeOptions::default()).await;
        let q = query(GW, RecordType::A);
        let reply = Message::from_vec(&udp_exchange(addr, &q.to_vec().unwrap()).await).unwrap();
        assert_eq!(rcode(&reply), ResponseCode::NoError);
        stop.send(()).unwrap();
        let ended = tokio::time::timeout(PATIENCE, serving)
            .await
            .expect("serve_with returns after shutdown")
            .unwrap();
        assert!(ended.is_ok(), "{ended:?}");
        // Every UDP socket of the server is closed: the port binds again without SO_REUSEPORT.
        std::net::UdpSocket::bind(addr).expect("the UDP port is free after shutdown");
    });
}

//! One question to one DNS server: the SOA of a zone, over UDP, as a pod asks its CoreDNS.
//!
//! A CoreDNS replica that forwards the zone to xcc-agent answers NOERROR with the zone's own SOA
//! (the agent is authoritative for it). Before it has loaded the forward it answers otherwise:
//! SERVFAIL or REFUSED, or an upstream resolver's NXDOMAIN carrying the root's SOA, which is why
//! the owner of the SOA is compared with the zone.
//!
//! The message is built and read here (a dozen bytes of header, the question, the answer
//! records' owners and types): nothing else of DNS is needed.

use std::{fmt, net::SocketAddr, time::Duration};

use tokio::net::UdpSocket;

/// Record type SOA.
const SOA: u16 = 6;
/// Class IN.
const IN: u16 = 1;
/// Header flags of the query: a standard query, recursion desired (as a stub resolver asks).
const QUERY_FLAGS: u16 = 0x0100;
/// QR: the message is a response.
const RESPONSE: u16 = 0x8000;
/// Compression pointers followed at most in one name (a loop otherwise).
const MAX_POINTERS: usize = 32;

/// What one replica answered for the SOA of one zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// NOERROR with the zone's SOA: the forward to the agent is live.
    Forwards,
    /// An answer without the zone's SOA: its response code, and what it lacked.
    Answered(String),
    /// No answer within the query timeout.
    Silent(Duration),
    /// The query could not be sent, or the answer was not DNS.
    Failed(String),
}

impl Answer {
    pub fn forwards(&self) -> bool {
        matches!(self, Answer::Forwards)
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Forwards => f.write_str("answers with the zone's SOA"),
            Answer::Answered(what) => write!(f, "answers {what}"),
            Answer::Silent(wait) => write!(
                f,
                "does not answer within {}",
                humantime::format_duration(*wait)
            ),
            Answer::Failed(why) => write!(f, "cannot be asked: {why}"),
        }
    }
}

/// Asks `server` over UDP for the SOA of `zone`, waiting at most `wait` for the answer.
pub async fn ask(server: SocketAddr, zone: &str, wait: Duration) -> Answer {
    let id: u16 = rand_id();
    let query = match query(id, zone) {
        Ok(query) => query,
        Err(why) => return Answer::Failed(why),
    };
    let local: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let exchange = async {
        let socket = UdpSocket::bind(local).await?;
        socket.connect(server).await?;
        socket.send(&query).await?;
        let mut buffer = vec![0u8; 4096];
        loop {
            let len = socket.recv(&mut buffer).await?;
            // Another message on this port (a late answer to nothing we asked): not ours.
            if len >= 2 && u16::from_be_bytes([buffer[0], buffer[1]]) == id {
                return std::io::Result::Ok(classify(&buffer[..len], zone));
            }
        }
    };
    match tokio::time::timeout(wait, exchange).await {
        Err(_) => Answer::Silent(wait),
        Ok(Err(error)) => Answer::Failed(error.to_string()),
        Ok(Ok(answer)) => answer,
    }
}

/// A message id that differs between queries and runs (no cryptographic need: the socket is
/// connected to the server and used once).
fn rand_id() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    // Any 16 bits of the hash.
    u16::try_from(hasher.finish() & 0xffff).unwrap_or_default()
}

/// The labels of `zone` (no empty label; a trailing dot allowed).
fn labels(zone: &str) -> Result<Vec<&str>, String> {
    let labels: Vec<&str> = zone.trim_end_matches('.').split('.').collect();
    if labels.iter().any(|l| l.is_empty() || l.len() > 63) {
        return Err(format!("{zone:?} is not a domain name"));
    }
    Ok(labels)
}

/// The query message: header, then the question (zone, SOA, IN).
fn query(id: u16, zone: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(12 + zone.len() + 6);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&QUERY_FLAGS.to_be_bytes());
    // One question, no records.
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    for label in labels(zone)? {
        // A label is at most 63 bytes (checked above).
        out.push(u8::try_from(label.len()).map_err(|e| e.to_string())?);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&SOA.to_be_bytes());
    out.extend_from_slice(&IN.to_be_bytes());
    Ok(out)
}

/// Reads a response: NOERROR with an SOA record owned by `zone` in the answer section is
/// [`Answer::Forwards`]; anything else says what came instead.
pub fn classify(message: &[u8], zone: &str) -> Answer {
    match read(message, zone) {
        Ok(answer) => answer,
        Err(why) => Answer::Failed(format!("a malformed answer ({why})")),
    }
}

fn read(message: &[u8], zone: &str) -> Result<Answer, &'static str> {
    let word = |at: usize| -> Result<u16, &'static str> {
        message
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or("cut short")
    };
    let flags = word(2)?;
    if flags & RESPONSE == 0 {
        return Err("not a response");
    }
    let rcode = flags & 0x000f;
    let questions = word(4)?;
    let answers = word(6)?;
    let mut at = 12;
    for _ in 0..questions {
        at = read_name(message, at)?.1 + 4;
    }
    let mut soa = false;
    for _ in 0..answers {
        let (owner, next) = read_name(message, at)?;
        let rtype = word(next)?;
        let rdlength = usize::from(word(next + 8)?);
        at = next + 10 + rdlength;
        if at > message.len() {
            return Err("cut short");
        }
        soa |= rtype == SOA && same_name(&owner, zone);
    }
    Ok(match (rcode, soa) {
        (0, true) => Answer::Forwards,
        (0, false) => Answer::Answered("NOERROR without the zone's SOA".into()),
        (3, _) => Answer::Answered(
            "NXDOMAIN (not from xcc-agent: the zone exists there; an upstream resolver's answer)"
                .into(),
        ),
        (rcode, _) => Answer::Answered(rcode_name(rcode)),
    })
}

fn same_name(a: &str, b: &str) -> bool {
    a.trim_end_matches('.')
        .eq_ignore_ascii_case(b.trim_end_matches('.'))
}

fn rcode_name(rcode: u16) -> String {
    match rcode {
        1 => "FORMERR".into(),
        2 => "SERVFAIL".into(),
        4 => "NOTIMP".into(),
        5 => "REFUSED".into(),
        other => format!("response code {other}"),
    }
}

/// The name at `at` (dotted, compression pointers followed) and the position after it.
fn read_name(message: &[u8], mut at: usize) -> Result<(String, usize), &'static str> {
    let mut name = String::new();
    // Where the name ends in the message: after its first pointer, or its root label.
    let mut end = None;
    let mut pointers = 0;
    loop {
        let len = *message.get(at).ok_or("cut short")?;
        match len {
            0 => {
                return Ok((name, end.unwrap_or(at + 1)));
            }
            l if l & 0xc0 == 0xc0 => {
                let low = *message.get(at + 1).ok_or("cut short")?;
                end.get_or_insert(at + 2);
                pointers += 1;
                if pointers > MAX_POINTERS {
                    return Err("a compression loop");
                }
                at = usize::from(u16::from_be_bytes([l & 0x3f, low]));
            }
            l if l & 0xc0 == 0 => {
                let label = message
                    .get(at + 1..at + 1 + usize::from(l))
                    .ok_or("cut short")?;
                if !name.is_empty() {
                    name.push('.');
                }
                name.push_str(&String::from_utf8_lossy(label));
                at += 1 + usize::from(l);
            }
            _ => return Err("an unknown label type"),
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use hickory_proto::{
        op::{Message, ResponseCode},
        rr::{Name, RData, Record, rdata::SOA as SoaData},
    };
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };

    /// A response to `request` with `code`, and the SOA of `soa_owner` in the answer section
    /// when given (hickory's encoder, with name compression: not the code under test).
    pub fn response(request: &[u8], code: ResponseCode, soa_owner: Option<&str>) -> Vec<u8> {
        let request = Message::from_vec(request).unwrap();
        let mut response = Message::response(request.metadata.id, request.metadata.op_code);
        response.metadata.response_code = code;
        response.add_queries(request.queries.clone());
        if let Some(owner) = soa_owner {
            let owner = Name::from_ascii(format!("{owner}.")).unwrap();
            let soa = SoaData::new(
                Name::from_ascii(format!("ns.{owner}")).unwrap(),
                Name::from_ascii(format!("hostmaster.{owner}")).unwrap(),
                1,
                7200,
                1800,
                86400,
                5,
            );
            response.add_answer(Record::from_rdata(owner, 30, RData::SOA(soa)));
        }
        response.to_vec().unwrap()
    }

    /// A DNS server on the loopback that answers SERVFAIL until `switch` is set, then the SOA
    /// of whatever zone it is asked for (a CoreDNS replica before and after its reload).
    pub async fn coredns(switch: Arc<AtomicBool>) -> SocketAddr {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let address = socket.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buffer = [0u8; 512];
            while let Ok((len, from)) = socket.recv_from(&mut buffer).await {
                let request = &buffer[..len];
                let zone = Message::from_vec(request).unwrap().queries[0]
                    .name()
                    .to_ascii();
                let answer = if switch.load(Ordering::SeqCst) {
                    response(
                        request,
                        ResponseCode::NoError,
                        Some(zone.trim_end_matches('.')),
                    )
                } else {
                    response(request, ResponseCode::ServFail, None)
                };
                let _ = socket.send_to(&answer, from).await;
            }
        });
        address
    }

    #[test]
    fn the_query_is_the_zones_soa_with_recursion_desired() {
        let bytes = query(0x1234, "Clusters.Example.com.").unwrap();
        let message = Message::from_vec(&bytes).unwrap();
        assert_eq!(message.metadata.id, 0x1234);
        assert!(message.metadata.recursion_desired);
        assert_eq!(message.queries.len(), 1);
        assert_eq!(
            message.queries[0].name().to_ascii(),
            "Clusters.Example.com."
        );
        assert_eq!(
            message.queries[0].query_type(),
            hickory_proto::rr::RecordType::SOA
        );
        assert!(query(1, "a..b").is_err());
    }

    #[test]
    fn only_noerror_with_the_zones_own_soa_forwards() {
        let request = query(7, "xcc.test").unwrap();
        let cases = [
            (ResponseCode::NoError, Some("xcc.test"), Answer::Forwards),
            (ResponseCode::NoError, Some("XCC.Test"), Answer::Forwards),
            (
                ResponseCode::ServFail,
                None,
                Answer::Answered("SERVFAIL".into()),
            ),
            (
                ResponseCode::Refused,
                None,
                Answer::Answered("REFUSED".into()),
            ),
            (
                ResponseCode::NoError,
                Some("test"),
                Answer::Answered("NOERROR without the zone's SOA".into()),
            ),
            (
                ResponseCode::NoError,
                None,
                Answer::Answered("NOERROR without the zone's SOA".into()),
            ),
        ];
        for (code, owner, want) in cases {
            let bytes = response(&request, code, owner);
            assert_eq!(classify(&bytes, "xcc.test"), want, "{code:?} {owner:?}");
        }
        let nxdomain = classify(
            &response(&request, ResponseCode::NXDomain, None),
            "xcc.test",
        );
        assert!(nxdomain.to_string().contains("NXDOMAIN"), "{nxdomain}");
        assert!(!nxdomain.forwards());
    }

    #[test]
    fn malformed_answers_are_named_not_trusted() {
        let request = query(7, "xcc.test").unwrap();
        let good = response(&request, ResponseCode::NoError, Some("xcc.test"));
        for cut in [3, 12, good.len() - 1] {
            let answer = classify(&good[..cut], "xcc.test");
            assert!(
                matches!(&answer, Answer::Failed(why) if why.contains("malformed")),
                "{cut}: {answer}"
            );
        }
        // The query itself (QR not set) is no answer.
        assert!(matches!(classify(&request, "xcc.test"), Answer::Failed(_)));
        // A pointer to itself.
        let mut looped = good[..12].to_vec();
        looped[4..6].copy_from_slice(&1u16.to_be_bytes());
        looped.extend_from_slice(&[0xc0, 12]);
        assert!(matches!(classify(&looped, "xcc.test"), Answer::Failed(_)));
    }

    #[tokio::test]
    async fn asks_a_server_over_udp_and_waits_at_most_the_timeout() {
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let serve = tokio::spawn(async move {
            let mut buffer = [0u8; 512];
            let (len, from) = server.recv_from(&mut buffer).await.unwrap();
            // A stray message first (another id), then the answer.
            let mut stray = response(&buffer[..len], ResponseCode::Refused, None);
            stray[0] ^= 0xff;
            server.send_to(&stray, from).await.unwrap();
            let answer = response(&buffer[..len], ResponseCode::NoError, Some("xcc.test"));
            server.send_to(&answer, from).await.unwrap();
            server
        });
        let answer = ask(addr, "xcc.test", Duration::from_secs(5)).await;
        assert_eq!(answer, Answer::Forwards);
        // The same socket, now silent.
        let _quiet = serve.await.unwrap();
        let answer = ask(addr, "xcc.test", Duration::from_millis(200)).await;
        assert_eq!(answer, Answer::Silent(Duration::from_millis(200)));
        assert_eq!(answer.to_string(), "does not answer within 200ms");
    }
}

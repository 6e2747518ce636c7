//! Message-level rules: opcodes, question counts, classes, EDNS(0), truncation.

use hickory_proto::{
    op::{Message, OpCode, Query, ResponseCode},
    rr::{DNSClass, RecordType},
};
use hickory_server::net::xfer::Protocol;

use crate::support::*;

#[test]
fn opcodes_other_than_query_are_notimp() {
    let table = fixture();
    for op in [OpCode::Status, OpCode::Notify, OpCode::Update] {
        let mut q = query(GW, RecordType::A);
        q.metadata.op_code = op;
        let resp = exchange(&table, &q);
        assert_eq!(rcode(&resp), ResponseCode::NotImp, "{op:?}");
        assert_eq!(resp.metadata.op_code, op);
        assert!(resp.answers.is_empty());
    }
}

#[test]
fn zero_or_two_questions_are_formerr() {
    let table = fixture();
    let mut none = Message::query();
    none.metadata.id = 7;
    assert_eq!(rcode(&exchange(&table, &none)), ResponseCode::FormErr);

    let mut two = query(GW, RecordType::A);
    two.add_query(Query::query(name("v4only.xcc.test."), RecordType::A));
    let resp = exchange(&table, &two);
    assert_eq!(rcode(&resp), ResponseCode::FormErr);
    assert!(resp.answers.is_empty());
}

#[test]
fn classes_other_than_in_are_refused() {
    let table = fixture();
    let mut q = Message::query();
    let mut question = Query::query(name(GW), RecordType::A);
    question.set_query_class(DNSClass::CH);
    q.add_query(question);
    assert_eq!(rcode(&exchange(&table, &q)), ResponseCode::Refused);
}

#[test]
fn edns_queries_get_an_opt_advertising_1232_bytes() {
    let table = fixture();
    let resp = exchange(&table, &with_edns(query(GW, RecordType::A), 4096, 0));
    let edns = resp.edns.as_ref().expect("OPT in the response");
    assert_eq!(edns.max_payload(), 1232);
    assert_eq!(edns.version(), 0);
    assert_eq!(rcode(&resp), ResponseCode::NoError);

    // No OPT in, no OPT out.
    assert!(exchange(&table, &query(GW, RecordType::A)).edns.is_none());
}

#[test]
fn unknown_edns_version_is_badvers() {
    let table = fixture();
    let resp = exchange(&table, &with_edns(query(GW, RecordType::A), 1232, 1));
    // BADVERS and BADSIG share the code 16 (RFC 6891 / RFC 8945); decoders name it BADSIG.
    assert_eq!(u16::from(rcode(&resp)), 16);
    let edns = resp.edns.as_ref().expect("BADVERS comes with an OPT");
    assert_eq!(edns.version(), 0);
    assert!(resp.answers.is_empty());
}

#[test]
fn big_answers_truncate_over_udp_and_come_whole_over_tcp() {
    let table = fixture();
    let plain = query("big.xcc.test.", RecordType::A);
    let bytes = exchange_bytes(&table, plain.to_vec().unwrap(), Protocol::Udp).unwrap();
    assert!(bytes.len() <= 512, "{} bytes", bytes.len());
    let resp = Message::from_vec(&bytes).unwrap();
    assert!(resp.metadata.truncation);

    let edns = with_edns(query("big.xcc.test.", RecordType::A), 4096, 0);
    let bytes = exchange_bytes(&table, edns.to_vec().unwrap(), Protocol::Udp).unwrap();
    assert!(bytes.len() <= 1232, "{} bytes", bytes.len());
    assert!(Message::from_vec(&bytes).unwrap().metadata.truncation);

    let resp = exchange_on(&table, &plain, Protocol::Tcp);
    assert!(!resp.metadata.truncation);
    assert_eq!(resp.answers.len(), 100);

    // Small answers are never truncated.
    assert!(
        !exchange(&table, &query(GW, RecordType::A))
            .metadata
            .truncation
    );
}

#[test]
fn a_question_with_a_compression_pointer_gets_a_parseable_answer() {
    let table = fixture();
    // The question name is a pointer to offset 2 of the request (its flags: a 1-byte label
    // holding 0x00). Copied as is, it would point at the response's flags (0x81: not a label).
    let request = vec![
        0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 0x02, 0, 1, 0, 1,
    ];
    let bytes = exchange_bytes(&table, request, Protocol::Udp).expect("a response");
    let resp = Message::from_vec(&bytes).expect("the response parses");
    assert_eq!(resp.queries.len(), 1);
    assert_eq!(rcode(&resp), ResponseCode::Refused);

    // Two questions: FORMERR, parseable, echoing none.
    let mut two = query(GW, RecordType::A).to_vec().unwrap();
    two[5] = 2;
    two.extend_from_slice(&[0xC0, 0x0C, 0, 1, 0, 1]);
    let bytes = exchange_bytes(&table, two, Protocol::Udp).expect("a response");
    let resp = Message::from_vec(&bytes).expect("the response parses");
    assert_eq!(rcode(&resp), ResponseCode::FormErr);
}

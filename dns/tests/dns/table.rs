//! The record table as its writers use it: sources, merging, removal, relists.

use std::sync::Arc;

use hickory_proto::{op::ResponseCode, rr::RecordType};
use xcc_dns::{RecordTable, Zone, ZoneSettings};

use crate::support::*;

fn empty() -> Arc<RecordTable> {
    Arc::new(
        RecordTable::new(
            vec![Zone::new("xcc.test").unwrap()],
            ZoneSettings::default(),
        )
        .unwrap(),
    )
}

#[test]
fn sources_with_the_same_name_merge_and_unmerge() {
    let table = empty();
    table
        .set_source("slice-1", vec![(name(GW), addresses(&["192.0.2.1"]))])
        .unwrap();
    table
        .set_source(
            "slice-2",
            vec![(name(GW), addresses(&["192.0.2.2", "192.0.2.1"]))],
        )
        .unwrap();
    let resp = exchange(&table, &query(GW, RecordType::A));
    assert_eq!(answer_ips(&resp), ips(&["192.0.2.1", "192.0.2.2"]));

    table.remove_source("slice-2");
    let resp = exchange(&table, &query(GW, RecordType::A));
    assert_eq!(answer_ips(&resp), ips(&["192.0.2.1"]));
    assert_eq!(table.snapshot().len(), 1);
}

#[test]
fn removing_the_last_name_below_an_empty_non_terminal_removes_it() {
    let table = empty();
    table
        .set_source("s", vec![(name(GW), addresses(&["192.0.2.1"]))])
        .unwrap();
    let ent = query("clusters.xcc.test.", RecordType::A);
    assert_eq!(rcode(&exchange(&table, &ent)), ResponseCode::NoError);
    table.set_source("s", vec![]).unwrap();
    assert_eq!(rcode(&exchange(&table, &ent)), ResponseCode::NXDomain);
    assert_eq!(
        rcode(&exchange(&table, &query(GW, RecordType::A))),
        ResponseCode::NXDomain
    );
    assert!(table.snapshot().is_empty());
}

#[test]
fn replacing_a_source_drops_its_old_names() {
    let table = empty();
    table
        .set_source(
            "s",
            vec![(name("old.xcc.test."), addresses(&["192.0.2.1"]))],
        )
        .unwrap();
    table
        .set_source(
            "s",
            vec![(name("new.xcc.test."), addresses(&["192.0.2.2"]))],
        )
        .unwrap();
    assert_eq!(
        rcode(&exchange(&table, &query("old.xcc.test.", RecordType::A))),
        ResponseCode::NXDomain
    );
    assert_eq!(
        answer_ips(&exchange(&table, &query("new.xcc.test.", RecordType::A))),
        ips(&["192.0.2.2"])
    );
}

#[test]
fn names_outside_the_zones_are_rejected_and_change_nothing() {
    let table = empty();
    table
        .set_source("s", vec![(name("a.xcc.test."), addresses(&["192.0.2.1"]))])
        .unwrap();
    let err = table
        .set_source(
            "s",
            vec![
                (name("b.xcc.test."), addresses(&["192.0.2.2"])),
                (name("evil.example.com."), addresses(&["192.0.2.3"])),
            ],
        )
        .unwrap_err();
    assert!(err.to_string().contains("evil.example.com"), "{err}");
    assert_eq!(
        answer_ips(&exchange(&table, &query("a.xcc.test.", RecordType::A))),
        ips(&["192.0.2.1"])
    );
}

#[test]
fn a_relist_keeps_only_the_sources_still_present() {
    let table = empty();
    for s in ["a", "b", "c"] {
        table
            .set_source(
                s,
                vec![(name(&format!("{s}.xcc.test.")), addresses(&["192.0.2.1"]))],
            )
            .unwrap();
    }
    let serial = table.snapshot().serial();
    table
        .update(|batch| {
            batch.retain_sources(|s| s != "b");
            Ok(())
        })
        .unwrap();
    assert_eq!(table.sources(), ["a", "c"]);
    assert_eq!(
        table.snapshot().serial(),
        serial.wrapping_add(1),
        "one publish per batch"
    );
    assert_eq!(
        rcode(&exchange(&table, &query("b.xcc.test.", RecordType::A))),
        ResponseCode::NXDomain
    );
}

#[test]
fn a_name_with_addresses_ignores_a_cname_from_another_source() {
    let table = empty();
    table
        .set_source(
            "x",
            vec![(name("h.xcc.test."), cname("elsewhere.example."))],
        )
        .unwrap();
    table
        .set_source("y", vec![(name("h.xcc.test."), addresses(&["192.0.2.4"]))])
        .unwrap();
    let resp = exchange(&table, &query("h.xcc.test.", RecordType::A));
    assert_eq!(answer_ips(&resp), ips(&["192.0.2.4"]));
    assert_eq!(resp.answers.len(), 1);
}

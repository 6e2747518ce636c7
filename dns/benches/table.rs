//! Record-table figures at scale: time from an update to the first query that sees it, and the
//! cost of one resolution, with N names (default 100,000) spread over 1,000 sources.
//!
//! `cargo bench -p xcc-dns --bench table [-- NAMES]`. Bar: update visible in < 100 ms.
#![allow(
    clippy::too_many_lines,
    reason = "a benchmark's main is one measurement script read top to bottom; the line limit is for production code"
)]

use std::{
    net::{IpAddr, Ipv4Addr},
    str::FromStr,
    time::{Duration, Instant},
};

use xcc_dns::{
    HostRecords, RecordTable, Zone, ZoneSettings,
    proto::rr::{Name, RecordType},
};

const SOURCES: usize = 1000;

fn name(i: usize) -> Name {
    Name::from_str(&format!(
        "gateway.cluster-{i}.team-{}.clusters.xcc.test.",
        i % 97
    ))
    .unwrap()
}

fn records(i: usize, salt: u8) -> HostRecords {
    HostRecords {
        addresses: vec![IpAddr::V4(Ipv4Addr::new(10, salt, (i >> 8) as u8, i as u8))],
        cname: None,
        ttl: None,
        srv: Vec::new(),
    }
}

fn main() {
    let names: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let table = RecordTable::new(
        vec![Zone::new("xcc.test").unwrap()],
        ZoneSettings::default(),
    )
    .unwrap();
    let started = Instant::now();
    table
        .update(|batch| {
            for s in 0..SOURCES {
                let entries = (s..names)
                    .step_by(SOURCES)
                    .map(|i| (name(i), records(i, 0)));
                batch.set_source(&format!("slice-{s}"), entries.collect())?;
            }
            Ok(())
        })
        .unwrap();
    println!(
        "initial load: {names} names in {SOURCES} sources, one publish: {:.1} ms; process RSS {} MB",
        started.elapsed().as_secs_f64() * 1e3,
        rss_kb() / 1024
    );

    // Update one source and measure until a reader sees the new address.
    let mut worst = Duration::ZERO;
    let mut total = Duration::ZERO;
    let rounds = 50;
    for round in 0..rounds {
        let i = (round * 7919) % names;
        let source = format!("slice-{}", i % SOURCES);
        let entries: Vec<_> = (i % SOURCES..names)
            .step_by(SOURCES)
            .map(|j| (name(j), records(j, 1 + (round % 200) as u8)))
            .collect();
        let want = records(i, 1 + (round % 200) as u8).addresses[0];
        let qname = name(i);
        let started = Instant::now();
        table.set_source(&source, entries).unwrap();
        loop {
            let snapshot = table.snapshot();
            let answer = snapshot.resolve(&qname, RecordType::A);
            if answer
                .answers
                .iter()
                .any(|r| r.data.ip_addr() == Some(want))
            {
                break;
            }
        }
        let took = started.elapsed();
        worst = worst.max(took);
        total += took;
    }
    let mean = total / rounds as u32;
    println!(
        "update → first query that sees it: mean {:.2} ms, worst {:.2} ms over {rounds} updates",
        mean.as_secs_f64() * 1e3,
        worst.as_secs_f64() * 1e3
    );

    // Resolution cost on the query path (no sockets): hits, wildcard misses, NXDOMAIN.
    let qnames: Vec<Name> = (0..1000).map(|i| name(i * 97 % names)).collect();
    let missing = Name::from_str("missing.clusters.xcc.test.").unwrap();
    let n = 2_000_000;
    let started = Instant::now();
    let mut answered = 0usize;
    for k in 0..n {
        let snapshot = table.snapshot();
        let q = if k % 20 == 0 {
            &missing
        } else {
            &qnames[k % qnames.len()]
        };
        answered += snapshot.resolve(q, RecordType::A).answers.len();
    }
    let per = started.elapsed() / n as u32;
    println!(
        "resolve (snapshot load + lookup): {} ns per query ({answered} answers)",
        per.as_nanos()
    );

    let bar = Duration::from_millis(100);
    if worst < bar {
        println!(
            "PASS update visible in {:.2} ms < 100 ms",
            worst.as_secs_f64() * 1e3
        );
    } else {
        println!(
            "FAIL update visible in {:.2} ms >= 100 ms",
            worst.as_secs_f64() * 1e3
        );
        std::process::exit(1);
    }
}

/// Resident set size of this process, from /proc.
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

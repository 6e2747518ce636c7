//! Nothing the test bed started outlives it.

use xcc_e2e::{Testbed, require_testbed};

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would show state Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.split_whitespace().nth(2).is_none_or(|state| state != "Z"))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_testbed_stops_every_process() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start(&binaries, 2).await.expect("test bed starts");
    let pids = bed.pids();
    assert_eq!(pids.len(), 3, "etcd and two API servers: {pids:?}");
    assert!(pids.iter().all(|p| alive(*p)));
    let dir = bed.dir().to_path_buf();
    drop(bed);
    let still: Vec<u32> = pids.into_iter().filter(|p| alive(*p)).collect();
    assert!(still.is_empty(), "left running: {still:?}");
    assert!(!dir.exists(), "the scratch directory is removed");
}

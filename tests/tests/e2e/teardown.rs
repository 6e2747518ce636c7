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

/// With nodes: every process (daemons, shims, containers, namespace holders), cgroup, namespace
/// and host link of the test bed is gone once it is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_node_testbed_leaves_nothing() {
    let Some(binaries) = xcc_e2e::require_node_testbed() else {
        return;
    };
    let bed = Testbed::start_with_nodes(&binaries, &["cluster-a"], &["cluster-a"])
        .await
        .expect("test bed with a node starts");
    let node = bed.cluster("cluster-a").node().expect("a node");
    let holder = node.holder_pid();
    let net = std::fs::read_link(format!("/proc/{holder}/ns/net")).expect("node netns");
    let cgroups = node.cgroup_dirs();
    let link = bed.host_link().expect("a host link").to_string();
    let pids = bed.pids();
    // CoreDNS runs: its container and shim are among the node's processes.
    let comms: Vec<String> = pids
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).ok())
        .map(|c| c.trim().to_string())
        .collect();
    for expected in ["containerd", "kubelet", "kube-proxy", "coredns", "pause"] {
        assert!(
            comms.iter().any(|c| c == expected),
            "{expected} among the node's processes: {comms:?}"
        );
    }
    assert!(
        comms.iter().any(|c| c.starts_with("containerd-shim")),
        "a shim among the node's processes: {comms:?}"
    );
    assert!(!cgroups.is_empty());
    assert!(std::path::Path::new(&format!("/sys/class/net/{link}")).exists());
    let dir = bed.dir().to_path_buf();
    drop(bed);

    let still: Vec<u32> = pids.into_iter().filter(|p| alive(*p)).collect();
    assert!(still.is_empty(), "left running: {still:?}");
    let in_netns: Vec<u32> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_link(format!("/proc/{p}/ns/net"))
                .ok()
                .as_ref()
                == Some(&net)
        })
        .collect();
    assert!(
        in_netns.is_empty(),
        "processes left in the node's netns: {in_netns:?}"
    );
    let left: Vec<_> = cgroups.iter().filter(|c| c.exists()).collect();
    assert!(left.is_empty(), "cgroups left: {left:?}");
    assert!(
        !std::path::Path::new(&format!("/sys/class/net/{link}")).exists(),
        "host link {link} left"
    );
    assert!(!dir.exists(), "the scratch directory is removed");
}

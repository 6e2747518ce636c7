//! Where the test bed's binaries are.

use std::path::{Path, PathBuf};

/// Absolute paths of the real binaries the test bed runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// `kube-apiserver`.
    pub kube_apiserver: PathBuf,
    /// `kubectl`, of the same version.
    pub kubectl: PathBuf,
    /// `kube-controller-manager`.
    pub kube_controller_manager: PathBuf,
    /// `etcd`, shared by every cluster of a bed.
    pub etcd: PathBuf,
    /// CoreDNS, which the DNS tests put in front of the agent as a cluster does.
    pub coredns: PathBuf,
    /// What real nodes need (`None` when the installer that made the env file predates them):
    /// see [`require_node_testbed`].
    pub node: Option<NodeBinaries>,
    /// The MCS conformance suite's test binary (`XCC_MCS_CONFORMANCE`, built by the installer
    /// from `../shared/third-party/mcs-api-conformance`): see [`crate::mcs`].
    pub mcs_conformance: Option<PathBuf>,
    /// Upstream's ServiceExport and ServiceImport CRDs (`XCC_MCS_CRDS`, a folder), of the module
    /// the suite is built against: for the tests of the test bed itself.
    pub mcs_crds: Option<PathBuf>,
}

/// The binaries and versions the test bed's real nodes need (`XCC_KUBELET`, ...).
#[derive(Clone, Debug)]
pub struct NodeBinaries {
    /// `kubelet`.
    pub kubelet: PathBuf,
    /// `kube-proxy`, of the same version.
    pub kube_proxy: PathBuf,
    /// `kube-scheduler`, of the same version.
    pub kube_scheduler: PathBuf,
    /// A statically linked CoreDNS (`CGO_ENABLED=0`), for the CoreDNS image.
    pub coredns_static: PathBuf,
    /// The CNI plugins (`bridge`, `host-local`, `loopback`, `portmap`).
    pub cni_dir: PathBuf,
    /// Kubernetes version of the binaries, e.g. `v1.35.4`.
    pub k8s_version: String,
    /// CoreDNS version, e.g. `v1.12.4` (the tag of the CoreDNS image).
    pub coredns_version: String,
}

const VARS: [&str; 5] = [
    "XCC_KUBE_APISERVER",
    "XCC_KUBECTL",
    "XCC_KUBE_CONTROLLER_MANAGER",
    "XCC_ETCD",
    "XCC_COREDNS",
];

impl Binaries {
    /// From the `XCC_*` variables, or else from the env file the installer writes.
    pub fn locate() -> Option<Binaries> {
        let dir = std::env::var_os("XCC_TESTBED_DIR")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/xcc-testbed"))
            })?;
        let file = std::fs::read_to_string(dir.join("env")).unwrap_or_default();
        let from_file = |var: &str| {
            file.lines().find_map(|line| {
                let rest = line
                    .strip_prefix("export ")?
                    .strip_prefix(var)?
                    .strip_prefix('=')?;
                Some(PathBuf::from(rest.trim()))
            })
        };
        let value = |var: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .or_else(|| from_file(var))
        };
        let get = |var: &str| value(var).filter(|p| p.is_file());
        let [a, k, m, e, c] = VARS.map(get);
        let node = (|| {
            let programs = [
                "containerd",
                "runc",
                "ctr",
                "iptables",
                "conntrack",
                "nsenter",
                "unshare",
                "ip",
            ];
            if !programs.iter().all(|p| which(p).is_some()) {
                return None;
            }
            let cni_dir = value("XCC_CNI_DIR").filter(|d| {
                ["bridge", "host-local", "loopback", "portmap"]
                    .iter()
                    .all(|p| d.join(p).is_file())
            })?;
            let text = |var: &str| value(var).map(|p| p.display().to_string());
            Some(NodeBinaries {
                kubelet: get("XCC_KUBELET")?,
                kube_proxy: get("XCC_KUBE_PROXY")?,
                kube_scheduler: get("XCC_KUBE_SCHEDULER")?,
                coredns_static: get("XCC_COREDNS_STATIC")?,
                cni_dir,
                k8s_version: text("XCC_K8S_VERSION")?,
                coredns_version: text("XCC_COREDNS_VERSION")?,
            })
        })();
        Some(Binaries {
            kube_apiserver: a?,
            kubectl: k?,
            kube_controller_manager: m?,
            etcd: e?,
            coredns: c?,
            node,
            mcs_conformance: get("XCC_MCS_CONFORMANCE"),
            mcs_crds: value("XCC_MCS_CRDS").filter(|d| d.is_dir()),
        })
    }
}

/// `program` on `PATH` (plus the sbin folders, where root's tools live).
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"])
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

/// The binaries, with what real nodes need (see [`require_testbed`] for when a missing test bed
/// fails and when it skips). Node test beds also need root, to make namespaces and cgroups.
pub fn require_node_testbed() -> Option<Binaries> {
    #[expect(unsafe_code, reason = "std cannot tell the effective user")]
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let missing = match Binaries::locate() {
        None => "the test bed is not installed".to_string(),
        Some(b) if b.node.is_none() => "the test bed has no node binaries or packages (kubelet, kube-proxy, kube-scheduler, static coredns, containerd, runc, CNI plugins, iptables, conntrack)".to_string(),
        Some(_) if !root => "node test beds need root (namespaces, cgroups, veths)".to_string(),
        Some(b) => return Some(b),
    };
    skip_or_fail(&missing)
}

/// The binaries. Without a test bed an e2e test fails, unless the run opts out with
/// `XCC_SKIP_E2E=1` (refused with `CI=true`): then it returns `None` after one loud line, and
/// the test's name is appended to the file `XCC_SKIP_REPORT` names, if any, so that the run's
/// summary counts it as skipped rather than passed.
pub fn require_testbed() -> Option<Binaries> {
    if let Some(found) = Binaries::locate() {
        return Some(found);
    }
    skip_or_fail("the test bed is not installed")
}

/// Panics with `missing` (always in CI; outside CI unless `XCC_SKIP_E2E=1`), else prints one
/// `SKIPPED e2e` line, records the test in `XCC_SKIP_REPORT` and returns `None`.
fn skip_or_fail(missing: &str) -> Option<Binaries> {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let opted_out = std::env::var("XCC_SKIP_E2E").as_deref() == Ok("1");
    if ci || !opted_out {
        panic!(
            "{missing}: run tests/testbed/install.sh (./test.sh does){}",
            if ci {
                ""
            } else {
                ", or set XCC_SKIP_E2E=1 to skip the e2e tests"
            }
        );
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("an e2e test")
        .to_string();
    eprintln!(
        "SKIPPED e2e {test}: {missing} (XCC_SKIP_E2E=1) — run tests/testbed/install.sh (or ./test.sh) to build it"
    );
    if let Some(report) = std::env::var_os("XCC_SKIP_REPORT") {
        use std::io::Write as _;
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(report)
        {
            let _ = writeln!(file, "{test}");
        }
    }
    None
}

//! Where the test bed's binaries are.

use std::path::{Path, PathBuf};

/// Absolute paths of the real binaries the test bed runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub kube_apiserver: PathBuf,
    pub kubectl: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub etcd: PathBuf,
    pub coredns: PathBuf,
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
        let get = |var: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .or_else(|| from_file(var))
                .filter(|p| p.is_file())
        };
        let [a, k, m, e, c] = VARS.map(get);
        Some(Binaries {
            kube_apiserver: a?,
            kubectl: k?,
            kube_controller_manager: m?,
            etcd: e?,
            coredns: c?,
        })
    }
}

/// The binaries. Without a test bed an e2e test fails, unless the run opts out with
/// `XCC_SKIP_E2E=1` (refused with `CI=true`): then it returns `None` after one loud line, and
/// the test's name is appended to the file `XCC_SKIP_REPORT` names, if any, so that the run's
/// summary counts it as skipped rather than passed.
pub fn require_testbed() -> Option<Binaries> {
    if let Some(found) = Binaries::locate() {
        return Some(found);
    }
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let opted_out = std::env::var("XCC_SKIP_E2E").as_deref() == Ok("1");
    if ci || !opted_out {
        panic!(
            "the test bed is not installed: run tests/testbed/install.sh (./test.sh does){}",
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
        "SKIPPED e2e {test}: test bed not installed (XCC_SKIP_E2E=1) — run tests/testbed/install.sh (or ./test.sh) to build it"
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

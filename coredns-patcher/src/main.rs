//! `xcc-coredns-patcher`, a one-shot Job on each workload cluster: makes the cluster's CoreDNS
//! forward the xcc zones to xcc-agent by adding a marked server block to its Corefile.
//!
//! ```text
//!  Service xcc-dns/dns-server ──ClusterIP──┐
//!  (or --forward-to)                       ▼
//!  ConfigMap kube-system/coredns ─► corefile::patch ─► replace (resourceVersion; retry on 409)
//!                                                          │
//!  EndpointSlices of kube-system/kube-dns ─► replicas ─► verify: each pod IP asked (probe)
//!                                                        until each answers from the agent
//! ```
//!
//! `corefile` is plain text editing and knows nothing of Kubernetes; `service`, `configmap`,
//! `replicas` and `restart` do the API calls; `probe` asks one DNS server one question.
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "a test is one scenario read top to bottom; the line limit is for production code"
    )
)]
#![forbid(unsafe_code)]

mod args;
mod configmap;
mod corefile;
mod probe;
mod replicas;
mod report;
mod restart;
mod run;
mod service;
mod verify;

use xcc_kube::{
    logging::fatal,
    report::{EXIT_FAILURE, one_line},
};

fn main() -> std::process::ExitCode {
    let args: args::Args = xcc_kube::flags::parse("xcc-coredns-patcher");
    xcc_kube::logging::init(&args.log, "info");
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            fatal(
                "xcc-coredns-patcher",
                &format!("xcc-coredns-patcher: error: cannot start the async runtime: {e}"),
            );
            return std::process::ExitCode::from(EXIT_FAILURE);
        }
    };
    match runtime.block_on(run::run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            fatal(
                "xcc-coredns-patcher",
                &format!("xcc-coredns-patcher: error: {}", one_line(error.as_ref())),
            );
            std::process::ExitCode::from(EXIT_FAILURE)
        }
    }
}

//! `xcc-controller`, on the Cluster API management cluster: turns each GatewayDNS into DNS
//! records (EndpointSlices in namespace `xcc-dns`) on every workload cluster of its namespace.
//!
//! ```text
//!  GatewayDNS ──┐                        ┌─► cluster-a: xcc-dns/EndpointSlices ─► xcc-agent
//!  Clusters ────┼─► reconcile ─ plan ────┼─► cluster-b: xcc-dns/EndpointSlices ─► xcc-agent
//!  kubeconfigs ─┘      ▲                 └─► ...
//!                      └── watch of each selected cluster's gateway Service
//! ```
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "a test is one scenario read top to bottom; the line limit is for production code"
    )
)]
#![forbid(unsafe_code)]

mod admin;
mod args;
mod desired;
mod gatewaydns;
mod health;
mod index;
mod metrics;
mod queue;
mod reconcile;
mod run;
mod settings;
mod uninstall;
mod workload;

use std::process::ExitCode;

use xcc_kube::{
    logging::fatal,
    report::{EXIT_FAILURE, one_line},
};

fn main() -> ExitCode {
    let mut args: args::Args = xcc_kube::flags::parse("xcc-controller");
    // The older variable of --leader-elect, in manifests written before it was renamed.
    if !args.leader.leader_elect && std::env::var("XCC_LEADER_ELECTION").is_ok_and(|v| v == "true")
    {
        args.leader.leader_elect = true;
    }
    match args.command {
        Some(args::Command::Crds) => {
            print!("{}", run::crds_yaml());
            ExitCode::SUCCESS
        }
        None => {
            xcc_kube::logging::init(&args.log, "info");
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    fatal(
                        "xcc-controller",
                        &format!("xcc-controller: error: cannot start the async runtime: {e}"),
                    );
                    return ExitCode::from(EXIT_FAILURE);
                }
            };
            if args.uninstall {
                return match runtime.block_on(uninstall::run(&args)) {
                    Ok(true) => ExitCode::SUCCESS,
                    Ok(false) => ExitCode::from(EXIT_FAILURE),
                    Err(error) => {
                        fatal(
                            "xcc-controller",
                            &format!(
                                "xcc-controller --uninstall: error: {}",
                                one_line(error.as_ref())
                            ),
                        );
                        ExitCode::from(EXIT_FAILURE)
                    }
                };
            }
            let result = runtime.block_on(run::run(args));
            // A blocking task (a name lookup that does not answer) must not hold up the exit.
            runtime.shutdown_timeout(std::time::Duration::from_millis(100));
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    // Once, on one line, each cause once.
                    fatal(
                        "xcc-controller",
                        &format!("xcc-controller: error: {}", one_line(error.as_ref())),
                    );
                    ExitCode::from(EXIT_FAILURE)
                }
            }
        }
    }
}

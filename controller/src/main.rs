//! `xcc-controller`, on the Cluster API management cluster: turns each GatewayDNS into DNS
//! records (EndpointSlices in namespace `xcc-dns`) on every workload cluster of its namespace.
//!
//! ```text
//!  GatewayDNS ──┐                        ┌─► cluster-a: xcc-dns/EndpointSlices ─► xcc-agent
//!  Clusters ────┼─► reconcile ─ plan ────┼─► cluster-b: xcc-dns/EndpointSlices ─► xcc-agent
//!  kubeconfigs ─┘      ▲                 └─► ...
//!                      └── watch of each selected cluster's gateway Service
//! ```

mod args;
mod desired;
mod gatewaydns;
mod health;
mod index;
mod metrics;
mod reconcile;
mod run;
mod settings;
mod uninstall;
mod workload;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = args::Args::parse();
    match args.command {
        Some(args::Command::Crds) => {
            print!("{}", run::crds_yaml());
            std::process::ExitCode::SUCCESS
        }
        None => {
            run::init_logging(&args.log_filter);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("xcc-controller: cannot start the async runtime: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            if args.uninstall {
                return match runtime.block_on(uninstall::run(&args)) {
                    Ok(true) => std::process::ExitCode::SUCCESS,
                    Ok(false) => std::process::ExitCode::FAILURE,
                    Err(error) => {
                        eprintln!("xcc-controller --uninstall: {error:#}");
                        std::process::ExitCode::FAILURE
                    }
                };
            }
            match runtime.block_on(run::run(args)) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!("{error:#}");
                    eprintln!("xcc-controller: {error:#}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}

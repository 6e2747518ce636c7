//! `xcc-agent`: one process per member cluster. It serves the xcc DNS zone from an in-memory
//! record table fed either by the EndpointSlices of its namespace or, standalone, by a records file.
//!
//! ```text
//!  EndpointSlices (watch) ─┐
//!                          ├─► RecordTable ──► DNS :53 (UDP × N, TCP)
//!  records file (poll) ────┘        │
//!  admin HTTP: /healthz /readyz /metrics
//!
//!  sync reconcilers (each can be switched off): Secret replication (SecretExport, SecretImport,
//!  the monitors and their bindings)
//!  peers (kubeconfig Secret → client) ─► read ─► sink (SSA + origin annotation) ─► local cluster
//! ```

mod admin;
mod announce;
mod args;
mod clusterregistry;
mod core;
mod explain;
mod metrics;
mod plumber;
mod projection;
mod records;
mod replication;
mod run;
mod sink;
mod slices;
mod sources;
mod sync_metrics;
mod wakers;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = args::Args::parse();
    if let Some(args::Command::Crds { dir }) = &args.command {
        return match run::print_crds(dir.as_deref()) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("xcc-agent: {error:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    run::init_logging(&args.log);
    match run::main(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // Once, through the log (which goes to stderr too).
            tracing::error!("{error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

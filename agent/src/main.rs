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

use std::process::ExitCode;

use xcc_kube::report::{EXIT_FAILURE, EXIT_USAGE, one_line};

/// Logs when nothing else asks: info, and hickory's own logs only from warn.
const DEFAULT_LOG: &str = "info,hickory_server=warn,hickory_proto=warn,hickory_net=warn";

fn main() -> ExitCode {
    let args: args::Args = xcc_kube::flags::parse("xcc-agent");
    if let Some(args::Command::Crds { dir }) = &args.command {
        return match run::print_crds(dir.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("xcc-agent: error: {}", one_line(error.as_ref()));
                ExitCode::from(EXIT_FAILURE)
            }
        };
    }
    xcc_kube::logging::init(&args.log, DEFAULT_LOG);
    match run::main(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // Once, on one line, each cause once.
            eprintln!("xcc-agent: error: {}", one_line(error.as_ref()));
            // A records file that cannot be used at start is the operator's input, as a flag.
            let usage = error.chain().any(|cause| {
                matches!(
                    cause.downcast_ref::<xcc_dns::Error>(),
                    Some(
                        xcc_dns::Error::InvalidRecords { .. } | xcc_dns::Error::InvalidZone { .. }
                    )
                )
            });
            ExitCode::from(if usage { EXIT_USAGE } else { EXIT_FAILURE })
        }
    }
}

//! `xcc-agent`: one process per member cluster. It serves the xcc DNS zone from an in-memory
//! record table fed either by the EndpointSlices of its namespace or, standalone, by a records file.
//!
//! ```text
//!  EndpointSlices (watch) ─┐
//!                          ├─► RecordTable ──► DNS :53 (UDP × N, TCP)
//!  records file (poll) ────┘        │
//!  admin HTTP: /healthz /readyz /metrics
//! ```

mod admin;
mod args;
mod metrics;
mod records;
mod run;
mod slices;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = args::Args::parse();
    run::init_logging(&args.log);
    match run::main(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("xcc-agent: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

//! `xcc-agent`: one process per member cluster. It serves the xcc DNS zone from an in-memory
//! record table; in standalone mode the table is fed by a records file.
//!
//! ```text
//!  records file ──(poll, parse, keep last good)──► RecordTable ──► DNS :53 (UDP × N, TCP)
//!                                                      │
//!  admin HTTP: /healthz /readyz /metrics ◄── metrics ──┘
//! ```

mod admin;
mod args;
mod metrics;
mod records;
mod run;

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

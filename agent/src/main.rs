//! The `xcc-agent` binary: parses the flags, prints the CRDs or runs the agent ([`xcc_agent`]).
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "a test is one scenario read top to bottom; the line limit is for production code"
    )
)]
#![forbid(unsafe_code)]

use std::process::ExitCode;

use xcc_agent::process::{args, run};
use xcc_kube::{
    logging::fatal,
    report::{EXIT_FAILURE, EXIT_USAGE, one_line},
};

/// Logs when nothing else asks: info, and hickory's own logs only from warn.
const DEFAULT_LOG: &str = "info,hickory_server=warn,hickory_proto=warn,hickory_net=warn";

fn main() -> ExitCode {
    let args: args::Args = xcc_kube::flags::parse("xcc-agent");
    if let Some(args::Command::Crds { dir }) = &args.command {
        return match run::print_crds(&args.sync.reconcilers, dir.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                fatal(
                    "xcc-agent",
                    &format!("xcc-agent: error: {}", one_line(error.as_ref())),
                );
                ExitCode::from(EXIT_FAILURE)
            }
        };
    }
    xcc_kube::logging::init(&args.log, DEFAULT_LOG);
    match run::main(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // Once, on one line, each cause once.
            fatal(
                "xcc-agent",
                &format!("xcc-agent: error: {}", one_line(error.as_ref())),
            );
            // A records file that cannot be used at start is the operator's input, as a flag.
            let usage = error.chain().any(|cause| {
                matches!(
                    cause.downcast_ref::<xcc_dns::Error>(),
                    Some(
                        xcc_dns::Error::InvalidRecords { .. }
                            | xcc_dns::Error::ReadRecords { .. }
                            | xcc_dns::Error::InvalidZone { .. }
                    )
                )
            });
            ExitCode::from(if usage { EXIT_USAGE } else { EXIT_FAILURE })
        }
    }
}

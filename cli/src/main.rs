//! `kubectl-xcc`: the kubectl plugin (`kubectl xcc ...`). Parses the command line, runs the
//! command, and turns its outcome into one line on stderr and an exit code scripts can use.
//!
//! Run as `kubectl_complete-xcc WORDS...` (a link to this binary: kubectl's convention for a
//! plugin's completion) or as `kubectl-xcc __complete WORDS...` (the bash script), it prints
//! completion candidates instead.
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "a test is one scenario read top to bottom; the line limit is for production code"
    )
)]
#![forbid(unsafe_code)]

use std::{path::Path, process::ExitCode};

use clap::{CommandFactory, Parser};
use kubectl_xcc::{Cli, complete, exit};
use xcc_kube::logging::fatal;

fn main() -> ExitCode {
    let mut args = std::env::args_os().map(|a| a.to_string_lossy().into_owned());
    let name = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    let invoked_as = Path::new(&name)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let words = if invoked_as == complete::KUBECTL_COMPLETE {
        Some(&rest[..])
    } else if rest.first().map(String::as_str) == Some(complete::COMPLETE_ARG) {
        Some(&rest[1..])
    } else {
        None
    };
    if let Some(words) = words {
        let mut completion = complete::complete(Cli::command(), words);
        if completion.namespaces.is_some()
            && let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        {
            runtime.block_on(complete::namespaces(&mut completion));
        }
        return match kubectl_xcc::write_stdout(completion.render().as_bytes()) {
            Ok(()) => ExitCode::from(exit::OK),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(exit::ERROR)
            }
        };
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version.
            let _ = e.print();
            return ExitCode::from(exit::OK);
        }
        Err(e) => {
            let command = complete::command_path(Cli::command(), &rest);
            fatal(
                "kubectl-xcc",
                &kubectl_xcc::usage_line(&e.render().to_string(), &command),
            );
            return ExitCode::from(exit::USAGE);
        }
    };
    xcc_kube::logging::init(&cli.log, kubectl_xcc::DEFAULT_LOG);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            fatal(
                "kubectl-xcc",
                &format!("error: cannot start the async runtime: {e}"),
            );
            return ExitCode::from(exit::ERROR);
        }
    };
    match runtime.block_on(kubectl_xcc::run(cli)) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) => {
            fatal(
                "kubectl-xcc",
                &format!("error: {}", kubectl_xcc::one_line(&e.to_string())),
            );
            ExitCode::from(e.exit_code())
        }
    }
}

//! `kubectl-xcc`: the kubectl plugin (`kubectl xcc ...`). Parses the command line, runs the
//! command, and turns its outcome into one line on stderr and an exit code scripts can use.

use std::process::ExitCode;

use clap::Parser;
use kubectl_xcc::{Cli, exit};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version.
            let _ = e.print();
            return ExitCode::from(exit::OK);
        }
        Err(e) => {
            // One line, as every other error: clap's message (the lines before its usage
            // block), and where to look.
            let text = e.render().to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!("{} (see kubectl xcc --help)", message.join(" "));
            return ExitCode::from(exit::USAGE);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&cli.log)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::ERROR);
        }
    };
    match runtime.block_on(kubectl_xcc::run(cli)) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) => {
            eprintln!("error: {}", kubectl_xcc::one_line(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}

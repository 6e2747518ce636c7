//! kubectl-xcc: one command line for people who run xcc.
//!
//! ```text
//!  kubectl xcc plumber activate|add|remove|view   plumberctl's commands: the Secret
//!                                                 kubeconfig/config on the primary
//!  kubectl xcc cluster join|leave                 cluster-registry's Cluster + Secret exchange
//!  kubectl xcc status                             every xcc object this context sees, Ready or not
//!  kubectl xcc dns NAME                           the agent's answer for NAME and where it came from
//!  kubectl xcc link                               API projection: UpstreamClusterLink, the kubeconfig
//!                                                 copied across, DownstreamClusterLink
//!  kubectl xcc completion bash|zsh|fish|...       shell completion (also answers kubectl's
//!                                                 `kubectl_complete-xcc` protocol)
//! ```
//!
//! Contexts come from the user's kubeconfig as kubectl finds it (`--kubeconfig`, else
//! `$KUBECONFIG`, else `~/.kube/config`). Every command reads and checks everything it needs
//! before its first write, so bad input changes nothing (`link` writes on the workload cluster
//! only what the service cluster's agent made in answer to its first write). Kubeconfigs the CLI writes into
//! Secrets pass the same trust rules the readers apply ([`xcc_kube::trust`]).
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "a test is one scenario read top to bottom; the line limit is for production code"
    )
)]
#![forbid(unsafe_code)]

mod args;
mod cluster;
pub mod complete;
mod contexts;
mod dns;
mod error;
mod link;
mod output;
mod plumber;
mod status;

pub use args::{Cli, Command, DEFAULT_LOG};
pub use error::{Error, exit, one_line, usage_line};

/// Runs one command.
pub async fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Plumber(args) => plumber::run(args).await,
        Command::Cluster { command } => cluster::run(command).await,
        Command::Link(args) => link::run(args).await,
        Command::Status(args) => status::run(args).await,
        Command::Dns(args) => dns::run(args).await,
        Command::Completion { shell } => {
            let script = match shell {
                clap_complete::Shell::Bash => complete::BASH.as_bytes().to_vec(),
                shell => {
                    let mut command = <Cli as clap::CommandFactory>::command();
                    let mut script = Vec::new();
                    clap_complete::generate(shell, &mut command, "kubectl-xcc", &mut script);
                    script
                }
            };
            write_stdout(&script)
        }
    }
}

/// Writes `bytes` to stdout; a closed pipe (`... | head`) is not an error.
pub fn write_stdout(bytes: &[u8]) -> Result<(), Error> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::Failed(format!("cannot write to stdout: {e}")))
        }
        _ => Ok(()),
    }
}

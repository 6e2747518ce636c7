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
//! ```
//!
//! Contexts come from the user's kubeconfig as kubectl finds it (`--kubeconfig`, else
//! `$KUBECONFIG`, else `~/.kube/config`). Every command reads and checks everything it needs
//! before its first write, so bad input changes nothing (`link` writes on the workload cluster
//! only what the service cluster's agent made in answer to its first write). Kubeconfigs the CLI writes into
//! Secrets pass the same trust rules the readers apply ([`xcc_kube::trust`]).

mod args;
mod cluster;
mod contexts;
mod dns;
mod error;
mod link;
mod output;
mod plumber;
mod status;

pub use args::{Cli, Command};
pub use error::{Error, exit, one_line};

/// Runs one command.
pub async fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Plumber(args) => plumber::run(args).await,
        Command::Cluster { command } => cluster::run(command).await,
        Command::Link(args) => link::run(args).await,
        Command::Status(args) => status::run(args).await,
        Command::Dns(args) => dns::run(args).await,
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "kubectl-xcc", &mut std::io::stdout());
            Ok(())
        }
    }
}

//! The one error type of the CLI, and the exit codes it maps to.

/// Exit codes, as `--help` documents them.
pub mod exit {
    /// Done.
    pub const OK: u8 = 0;
    /// Something failed (a cluster, a refused kubeconfig, a conflict).
    pub const ERROR: u8 = 1;
    /// The command line is wrong (an unknown flag or context, an invalid name).
    pub const USAGE: u8 = 2;
    // 3 meant "not available in this version" (link, before it was); no command uses it now.
}

/// Why a command failed; its exit code follows from it ([`Error::exit_code`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The command line names something that does not exist or is not valid.
    #[error("{0}")]
    Usage(String),
    /// A kubeconfig could not be read or was refused by the trust rules.
    #[error(transparent)]
    Kubeconfig(#[from] xcc_kube::KubeconfigError),
    /// An API call failed: what was being done, and why.
    #[error("{what}: {why}")]
    Api {
        /// What was being done.
        what: String,
        /// The API server's answer, bounded.
        why: String,
    },
    /// Something else failed; the text says what.
    #[error("{0}")]
    Failed(String),
}

impl Error {
    /// The process's exit code for this error ([`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => exit::USAGE,
            _ => exit::ERROR,
        }
    }

    /// A closure turning a `kube::Error` into [`Error::Api`] about `what`.
    pub fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |e| Error::Api {
            what,
            why: describe(&e),
        }
    }
}

/// An error and its sources on one line, without repeating a source the message already holds;
/// a kube error in the words every xcc binary uses ([`xcc_kube::report::describe`]: the common
/// causes named, no Rust type names).
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    xcc_kube::report::one_line(error)
}

/// `text` on one line (errors are one line, whatever a server put in its message).
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A command-line error as clap renders it, on one line, ending with the help of the command the
/// line names (e.g. `kubectl xcc cluster join`): the same rendering as every xcc binary's.
pub use xcc_kube::flags::usage_line;

/// Whether `e` is the API server's 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser, error::ErrorKind};

    use super::*;
    use crate::Cli;

    fn usage(args: &[&str]) -> (ErrorKind, String) {
        let e = Cli::try_parse_from(std::iter::once("kubectl-xcc").chain(args.iter().copied()))
            .unwrap_err();
        let words: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let command = crate::complete::command_path(Cli::command(), &words);
        (e.kind(), usage_line(&e.render().to_string(), &command))
    }

    #[test]
    fn usage_errors_are_one_line_with_clap_s_suggestion() {
        let (kind, line) = usage(&["stauts"]);
        assert_eq!(kind, ErrorKind::InvalidSubcommand);
        assert_eq!(
            line,
            "error: unrecognized subcommand 'stauts'; tip: a similar subcommand exists: \
             'status' (see kubectl xcc --help)"
        );
        let (_, line) = usage(&["cluster", "jion"]);
        assert!(
            line.contains("'join' (see kubectl xcc cluster --help)"),
            "{line}"
        );
        let (_, line) = usage(&["status", "--outptu", "json"]);
        assert!(
            line.contains("tip: a similar argument exists: '--output'"),
            "{line}"
        );
        assert!(line.ends_with("(see kubectl xcc status --help)"), "{line}");
        let (_, line) = usage(&["--log", "debug", "status", "-o", "xml"]);
        assert!(
            line.contains("[possible values: table, json, yaml]"),
            "{line}"
        );
        assert!(line.ends_with("(see kubectl xcc status --help)"), "{line}");
        let (_, line) = usage(&["cluster", "join", "--context", "a", "--token-ttl", "soon"]);
        assert!(
            line.ends_with("(see kubectl xcc cluster join --help)"),
            "{line}"
        );
        let (_, line) = usage(&["frobnicate"]);
        assert_eq!(
            line,
            "error: unrecognized subcommand 'frobnicate' (see kubectl xcc --help)"
        );
        Cli::command().debug_assert();
    }
}

//! The one error type of the CLI, and the exit codes it maps to.

/// Exit codes, as `--help` documents them.
pub mod exit {
    pub const OK: u8 = 0;
    /// Something failed (a cluster, a refused kubeconfig, a conflict).
    pub const ERROR: u8 = 1;
    /// The command line is wrong (an unknown flag or context, an invalid name).
    pub const USAGE: u8 = 2;
    // 3 meant "not available in this version" (link, before it was); no command uses it now.
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The command line names something that does not exist or is not valid.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Kubeconfig(#[from] xcc_kube::KubeconfigError),
    /// An API call failed: what was being done, and why.
    #[error("{what}: {why}")]
    Api { what: String, why: String },
    #[error("{0}")]
    Failed(String),
}

impl Error {
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

/// An error and its sources on one line, without repeating a source the message already holds.
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    if let Some(kube::Error::Api(status)) = error.downcast_ref::<kube::Error>() {
        return format!("{} (HTTP {})", status.message, status.code);
    }
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = e.source();
    }
    text
}

/// `text` on one line (errors are one line, whatever a server put in its message).
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `e` is the API server's 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

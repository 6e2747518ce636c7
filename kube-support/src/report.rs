//! Errors as one line for a person (`cause: cause: cause`, each cause once, Kubernetes API
//! errors cut down to the API server's own message) and the exit codes of every xcc binary.

use std::error::Error;

/// Exit code of a run that failed.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of a usage error (a bad flag or environment value), as clap and the BSD
/// `EX_USAGE` convention of command-line tools use it.
pub const EXIT_USAGE: u8 = 2;

/// The API server's message for an API error (`configmaps "coredns" is forbidden: ...`), the
/// error with its causes otherwise (`... client error (Connect): ... Connection refused`).
pub fn kube_cause(error: &kube::Error) -> String {
    if let kube::Error::Api(status) = error
        && !status.message.is_empty()
    {
        return status.message.clone();
    }
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// `error` and its causes on one line, each once: a cause whose text the line already holds
/// (many errors print their source in their own message) is not repeated.
pub fn one_line(error: &(dyn Error + 'static)) -> String {
    let mut line = String::new();
    let mut cause = Some(error);
    while let Some(current) = cause {
        let (text, last) = match current.downcast_ref::<kube::Error>() {
            // kube's errors already print their own sources.
            Some(kube) => (kube_cause(kube), true),
            None => (current.to_string(), false),
        };
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if !text.is_empty() && !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        if last {
            break;
        }
        cause = current.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: &'static str,
        #[source]
        source: Option<Box<Layer>>,
    }

    fn chain(texts: &[&'static str]) -> Layer {
        let mut error: Option<Box<Layer>> = None;
        for text in texts.iter().rev() {
            error = Some(Box::new(Layer {
                text,
                source: error,
            }));
        }
        *error.unwrap()
    }

    #[test]
    fn api_errors_are_shortened_to_the_servers_message() {
        let status = kube::core::Status::failure(
            "configmaps \"coredns\" is forbidden: User \"u\" cannot get resource",
            "Forbidden",
        )
        .with_code(403);
        let error = kube::Error::Api(status.boxed());
        assert_eq!(
            one_line(&error),
            "configmaps \"coredns\" is forbidden: User \"u\" cannot get resource"
        );
    }

    #[test]
    fn causes_are_joined_once_each_on_one_line() {
        let error = chain(&["outer: middle", "middle", "inner\nproblem"]);
        assert_eq!(one_line(&error), "outer: middle: inner problem");
        // A cause that repeats its source's text in its own message prints it once.
        let error = chain(&["cannot read /x: No such file", "No such file"]);
        assert_eq!(one_line(&error), "cannot read /x: No such file");
    }
}

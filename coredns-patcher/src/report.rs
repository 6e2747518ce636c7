//! Errors as one line for a person: `cause: cause: cause`, Kubernetes API errors cut down to the
//! API server's own message.

use std::error::Error as _;

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

/// `error` and its causes on one line.
pub fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let (text, last) = match cause.downcast_ref::<kube::Error>() {
            // kube's errors already print their own sources.
            Some(kube) => (kube_cause(kube), true),
            None => (cause.to_string(), false),
        };
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        if last {
            break;
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_are_shortened_to_the_servers_message() {
        let status = kube::core::Status::failure(
            "configmaps \"coredns\" is forbidden: User \"u\" cannot get resource",
            "Forbidden",
        )
        .with_code(403);
        let error = anyhow::Error::new(kube::Error::Api(status.boxed()))
            .context("cannot read ConfigMap kube-system/coredns");
        assert_eq!(
            one_line(&error),
            "cannot read ConfigMap kube-system/coredns: \
             configmaps \"coredns\" is forbidden: User \"u\" cannot get resource"
        );
    }

    #[test]
    fn causes_are_joined_once_each_on_one_line() {
        let error = anyhow::anyhow!("inner\nproblem")
            .context("middle")
            .context("outer: middle");
        assert_eq!(one_line(&error), "outer: middle: inner problem");
    }
}

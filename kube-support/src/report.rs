//! Errors as one line for a person (`cause: cause: cause`, each cause once, Kubernetes API
//! errors cut down to the API server's own message) and the exit codes of every xcc binary.

use std::error::Error;

/// Exit code of a run that failed.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of a usage error (a bad flag or environment value), as clap and the BSD
/// `EX_USAGE` convention of command-line tools use it.
pub const EXIT_USAGE: u8 = 2;

/// The API server of this process's own cluster, once its client is built: what a connection
/// error at a binary's edge names as the address it could not reach.
static OWN_SERVER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Records `url` as the own cluster's API server (the first one recorded stays).
pub fn own_server(url: &str) {
    let _ = OWN_SERVER.set(url.to_string());
}

/// A request to `server` that got no answer (refused, reset, timed out, TLS failed): the
/// error of every client [`crate::h2::client`] builds, so that the error names the server.
#[derive(Debug)]
pub struct Unanswered {
    /// The API server's URL.
    pub server: String,
    source: tower::BoxError,
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.server, self.source)
    }
}

impl Error for Unanswered {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(self.source.as_ref())
    }
}

impl Unanswered {
    /// The layer that wraps a client's transport errors in [`Unanswered`] for `server`.
    pub fn layer(
        server: &http::Uri,
    ) -> tower::util::MapErrLayer<impl Fn(tower::BoxError) -> tower::BoxError + Clone + use<>> {
        let server = server.to_string().trim_end_matches('/').to_string();
        tower::util::MapErrLayer::new(move |source: tower::BoxError| -> tower::BoxError {
            if source.is::<Unanswered>() {
                return source;
            }
            Box::new(Unanswered {
                server: server.clone(),
                source,
            })
        })
    }
}

/// [`describe`], as the coredns patcher has called it.
pub fn kube_cause(error: &kube::Error) -> String {
    describe(error)
}

/// What went wrong in a request of a kube client, for a person: the API server's own message,
/// or the common causes in words (the CRD not installed, an RBAC denial with its verb and
/// resource, a TLS name mismatch, a connection refused with its address), never a Rust type
/// name (`ServiceError:`, `ApiError:`, `Status { .. }`) nor the bytes of a kubeconfig. Connection
/// errors name this process's own API server when it is known; [`describe_at`] names another.
pub fn describe(error: &kube::Error) -> String {
    describe_at(error, OWN_SERVER.get().map(String::as_str))
}

/// [`describe`] for a request to the API server at `server`.
pub fn describe_at(error: &kube::Error, server: Option<&str>) -> String {
    use kube::Error as E;
    match error {
        E::Api(status) => api_status(status),
        E::Service(cause) => connection(cause.as_ref(), server),
        E::HyperError(cause) => connection(cause, server),
        E::Auth(cause) => format!("cannot authenticate to the API server: {}", auth(cause)),
        E::RustlsTls(cause) => tls_setup(cause),
        E::SerdeError(cause) => format!(
            "the API server's answer is not what was expected: {}",
            crate::yaml::redact_serde_message(&cause.to_string())
        ),
        E::ReadEvents(cause) => format!("the watch stopped: {}", chain(cause)),
        // Building a client from a kubeconfig: said without the data kube's text quotes.
        E::InferKubeconfig(cause) => crate::kubeconfig::config_problem(cause),
        E::InferConfig(_) => "no Kubernetes configuration found (neither a kubeconfig nor in a \
                              pod)"
            .to_string(),
        other => without_type_name(&chain(other)),
    }
}

/// The API server's answer, with the common causes said in words.
fn api_status(status: &kube::core::Status) -> String {
    let message = status
        .message
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    // Bounded as a remote server's text is (not through `bounded`, which scrubs with this).
    let mut message: String = message.chars().take(crate::REMOTE_TEXT_LIMIT).collect();
    if status.message.chars().count() > crate::REMOTE_TEXT_LIMIT {
        message.push('…');
    }
    match status.code {
        // A path the server does not serve: kube reads the body `404 page not found` as the
        // message of a Status it could not parse.
        404 if is_missing_api(status) => {
            "the API server does not serve this resource (404 page not found): the API group is \
             not installed (a CustomResourceDefinition missing?)"
                .to_string()
        }
        401 => format!(
            "the API server does not accept the credentials (401 Unauthorized: the token or \
             client certificate is not valid, or expired){}",
            if message.is_empty() || message == "Unauthorized" {
                String::new()
            } else {
                format!(": {message}")
            }
        ),
        // `secrets is forbidden: User "u" cannot list resource "secrets" in API group "" in
        // the namespace "n"`: the verb, the resource and the identity, as the server says them.
        403 if !message.is_empty() => format!("denied by RBAC: {message}"),
        _ if !message.is_empty() => message,
        code => format!("HTTP {code} {}", status.reason),
    }
}

/// Whether a 404 says the URL is not served at all (no such API group or resource) rather
/// than that an object is absent.
pub fn is_missing_api(status: &kube::core::Status) -> bool {
    status.code == 404
        && (status.message.contains("page not found")
            || status.reason == "Failed to parse error data"
            || (status.details.is_none() && status.message.trim().is_empty()))
}

/// `error` when it says the API server does not serve `crd` (`clusters.cluster.x-k8s.io`), in
/// those words: what callers that list a CRD's objects say instead of [`describe`].
pub fn missing_crd(error: &kube::Error, crd: &str) -> Option<String> {
    match error {
        kube::Error::Api(status) if is_missing_api(status) => Some(format!(
            "the CustomResourceDefinition {crd} is not installed (the API server does not serve \
             it)"
        )),
        _ => None,
    }
}

/// A request that did not get an answer: the connection's error in words, with the address.
fn connection(error: &(dyn Error + 'static), server: Option<&str>) -> String {
    let mut named = None;
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(unanswered) = current.downcast_ref::<Unanswered>() {
            named = Some(unanswered.server.as_str());
        }
        cause = current.source();
    }
    let to = named
        .or(server)
        .map_or_else(|| "the API server".to_string(), str::to_string);
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            if let Some(tls) = io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                return tls_failure(tls, &to);
            }
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    format!(
                        "cannot connect to {to}: connection refused (is the API server running, at that address?)"
                    )
                }
                std::io::ErrorKind::TimedOut => format!("cannot connect to {to}: timed out"),
                _ => format!("cannot connect to {to}: {}", io_text(io)),
            };
        }
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return tls_failure(tls, &to);
        }
        cause = current.source();
    }
    let text = without_type_name(&chain(error));
    let text = match named {
        Some(server) => text.replacen(&format!("{server}: "), "", 1),
        None => text,
    };
    if text.contains("dns error") || text.contains("failed to lookup address") {
        return format!("cannot resolve the name of {to}: {text}");
    }
    if text.contains("timed out") || text.contains("deadline has elapsed") {
        return format!("no answer from {to} in time");
    }
    format!("cannot reach {to}: {text}")
}

/// An I/O error's text without Rust's `(os error N)`.
fn io_text(io: &std::io::Error) -> String {
    let text = io.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// A failed TLS handshake, with what to check for the common causes.
fn tls_failure(error: &rustls::Error, to: &str) -> String {
    use rustls::{CertificateError as C, Error as R};
    match error {
        R::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => format!(
            "TLS with {to}: {error}: the name in the kubeconfig's server (or tls-server-name) \
             must be one the server's certificate holds"
        ),
        R::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => format!(
            "TLS with {to}: the server's certificate is not signed by the certificate \
             authority the kubeconfig trusts (certificate-authority-data)"
        ),
        other => format!("TLS with {to}: {other}"),
    }
}

/// A TLS configuration kube could not build (the kubeconfig's certificates or key), without
/// the PEM parser's text (it quotes the line it stopped at).
fn tls_setup(error: &kube::client::RustlsTlsError) -> String {
    use kube::client::RustlsTlsError as T;
    match error {
        T::InvalidIdentityPem(_) => {
            "client-certificate-data and client-key-data are not valid PEM".into()
        }
        T::MissingPrivateKey => {
            "client-key-data holds no private key (PKCS8, RSA or SEC1 PEM expected)".into()
        }
        T::MissingCertificate => "client-certificate-data holds no certificate".into(),
        T::InvalidPrivateKey(_) | T::UnknownPrivateKeyFormat => {
            "client-key-data is not a private key rustls can use".into()
        }
        T::AddRootCertificate(_) => {
            "certificate-authority-data holds a certificate that cannot be used".into()
        }
        T::NoValidNativeRootCA(e) => format!("no system root certificates: {e}"),
        T::InvalidServerName(_) => "the server's host is not a valid TLS name".into(),
        #[allow(
            unreachable_patterns,
            reason = "kube's TLS error may have more variants in other versions"
        )]
        _ => "the TLS settings of the kubeconfig cannot be used".into(),
    }
}

/// An authentication layer's error without what an exec plugin printed (it may be a token).
fn auth(error: &kube::client::AuthError) -> String {
    use kube::client::AuthError as A;
    match error {
        A::AuthExecRun { cmd, out } => format!(
            "the kubeconfig's exec command {cmd:?} failed ({})",
            out.status
        ),
        A::AuthExecParse(_) | A::AuthExecSerialize(_) => {
            "the kubeconfig's exec command printed no valid ExecCredential".into()
        }
        // Its path is the user's; said by the field's name (a path may be anything).
        A::ReadTokenFile(io, _) => format!("cannot read the user's tokenFile ({})", io_text(io)),
        A::InvalidBearerToken(_) => "the token is not a valid HTTP header value".into(),
        A::InvalidBasicAuth(_) => {
            "the username or password is not a valid HTTP header value".into()
        }
        other => without_type_name(&chain(other)),
    }
}

/// An error and its causes, each once (a cause whose text the line already holds is left out).
fn chain(error: &(dyn Error + 'static)) -> String {
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

/// kube's Display prefixes (`ServiceError: `, `HyperError: `, `client error (Connect)`) out.
fn without_type_name(text: &str) -> String {
    let mut text = text.to_string();
    for noise in [
        "ServiceError: ",
        "HyperError: ",
        "ApiError: ",
        "HttpError: ",
        "client error (Connect): ",
        "client error (SendRequest): ",
        "tcp connect error: ",
    ] {
        text = text.replace(noise, "");
    }
    text
}

/// The text of `error` without its source's text: each cause is said by itself (and a kube
/// error by [`describe`]), so that a message that embeds its source's Display does not say it
/// twice, nor in kube's words.
fn own_text(error: &(dyn Error + 'static)) -> String {
    let text = error.to_string();
    let Some(source) = error.source() else {
        return text;
    };
    let inner = source.to_string();
    if inner.is_empty() || !text.contains(&inner) {
        return text;
    }
    text.replacen(&inner, "", 1)
        .trim_end_matches([' ', ':', '(', ')'])
        .to_string()
}

/// `text` (an error already made text, such as a watcher's or an error enum's that embeds a
/// kube error's Display) without kube's Rust: `ApiError: <m>: <r> (Status { .. })` becomes what
/// [`describe`] says of that status, and the `ServiceError:`/`HyperError:` prefixes, hyper's
/// `client error (Connect)`, `tcp connect error` and `(os error N)` go. What [`crate::bounded`]
/// applies to every condition message, Event note and logged error it is given.
pub fn scrub(text: &str) -> String {
    let mut text = text.to_string();
    while let Some(start) = text.find("ApiError: ") {
        let Some(open) = text[start..].find(" (Status {").map(|i| start + i) else {
            break;
        };
        let Some(close) = matching_paren(&text, open + 1) else {
            break;
        };
        let debug = &text[open..=close];
        let code = debug
            .split_once("code: ")
            .and_then(|(_, rest)| {
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse::<u16>()
                    .ok()
            })
            .unwrap_or_default();
        let shown = &text[start + "ApiError: ".len()..open];
        let (message, reason) = shown.rsplit_once(": ").unwrap_or((shown, ""));
        let status = kube::core::Status::failure(message, reason).with_code(code);
        let said = api_status(&status);
        text.replace_range(start..=close, &said);
    }
    let mut text = without_type_name(&text);
    while let Some(at) = text.find(" (os error ") {
        let Some(end) = text[at..].find(')') else {
            break;
        };
        text.replace_range(at..at + end + 1, "");
    }
    text.replace("Connection refused", "connection refused")
}

/// The index of the `)` that closes the `(` at `open`, skipping quoted strings.
fn matching_paren(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in text[open..].char_indices() {
        if quoted {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '(' | '{' | '[' => depth += 1,
            ')' | '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `error` and its causes on one line, each once: a cause whose text the line already holds
/// (many errors print their source in their own message) is not repeated, and kube's errors
/// are said by [`describe`].
pub fn one_line(error: &(dyn Error + 'static)) -> String {
    let mut line = String::new();
    let mut cause = Some(error);
    while let Some(current) = cause {
        let (text, last) = match current.downcast_ref::<kube::Error>() {
            Some(kube) => (describe(kube), true),
            None => (own_text(current), false),
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

    /// No Rust in a text a person reads.
    fn no_rust(text: &str) {
        for rust in [
            "ServiceError",
            "ApiError",
            "HyperError",
            "Status {",
            "os error",
            "Error(",
        ] {
            assert!(!text.contains(rust), "{rust:?} in {text:?}");
        }
    }

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn an_unreadable_token_file_is_said_by_its_field_not_its_path() {
        let error = kube::Error::Auth(kube::client::AuthError::ReadTokenFile(
            std::io::Error::from(std::io::ErrorKind::NotFound),
            "/s3cr3t".into(),
        ));
        let text = describe(&error);
        assert!(text.contains("tokenFile"), "{text}");
        assert!(!text.contains("s3cr3t"), "{text}");
        no_rust(&text);
    }

    #[test]
    fn an_rbac_denial_says_the_verb_the_resource_and_the_identity() {
        let error = api(
            403,
            "Forbidden",
            "configmaps \"coredns\" is forbidden: User \"system:serviceaccount:kube-system:p\" \
             cannot get resource \"configmaps\" in API group \"\" in the namespace \"kube-system\"",
        );
        let line = one_line(&error);
        no_rust(&line);
        assert!(
            line.starts_with("denied by RBAC: configmaps \"coredns\" is forbidden"),
            "{line}"
        );
        for says in [
            "cannot get",
            "\"configmaps\"",
            "system:serviceaccount:kube-system:p",
        ] {
            assert!(line.contains(says), "{says:?} in {line}");
        }
    }

    #[test]
    fn a_path_the_server_does_not_serve_is_a_missing_crd() {
        // What kube makes of the body `404 page not found`.
        let error = api(404, "Failed to parse error data", "404 page not found\n");
        assert!(
            kube::Error::to_string(&error).contains("Status {"),
            "kube's own text"
        );
        let line = describe(&error);
        no_rust(&line);
        assert!(line.contains("CustomResourceDefinition missing"), "{line}");
        let crd = missing_crd(&error, "clusters.cluster.x-k8s.io").unwrap();
        assert!(
            crd.contains("clusters.cluster.x-k8s.io is not installed"),
            "{crd}"
        );
        // An object that is not there is another 404.
        let absent = api(404, "NotFound", "secrets \"a\" not found");
        assert_eq!(describe(&absent), "secrets \"a\" not found");
        assert!(missing_crd(&absent, "x").is_none());
    }

    #[test]
    fn kube_errors_already_made_text_lose_their_rust() {
        let missing = api(404, "Failed to parse error data", "404 page not found\n");
        let text = format!("failed to perform initial object list: {missing}");
        let scrubbed = scrub(&text);
        no_rust(&scrubbed);
        assert!(
            scrubbed.starts_with(
                "failed to perform initial object list: the API server does not serve"
            ),
            "{scrubbed}"
        );
        let forbidden = api(
            403,
            "Forbidden",
            "secrets is forbidden: User \"u\" cannot list (here)",
        );
        let scrubbed = scrub(&format!("watch: {forbidden}; then more"));
        assert_eq!(
            scrubbed,
            "watch: denied by RBAC: secrets is forbidden: User \"u\" cannot list (here); then more"
        );
        let refused = "ServiceError: client error (Connect): tcp connect error: Connection refused (os error 111)";
        assert_eq!(scrub(refused), "connection refused");
        // Through the bound every condition message takes.
        no_rust(&crate::bounded(&format!("cannot list: {missing}")));
    }

    #[test]
    fn bad_credentials_are_said_as_such() {
        let line = describe(&api(401, "Unauthorized", "Unauthorized"));
        assert!(line.contains("does not accept the credentials"), "{line}");
        no_rust(&line);
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_address() {
        // A port nothing listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let error = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
            .list(&Default::default())
            .await
            .unwrap_err();
        assert!(
            kube::Error::to_string(&error).contains("ServiceError"),
            "kube's own text"
        );
        let line = describe_at(&error, Some(&url));
        no_rust(&line);
        assert_eq!(
            line,
            format!(
                "cannot connect to {url}: connection refused (is the API server running, at \
                 that address?)"
            )
        );
        let line = one_line(&error);
        assert!(line.contains("connection refused"), "{line}");
        no_rust(&line);
    }

    #[test]
    fn a_certificate_for_another_name_says_which_and_what_to_set() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let error = kube::Error::Service(Box::new(io));
        let line = describe_at(&error, Some("https://10.0.0.1:6443"));
        no_rust(&line);
        assert!(line.starts_with("TLS with https://10.0.0.1:6443"), "{line}");
        assert!(line.contains("tls-server-name"), "{line}");
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let error = kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            tls,
        )));
        assert!(describe(&error).contains("certificate-authority-data"));
    }

    #[test]
    fn a_wrapper_that_prints_its_kube_source_says_it_once_in_our_words() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot list Clusters: {0}")]
        struct Listing(#[source] kube::Error);
        let error = Listing(api(404, "Failed to parse error data", "404 page not found"));
        let line = one_line(&error);
        no_rust(&line);
        assert!(
            line.starts_with("cannot list Clusters: the API server does not serve"),
            "{line}"
        );
        assert_eq!(line.matches("404").count(), 1, "{line}");
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

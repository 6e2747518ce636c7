//! YAML in and out, read and written the same way by every xcc binary.
//!
//! Reading follows YAML 1.2 (only `true`/`false` are booleans; `yes`, `on` stay strings) and an
//! error never quotes the input: a kubeconfig carries credentials, and errors are logged and
//! written to conditions. Writing keeps long one-line strings (certificate data, tokens) on one
//! line and writes strings with newlines as literal blocks, as `kubectl` does.

use std::borrow::Cow;

use serde::{Serialize, de::DeserializeOwned};
use serde_saphyr::{Error as Saphyr, MessageFormatter, UserMessageFormatter};

/// Why a text is not the YAML expected: the problem and its line and column, never a byte of
/// the input (a kubeconfig carries credentials; errors are logged and written to conditions).
///
/// The parser's own rendering quotes values (`invalid type: string "s3cr3t", expected a
/// sequence`), so the message is made here from its structured error ([`Redacted`]); and the
/// error has no `source()`, so that nothing that prints an error chain reaches that rendering.
pub struct Error(Box<Saphyr>);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.render_with_options(serde_saphyr::render_options! {
            formatter: &Redacted,
            snippets: serde_saphyr::SnippetMode::Off,
        }))
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The parser's Debug holds the values: the same text as Display instead.
        write!(f, "yaml::Error({self})")
    }
}

impl std::error::Error for Error {}

impl Error {
    /// The parser's error, shown by [`Redacted`] (kube's own kubeconfig reader returns one).
    pub fn new(error: Saphyr) -> Error {
        Error(Box::new(error))
    }

    /// Line and column (from 1) of the problem, when the parser knows them.
    pub fn line_column(&self) -> Option<(usize, usize)> {
        self.0
            .location()
            .map(|l| (l.line() as usize, l.column() as usize))
            .filter(|(line, _)| *line > 0)
    }
}

/// Messages of the parser's errors made of their kind, the type expected and the kind of value
/// found (`expected a sequence, found a string`): never the value, a key, a tag or an anchor.
struct Redacted;

impl MessageFormatter for Redacted {
    fn format_message<'a>(&self, err: &'a Saphyr) -> Cow<'a, str> {
        match err {
            Saphyr::WithSnippet { error, .. } => self.format_message(error),
            Saphyr::SerdeInvalidType {
                unexpected,
                expected,
                ..
            } => format!("expected {expected}, found {}", value_kind(unexpected)).into(),
            Saphyr::SerdeInvalidValue { expected, .. } => {
                format!("invalid value, expected {expected}").into()
            }
            Saphyr::SerdeUnknownVariant { expected, .. } => {
                format!("unknown value, expected one of {}", expected.join(", ")).into()
            }
            Saphyr::SerdeUnknownField { expected, .. } => {
                format!("unknown field, expected one of {}", expected.join(", ")).into()
            }
            Saphyr::DuplicateMappingKey { .. } => "duplicate key".into(),
            Saphyr::NonFiniteFloat { .. } => "a number that is not finite".into(),
            Saphyr::UnsupportedTag { .. } | Saphyr::TaggedStructFieldName { .. } => {
                "a tag that is not supported".into()
            }
            Saphyr::TaggedEnumMismatch { .. } => "a tag that does not fit here".into(),
            // Free text of a type's own deserializer: it may quote the value.
            Saphyr::Message { msg, .. } | Saphyr::SerdeVariantId { msg, .. } => {
                redact_serde_message(msg).into()
            }
            Saphyr::HookError { .. }
            | Saphyr::UnresolvedProperty { .. }
            | Saphyr::InvalidPropertyName { .. }
            | Saphyr::PropertyRequiredButUnset { .. }
            | Saphyr::PropertyRequiredButEmpty { .. }
            | Saphyr::CyclicInclude { .. }
            | Saphyr::ResolverError { .. } => "a construct that is not supported here".into(),
            // The rest say what is wrong without the input (the scanner's messages are fixed
            // texts: `while scanning a quoted scalar, found unexpected end of stream`).
            _ => UserMessageFormatter.format_message(err),
        }
    }
}

/// The kind of a value as serde names it in `invalid type: <kind> <value>`: the kind only.
fn value_kind(unexpected: &str) -> &'static str {
    const KINDS: [(&str, &str); 14] = [
        ("boolean", "a boolean"),
        ("integer", "an integer"),
        ("floating point", "a number"),
        ("character", "a character"),
        ("string", "a string"),
        ("byte array", "bytes"),
        ("unit", "null"),
        ("null", "null"),
        ("Option", "null"),
        ("seq", "a sequence"),
        ("sequence", "a sequence"),
        ("map", "a mapping"),
        ("newtype", "a value"),
        ("enum", "a value"),
    ];
    KINDS
        .iter()
        .find(|(prefix, _)| unexpected.starts_with(prefix))
        .map_or("another kind of value", |(_, kind)| kind)
}

/// A serde error message (`invalid type: string "s3cr3t", expected a sequence`) without the
/// value it quotes. Messages of another form become a generic one: their text is not known
/// to be free of the value.
pub fn redact_serde_message(message: &str) -> String {
    let expected = || message.rsplit_once(", expected ").map(|(_, e)| e);
    if let Some(rest) = message.strip_prefix("invalid type: ")
        && let Some(expected) = expected()
    {
        return format!("expected {expected}, found {}", value_kind(rest));
    }
    if (message.starts_with("invalid value: ") || message.starts_with("unknown variant "))
        && let Some(expected) = expected()
    {
        return format!("invalid value, expected {expected}");
    }
    if message.starts_with("unknown field ")
        && let Some(expected) = expected()
    {
        return format!("unknown field, expected {expected}");
    }
    if message.starts_with("missing field `")
        || message.starts_with("invalid length ")
        || message.starts_with("data did not match any variant")
    {
        return message.to_string();
    }
    "invalid value".to_string()
}

/// Why a value could not be written as YAML.
pub type SerializeError = serde_saphyr::SerializeError;

fn options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options.with_snippet = false;
    options
}

/// Parses one YAML document.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(text, options()).map_err(Error::new)
}

/// Parses one YAML document given as bytes (UTF-8).
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    serde_saphyr::from_slice_with_options(bytes, options()).map_err(Error::new)
}

/// Parses every document of a YAML stream, with YAML 1.1 booleans (`yes`, `on`) as kube reads
/// kubeconfig files.
pub fn documents<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, Error> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    serde_saphyr::from_multiple_with_options(text, options).map_err(Error::new)
}

/// Writes `value` as one YAML document.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, SerializeError> {
    let mut options = serde_saphyr::SerializerOptions::default();
    // Only strings with newlines become block scalars: no folding of long lines.
    options.folded_wrap_chars = usize::MAX;
    serde_saphyr::to_string_with_options(value, options)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    #[test]
    fn reads_yaml_1_2_scalars() {
        let value: Value = super::from_str("a: yes\nb: true\nc: '1'\nd: 1\ne: on\nf: ~\n").unwrap();
        assert_eq!(
            value,
            json!({"a": "yes", "b": true, "c": "1", "d": 1, "e": "on", "f": null})
        );
    }

    #[test]
    fn errors_do_not_quote_the_input() {
        let err = super::from_str::<Value>("token: s3cr3t\n  bad: [\n").unwrap_err();
        assert!(!err.to_string().contains("s3cr3t"), "{err}");
    }

    #[test]
    fn round_trips_long_and_multi_line_strings() {
        let long = "x".repeat(300);
        let value = json!({"data": long, "text": "one\ntwo\n", "plain": "true", "n": 3});
        let text = super::to_string(&value).unwrap();
        assert!(text.contains(&format!("data: {long}\n")), "{text}");
        assert!(text.contains("text: |\n"), "{text}");
        assert_eq!(super::from_str::<Value>(&text).unwrap(), value);
    }
}

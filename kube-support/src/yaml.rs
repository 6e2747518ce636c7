//! YAML in and out, read and written the same way by every xcc binary.
//!
//! Reading follows YAML 1.2 (only `true`/`false` are booleans; `yes`, `on` stay strings) and an
//! error never quotes the input: a kubeconfig carries credentials, and errors are logged and
//! written to conditions. Writing keeps long one-line strings (certificate data, tokens) on one
//! line and writes strings with newlines as literal blocks, as `kubectl` does.

use serde::{Serialize, de::DeserializeOwned};

/// Why a text is not the YAML expected (position and cause; never the input itself).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Error(Box<serde_saphyr::Error>);

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
    serde_saphyr::from_str_with_options(text, options()).map_err(|e| Error(Box::new(e)))
}

/// Parses one YAML document given as bytes (UTF-8).
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    serde_saphyr::from_slice_with_options(bytes, options()).map_err(|e| Error(Box::new(e)))
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

//! Bytes as text the way the Kubernetes API writes them: standard base64 with padding, as in a
//! Secret's `data` and a kubeconfig's `certificate-authority-data`. Encoding and decoding go
//! through `k8s_openapi::ByteString`'s serde, the same conversion kube applies to every such
//! field (and the API server to Secret data), so xcc never writes or accepts a form the API would
//! not. Tokens (JWT) use the URL-safe alphabet without padding: [`decode_base64url`].

use k8s_openapi::ByteString;
use serde::{Deserialize, de::IntoDeserializer};

/// Why a text is not base64 (the position of the first bad character; never the text itself).
#[derive(Debug, thiserror::Error)]
#[error("not base64: {0}")]
pub struct DecodeError(serde::de::value::Error);

/// `bytes` as standard base64 with padding.
pub fn encode_base64(bytes: impl AsRef<[u8]>) -> String {
    match serde_json::to_value(ByteString(bytes.as_ref().to_vec())) {
        Ok(serde_json::Value::String(text)) => text,
        // ByteString serializes as a string, always.
        other => unreachable!("ByteString serialized as {other:?}"),
    }
}

/// The bytes of standard base64 `text` (padding required, no whitespace), as the API server
/// decodes Secret data.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, DecodeError> {
    let deserializer: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
        text.into_deserializer();
    ByteString::deserialize(deserializer)
        .map(|bytes| bytes.0)
        .map_err(DecodeError)
}

/// The bytes of URL-safe base64 `text` with or without padding: a segment of a JWT (RFC 7515).
pub fn decode_base64url(text: &str) -> Result<Vec<u8>, DecodeError> {
    let mut standard: String = text
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            // A character of the standard alphabet only: `+` or `/` here is an error.
            '+' | '/' => '!',
            c => c,
        })
        .collect();
    while !standard.len().is_multiple_of(4) {
        standard.push('=');
    }
    decode_base64(&standard)
}

/// `bytes` as URL-safe base64 without padding (a JWT segment).
pub fn encode_base64url(bytes: impl AsRef<[u8]>) -> String {
    encode_base64(bytes)
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_base64_round_trips_as_the_api_writes_it() {
        assert_eq!(encode_base64("kubeconfig"), "a3ViZWNvbmZpZw==");
        assert_eq!(decode_base64("a3ViZWNvbmZpZw==").unwrap(), b"kubeconfig");
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode_base64(&encode_base64(&all)).unwrap(), all);
        assert_eq!(decode_base64("").unwrap(), b"");
    }

    #[test]
    fn what_the_api_server_refuses_is_refused_without_quoting_it() {
        for bad in ["not base64!", "a3ViZWNvbmZpZw", "a3Vi\nZWNv", "-_-_"] {
            let err = decode_base64(bad).unwrap_err().to_string();
            assert!(err.starts_with("not base64: "), "{bad:?}: {err}");
            assert!(!err.contains(bad), "{err}");
        }
    }

    #[test]
    fn url_safe_base64_decodes_jwt_segments() {
        // 0xfb 0xff: `+/8` in the standard alphabet, `-_8` in the URL-safe one.
        assert_eq!(encode_base64url([0xfb, 0xff]), "-_8");
        assert_eq!(decode_base64url("-_8").unwrap(), [0xfb, 0xff]);
        assert_eq!(decode_base64url("-_8=").unwrap(), [0xfb, 0xff]);
        assert_eq!(
            decode_base64url(&encode_base64url(r#"{"iat":1}"#)).unwrap(),
            br#"{"iat":1}"#
        );
        assert!(decode_base64url("+/8").is_err());
        assert!(decode_base64url("a").is_err());
    }
}

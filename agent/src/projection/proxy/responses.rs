//! Request bodies read within bounds, and the answers the server makes itself: Statuses for
//! 403, 404, 503, and a foreign error page turned into a Status.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::json;

use super::front::User;
use super::request::ResourceRequest;

use super::{Body, BoxError, MAX_BODY, MAX_FOREIGN_ERROR_TEXT, RETRY_AFTER};

/// Most bytes of a refused (too large) request body read and dropped, so that the client, still
/// sending, gets the 413 rather than a reset; a larger one ends the connection.
const MAX_DRAINED: usize = 64 * 1024 * 1024;
/// How long reading a request body may take.
const BODY_DEADLINE: Duration = Duration::from_secs(30);

/// The whole request body, at most [`MAX_BODY`] bytes; else the answer saying why not.
pub(super) async fn read_body(mut body: Incoming) -> Result<Bytes, Box<Response<Body>>> {
    let read = async {
        let mut collected = bytes::BytesMut::new();
        let mut seen = 0usize;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return Err("the request body could not be read");
            };
            if let Some(data) = frame.data_ref() {
                seen += data.len();
                if seen <= MAX_BODY {
                    collected.extend_from_slice(data);
                } else if seen > MAX_DRAINED {
                    break;
                }
            }
        }
        Ok((collected.freeze(), seen))
    };
    match tokio::time::timeout(BODY_DEADLINE, read).await {
        Ok(Ok((body, seen))) if seen <= MAX_BODY => Ok(body),
        Ok(Ok(_)) => Err(Box::new(status(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            &format!("the request body is larger than {MAX_BODY} bytes"),
        ))),
        Ok(Err(why)) => Err(Box::new(status(StatusCode::BAD_REQUEST, "BadRequest", why))),
        Err(_) => Err(Box::new(status(
            StatusCode::REQUEST_TIMEOUT,
            "Timeout",
            "the request body did not arrive in time",
        ))),
    }
}

pub(super) fn full(bytes: Bytes) -> Body {
    Full::new(bytes)
        .map_err(|never| -> BoxError { match never {} })
        .boxed_unsync()
}

pub(super) fn json_body(body: Bytes) -> Response<Body> {
    let mut response = Response::new(full(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A `Status` object.
pub(super) fn status_value(code: StatusCode, reason: &str, message: &str) -> serde_json::Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    })
}

pub(super) fn value_answer(code: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = json_body(Bytes::from(value.to_string()));
    *response.status_mut() = code;
    response
}

/// A `Status` answer.
pub fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    value_answer(code, &status_value(code, reason, message))
}

pub(super) fn not_found(message: &str) -> Response<Body> {
    status(StatusCode::NOT_FOUND, "NotFound", message)
}

pub(super) fn unavailable(message: &str) -> Response<Body> {
    let mut response = status(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        message,
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER));
    response
}

/// The 403 kube-apiserver would give.
pub(super) fn forbidden(user: &User, r: &ResourceRequest) -> Response<Body> {
    let what = match &r.name {
        Some(name) => format!("{}.{} {:?}", r.resource, r.group, name),
        None => format!("{}.{}", r.resource, r.group),
    };
    let resource = match &r.subresource {
        Some(sub) => format!("{}/{sub}", r.resource),
        None => r.resource.clone(),
    };
    let message = format!(
        "{what} is forbidden: User {:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
        user.name,
        r.verb,
        r.group,
        r.namespace.clone().unwrap_or_default()
    );
    let mut value = status_value(StatusCode::FORBIDDEN, "Forbidden", &message);
    value["details"] =
        json!({"name": r.name.clone().unwrap_or_default(), "group": r.group, "kind": r.resource});
    value_answer(StatusCode::FORBIDDEN, &value)
}

/// Upstream's error as a Status with the same code, reason and details, its message bounded;
/// upstream's `Retry-After` kept (a 503 or 429 without one gets this server's).
pub(super) fn upstream_error(
    code: StatusCode,
    body: &[u8],
    retry_after: Option<HeaderValue>,
) -> Response<Body> {
    let retry_after = retry_after.or_else(|| {
        (code == StatusCode::SERVICE_UNAVAILABLE || code == StatusCode::TOO_MANY_REQUESTS)
            .then(|| HeaderValue::from_static(RETRY_AFTER))
    });
    let is_status =
        serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| v["kind"] == "Status");
    let mut response = if is_status {
        // The service cluster's own Status, byte for byte: its message (every apply conflict,
        // one per line) is what the user must read.
        let mut response = json_body(Bytes::copy_from_slice(body));
        *response.status_mut() = code;
        response
    } else {
        let text = String::from_utf8_lossy(body);
        let text = match text.char_indices().nth(MAX_FOREIGN_ERROR_TEXT) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text.into_owned(),
        };
        let reason = code
            .canonical_reason()
            .unwrap_or("Unknown")
            .replace(' ', "");
        status(code, &reason, &text)
    };
    if let Some(retry_after) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, retry_after);
    }
    response
}

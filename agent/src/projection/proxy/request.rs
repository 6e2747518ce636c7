//! What a request to the aggregated API server asks for, read from its method, path and query
//! alone: discovery of a group or version, or a resource request with the Kubernetes verb it
//! stands for. Nothing here trusts the path: every segment is checked before it is used, so a
//! name like `..` or one with an encoded `/` never reaches a SubjectAccessReview or the service
//! cluster.

use http::Method;

/// Longest name of any path segment (a DNS subdomain).
const MAX_SEGMENT: usize = 253;

/// What the request is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `GET /apis/<group>`.
    Group { group: String },
    /// `GET /apis/<group>/<version>`.
    Version { group: String, version: String },
    /// A request on resources of `/apis/<group>/<version>/...`.
    Resource(ResourceRequest),
    /// `GET /openapi/v2`.
    OpenApiV2,
    /// `GET /openapi/v3`.
    OpenApiIndex,
    /// `GET /openapi/v3/apis/<group>[/<version>]`.
    OpenApiGroup { group: String },
    /// A path this server does not serve (`/apis`, `/api/...`): 404.
    Unserved,
}

/// A resource request, as an authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceRequest {
    pub verb: &'static str,
    pub group: String,
    pub version: String,
    /// `None` for a request across namespaces (or on a cluster-scoped resource).
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// Why a request is refused before anything else looks at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("invalid path segment {0:?}: {1}")]
    BadSegment(String, &'static str),
    #[error("method {0} is not supported")]
    Method(String),
}

/// Why a request body is refused before it is forwarded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyRefusal {
    /// 400.
    #[error("the request body is not valid {0}: {1}")]
    Malformed(&'static str, String),
    /// 415.
    #[error("the projected API takes JSON bodies (and YAML for server-side apply), not {0:?}")]
    MediaType(String),
}

/// Checks a request body against its `Content-Type`: JSON for the JSON types (object creation,
/// update, merge, JSON and strategic merge patches, delete options), YAML for server-side apply.
/// A service cluster never sees a body that does not parse.
pub fn check_body(content_type: Option<&str>, body: &[u8]) -> Result<(), BodyRefusal> {
    if body.is_empty() {
        return Ok(());
    }
    let media = content_type
        .and_then(|t| t.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match media.as_str() {
        "application/json"
        | "application/merge-patch+json"
        | "application/json-patch+json"
        | "application/strategic-merge-patch+json" => {
            serde_json::from_slice::<serde::de::IgnoredAny>(body)
                .map(|_| ())
                .map_err(|e| BodyRefusal::Malformed("JSON", xcc_kube::bounded(&e)))
        }
        "application/apply-patch+yaml" => xcc_kube::yaml::from_slice::<serde_json::Value>(body)
            .map(|_| ())
            .map_err(|e| BodyRefusal::Malformed("YAML", xcc_kube::bounded(&e))),
        other => Err(BodyRefusal::MediaType(xcc_kube::bounded(&other))),
    }
}

/// Reads `method path?query`.
pub fn parse(method: &Method, path: &str, query: Option<&str>) -> Result<Target, Refusal> {
    if path == "/openapi/v2" {
        return Ok(openapi(method, Target::OpenApiV2));
    }
    if path == "/openapi/v3" || path == "/openapi/v3/" {
        return Ok(openapi(method, Target::OpenApiIndex));
    }
    if let Some(rest) = path.strip_prefix("/openapi/v3/apis/") {
        let segments: Vec<&str> = rest.split('/').collect();
        if !(1..=2).contains(&segments.len()) {
            return Ok(Target::Unserved);
        }
        for segment in &segments {
            check_segment(segment)?;
            lowercase(segment)?;
        }
        let group = segments[0].to_string();
        return Ok(openapi(method, Target::OpenApiGroup { group }));
    }
    let Some(rest) = path.strip_prefix("/apis/") else {
        return Ok(Target::Unserved);
    };
    let segments: Vec<&str> = rest.split('/').collect();
    // A trailing slash leaves an empty last segment: kube-apiserver serves such paths too.
    let segments = match segments.split_last() {
        Some((last, init)) if last.is_empty() && !init.is_empty() => init.to_vec(),
        _ => segments,
    };
    for segment in &segments {
        check_segment(segment)?;
    }
    let lower = lowercase;
    match segments.as_slice() {
        [group] => Ok(Target::Group {
            group: lower(group)?,
        }),
        [group, version] => Ok(Target::Version {
            group: lower(group)?,
            version: lower(version)?,
        }),
        [group, version, rest @ ..] => {
            let (namespace, rest) = match rest {
                ["namespaces", namespace, rest @ ..] if !rest.is_empty() => {
                    (Some(lower(namespace)?), rest)
                }
                _ => (None, rest),
            };
            let (resource, name, subresource) = match rest {
                [resource] => (lower(resource)?, None, None),
                [resource, name] => (lower(resource)?, Some(name.to_string()), None),
                [resource, name, sub] => {
                    (lower(resource)?, Some(name.to_string()), Some(lower(sub)?))
                }
                _ => return Ok(Target::Unserved),
            };
            let verb = verb(method, name.is_some(), watching(query))?;
            Ok(Target::Resource(ResourceRequest {
                verb,
                group: lower(group)?,
                version: lower(version)?,
                namespace,
                resource,
                name,
                subresource,
            }))
        }
        _ => Ok(Target::Unserved),
    }
}

/// OpenAPI is only read.
fn openapi(method: &Method, target: Target) -> Target {
    if method == Method::GET {
        target
    } else {
        Target::Unserved
    }
}

/// `s` when it holds only lowercase letters, digits, '-' and '.' (groups, versions, resources,
/// namespaces).
fn lowercase(s: &str) -> Result<String, Refusal> {
    if s.bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        Ok(s.to_string())
    } else {
        Err(Refusal::BadSegment(
            xcc_kube::bounded(&s),
            "only lowercase letters, digits, '-' and '.' are allowed here",
        ))
    }
}

/// A path segment that may be used as a name: not empty, not `.` or `..`, no `%` (so no encoded
/// `/`), no control characters, at most [`MAX_SEGMENT`] bytes.
fn check_segment(segment: &str) -> Result<(), Refusal> {
    let bad = |why| Err(Refusal::BadSegment(xcc_kube::bounded(&segment), why));
    if segment.is_empty() {
        return bad("empty");
    }
    if segment == "." || segment == ".." {
        return bad("'.' and '..' are not names");
    }
    if segment.len() > MAX_SEGMENT {
        return bad("longer than 253 characters");
    }
    if segment.contains('%') {
        return bad("'%' is not allowed in a name");
    }
    if segment.chars().any(char::is_control) {
        return bad("control characters are not allowed");
    }
    Ok(())
}

/// Whether the query asks for a watch (`watch=true` or `watch=1`).
fn watching(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "watch" && (v == "true" || v == "1"))
    })
}

/// The Kubernetes verb of `method` on one object (`named`) or a collection.
fn verb(method: &Method, named: bool, watch: bool) -> Result<&'static str, Refusal> {
    Ok(match (method.as_str(), named) {
        ("GET" | "HEAD", _) if watch => "watch",
        ("GET" | "HEAD", true) => "get",
        ("GET" | "HEAD", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        (other, _) => return Err(Refusal::Method(xcc_kube::bounded(&other))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(method: Method, path: &str, query: Option<&str>) -> ResourceRequest {
        match parse(&method, path, query).unwrap() {
            Target::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn verbs_follow_the_method_the_name_and_the_watch_parameter() {
        let base = "/apis/rabbitmq.com/v1beta1/namespaces/team-1/rabbitmqclusters";
        let one = format!("{base}/hello");
        for (method, path, query, verb) in [
            (Method::GET, base, None, "list"),
            (
                Method::GET,
                base,
                Some("watch=true&resourceVersion=5"),
                "watch",
            ),
            (Method::GET, base, Some("watch=1"), "watch"),
            (Method::GET, base, Some("watch=false"), "list"),
            (Method::GET, one.as_str(), None, "get"),
            (Method::POST, base, None, "create"),
            (Method::PUT, one.as_str(), None, "update"),
            (Method::PATCH, one.as_str(), None, "patch"),
            (Method::DELETE, one.as_str(), None, "delete"),
            (Method::DELETE, base, None, "deletecollection"),
        ] {
            assert_eq!(resource(method, path, query).verb, verb, "{path} {query:?}");
        }
    }

    #[test]
    fn a_namespaced_path_names_its_parts() {
        let r = resource(
            Method::PUT,
            "/apis/rabbitmq.com/v1beta1/namespaces/team-1/rabbitmqclusters/hello/status",
            None,
        );
        assert_eq!(
            r,
            ResourceRequest {
                verb: "update",
                group: "rabbitmq.com".into(),
                version: "v1beta1".into(),
                namespace: Some("team-1".into()),
                resource: "rabbitmqclusters".into(),
                name: Some("hello".into()),
                subresource: Some("status".into()),
            }
        );
        let all = resource(
            Method::GET,
            "/apis/rabbitmq.com/v1beta1/rabbitmqclusters",
            None,
        );
        assert_eq!((all.namespace, all.verb), (None, "list"));
        // A namespace itself is a cluster-scoped resource named "namespaces".
        let ns = resource(
            Method::GET,
            "/apis/rabbitmq.com/v1beta1/namespaces/team-1",
            None,
        );
        assert_eq!(
            (ns.resource.as_str(), ns.name.as_deref()),
            ("namespaces", Some("team-1"))
        );
    }

    #[test]
    fn discovery_and_other_paths() {
        assert_eq!(
            parse(&Method::GET, "/apis/rabbitmq.com", None).unwrap(),
            Target::Group {
                group: "rabbitmq.com".into()
            }
        );
        assert_eq!(
            parse(&Method::GET, "/apis/rabbitmq.com/v1beta1/", None).unwrap(),
            Target::Version {
                group: "rabbitmq.com".into(),
                version: "v1beta1".into()
            }
        );
        assert_eq!(
            parse(&Method::GET, "/openapi/v3", None).unwrap(),
            Target::OpenApiIndex
        );
        assert_eq!(
            parse(
                &Method::GET,
                "/openapi/v3/apis/rabbitmq.com/v1beta1",
                Some("hash=AB")
            )
            .unwrap(),
            Target::OpenApiGroup {
                group: "rabbitmq.com".into()
            }
        );
        assert!(parse(&Method::GET, "/openapi/v3/apis/../v1", None).is_err());
        assert_eq!(
            parse(&Method::GET, "/openapi/v2", None).unwrap(),
            Target::OpenApiV2
        );
        assert_eq!(
            parse(&Method::POST, "/openapi/v2", None).unwrap(),
            Target::Unserved
        );
        for path in ["/apis", "/api/v1", "/healthz", "/", "/openapi/v3/api/v1"] {
            assert_eq!(
                parse(&Method::GET, path, None).unwrap(),
                Target::Unserved,
                "{path}"
            );
        }
        assert_eq!(
            parse(&Method::GET, "/apis/g/v/namespaces/n/r/name/sub/more", None).unwrap(),
            Target::Unserved
        );
    }

    #[test]
    fn bodies_must_parse_as_their_content_type_says() {
        let json = Some("application/json");
        assert_eq!(check_body(json, br#"{"spec":{"replicas":3}}"#), Ok(()));
        assert_eq!(check_body(None, b""), Ok(()));
        assert!(matches!(
            check_body(json, b"{\"spec\": "),
            Err(BodyRefusal::Malformed("JSON", _))
        ));
        assert!(matches!(
            check_body(
                Some("application/merge-patch+json; charset=utf-8"),
                b"not json"
            ),
            Err(BodyRefusal::Malformed("JSON", _))
        ));
        assert_eq!(
            check_body(
                Some("application/json-patch+json"),
                br#"[{"op":"replace","path":"/spec/replicas","value":3}]"#
            ),
            Ok(())
        );
        assert_eq!(
            check_body(
                Some("application/apply-patch+yaml"),
                b"apiVersion: rabbitmq.com/v1beta1\nkind: RabbitmqCluster\n"
            ),
            Ok(())
        );
        assert!(matches!(
            check_body(Some("application/apply-patch+yaml"), b"a: [unclosed"),
            Err(BodyRefusal::Malformed("YAML", _))
        ));
        assert!(matches!(
            check_body(Some("application/vnd.kubernetes.protobuf"), b"k8s\0"),
            Err(BodyRefusal::MediaType(_))
        ));
        assert!(matches!(
            check_body(None, b"{}"),
            Err(BodyRefusal::MediaType(_))
        ));
    }

    #[test]
    fn hostile_paths_are_refused() {
        for path in [
            "/apis/rabbitmq.com/v1beta1/namespaces/team-1/rabbitmqclusters/..",
            "/apis/rabbitmq.com/v1beta1/namespaces/../rabbitmqclusters",
            "/apis/rabbitmq.com/v1beta1/namespaces/team-1/rabbitmqclusters/a%2Fb",
            "/apis/rabbitmq.com//namespaces/team-1/rabbitmqclusters",
            "/apis/RabbitMQ.com/v1beta1/namespaces/team-1/rabbitmqclusters",
            "/apis/rabbitmq.com/v1beta1/namespaces/Team_1/rabbitmqclusters/x",
        ] {
            assert!(
                matches!(
                    parse(&Method::GET, path, None),
                    Err(Refusal::BadSegment(..))
                ),
                "{path}"
            );
        }
        let long = format!("/apis/g/v/namespaces/n/r/{}", "a".repeat(254));
        assert!(parse(&Method::GET, &long, None).is_err());
        assert!(matches!(
            parse(&Method::CONNECT, "/apis/g/v/namespaces/n/r/x", None),
            Err(Refusal::Method(_))
        ));
    }
}

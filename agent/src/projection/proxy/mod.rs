//! The aggregated API server of the workload cluster: serves the imported API groups of the
//! service clusters, as registered by ClusterAPIGroupImports' APIServices.
//!
//! ```text
//!  kubectl ─► kube-apiserver ──(front-proxy client cert, X-Remote-User/Group/Extra)──► this server
//!                                                                      │ 1. cert: front-proxy CA,
//!                                                                      │    allowed names
//!                                                                      │ 2. path checked; resource
//!                                                                      │    imported in namespace?
//!                                                                      │    (APIResourceImport) else 404
//!                                                                      │ 3. SubjectAccessReview on
//!                                                                      │    this cluster, else 403
//!                                                                      ▼ 4. same request, the link's
//!                                                   service cluster ◄──   identity (its kubeconfig)
//! ```
//!
//! One HTTPS listener serves every DownstreamClusterLink: the certificate is chosen by the name
//! the API server asks for (`<link>-proxy.<namespace>.svc`). Discovery (`/apis/<group>`,
//! `/apis/<group>/<version>`) is forwarded too and its last good answer kept, so that the
//! cluster's discovery keeps working while the service cluster is unreachable; data requests then
//! get 503 with `Retry-After`. Upstream answers pass through unchanged (status, `resourceVersion`,
//! `uid`, Table output, watch streams, error Statuses byte for byte up to 1 MiB); an error body
//! that is not a Status (a proxy's HTML page) becomes a Status whose message is its first 4,096
//! characters.

pub mod front;
pub mod identity;
pub mod openapi;
pub mod request;
pub mod upstream;

mod authz;
mod discovery;
mod listener;
mod responses;

use authz::Decisions;
pub use listener::Certs;
use listener::{Caller, Front};
pub use responses::status;
use responses::{
    forbidden, full, json_body, not_found, read_body, status_value, unavailable, upstream_error,
    value_answer,
};

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use bytes::Bytes;
use dashmap::DashMap;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use k8s_openapi::api::core::v1::Namespace;
use kube::{ResourceExt, api::PartialObjectMeta, runtime::reflector::Store};
use xcc_kube::{PeerClient, PeerClients, Reach};

use super::api::{APIResourceImport, ClusterAPIGroupImport};
use crate::sync_metrics::SyncMetrics;
use front::{FrontProxy, User};
use request::{ResourceRequest, Target};
use upstream::{Liveness, Upstream};

/// Largest request body accepted (kube-apiserver's own limit is 3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// Largest OpenAPI v2 document read from upstream (a whole cluster's, several MiB).
const MAX_OPENAPI_BODY: usize = 64 * 1024 * 1024;
/// Largest error body passed on from upstream (an API server's Status is a few KiB even when it
/// lists hundreds of apply conflicts); a larger one is answered as a 502 that says so.
const MAX_ERROR_BODY: usize = 1024 * 1024;
/// Longest text of an upstream error that is not a Kubernetes Status (an HTML page of a proxy in
/// front of the service cluster), kept as the message of the Status answered in its place.
const MAX_FOREIGN_ERROR_TEXT: usize = 4096;
/// How long upstream may take to answer a request with its headers while it answers
/// [`upstream`]'s questions (kube-apiserver's own default request timeout).
pub const UPSTREAM_DEADLINE: Duration = Duration::from_secs(60);
/// The same for discovery and OpenAPI, which have a last good copy to fall back on (well inside
/// the 5 s kube-aggregator allows an APIService's availability check).
const DISCOVERY_DEADLINE: Duration = Duration::from_secs(3);
/// What this server's 503 asks the client to wait, in seconds: nothing, because the answer comes
/// at once while the service cluster is silent ([`upstream`]). client-go retries a 5xx with
/// `Retry-After` up to ten times: with 0 that costs `kubectl get` milliseconds, not ten seconds.
const RETRY_AFTER: &str = "0";

type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every answer: a whole one, or upstream's stream.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// The aggregated API server's state, shared by its connections and the reconcilers that feed it.
pub struct Proxy {
    /// Who the server is on this (workload) cluster: SubjectAccessReviews, the front proxy's
    /// settings, namespaces.
    identity: Arc<identity::Identity>,
    peers: PeerClients,
    certs: Arc<Certs>,
    front: RwLock<Option<Arc<Front>>>,
    /// Why there are no front-proxy settings, when there are none.
    front_error: Mutex<Option<String>>,
    /// The client of each DownstreamClusterLink (`namespace/name`), from the gate: read by
    /// every request, written by the link reconciler.
    links: DashMap<String, PeerClient>,
    imports: Store<ClusterAPIGroupImport>,
    resources: Store<APIResourceImport>,
    /// This cluster's namespaces: which are being deleted.
    namespaces: Store<PartialObjectMeta<Namespace>>,
    metrics: SyncMetrics,
    /// The last good discovery answer of each path, read and written by concurrent requests.
    discovery: DashMap<String, Bytes>,
    /// Whether each link's service cluster answers.
    liveness: Liveness,
    /// Recent SubjectAccessReview answers.
    decisions: Decisions,
    /// Where the server listens, once it does.
    listening: Mutex<Option<SocketAddr>>,
}

impl Proxy {
    pub fn new(
        identity: Arc<identity::Identity>,
        peers: PeerClients,
        imports: Store<ClusterAPIGroupImport>,
        resources: Store<APIResourceImport>,
        namespaces: Store<PartialObjectMeta<Namespace>>,
        metrics: SyncMetrics,
    ) -> Proxy {
        Proxy {
            identity,
            peers,
            certs: Arc::default(),
            front: RwLock::new(None),
            front_error: Mutex::new(Some("not read yet".into())),
            links: DashMap::new(),
            imports,
            resources,
            namespaces,
            metrics,
            discovery: DashMap::new(),
            liveness: Liveness::default(),
            decisions: Decisions::default(),
            listening: Mutex::new(None),
        }
    }

    /// Forwards the imports of link `namespace/name` with `client`.
    pub fn set_link(&self, namespace: &str, name: &str, client: PeerClient) {
        self.links.insert(format!("{namespace}/{name}"), client);
    }

    /// Link `namespace/name` has no usable client (any more).
    pub fn drop_link(&self, namespace: &str, name: &str) {
        let key = format!("{namespace}/{name}");
        self.links.remove(&key);
        self.liveness.forget(&key);
    }

    /// The client of link `namespace/name`, if it has one.
    pub fn link(&self, namespace: &str, name: &str) -> Option<PeerClient> {
        self.links
            .get(&format!("{namespace}/{name}"))
            .map(|client| client.clone())
    }

    /// Who the server acts as on this cluster.
    pub fn identity(&self) -> &identity::Identity {
        &self.identity
    }

    /// Answers one request, counted by link, verb and code.
    async fn handle(
        &self,
        front: &FrontProxy,
        caller: &Caller,
        request: Request<Incoming>,
    ) -> Response<Body> {
        let mut label = Label {
            link: String::new(),
            verb: "unknown",
        };
        let response = self.answer(front, caller, request, &mut label).await;
        self.metrics
            .proxy_request(&label.link, label.verb, response.status().as_u16());
        response
    }

    async fn answer(
        &self,
        front: &FrontProxy,
        caller: &Caller,
        request: Request<Incoming>,
        label: &mut Label,
    ) -> Response<Body> {
        if let Some(refusal) = caller.refusal() {
            return refusal;
        }
        let Some(user) = front.user(request.headers()) else {
            return status(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "the front proxy named no user",
            );
        };
        let target = match request::parse(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        ) {
            Ok(target) => target,
            Err(request::Refusal::Method(method)) => {
                return status(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    &format!("method {method} is not supported"),
                );
            }
            Err(refusal) => {
                return status(StatusCode::BAD_REQUEST, "BadRequest", &refusal.to_string());
            }
        };
        match target {
            Target::Unserved => not_found("the server could not find the requested resource"),
            Target::OpenApiIndex => {
                label.verb = "openapi";
                self.openapi_index().await
            }
            Target::OpenApiV2 => {
                label.verb = "openapi";
                self.openapi_v2(request.headers().get(header::IF_NONE_MATCH))
                    .await
            }
            Target::OpenApiGroup { group } => {
                let path = request
                    .uri()
                    .path_and_query()
                    .map(|p| p.as_str())
                    .unwrap_or_default()
                    .to_string();
                label.verb = "openapi";
                self.discovery(&group, &path, label).await
            }
            Target::Group { group } | Target::Version { group, .. } => {
                label.verb = "discovery";
                let path = request.uri().path().to_string();
                self.discovery(&group, &path, label).await
            }
            Target::Resource(resource) => {
                label.verb = resource.verb;
                self.resource(&user, resource, request, label).await
            }
        }
    }

    /// The import of `group`, unless it is going.
    fn import_of(&self, group: &str) -> Option<Arc<ClusterAPIGroupImport>> {
        self.imports.state().into_iter().find(|import| {
            import.spec.group == group && import.metadata.deletion_timestamp.is_none()
        })
    }

    /// Whether an APIResourceImport of `namespace` makes `resource` of import `import` available.
    fn imported_in(&self, import: &str, namespace: &str, resource: &str) -> bool {
        self.resources.state().iter().any(|r| {
            r.namespace().as_deref() == Some(namespace)
                && r.metadata.deletion_timestamp.is_none()
                && r.spec.cluster_api_import_ref.name == import
                && r.spec.resources.iter().any(|name| name == resource)
        })
    }

    /// The link client that serves `import`, or the answer saying why there is none.
    fn client_of(&self, import: &ClusterAPIGroupImport) -> Result<Upstream, Box<Response<Body>>> {
        let link = &import.spec.downstream_cluster_link_ref;
        let key = format!("{}/{}", link.namespace, link.name);
        let Some(client) = self.link(&link.namespace, &link.name) else {
            return Err(Box::new(unavailable(&format!(
                "DownstreamClusterLink {}/{} is not ready",
                link.namespace, link.name
            ))));
        };
        if let Reach::Silent { .. } = self.peers.reach(&client.server) {
            return Err(Box::new(unavailable(&format!(
                "the service cluster of DownstreamClusterLink {}/{} does not answer",
                link.namespace, link.name
            ))));
        }
        Ok(Upstream { client, link: key })
    }

    /// A resource request: imported here, allowed here, then forwarded with the link's identity.
    async fn resource(
        &self,
        user: &User,
        resource: ResourceRequest,
        request: Request<Incoming>,
        label: &mut Label,
    ) -> Response<Body> {
        let Some(import) = self.import_of(&resource.group) else {
            return not_found("the server could not find the requested resource");
        };
        let link = &import.spec.downstream_cluster_link_ref;
        label.link = format!("{}/{}", link.namespace, link.name);
        if import
            .spec
            .version
            .as_ref()
            .is_some_and(|v| *v != resource.version)
        {
            return not_found("the server could not find the requested resource");
        }
        let Some(namespace) = resource.namespace.clone() else {
            return not_found(&format!(
                "{}.{} is imported per namespace (APIResourceImport): name a namespace",
                resource.resource, resource.group
            ));
        };
        if let Some(refusal) = self.namespace_gate(&resource, &namespace).await {
            return refusal;
        }
        if !self.imported_in(&import.name_any(), &namespace, &resource.resource) {
            return not_found(&format!(
                "{}.{} is not imported in namespace {namespace} (no APIResourceImport lists it)",
                resource.resource, resource.group
            ));
        }
        match self.authorize(user, &resource).await {
            Ok(true) => {}
            Ok(false) => return forbidden(user, &resource),
            Err(error) => {
                tracing::warn!(error = %xcc_kube::bounded(&error), "SubjectAccessReview failed");
                return status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "the workload cluster could not authorize the request",
                );
            }
        }
        let client = match self.client_of(&import) {
            Ok(client) => client,
            Err(answer) => return *answer,
        };
        self.forward(&client, request).await
    }

    /// Sends `request` upstream with the link's identity and answers with upstream's answer.
    async fn forward(&self, upstream: &Upstream, request: Request<Incoming>) -> Response<Body> {
        let request = match upstream_request(request).await {
            Ok(request) => request,
            Err(answer) => return *answer,
        };
        match self
            .liveness
            .send(upstream, request, UPSTREAM_DEADLINE, &self.metrics)
            .await
        {
            Ok(response) => from_upstream(response).await,
            Err(why) => unavailable(&why.to_string()),
        }
    }
}

/// The request sent upstream for `request`: its method, path, body (read whole and checked) and
/// the headers that describe the body and the answer wanted; or the answer refusing it.
async fn upstream_request(
    request: Request<Incoming>,
) -> Result<Request<kube::client::Body>, Box<Response<Body>>> {
    let (parts, body) = request.into_parts();
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(answer) => return Err(answer),
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    match request::check_body(content_type, &body) {
        Ok(()) => {}
        Err(refusal @ request::BodyRefusal::Malformed(..)) => {
            return Err(Box::new(status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &refusal.to_string(),
            )));
        }
        Err(refusal @ request::BodyRefusal::MediaType(_)) => {
            return Err(Box::new(status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                &refusal.to_string(),
            )));
        }
    }
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let mut builder = Request::builder().method(parts.method.clone()).uri(path);
    for name in [
        header::ACCEPT,
        header::CONTENT_TYPE,
        header::IF_NONE_MATCH,
        header::USER_AGENT,
    ] {
        for value in parts.headers.get_all(&name) {
            builder = builder.header(&name, value);
        }
    }
    builder
        .body(kube::client::Body::from(body.to_vec()))
        .map_err(|_| {
            Box::new(status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "the request is malformed",
            ))
        })
}

/// Upstream's answer, passed on: its status and the headers that describe it, its body streamed;
/// an error body read whole (bounded) and passed on as a Status.
async fn from_upstream(response: Response<kube::client::Body>) -> Response<Body> {
    let (parts, body) = response.into_parts();
    let mut answer = Response::builder().status(parts.status);
    for name in [
        header::CONTENT_TYPE,
        header::ETAG,
        header::RETRY_AFTER,
        header::WARNING,
    ] {
        for value in parts.headers.get_all(&name) {
            answer = answer.header(&name, value);
        }
    }
    if parts.status.is_client_error() || parts.status.is_server_error() {
        let Ok(collected) = Limited::new(body, MAX_ERROR_BODY).collect().await else {
            return status(
                StatusCode::BAD_GATEWAY,
                "InternalError",
                &format!(
                    "the service cluster answered {} with an error body that could not be read whole (over {} KiB or cut off)",
                    parts.status.as_u16(),
                    MAX_ERROR_BODY / 1024
                ),
            );
        };
        return upstream_error(
            parts.status,
            &collected.to_bytes(),
            parts.headers.get(header::RETRY_AFTER).cloned(),
        );
    }
    let body = body.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync();
    answer.body(body).unwrap_or_else(|_| {
        status(
            StatusCode::BAD_GATEWAY,
            "InternalError",
            "the service cluster's answer is malformed",
        )
    })
}

/// What a request is counted as.
struct Label {
    link: String,
    verb: &'static str,
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use serde_json::json;

    use super::authz::DECISION_TTL;
    use super::*;

    #[test]
    fn upstream_statuses_pass_unchanged_and_foreign_errors_become_bounded_statuses() {
        // An apply conflict on many fields: the message, newlines included, reaches the user.
        let conflicts: Vec<String> = (0..40)
            .map(|i| format!("- .metadata.labels.l{i}"))
            .collect();
        let message = format!(
            "Apply failed with 40 conflicts: conflicts with \"e2e\":\n{}",
            conflicts.join("\n")
        );
        let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "Conflict", "code": 409, "message": message,
            "details": {"name": "hello", "group": "rabbitmq.com", "kind": "rabbitmqclusters"}})
        .to_string();
        let response = upstream_error(StatusCode::CONFLICT, body.as_bytes(), None);
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let passed = futures::executor::block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        assert_eq!(
            passed,
            body.as_bytes(),
            "the Status is passed byte for byte"
        );

        // An HTML page of a proxy: a Status whose message is the page, bounded.
        let page = format!("<html>{}</html>", "x".repeat(10_000));
        let response = upstream_error(StatusCode::BAD_GATEWAY, page.as_bytes(), None);
        let body = futures::executor::block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["reason"], "BadGateway");
        let message = value["message"].as_str().unwrap();
        assert!(message.starts_with("<html>xxx"), "{message}");
        assert_eq!(message.chars().count(), MAX_FOREIGN_ERROR_TEXT + 1);

        let response = upstream_error(
            StatusCode::TOO_MANY_REQUESTS,
            b"<html>proxy</html>",
            Some(HeaderValue::from_static("7")),
        );
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
        let body = futures::executor::block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (value["kind"].as_str(), value["code"].as_u64()),
            (Some("Status"), Some(429))
        );
    }

    fn user(name: &str) -> User {
        User {
            name: name.into(),
            uid: None,
            groups: vec!["team-1".into()],
            extra: Default::default(),
        }
    }

    /// `get` of RabbitmqCluster team-1/hello.
    fn get_hello() -> ResourceRequest {
        ResourceRequest {
            verb: "get",
            group: "rabbitmq.com".into(),
            version: "v1beta1".into(),
            namespace: Some("team-1".into()),
            resource: "rabbitmqclusters".into(),
            name: Some("hello".into()),
            subresource: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_authorization_is_used_again_for_ten_seconds_only() {
        let decisions = Decisions::default();
        let (user, request) = (user("alice"), get_hello());
        decisions.put((user.clone(), request.clone()), true);
        assert_eq!(decisions.get(&(user.clone(), request.clone())), Some(true));
        let mut other = request.clone();
        other.verb = "delete";
        assert_eq!(decisions.get(&(user.clone(), other)), None);
        tokio::time::advance(DECISION_TTL).await;
        assert_eq!(decisions.get(&(user, request)), None);
    }

    #[test]
    fn a_forbidden_answer_reads_like_kube_apiservers() {
        let response = forbidden(&user("bob"), &get_hello());
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let body = futures::executor::block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value["message"],
            "rabbitmqclusters.rabbitmq.com \"hello\" is forbidden: User \"bob\" cannot get resource \"rabbitmqclusters\" in API group \"rabbitmq.com\" in the namespace \"team-1\""
        );
    }
}

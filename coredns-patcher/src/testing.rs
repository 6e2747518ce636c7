//! A mocked API server for unit tests: each test scripts the requests it expects, in order, and
//! the answers.

use http::{Method, Request, Response};
use kube::{Client, client::Body};
use serde_json::{Value, json};
use tower_test::mock;

pub fn mock_client() -> (Client, MockServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), MockServer { handle })
}

pub struct MockServer {
    handle: mock::Handle<Request<Body>, Response<Body>>,
}

/// One request the client made, waiting for its answer.
pub struct Exchange {
    /// The JSON body sent, `Null` when there was none.
    pub body: Value,
    /// The query string, empty when there was none.
    pub query: String,
    send: mock::SendResponse<Response<Body>>,
}

impl MockServer {
    /// The next request, which must have this method and path.
    pub async fn next(&mut self, method: Method, path: &str) -> Exchange {
        let (request, send) = self
            .handle
            .next_request()
            .await
            .expect("the client sent another request");
        assert_eq!(request.method(), method, "method of {}", request.uri());
        assert_eq!(request.uri().path(), path);
        let query = request.uri().query().unwrap_or_default().to_string();
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("a JSON request body")
        };
        Exchange { body, query, send }
    }

    pub async fn get(&mut self, path: &str) -> Exchange {
        self.next(Method::GET, path).await
    }

    pub async fn put(&mut self, path: &str) -> Exchange {
        self.next(Method::PUT, path).await
    }
}

impl Exchange {
    pub fn ok(self, body: Value) {
        self.respond(200, body);
    }

    pub fn not_found(self, resource: &str, name: &str) {
        self.status(404, "NotFound", &format!("{resource} \"{name}\" not found"));
    }

    pub fn conflict(self, resource: &str, name: &str) {
        self.status(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been \
                 modified; please apply your changes to the latest version and try again"
            ),
        );
    }

    pub fn status(self, code: u16, reason: &str, message: &str) {
        self.respond(
            code,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": message, "reason": reason, "code": code,
            }),
        );
    }

    fn respond(self, code: u16, body: Value) {
        let response = Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap();
        self.send.send_response(response);
    }
}

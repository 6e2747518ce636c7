//! A mocked API server for unit tests (feature `test-util`), in the manner of kube-rs
//! controller-rs's `Scenario`: a test states the requests it expects, in order, each with its
//! canned answer, runs the code under test with the [`Client`] it gets, and calls
//! [`Running::done`], which fails with a clear message on a request that was not expected, a
//! body check that failed, or an expected request that never came.
//!
//! ```ignore
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use xcc_kube::scenario::{Scenario, not_found};
//! let (client, server) = Scenario::new()
//!     .expect("GET", "/api/v1/namespaces/a/secrets/s")
//!     .reply(not_found())
//!     .run();
//! let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
//!     kube::Api::namespaced(client, "a");
//! assert!(secrets.get_opt("s").await.unwrap().is_none());
//! let seen = server.done().await;
//! assert_eq!(seen[0].line(), "GET /api/v1/namespaces/a/secrets/s");
//! # }
//! ```

use std::{
    collections::VecDeque,
    panic::AssertUnwindSafe,
    sync::{Arc, Mutex},
    time::Duration,
};

use kube::Client;
use serde_json::{Value, json};

/// How long [`Running::done`] waits for the expected requests that have not come yet.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

type Check = Box<dyn FnOnce(&Value) + Send>;
type Reply = Box<dyn FnOnce(&Value) -> (u16, Value) + Send>;

struct Step {
    method: String,
    path: String,
    check: Option<Check>,
    reply: Reply,
}

impl Step {
    fn describe(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// Whether `request` is this step: the same method, and the same path (with the query
    /// when the step names one).
    fn matches(&self, request: &Request) -> bool {
        let target = if self.path.contains('?') {
            request.uri()
        } else {
            request.path.clone()
        };
        self.method == request.method && self.path == target
    }
}

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// The body as text.
    pub text: String,
}

impl Request {
    /// `METHOD path`.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// The path with its query, if any.
    pub fn uri(&self) -> String {
        match &self.query {
            Some(query) => format!("{}?{query}", self.path),
            None => self.path.clone(),
        }
    }
}

/// The expected requests, in order, and their answers.
pub struct Scenario {
    steps: VecDeque<Step>,
    any_order: bool,
    wait: Duration,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario::new()
    }
}

impl Scenario {
    pub fn new() -> Scenario {
        Scenario {
            steps: VecDeque::new(),
            any_order: false,
            wait: DEFAULT_WAIT,
        }
    }

    /// The next expected request: `method` on `path` (compared with the query too when `path`
    /// has a `?`). Say its answer with [`Expect::reply`] or [`Expect::reply_with`].
    pub fn expect(self, method: &str, path: impl Into<String>) -> Expect {
        Expect {
            scenario: self,
            method: method.to_string(),
            path: path.into(),
            check: None,
        }
    }

    /// The requests may come in any order (the code under test sends some at once): each is
    /// matched with the first expected one of its method and path.
    pub fn in_any_order(mut self) -> Scenario {
        self.any_order = true;
        self
    }

    /// How long [`Running::done`] waits for the expected requests (default [`DEFAULT_WAIT`]).
    pub fn waiting(mut self, wait: Duration) -> Scenario {
        self.wait = wait;
        self
    }

    /// Starts the server: returns the client for the code under test and the handle to check
    /// the scenario with.
    pub fn run(self) -> (Client, Running) {
        let (service, mut handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let state = Arc::new(Mutex::new(State {
            steps: self.steps,
            seen: Vec::new(),
            failures: Vec::new(),
        }));
        let (all_met, met) = tokio::sync::watch::channel(false);
        let shared = state.clone();
        let any_order = self.any_order;
        let task = tokio::spawn(async move {
            if shared.lock().unwrap().steps.is_empty() {
                all_met.send_replace(true);
            }
            while let Some((request, send)) = handle.next_request().await {
                let method = request.method().to_string();
                let path = request.uri().path().to_string();
                let query = request.uri().query().map(str::to_string);
                let bytes = request
                    .into_body()
                    .collect_bytes()
                    .await
                    .unwrap_or_default();
                let request = Request {
                    method,
                    path,
                    query,
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                    text: String::from_utf8_lossy(&bytes).into_owned(),
                };
                let (status, reply) = answer(&shared, request, any_order);
                if shared.lock().unwrap().steps.is_empty() {
                    all_met.send_replace(true);
                }
                send.send_response(
                    http::Response::builder()
                        .status(status)
                        .body(kube::client::Body::from(
                            serde_json::to_vec(&reply).unwrap(),
                        ))
                        .unwrap(),
                );
            }
        });
        let running = Running {
            state,
            met,
            wait: self.wait,
            task,
        };
        (Client::new(service, "default"), running)
    }
}

/// An expected request whose answer is not said yet.
#[must_use = "an expectation needs its answer: .reply(..) or .reply_with(..)"]
pub struct Expect {
    scenario: Scenario,
    method: String,
    path: String,
    check: Option<Check>,
}

impl Expect {
    /// Checks the request's JSON body (assert in `check`; a failed assertion fails the scenario).
    pub fn check(mut self, check: impl FnOnce(&Value) + Send + 'static) -> Expect {
        self.check = Some(Box::new(check));
        self
    }

    /// Answers with `status` and `body`.
    pub fn reply(self, (status, body): (u16, Value)) -> Scenario {
        self.reply_with(move |_| (status, body))
    }

    /// Answers with what `reply` makes of the request's JSON body.
    pub fn reply_with(
        mut self,
        reply: impl FnOnce(&Value) -> (u16, Value) + Send + 'static,
    ) -> Scenario {
        self.scenario.steps.push_back(Step {
            method: self.method,
            path: self.path,
            check: self.check,
            reply: Box::new(reply),
        });
        self.scenario
    }
}

struct State {
    steps: VecDeque<Step>,
    seen: Vec<Request>,
    failures: Vec<String>,
}

/// Matches `request` with its step, runs the step's check, and makes the answer: a 500 Status
/// when the request was not expected.
fn answer(state: &Mutex<State>, request: Request, any_order: bool) -> (u16, Value) {
    let mut state = state.lock().unwrap();
    state.seen.push(request.clone());
    let position = if any_order {
        state.steps.iter().position(|s| s.matches(&request))
    } else {
        state
            .steps
            .front()
            .filter(|s| s.matches(&request))
            .map(|_| 0)
    };
    let Some(step) = position.and_then(|i| state.steps.remove(i)) else {
        let expected = state
            .steps
            .front()
            .map_or("nothing more".into(), Step::describe);
        let failure = format!(
            "unexpected request {} {} (expected {expected})",
            request.method,
            request.uri()
        );
        state.failures.push(failure.clone());
        return (
            500,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "code": 500, "message": failure}),
        );
    };
    if let Some(check) = step.check {
        let checked = std::panic::catch_unwind(AssertUnwindSafe(|| check(&request.body)));
        if let Err(panic) = checked {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            state.failures.push(format!(
                "the body of {} {} failed its check: {why}",
                request.method,
                request.uri()
            ));
        }
    }
    (step.reply)(&request.body)
}

/// A scenario being played.
pub struct Running {
    state: Arc<Mutex<State>>,
    met: tokio::sync::watch::Receiver<bool>,
    wait: Duration,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Waits (up to the scenario's wait) for every expected request, then returns the requests
    /// received, in order. Panics, listing them, on unexpected requests, failed body checks or
    /// expected requests that did not come.
    pub async fn done(mut self) -> Vec<Request> {
        let met = tokio::time::timeout(self.wait, self.met.wait_for(|m| *m)).await;
        self.task.abort();
        let state = self.state.lock().unwrap();
        let mut problems = state.failures.clone();
        if met.is_err() || !state.steps.is_empty() {
            let missing: Vec<String> = state.steps.iter().map(Step::describe).collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "expected requests that did not come within {:?}: {}",
                    self.wait,
                    missing.join(", ")
                ));
            }
        }
        if !problems.is_empty() {
            let seen: Vec<String> = state.seen.iter().map(|r| r.line()).collect();
            panic!(
                "the API server scenario failed:\n  {}\nrequests received: {seen:#?}",
                problems.join("\n  ")
            );
        }
        state.seen.clone()
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Request> {
        self.state.lock().unwrap().seen.clone()
    }
}

/// A 404 Status.
pub fn not_found() -> (u16, Value) {
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "reason": "NotFound", "code": 404, "message": "not found"}),
    )
}

/// A Status of `code` with `reason` and `message`.
pub fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "reason": reason, "code": code, "message": message}),
    )
}

/// The body sent back with a UID and resourceVersion (what a create or an apply returns).
pub fn echo(body: &Value) -> (u16, Value) {
    let mut body = body.clone();
    body["metadata"]["uid"] = "uid-of-written".into();
    body["metadata"]["resourceVersion"] = "7".into();
    (200, body)
}

/// `object` with the status of the status patch `body` (what a status patch returns).
pub fn with_status(mut object: Value, body: &Value) -> (u16, Value) {
    object["status"] = body["status"].clone();
    (200, object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::{Api, api::PostParams};

    fn config_map() -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"k": "v"}})).unwrap()
    }

    #[tokio::test]
    async fn a_scenario_answers_in_order_and_checks_bodies() {
        let (client, server) = Scenario::new()
            .expect("GET", "/api/v1/namespaces/a/configmaps/c")
            .reply(not_found())
            .expect("POST", "/api/v1/namespaces/a/configmaps")
            .check(|body| assert_eq!(body["data"]["k"], "v"))
            .reply_with(echo)
            .run();
        let api: Api<ConfigMap> = Api::namespaced(client, "a");
        assert!(api.get_opt("c").await.unwrap().is_none());
        let made = api
            .create(&PostParams::default(), &config_map())
            .await
            .unwrap();
        assert_eq!(made.metadata.uid.as_deref(), Some("uid-of-written"));
        let seen = server.done().await;
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1].body["metadata"]["name"], "c");
    }

    async fn failure(scenario: Scenario, calls: usize) -> String {
        let (client, server) = scenario.waiting(Duration::from_millis(50)).run();
        let api: Api<ConfigMap> = Api::namespaced(client, "a");
        for _ in 0..calls {
            let _ = api.create(&PostParams::default(), &config_map()).await;
        }
        let panic = tokio::spawn(server.done()).await.unwrap_err().into_panic();
        panic.downcast_ref::<String>().unwrap().clone()
    }

    #[tokio::test]
    async fn a_scenario_fails_on_the_unexpected_the_missing_and_a_failed_check() {
        let post = || Scenario::new().expect("POST", "/api/v1/namespaces/a/configmaps");
        let unexpected = failure(post().reply_with(echo), 2).await;
        assert!(
            unexpected.contains("unexpected request POST /api/v1/namespaces/a/configmaps")
                && unexpected.contains("expected nothing more"),
            "{unexpected}"
        );
        let missing = failure(post().reply_with(echo), 0).await;
        assert!(
            missing.contains("did not come") && missing.contains("POST /api/v1/"),
            "{missing}"
        );
        let checked = failure(
            post()
                .check(|body| assert_eq!(body["data"]["k"], "other"))
                .reply_with(echo),
            1,
        )
        .await;
        assert!(checked.contains("failed its check"), "{checked}");
        let wrong = failure(
            Scenario::new()
                .expect("DELETE", "/api/v1/namespaces/a/configmaps/c")
                .reply(not_found()),
            1,
        )
        .await;
        assert!(
            wrong.contains("expected DELETE /api/v1/namespaces/a/configmaps/c"),
            "{wrong}"
        );
    }

    #[tokio::test]
    async fn in_any_order_matches_by_method_and_path() {
        let (client, server) = Scenario::new()
            .in_any_order()
            .expect("GET", "/api/v1/namespaces/a/configmaps/second")
            .reply(not_found())
            .expect("GET", "/api/v1/namespaces/a/configmaps/first")
            .reply(not_found())
            .run();
        let api: Api<ConfigMap> = Api::namespaced(client, "a");
        assert!(api.get_opt("first").await.unwrap().is_none());
        assert!(api.get_opt("second").await.unwrap().is_none());
        server.done().await;
    }
}

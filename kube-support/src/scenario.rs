//! A mocked API server for unit tests (feature `test-util`), in the manner of kube-rs
//! controller-rs's `Scenario`: a test states the requests it expects, in order, each with its
//! canned answer, runs the code under test with the [`Client`] it gets, and calls
//! [`Running::done`], which fails with a clear message on a request that was not expected, a
//! body check that failed, or an expected request that never came.
//!
//! Beside the requests expected once, a scenario can [hang](Expect::hang) a request (accept it
//! and never answer, for timeouts and backoff), [delay](Expect::after) an answer (a slow server)
//! and [repeat](Scenario::always) one answer for any number of matching requests (health polls,
//! relists).
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
type Reply = Box<dyn FnMut(&Request) -> (u16, Value) + Send>;
type When = Box<dyn Fn(&Request) -> bool + Send>;

/// What a step does with its request.
enum Answer {
    Reply(Reply),
    /// Keeps the request open and never answers it.
    Hang,
}

struct Step {
    method: String,
    path: String,
    when: Option<When>,
    check: Option<Check>,
    answer: Answer,
    /// How long the answer takes (zero: at once).
    delay: Duration,
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
        self.method == request.method
            && self.path == target
            && self.when.as_ref().is_none_or(|when| when(request))
    }
}

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// The body as text.
    pub text: String,
    /// The request's headers.
    /// The headers (`accept` tells a metadata-only list or watch apart).
    pub headers: http::HeaderMap,
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

    /// The value of the query parameter `name` (as sent, not decoded).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .as_deref()?
            .split('&')
            .find_map(|pair| match pair.split_once('=') {
                Some((key, value)) if key == name => Some(value),
                None if pair == name => Some(""),
                _ => None,
            })
    }

    /// Whether it asks for a watch (`watch=true` or `watch=1`).
    pub fn is_watch(&self) -> bool {
        matches!(self.param("watch"), Some("true" | "1"))
    }

    /// The value of the header `name`, when it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The expected requests, in order, and their answers.
pub struct Scenario {
    steps: VecDeque<Step>,
    /// Answers for any number of requests, tried when no step expected once matches.
    repeated: Vec<Step>,
    any_order: bool,
    wait: Duration,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario::new()
    }
}

impl Scenario {
    /// A scenario that expects nothing yet, in order.
    pub fn new() -> Scenario {
        Scenario {
            steps: VecDeque::new(),
            repeated: Vec::new(),
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
            when: None,
            check: None,
            delay: Duration::ZERO,
        }
    }

    /// An answer for any number of requests (none included) of `method` on `path`, matched
    /// as [`Scenario::expect`] matches, whenever no request expected once matches first: a
    /// health poll, a relist. Say the answer with [`Always::reply`], [`Always::reply_to`] or
    /// [`Always::hang`]. [`Running::done`] does not wait for these.
    pub fn always(self, method: &str, path: impl Into<String>) -> Always {
        Always {
            scenario: self,
            method: method.to_string(),
            path: path.into(),
            when: None,
            delay: Duration::ZERO,
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
            repeated: self.repeated,
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
            // The answers of hanging requests, kept (unsent) as long as the server runs.
            let mut held = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                let method = request.method().to_string();
                let path = request.uri().path().to_string();
                let query = request.uri().query().map(str::to_string);
                let headers = request.headers().clone();
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
                    headers,
                };
                let answered = answer(&shared, request, any_order);
                if shared.lock().unwrap().steps.is_empty() {
                    all_met.send_replace(true);
                }
                match answered {
                    None => held.push(send),
                    Some((reply, delay)) if delay.is_zero() => respond(send, reply),
                    // Later, while the server goes on answering the next requests.
                    Some((reply, delay)) => drop(tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        respond(send, reply);
                    })),
                }
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

/// Sends `status` and `body` as the response to a request.
fn respond(
    send: tower_test::mock::SendResponse<http::Response<kube::client::Body>>,
    (status, body): (u16, Value),
) {
    send.send_response(
        http::Response::builder()
            .status(status)
            .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
}

/// An expected request whose answer is not said yet.
#[must_use = "an expectation needs its answer: .reply(..) or .reply_with(..)"]
pub struct Expect {
    scenario: Scenario,
    method: String,
    path: String,
    when: Option<When>,
    check: Option<Check>,
    delay: Duration,
}

impl Expect {
    /// Matches only a request for which `when` holds too (a header, a query parameter).
    pub fn when(mut self, when: impl Fn(&Request) -> bool + Send + 'static) -> Expect {
        self.when = Some(Box::new(when));
        self
    }

    /// Answers `delay` after the request came (a slow server); the server answers the requests
    /// that come meanwhile.
    pub fn after(mut self, delay: Duration) -> Expect {
        self.delay = delay;
        self
    }

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
        self,
        reply: impl FnOnce(&Value) -> (u16, Value) + Send + 'static,
    ) -> Scenario {
        self.reply_to(|request| reply(&request.body))
    }

    /// Answers with what `reply` makes of the whole request (its query, its headers).
    pub fn reply_to(
        self,
        reply: impl FnOnce(&Request) -> (u16, Value) + Send + 'static,
    ) -> Scenario {
        let mut reply = Some(reply);
        self.push(Answer::Reply(Box::new(move |request| {
            // A step expected once is removed when matched: it answers once.
            (reply.take().expect("a step answers once"))(request)
        })))
    }

    /// Accepts the request and never answers it (the server keeps it open while it runs): a
    /// peer that went silent, for deadlines and backoff.
    pub fn hang(self) -> Scenario {
        self.push(Answer::Hang)
    }

    fn push(mut self, answer: Answer) -> Scenario {
        self.scenario.steps.push_back(Step {
            method: self.method,
            path: self.path,
            when: self.when,
            check: self.check,
            answer,
            delay: self.delay,
        });
        self.scenario
    }
}

/// An answer for any number of matching requests, not said yet ([`Scenario::always`]).
#[must_use = "a repeated answer needs its answer: .reply(..), .reply_to(..) or .hang()"]
pub struct Always {
    scenario: Scenario,
    method: String,
    path: String,
    when: Option<When>,
    delay: Duration,
}

impl Always {
    /// Matches only a request for which `when` holds too.
    pub fn when(mut self, when: impl Fn(&Request) -> bool + Send + 'static) -> Always {
        self.when = Some(Box::new(when));
        self
    }

    /// Answers each matching request `delay` after it came.
    pub fn after(mut self, delay: Duration) -> Always {
        self.delay = delay;
        self
    }

    /// Answers every matching request with `status` and `body`.
    pub fn reply(self, (status, body): (u16, Value)) -> Scenario {
        self.push(Answer::Reply(Box::new(move |_| (status, body.clone()))))
    }

    /// Answers every matching request with what `reply` makes of it.
    pub fn reply_to(
        self,
        reply: impl FnMut(&Request) -> (u16, Value) + Send + 'static,
    ) -> Scenario {
        self.push(Answer::Reply(Box::new(reply)))
    }

    /// Accepts every matching request and never answers it.
    pub fn hang(self) -> Scenario {
        self.push(Answer::Hang)
    }

    fn push(mut self, answer: Answer) -> Scenario {
        self.scenario.repeated.push(Step {
            method: self.method,
            path: self.path,
            when: self.when,
            check: None,
            answer,
            delay: self.delay,
        });
        self.scenario
    }
}

struct State {
    steps: VecDeque<Step>,
    repeated: Vec<Step>,
    seen: Vec<Request>,
    failures: Vec<String>,
}

/// Matches `request` with its step (one expected once first, then a repeated one), runs the
/// step's check, and makes the answer and how long it takes: a 500 Status at once when the
/// request was not expected, `None` when the step hangs.
fn answer(
    state: &Mutex<State>,
    request: Request,
    any_order: bool,
) -> Option<((u16, Value), Duration)> {
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
    let Some(mut step) = position.and_then(|i| state.steps.remove(i)) else {
        if let Some(repeated) = state.repeated.iter_mut().find(|s| s.matches(&request)) {
            return match &mut repeated.answer {
                Answer::Reply(reply) => Some((reply(&request), repeated.delay)),
                Answer::Hang => None,
            };
        }
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
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "code": 500, "message": failure});
        return Some(((500, status), Duration::ZERO));
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
    match &mut step.answer {
        Answer::Reply(reply) => Some((reply(&request), step.delay)),
        Answer::Hang => None,
    }
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

    /// How many requests received so far `which` holds for.
    pub fn count(&self, which: impl Fn(&Request) -> bool) -> usize {
        self.state
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|r| which(r))
            .count()
    }

    /// Stops the server without checking the scenario: the requests it holds fail, and so does
    /// every request after, at once (an API server that cannot be reached).
    pub async fn close(self) {
        self.task.abort();
        // Awaiting the aborted task drops it, and with it the server's end.
        let _ = self.task.await;
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

    #[tokio::test(start_paused = true)]
    async fn a_hanging_request_is_never_answered_and_the_next_one_is() {
        let (client, server) = Scenario::new()
            .expect("GET", "/api/v1/namespaces/a/configmaps/c")
            .hang()
            .expect("GET", "/api/v1/namespaces/a/configmaps/c")
            .reply(not_found())
            .run();
        let api: Api<ConfigMap> = Api::namespaced(client, "a");
        let deadline = Duration::from_secs(3);
        let started = tokio::time::Instant::now();
        let first = tokio::time::timeout(deadline, api.get_opt("c")).await;
        assert!(first.is_err(), "no answer: {first:?}");
        assert_eq!(started.elapsed(), deadline, "it waited for its deadline");
        // The retry gets the next step's answer.
        assert!(api.get_opt("c").await.unwrap().is_none());
        assert_eq!(server.done().await.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_answer_comes_after_its_delay_and_does_not_hold_up_the_next_requests() {
        let found = json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "slow", "namespace": "a"}});
        let (client, server) = Scenario::new()
            .in_any_order()
            .expect("GET", "/api/v1/namespaces/a/configmaps/slow")
            .after(Duration::from_secs(4))
            .reply((200, found))
            .always("GET", "/api/v1/namespaces/a/configmaps/fast")
            .after(Duration::from_secs(1))
            .reply(not_found())
            .run();
        let api: Api<ConfigMap> = Api::namespaced(client, "a");
        let started = tokio::time::Instant::now();
        let slow = tokio::spawn({
            let api = api.clone();
            async move { (api.get_opt("slow").await, started.elapsed()) }
        });
        while server.seen().is_empty() {
            tokio::task::yield_now().await;
        }
        assert!(api.get_opt("fast").await.unwrap().is_none());
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "not after the slow one"
        );
        let (slow, took) = slow.await.unwrap();
        assert!(slow.unwrap().is_some());
        assert_eq!(took, Duration::from_secs(4));
        assert_eq!(server.done().await.len(), 2);
    }

    #[tokio::test]
    async fn a_repeated_answer_serves_any_number_of_requests_after_the_expected_ones() {
        let found = json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "c", "namespace": "a"}});
        let (client, server) = Scenario::new()
            .always("GET", "/api/v1/namespaces/a/configmaps/c")
            .reply(not_found())
            .expect("GET", "/api/v1/namespaces/a/configmaps/c")
            .reply((200, found))
            .run();
        let api: Api<ConfigMap> = Api::namespaced(client, "a");
        // The step expected once comes first, though declared after the repeated one.
        assert!(api.get_opt("c").await.unwrap().is_some());
        for _ in 0..3 {
            assert!(api.get_opt("c").await.unwrap().is_none());
        }
        assert_eq!(server.count(|r| r.method == "GET"), 4);
        assert_eq!(server.done().await.len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_repeated_answer_can_hang_and_match_on_the_query() {
        let list = json!({"apiVersion": "v1", "kind": "ConfigMapList",
                          "metadata": {"resourceVersion": "1"}, "items": []});
        let (client, server) = Scenario::new()
            .always("GET", "/api/v1/namespaces/a/configmaps")
            .when(Request::is_watch)
            .hang()
            .always("GET", "/api/v1/namespaces/a/configmaps")
            .when(|r| !r.is_watch() && r.param("labelSelector") == Some("team%3Da"))
            .reply((200, list))
            .run();
        let api: Api<ConfigMap> = Api::namespaced(client, "a");
        let selected = kube::api::ListParams::default().labels("team=a");
        for _ in 0..2 {
            assert!(api.list(&selected).await.unwrap().items.is_empty());
        }
        // The watch is accepted and never answered: not even its headers come.
        let watch = kube::api::WatchParams::default().labels("team=a");
        let waited = tokio::time::timeout(DEFAULT_WAIT, api.watch(&watch, "1")).await;
        assert!(waited.is_err(), "the watch is held open");
        // Another selector matches neither: a failure the scenario reports.
        let other = api
            .list(&kube::api::ListParams::default().labels("team=b"))
            .await;
        assert!(other.is_err());
        assert_eq!(server.count(Request::is_watch), 1);
        let panic = tokio::spawn(server.done()).await.unwrap_err().into_panic();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(message.contains("labelSelector=team%3Db"), "{message}");
    }

    #[tokio::test]
    async fn a_closed_server_fails_what_it_held_and_every_request_after() {
        let (client, server) = Scenario::new()
            .always("GET", "/api/v1/namespaces/a/configmaps/c")
            .hang()
            .run();
        let api: Api<ConfigMap> = Api::namespaced(client, "a");
        let held = tokio::spawn({
            let api = api.clone();
            async move { api.get_opt("c").await }
        });
        while server.seen().is_empty() {
            tokio::task::yield_now().await;
        }
        server.close().await;
        let held = tokio::time::timeout(DEFAULT_WAIT, held)
            .await
            .unwrap()
            .unwrap();
        assert!(held.is_err(), "{held:?}");
        let after = tokio::time::timeout(DEFAULT_WAIT, api.get_opt("c"))
            .await
            .unwrap();
        assert!(after.is_err(), "{after:?}");
    }
}

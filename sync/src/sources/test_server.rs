//! The tests' mocked API server of Secrets, and their waits.

use std::time::Duration;

use kube::Client;
use serde_json::json;
use xcc_kube::scenario::{self, Request, Running, Scenario};

use super::View;

/// How long to wait for a view to list.
pub(crate) const LIST_WAIT: Duration = Duration::from_secs(5);

pub(crate) fn secret_json(name: &str, with_data: bool) -> serde_json::Value {
    let mut secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "project-1", "resourceVersion": "1"},
    });
    if with_data {
        secret["data"] = json!({"password": "MQ=="});
    }
    secret
}

/// Whether `request` asks for metadata only.
pub(crate) fn for_metadata(request: &Request) -> bool {
    request
        .header("accept")
        .is_some_and(|a| a.contains("PartialObjectMetadata"))
}

/// `list` or `watch`, then `meta` or `full`: what `request` asks for.
pub(crate) fn asks(request: &Request) -> String {
    format!(
        "{} {}",
        if request.is_watch() { "watch" } else { "list" },
        if for_metadata(request) {
            "meta"
        } else {
            "full"
        }
    )
}

/// A mocked API server answering lists of Secrets (as whole objects or as metadata, as
/// asked) and accepting watches that never send anything.
pub(crate) fn mock() -> (Client, Running) {
    mock_failing(0, 0)
}

/// [`mock`], whose first `lists` lists answer 404 (a kind not served yet) and whose first
/// `watches` watches answer 429 (a new kind's watch cache still initializing).
pub(crate) fn mock_failing(lists: usize, watches: usize) -> (Client, Running) {
    let path = "/api/v1/secrets";
    let mut scenario = Scenario::new().in_any_order();
    for _ in 0..lists {
        scenario = scenario
            .expect("GET", path)
            .when(|r| !r.is_watch())
            .reply(scenario::status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ));
    }
    for _ in 0..watches {
        scenario = scenario
            .expect("GET", path)
            .when(Request::is_watch)
            .reply(scenario::status(
                429,
                "TooManyRequests",
                "storage is (re)initializing",
            ));
    }
    scenario
            .always("GET", path)
            .when(Request::is_watch)
            .hang()
            .always("GET", path)
            .reply_to(|request| {
                let items = if for_metadata(request) {
                    vec![
                        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                                "metadata": {"name": "dumbo", "namespace": "project-1", "resourceVersion": "1"}}),
                    ]
                } else {
                    vec![secret_json("dumbo", true)]
                };
                let list = json!({
                    "apiVersion": "v1", "kind": "SecretList",
                    "metadata": {"resourceVersion": "1"},
                    "items": items,
                });
                (200, list)
            })
            .run()
}

pub(crate) async fn wait_listed(view: &View) {
    tokio::time::timeout(LIST_WAIT, async {
        while !view.listed() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the view lists");
}

/// Waits until `done` holds.
pub(crate) async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(LIST_WAIT, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"));
}

/// How many requests asked for `what` (see [`asks`]).
pub(crate) fn count(server: &Running, what: &str) -> usize {
    server.count(|r| asks(r) == what)
}

pub(crate) fn requests(server: &Running) -> Vec<String> {
    server.seen().iter().map(asks).collect()
}

pub(crate) fn metrics_text(registry: &prometheus_client::registry::Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

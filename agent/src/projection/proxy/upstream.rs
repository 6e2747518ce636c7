//! The service cluster behind a link, as the aggregated API server reaches it.
//!
//! A stopped or blackholed API server does not refuse a request, it just never answers, and a
//! legitimately slow answer (a large list) looks the same for a while. So a request that has no
//! answer after [`PATIENCE`] asks the server a cheap question (`GET /version`, which every
//! identity may ask) with [`QUESTION_DEADLINE`]:
//! - answered: the server is there and the request waits on, up to its own deadline;
//! - unanswered: the request gets 503 at once, and so does every request of that link for
//!   [`SILENT_FOR`], without waiting; the first one after that tries again, so service resumes
//!   on its own when the server answers again.
//!
//! One question is in flight per link at a time, shared by every request waiting on it. The
//! agent's peer prober ([`xcc_kube::Reach`]) finding the server silent also answers 503 at once.

use std::time::Duration;

use dashmap::DashMap;
use futures::{
    FutureExt,
    future::{BoxFuture, Shared},
};
use http::{Request, Response};
use tokio::time::Instant;
use xcc_kube::PeerClient;

use crate::sync_metrics::SyncMetrics;

/// How long a request waits for upstream's headers before asking whether upstream is there.
pub const PATIENCE: Duration = Duration::from_millis(500);
/// How long that question may take.
pub const QUESTION_DEADLINE: Duration = Duration::from_millis(700);
/// How long a link whose service cluster left a question unanswered gets 503 without trying.
pub const SILENT_FOR: Duration = Duration::from_secs(1);

/// The service cluster of one link.
pub struct Upstream {
    pub client: PeerClient,
    /// `namespace/name` of the DownstreamClusterLink.
    pub link: String,
}

/// Why upstream gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unanswered {
    #[error("the service cluster does not answer")]
    Silent,
    #[error("the service cluster did not answer in time")]
    Deadline,
    #[error("the service cluster could not be reached")]
    Unreachable,
}

type Question = Shared<BoxFuture<'static, bool>>;

#[derive(Default)]
struct LinkState {
    /// When upstream last left a question unanswered.
    silent_at: Option<Instant>,
    /// The question in flight, if any.
    asking: Option<Question>,
}

/// What the server knows of each link's service cluster between requests. Every request reads
/// it: a concurrent map, whose guards never outlive a statement or wait on anything (a question
/// is awaited after its entry is released).
#[derive(Default)]
pub struct Liveness {
    links: DashMap<String, LinkState>,
}

impl Liveness {
    /// Whether `link`'s service cluster left a question unanswered less than [`SILENT_FOR`] ago.
    pub fn silent(&self, link: &str) -> bool {
        self.links
            .get(link)
            .and_then(|s| s.silent_at)
            .is_some_and(|at| at.elapsed() < SILENT_FOR)
    }

    /// Sends `request` upstream; upstream's answer (headers; the body follows), or why none came.
    /// `deadline` bounds the wait for the headers while upstream answers questions.
    pub async fn send(
        &self,
        upstream: &Upstream,
        request: Request<kube::client::Body>,
        deadline: Duration,
        metrics: &SyncMetrics,
    ) -> Result<Response<kube::client::Body>, Unanswered> {
        if self.silent(&upstream.link) {
            return Err(Unanswered::Silent);
        }
        let started = Instant::now();
        let sent = upstream.client.client.send(request);
        let mut sent = std::pin::pin!(sent);
        let answer = tokio::select! {
            answer = &mut sent => Some(answer),
            () = tokio::time::sleep(PATIENCE) => None,
        };
        let answer = match answer {
            Some(answer) => answer,
            None => {
                let question = self.question(upstream);
                let answered = tokio::select! {
                    answer = &mut sent => Some(answer),
                    there = question => {
                        if !there {
                            self.mark_silent(&upstream.link);
                            return Err(Unanswered::Silent);
                        }
                        None
                    }
                };
                match answered {
                    Some(answer) => answer,
                    None => {
                        match tokio::time::timeout(deadline.saturating_sub(started.elapsed()), sent)
                            .await
                        {
                            Ok(answer) => answer,
                            Err(_) => return Err(Unanswered::Deadline),
                        }
                    }
                }
            }
        };
        metrics.proxy_upstream(&upstream.link, started.elapsed());
        answer.map_err(|error| {
            tracing::debug!(link = %upstream.link, error = %xcc_kube::bounded(&error), "upstream request failed");
            Unanswered::Unreachable
        })
    }

    /// The question in flight for `upstream`'s link, asked now if none is.
    fn question(&self, upstream: &Upstream) -> Question {
        let mut state = self.links.entry(upstream.link.clone()).or_default();
        if let Some(asking) = &state.asking
            && asking.peek().is_none()
        {
            return asking.clone();
        }
        let client = upstream.client.client.clone();
        let question = async move {
            let Ok(request) = Request::get("/version").body(kube::client::Body::empty()) else {
                return false;
            };
            // Any answer, a refusal too, shows the server is there.
            matches!(
                tokio::time::timeout(QUESTION_DEADLINE, client.send(request)).await,
                Ok(Ok(_))
            )
        }
        .boxed()
        .shared();
        state.asking = Some(question.clone());
        question
    }

    fn mark_silent(&self, link: &str) {
        let mut state = self.links.entry(link.to_string()).or_default();
        if state.silent_at.is_none_or(|at| at.elapsed() >= SILENT_FOR) {
            tracing::warn!(%link, "the service cluster does not answer: its requests get 503 until it does");
        }
        state.silent_at = Some(Instant::now());
    }

    /// Forgets a link that is gone.
    pub fn forget(&self, link: &str) {
        self.links.remove(link);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };
    use xcc_kube::scenario::{Running, Scenario};

    /// The path the tests ask for.
    const PATH: &str = "/apis/rabbitmq.com/v1beta1/namespaces/team-1/rabbitmqclusters";

    /// A service cluster that answers `/version` at once and [`PATH`] after `slow`, or nothing
    /// at all while `stopped`; its server counts the `/version` questions.
    fn upstream(slow: Duration, stopped: Arc<AtomicBool>) -> (Upstream, Running) {
        let silent = stopped.clone();
        let (client, server) = Scenario::new()
            .always("GET", "/version")
            .when(move |_| silent.load(Ordering::SeqCst))
            .hang()
            .always("GET", PATH)
            .when(move |_| stopped.load(Ordering::SeqCst))
            .hang()
            .always("GET", "/version")
            .reply((200, json!({})))
            .always("GET", PATH)
            .after(slow)
            .reply((200, json!({})))
            .run();
        let upstream = Upstream {
            client: PeerClient {
                client,
                identity: "team-1/upstream@uid/1".into(),
                server: "https://services.example:6443".into(),
                tls: xcc_kube::PeerTls::Verified,
            },
            link: "team-1/services".into(),
        };
        (upstream, server)
    }

    fn questions(server: &Running) -> usize {
        server.count(|r| r.path == "/version")
    }

    fn get() -> Request<kube::client::Body> {
        Request::get(PATH)
            .body(kube::client::Body::empty())
            .unwrap()
    }

    fn metrics() -> SyncMetrics {
        SyncMetrics::register(&mut prometheus_client::registry::Registry::default())
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_answer_of_a_server_that_is_there_is_waited_for() {
        let liveness = Liveness::default();
        let (upstream, server) = upstream(Duration::from_secs(5), Arc::default());
        let started = tokio::time::Instant::now();
        let answer = liveness
            .send(&upstream, get(), Duration::from_secs(60), &metrics())
            .await;
        assert_eq!(answer.map(|r| r.status().as_u16()), Ok(200));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(!liveness.silent(&upstream.link));
        assert_eq!(questions(&server), 1);

        let answer = liveness
            .send(&upstream, get(), Duration::from_secs(2), &metrics())
            .await;
        assert_eq!(answer.err(), Some(Unanswered::Deadline));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_server_gets_503_in_patience_plus_one_question_then_at_once_until_it_answers()
    {
        let stopped = Arc::new(AtomicBool::new(true));
        let liveness = Liveness::default();
        let (upstream, _server) = upstream(Duration::ZERO, stopped.clone());
        let started = tokio::time::Instant::now();
        let answer = liveness
            .send(&upstream, get(), Duration::from_secs(60), &metrics())
            .await;
        assert_eq!(answer.err(), Some(Unanswered::Silent));
        assert_eq!(started.elapsed(), PATIENCE + QUESTION_DEADLINE);

        // Requests meanwhile do not wait.
        let again = tokio::time::Instant::now();
        let answer = liveness
            .send(&upstream, get(), Duration::from_secs(60), &metrics())
            .await;
        assert_eq!(answer.err(), Some(Unanswered::Silent));
        assert_eq!(again.elapsed(), Duration::ZERO);

        // The server is back: after SILENT_FOR the next request goes through.
        stopped.store(false, Ordering::SeqCst);
        tokio::time::sleep(SILENT_FOR).await;
        let answer = liveness
            .send(&upstream, get(), Duration::from_secs(60), &metrics())
            .await;
        assert_eq!(answer.map(|r| r.status().as_u16()), Ok(200));
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_share_one_question() {
        let stopped = Arc::new(AtomicBool::new(true));
        let liveness = Arc::new(Liveness::default());
        let (upstream, server) = upstream(Duration::ZERO, stopped);
        let upstream = Arc::new(upstream);
        let requests = (0..20).map(|_| {
            let (liveness, upstream) = (liveness.clone(), upstream.clone());
            async move {
                liveness
                    .send(&upstream, get(), Duration::from_secs(60), &metrics())
                    .await
                    .err()
            }
        });
        let answers = futures::future::join_all(requests).await;
        assert!(answers.iter().all(|a| *a == Some(Unanswered::Silent)));
        assert_eq!(questions(&server), 1);
    }
}

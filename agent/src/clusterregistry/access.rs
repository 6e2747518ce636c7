//! What the agent may do, asked of the API servers with SelfSubjectAccessReviews before a rule
//! starts: write a kind here, and list and watch it on each peer (with the peer's kubeconfig).
//! Answers are kept for a short while, so that the rules' many refreshes do not each ask again,
//! and a permission granted later is noticed by itself. Each question has a deadline, and an API
//! server that could not answer is not asked again for a while: a peer that accepts connections
//! and never answers costs the engine one deadline, not one per rule and refresh. Questions to
//! several peers are asked at once (`&self`).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use dashmap::DashMap;
use tokio::time::Instant;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::{
    Api, Client,
    api::{ApiResource, PostParams},
};
use tokio::sync::mpsc::UnboundedSender;

/// How long an answer is kept.
const KEEP: Duration = Duration::from_secs(20);
/// How long the API server may take to answer.
const DEADLINE: Duration = Duration::from_secs(3);
/// How long an API server that could not answer is not asked again (meanwhile its permissions
/// count as unknown: its watches are started and retry on their own backoff).
const KEEP_UNANSWERED: Duration = Duration::from_secs(15);
/// How soon permissions that were missing are asked again.
const RECHECK: Duration = Duration::from_secs(30);

/// (cluster identity, group/plural, verbs asked).
type Question = (String, String, String);

/// What an API server said, or that it could not say.
#[derive(Clone)]
enum Answer {
    Refused(Vec<&'static str>),
    Unanswered,
}

/// Concurrent maps: the rules' refreshes ask at once, and no guard is held while one waits for
/// an answer.
#[derive(Default)]
pub struct Access {
    /// (cluster identity, group/plural, verbs asked) → when asked, and the answer.
    answers: DashMap<Question, (Instant, Answer)>,
    /// Clusters that could not answer, and when.
    unanswered: DashMap<String, Instant>,
    recheck_pending: Arc<AtomicBool>,
}

impl Access {
    /// What copying a kind needs here.
    pub const WRITE: &'static [&'static str] = &[
        "get", "list", "watch", "create", "patch", "update", "delete",
    ];
    /// What reading a kind needs on a peer.
    pub const READ: &'static [&'static str] = &["list", "watch"];

    /// The verbs of `verbs` the client's user may not use on `resource` in every namespace, as
    /// "list, watch"; `None` when all are allowed, or when the API server could not be asked (a
    /// peer that is away says so in its Cluster status; its watches retry).
    pub async fn missing(
        &self,
        identity: &str,
        client: &Client,
        resource: &ApiResource,
        verbs: &'static [&'static str],
    ) -> Option<String> {
        let key = (
            identity.to_string(),
            format!("{}/{}", resource.group, resource.plural),
            verbs.join(","),
        );
        let kept = self
            .answers
            .get(&key)
            .filter(|kept| match &kept.1 {
                Answer::Refused(_) => kept.0.elapsed() < KEEP,
                Answer::Unanswered => kept.0.elapsed() < KEEP_UNANSWERED,
            })
            .map(|kept| kept.1.clone());
        let silent = self
            .unanswered
            .get(identity)
            .is_some_and(|since| since.elapsed() < KEEP_UNANSWERED);
        let answer = match kept {
            Some(answer) => answer,
            None if silent => Answer::Unanswered,
            None => {
                let answer = match tokio::time::timeout(DEADLINE, refused(client, resource, verbs))
                    .await
                {
                    Ok(Ok(refused)) => Answer::Refused(refused),
                    Ok(Err(error)) => {
                        tracing::debug!(cluster = %identity, resource = %resource.plural, %error, "cannot ask for permissions");
                        Answer::Unanswered
                    }
                    Err(_) => {
                        tracing::debug!(cluster = %identity, resource = %resource.plural, deadline = ?DEADLINE, "no answer to a permission check");
                        Answer::Unanswered
                    }
                };
                if matches!(answer, Answer::Unanswered) {
                    self.unanswered.insert(identity.to_string(), Instant::now());
                } else {
                    self.unanswered.remove(identity);
                }
                self.answers.insert(key, (Instant::now(), answer.clone()));
                answer
            }
        };
        match answer {
            Answer::Refused(refused) if !refused.is_empty() => Some(refused.join(", ")),
            _ => None,
        }
    }

    /// Sends `wake` once after [`RECHECK`], unless such a wake is already on its way.
    pub fn recheck_later<T: Send + 'static>(&self, tx: UnboundedSender<T>, wake: T) {
        if self.recheck_pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let pending = self.recheck_pending.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RECHECK).await;
            pending.store(false, Ordering::Release);
            let _ = tx.send(wake);
        });
    }
}

/// Asks for every verb at once; the verbs refused.
async fn refused(
    client: &Client,
    resource: &ApiResource,
    verbs: &'static [&'static str],
) -> Result<Vec<&'static str>, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let asks = verbs.iter().map(|verb| {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(resource.group.clone()),
                    resource: Some(resource.plural.clone()),
                    verb: Some(verb.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = api.clone();
        async move {
            let answer = api.create(&PostParams::default(), &review).await?;
            Ok::<_, kube::Error>((*verb, answer.status.is_some_and(|s| s.allowed)))
        }
    });
    let answers = futures::future::try_join_all(asks).await?;
    Ok(answers
        .into_iter()
        .filter(|(_, allowed)| !allowed)
        .map(|(verb, _)| verb)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use xcc_kube::scenario::{Running, Scenario};

    /// A mocked API server that answers `reviews` access reviews, asked at once, allowing
    /// `allowed` verbs and refusing the others.
    fn server(allowed: &'static [&'static str], reviews: usize) -> (Client, Running) {
        let mut scenario = Scenario::new().in_any_order();
        for _ in 0..reviews {
            scenario = scenario
                .expect(
                    "POST",
                    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                )
                .reply_with(move |review| {
                    let verb = review["spec"]["resourceAttributes"]["verb"]
                        .as_str()
                        .unwrap();
                    let mut answer = review.clone();
                    answer["status"] = json!({"allowed": allowed.contains(&verb)});
                    (201, answer)
                });
        }
        scenario.run()
    }

    fn configmaps() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
    }

    #[tokio::test]
    async fn refused_verbs_are_named_and_the_answer_is_kept() {
        let (client, server) = server(
            &["get", "list", "watch"],
            Access::WRITE.len() + Access::READ.len(),
        );
        let access = Access::default();
        let missing = access
            .missing("local", &client, &configmaps(), Access::WRITE)
            .await;
        assert_eq!(missing.as_deref(), Some("create, patch, update, delete"));
        // Asked once: the second answer comes from memory.
        let again = access
            .missing("local", &client, &configmaps(), Access::WRITE)
            .await;
        assert_eq!(again, missing);
        assert_eq!(
            access
                .missing("local", &client, &configmaps(), Access::READ)
                .await,
            None
        );
        let asked: Vec<String> = server
            .done()
            .await
            .iter()
            .map(|r| {
                let attributes = &r.body["spec"]["resourceAttributes"];
                format!(
                    "{} {}",
                    attributes["verb"].as_str().unwrap(),
                    attributes["resource"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            asked.len(),
            Access::WRITE.len() + Access::READ.len(),
            "{asked:?}"
        );
        assert!(asked.contains(&"create configmaps".to_string()));
    }

    /// A peer that accepts requests and never answers costs one deadline, then is not asked
    /// again for a while, whatever the kind.
    #[tokio::test(start_paused = true)]
    async fn a_silent_api_server_costs_one_deadline() {
        let (client, server) = Scenario::new()
            .always(
                "POST",
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            )
            .hang()
            .run();
        let asked = || server.seen().len();
        let access = Access::default();
        let started = tokio::time::Instant::now();
        assert_eq!(
            access
                .missing("peer", &client, &configmaps(), Access::READ)
                .await,
            None
        );
        assert_eq!(started.elapsed(), DEADLINE);
        let secrets = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        assert_eq!(
            access
                .missing("peer", &client, &secrets, Access::READ)
                .await,
            None
        );
        assert_eq!(started.elapsed(), DEADLINE, "not asked again");
        assert_eq!(asked(), Access::READ.len());
        tokio::time::advance(KEEP_UNANSWERED).await;
        let _ = access
            .missing("peer", &client, &secrets, Access::READ)
            .await;
        assert_eq!(asked(), 2 * Access::READ.len(), "asked again later");
        server.done().await;
    }

    #[tokio::test]
    async fn an_api_server_that_cannot_answer_blocks_nothing() {
        let (client, server) = Scenario::new().run();
        server.close().await;
        let access = Access::default();
        assert_eq!(
            access
                .missing("peer", &client, &configmaps(), Access::READ)
                .await,
            None
        );
    }
}

//! What the agent may do, asked of the API servers with SelfSubjectAccessReviews before a rule
//! starts: write a kind here, and list and watch it on each peer (with the peer's kubeconfig).
//! Answers are kept for a short while, so that the rules' many refreshes do not each ask again,
//! and a permission granted later is noticed by itself.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

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
/// How soon permissions that were missing are asked again.
const RECHECK: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Access {
    /// (cluster identity, group/plural, verbs asked) → when asked, the verbs refused.
    answers: HashMap<(String, String, String), (Instant, Vec<&'static str>)>,
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
        &mut self,
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
        let refused = match self.answers.get(&key) {
            Some((asked, refused)) if asked.elapsed() < KEEP => refused.clone(),
            _ => match refused(client, resource, verbs).await {
                Ok(refused) => {
                    self.answers.insert(key, (Instant::now(), refused.clone()));
                    refused
                }
                Err(error) => {
                    tracing::debug!(cluster = %identity, resource = %resource.plural, %error, "cannot ask for permissions");
                    Vec::new()
                }
            },
        };
        (!refused.is_empty()).then(|| refused.join(", "))
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

    /// A mocked API server that allows `allowed` verbs and refuses the others.
    fn server(allowed: &'static [&'static str]) -> (Client, tokio::task::JoinHandle<Vec<String>>) {
        let (service, mut handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let task = tokio::spawn(async move {
            let mut asked = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                let body = request.into_body().collect_bytes().await.unwrap();
                let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let attributes = &review["spec"]["resourceAttributes"];
                let verb = attributes["verb"].as_str().unwrap().to_string();
                asked.push(format!(
                    "{} {}",
                    verb,
                    attributes["resource"].as_str().unwrap()
                ));
                let mut answer = review.clone();
                answer["status"] = json!({"allowed": allowed.contains(&verb.as_str())});
                send.send_response(
                    http::Response::builder()
                        .status(201)
                        .body(kube::client::Body::from(
                            serde_json::to_vec(&answer).unwrap(),
                        ))
                        .unwrap(),
                );
            }
            asked
        });
        (Client::new(service, "default"), task)
    }

    fn configmaps() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
    }

    #[tokio::test]
    async fn refused_verbs_are_named_and_the_answer_is_kept() {
        let (client, asked) = server(&["get", "list", "watch"]);
        let mut access = Access::default();
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
        drop(client);
        drop(access);
        let asked = asked.await.unwrap();
        assert_eq!(
            asked.len(),
            Access::WRITE.len() + Access::READ.len(),
            "{asked:?}"
        );
        assert!(asked.contains(&"create configmaps".to_string()));
    }

    #[tokio::test]
    async fn an_api_server_that_cannot_answer_blocks_nothing() {
        let (service, handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        drop(handle);
        let client = Client::new(service, "default");
        let mut access = Access::default();
        assert_eq!(
            access
                .missing("peer", &client, &configmaps(), Access::READ)
                .await,
            None
        );
    }
}

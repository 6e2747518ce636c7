//! The aggregated API server's own identity on the workload cluster: ServiceAccount
//! `<--namespace>/<--projection-proxy-service-account>` (`xcc-dns/xcc-projection-proxy` in the
//! manifests), whose RBAC is the reference's list for the proxy and nothing more:
//! `system:auth-delegator` (SubjectAccessReviews), `extension-apiserver-authentication-reader`
//! in kube-system (the front proxy's settings) and namespaces get/list/watch. The agent's own
//! ServiceAccount holds none of these; its one right over the proxy's is requesting its tokens
//! (TokenRequest, an hour each, renewed at two thirds of their life and sent by every request
//! of the proxy from then on, watches included).
//!
//! Without it (no such ServiceAccount, or the agent may not request its tokens) the server acts
//! as the agent's ServiceAccount, the DownstreamClusterLinks' `ProxyServiceAccountReady` says so,
//! and the token is asked for again with backoff.

use std::{
    path::Path,
    sync::{Arc, RwLock},
    time::Duration,
};

use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::ServiceAccount,
};
use kube::{Api, Client, api::PostParams};
use xcc_kube::h2::SharedToken;

/// Lifetime asked for each token.
const TOKEN_SECONDS: i64 = 3600;

/// Which ServiceAccount the aggregated API server acts as, and its client.
pub struct Identity {
    agent: Client,
    own: Option<Client>,
    token: SharedToken,
    /// `namespace/name` of the proxy's ServiceAccount.
    account: (String, String),
    /// `None` while the proxy's own ServiceAccount is in use, else why it is not.
    unusable: RwLock<Option<String>>,
    /// What the log says while no token can be had: one WARN, one "recovered".
    outage: std::sync::Mutex<xcc_sync::outage::Outage>,
}

impl Identity {
    /// The identity of ServiceAccount `namespace/name`, on the cluster the agent's kubeconfig
    /// (`kubeconfig`, else the inferred one) names; `agent` until its first token comes.
    pub async fn new(
        agent: Client,
        kubeconfig: Option<&Path>,
        namespace: &str,
        name: &str,
    ) -> Identity {
        let token = SharedToken::default();
        let (own, unusable) =
            match xcc_kube::own_cluster_with_token(kubeconfig, token.clone()).await {
                Ok(client) => (Some(client), "no token yet".to_string()),
                Err(error) => (None, xcc_kube::bounded(&error)),
            };
        Identity {
            agent,
            own,
            token,
            account: (namespace.to_string(), name.to_string()),
            unusable: RwLock::new(Some(unusable)),
            outage: std::sync::Mutex::new(xcc_sync::outage::Outage::new(
                format!(
                    "the token request of ServiceAccount {namespace}/{name} (the aggregated API server's identity)"
                ),
                xcc_sync::outage::local_server(),
            )),
        }
    }

    /// The client the proxy's requests use.
    pub fn client(&self) -> Client {
        match (&self.own, self.unusable()) {
            (Some(own), None) => own.clone(),
            _ => self.agent.clone(),
        }
    }

    fn unusable(&self) -> Option<String> {
        self.unusable
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Who the proxy acts as, in words.
    pub fn describe(&self) -> String {
        let (namespace, name) = &self.account;
        match self.unusable() {
            None => format!("ServiceAccount {namespace}/{name}"),
            Some(why) => format!(
                "the agent's own ServiceAccount (ServiceAccount {namespace}/{name} cannot be used: {why})"
            ),
        }
    }

    /// Asks for a token once; how long until the next should be asked for.
    async fn renew(&self) -> Result<Duration, String> {
        if self.own.is_none() {
            return Err(self.unusable().unwrap_or_default());
        }
        let (namespace, name) = &self.account;
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(TOKEN_SECONDS),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<ServiceAccount>::namespaced(self.agent.clone(), namespace)
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .map_err(|e| format!("TokenRequest: {}", xcc_kube::bounded(&e)))?;
        let status = answer
            .status
            .filter(|s| !s.token.is_empty())
            .ok_or("the TokenRequest was answered without a token")?;
        self.token
            .set(&status.token)
            .map_err(|_| "the token is not a valid header value".to_string())?;
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let lifetime = (status.expiration_timestamp.0.as_second() - now).max(60);
        Ok(Duration::from_secs(lifetime.unsigned_abs() * 2 / 3))
    }

    /// Asks for a token once and records the outcome: when to ask next, or `None` when there
    /// is no point (no client can be made for the proxy's ServiceAccount).
    pub async fn renew_once(&self, backoff: &mut xcc_kube::Backoff) -> Option<Duration> {
        match self.renew().await {
            Ok(next) => {
                self.outage
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .recovered();
                let was = self
                    .unusable
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                if was.is_some() {
                    tracing::info!(account = %self.describe(), "the aggregated API server acts as its own ServiceAccount");
                }
                kube::runtime::utils::Backoff::reset(backoff);
                Some(next)
            }
            Err(why) => {
                self.outage
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .failed(&why);
                if self.token.is_set() {
                    tracing::debug!("the aggregated API server keeps its current token");
                } else {
                    tracing::debug!("the aggregated API server acts as the agent's ServiceAccount");
                    *self.unusable.write().unwrap_or_else(|e| e.into_inner()) = Some(why);
                }
                self.own.as_ref()?;
                Some(backoff.next().unwrap_or(Duration::from_secs(30)))
            }
        }
    }

    /// Keeps a token until `stop` resolves, first asking after `wait`: renewed at two thirds of
    /// its life, asked for again with backoff while it cannot be had.
    pub async fn renew_forever(
        self: Arc<Self>,
        mut wait: Duration,
        mut backoff: xcc_kube::Backoff,
        stop: impl Future<Output = ()>,
    ) {
        let mut stop = std::pin::pin!(stop);
        loop {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = &mut stop => return,
            }
            match self.renew_once(&mut backoff).await {
                Some(next) => wait = next,
                None => return,
            }
        }
    }
}

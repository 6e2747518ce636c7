//! Keeping a DownstreamClusterLink's kubeconfig alive: the token in it (a copy of the service
//! cluster's `<link>-kubeconfig`) is short-lived, and the copy does not follow the renewals of
//! the original. So the workload agent renews it itself: once less than a third of the token's
//! life (or less than an hour) remains, it asks the service cluster, with the token itself, for
//! a new token of the same ServiceAccount, valid as long as the service cluster's own (a day;
//! the UpstreamClusterLink lets its ServiceAccount request its own tokens and nothing more), and
//! writes it into the Secret in place of the old one; nothing else of the kubeconfig changes. A
//! link's token is renewed at most once per [`MIN_INTERVAL`], so that a service cluster that
//! caps tokens below an hour does not make it renew at every look. A kubeconfig without a token
//! (client certificates), or whose token is not a ServiceAccount's JWT, is left as it is.

use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{Secret, ServiceAccount},
};
use kube::{Api, Client, ResourceExt, api::PostParams};
use serde_json::json;

/// Renewed when less than this much of a token's life remains, whatever its lifetime.
const AT_LEAST_SECONDS: i64 = 3600;
/// The least time between two renewals of one link's token.
pub const MIN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(600);
/// When the token in the Secret expires (RFC 3339), as the service cluster's Secret says it.
pub const EXPIRES_ANNOTATION: &str = "xcc.test/token-expires";

/// The token of a kubeconfig's current user and its life, from its JWT claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenLife {
    /// Name of the kubeconfig's user entry holding the token.
    pub user: String,
    pub issued: i64,
    pub expires: i64,
}

impl TokenLife {
    /// Whether the token should be renewed at `now` (seconds since the epoch).
    pub fn due(&self, now: i64) -> bool {
        let lifetime = self.expires - self.issued;
        let left = self.expires - now;
        left < lifetime / 3 || left < AT_LEAST_SECONDS
    }
}

/// The life of the bearer token of `kubeconfig`'s current context's user, if it has one that is
/// a JWT with `iat` and `exp`.
pub fn token_life(kubeconfig: &str) -> Option<TokenLife> {
    let config: serde_json::Value = xcc_kube::yaml::from_str(kubeconfig).ok()?;
    let current = config["current-context"].as_str()?;
    let context = config["contexts"]
        .as_array()?
        .iter()
        .find(|c| c["name"].as_str() == Some(current))?;
    let user = context["context"]["user"].as_str()?;
    let token = config["users"]
        .as_array()?
        .iter()
        .find(|u| u["name"].as_str() == Some(user))?["user"]["token"]
        .as_str()?;
    let payload = token.split('.').nth(1)?;
    let claims: serde_json::Value =
        serde_json::from_slice(&xcc_kube::wire::decode_base64url(payload).ok()?).ok()?;
    Some(TokenLife {
        user: user.to_string(),
        issued: claims["iat"].as_i64()?,
        expires: claims["exp"].as_i64()?,
    })
}

/// `kubeconfig` with `token` as the token of user entry `user`, everything else as it was.
pub fn with_token(kubeconfig: &str, user: &str, token: &str) -> Option<String> {
    let mut config: serde_json::Value = xcc_kube::yaml::from_str(kubeconfig).ok()?;
    let entry = config["users"]
        .as_array_mut()?
        .iter_mut()
        .find(|u| u["name"].as_str() == Some(user))?;
    *entry.get_mut("user")?.get_mut("token")? = serde_json::Value::String(token.to_string());
    xcc_kube::yaml::to_string(&config).ok()
}

/// `namespace` and `name` of a ServiceAccount's user name (`system:serviceaccount:<ns>:<name>`).
pub fn service_account(username: &str) -> Option<(&str, &str)> {
    let mut parts = username
        .strip_prefix("system:serviceaccount:")?
        .splitn(2, ':');
    Some((parts.next()?, parts.next()?))
}

/// Renews the token of `secret`'s kubeconfig (data key `key`) when it is due: a new token of
/// `username` from the service cluster (`upstream`, authenticated by the current token), written
/// into the Secret through `local`. `Ok(None)` when nothing was due (or there is no token to
/// renew); the new expiry when renewed.
pub async fn renew_if_due(
    secret: &Secret,
    key: &str,
    username: &str,
    upstream: &Client,
    local: &Client,
    counted: &crate::sink::Counted,
    now: i64,
) -> Result<Option<i64>, String> {
    let Some(kubeconfig) = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
    else {
        return Ok(None);
    };
    let Some(life) = token_life(&kubeconfig).filter(|l| l.due(now)) else {
        return Ok(None);
    };
    let Some((sa_namespace, sa_name)) = service_account(username) else {
        return Err(format!(
            "the token is due for renewal but belongs to {:?}, not a ServiceAccount",
            xcc_kube::bounded(&username)
        ));
    };
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(super::link::TOKEN_SECONDS),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<ServiceAccount>::namespaced(upstream.clone(), sa_namespace)
        .create_token_request(sa_name, &PostParams::default(), &request)
        .await
        .map_err(|e| {
            format!(
                "the service cluster refuses a new token for ServiceAccount {sa_namespace}/{sa_name}: {}",
                xcc_kube::bounded(&e)
            )
        })?;
    let Some(status) = answer.status.filter(|s| !s.token.is_empty()) else {
        return Err("the service cluster answered the TokenRequest without a token".into());
    };
    let renewed = with_token(&kubeconfig, &life.user, &status.token)
        .ok_or("the kubeconfig could not be written back")?;
    let expires = status.expiration_timestamp.0;
    let patch = json!({
        "metadata": {
            "resourceVersion": secret.resource_version(),
            "annotations": {EXPIRES_ANNOTATION: expires.to_string()},
        },
        "data": {key: xcc_kube::wire::encode_base64(renewed)},
    });
    let namespace = secret.namespace().unwrap_or_default();
    let api = Api::<Secret>::namespaced(local.clone(), &namespace);
    crate::sink::merge(&api, &secret.name_any(), &patch, counted)
        .await
        .map_err(|e| {
            format!(
                "cannot write the renewed token into Secret {namespace}/{}: {}",
                secret.name_any(),
                xcc_kube::bounded(&e)
            )
        })?;
    Ok(Some(expires.as_second()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(iat: i64, exp: i64) -> String {
        format!(
            "{}.{}.c2lnbmF0dXJl",
            xcc_kube::wire::encode_base64url(r#"{"alg":"RS256"}"#),
            xcc_kube::wire::encode_base64url(json!({"iat": iat, "exp": exp, "sub": "system:serviceaccount:services-toolkit:xcc-upstream-workload-3c"}).to_string())
        )
    }

    fn kubeconfig(token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: services\n  cluster:\n    server: https://services.example:6443\n    certificate-authority-data: Q0E=\n\
             contexts:\n- name: link\n  context: {{cluster: services, user: link}}\ncurrent-context: link\n\
             users:\n- name: other\n  user: {{token: not-this-one}}\n- name: link\n  user:\n    token: {token}\n"
        )
    }

    #[test]
    fn a_token_is_due_in_its_last_third_or_last_hour() {
        let day = TokenLife {
            user: "link".into(),
            issued: 0,
            expires: 86_400,
        };
        assert!(!day.due(57_000));
        assert!(day.due(57_601));
        let short = TokenLife {
            user: "link".into(),
            issued: 0,
            expires: 600,
        };
        assert!(
            short.due(0),
            "a token of less than an hour is renewed at once"
        );
    }

    #[test]
    fn the_current_users_token_is_read_and_replaced_alone() {
        let config = kubeconfig(&jwt(1_000, 87_400));
        let life = token_life(&config).unwrap();
        assert_eq!(
            life,
            TokenLife {
                user: "link".into(),
                issued: 1_000,
                expires: 87_400
            }
        );
        let renewed = with_token(&config, "link", "new-token").unwrap();
        let value: serde_json::Value = xcc_kube::yaml::from_str(&renewed).unwrap();
        assert_eq!(value["users"][1]["user"]["token"], "new-token");
        assert_eq!(value["users"][0]["user"]["token"], "not-this-one");
        assert_eq!(
            value["clusters"][0]["cluster"]["server"],
            "https://services.example:6443"
        );
        assert_eq!(value["current-context"], "link");
    }

    #[test]
    fn kubeconfigs_without_a_jwt_are_left_alone() {
        assert_eq!(token_life(&kubeconfig("opaque-static-token")), None);
        assert_eq!(token_life("not: [a kubeconfig"), None);
        assert_eq!(
            service_account("system:serviceaccount:services-toolkit:xcc-upstream-a"),
            Some(("services-toolkit", "xcc-upstream-a"))
        );
        assert_eq!(service_account("alice"), None);
    }
}

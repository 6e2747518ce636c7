//! Discovery and OpenAPI of the imported groups: forwarded, merged, and their last good answer
//! kept for when the service cluster cannot be reached.

use std::{collections::BTreeMap, sync::Arc};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use serde_json::json;

use super::upstream::Upstream;
use crate::projection::api::ClusterAPIGroupImport;

use super::{
    Body, DISCOVERY_DEADLINE, Label, MAX_BODY, MAX_OPENAPI_BODY, Proxy, full, json_body, not_found,
    unavailable,
};

impl Proxy {
    /// `/apis/<group>`, `/apis/<group>/<version>` or `/openapi/v3/apis/<group>/<version>`:
    /// upstream's answer, or the last good one.
    pub(super) async fn discovery(
        &self,
        group: &str,
        path: &str,
        label: &mut Label,
    ) -> Response<Body> {
        let Some(import) = self.import_of(group) else {
            return not_found("the server could not find the requested resource");
        };
        let link = &import.spec.downstream_cluster_link_ref;
        label.link = format!("{}/{}", link.namespace, link.name);
        let client = self.client_of(&import);
        self.cached_get(client, path).await
    }

    pub(super) fn cached(&self, key: &str) -> Option<Bytes> {
        self.discovery.get(key).map(|body| body.clone())
    }

    /// GET `path` (with its query) upstream as JSON; kept as the last good copy.
    pub(super) async fn cached_get(
        &self,
        client: Result<Upstream, Box<Response<Body>>>,
        path: &str,
    ) -> Response<Body> {
        let (upstream, refusal) = match client {
            Ok(upstream) => (Some(upstream), None),
            Err(answer) => (None, Some(answer)),
        };
        match self
            .last_good(upstream.as_ref(), path, path, MAX_BODY)
            .await
        {
            Some(body) => json_body(body),
            None => refusal.map_or_else(
                || unavailable("the service cluster's discovery did not answer"),
                |answer| *answer,
            ),
        }
    }

    /// Upstream's JSON at `path` (through `upstream`, when there is one), kept under `key` as the
    /// last good copy; that copy when upstream gives none.
    pub(super) async fn last_good(
        &self,
        upstream: Option<&Upstream>,
        path: &str,
        key: &str,
        limit: usize,
    ) -> Option<Bytes> {
        let fresh = match upstream {
            Some(upstream) => self.upstream_json(upstream, path, limit).await,
            None => None,
        };
        match fresh {
            Some(body) => {
                self.discovery.insert(key.to_string(), body.clone());
                Some(body)
            }
            None => self.cached(key),
        }
    }

    /// GET `path` upstream as JSON: the body of a 200 that parses, at most `limit` bytes, else
    /// `None`.
    pub(super) async fn upstream_json(
        &self,
        upstream: &Upstream,
        path: &str,
        limit: usize,
    ) -> Option<Bytes> {
        let request = Request::get(path)
            .header(header::ACCEPT, "application/json")
            .body(kube::client::Body::empty())
            .ok()?;
        let response = self
            .liveness
            .send(upstream, request, DISCOVERY_DEADLINE, &self.metrics)
            .await
            .ok()?;
        if response.status() != StatusCode::OK {
            return None;
        }
        let body = Limited::new(response.into_body(), limit)
            .collect()
            .await
            .ok()?
            .to_bytes();
        serde_json::from_slice::<serde_json::Value>(&body).ok()?;
        Some(body)
    }

    /// For each link with imports: its imported groups and upstream's JSON document at `path`,
    /// or the last good copy while upstream does not give one.
    pub(super) async fn documents(
        &self,
        path: &str,
        limit: usize,
    ) -> Vec<(Vec<String>, serde_json::Value)> {
        let mut by_link: BTreeMap<String, (Arc<ClusterAPIGroupImport>, Vec<String>)> =
            BTreeMap::new();
        for import in self.imports.state() {
            if import.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let link = &import.spec.downstream_cluster_link_ref;
            by_link
                .entry(format!("{}/{}", link.namespace, link.name))
                .or_insert_with(|| (import.clone(), Vec::new()))
                .1
                .push(import.spec.group.clone());
        }
        let mut documents = Vec::new();
        for (link, (import, groups)) in by_link {
            let key = format!("{path} {link}");
            let upstream = self.client_of(&import).ok();
            let body = self.last_good(upstream.as_ref(), path, &key, limit).await;
            if let Some(document) = body.and_then(|b| serde_json::from_slice(&b).ok()) {
                documents.push((groups, document));
            }
        }
        documents
    }

    /// `/openapi/v3`: the service clusters' OpenAPI v3 index, with the paths of imported groups
    /// only (so the workload cluster's OpenAPI gains nothing else of theirs).
    pub(super) async fn openapi_index(&self) -> Response<Body> {
        let mut paths = serde_json::Map::new();
        for (groups, index) in self.documents("/openapi/v3", MAX_BODY).await {
            super::openapi::v3_index_paths(&index, &groups, &mut paths);
        }
        json_body(Bytes::from(json!({ "paths": paths }).to_string()))
    }

    /// `/openapi/v2`: the imported groups' paths of the service clusters' Swagger document and
    /// the definitions they use, with an `ETag` so that kube-aggregator's polling costs a 304
    /// when nothing changed.
    pub(super) async fn openapi_v2(&self, if_none_match: Option<&HeaderValue>) -> Response<Body> {
        let mut merged = super::openapi::v2_empty("xcc");
        for (groups, spec) in self.documents("/openapi/v2", MAX_OPENAPI_BODY).await {
            super::openapi::v2_merge(&spec, &groups, &mut merged);
        }
        let body = Bytes::from(merged.to_string());
        let etag = format!("\"{:016X}\"", {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            body.hash(&mut hasher);
            hasher.finish()
        });
        if if_none_match.is_some_and(|v| v.as_bytes() == etag.as_bytes()) {
            let mut response = Response::new(full(Bytes::new()));
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            if let Ok(value) = HeaderValue::from_str(&etag) {
                response.headers_mut().insert(header::ETAG, value);
            }
            return response;
        }
        let mut response = json_body(body);
        if let Ok(value) = HeaderValue::from_str(&etag) {
            response.headers_mut().insert(header::ETAG, value);
        }
        response
    }
}

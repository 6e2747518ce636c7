//! The agent's other kubeconfig readers, with the same canary cases: API projection (a
//! DownstreamClusterLink's `spec.upstream.kubeconfig.secretName`, said in its
//! `ServiceAccountReady` condition) and plumber (the kubeconfig Secret `kubeconfig/config`, one
//! case at a time: each case's context becomes a ClusterDetector that says why it has no
//! client, and a Replicator that targets it says why it cannot write there; a Secret that does
//! not parse is logged). Every Event and status, and the agent's log, are searched for the
//! canary, in both log formats (one round each, new objects each round).

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams},
};
use xcc_e2e::{Cluster, Testbed, require_testbed};

use super::{assert_no_canary, cases, condition, kubeconfig_secret, said_on};
use crate::{
    resource_sync::{manifest, prepare_member, start_agent_with},
    secrets::wait_for,
};

/// Where API projection's DownstreamClusterLinks live in our manifests.
const LINKS: &str = "services-toolkit";
const PROJECTION: &str = "projection.apiresources.multicluster.x-tanzu.vmware.com";
const PLUMBER: &str = "plumber.jnytnai0613.github.io";

fn links(cluster: &Cluster) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        PROJECTION,
        "v1alpha1",
        "DownstreamClusterLink",
    ));
    Api::namespaced_with(cluster.client.clone(), LINKS, &resource)
}

fn plumber(cluster: &Cluster, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(PLUMBER, "v1", kind));
    if kind == "ClusterDetector" {
        Api::namespaced_with(cluster.client.clone(), "plumber-system", &resource)
    } else {
        Api::all_with(cluster.client.clone(), &resource)
    }
}

/// A case's kubeconfig with its names made its own (`x-<tag>`, cluster `c-<tag>`, user
/// `u-<tag>`), so that each case is a new ClusterDetector; a case without a context gets one.
fn renamed(text: &str, tag: &str) -> String {
    let mut text = text
        .replace("- name: c\n", &format!("- name: c-{tag}\n"))
        .replace("- name: u\n", &format!("- name: u-{tag}\n"))
        .replace("- name: x\n", &format!("- name: x-{tag}\n"))
        .replace(
            "{cluster: c, user: u}",
            &format!("{{cluster: c-{tag}, user: u-{tag}}}"),
        )
        .replace(
            "current-context: x\n",
            &format!("current-context: x-{tag}\n"),
        );
    if !text.contains("\ncontexts:") {
        text.push_str(&format!(
            "contexts:\n- name: x-{tag}\n  context: {{cluster: c-{tag}, user: u-{tag}}}\n"
        ));
    }
    text
}

/// A DownstreamClusterLink per case, each naming its canary Secret; waits until each says its
/// kubeconfig cannot be used, naming the Secret.
async fn links_refused(member: &Cluster, round: usize) {
    let secrets: Api<Secret> = Api::namespaced(member.client.clone(), LINKS);
    for (case, text) in cases() {
        let name = format!("canary{round}-{case}");
        secrets
            .create(
                &PostParams::default(),
                &kubeconfig_secret(&format!("{name}-kc"), LINKS, "kubeconfig", &text),
            )
            .await
            .unwrap();
        member
            .apply_yaml(&format!(
                "apiVersion: {PROJECTION}/v1alpha1\nkind: DownstreamClusterLink\n\
                 metadata: {{name: {name}, namespace: {LINKS}}}\n\
                 spec: {{proxy: {{TLS: {{secretName: {name}-tls}}}}, \
                 upstream: {{name: {name}, kubeconfig: {{secretName: {name}-kc}}}}}}\n"
            ))
            .await
            .unwrap();
    }
    for (case, _) in cases() {
        let name = format!("canary{round}-{case}");
        wait_for(
            &format!("DownstreamClusterLink {name} says its kubeconfig is refused"),
            Duration::from_secs(60),
            || async {
                let link = links(member).get_opt(&name).await.ok()??;
                condition(&link, "ServiceAccountReady").filter(|(status, _, message)| {
                    status == "False" && message.contains(&format!("{name}-kc"))
                })
            },
        )
        .await;
    }
}

/// plumber's Secret holding each case in turn: a Secret that does not parse is logged; each
/// other case's context becomes a ClusterDetector without a client, and a Replicator that
/// targets it says why it cannot write there.
async fn plumber_refused(member: &Cluster, round: usize, log: &std::path::Path) {
    let secrets: Api<Secret> = Api::namespaced(member.client.clone(), "kubeconfig");
    for (case, text) in cases() {
        let tag = format!("{round}-{case}");
        let secret = kubeconfig_secret("config", "kubeconfig", "config", &renamed(&text, &tag));
        secrets
            .patch(
                "config",
                &PatchParams::apply("canary").force(),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap();
        if case == "unclosed" {
            wait_for(
                "the agent logs that plumber's Secret does not parse",
                Duration::from_secs(60),
                || async {
                    std::fs::read_to_string(log)
                        .ok()?
                        .lines()
                        .find(|l| {
                            l.contains("plumber kubeconfig Secret unusable")
                                && l.contains("kubeconfig/config")
                        })
                        .map(str::to_string)
                },
            )
            .await;
            continue;
        }
        let detector = format!("c-{tag}.u-{tag}");
        wait_for(
            &format!("ClusterDetector {detector} says why it has no client"),
            Duration::from_secs(60),
            || async {
                let found = plumber(member, "ClusterDetector")
                    .get_opt(&detector)
                    .await
                    .ok()??;
                let reason = found.data["status"]["reason"].as_str()?.to_string();
                reason.contains("kubeconfig/config").then_some(reason)
            },
        )
        .await;
        let name = format!("canary{tag}");
        member
            .apply_yaml(&format!(
                "apiVersion: {PLUMBER}/v1\nkind: Replicator\nmetadata: {{name: {name}}}\n\
                 spec: {{targetCluster: [{detector}], replicationNamespace: canary-ns}}\n"
            ))
            .await
            .unwrap();
        wait_for(
            &format!("Replicator {name} says why it cannot write to {detector}"),
            Duration::from_secs(60),
            || async {
                let found = plumber(member, "Replicator").get_opt(&name).await.ok()??;
                let status = found.data.get("status")?.to_string();
                status
                    .contains(&format!("kubeconfig/config#x-{tag}"))
                    .then_some(status)
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_credentials_in_link_and_plumber_secrets_appear_in_no_event_condition_or_log() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["first"]).await.unwrap();
    let first = bed.cluster("first");
    let prepared = prepare_member(&binaries, first).await;
    for file in [
        "manifests/agent/projection.yaml",
        // Namespace `kubeconfig` too.
        "manifests/agent/plumber.yaml",
    ] {
        first
            .kubectl(&["apply", "-f", &manifest(file)])
            .await
            .unwrap();
    }
    let agent_args = |format: &str| {
        [
            format!("--log-format={format}"),
            "--secret-replication=false".into(),
            "--resource-sync=false".into(),
            "--mcs=false".into(),
        ]
    };
    let args = agent_args("json");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut member = prepared.start(start_agent_with(first, "xcc-agent-json.log", &args).await);
    for (round, format) in ["json", "text"].into_iter().enumerate() {
        let log = first.dir().join(format!("xcc-agent-{format}.log"));
        if round > 0 {
            let args = agent_args(format);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            drop(std::mem::replace(
                &mut member.agent,
                start_agent_with(first, &format!("xcc-agent-{format}.log"), &args).await,
            ));
        }
        links_refused(first, round).await;
        plumber_refused(first, round, &log).await;

        // What the objects say is about the Secret, not Rust.
        let said = said_on(first).await;
        for rust in ["ServiceError", "ApiError", "Status {"] {
            assert!(!said.contains(rust), "{rust:?} in {said}");
        }
        assert_no_canary("Events and statuses", &said);
        let text = std::fs::read_to_string(&log).unwrap();
        if format == "json" {
            assert!(
                text.trim_start().starts_with('{'),
                "JSON: {}",
                &text[..text.len().min(200)]
            );
        }
        assert_no_canary(&format!("the agent's {format} log"), &text);
    }
}

//! The CLI (`kubectl-xcc`) with the canary cases: every command that reads the user's kubeconfig
//! (given by `--kubeconfig`, the good second context as a second document, and by
//! `$KUBECONFIG`, beside a good file with that context), and the commands that read a
//! kubeconfig from a Secret (`plumber view`, `add` and `remove` read plumber's Secret; `cluster
//! leave` reads each peer's Secret; `link` the UpstreamClusterLink's). Each run fails and says
//! what is wrong and where (the file and line, the context or the Secret), and neither stdout
//! nor stderr holds the canary or a Rust type's name.

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams},
};
use serde_json::json;
use xcc_e2e::{Cluster, Testbed, require_testbed};

use super::{assert_no_canary, cases, kubeconfig_secret};
use crate::{
    cli::{Run, User},
    resource_sync::{REGISTRY_NS, repo},
};

/// A good kubeconfig with context `y` (nothing listens at its server), the second context of
/// `cluster join` and `link`.
const SECOND: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: far\n  cluster: \
    {server: 'https://127.0.0.1:1'}\nusers:\n- name: far\n  user: {token: plain}\ncontexts:\n\
    - name: y\n  context: {cluster: far, user: far}\n";

/// Every command that reads the user's kubeconfig, for context `x` (and `y`).
const COMMANDS: [&[&str]; 5] = [
    &["status", "--context", "x"],
    &["dns", "kuard.clusters.xcc.test", "--context", "x"],
    &["cluster", "join", "--context", "x", "--context", "y"],
    &["cluster", "leave", "--context", "x"],
    &["link", "--service-context", "x", "--workload-context", "y"],
];

/// Asserts that `run` failed and that its output says nothing of the canary nor of Rust, and
/// names one of `wheres`.
fn refused(what: &str, run: &Run, wheres: &[&str]) {
    let out = format!("{}{}", run.stdout, run.stderr);
    assert_ne!(run.code, 0, "{what}: {run:?}");
    assert_no_canary(what, &out);
    for rust in ["ServiceError", "ApiError", "Status {", "Error {", "Some("] {
        assert!(!out.contains(rust), "{what}: {rust:?} in {out}");
    }
    assert!(
        wheres.iter().any(|w| run.stderr.contains(w)),
        "{what}: none of {wheres:?} in {:?}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_credentials_in_the_users_kubeconfig_appear_in_no_cli_output() {
    let Some(_binaries) = require_testbed() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let second = dir.path().join("second.kubeconfig");
    std::fs::write(&second, SECOND).unwrap();
    for (case, text) in cases() {
        let file = dir.path().join(format!("{case}.kubeconfig"));
        std::fs::write(&file, &text).unwrap();
        let path = file.display().to_string();
        // The same with the good file's context as a second document, for `--kubeconfig`.
        let both = dir.path().join(format!("{case}-and-y.kubeconfig"));
        std::fs::write(&both, format!("{text}---\n{SECOND}")).unwrap();
        let both = both.display().to_string();
        let wheres = [path.as_str(), both.as_str(), "context \"x\""];
        // `--kubeconfig FILE`, $KUBECONFIG naming a good file.
        let flag = User {
            kubeconfig: second.clone(),
            home: dir.path().into(),
        };
        // $KUBECONFIG: the case's file, then the good one.
        let env = User {
            kubeconfig: std::env::join_paths([&file, &second]).unwrap().into(),
            home: dir.path().into(),
        };
        for command in COMMANDS {
            let mut args = command.to_vec();
            args.extend(["--kubeconfig", &both, "--request-timeout", "3s"]);
            let run = flag.run(&args).await;
            refused(&format!("{case}: {}", args.join(" ")), &run, &wheres);
            if case == "unclosed" {
                assert!(run.stderr.contains("line"), "the line is said: {run:?}");
            }
            let mut args = command.to_vec();
            args.extend(["--request-timeout", "3s"]);
            let run = env.run(&args).await;
            refused(
                &format!("{case}: KUBECONFIG={path}:... {}", args.join(" ")),
                &run,
                &wheres,
            );
        }
        let run = flag
            .run(&[
                "plumber",
                "activate",
                "-p",
                &path,
                "-a",
                "x",
                "--request-timeout",
                "3s",
            ])
            .await;
        refused(
            &format!("{case}: plumber activate -p {path}"),
            &run,
            &wheres,
        );
    }
}

/// `cluster leave` of `cluster` (context `context` of `user`), whose one peer Cluster's Secret
/// holds `text`.
async fn leave_with_peer_secret(
    user: &User,
    cluster: &Cluster,
    context: &str,
    case: &str,
    text: &str,
) {
    let name = format!("canary-{case}");
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), REGISTRY_NS);
    let mut secret = kubeconfig_secret(&name, REGISTRY_NS, "kubeconfig", text);
    secret.type_ = Some("k8s.cisco.com/cluster-registry-secret".into());
    secrets
        .patch(
            &name,
            &PatchParams::apply("canary").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
    cluster
        .apply_yaml(&format!(
            "apiVersion: clusterregistry.k8s.cisco.com/v1alpha1\nkind: Cluster\n\
             metadata: {{name: {name}}}\nspec:\n  clusterID: {name}-0000\n  authInfo:\n    \
             secretRef: {{name: {name}, namespace: {REGISTRY_NS}}}\n"
        ))
        .await
        .unwrap();
    let run = user.run(&["cluster", "leave", "--context", context]).await;
    refused(
        &format!("{case}: cluster leave, peer Secret {REGISTRY_NS}/{name}"),
        &run,
        &[
            &format!("{REGISTRY_NS}/{name}"),
            &format!("peer Cluster {name}"),
        ],
    );
    cluster
        .kubectl(&["delete", "clusters.clusterregistry.k8s.cisco.com", &name])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_credentials_in_secrets_the_cli_reads_appear_in_no_cli_output() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["first"]).await.unwrap();
    let first = bed.cluster("first");
    first
        .install_crds(&repo().join("manifests/crds"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let user = User {
        kubeconfig: crate::cli::user_kubeconfig(&bed, dir.path()),
        home: dir.path().into(),
    };
    user.run(&[
        "plumber",
        "activate",
        "-p",
        &user.kubeconfig.display().to_string(),
        "-a",
        "first",
    ])
    .await
    .ok();
    // `first` is in a group: its own Cluster (its kube-system UID) and the registry namespace.
    let id = Api::<Namespace>::all(first.client.clone())
        .get("kube-system")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    first
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {REGISTRY_NS}}}\n---\n\
             apiVersion: v1\nkind: Namespace\nmetadata: {{name: kubeconfig}}\n---\n\
             apiVersion: clusterregistry.k8s.cisco.com/v1alpha1\nkind: Cluster\n\
             metadata: {{name: first}}\nspec: {{clusterID: {id}}}\n"
        ))
        .await
        .unwrap();
    let plumber: Api<Secret> = Api::namespaced(first.client.clone(), "kubeconfig");
    for (case, text) in cases() {
        plumber
            .patch(
                "config",
                &PatchParams::apply("canary").force(),
                &Patch::Apply(&kubeconfig_secret("config", "kubeconfig", "config", &text)),
            )
            .await
            .unwrap();
        for args in [
            &["plumber", "view"][..],
            &["plumber", "view", "-o", "yaml"],
            &["plumber", "add", "-c", "first"],
            &["plumber", "remove", "-c", "x"],
        ] {
            let run = user.run(args).await;
            let out = format!("{}{}", run.stdout, run.stderr);
            let what = format!("{case}: {}", args.join(" "));
            assert_no_canary(&what, &out);
            for rust in ["ServiceError", "ApiError", "Status {"] {
                assert!(!out.contains(rust), "{what}: {rust:?} in {out}");
            }
            if case == "unclosed" {
                refused(&what, &run, &["kubeconfig/config"]);
                assert!(
                    run.stderr.contains("line"),
                    "{what}: the line is said: {run:?}"
                );
            }
        }
        leave_with_peer_secret(&user, first, "first", case, &text).await;
    }
}

/// `link` from `first` (service) to `second` (workload), the UpstreamClusterLink already Ready
/// (as an agent would have made it) and its Secret holding each case: the command refuses the
/// kubeconfig before writing anything on the workload cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_credentials_in_a_links_upstream_secret_appear_in_no_cli_output() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["first", "second"])
        .await
        .unwrap();
    let (first, second) = (bed.cluster("first"), bed.cluster("second"));
    for cluster in [first, second] {
        cluster
            .install_crds(&repo().join("manifests/crds"))
            .await
            .unwrap();
    }
    first
        .apply_yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: services-toolkit}\n")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let user = User {
        kubeconfig: crate::cli::user_kubeconfig(&bed, dir.path()),
        home: dir.path().into(),
    };
    let workload_uid = Api::<Namespace>::all(second.client.clone())
        .get("kube-system")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let links = Api::<DynamicObject>::namespaced_with(
        first.client.clone(),
        "services-toolkit",
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "projection.apiresources.multicluster.x-tanzu.vmware.com",
            "v1alpha1",
            "UpstreamClusterLink",
        )),
    );
    let secrets: Api<Secret> = Api::namespaced(first.client.clone(), "services-toolkit");
    for (case, text) in cases() {
        let name = format!("canary-{case}");
        first
            .apply_yaml(&format!(
                "apiVersion: projection.apiresources.multicluster.x-tanzu.vmware.com/v1alpha1\n\
                 kind: UpstreamClusterLink\nmetadata:\n  name: {name}\n  namespace: \
                 services-toolkit\n  labels: {{app.kubernetes.io/managed-by: kubectl-xcc}}\n  \
                 annotations: {{xcc.test/workload-cluster: {workload_uid}}}\n\
                 spec: {{downstream: {{name: second}}}}\n"
            ))
            .await
            .unwrap();
        let status = json!({"status": {"observedGeneration": 1, "conditions": [{
            "type": "Ready", "status": "True", "reason": "Ready", "message": "ready",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1,
        }]}});
        links
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        secrets
            .create(
                &PostParams::default(),
                &kubeconfig_secret(
                    &format!("{name}-kubeconfig"),
                    "services-toolkit",
                    "kubeconfig",
                    &text,
                ),
            )
            .await
            .unwrap();
        let run = user
            .run(&[
                "link",
                "--service-context",
                "first",
                "--workload-context",
                "second",
                "--name",
                &name,
            ])
            .await;
        let secret = format!("services-toolkit/{name}-kubeconfig");
        refused(&format!("{case}: link, Secret {secret}"), &run, &[&secret]);
        if case == "unclosed" {
            assert!(run.stderr.contains("line"), "the line is said: {run:?}");
        }
    }
}

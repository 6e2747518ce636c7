//! Wiring: the client, the forward address, the edit.

use kube::Client;

use crate::{
    args::{Args, ForwardTo},
    configmap::{self, Outcome},
    corefile, service,
};

async fn client(args: &Args) -> anyhow::Result<Client> {
    Ok(args.own.client().await?)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = client(&args).await?;
    run_with(client, &args).await
}

/// Everything after the client is built, so that tests can hand in a mocked one.
pub async fn run_with(client: Client, args: &Args) -> anyhow::Result<()> {
    let namespace = args.corefile_configmap_namespace.as_str();
    let name = args.corefile_configmap_name.as_str();
    let configmap = format!("{namespace}/{name}");

    if args.remove {
        let outcome = configmap::edit_corefile(client, namespace, name, corefile::remove).await?;
        match outcome {
            Outcome::Updated => tracing::info!(%configmap, "removed the forwarding block"),
            Outcome::Unchanged => tracing::info!(%configmap, "no forwarding block to remove"),
        }
        return Ok(());
    }

    let forward_to = match args.forward_to {
        Some(address) => address,
        None => ForwardTo::Ip(
            service::wait_for_cluster_ip(
                client.clone(),
                &args.dns_service_namespace,
                &args.dns_service_name,
                args.service_wait,
            )
            .await?,
        ),
    };
    let block = corefile::block(&args.zone, &forward_to.to_string());
    let outcome = configmap::edit_corefile(client, namespace, name, |text| {
        corefile::patch(text, &block)
    })
    .await?;
    let zones = args.zone.join(",");
    match outcome {
        Outcome::Updated => {
            tracing::info!(%configmap, %zones, %forward_to, "Corefile updated");
        }
        Outcome::Unchanged => {
            tracing::info!(%configmap, %zones, %forward_to, "Corefile already up to date");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::{Value, json};
    use xcc_kube::scenario::Scenario;

    const CONFIGMAP: &str = "/api/v1/namespaces/kube-system/configmaps/coredns";
    const SERVICE: &str = "/api/v1/namespaces/xcc-dns/services/dns-server";

    fn args(extra: &[&str]) -> Args {
        Args::try_parse_from(["xcc-coredns-patcher"].iter().chain(extra)).unwrap()
    }

    fn configmap(corefile: &str) -> (u16, Value) {
        let body = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": "kube-system", "resourceVersion": "3"},
            "data": {"Corefile": corefile},
        });
        (200, body)
    }

    /// The body sent back as the API server stores it.
    fn stored(body: &Value) -> (u16, Value) {
        (200, body.clone())
    }

    #[tokio::test]
    async fn forwards_every_zone_to_the_services_cluster_ip() {
        let (client, server) = Scenario::new()
            .expect("GET", SERVICE)
            .reply((
                200,
                json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "dns-server", "namespace": "xcc-dns"},
                    "spec": {"clusterIP": "10.96.0.53"},
                }),
            ))
            .expect("GET", CONFIGMAP)
            .reply(configmap(".:53 {\n}\n"))
            .expect("PUT", CONFIGMAP)
            .check(|body| {
                assert_eq!(
                    body["data"]["Corefile"],
                    ".:53 {\n}\n\
                     ### BEGIN CROSS CLUSTER CONNECTIVITY\n\
                     a.test {\n    forward . 10.96.0.53\n    reload\n}\n\
                     b.test {\n    forward . 10.96.0.53\n    reload\n}\n\
                     ### END CROSS CLUSTER CONNECTIVITY\n"
                )
            })
            .reply_with(stored)
            .run();
        run_with(client, &args(&["--zone", "a.test,b.test"]))
            .await
            .unwrap();
        server.done().await;
    }

    #[tokio::test]
    async fn forward_to_skips_the_service() {
        let (client, server) = Scenario::new()
            .expect("GET", CONFIGMAP)
            .reply(configmap(".:53 {\n}\n"))
            .expect("PUT", CONFIGMAP)
            .check(|body| {
                let corefile = body["data"]["Corefile"].as_str().unwrap();
                assert!(
                    corefile.contains("    forward . 192.0.2.1:5353\n"),
                    "{corefile}"
                );
            })
            .reply_with(stored)
            .run();
        run_with(client, &args(&["--forward-to", "192.0.2.1:5353"]))
            .await
            .unwrap();
        server.done().await;
    }

    #[tokio::test]
    async fn remove_needs_no_service() {
        let patched = format!(
            ".:53 {{\n}}\n{}\n",
            corefile::block(&["xcc.test".into()], "10.96.0.53")
        );
        let (client, server) = Scenario::new()
            .expect("GET", CONFIGMAP)
            .reply(configmap(&patched))
            .expect("PUT", CONFIGMAP)
            .check(|body| assert_eq!(body["data"]["Corefile"], ".:53 {\n}\n"))
            .reply_with(stored)
            .run();
        run_with(client, &args(&["--remove"])).await.unwrap();
        server.done().await;
    }
}

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
    use crate::testing::mock_client;
    use clap::Parser;
    use serde_json::json;

    const CONFIGMAP: &str = "/api/v1/namespaces/kube-system/configmaps/coredns";
    const SERVICE: &str = "/api/v1/namespaces/xcc-dns/services/dns-server";

    fn args(extra: &[&str]) -> Args {
        Args::try_parse_from(["xcc-coredns-patcher"].iter().chain(extra)).unwrap()
    }

    fn configmap(corefile: &str) -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": "kube-system", "resourceVersion": "3"},
            "data": {"Corefile": corefile},
        })
    }

    #[tokio::test]
    async fn forwards_every_zone_to_the_services_cluster_ip() {
        let (client, mut server) = mock_client();
        let task = tokio::spawn(async move {
            server.get(SERVICE).await.ok(json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "dns-server", "namespace": "xcc-dns"},
                "spec": {"clusterIP": "10.96.0.53"},
            }));
            server.get(CONFIGMAP).await.ok(configmap(".:53 {\n}\n"));
            let put = server.put(CONFIGMAP).await;
            assert_eq!(
                put.body["data"]["Corefile"],
                ".:53 {\n}\n\
                 ### BEGIN CROSS CLUSTER CONNECTIVITY\n\
                 a.test {\n    forward . 10.96.0.53\n    reload\n}\n\
                 b.test {\n    forward . 10.96.0.53\n    reload\n}\n\
                 ### END CROSS CLUSTER CONNECTIVITY\n"
            );
            let body = put.body.clone();
            put.ok(body);
        });
        run_with(client, &args(&["--zone", "a.test,b.test"]))
            .await
            .unwrap();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn forward_to_skips_the_service() {
        let (client, mut server) = mock_client();
        let task = tokio::spawn(async move {
            server.get(CONFIGMAP).await.ok(configmap(".:53 {\n}\n"));
            let put = server.put(CONFIGMAP).await;
            let corefile = put.body["data"]["Corefile"].as_str().unwrap().to_string();
            assert!(
                corefile.contains("    forward . 192.0.2.1:5353\n"),
                "{corefile}"
            );
            let body = put.body.clone();
            put.ok(body);
        });
        run_with(client, &args(&["--forward-to", "192.0.2.1:5353"]))
            .await
            .unwrap();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn remove_needs_no_service() {
        let (client, mut server) = mock_client();
        let task = tokio::spawn(async move {
            let patched = format!(
                ".:53 {{\n}}\n{}\n",
                corefile::block(&["xcc.test".into()], "10.96.0.53")
            );
            server.get(CONFIGMAP).await.ok(configmap(&patched));
            let put = server.put(CONFIGMAP).await;
            assert_eq!(put.body["data"]["Corefile"], ".:53 {\n}\n");
            let body = put.body.clone();
            put.ok(body);
        });
        run_with(client, &args(&["--remove"])).await.unwrap();
        task.await.unwrap();
    }
}

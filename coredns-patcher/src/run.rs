//! Wiring: the client, the forward address, the edit, then the wait for CoreDNS.

use std::cell::Cell;

use kube::Client;

use crate::{
    args::{Args, ForwardTo},
    configmap::{self, Outcome},
    corefile, replicas,
    report::kube_cause,
    restart, service,
    verify::{self, Pace, Target},
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
    // Whether the Corefile as last read loads `reload` (outside our block).
    let reload = Cell::new(true);
    let outcome = configmap::edit_corefile(client.clone(), namespace, name, |text| {
        reload.set(corefile::has_reload(text)?);
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
    let target = Target {
        zones: args.zone.clone(),
        namespace: namespace.to_string(),
        service: args.coredns_service.clone(),
        configmap: name.to_string(),
        deployment: args.coredns_deployment.clone(),
        reload: reload.get(),
    };
    if !target.reload {
        tracing::warn!(
            %configmap,
            hint = %verify::no_reload(&target),
            "the Corefile has no `reload` plugin: CoreDNS does not read the change until it restarts"
        );
    }
    if args.coredns_wait.is_zero() {
        tracing::info!("not waiting for CoreDNS to forward the zone (--coredns-wait 0s)");
        return Ok(());
    }
    wait_for_coredns(client, args, &target).await
}

/// Restarts CoreDNS if asked and needed, then waits until every replica forwards the zones.
async fn wait_for_coredns(client: Client, args: &Args, target: &Target) -> anyhow::Result<()> {
    let list = || {
        let client = client.clone();
        async move {
            replicas::list(client, &target.namespace, &target.service)
                .await
                .map_err(|e| kube_cause(&e))
        }
    };
    let mut restarted = false;
    if !target.reload && args.restart_coredns {
        // A replica that already forwards (restarted since an earlier run) needs no restart.
        let current = list().await.unwrap_or_default();
        let verdicts = verify::ask_all(&current, &target.zones, verify::QUERY_TIMEOUT).await;
        if verdicts.iter().any(Option::is_some) {
            restart::restart(client.clone(), &target.namespace, &target.deployment).await?;
            tracing::info!(
                deployment = %format!("{}/{}", target.namespace, target.deployment),
                "restarted CoreDNS (--restart-coredns): its Corefile has no `reload` plugin"
            );
            restarted = true;
        }
    }
    let pace = Pace {
        timeout: args.coredns_wait,
        interval: verify::INTERVAL,
        query_timeout: verify::QUERY_TIMEOUT,
    };
    tracing::info!(
        zones = %target.zones.join(","),
        service = %format!("{}/{}", target.namespace, target.service),
        timeout = %humantime::format_duration(pace.timeout),
        "waiting until every CoreDNS replica forwards the zone to xcc-agent"
    );
    let replicas = verify::until_forwarded(list, target, pace).await?;
    let names: Vec<&str> = replicas.iter().map(|r| r.name.as_str()).collect();
    let replicas = names.join(",");
    if target.reload || restarted {
        tracing::info!(%replicas, "every CoreDNS replica forwards the zone to xcc-agent");
    } else {
        tracing::warn!(
            %replicas,
            hint = %verify::no_reload(target),
            "every CoreDNS replica forwards the zone to xcc-agent, but the Corefile has no \
             `reload` plugin: a later change of the block needs a restart of CoreDNS"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::tests::coredns;
    use clap::Parser;
    use serde_json::{Value, json};
    use std::{
        net::SocketAddr,
        sync::{
            Arc,
            atomic::{AtomicBool, AtomicUsize, Ordering},
        },
    };
    use xcc_kube::scenario::Scenario;

    const CONFIGMAP: &str = "/api/v1/namespaces/kube-system/configmaps/coredns";
    const SERVICE: &str = "/api/v1/namespaces/xcc-dns/services/dns-server";
    const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices";
    const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/kube-system/deployments/coredns";
    /// kubeadm's Corefile, in short.
    const WITH_RELOAD: &str = ".:53 {\n    errors\n    reload\n}\n";

    /// The EndpointSlices of kube-dns: one per replica (each fake replica has its own port).
    fn slices(replicas: &[(&str, SocketAddr)]) -> (u16, Value) {
        let items: Vec<Value> = replicas
            .iter()
            .map(|(pod, address)| {
                json!({
                    "metadata": {"name": format!("kube-dns-{pod}"), "namespace": "kube-system",
                                 "labels": {"kubernetes.io/service-name": "kube-dns"}},
                    "addressType": "IPv4",
                    "ports": [{"name": "dns", "port": address.port(), "protocol": "UDP"}],
                    "endpoints": [{"addresses": [address.ip().to_string()],
                                   "conditions": {"ready": true},
                                   "targetRef": {"kind": "Pod", "name": pod}}],
                })
            })
            .collect();
        let body = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
            "metadata": {"resourceVersion": "9"}, "items": items,
        });
        (200, body)
    }

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
        run_with(
            client,
            &args(&["--zone", "a.test,b.test", "--coredns-wait=0s"]),
        )
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
        run_with(
            client,
            &args(&["--forward-to", "192.0.2.1:5353", "--coredns-wait=0s"]),
        )
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

    #[tokio::test]
    async fn completes_only_once_every_replica_answers_from_the_agent() {
        let (a_on, b_on) = (
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicBool::new(false)),
        );
        let replicas = [
            ("coredns-a", coredns(a_on).await),
            ("coredns-b", coredns(b_on.clone()).await),
        ];
        // Replica b loads the forward once its EndpointSlices have been read 3 times.
        let lists = Arc::new(AtomicUsize::new(0));
        let counted = lists.clone();
        let (client, server) = Scenario::new()
            .expect("GET", CONFIGMAP)
            .reply(configmap(WITH_RELOAD))
            .expect("PUT", CONFIGMAP)
            .reply_with(stored)
            .always("GET", SLICES)
            .reply_to(move |request| {
                assert_eq!(
                    request.param("labelSelector"),
                    Some("kubernetes.io%2Fservice-name%3Dkube-dns")
                );
                if counted.fetch_add(1, Ordering::SeqCst) + 1 == 3 {
                    b_on.store(true, Ordering::SeqCst);
                }
                slices(&replicas)
            })
            .run();
        run_with(client, &args(&["--forward-to", "192.0.2.1"]))
            .await
            .unwrap();
        server.done().await;
        assert_eq!(
            lists.load(Ordering::SeqCst),
            3,
            "done in the round in which the last replica switched"
        );
    }

    #[tokio::test]
    async fn a_replica_that_never_switches_fails_the_run_by_name() {
        let stuck = coredns(Arc::new(AtomicBool::new(false))).await;
        let (client, server) = Scenario::new()
            .expect("GET", CONFIGMAP)
            .reply(configmap(WITH_RELOAD))
            .expect("PUT", CONFIGMAP)
            .reply_with(stored)
            .always("GET", SLICES)
            .reply(slices(&[("coredns-stuck", stuck)]))
            .run();
        let err = run_with(
            client,
            &args(&["--forward-to", "192.0.2.1", "--coredns-wait=1500ms"]),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("1 of 1 CoreDNS replicas do not forward zone xcc.test"),
            "{err}"
        );
        assert!(
            err.contains(&format!("coredns-stuck ({stuck}) answers SERVFAIL")),
            "{err}"
        );
        server.done().await;
    }

    #[tokio::test]
    async fn without_reload_coredns_is_restarted_only_when_asked() {
        // Asked: the replica that does not forward is replaced by one that does.
        let old = coredns(Arc::new(AtomicBool::new(false))).await;
        let new = coredns(Arc::new(AtomicBool::new(true))).await;
        let restarted = Arc::new(AtomicBool::new(false));
        let seen = restarted.clone();
        let (client, server) = Scenario::new()
            .expect("GET", CONFIGMAP)
            .reply(configmap(".:53 {\n    errors\n}\n"))
            .expect("PUT", CONFIGMAP)
            .reply_with(stored)
            .expect("PATCH", DEPLOYMENT)
            .check(move |body| {
                let at = &body["spec"]["template"]["metadata"]["annotations"]
                    ["kubectl.kubernetes.io/restartedAt"];
                assert!(at.as_str().is_some_and(|t| t.ends_with('Z')), "{body}");
                seen.store(true, Ordering::SeqCst);
            })
            .reply_with(stored)
            .always("GET", SLICES)
            .reply_to(move |_| {
                if restarted.load(Ordering::SeqCst) {
                    slices(&[("coredns-new", new)])
                } else {
                    slices(&[("coredns-old", old)])
                }
            })
            .run();
        run_with(
            client,
            &args(&["--forward-to", "192.0.2.1", "--restart-coredns"]),
        )
        .await
        .unwrap();
        let requests = server.done().await;
        let patch = requests
            .iter()
            .find(|r| r.line().starts_with("PATCH"))
            .unwrap();
        assert_eq!(
            patch.header("content-type"),
            Some("application/strategic-merge-patch+json")
        );

        // Not asked: no PATCH (the scenario expects none), and the error says what to do.
        let old = coredns(Arc::new(AtomicBool::new(false))).await;
        let (client, server) = Scenario::new()
            .expect("GET", CONFIGMAP)
            .reply(configmap(".:53 {\n    errors\n}\n"))
            .expect("PUT", CONFIGMAP)
            .reply_with(stored)
            .always("GET", SLICES)
            .reply(slices(&[("coredns-old", old)]))
            .run();
        let err = run_with(
            client,
            &args(&["--forward-to", "192.0.2.1", "--coredns-wait=1s"]),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("has no `reload` plugin"), "{err}");
        assert!(err.contains("--restart-coredns"), "{err}");
        server.done().await;
    }
}

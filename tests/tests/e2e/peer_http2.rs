//! A peer's requests share HTTP/2 connections: the client built from a kubeconfig Secret holds
//! hundreds of watches on a real API server over a handful of connections, and every watch
//! delivers its events.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::{ByteString, api::core::v1::ConfigMap, api::core::v1::Secret};
use kube::{
    Api,
    api::{ObjectMeta, PostParams, WatchEvent, WatchParams},
};
use xcc_e2e::{Testbed, require_testbed};

use crate::measure::tcp_connections;

const WATCHES: usize = 250;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_client_multiplexes_its_watches_over_http2() {
    let Some(binaries) = require_testbed() else {
        return;
    };
    let bed = Testbed::start_named(&binaries, &["peer"]).await.unwrap();
    let peer = &bed.clusters[0];
    let port: u16 = peer
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the API server's port");
    // The admin kubeconfig: a token, the test bed's CA, as a peer's Secret carries them.
    let yaml = std::fs::read_to_string(&peer.kubeconfig).unwrap();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("peer-kubeconfig".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        data: Some([("kubeconfig".to_string(), ByteString(yaml.into_bytes()))].into()),
        ..Default::default()
    };
    let client = xcc_kube::trust::peer_client(&secret, "kubeconfig", Default::default())
        .await
        .unwrap()
        .client;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = crate::measure::wait_list(&configmaps).await;
    // This process has other clients of the API server (the test's own, over HTTP/1.1): the
    // peer client's connections are the one its list opened plus those opened from here on.
    let others = tcp_connections(std::process::id(), port).saturating_sub(1);

    // Every watch is open once its response headers arrived.
    let mut watches = Vec::new();
    for _ in 0..WATCHES {
        let params = WatchParams::default().timeout(290);
        watches.push(configmaps.watch(&params, &rv).await.unwrap().boxed());
    }
    let connections = tcp_connections(std::process::id(), port).saturating_sub(others);
    let bar = WATCHES.div_ceil(xcc_kube::h2::STREAMS_PER_CONNECTION) + 2;
    eprintln!(
        "{WATCHES} open watches of one peer client: {connections} TCP connections (bar ≤ {bar})"
    );
    assert!(
        connections <= bar,
        "{WATCHES} watches took {connections} connections to the peer (bar ≤ {bar})"
    );

    // Each watch delivers the event.
    let created = configmaps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("seen-by-all".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let name = created.metadata.name.unwrap();
    let seen = futures::future::join_all(watches.iter_mut().map(|w| async {
        tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(event) = w.next().await {
                if let Ok(WatchEvent::Added(cm)) = event
                    && cm.metadata.name.as_deref() == Some(name.as_str())
                {
                    return true;
                }
            }
            false
        })
        .await
        .unwrap_or(false)
    }))
    .await;
    let delivered = seen.iter().filter(|s| **s).count();
    assert_eq!(delivered, WATCHES, "watches that saw the new ConfigMap");

    // Closed watches give their streams back: requests after them use the same connections.
    drop(watches);
    for _ in 0..20 {
        configmaps.get("seen-by-all").await.unwrap();
    }
    let after = tcp_connections(std::process::id(), port).saturating_sub(others);
    assert!(after <= bar, "{after} connections after the watches closed");
}

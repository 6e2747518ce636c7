//! The LoadBalancer controller of a node cluster, as cloud-provider-kind or MetalLB would be.
//!
//! A task of the test watches the cluster's Services: each `type: LoadBalancer` Service without a
//! `loadBalancerClass` gets the lowest free address of the cluster's pool (`.1` to `.254`) in
//! `status.loadBalancer.ingress`; the address is free again when the Service is deleted or stops
//! being a LoadBalancer. kube-proxy on the node answers for the address; the router sends the pool
//! to the node.

use std::{collections::BTreeMap, net::Ipv4Addr};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
    runtime::watcher,
};

use crate::node::NodePlan;

/// Runs until aborted (when the test bed drops).
pub(crate) async fn run(client: Client, plan: NodePlan) {
    let services: Api<Service> = Api::all(client.clone());
    // Service uid → address.
    let mut assigned: BTreeMap<String, Ipv4Addr> = BTreeMap::new();
    let mut stream = watcher(services, watcher::Config::default()).boxed();
    let mut init: Vec<Service> = Vec::new();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
        };
        match event {
            watcher::Event::Init => init.clear(),
            watcher::Event::InitApply(svc) => init.push(svc),
            watcher::Event::InitDone => {
                assigned.clear();
                for svc in std::mem::take(&mut init) {
                    if let Some(ip) = current(&svc, &plan) {
                        assigned.insert(svc.uid().unwrap_or_default(), ip);
                    }
                }
                // Now that the taken addresses are known, give addresses to what lacks one.
                let lacking: Vec<Service> = Api::<Service>::all(client.clone())
                    .list(&Default::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default();
                for svc in lacking {
                    reconcile(&client, &plan, &mut assigned, &svc).await;
                }
            }
            watcher::Event::Apply(svc) => reconcile(&client, &plan, &mut assigned, &svc).await,
            watcher::Event::Delete(svc) => {
                assigned.remove(&svc.uid().unwrap_or_default());
            }
        }
    }
}

fn wants_address(svc: &Service) -> bool {
    svc.spec.as_ref().is_some_and(|s| {
        s.type_.as_deref() == Some("LoadBalancer") && s.load_balancer_class.is_none()
    })
}

/// The pool address in the Service's status, if any.
fn current(svc: &Service, plan: &NodePlan) -> Option<Ipv4Addr> {
    svc.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .iter()
        .filter_map(|i| i.ip.as_deref()?.parse::<Ipv4Addr>().ok())
        .find(|ip| plan.in_lb_pool(*ip))
}

async fn reconcile(
    client: &Client,
    plan: &NodePlan,
    assigned: &mut BTreeMap<String, Ipv4Addr>,
    svc: &Service,
) {
    let uid = svc.uid().unwrap_or_default();
    if !wants_address(svc) {
        assigned.remove(&uid);
        return;
    }
    if let Some(ip) = current(svc, plan) {
        assigned.insert(uid, ip);
        return;
    }
    let ip = match assigned.get(&uid) {
        Some(ip) => *ip,
        None => {
            let Some(ip) = (1..=254)
                .map(|n| plan.lb_address(n))
                .find(|ip| !assigned.values().any(|a| a == ip))
            else {
                return;
            };
            assigned.insert(uid, ip);
            ip
        }
    };
    let api: Api<Service> = Api::namespaced(client.clone(), &svc.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "status": {"loadBalancer": {"ingress": [{"ip": ip.to_string(), "ipMode": "VIP"}]}}
    });
    // A failed patch is retried at the next event of the Service (the watch's resync after an
    // error, or any change).
    let _ = api
        .patch_status(
            &svc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await;
}

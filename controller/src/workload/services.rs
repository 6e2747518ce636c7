//! One watch per gateway Service of a workload cluster (and of its EndpointSlices), shared by
//! every GatewayDNS that names it, which wakes them the moment the Service changes.

use std::{
    collections::{BTreeSet, HashSet},
    sync::{Arc, Mutex},
};

use k8s_openapi::api::{
    core::v1::{Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, ResourceExt,
    api::ListParams,
    runtime::{
        reflector::{ObjectRef, Store},
        watcher,
    },
};

use xcc_kube::bounded;

use super::{
    CALL_TIMEOUT, ClientError, Workloads,
    watched::{WatchHealth, Watched, watch},
};
use crate::{
    desired::{Observation, PodPorts},
    gatewaydns::{GatewayDNS, GatewayDNSSpec, ResolutionType},
};

/// The gateway Service of one cluster, its EndpointSlices (whether it has ready endpoints),
/// and who wants to hear of their changes.
pub(super) struct ServiceWatch {
    service: Watched<Service>,
    endpoints: Watched<EndpointSlice>,
    pub(super) subscribers: Arc<Mutex<HashSet<ObjectRef<GatewayDNS>>>>,
    /// (`hostPort`) The container ports of the last gateway pod read, by its uid.
    pod_ports: Arc<Mutex<Option<(String, PodPorts)>>>,
}

/// Ready endpoints in `slices`; an endpoint whose `ready` is unset counts as ready, as the API
/// asks consumers to read it.
pub fn ready_endpoints<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>) -> u32 {
    let ready = slices
        .into_iter()
        .flat_map(|slice| slice.endpoints.iter())
        .filter(|endpoint| {
            endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true)
        })
        .count();
    u32::try_from(ready).unwrap_or(u32::MAX)
}

impl Workloads {
    /// What the gateway of `spec` (its Service, and for `nodePort` and `hostPort` the nodes)
    /// looks like on `cluster` now, for `gateway`, which is subscribed to their changes from
    /// here on. `client` is the cluster's client as this reconcile found it (one kubeconfig
    /// read per cluster and reconcile).
    pub async fn observe(
        &self,
        namespace: &str,
        cluster: &str,
        spec: &GatewayDNSSpec,
        gateway: &ObjectRef<GatewayDNS>,
        client: Result<Client, ClientError>,
    ) -> Observation {
        let client = match client {
            Ok(client) => client,
            Err(error) => return error.into(),
        };
        let service = &spec.service;
        let Some((svc_ns, svc_name)) = service.split_once('/') else {
            return Observation::ServiceNotFound;
        };
        let (store, health, slices) = {
            let Some(mut entry) = self
                .clusters
                .get_mut(&(namespace.to_string(), cluster.to_string()))
            else {
                return Observation::Unreachable("client was replaced; retrying".into());
            };
            let watch = entry
                .services
                .entry(service.to_string())
                .or_insert_with(|| self.start_watch(client.clone(), svc_ns, svc_name, cluster));
            watch
                .subscribers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(gateway.clone());
            let slices = watch
                .endpoints
                .health
                .healthy()
                .then(|| watch.endpoints.store.clone());
            (
                watch.service.store.clone(),
                watch.service.health.clone(),
                slices,
            )
        };
        let found = match self
            .read_service(&store, &health, client.clone(), svc_ns, svc_name)
            .await
        {
            Ok(found) => found,
            Err(unreachable) => return unreachable,
        };
        if !spec.needs_nodes() {
            return crate::desired::observe(found.as_deref());
        }
        let nodes = match self
            .nodes(namespace, cluster, gateway, client.clone())
            .await
        {
            Ok(nodes) => nodes,
            Err(why) => return Observation::Unreachable(why),
        };
        let kind = spec.node_address_type.unwrap_or_default();
        let seen = match spec.resolution_type {
            ResolutionType::LoadBalancer => crate::desired::observe(found.as_deref()),
            ResolutionType::NodePort => {
                crate::desired::observe_node_port(found.as_deref(), &nodes, kind)
            }
            ResolutionType::HostPort => {
                let at = (namespace, cluster, service.as_str());
                let seen = self.host_ports(at, client, slices).await;
                match seen {
                    Ok((slices, pod)) => {
                        let slices: Vec<&EndpointSlice> = slices.iter().map(|s| &**s).collect();
                        let (found, pod) = (found.as_deref(), pod.as_ref());
                        crate::desired::observe_host_port(found, &slices, &nodes, kind, pod)
                    }
                    Err(why) => Observation::Unreachable(why),
                }
            }
        };
        if spec.node_names == Some(true) {
            seen.with_nodes(crate::desired::named_nodes(&nodes, kind))
        } else {
            seen
        }
    }

    /// The EndpointSlices of the gateway Service `service` (`ns/name`) on `cluster` of
    /// `namespace` (from `store`, once its watch has listed), and the container ports of one of
    /// its pods ([`Workloads::pod_ports`]).
    async fn host_ports(
        &self,
        (namespace, cluster, service): (&str, &str, &str),
        client: Client,
        store: Option<Store<EndpointSlice>>,
    ) -> Result<(Vec<Arc<EndpointSlice>>, Option<PodPorts>), String> {
        let (svc_ns, svc_name) = service.split_once('/').unwrap_or_default();
        let slices = match store {
            Some(store) => store.state(),
            None => self.list_slices(client.clone(), svc_ns, svc_name).await?,
        };
        let refs: Vec<&EndpointSlice> = slices.iter().map(|s| &**s).collect();
        let pod = self
            .pod_ports(namespace, cluster, service, client, &refs)
            .await?;
        Ok((slices, pod))
    }

    /// The container ports of one pod behind the ready endpoints of `slices` (the pod read last
    /// while it is still one of them, else the first by namespace and name): `None` when no
    /// ready endpoint names a pod, or that pod is gone.
    async fn pod_ports(
        &self,
        namespace: &str,
        cluster: &str,
        service: &str,
        client: Client,
        slices: &[&EndpointSlice],
    ) -> Result<Option<PodPorts>, String> {
        let mut pods: Vec<(&str, &str, &str)> = slices
            .iter()
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
            .filter_map(|e| e.target_ref.as_ref())
            .filter(|r| r.kind.as_deref() == Some("Pod"))
            .filter_map(|r| {
                Some((
                    r.namespace.as_deref()?,
                    r.name.as_deref()?,
                    r.uid.as_deref().unwrap_or_default(),
                ))
            })
            .collect();
        pods.sort_unstable();
        let Some(&(pod_ns, pod_name, _)) = pods.first() else {
            return Ok(None);
        };
        let cache = self
            .clusters
            .get(&(namespace.to_string(), cluster.to_string()))
            .and_then(|entry| Some(entry.services.get(service)?.pod_ports.clone()));
        if let Some(cache) = &cache
            && let Some((uid, ports)) = &*cache.lock().unwrap_or_else(|e| e.into_inner())
            && pods.iter().any(|(_, _, u)| u == uid)
        {
            return Ok(Some(ports.clone()));
        }
        let api: Api<Pod> = Api::namespaced(client, pod_ns);
        let pod = match tokio::time::timeout(CALL_TIMEOUT, api.get_opt(pod_name)).await {
            Ok(Ok(Some(pod))) => pod,
            Ok(Ok(None)) => return Ok(None),
            Ok(Err(e)) => {
                return Err(format!(
                    "cannot read pod {pod_ns}/{pod_name} for its host ports: {}",
                    bounded(&e)
                ));
            }
            Err(_) => return Err(format!("timed out reading pod {pod_ns}/{pod_name}")),
        };
        let ports: PodPorts = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| c.ports.iter().flatten())
            .map(|p| {
                (
                    p.container_port,
                    p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    p.host_port,
                )
            })
            .collect();
        if let Some(cache) = cache {
            *cache.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((pod.metadata.uid.unwrap_or_default(), ports.clone()));
        }
        Ok(Some(ports))
    }

    /// The Service from its watch's store, or read directly before the watch has listed.
    async fn read_service(
        &self,
        store: &Store<Service>,
        health: &WatchHealth,
        client: Client,
        svc_ns: &str,
        svc_name: &str,
    ) -> Result<Option<Arc<Service>>, Observation> {
        if health.healthy() {
            return Ok(store.state().into_iter().find(|s| s.name_any() == svc_name));
        }
        if let Some(error) = health.error() {
            return Err(Observation::Unreachable(error));
        }
        let service = format!("{svc_ns}/{svc_name}");
        let api: Api<Service> = Api::namespaced(client, svc_ns);
        match tokio::time::timeout(CALL_TIMEOUT, api.get_opt(svc_name)).await {
            Ok(Ok(found)) => Ok(found.map(Arc::new)),
            Ok(Err(e)) => Err(Observation::Unreachable(format!(
                "cannot read Service {service}: {}",
                bounded(&e)
            ))),
            Err(_) => Err(Observation::Unreachable(format!(
                "timed out reading Service {service}"
            ))),
        }
    }

    /// The EndpointSlices of Service `svc_ns/svc_name`, read directly (before their watch
    /// has listed).
    async fn list_slices(
        &self,
        client: Client,
        svc_ns: &str,
        svc_name: &str,
    ) -> Result<Vec<Arc<EndpointSlice>>, String> {
        let api: Api<EndpointSlice> = Api::namespaced(client, svc_ns);
        let params =
            ListParams::default().labels(&format!("kubernetes.io/service-name={svc_name}"));
        match tokio::time::timeout(CALL_TIMEOUT, api.list(&params)).await {
            Ok(Ok(list)) => Ok(list.items.into_iter().map(Arc::new).collect()),
            Ok(Err(e)) => Err(format!(
                "cannot list the EndpointSlices of Service {svc_ns}/{svc_name}: {}",
                bounded(&e)
            )),
            Err(_) => Err(format!(
                "timed out listing the EndpointSlices of Service {svc_ns}/{svc_name}"
            )),
        }
    }

    fn start_watch(
        &self,
        client: Client,
        svc_ns: &str,
        svc_name: &str,
        cluster: &str,
    ) -> ServiceWatch {
        let subscribers: Arc<Mutex<HashSet<ObjectRef<GatewayDNS>>>> = Arc::default();
        let (task_subscribers, trigger) = (subscribers.clone(), self.trigger.clone());
        let wake = Arc::new(move || {
            let subscribers = task_subscribers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            for gateway in subscribers {
                let _ = trigger.send(gateway);
            }
        });
        let wake_too = wake.clone();
        let service = watch(
            Api::namespaced(client.clone(), svc_ns),
            watcher::Config::default().fields(&format!("metadata.name={svc_name}")),
            format!("Service {svc_ns}/{svc_name} on cluster {cluster}"),
            move |_| wake(),
        );
        let endpoints = watch(
            Api::namespaced(client, svc_ns),
            watcher::Config::default().labels(&format!("kubernetes.io/service-name={svc_name}")),
            format!("EndpointSlices of Service {svc_ns}/{svc_name} on cluster {cluster}"),
            move |_| wake_too(),
        );
        ServiceWatch {
            service,
            endpoints,
            subscribers,
            pod_ports: Arc::default(),
        }
    }

    /// Ready endpoints behind `service` on `cluster`, once its EndpointSlice watch has listed.
    pub fn ready_endpoints(&self, namespace: &str, cluster: &str, service: &str) -> Option<u32> {
        let entry = self
            .clusters
            .get(&(namespace.to_string(), cluster.to_string()))?;
        let watch = entry.services.get(service)?;
        watch
            .endpoints
            .health
            .healthy()
            .then(|| ready_endpoints(watch.endpoints.store.state().iter().map(|s| &**s)))
    }

    /// Forgets `gateway`'s interest in every Service except those in `keep` (cluster, service),
    /// and stops watches nobody needs any more.
    pub fn retain(
        &self,
        namespace: &str,
        gateway: &ObjectRef<GatewayDNS>,
        keep: &BTreeSet<(String, String)>,
    ) {
        for mut entry in self.clusters.iter_mut() {
            let ((ns, cluster), entry) = entry.pair_mut();
            if ns != namespace {
                continue;
            }
            entry.services.retain(|service, watch| {
                let mut subscribers = watch.subscribers.lock().unwrap_or_else(|e| e.into_inner());
                if !keep.contains(&(cluster.clone(), service.clone())) {
                    subscribers.remove(gateway);
                }
                !subscribers.is_empty()
            });
        }
    }
}

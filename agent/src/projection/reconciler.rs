//! API projection as the agent runs it: its switch and the aggregated API server's settings, its
//! CRDs, its start.

use std::net::{IpAddr, SocketAddr};

use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tokio_util::sync::CancellationToken;
use xcc_sync::{Core, kit::Reconciler};

use crate::reconcilers::Env;

// No doc comment: clap would show it in `--help`.
#[derive(Clone, Debug, clap::Args)]
pub struct ApiProjection {
    /// API projection, service-cluster side (projection.apiresources.multicluster.x-tanzu.vmware.com):
    /// an UpstreamClusterLink gets a ServiceAccount and a kubeconfig Secret `<link>-kubeconfig`
    /// for it; an APIExportRoleBinding binds a ClusterRole to that ServiceAccount. Needs the RBAC
    /// of manifests/agent/projection.yaml. Off in standalone mode.
    #[arg(
        long = "api-projection",
        env = "XCC_API_PROJECTION",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub api_projection: bool,

    /// API server URL written into the kubeconfig Secrets of UpstreamClusterLinks (the address
    /// workload clusters reach this cluster at). Default: the URL this agent's own client uses.
    #[arg(long, env = "XCC_PROJECTION_ADVERTISE_URL", value_name = "URL")]
    pub projection_advertise_url: Option<String>,

    /// API projection, workload-cluster side: where the aggregated API server that serves the
    /// imported API groups listens (HTTPS; on the replica running the reconcilers). Each
    /// DownstreamClusterLink's Service leads here.
    #[arg(
        long,
        env = "XCC_PROJECTION_PROXY_LISTEN",
        default_value = "0.0.0.0:9443",
        value_name = "IP:PORT",
        value_parser = xcc_kube::flags::listen
    )]
    pub projection_proxy_listen: SocketAddr,

    /// Port of each DownstreamClusterLink's Service `<link>-proxy` (the port its APIServices
    /// name, `status.proxy.serviceReference.port`).
    #[arg(
        long,
        env = "XCC_PROJECTION_PROXY_SERVICE_PORT",
        default_value_t = 443,
        value_name = "PORT"
    )]
    pub projection_proxy_service_port: u16,

    /// ServiceAccount (in `--namespace`) the aggregated API server acts as on this cluster, with
    /// tokens the agent requests for it: the reference's RBAC for the proxy (SubjectAccessReviews,
    /// the front proxy's settings, namespaces) is bound to it, not to the agent. When it cannot be
    /// used, the server acts as the agent and DownstreamClusterLinks say why.
    #[arg(
        long,
        env = "XCC_PROJECTION_PROXY_SERVICE_ACCOUNT",
        default_value = "xcc-projection-proxy",
        value_name = "NAME"
    )]
    pub projection_proxy_service_account: String,

    /// Address of this agent written into the EndpointSlice of each `<link>-proxy` Service (the
    /// pod IP, from the downward API). Without it the Service gets no EndpointSlice from xcc.
    #[arg(long, env = "XCC_PROJECTION_PROXY_ADDRESS", value_name = "IP")]
    pub projection_proxy_address: Option<IpAddr>,
}

impl Reconciler for ApiProjection {
    type Env = Env;

    fn name(&self) -> &'static str {
        "api-projection"
    }

    fn title(&self) -> &'static str {
        "API projection"
    }

    fn enabled(&self) -> bool {
        self.api_projection
    }

    fn crds(&self) -> Vec<CustomResourceDefinition> {
        super::crds()
    }

    fn start(&self, core: Core, env: &Env, stop: CancellationToken) -> BoxFuture<'static, ()> {
        let settings = super::Settings {
            // For UpstreamClusterLinks' kubeconfigs: the flag, or the agent's own client's URL.
            advertise_url: self
                .projection_advertise_url
                .clone()
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| env.own_url.clone()),
            proxy_listen: self.projection_proxy_listen,
            endpoint: super::downstream::Endpoint {
                service_port: i32::from(self.projection_proxy_service_port),
                address: self.projection_proxy_address,
            },
            kubeconfig: env.kubeconfig.clone(),
            proxy_account: (
                env.namespace.clone(),
                self.projection_proxy_service_account.clone(),
            ),
        };
        Box::pin(super::run(core, settings, stop))
    }
}

//! plumber as the agent runs it: its switch and namespace, its CRDs, its start.

use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tokio_util::sync::CancellationToken;
use xcc_sync::{Core, kit::Reconciler};

use crate::reconcilers::Env;

// No doc comment: clap would show it in `--help`.
#[derive(Clone, Debug, clap::Args)]
pub struct Plumber {
    /// plumber (plumber.jnytnai0613.github.io): ClusterDetectors from the kubeconfig Secret
    /// `kubeconfig` (key `config`) in `--plumber-namespace`, and Replicators that push an app's
    /// namespace, ConfigMap, Deployment, Service, Ingress (and any `resources[]`) to this cluster
    /// and to their target clusters. Needs the RBAC of manifests/agent/plumber.yaml. Off in
    /// standalone mode.
    #[arg(
        long = "plumber",
        env = "XCC_PLUMBER",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub plumber: bool,

    /// Namespace of plumber's kubeconfig Secret and of the ClusterDetectors.
    #[arg(long, env = "XCC_PLUMBER_NAMESPACE", default_value = "plumber-system")]
    pub plumber_namespace: String,
}

impl Reconciler for Plumber {
    type Env = Env;

    fn name(&self) -> &'static str {
        "plumber"
    }

    fn title(&self) -> &'static str {
        "plumber"
    }

    fn enabled(&self) -> bool {
        self.plumber
    }

    fn crds(&self) -> Vec<CustomResourceDefinition> {
        super::crds()
    }

    fn start(&self, core: Core, _: &Env, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(super::run(core, self.plumber_namespace.clone(), stop))
    }
}

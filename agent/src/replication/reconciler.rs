//! Secret replication as the agent runs it: its switch, its CRDs, its start.

use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tokio_util::sync::CancellationToken;
use xcc_sync::{Core, kit::Reconciler};

use crate::reconcilers::Env;

// No doc comment: clap would show it in `--help`.
#[derive(Clone, Debug, clap::Args)]
pub struct SecretReplication {
    /// Replicate Secrets between clusters: SecretExport, SecretImport, the
    /// ClusterResource{Import,Export}Monitors and their bindings
    /// (replication.apiresources.multicluster.x-tanzu.vmware.com). Off in standalone mode.
    #[arg(
        long = "secret-replication",
        env = "XCC_SECRET_REPLICATION",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub secret_replication: bool,
}

impl Reconciler for SecretReplication {
    type Env = Env;

    fn name(&self) -> &'static str {
        "secret-replication"
    }

    fn title(&self) -> &'static str {
        "secret replication"
    }

    fn enabled(&self) -> bool {
        self.secret_replication
    }

    fn crds(&self) -> Vec<CustomResourceDefinition> {
        super::crds()
    }

    fn start(&self, core: Core, _: &Env, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(super::run(core, stop))
    }
}

//! Cluster groups and resource sync as the agent runs them: the switches, the CRDs, the start.

use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tokio_util::sync::CancellationToken;
use xcc_sync::{Core, kit::Reconciler};

use crate::reconcilers::Env;

// No doc comment: clap would show it in `--help`.
#[derive(Clone, Debug, clap::Args)]
pub struct ResourceSync {
    /// Cluster groups and resource sync: Cluster, ClusterFeature and ResourceSyncRule
    /// (clusterregistry.k8s.cisco.com). Off in standalone mode.
    #[arg(
        long = "resource-sync",
        env = "XCC_RESOURCE_SYNC",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub resource_sync: bool,

    /// With resource sync: also copy the peers' Cluster objects, peer kubeconfig Secrets (type
    /// k8s.cisco.com/cluster-registry-secret) and ResourceSyncRules, so that one Cluster+Secret
    /// exchange with any member joins a cluster to the whole group and a rule made on one
    /// cluster reaches all (cluster-registry's core sync rules). Off: every cluster needs every
    /// Cluster, Secret and rule applied by hand.
    #[arg(
        long = "group-sync",
        env = "XCC_GROUP_SYNC",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub group_sync: bool,

    /// With resource sync: publish on this cluster the ClusterFeature
    /// `cluster-registry-core-resources` (label
    /// cluster-registry-controller.k8s.cisco.com/core-sync-resource: "true", featureName
    /// cluster-registry-core-resources-source), as the original cluster-registry-controller does
    /// with the setting of the same name. The original reads Clusters, peer Secrets and
    /// ResourceSyncRules only from peers that have it, so in a group with original members keep
    /// it on. Off: nothing is written (an existing one is left as it is).
    #[arg(
        long = "core-resources-source-enabled",
        env = "XCC_CORE_RESOURCES_SOURCE_ENABLED",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub core_resources_source: bool,

    /// With resource sync: the ServiceAccount (in the agent's namespace) whose token the other
    /// members read this cluster with (`kubectl xcc cluster join` mints it). It holds no Secret
    /// permission of its own: the agent binds ClusterRole xcc-cluster-reader-secrets to it in
    /// each namespace where the group's rules and Clusters read Secrets, and unbinds it when no
    /// longer needed.
    #[arg(
        long = "cluster-reader",
        env = "XCC_CLUSTER_READER",
        default_value = "xcc-cluster-reader",
        value_name = "NAME"
    )]
    pub cluster_reader: String,
}

impl Reconciler for ResourceSync {
    type Env = Env;

    fn name(&self) -> &'static str {
        "resource-sync"
    }

    fn title(&self) -> &'static str {
        "resource sync"
    }

    fn enabled(&self) -> bool {
        self.resource_sync
    }

    fn crds(&self) -> Vec<CustomResourceDefinition> {
        super::crds()
    }

    fn start(&self, core: Core, env: &Env, stop: CancellationToken) -> BoxFuture<'static, ()> {
        let settings = super::Settings {
            group_sync: self.group_sync,
            core_resources_source: self.core_resources_source,
            reader: super::grants::Reader {
                namespace: env.namespace.clone(),
                name: self.cluster_reader.clone(),
            },
        };
        Box::pin(super::run(core, settings, stop))
    }
}

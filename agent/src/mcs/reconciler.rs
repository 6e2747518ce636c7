//! The Multi-Cluster Services API as the agent runs it: its switch, its flags, its CRDs, its start.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt as _;
use tokio_util::sync::CancellationToken;
use xcc_sync::{Core, kit::Reconciler};

use crate::reconcilers::Env;

/// Shortest `--mcs-stale-after`: a peer's endpoints are never withdrawn at its first failure.
pub const STALE_MIN: Duration = Duration::from_secs(1);
/// Longest `--mcs-stale-after`: a peer that is gone is never served forever.
pub const STALE_MAX: Duration = Duration::from_secs(3600);

/// How importing clusters reach an exported Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DataPlane {
    /// The exporting cluster's pod addresses (pod ranges routable between clusters).
    Flat,
    /// The exporting cluster's node addresses and a node port of the agent's own (or the
    /// exported Service's load balancer address).
    Gateway,
}

impl DataPlane {
    /// As written in publications and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            DataPlane::Flat => "flat",
            DataPlane::Gateway => "gateway",
        }
    }
}

// No doc comment: clap would show it in `--help`.
#[derive(Clone, Debug, clap::Args)]
pub struct Mcs {
    /// The Multi-Cluster Services API (multicluster.x-k8s.io ServiceExport and ServiceImport,
    /// about.k8s.io ClusterProperty) over the cluster group: exports published to the group,
    /// imports written in every member. Off in standalone mode.
    #[arg(
        long = "mcs",
        env = "XCC_MCS",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub mcs: bool,

    /// With MCS: the ClusterSet's name, written as ClusterProperty clusterset.k8s.io when this
    /// cluster has none (an existing one is kept).
    #[arg(
        long = "mcs-clusterset",
        env = "XCC_MCS_CLUSTERSET",
        default_value = "default",
        value_name = "NAME"
    )]
    pub clusterset: String,

    /// With MCS: how long a peer that stops answering keeps its endpoints in this cluster's
    /// imports before they are withdrawn (from 1s to 1h).
    #[arg(
        long = "mcs-stale-after",
        env = "XCC_MCS_STALE_AFTER",
        default_value = "2m",
        value_parser = xcc_kube::flags::duration(STALE_MIN, STALE_MAX),
        value_name = "DURATION"
    )]
    pub stale_after: Duration,

    /// With MCS: the data plane of this cluster's exports: flat (pod addresses) or gateway (node
    /// addresses and node ports).
    #[arg(
        long = "mcs-data-plane",
        env = "XCC_MCS_DATA_PLANE",
        default_value = "flat",
        value_enum,
        value_name = "PLANE"
    )]
    pub data_plane: DataPlane,
}

impl Reconciler for Mcs {
    type Env = Env;

    fn name(&self) -> &'static str {
        "mcs"
    }

    fn title(&self) -> &'static str {
        "multi-cluster services"
    }

    fn enabled(&self) -> bool {
        self.mcs
    }

    fn crds(&self) -> Vec<CustomResourceDefinition> {
        let mut crds = super::api::crds();
        crds.push(super::publication::ExportedService::crd());
        crds
    }

    fn start(&self, core: Core, _: &Env, stop: CancellationToken) -> BoxFuture<'static, ()> {
        let settings = super::Settings {
            clusterset: self.clusterset.clone(),
            stale_after: self.stale_after,
            data_plane: self.data_plane,
        };
        Box::pin(super::run(core, settings, stop))
    }
}

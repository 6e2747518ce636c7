//! Command-line flags; each can also be set through the environment variable `--help` names.

use std::{net::SocketAddr, time::Duration};

use clap::{Parser, Subcommand};

/// Publishes the gateways of Cluster API workload clusters in DNS.
///
/// For each GatewayDNS (connectivity.tanzu.vmware.com/v1alpha1) it reads the load-balancer
/// address of `spec.service` on every Cluster selected by `spec.clusterSelector` (through the
/// Cluster API kubeconfig Secret `<cluster>-kubeconfig`) and writes it as an EndpointSlice into
/// namespace `xcc-dns` of every cluster of the GatewayDNS's namespace, where xcc-agent serves it
/// as `*.gateway.<cluster>.<namespace>.clusters.<zone>`.
///
/// The kubeconfig Secrets are untrusted data: only inline credentials are accepted (server over
/// https, certificate-authority-data, tls-server-name, token, client-certificate-data +
/// client-key-data). exec, auth-provider, tokenFile and every other file path are always
/// refused; proxy-url and insecure-skip-tls-verify only with the flags below. A refused
/// kubeconfig shows as cluster state KubeconfigRejected (Ready=False) with the Secret and the
/// field, and that cluster's records are kept.
#[derive(Debug, Parser)]
#[command(
    name = "xcc-controller",
    version = xcc_kube::metrics::VERSION,
    about,
    long_about,
    mut_arg("kubeconfig", |arg| arg.help(
        "Kubeconfig of the management cluster; default: in-cluster or $KUBECONFIG"
    )),
    mut_arg("leader_elect", |arg| arg.alias("leader-election").help(
        "Elect a leader through the Lease `xcc-controller` in --lease-namespace, so that several \
         replicas are safe (`--leader-elect`, `--leader-elect=true|false`, as Kubernetes \
         components; `--leader-election` is the older spelling)"
    ))
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// DNS zone of the published names (a DNS name such as xcc.test; the agents' --zone). The
    /// environment variable is the original XCC's name, so that its manifests keep working.
    #[arg(
        long,
        env = "DOMAIN_SUFFIX",
        default_value = "xcc.test",
        value_name = "ZONE",
        value_parser = xcc_kube::flags::zone
    )]
    pub zone: String,

    #[command(flatten)]
    pub own: xcc_kube::KubeconfigArgs,

    /// Backstop resync of every GatewayDNS; Service watches propagate changes at once.
    #[arg(long, env = "XCC_RESYNC_INTERVAL", default_value = "5m", value_parser = humantime::parse_duration)]
    pub resync_interval: Duration,

    /// How long a workload cluster's xcc-agent announcement (ConfigMap xcc-dns/xcc-agent) is
    /// trusted before it is read again. Clusters without one get no IPv6 slices (the original
    /// XCC dns-server may run there); one that gets an agent is sent them within this time.
    #[arg(long, env = "XCC_ANNOUNCEMENT_TTL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub announcement_ttl: Duration,

    /// How often every workload cluster's API server is asked for its version: the health
    /// check behind `Unreachable`, and the unit of `spec.staleRecords.readmitAfter`.
    #[arg(long, env = "XCC_PROBE_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub probe_interval: Duration,

    /// Most writes to workload clusters in flight at once, over all clusters. Each cluster has
    /// its own queue: a slow one holds at most one of these places, and changes made while its
    /// write is in flight are merged into the next.
    #[arg(long, env = "XCC_MAX_WRITES_IN_FLIGHT", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_writes_in_flight: u16,

    /// Undo what xcc-controller did, then exit (run it with the controller stopped, before going
    /// back to the original XCC): remove xcc's finalizer from every GatewayDNS and delete the
    /// EndpointSlices xcc-controller wrote on every workload cluster. Slices the original
    /// dns-server cannot read are left on clusters with no xcc-agent announced (deleting one
    /// would crash it) and listed. Refuses while the leader Lease says a controller runs; exits
    /// non-zero if a cluster could not be cleaned.
    #[arg(long, env = "XCC_UNINSTALL", default_value_t = false)]
    pub uninstall: bool,

    #[command(flatten)]
    pub leader: xcc_sync::LeaderElectArgs,

    /// Namespace of the leader-election Lease (the controller's own namespace; the environment
    /// variable is the original XCC's name, from the downward API).
    #[arg(long, env = "NAMESPACE", default_value = "xcc-system")]
    pub lease_namespace: String,

    /// Identity in the Lease and on Events (the pod name).
    #[arg(long, env = "XCC_POD_NAME")]
    pub pod_name: Option<String>,

    /// Address of the admin HTTP server (/healthz, /readyz, /metrics), IP:PORT.
    #[arg(
        long,
        env = "XCC_ADMIN_LISTEN",
        default_value = "0.0.0.0:9180",
        value_name = "IP:PORT",
        value_parser = xcc_kube::flags::listen
    )]
    pub admin_listen: SocketAddr,

    #[command(flatten)]
    pub trust: xcc_kube::PeerTrust,

    #[command(flatten)]
    pub log: xcc_kube::logging::LogArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CustomResourceDefinitions this controller serves, as YAML.
    Crds,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_are_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn leader_elect_takes_a_value_and_the_older_spelling() {
        for (argv, on) in [
            (&["--leader-elect"][..], true),
            (&["--leader-elect=true"], true),
            (&["--leader-elect=false"], false),
            (&["--leader-election"], true),
            (&[], false),
        ] {
            let args = Args::try_parse_from(["xcc-controller"].iter().chain(argv)).unwrap();
            assert_eq!(args.leader.leader_elect, on, "{argv:?}");
        }
        let error = Args::try_parse_from(["xcc-controller", "--zone", "*.test"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }
}

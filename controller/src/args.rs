//! Command-line flags; each can also be set through the environment variable `--help` names.

use std::{net::SocketAddr, time::Duration};

use clap::{Parser, Subcommand};
use xcc_kube::flags::{Checked, EnvAlias, duration, number, readable_file};

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
    mut_arg("leader_elect", |arg| arg.aliases(["leader-election", "enable-leader-election"]).help(
        "Elect a leader through the Lease `--leader-elect-resource-name` (default \
         xcc-controller) in `--leader-elect-resource-namespace` (default: $NAMESPACE, else \
         xcc-system), so that several replicas are safe (`--leader-elect`, \
         `--leader-elect=true|false`, as Kubernetes components; `--leader-election` and the \
         original XCC's `--enable-leader-election` are older spellings)"
    )),
    mut_arg("leader_elect_resource_namespace", |arg| arg.help(
        "Namespace of the leader-election Lease (the controller's own namespace; also read \
         from $NAMESPACE, the original XCC's variable, from the downward API) [default: \
         xcc-system]"
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

    /// Backstop resync of every GatewayDNS; Service watches propagate changes at once (1s to
    /// 24h; also read from $GATEWAY_DNS_POLLING_INTERVAL, the original XCC's poll).
    #[arg(
        long,
        env = "XCC_RESYNC_INTERVAL",
        default_value = "5m",
        value_name = "DURATION",
        value_parser = duration(Duration::from_secs(1), Duration::from_secs(86_400))
    )]
    pub resync_interval: Duration,

    /// How long a workload cluster's xcc-agent announcement (ConfigMap xcc-dns/xcc-agent) is
    /// trusted before it is read again. Clusters without one get no IPv6 slices (the original
    /// XCC dns-server may run there); one that gets an agent is sent them within this time (1s
    /// to 1h).
    #[arg(
        long,
        env = "XCC_ANNOUNCEMENT_TTL",
        default_value = "30s",
        value_name = "DURATION",
        value_parser = duration(Duration::from_secs(1), Duration::from_secs(3600))
    )]
    pub announcement_ttl: Duration,

    /// How often every workload cluster's API server is asked for its version: the health
    /// check behind `Unreachable`, and the unit of `spec.staleRecords.readmitAfter` (1s to 10m).
    #[arg(
        long,
        env = "XCC_PROBE_INTERVAL",
        default_value = "5s",
        value_name = "DURATION",
        value_parser = duration(Duration::from_secs(1), Duration::from_secs(600))
    )]
    pub probe_interval: Duration,

    /// Most writes to workload clusters in flight at once, over all clusters. Each cluster has
    /// its own queue: a slow one holds at most one of these places, and changes made while its
    /// write is in flight are merged into the next (1 to 10000).
    #[arg(
        long,
        env = "XCC_MAX_WRITES_IN_FLIGHT",
        default_value_t = 64,
        value_name = "COUNT",
        value_parser = number::<u16>("writes", 1, 10_000)
    )]
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

/// The Lease's namespace when neither the flag nor `NAMESPACE` names one.
pub const LEASE_NAMESPACE: &str = "xcc-system";
/// The Lease's name when the flag names none.
pub const LEASE_NAME: &str = "xcc-controller";

impl Args {
    /// The leader-election Lease's namespace.
    pub fn lease_namespace(&self) -> &str {
        self.leader
            .leader_elect_resource_namespace
            .as_deref()
            .unwrap_or(LEASE_NAMESPACE)
    }

    /// The leader-election Lease's name.
    pub fn lease_name(&self) -> &str {
        self.leader
            .leader_elect_resource_name
            .as_deref()
            .unwrap_or(LEASE_NAME)
    }
}

impl Checked for Args {
    /// The original XCC controller's variables, and the former name of `--leader-elect`'s.
    const ENV_ALIASES: &'static [EnvAlias] = &[
        EnvAlias {
            var: "NAMESPACE",
            flag: "leader-elect-resource-namespace",
        },
        EnvAlias {
            var: "GATEWAY_DNS_POLLING_INTERVAL",
            flag: "resync-interval",
        },
        EnvAlias {
            var: "XCC_LEADER_ELECTION",
            flag: "leader-elect",
        },
    ];

    /// The leader election's timing, and the kubeconfig file the flag names.
    fn check(&self) -> Result<(), String> {
        self.leader.check()?;
        if let Some(file) = &self.own.kubeconfig {
            readable_file("--kubeconfig", file)?;
        }
        Ok(())
    }
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

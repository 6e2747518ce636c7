//! Command-line flags. Every flag can also be set through the environment variable named in
//! `--help`.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args as ArgGroup, Parser, Subcommand};
use xcc_kube::flags::{Checked, EnvAlias, duration, number, readable_file};

/// The xcc agent of a member cluster: serves the xcc DNS zone, and runs the cross-cluster sync
/// reconcilers.
///
/// DNS: serves the xcc zone (default `xcc.test`) from an in-memory record table. In a cluster
/// (the default) the table is fed by the EndpointSlices that xcc-controller writes into the
/// agent's namespace (annotation `connectivity.tanzu.vmware.com/dns-hostname`); the cluster's
/// CoreDNS forwards the zone here (see xcc-coredns-patcher).
///
/// Sync reconcilers (each can be switched off; they read from peer clusters and write only to
/// this one; `xcc-agent crds` prints their CRDs):
///   * Secret replication: SecretExport, SecretImport, the import/export monitors and bindings
///     (services-toolkit's replication API);
///   * cluster groups and resource sync: Cluster, ClusterFeature, ResourceSyncRule
///     (cluster-registry's API);
///   * plumber: ClusterDetector and Replicator;
///   * API projection: UpstreamClusterLink, APIExportRoleBinding (service side) and
///     DownstreamClusterLink, APIResourceImport, ClusterAPIGroupImport with an aggregated API
///     server (workload side).
///
/// Admin HTTP (`--admin-listen`): /healthz, /readyz, /metrics, /explain.
///
/// Kubeconfigs read from Secrets (a SecretImport's service cluster, a Cluster's peer Secret) are
/// untrusted data: only inline credentials are accepted (server over https,
/// certificate-authority-data, tls-server-name, token, client-certificate-data + client-key-data).
/// exec, auth-provider, tokenFile and every other file path are always refused; proxy-url and
/// insecure-skip-tls-verify only with the flags below. The object naming a refused kubeconfig
/// says Ready=False, reason KubeconfigRejected, with the Secret and the field.
///
/// Standalone, no cluster needed: `xcc-agent --records records.yaml` serves the names of a YAML
/// file and reloads it when it changes. A bad file is reported (line and field) and the last good
/// table keeps being served.
#[derive(Debug, Parser)]
#[command(name = "xcc-agent", version = xcc_kube::metrics::VERSION, about, long_about)]
pub struct Args {
    #[doc = "A command other than serving, if one is given."]
    #[command(subcommand)]
    pub command: Option<Command>,

    #[doc = "The DNS server."]
    #[command(flatten)]
    pub dns: DnsArgs,

    #[doc = "The records file of standalone mode."]
    #[command(flatten)]
    pub records: RecordsArgs,

    #[doc = "The cluster whose EndpointSlices feed the table."]
    #[command(flatten)]
    pub kube: KubeArgs,

    #[doc = "The sync reconcilers."]
    #[command(flatten)]
    pub sync: SyncArgs,

    #[doc = "The admin server and shutdown."]
    #[command(flatten)]
    pub admin: AdminArgs,

    #[doc = "Logging."]
    #[command(flatten)]
    pub log: xcc_kube::logging::LogArgs,
}

impl Checked for Args {
    /// The original XCC's variables (its dns-server's `NAMESPACE`, its `DOMAIN_SUFFIX`) and the
    /// former names of the leader election's variables.
    const ENV_ALIASES: &'static [EnvAlias] = &[
        EnvAlias {
            var: "NAMESPACE",
            flag: "namespace",
        },
        EnvAlias {
            var: "DOMAIN_SUFFIX",
            flag: "zone",
        },
        EnvAlias {
            var: "XCC_LEASE_NAME",
            flag: "leader-elect-resource-name",
        },
        EnvAlias {
            var: "XCC_LEASE_DURATION",
            flag: "leader-elect-lease-duration",
        },
    ];

    /// The leader election's timing, and the files the flags name.
    fn check(&self) -> Result<(), String> {
        self.sync.leader.check()?;
        if let Some(file) = &self.records.file {
            readable_file("--records", file)?;
        }
        if self.records.file.is_none()
            && let Some(file) = &self.kube.own.kubeconfig
        {
            readable_file("--kubeconfig", file)?;
        }
        Ok(())
    }
}

/// The DNS server's flags.
#[derive(Debug, ArgGroup)]
#[command(next_help_heading = "DNS")]
pub struct DnsArgs {
    /// Address the DNS server listens on (UDP and TCP), IP:PORT.
    #[arg(
        long,
        env = "XCC_LISTEN",
        default_value = "0.0.0.0:53",
        value_name = "IP:PORT",
        value_parser = xcc_kube::flags::listen
    )]
    pub listen: SocketAddr,

    /// Zone to serve (a DNS name such as xcc.test); repeat (or comma-separate) for several.
    #[arg(
        long = "zone",
        env = "XCC_ZONES",
        value_delimiter = ',',
        default_value = xcc_dns::DEFAULT_ZONE,
        value_name = "ZONE",
        value_parser = xcc_kube::flags::zone
    )]
    pub zones: Vec<String>,

    /// TTL of positive answers, in seconds (1 to 86400).
    #[arg(
        long,
        env = "XCC_TTL",
        default_value_t = 30,
        value_name = "SECONDS",
        value_parser = number::<u32>("seconds", 1, 86_400)
    )]
    pub ttl: u32,

    /// TTL of negative answers (NXDOMAIN, NODATA) and the SOA MINIMUM, in seconds (0 to 86400).
    #[arg(
        long,
        env = "XCC_NEGATIVE_TTL",
        default_value_t = 30,
        value_name = "SECONDS",
        value_parser = number::<u32>("seconds", 0, 86_400)
    )]
    pub negative_ttl: u32,

    /// Zone of the Multi-Cluster Services names (`<svc>.<ns>.svc.<zone>`, KEP-1645), answered
    /// from the ServiceImports and MCS EndpointSlices of the agent's cluster; empty: not served.
    /// Never served with --records.
    #[arg(
        long,
        env = "XCC_CLUSTERSET_ZONE",
        default_value = "clusterset.local",
        value_name = "ZONE",
        value_parser = clusterset_zone
    )]
    pub clusterset_zone: String,

    /// TTL of the answers of the clusterset zone's names, in seconds (1 to 3600): short, since
    /// they follow endpoints.
    #[arg(
        long,
        env = "XCC_CLUSTERSET_TTL",
        default_value_t = 5,
        value_name = "SECONDS",
        value_parser = number::<u32>("seconds", 1, 3600)
    )]
    pub clusterset_ttl: u32,

    /// UDP sockets sharing the port (SO_REUSEPORT), each served by its own thread; 0 means one
    /// per CPU (0 to 1024).
    #[arg(
        long,
        env = "XCC_UDP_SOCKETS",
        default_value_t = 0,
        value_name = "COUNT",
        value_parser = number::<usize>("sockets", 0, 1024)
    )]
    pub udp_sockets: usize,

    /// Receive buffer asked for on each UDP socket, in bytes (capped by net.core.rmem_max);
    /// 0 keeps the kernel's default (net.core.rmem_default). Up to 1 GiB.
    #[arg(
        long,
        env = "XCC_UDP_RECV_BUFFER",
        default_value_t = xcc_dns::UDP_RECV_BUFFER,
        value_name = "BYTES",
        value_parser = number::<usize>("bytes", 0, 1 << 30)
    )]
    pub udp_recv_buffer: usize,

    /// Async worker threads: TCP, the UDP queries the serving threads hand over (those that need
    /// more than the fast path), the admin server and the sync reconcilers; 0 means one per CPU
    /// (0 to 1024).
    #[arg(
        long,
        env = "XCC_THREADS",
        default_value_t = 0,
        value_name = "COUNT",
        value_parser = number::<usize>("threads", 0, 1024)
    )]
    pub threads: usize,

    /// TCP connections open at once (1 to 1000000). At the cap a new connection closes the
    /// longest-idle one; the cap is also kept below the open-file limit (which the agent raises
    /// to its maximum).
    #[arg(
        long,
        env = "XCC_TCP_MAX_CONNECTIONS",
        default_value_t = 1000,
        value_name = "COUNT",
        value_parser = number::<usize>("connections", 1, 1_000_000)
    )]
    pub tcp_max_connections: usize,

    /// How long an idle TCP connection is kept open waiting for its next query (100ms to 1h).
    #[arg(
        long,
        env = "XCC_TCP_IDLE_TIMEOUT",
        default_value = "10s",
        value_name = "DURATION",
        value_parser = duration(Duration::from_millis(100), Duration::from_secs(3600))
    )]
    pub tcp_idle_timeout: Duration,

    /// How long a TCP query may take to arrive once it has started (and its answer to be
    /// written); a client that stalls half-way is disconnected (100ms to 10m).
    #[arg(
        long,
        env = "XCC_TCP_READ_TIMEOUT",
        default_value = "3s",
        value_name = "DURATION",
        value_parser = duration(Duration::from_millis(100), Duration::from_secs(600))
    )]
    pub tcp_read_timeout: Duration,
}

/// `--clusterset-zone`: a zone, or empty for none.
fn clusterset_zone(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Ok(String::new());
    }
    xcc_kube::flags::zone(text.trim())
}

impl DnsArgs {
    /// The serving loops' limits.
    pub fn serve_options(&self) -> xcc_dns::ServeOptions {
        xcc_dns::ServeOptions {
            tcp_max_connections: self.tcp_max_connections,
            tcp_idle_timeout: self.tcp_idle_timeout,
            tcp_read_timeout: self.tcp_read_timeout,
        }
    }
}

/// The flags of standalone mode.
#[derive(Debug, ArgGroup)]
#[command(next_help_heading = "Records file (standalone mode)")]
pub struct RecordsArgs {
    /// YAML file mapping host names to `addresses` or a `cname` (see examples/records.yaml).
    #[arg(long = "records", env = "XCC_RECORDS", value_name = "FILE")]
    pub file: Option<PathBuf>,

    /// How often the records file is checked for changes (10ms to 1h).
    #[arg(
        long = "records-poll-interval",
        env = "XCC_RECORDS_POLL_INTERVAL",
        default_value = "250ms",
        value_name = "DURATION",
        value_parser = duration(Duration::from_millis(10), Duration::from_secs(3600))
    )]
    pub poll_interval: Duration,

    /// Largest share (0 to 1) of the file's names that one reload may remove; a file that would
    /// remove more (a half-written copy, the wrong file) is refused and the last good table is
    /// kept. 1 allows any change.
    #[arg(
        long = "records-max-removed-share",
        env = "XCC_RECORDS_MAX_REMOVED_SHARE",
        default_value_t = 0.5,
        value_name = "SHARE",
        value_parser = share
    )]
    pub max_removed_share: f64,

    /// Accept a reload that leaves no names at all (refused by default: the last good table is
    /// kept).
    #[arg(
        long = "records-allow-empty",
        env = "XCC_RECORDS_ALLOW_EMPTY",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub allow_empty: bool,
}

impl RecordsArgs {
    /// How much one reload may take away.
    pub fn shrink_limit(&self) -> xcc_dns::ShrinkLimit {
        xcc_dns::ShrinkLimit {
            allow_empty: self.allow_empty,
            max_removed_share: self.max_removed_share,
        }
    }
}

fn share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err("expected a share from 0 to 1, such as 0.5".to_owned()),
    }
}

/// The flags of the cluster the agent reads.
#[derive(Debug, ArgGroup)]
#[command(
    next_help_heading = "Kubernetes (when --records is not given)",
    mut_arg("kubeconfig", |arg| arg.help(
        "Kubeconfig file; without it the in-cluster service account (or $KUBECONFIG) is used"
    ))
)]
pub struct KubeArgs {
    /// Namespace whose EndpointSlices feed the table (also read from $NAMESPACE, the original
    /// XCC dns-server's variable).
    #[arg(
        long,
        env = "XCC_NAMESPACE",
        default_value = "xcc-dns",
        value_parser = xcc_kube::flags::namespace
    )]
    pub namespace: String,

    #[doc = "The agent's own cluster (`--kubeconfig`)."]
    #[command(flatten)]
    pub own: xcc_kube::KubeconfigArgs,

    /// Name reported on Events (the pod name, from the downward API).
    #[arg(long, env = "XCC_POD_NAME")]
    pub pod_name: Option<String>,

    /// Write the ConfigMap `xcc-agent` in `--namespace`, which tells xcc-controller that this
    /// cluster reads IPv6 slices (without it the controller writes only what the original XCC
    /// dns-server reads: IPv4 and FQDN).
    #[arg(
        long,
        env = "XCC_ANNOUNCE",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub announce: bool,

    /// Local address the gateway health checks (GatewayDNS `spec.healthCheck`) are sent from,
    /// on a node with several networks: the one this cluster's clients reach the gateways
    /// through. Default: the one the routing table picks.
    #[arg(long, env = "XCC_PROBE_SOURCE_ADDRESS", value_name = "IP")]
    pub probe_source_address: Option<std::net::IpAddr>,
}

/// The commands of `xcc-agent` besides serving.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CustomResourceDefinitions the agent serves, as YAML.
    Crds {
        /// Write one file per CRD (`<group>_<plural>.yaml`) into this directory instead.
        #[arg(long, env = "XCC_CRDS_DIR", value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// The sync reconcilers' flags.
#[derive(Debug, ArgGroup)]
#[command(
    next_help_heading = "Sync reconcilers (when --records is not given)",
    mut_arg("leader_elect", |arg| arg.help(
        "Run the sync reconcilers only on the replica holding the Lease \
         `--leader-elect-resource-name` (default xcc-agent) in \
         `--leader-elect-resource-namespace` (default: --namespace) (on in the manifest, which \
         runs 2 replicas). DNS serving and the record feed run on every replica; readiness never \
         depends on leading. The Lease is released on SIGTERM, so a rolling update hands over at \
         once; a replica that dies without releasing it is replaced after \
         `--leader-elect-lease-duration`"
    ))
)]
pub struct SyncArgs {
    #[doc = "Which reconcilers run."]
    #[command(flatten)]
    pub reconcilers: crate::reconcilers::ReconcilerFlags,

    #[doc = "Leader election (`--leader-elect...`)."]
    #[command(flatten)]
    pub leader: xcc_sync::LeaderElectArgs,

    #[doc = "The trust rules for peers' kubeconfigs."]
    #[command(flatten)]
    pub trust: xcc_kube::PeerTrust,
}

/// The admin server's and shutdown's flags.
#[derive(Debug, ArgGroup)]
#[command(next_help_heading = "Admin")]
pub struct AdminArgs {
    /// Address of the admin HTTP server (/healthz, /readyz, /metrics, /explain), IP:PORT.
    #[arg(
        long = "admin-listen",
        env = "XCC_ADMIN_LISTEN",
        default_value = "0.0.0.0:9180",
        value_name = "IP:PORT",
        value_parser = xcc_kube::flags::listen
    )]
    pub admin_listen: SocketAddr,

    /// How long the agent keeps answering DNS after SIGTERM, with `/readyz` failing from the
    /// first moment, so that every node's kube-proxy has dropped this endpoint before the
    /// sockets close (a rollout without failed lookups). The sync reconcilers stop and the Lease
    /// is released at once. A second SIGTERM or SIGINT ends the wait. Default: 5s in a pod
    /// reading a cluster (KUBERNETES_SERVICE_HOST set, no --records), 0 otherwise. Up to 10m.
    #[arg(
        long,
        env = "XCC_SHUTDOWN_DELAY",
        value_parser = duration(Duration::ZERO, Duration::from_secs(600)),
        value_name = "DURATION"
    )]
    pub shutdown_delay: Option<Duration>,
}

/// The drain of a pod reading a cluster, when `--shutdown-delay` is not given.
pub const POD_SHUTDOWN_DELAY: Duration = Duration::from_secs(5);

impl AdminArgs {
    /// The drain after SIGTERM: the flag, else [`POD_SHUTDOWN_DELAY`] for an agent that reads a
    /// cluster from inside a pod (`in_pod`), else none (standalone, or a process on a host).
    pub fn shutdown_delay(&self, standalone: bool, in_pod: bool) -> Duration {
        match self.shutdown_delay {
            Some(delay) => delay,
            None if !standalone && in_pod => POD_SHUTDOWN_DELAY,
            None => Duration::ZERO,
        }
    }
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
    fn defaults_serve_the_xcc_test_zone_on_port_53() {
        let args = Args::try_parse_from(["xcc-agent"]).unwrap();
        assert_eq!(args.dns.zones, ["xcc.test"]);
        assert_eq!(args.dns.listen.port(), 53);
        assert_eq!(args.dns.ttl, 30);
        assert_eq!(args.dns.clusterset_zone, "clusterset.local");
        assert_eq!(args.dns.clusterset_ttl, 5);
        assert!(args.command.is_none());
        assert!(args.sync.reconcilers.replication.secret_replication);
    }

    #[test]
    fn standalone_mode_is_unchanged_by_the_subcommand() {
        let args = Args::try_parse_from(["xcc-agent", "--records", "records.yaml"]).unwrap();
        assert!(args.command.is_none());
        assert_eq!(args.records.file, Some(PathBuf::from("records.yaml")));
    }

    #[test]
    fn the_drain_is_five_seconds_in_a_pod_and_none_elsewhere_unless_asked() {
        let args = Args::try_parse_from(["xcc-agent"]).unwrap();
        assert_eq!(args.admin.shutdown_delay(false, true), POD_SHUTDOWN_DELAY);
        assert_eq!(args.admin.shutdown_delay(false, false), Duration::ZERO);
        assert_eq!(args.admin.shutdown_delay(true, true), Duration::ZERO);
        let args = Args::try_parse_from(["xcc-agent", "--shutdown-delay=2s"]).unwrap();
        assert_eq!(
            args.admin.shutdown_delay(true, false),
            Duration::from_secs(2)
        );
        let args = Args::try_parse_from(["xcc-agent", "--shutdown-delay=0s"]).unwrap();
        assert_eq!(args.admin.shutdown_delay(false, true), Duration::ZERO);
        let error = Args::try_parse_from(["xcc-agent", "--shutdown-delay=soon"]).unwrap_err();
        assert!(error.to_string().contains("--shutdown-delay"), "{error}");
    }

    #[test]
    fn crds_is_a_subcommand() {
        let args = Args::try_parse_from(["xcc-agent", "crds"]).unwrap();
        assert!(matches!(args.command, Some(Command::Crds { dir: None })));
    }

    #[test]
    fn secret_replication_can_be_switched_off() {
        for off in [
            &["xcc-agent", "--secret-replication=false"][..],
            &["xcc-agent", "--secret-replication", "false"],
        ] {
            let args = Args::try_parse_from(off).unwrap();
            assert!(
                !args.sync.reconcilers.replication.secret_replication,
                "{off:?}"
            );
        }
        let args = Args::try_parse_from(["xcc-agent", "--secret-replication"]).unwrap();
        assert!(args.sync.reconcilers.replication.secret_replication);
    }

    #[test]
    fn resource_sync_is_on_by_default_and_can_be_switched_off() {
        let args = Args::try_parse_from(["xcc-agent"]).unwrap();
        assert!(args.sync.reconcilers.resource_sync.resource_sync);
        assert!(args.sync.reconcilers.resource_sync.group_sync);
        assert!(args.sync.reconcilers.resource_sync.core_resources_source);
        let args = Args::try_parse_from(["xcc-agent", "--resource-sync=false"]).unwrap();
        assert!(!args.sync.reconcilers.resource_sync.resource_sync);
        let args = Args::try_parse_from(["xcc-agent", "--group-sync=false"]).unwrap();
        assert!(!args.sync.reconcilers.resource_sync.group_sync);
    }

    #[test]
    fn plumber_is_on_by_default_in_plumber_system_and_can_be_switched_off() {
        let args = Args::try_parse_from(["xcc-agent"]).unwrap();
        assert!(args.sync.reconcilers.plumber.plumber);
        assert_eq!(
            args.sync.reconcilers.plumber.plumber_namespace,
            "plumber-system"
        );
        let args =
            Args::try_parse_from(["xcc-agent", "--plumber=false", "--plumber-namespace=ops"])
                .unwrap();
        assert!(!args.sync.reconcilers.plumber.plumber);
        assert_eq!(args.sync.reconcilers.plumber.plumber_namespace, "ops");
    }

    #[test]
    fn api_projection_is_on_by_default_and_can_be_switched_off() {
        let args = Args::try_parse_from(["xcc-agent"]).unwrap();
        assert!(args.sync.reconcilers.projection.api_projection);
        assert_eq!(
            args.sync.reconcilers.projection.projection_advertise_url,
            None
        );
        let args = Args::try_parse_from([
            "xcc-agent",
            "--api-projection=false",
            "--projection-advertise-url=https://services.example:6443",
        ])
        .unwrap();
        assert!(!args.sync.reconcilers.projection.api_projection);
        assert_eq!(
            args.sync
                .reconcilers
                .projection
                .projection_advertise_url
                .as_deref(),
            Some("https://services.example:6443")
        );
    }

    #[test]
    fn reload_limits_default_to_half_and_no_empty_file() {
        let args = Args::try_parse_from(["xcc-agent"]).unwrap();
        assert_eq!(args.records.shrink_limit(), xcc_dns::ShrinkLimit::default());
        let args = Args::try_parse_from([
            "xcc-agent",
            "--records-max-removed-share",
            "1",
            "--records-allow-empty",
        ])
        .unwrap();
        assert_eq!(args.records.shrink_limit(), xcc_dns::ShrinkLimit::NONE);
        assert!(Args::try_parse_from(["xcc-agent", "--records-max-removed-share", "1.5"]).is_err());
    }

    #[test]
    fn bad_zones_and_addresses_are_usage_errors() {
        for (args, says) in [
            (&["--zone", "*.test"][..], "wildcard"),
            (&["--zone", "bad..zone"], "empty label"),
            (&["--listen", "localhost:5353"], "IP:PORT"),
            (&["--clusterset-zone", "*.local"], "wildcard"),
            (&["--clusterset-ttl", "0"], "seconds"),
        ] {
            let error = Args::try_parse_from(["xcc-agent"].iter().chain(args)).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{args:?}");
            assert!(error.to_string().contains(says), "{args:?}: {error}");
        }
        let args = Args::try_parse_from(["xcc-agent", "--leader-elect"]).unwrap();
        assert!(args.sync.leader.leader_elect);
        let args = Args::try_parse_from(["xcc-agent", "--leader-elect=false"]).unwrap();
        assert!(!args.sync.leader.leader_elect);
    }

    #[test]
    fn the_clusterset_zone_is_switched_off_by_an_empty_value() {
        let args = Args::try_parse_from(["xcc-agent", "--clusterset-zone", ""]).unwrap();
        assert_eq!(args.dns.clusterset_zone, "");
        let args =
            Args::try_parse_from(["xcc-agent", "--clusterset-zone", "mcs.example."]).unwrap();
        assert_eq!(args.dns.clusterset_zone, "mcs.example");
    }

    #[test]
    fn zones_repeat_and_split_on_commas() {
        let args =
            Args::try_parse_from(["xcc-agent", "--zone", "a.test,b.test", "--zone", "c.test"])
                .unwrap();
        assert_eq!(args.dns.zones, ["a.test", "b.test", "c.test"]);
    }
}

//! Command-line flags. Every flag can also be set through the environment variable named in
//! `--help`.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args as ArgGroup, Parser};

/// Serves the xcc DNS zone (default `xcc.test`) from an in-memory record table.
///
/// In a cluster (the default): the table is fed by the EndpointSlices that xcc-controller writes
/// into the agent's namespace (annotation `connectivity.tanzu.vmware.com/dns-hostname`); the
/// cluster's CoreDNS forwards the zone here (see xcc-coredns-patcher).
///
/// Standalone, no cluster needed: `xcc-agent --records records.yaml` serves the names of a YAML
/// file and reloads it when it changes. A bad file is reported (line and field) and the last good
/// table keeps being served.
#[derive(Debug, Parser)]
#[command(name = "xcc-agent", version, about, long_about)]
pub struct Args {
    #[command(flatten)]
    pub dns: DnsArgs,

    #[command(flatten)]
    pub records: RecordsArgs,

    #[command(flatten)]
    pub kube: KubeArgs,

    #[command(flatten)]
    pub admin: AdminArgs,

    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, ArgGroup)]
#[command(next_help_heading = "DNS")]
pub struct DnsArgs {
    /// Address the DNS server listens on (UDP and TCP).
    #[arg(long, env = "XCC_LISTEN", default_value = "0.0.0.0:53")]
    pub listen: SocketAddr,

    /// Zone to serve; repeat (or comma-separate) for several.
    #[arg(
        long = "zone",
        env = "XCC_ZONES",
        value_delimiter = ',',
        default_value = xcc_dns::DEFAULT_ZONE
    )]
    pub zones: Vec<String>,

    /// TTL of positive answers, in seconds.
    #[arg(long, env = "XCC_TTL", default_value_t = 30)]
    pub ttl: u32,

    /// TTL of negative answers (NXDOMAIN, NODATA) and the SOA MINIMUM, in seconds.
    #[arg(long, env = "XCC_NEGATIVE_TTL", default_value_t = 30)]
    pub negative_ttl: u32,

    /// UDP sockets sharing the port (SO_REUSEPORT); 0 means one per CPU.
    #[arg(long, env = "XCC_UDP_SOCKETS", default_value_t = 0)]
    pub udp_sockets: usize,

    /// Worker threads answering queries; 0 means one per CPU.
    #[arg(long, env = "XCC_THREADS", default_value_t = 0)]
    pub threads: usize,
}

#[derive(Debug, ArgGroup)]
#[command(next_help_heading = "Records file (standalone mode)")]
pub struct RecordsArgs {
    /// YAML file mapping host names to `addresses` or a `cname` (see examples/records.yaml).
    #[arg(long = "records", env = "XCC_RECORDS", value_name = "FILE")]
    pub file: Option<PathBuf>,

    /// How often the records file is checked for changes.
    #[arg(
        long = "records-poll-interval",
        env = "XCC_RECORDS_POLL_INTERVAL",
        default_value = "250ms",
        value_parser = humantime::parse_duration
    )]
    pub poll_interval: Duration,
}

#[derive(Debug, ArgGroup)]
#[command(next_help_heading = "Kubernetes (when --records is not given)")]
pub struct KubeArgs {
    /// Namespace whose EndpointSlices feed the table.
    #[arg(long, env = "XCC_NAMESPACE", default_value = "xcc-dns")]
    pub namespace: String,

    /// Kubeconfig file; without it the in-cluster service account (or $KUBECONFIG) is used.
    #[arg(long, env = "XCC_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Name reported on Events (the pod name, from the downward API).
    #[arg(long, env = "XCC_POD_NAME")]
    pub pod_name: Option<String>,
}

#[derive(Debug, ArgGroup)]
#[command(next_help_heading = "Admin")]
pub struct AdminArgs {
    /// Address of the admin HTTP server (/healthz, /readyz, /metrics).
    #[arg(
        long = "admin-listen",
        env = "XCC_ADMIN_LISTEN",
        default_value = "0.0.0.0:9180"
    )]
    pub admin_listen: SocketAddr,
}

#[derive(Debug, ArgGroup)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// Log filter, in `tracing` env-filter syntax.
    #[arg(
        long = "log",
        env = "XCC_LOG",
        default_value = "info,hickory_server=warn,hickory_proto=warn,hickory_net=warn"
    )]
    pub filter: String,

    /// Log format.
    #[arg(long = "log-format", env = "XCC_LOG_FORMAT", default_value = "text")]
    pub format: LogFormat,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
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
    }

    #[test]
    fn zones_repeat_and_split_on_commas() {
        let args =
            Args::try_parse_from(["xcc-agent", "--zone", "a.test,b.test", "--zone", "c.test"])
                .unwrap();
        assert_eq!(args.dns.zones, ["a.test", "b.test", "c.test"]);
    }
}

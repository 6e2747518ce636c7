//! Command-line flags; each can also be set through the environment variable `--help` names.
//! XCC's own variables (`DOMAIN_SUFFIX`, `DNS_SERVICE_*`, `COREFILE_CONFIGMAP_*`) keep working.

use std::{
    fmt,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use clap::Parser;

/// Makes the cluster's CoreDNS forward the xcc zones to xcc-agent.
///
/// Edits the key `Corefile` of the ConfigMap kube-system/coredns (see
/// --corefile-configmap-namespace and --corefile-configmap-name): appends, between the lines
/// `### BEGIN CROSS CLUSTER CONNECTIVITY` and `### END CROSS CLUSTER CONNECTIVITY`, one server
/// block per zone that forwards the zone to the ClusterIP of the Service xcc-dns/dns-server (or
/// to --forward-to). CoreDNS's `reload` plugin picks the change up by itself.
///
/// Then it waits (--coredns-wait) until every ready replica of CoreDNS (the endpoints of Service
/// kube-system/kube-dns, see --coredns-service) answers the SOA of each zone from xcc-agent,
/// asking each pod IP directly on port 53: when the Job completes, pods resolve the zone. A
/// Corefile without `reload` is reported; CoreDNS is restarted only with --restart-coredns.
///
/// Only the text between the markers is ever written; the rest of the Corefile and of the
/// ConfigMap is kept. A run whose block is already there changes nothing, a different block is
/// replaced, and --remove takes the block out again. Updates carry the resourceVersion that was
/// read, and are retried when someone else changed the ConfigMap in between.
///
/// Exits 0 when the Corefile is as wanted (changed or not) and every CoreDNS replica forwards
/// the zones, non-zero with a one-line error otherwise.
#[derive(Debug, Parser)]
#[command(
    name = "xcc-coredns-patcher",
    version = xcc_kube::metrics::VERSION,
    about,
    long_about
)]
pub struct Args {
    /// Namespace of the Service whose ClusterIP CoreDNS forwards to.
    #[arg(long, env = "DNS_SERVICE_NAMESPACE", default_value = "xcc-dns")]
    pub dns_service_namespace: String,

    /// Name of the Service whose ClusterIP CoreDNS forwards to.
    #[arg(long, env = "DNS_SERVICE_NAME", default_value = "dns-server")]
    pub dns_service_name: String,

    /// Namespace of the ConfigMap that holds CoreDNS's Corefile.
    #[arg(
        long,
        env = "COREFILE_CONFIGMAP_NAMESPACE",
        default_value = "kube-system"
    )]
    pub corefile_configmap_namespace: String,

    /// Name of the ConfigMap that holds CoreDNS's Corefile (key `Corefile`).
    #[arg(long, env = "COREFILE_CONFIGMAP_NAME", default_value = "coredns")]
    pub corefile_configmap_name: String,

    /// DNS zone to forward; repeat the flag, or separate zones by commas in the variable.
    #[arg(
        long,
        env = "DOMAIN_SUFFIX",
        default_value = "xcc.test",
        value_delimiter = ',',
        value_parser = parse_zone,
        value_name = "ZONE"
    )]
    pub zone: Vec<String>,

    /// Forward to this address (`ip` or `ip:port`) instead of the Service's ClusterIP, for
    /// clusters where the agent is reached at a fixed address. The Service is then not read.
    #[arg(long, env = "XCC_FORWARD_TO", value_parser = parse_forward_to, value_name = "ADDR")]
    pub forward_to: Option<ForwardTo>,

    /// How long to wait for the Service to have a ClusterIP (polled every 500 ms; 0 to 1h).
    #[arg(
        long,
        env = "XCC_SERVICE_WAIT",
        default_value = "5s",
        value_name = "DURATION",
        value_parser = xcc_kube::flags::duration(Duration::ZERO, Duration::from_secs(3600))
    )]
    pub service_wait: Duration,

    /// How long to wait, after the edit, until every ready CoreDNS replica answers the SOA of
    /// each zone from xcc-agent (asked every second, each pod IP directly). `0s`: do not ask
    /// (for a run outside the cluster, which cannot reach pod IPs).
    #[arg(long, env = "XCC_COREDNS_WAIT", default_value = "3m", value_parser = humantime::parse_duration)]
    pub coredns_wait: Duration,

    /// CoreDNS's Service (in the ConfigMap's namespace): its EndpointSlices list the replicas
    /// that are asked.
    #[arg(long, env = "XCC_COREDNS_SERVICE", default_value = "kube-dns")]
    pub coredns_service: String,

    /// Restart CoreDNS (`kubectl rollout restart` of this Deployment, in the ConfigMap's
    /// namespace) when its Corefile has no `reload` plugin and a replica does not forward the
    /// zones yet. Needs `patch` on that Deployment (manifests/install/components/restart-coredns).
    #[arg(long, env = "XCC_RESTART_COREDNS", default_value_t = false)]
    pub restart_coredns: bool,

    /// CoreDNS's Deployment, for --restart-coredns and for the hints of errors.
    #[arg(long, env = "XCC_COREDNS_DEPLOYMENT", default_value = "coredns")]
    pub coredns_deployment: String,

    /// Take the block out of the Corefile again, and do nothing else (no Service is needed).
    #[arg(long, env = "XCC_REMOVE", default_value_t = false)]
    pub remove: bool,

    #[command(flatten)]
    pub own: xcc_kube::KubeconfigArgs,

    #[command(flatten)]
    pub log: xcc_kube::logging::LogArgs,
}

impl xcc_kube::flags::Checked for Args {
    /// The kubeconfig file the flag names.
    fn check(&self) -> Result<(), String> {
        match &self.own.kubeconfig {
            Some(file) => xcc_kube::flags::readable_file("--kubeconfig", file),
            None => Ok(()),
        }
    }
}

/// Where CoreDNS forwards the zones to, as its `forward` plugin writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardTo {
    /// Port 53.
    Ip(IpAddr),
    Socket(SocketAddr),
}

impl fmt::Display for ForwardTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForwardTo::Ip(ip) => ip.fmt(f),
            // `[v6]:port` for IPv6, which CoreDNS reads.
            ForwardTo::Socket(addr) => addr.fmt(f),
        }
    }
}

fn parse_forward_to(s: &str) -> Result<ForwardTo, String> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(ForwardTo::Ip(ip));
    }
    s.parse::<SocketAddr>().map(ForwardTo::Socket).map_err(|_| {
        format!("{s:?} is neither an IP address nor ip:port (such as 10.96.0.53 or [fd00::53]:53)")
    })
}

/// A zone goes into the Corefile verbatim, so anything that could change its syntax is refused.
/// A zone as xcc-agent serves it (no wildcard, no empty label), kept as written.
fn parse_zone(s: &str) -> Result<String, String> {
    let zone = s.trim();
    xcc_kube::flags::zone(zone)?;
    Ok(zone.to_string())
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
    fn every_flag_has_an_environment_variable() {
        for arg in Args::command().get_arguments() {
            let id = arg.get_id().as_str();
            if id != "help" && id != "version" {
                assert!(
                    arg.get_env().is_some(),
                    "--{id} has no environment variable"
                );
            }
        }
    }

    #[test]
    fn defaults_are_xccs() {
        let args = Args::try_parse_from(["xcc-coredns-patcher"]).unwrap();
        assert_eq!(args.dns_service_namespace, "xcc-dns");
        assert_eq!(args.dns_service_name, "dns-server");
        assert_eq!(args.corefile_configmap_namespace, "kube-system");
        assert_eq!(args.corefile_configmap_name, "coredns");
        assert_eq!(args.zone, ["xcc.test"]);
        assert_eq!(args.forward_to, None);
        assert_eq!(args.service_wait, Duration::from_secs(5));
        assert!(!args.remove);
        assert_eq!(args.coredns_wait, Duration::from_secs(180));
        assert_eq!(args.coredns_service, "kube-dns");
        assert_eq!(args.coredns_deployment, "coredns");
        assert!(!args.restart_coredns);
    }

    #[test]
    fn zones_repeat() {
        let args =
            Args::try_parse_from(["p", "--zone", "a.test", "--zone", "b.test,c.test"]).unwrap();
        assert_eq!(args.zone, ["a.test", "b.test", "c.test"]);
    }

    #[test]
    fn zones_that_would_break_the_corefile_are_refused() {
        for bad in ["", "a b", "a{", "x.test }", "a..b", "#x", ".", "*.test"] {
            assert!(parse_zone(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            parse_zone("Multi-Cluster.example.com.").unwrap(),
            "Multi-Cluster.example.com."
        );
    }

    #[test]
    fn forward_to_takes_an_ip_or_a_socket_address() {
        let parse = |s| parse_forward_to(s).map(|f| f.to_string());
        assert_eq!(parse("10.96.0.53").unwrap(), "10.96.0.53");
        assert_eq!(parse("10.96.0.53:5353").unwrap(), "10.96.0.53:5353");
        assert_eq!(parse("fd00::53").unwrap(), "fd00::53");
        assert_eq!(parse("[fd00::53]:53").unwrap(), "[fd00::53]:53");
        let err = parse("dns.example.com").unwrap_err();
        assert!(err.contains("neither an IP address nor ip:port"), "{err}");
        assert!(Args::try_parse_from(["p", "--forward-to", "10.0.0.300"]).is_err());
    }
}

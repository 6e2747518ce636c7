//! The command line. Every flag can also be set through the environment variable its help names.

use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum, ValueHint};

/// Exit codes, timeouts and completion, after the examples in `kubectl xcc --help`.
macro_rules! exit_codes {
    () => {
        "Exit codes:
  0  success
  1  error: a cluster could not be reached or refused a request, a kubeconfig was refused,
     a conflict (the message says what to do)
  2  usage: an unknown flag, command or context, or an invalid name

Timeouts: --request-timeout bounds each connection and API call, as kubectl's (default 10s, 0 for
none); --timeout bounds a wait for a condition (link). Commands that wait for nothing still accept
--timeout as the former name of --request-timeout, so existing scripts keep working.

Shell completion: see `kubectl xcc completion --help`.

Errors are one line on stderr. A command that fails changes nothing: everything is read and
checked before the first write. (link: if the service cluster's agent gives no usable kubeconfig
in time, the UpstreamClusterLink it applied stays, and nothing is written on the workload cluster.)"
    };
}

/// kubectl xcc: join clusters into a group, register plumber targets, see the state of
/// everything xcc does, and explain the agent's DNS answers.
///
/// Install: put the `kubectl-xcc` binary on PATH; kubectl then runs it as `kubectl xcc`.
/// Contexts come from your kubeconfig as kubectl finds it: --kubeconfig, else $KUBECONFIG,
/// else ~/.kube/config.
/// The `Examples:` sections of `--help`, as kubectl's.
mod examples {
    /// The root command's (a macro, to join it with the exit codes in `--help`).
    macro_rules! root {
        () => {
            "Examples:
  # Every xcc object of the current context, Ready or not
  kubectl xcc status

  # Join three clusters into a group
  kubectl xcc cluster join --context a --context b --context c

  # Why the agent answers what it answers
  kubectl xcc dns kuard.gateway.cluster-a.dev-team.clusters.xcc.test

  # Completion for bash, for `kubectl xcc` and `kubectl-xcc`
  source <(kubectl xcc completion bash)"
        };
    }
    pub(crate) use root;

    pub const PLUMBER: &str = "Examples:
  # Record the primary cluster, register a target, list the targets
  kubectl xcc plumber activate -p ~/.kube/config -a primary
  kubectl xcc plumber add -c secondary
  kubectl xcc plumber view -o yaml";

    pub const PLUMBER_ACTIVATE: &str = "Examples:
  # Test the connection to the primary cluster and record it
  kubectl xcc plumber activate -p ~/.kube/config -a primary";

    pub const PLUMBER_ADD: &str = "Examples:
  # Replicate to the cluster of context secondary
  kubectl xcc plumber add -c secondary";

    pub const PLUMBER_REMOVE: &str = "Examples:
  # Stop replicating to the cluster of context secondary
  kubectl xcc plumber remove --context secondary";

    pub const PLUMBER_VIEW: &str = "Examples:
  # The registered contexts, as a table or as JSON
  kubectl xcc plumber view
  kubectl xcc plumber view -o json";

    pub const CLUSTER: &str = "Examples:
  # Form a group of three clusters, then add a fourth
  kubectl xcc cluster join --context a,b,c
  kubectl xcc cluster join --context a --context d

  # Take cluster d out of its group
  kubectl xcc cluster leave --context d";

    pub const JOIN: &str = "Examples:
  # Form a group of three clusters (one flag each, or separated with commas)
  kubectl xcc cluster join --context a --context b --context c
  kubectl xcc cluster join --context a,b,c

  # Add cluster d to the group a belongs to, with reader tokens valid for 30 days
  kubectl xcc cluster join --context a,d --token-ttl 720h";

    pub const LEAVE: &str = "Examples:
  # Take cluster d out of its group (its reader tokens are revoked)
  kubectl xcc cluster leave --context d";

    pub const LINK: &str = "Examples:
  # Project the service cluster's APIs into the workload cluster
  kubectl xcc link --service-context services --workload-context workload

  # In namespace team-a, named w-1, waiting up to two minutes for each link
  kubectl xcc link --service-context services --workload-context workload -n team-a --name w-1 --timeout 2m";

    pub const STATUS: &str = "Examples:
  # xcc objects of the current context: cluster-scoped ones, and the namespaced ones of the
  # context's namespace
  kubectl xcc status

  # The namespaced ones of every namespace, as JSON
  kubectl xcc status -A -o json

  # Of namespace dev-team, on context second
  kubectl xcc status --context second -n dev-team";

    pub const DNS: &str = "Examples:
  # The agent's answer for a name, through the API server's service proxy
  kubectl xcc dns kuard.gateway.cluster-a.dev-team.clusters.xcc.test

  # Its AAAA answer, asking the agent's admin port directly
  kubectl xcc dns kuard.gateway.cluster-a.dev-team.clusters.xcc.test --type AAAA --agent-url http://127.0.0.1:9180";

    pub const COMPLETION: &str = "Examples:
  # bash (completes both `kubectl xcc` and `kubectl-xcc`; load it after kubectl's own
  # `source <(kubectl completion bash)` if you use that)
  source <(kubectl xcc completion bash)
  kubectl xcc completion bash > /etc/bash_completion.d/kubectl-xcc

  # zsh and fish complete `kubectl-xcc`; for `kubectl xcc`, kubectl's own completion asks
  # kubectl_complete-xcc (kubectl 1.26 and later), a link to this binary:
  kubectl xcc completion zsh > \"${fpath[1]}/_kubectl-xcc\"
  kubectl xcc completion fish > ~/.config/fish/completions/kubectl-xcc.fish
  ln -s \"$(command -v kubectl-xcc)\" \"$(dirname \"$(command -v kubectl-xcc)\")/kubectl_complete-xcc\"";
}

/// kubectl xcc: join clusters into a group, register plumber targets, see the state of
/// everything xcc does, and explain the agent's DNS answers.
///
/// Install: put the `kubectl-xcc` binary on PATH; kubectl then runs it as `kubectl xcc`.
/// Contexts come from your kubeconfig as kubectl finds it: --kubeconfig, else $KUBECONFIG,
/// else ~/.kube/config.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-xcc",
    bin_name = "kubectl xcc",
    version = xcc_kube::metrics::VERSION,
    after_help = examples::root!(),
    after_long_help = concat!(examples::root!(), "\n\n", exit_codes!()),
    // The logging flags of every xcc binary, after any subcommand too, and quiet by default: a
    // command's outcome is its output on stdout and one line on stderr.
    mut_arg("level", |arg| arg.global(true).help(
        "Diagnostics on stderr: a level (error, warn, info, debug, trace), a RUST_LOG-style \
         filter such as `warn,kube=debug`, or a klog verbosity as kubectl's (`-v 4`, `--v=4`: \
         0-1 info, 2-3 debug for xcc's own code, 4 debug, 5 and more trace). Default: \
         $RUST_LOG, else warnings only; a failed command says why in one line on stderr either \
         way"
    )),
    mut_arg("format", |arg| arg.global(true)),
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,

    /// Diagnostics on stderr (`--log-level`, `--log-format`), as every xcc binary takes them.
    #[command(flatten)]
    pub log: xcc_kube::logging::LogArgs,
}

/// The filter of diagnostics when neither the flags nor the environment name one: warnings, but
/// not the client's own line for each failed request, which the command's error line already
/// says (so that a failure stays one line).
pub const DEFAULT_LOG: &str = "warn,kube_client::client::builder=off";

/// The subcommands of `kubectl xcc`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// plumberctl's commands: register the clusters plumber replicates to (the Secret
    /// `config`, key `config`, in namespace `kubeconfig` of the primary cluster, as plumberctl).
    #[command(after_help = examples::PLUMBER)]
    Plumber(PlumberArgs),
    /// Cluster groups (cluster-registry): join clusters with one command, or leave.
    #[command(after_help = examples::CLUSTER)]
    Cluster {
        /// Join or leave.
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Link a service cluster with a workload cluster for API projection: UpstreamClusterLink on
    /// the service cluster, a copy of the kubeconfig its agent makes, and DownstreamClusterLink
    /// on the workload cluster; waits until both are Ready. Idempotent.
    ///
    /// The copied kubeconfig holds a short-lived token (a day): the workload cluster's agent
    /// renews it in place with the service cluster in its last third (the link's ServiceAccount
    /// may request its own tokens). Running `kubectl xcc link` again also refreshes the copy.
    ///
    /// Refuses, before writing anything, links or a Secret of the same name that it did not
    /// make, or that it made for another pair of clusters.
    #[command(after_help = examples::LINK)]
    Link(LinkArgs),
    /// One table of every xcc object this context sees (Clusters, SecretExports/Imports,
    /// ResourceSyncRules, GatewayDNS, Replicators, ClusterDetectors) with its Ready state and
    /// reason. Kinds whose CRD is not installed are named in the footer.
    ///
    /// Cluster-scoped kinds (Clusters, ResourceSyncRules, Replicators) are always listed; the
    /// namespaced ones of one namespace, as kubectl get: -n, else the context's namespace, else
    /// `default`; -A for every namespace.
    #[command(after_help = examples::STATUS)]
    Status(StatusArgs),
    /// Ask the agent why it answers what it answers for a DNS name: the answer, and the
    /// EndpointSlice, GatewayDNS and cluster it came from.
    #[command(after_help = examples::DNS)]
    Dns(DnsArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    ///
    /// The bash script completes `kubectl-xcc ...` and `kubectl xcc ...`: it wraps kubectl's
    /// completion (loaded before it, or later by bash-completion) and completes the words after
    /// `kubectl xcc` itself, asking `kubectl-xcc __complete` (so kubectl-xcc must be on PATH).
    ///
    /// kubectl 1.26 and later complete a plugin's arguments by running `kubectl_complete-xcc`
    /// from PATH (for every shell kubectl completes): this binary answers when run under that
    /// name, so a link named kubectl_complete-xcc to it, next to it, is all it takes.
    /// This is how zsh and fish complete `kubectl xcc`, and bash when kubectl's completion is
    /// loaded after this script.
    #[command(alias = "completions", after_help = examples::COMPLETION)]
    Completion {
        /// The shell whose script to print.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Output format of listings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    #[default]
    Table,
    Json,
    Yaml,
}

/// The per-request timeout when neither --request-timeout nor its former name is given.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// kubectl's `--request-timeout` value: seconds (`5`), a duration (`10s`, `1m`, `1h30m`), or
/// `0` for none.
pub fn parse_request_timeout(text: &str) -> Result<Duration, String> {
    xcc_kube::flags::request_timeout(text)
}

/// Where the kubeconfig is, and how long an API call may take.
#[derive(Clone, Debug, Args)]
pub struct KubeArgs {
    /// Kubeconfig file (default: the files in $KUBECONFIG, else ~/.kube/config).
    #[arg(long, env = "XCC_KUBECONFIG", value_hint = ValueHint::FilePath)]
    pub kubeconfig: Option<PathBuf>,

    /// How long each connection and API call may take, as kubectl's --request-timeout
    /// (seconds such as 5, or 10s, 1m; 0: no limit; up to 24h) [default: 10s].
    #[arg(long, env = "XCC_REQUEST_TIMEOUT", value_parser = parse_request_timeout)]
    pub request_timeout: Option<Duration>,

    /// The former name of --request-timeout, still accepted.
    #[arg(long = "timeout", env = "XCC_TIMEOUT", hide = true, value_parser = parse_request_timeout)]
    pub former_timeout: Option<Duration>,
}

impl KubeArgs {
    /// The per-request timeout (zero: none).
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
            .or(self.former_timeout)
            .unwrap_or(REQUEST_TIMEOUT)
    }
}

#[derive(Debug, Args)]
pub struct PlumberArgs {
    #[command(subcommand)]
    pub command: PlumberCommand,

    /// Where `activate` records the kubeconfig path and primary context (default:
    /// ~/.plumber/config.toml, as plumberctl).
    #[arg(long, env = "XCC_PLUMBER_ACTIVATION", global = true, value_hint = ValueHint::FilePath)]
    pub activation_file: Option<PathBuf>,

    /// plumber's namespace on the primary cluster, where xcc 0.1 kept its Secret `kubeconfig`
    /// (still read for one release; plumberctl's Secret is `config` in namespace `kubeconfig`).
    #[arg(
        long,
        env = "XCC_PLUMBER_NAMESPACE",
        default_value = "plumber-system",
        global = true
    )]
    pub namespace: String,

    /// How long each connection and API call may take, as kubectl's --request-timeout
    /// (seconds such as 5, or 10s, 1m; 0: no limit; up to 24h) [default: 10s].
    #[arg(long, env = "XCC_REQUEST_TIMEOUT", value_parser = parse_request_timeout, global = true)]
    pub request_timeout: Option<Duration>,

    /// The former name of --request-timeout, still accepted.
    #[arg(long = "timeout", env = "XCC_TIMEOUT", hide = true, value_parser = parse_request_timeout, global = true)]
    pub former_timeout: Option<Duration>,
}

impl PlumberArgs {
    /// The per-request timeout (zero: none).
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
            .or(self.former_timeout)
            .unwrap_or(REQUEST_TIMEOUT)
    }
}

#[derive(Debug, Subcommand)]
pub enum PlumberCommand {
    /// Test the connection to the primary cluster (where the agent runs plumber) and record the
    /// kubeconfig file and context for the other commands.
    #[command(after_help = examples::PLUMBER_ACTIVATE)]
    Activate {
        /// Path of the kubeconfig file.
        #[arg(short = 'p', long, env = "XCC_PLUMBER_PATH", value_hint = ValueHint::FilePath)]
        path: PathBuf,
        /// Context of the primary cluster.
        #[arg(short = 'a', long, env = "XCC_PLUMBER_ACTIVATE_CONTEXT")]
        activate_context: String,
    },
    /// Add a target cluster: its context (cluster, user, credentials) is copied from the
    /// activated kubeconfig into the Secret; plumber then creates ClusterDetector
    /// `<cluster>.<user>`. Credentials the trust rules refuse (exec, auth-provider, file
    /// paths, insecure TLS) are refused here, naming the field.
    #[command(after_help = examples::PLUMBER_ADD)]
    Add {
        /// Context of the cluster to replicate to.
        #[arg(short = 'c', long, env = "XCC_PLUMBER_TARGET_CONTEXT")]
        target_context: String,
    },
    /// Remove a target cluster's context (and its cluster and user entries, when no other
    /// context uses them) from the Secret.
    #[command(after_help = examples::PLUMBER_REMOVE)]
    Remove {
        /// Context to remove.
        #[arg(short = 'c', long = "context", env = "XCC_PLUMBER_CONTEXT")]
        context: String,
    },
    /// Show the registered contexts.
    #[command(after_help = examples::PLUMBER_VIEW)]
    View {
        #[arg(short = 'o', long, env = "XCC_OUTPUT", value_enum, default_value_t)]
        output: Output,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Form a group: on every cluster its own Cluster (if missing) and reader Secret, and on
    /// every other cluster a Cluster and Secret for it. Idempotent; run it again to renew the
    /// reader tokens or to add a cluster (name one member of the group and the new one).
    #[command(after_help = examples::JOIN)]
    Join(JoinArgs),
    /// Undo what join did for one cluster: its reader tokens are revoked (its reader
    /// ServiceAccount is recreated), its Cluster and Secret are deleted on its peers (found
    /// through the Secrets it holds, reached through the context of your kubeconfig with the
    /// same server), the peers' on it, and its own Cluster and Secret if join created them.
    /// Join again to rejoin.
    #[command(after_help = examples::LEAVE)]
    Leave(LeaveArgs),
}

/// Where the cluster-registry objects and the reader ServiceAccount live.
#[derive(Clone, Debug, Args)]
pub struct RegistryArgs {
    /// Namespace of the peer kubeconfig Secrets.
    #[arg(
        long,
        env = "XCC_REGISTRY_NAMESPACE",
        default_value = "cluster-registry"
    )]
    pub registry_namespace: String,

    /// Namespace of the reader ServiceAccount (manifests/agent/cluster-registry.yaml).
    #[arg(long, env = "XCC_READER_NAMESPACE", default_value = "xcc-dns")]
    pub reader_namespace: String,

    /// Name of the reader ServiceAccount whose token peers use to read a cluster.
    #[arg(long, env = "XCC_READER", default_value = "xcc-cluster-reader")]
    pub reader: String,
}

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// A context to join; give two or more (repeat the flag, or separate with commas).
    #[arg(
        long = "context",
        env = "XCC_JOIN_CONTEXTS",
        value_delimiter = ',',
        required = true
    )]
    pub contexts: Vec<String>,

    /// Lifetime requested for the reader tokens (the API server may shorten it; 10m to 87600h).
    #[arg(
        long,
        env = "XCC_TOKEN_TTL",
        default_value = "8760h",
        value_name = "DURATION",
        value_parser = xcc_kube::flags::duration(Duration::from_secs(600), Duration::from_secs(87_600 * 3600))
    )]
    pub token_ttl: Duration,

    #[command(flatten)]
    pub registry: RegistryArgs,

    #[command(flatten)]
    pub kube: KubeArgs,
}

#[derive(Debug, Args)]
pub struct LeaveArgs {
    /// Context of the cluster that leaves its group.
    #[arg(long, env = "XCC_CONTEXT")]
    pub context: String,

    #[command(flatten)]
    pub registry: RegistryArgs,

    #[command(flatten)]
    pub kube: KubeArgs,
}

/// `kubectl xcc link`: the two contexts, and the names of what it makes.
#[derive(Debug, Args)]
pub struct LinkArgs {
    /// Context of the service cluster (upstream: where the API's resources live). Gets
    /// UpstreamClusterLink NAMESPACE/NAME; its agent makes the kubeconfig Secret NAME-kubeconfig.
    #[arg(long, env = "XCC_SERVICE_CONTEXT")]
    pub service_context: String,

    /// Context of the workload cluster (downstream: where the API is projected to). Gets Secret
    /// NAME-upstream-kubeconfig (a copy of that kubeconfig) and DownstreamClusterLink
    /// NAMESPACE/NAME, whose agent generates the proxy's TLS Secret NAME-proxy-tls.
    #[arg(long, env = "XCC_WORKLOAD_CONTEXT")]
    pub workload_context: String,

    /// Namespace of the links and Secrets on both clusters (created when missing). The agent
    /// needs its RoleBinding xcc-agent-projection-link there (manifests/agent/projection.yaml
    /// has it for services-toolkit).
    #[arg(
        short = 'n',
        long,
        env = "XCC_LINK_NAMESPACE",
        default_value = crate::link::DEFAULT_NAMESPACE
    )]
    pub namespace: String,

    /// Name of both links (default: the workload context's name, lower-cased, every run of
    /// characters other than a-z and 0-9 turned into one `-`, `link-` in front unless it starts
    /// with a letter, cut to 57 characters). A lowercase RFC 1035 label of at most 57
    /// characters, so that the Service NAME-proxy is valid.
    #[arg(long, env = "XCC_LINK_NAME")]
    pub name: Option<String>,

    /// How long to wait for each link to become Ready (e.g. 60s, 2m). Each API call is bounded
    /// by --request-timeout (1s to 24h).
    #[arg(
        long,
        env = "XCC_LINK_TIMEOUT",
        default_value = "60s",
        value_name = "DURATION",
        value_parser = xcc_kube::flags::duration(Duration::from_secs(1), Duration::from_secs(86_400))
    )]
    pub timeout: Duration,

    /// Kubeconfig file (default: the files in $KUBECONFIG, else ~/.kube/config).
    #[arg(long, env = "XCC_KUBECONFIG", value_hint = ValueHint::FilePath)]
    pub kubeconfig: Option<PathBuf>,

    /// How long each connection and API call may take, as kubectl's --request-timeout
    /// (seconds such as 5, or 10s, 1m; 0: no limit; up to 24h).
    #[arg(long, env = "XCC_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_request_timeout)]
    pub request_timeout: Duration,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Context to look at (default: the current context).
    #[arg(long, env = "XCC_CONTEXT")]
    pub context: Option<String>,

    /// Namespace of the namespaced kinds (default: the context's namespace, else `default`).
    #[arg(short = 'n', long, env = "XCC_STATUS_NAMESPACE")]
    pub namespace: Option<String>,

    /// The namespaced kinds of every namespace (instead of one).
    #[arg(short = 'A', long, env = "XCC_ALL_NAMESPACES")]
    pub all_namespaces: bool,

    #[arg(short = 'o', long, env = "XCC_OUTPUT", value_enum, default_value_t)]
    pub output: Output,

    #[command(flatten)]
    pub kube: KubeArgs,
}

#[derive(Debug, Args)]
pub struct DnsArgs {
    /// The name to explain, e.g. kuard.gateway.cluster-a.dev-team.clusters.xcc.test.
    pub name: String,

    /// Record type.
    #[arg(long = "type", env = "XCC_DNS_TYPE", value_enum, default_value_t)]
    pub qtype: QueryType,

    /// The agent's admin URL (e.g. http://127.0.0.1:9180), used instead of the API server's
    /// service proxy.
    #[arg(long, env = "XCC_AGENT_URL")]
    pub agent_url: Option<String>,

    /// Namespace of the agent's admin Service (reached through the API server's service proxy).
    #[arg(long, env = "XCC_AGENT_NAMESPACE", default_value = "xcc-dns")]
    pub agent_namespace: String,

    /// Name of the agent's admin Service.
    #[arg(long, env = "XCC_AGENT_SERVICE", default_value = "xcc-agent-admin")]
    pub agent_service: String,

    /// Port (name or number) of the agent's admin Service.
    #[arg(long, env = "XCC_AGENT_PORT", default_value = "admin")]
    pub agent_port: String,

    /// Context whose API server proxies to the agent (default: the current context).
    #[arg(long, env = "XCC_CONTEXT")]
    pub context: Option<String>,

    #[arg(short = 'o', long, env = "XCC_OUTPUT", value_enum, default_value_t)]
    pub output: Output,

    #[command(flatten)]
    pub kube: KubeArgs,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum QueryType {
    #[default]
    #[value(name = "A", alias = "a")]
    A,
    #[value(name = "AAAA", alias = "aaaa")]
    Aaaa,
}

impl QueryType {
    pub fn as_str(self) -> &'static str {
        match self {
            QueryType::A => "A",
            QueryType::Aaaa => "AAAA",
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, error::ErrorKind};

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubectl-xcc").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn plumberctl_flags_keep_their_short_forms() {
        let cli = parse(&["plumber", "activate", "-p", "/k", "-a", "primary"]).unwrap();
        match cli.command {
            Command::Plumber(PlumberArgs {
                command:
                    PlumberCommand::Activate {
                        path,
                        activate_context,
                    },
                namespace,
                ..
            }) => {
                assert_eq!(path, PathBuf::from("/k"));
                assert_eq!(activate_context, "primary");
                assert_eq!(namespace, "plumber-system");
            }
            other => panic!("{other:?}"),
        }
        let cli = parse(&["plumber", "add", "-c", "second"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Plumber(PlumberArgs { command: PlumberCommand::Add { target_context }, .. })
                if target_context == "second"
        ));
        let cli = parse(&["plumber", "remove", "--context", "second"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Plumber(PlumberArgs { command: PlumberCommand::Remove { context }, .. })
                if context == "second"
        ));
        let cli = parse(&["plumber", "view", "-o", "json"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Plumber(PlumberArgs {
                command: PlumberCommand::View {
                    output: Output::Json
                },
                ..
            })
        ));
    }

    #[test]
    fn join_takes_repeated_or_comma_separated_contexts() {
        for args in [
            &[
                "cluster",
                "join",
                "--context",
                "a",
                "--context",
                "b",
                "--context",
                "c",
            ][..],
            &["cluster", "join", "--context", "a,b,c"][..],
        ] {
            match parse(args).unwrap().command {
                Command::Cluster {
                    command: ClusterCommand::Join(join),
                } => {
                    assert_eq!(join.contexts, ["a", "b", "c"]);
                    assert_eq!(join.registry.registry_namespace, "cluster-registry");
                    assert_eq!(join.kube.request_timeout(), Duration::from_secs(10));
                }
                other => panic!("{other:?}"),
            }
        }
        let e = parse(&["cluster", "join"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MissingRequiredArgument);
    }

    #[test]
    fn bad_values_are_usage_errors() {
        let e = parse(&["status", "-o", "xml"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        let e = parse(&["dns", "x.xcc.test", "--type", "TXT"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
        let e = parse(&["link", "--service-context", "s"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MissingRequiredArgument);
        let e = parse(&["frobnicate"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidSubcommand);
    }

    #[test]
    fn dns_defaults_to_the_service_proxy_and_type_a() {
        match parse(&["dns", "x.xcc.test", "--type", "aaaa"])
            .unwrap()
            .command
        {
            Command::Dns(dns) => {
                assert_eq!(dns.qtype, QueryType::Aaaa);
                assert_eq!(dns.agent_url, None);
                assert_eq!(dns.agent_service, "xcc-agent-admin");
                assert_eq!(dns.agent_port, "admin");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn help_documents_the_exit_codes() {
        let help = Cli::command().render_long_help().to_string();
        for line in ["0  success", "2  usage"] {
            assert!(help.contains(line), "{help}");
        }
        assert!(!help.contains("3  not available"), "{help}");
    }

    #[test]
    fn link_defaults_to_the_references_namespace_and_a_minute() {
        match parse(&["link", "--service-context", "s", "--workload-context", "w"])
            .unwrap()
            .command
        {
            Command::Link(link) => {
                assert_eq!(link.service_context, "s");
                assert_eq!(link.workload_context, "w");
                assert_eq!(link.namespace, "services-toolkit");
                assert_eq!(link.name, None);
                assert_eq!(link.timeout, Duration::from_secs(60));
                assert_eq!(link.request_timeout, Duration::from_secs(10));
                assert_eq!(link.kubeconfig, None);
            }
            other => panic!("{other:?}"),
        }
        match parse(&[
            "link",
            "--service-context=s",
            "--workload-context=w",
            "-n",
            "team-a",
            "--name",
            "w-1",
            "--timeout",
            "2m",
            "--request-timeout",
            "3s",
        ])
        .unwrap()
        .command
        {
            Command::Link(link) => {
                assert_eq!(link.namespace, "team-a");
                assert_eq!(link.name.as_deref(), Some("w-1"));
                assert_eq!(link.timeout, Duration::from_secs(120));
                assert_eq!(link.request_timeout, Duration::from_secs(3));
            }
            other => panic!("{other:?}"),
        }
        let e = parse(&[
            "link",
            "--service-context=s",
            "--workload-context=w",
            "--timeout",
            "soon",
        ])
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        let help = Cli::command()
            .find_subcommand_mut("link")
            .unwrap()
            .render_long_help()
            .to_string();
        for text in [
            "[env: XCC_LINK_NAME=]",
            "again",
            "services-toolkit",
            "57 characters",
        ] {
            assert!(help.contains(text), "{text:?} not in {help}");
        }
    }

    #[test]
    fn every_command_has_kubectl_style_examples() {
        fn check(command: &clap::Command, path: &str) {
            let help = command.clone().render_help().to_string();
            let examples = help
                .split_once("Examples:\n")
                .unwrap_or_else(|| panic!("no examples in {path} --help: {help}"))
                .1;
            let lines: Vec<&str> = examples.lines().map(str::trim).collect();
            assert!(
                lines
                    .iter()
                    .any(|l| l.starts_with(&format!("{path} ")) || *l == path),
                "no `{path}` line in the examples: {examples}"
            );
            for line in lines.iter().filter(|l| !l.is_empty()) {
                assert!(
                    line.starts_with('#')
                        || line.starts_with("kubectl xcc ")
                        || line.starts_with("source ")
                        || line.starts_with("ln "),
                    "{path}: {line:?}"
                );
            }
            for sub in command.get_subcommands() {
                check(sub, &format!("{path} {}", sub.get_name()));
            }
        }
        check(&Cli::command(), "kubectl xcc");
    }

    #[test]
    fn request_timeout_is_kubectls_and_timeout_its_former_name() {
        let timeout = |args: &[&str]| match parse(args).unwrap().command {
            Command::Status(status) => status.kube.request_timeout(),
            other => panic!("{other:?}"),
        };
        assert_eq!(timeout(&["status"]), Duration::from_secs(10));
        assert_eq!(
            timeout(&["status", "--request-timeout", "3s"]),
            Duration::from_secs(3)
        );
        assert_eq!(timeout(&["status", "--request-timeout=0"]), Duration::ZERO);
        assert_eq!(
            timeout(&["status", "--timeout", "4s"]),
            Duration::from_secs(4)
        );
        assert_eq!(
            timeout(&["status", "--timeout", "4s", "--request-timeout", "5s"]),
            Duration::from_secs(5)
        );
        match parse(&["plumber", "view", "--request-timeout", "2m"])
            .unwrap()
            .command
        {
            Command::Plumber(plumber) => {
                assert_eq!(plumber.request_timeout(), Duration::from_secs(120))
            }
            other => panic!("{other:?}"),
        }
        // A bare number is seconds, as kubectl reads it.
        assert_eq!(
            timeout(&["status", "--request-timeout", "5"]),
            Duration::from_secs(5)
        );
        let e = parse(&["status", "--request-timeout", "soon"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(e.to_string().contains("0 for no limit"), "{e}");
        // The former name is accepted, not advertised.
        let help = Cli::command()
            .find_subcommand_mut("status")
            .unwrap()
            .render_long_help()
            .to_string();
        assert!(help.contains("--request-timeout"), "{help}");
        assert!(!help.contains("--timeout"), "{help}");
    }

    #[test]
    fn status_takes_namespace_flags_as_kubectl() {
        match parse(&["status", "-n", "team-a"]).unwrap().command {
            Command::Status(status) => {
                assert_eq!(status.namespace.as_deref(), Some("team-a"));
                assert!(!status.all_namespaces);
            }
            other => panic!("{other:?}"),
        }
        match parse(&["status", "-A"]).unwrap().command {
            Command::Status(status) => assert!(status.all_namespaces),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn completion_is_kubectls_spelling_and_completions_still_works() {
        for spelling in ["completion", "completions"] {
            assert!(matches!(
                parse(&[spelling, "zsh"]).unwrap().command,
                Command::Completion {
                    shell: clap_complete::Shell::Zsh
                }
            ));
        }
        let help = Cli::command().render_help().to_string();
        assert!(help.contains("completion "), "{help}");
        assert!(!help.contains("completions"), "{help}");
    }
}

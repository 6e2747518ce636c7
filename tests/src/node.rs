//! Real nodes: a kubelet, containerd and kube-proxy per chosen cluster, running pods.
//!
//! ```rust,ignore
//! let bed = Testbed::start_with_nodes(&binaries, &["cluster-a", "cluster-b"], &["cluster-a", "cluster-b"]).await?;
//! let a = bed.cluster("cluster-a");
//! let node = a.node().expect("cluster-a has a node");
//! a.apply_yaml(DEPLOYMENT).await?;                       // image: xcc:0.1.0, busybox, ...
//! a.wait_rollout("default", "web", Duration::from_secs(60)).await?;
//! let out = a.exec("default", "client", &["nslookup", "kubernetes.default.svc.cluster.local"]).await?;
//! ```
//!
//! [`Testbed::start_with_nodes`](crate::Testbed::start_with_nodes) gives each chosen cluster:
//! - its API server on `0.0.0.0:<port>`, advertised at the host's address on the test network
//!   (pods reach it through the `kubernetes` Service), serving a certificate for 127.0.0.1, that
//!   address and the first IP of the cluster's Service range; `Node,RBAC` authorization with the
//!   `NodeRestriction` admission plugin, client certificates (the kubelet is `system:node:<node>`
//!   in `system:nodes`; the API server reaches kubelets with its own client certificate, so
//!   `kubectl logs` / `exec` work), its own Service range, and aggregated APIs / webhooks reached
//!   at their endpoints (`--enable-aggregator-routing`; the host routes pod ranges to the nodes,
//!   except in [`NetworkMode::IdenticalRanges`]);
//! - (every cluster of the bed, with a node or not, also listens on `0.0.0.0` with the host's
//!   address in its certificate: pods reach it at [`Cluster::url_from_pods`](crate::Cluster::url_from_pods));
//! - kube-controller-manager (every default controller; `--root-ca-file` publishes the
//!   `kube-root-ca.crt` ConfigMap pods verify the API server with) and kube-scheduler, on the host;
//! - one node `<cluster>-node`: containerd (own root, state and socket, `restrict_oom_score_adj`,
//!   the test bed's images imported, see [`crate::images`]), kubelet and kube-proxy (iptables);
//! - CoreDNS as kubeadm deploys it (ConfigMap `coredns`, Deployment `coredns`, Service
//!   `kube-dns` at the `.10` of the Service range), Ready before `start_with_nodes` returns;
//! - a LoadBalancer controller (a task of the test): each `type: LoadBalancer` Service gets the
//!   lowest free address of the cluster's pool in `status.loadBalancer.ingress`; kube-proxy then
//!   answers for it on the node, and the router sends the pool to that node.
//!
//! ## Isolation from the host
//! Each node lives in its own network namespace and mount namespace, held by a `sleep` process
//! made with `unshare`; containerd, kubelet and kube-proxy are started with
//! `nsenter -t <holder> -m -n`. In that mount namespace `/run` and `/var/lib` are private tmpfs,
//! `/var/log` is the node's folder of the test bed (pod logs are kept with the other logs), and
//! the `/proc/sys` files kubelet rewrites (`vm.overcommit_memory`, `kernel.panic`, ...) are shadowed by
//! plain files. Sysctls (`ip_forward`, `bridge-nf-call-iptables`) are set inside the node's
//! network namespace only; the host's are never written. Kubelet's `cgroupRoot` is a cgroup of
//! its own (`/xcc-testbed-<pid>-<bed>-<cluster>`) in every v1 hierarchy; containerd, kubelet and
//! kube-proxy go in its `daemons` child of the `pids` hierarchy, so that every process of the
//! node (daemons, shims, containers) is found there.
//!
//! ## Network
//! ```text
//!        host (API servers on 0.0.0.0)          172.30.<bed>.1/30  xcch<bed>
//!                    │ veth
//!        router netns (ip_forward=1)            172.30.<bed>.2/30
//!           │ veth                 │ veth
//!   node cluster-a netns     node cluster-b netns     172.30.<bed>.(4i+6)/30, default via the router
//!     cni0 bridge 10.(64+bed).(32i).0/19, ipMasq; kube-proxy; LB pool 10.250.(8·bed+i).0/24
//! ```
//! The host routes `172.30.<bed>.0/24`, every pod range and every LB pool to the router. The
//! router routes each LB pool to its node; what it does with pod ranges is the bed's
//! [`NetworkMode`]:
//! - [`NetworkMode::Isolated`] (the default): pod ranges only for packets from the host (a policy
//!   rule on its host link): a pod of cluster-b reaches cluster-a's LoadBalancer addresses, never
//!   cluster-a's pods;
//! - [`NetworkMode::Flat`]: pod ranges for packets from any node too, and the bridge does not
//!   masquerade (`ipMasq` off): pods of different clusters reach each other's pod addresses and
//!   see each other's pod address as the source, as on a flat pod network (Cilium ClusterMesh);
//! - [`NetworkMode::IdenticalRanges`]: every node cluster has the same pod range and the same
//!   Service range (the premise of the original XCC: no pod routing between clusters at all).
//!   Nothing routes pod ranges, not even the host: aggregated APIs and webhooks served at pod
//!   addresses do not work in this mode. Node addresses and LB pools stay distinct: a pod of
//!   cluster-b reaches cluster-a's node address (a NodePort) and LoadBalancer addresses, its
//!   source masqueraded to its node's address.
//!
//! `<bed>` is the first index whose host link `xcch<bed>` could be created, so concurrent test
//! beds (in this or another process) never share addresses.
//!
//! ## Cleanup
//! Dropping the test bed SIGKILLs every process in the node's cgroups and namespaces (daemons,
//! shims, containers) and the holders, removes the cgroups, and the namespaces, veths and routes go
//! with their last process. Should the test process die instead, the holders, router and daemons
//! die with it (`PR_SET_PDEATHSIG`), which removes the namespaces, veths and routes; whatever is
//! left in the cgroups of a dead test process is killed, and the cgroups removed, when the next
//! node test bed starts.

use std::{
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{
    Binaries,
    binaries::NodeBinaries,
    images::{self, Image},
    process::{Process, spawn},
};

/// The largest number of node test beds on one machine at once, and of nodes per test bed.
const MAX_BEDS: u8 = 32;
pub(crate) const MAX_NODES: usize = 8;

/// How the test network routes pod addresses between the node clusters of a bed (see the module
/// doc, "Network").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetworkMode {
    /// Pod ranges routed only for the host: pods of different clusters cannot reach each other's
    /// pod addresses, only LoadBalancer and node addresses.
    #[default]
    Isolated,
    /// Pod ranges routed between every node and the host, sources kept (no masquerade): a flat
    /// pod network across the clusters.
    Flat,
    /// Every node cluster has the same pod range and the same Service range; nothing routes pod
    /// ranges (not even the host); node addresses and LB pools stay distinct.
    IdenticalRanges,
}

/// What one node cluster gets: addresses, ranges and names, fixed before anything starts.
#[derive(Clone, Debug)]
pub struct NodePlan {
    /// Index of the cluster among the test bed's node clusters.
    pub index: usize,
    /// The bed's number: the third octet of its test network, so that beds do not collide.
    pub bed: u8,
    /// The cluster's name.
    pub cluster: String,
    /// The node's name, `<cluster>-node`.
    pub node_name: String,
    /// The host's address on the test network (where nodes and pods reach the API servers).
    pub host_ip: Ipv4Addr,
    /// The node's address.
    pub node_ip: Ipv4Addr,
    /// The router's end of the node's link (the node's default gateway).
    pub gateway_ip: Ipv4Addr,
    /// The cluster's Service range, e.g. `10.96.0.0/16`.
    pub service_cidr: String,
    /// The `kubernetes` Service's address (first of the Service range).
    pub kubernetes_ip: Ipv4Addr,
    /// The `kube-dns` Service's address (`.10` of the Service range).
    pub dns_ip: Ipv4Addr,
    /// The node's pod range.
    pub pod_cidr: String,
    /// The cluster's LoadBalancer pool, a /24.
    pub lb_pool: String,
    /// How the bed's network routes pod addresses.
    pub mode: NetworkMode,
    lb_base: Ipv4Addr,
}

impl NodePlan {
    fn new(bed: u8, index: usize, cluster: &str, mode: NetworkMode) -> NodePlan {
        let i = index as u8;
        // With identical ranges every cluster takes the first one's pod and Service ranges.
        let r = if mode == NetworkMode::IdenticalRanges {
            0
        } else {
            i
        };
        NodePlan {
            index,
            bed,
            cluster: cluster.to_string(),
            node_name: format!("{cluster}-node"),
            host_ip: Ipv4Addr::new(172, 30, bed, 1),
            node_ip: Ipv4Addr::new(172, 30, bed, 4 * i + 6),
            gateway_ip: Ipv4Addr::new(172, 30, bed, 4 * i + 5),
            service_cidr: format!("10.{}.0.0/16", 96 + r),
            kubernetes_ip: Ipv4Addr::new(10, 96 + r, 0, 1),
            dns_ip: Ipv4Addr::new(10, 96 + r, 0, 10),
            pod_cidr: format!("10.{}.{}.0/19", 64 + bed, 32 * r),
            lb_pool: format!("10.250.{}.0/24", 8 * bed + i),
            mode,
            lb_base: Ipv4Addr::new(10, 250, 8 * bed + i, 0),
        }
    }

    /// The `n`th address (1..=254) of the LoadBalancer pool.
    pub fn lb_address(&self, n: u8) -> Ipv4Addr {
        let [a, b, c, _] = self.lb_base.octets();
        Ipv4Addr::new(a, b, c, n)
    }

    /// Whether `ip` is in the LoadBalancer pool.
    pub fn in_lb_pool(&self, ip: Ipv4Addr) -> bool {
        ip.octets()[..3] == self.lb_base.octets()[..3]
    }
}

/// Runs `program args`, failing with its stderr.
pub(crate) fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `args` in the network (and, with `mount`, mount) namespace of `pid`.
fn run_in(pid: u32, mount: bool, args: &[&str]) -> anyhow::Result<String> {
    let target = pid.to_string();
    let mut full = vec!["-t", target.as_str(), "-n"];
    if mount {
        full.push("-m");
    }
    full.push("--");
    full.extend_from_slice(args);
    run("nsenter", &full)
}

/// Spawns `script` under `unshare` with `flags` and waits until it has touched `ready`.
fn holder(
    name: &str,
    flags: &[&str],
    script: &str,
    ready: &Path,
    log: &Path,
) -> anyhow::Result<Process> {
    let mut args: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
    args.extend(["/bin/sh".into(), "-ec".into(), script.into()]);
    let mut process = spawn(name, Path::new("/usr/bin/unshare"), &args, log)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready.exists() {
        if let Some(status) = process.exited() {
            bail!(
                "{name} exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default().trim()
            );
        }
        if Instant::now() > deadline {
            bail!("{name} not ready after 10 s; see {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(process)
}

/// The test network of one test bed: the router namespace and the host's link to it.
pub(crate) struct Network {
    host_link: String,
    router: Option<Process>,
    mode: NetworkMode,
}

impl Network {
    /// Makes the router and the host's link for up to `nodes` nodes, routing pod ranges as `mode`
    /// says; picks the first free bed index.
    pub fn create(
        dir: &Path,
        nodes: &[&str],
        mode: NetworkMode,
    ) -> anyhow::Result<(Network, Vec<NodePlan>)> {
        if nodes.len() > MAX_NODES {
            bail!("at most {MAX_NODES} node clusters per test bed");
        }
        sweep_dead_beds();
        let mut bed = None;
        for b in 0..MAX_BEDS {
            // Creating the host link is the lock: it fails when another test bed has index b.
            let host = format!("xcch{b}");
            let peer = format!("xccr{b}");
            if run(
                "ip",
                &["link", "add", &host, "type", "veth", "peer", "name", &peer],
            )
            .is_ok()
            {
                bed = Some(b);
                break;
            }
        }
        let bed = bed.context("no free test network: 32 node test beds run already")?;
        let host_link = format!("xcch{bed}");
        let mut network = Network {
            host_link: host_link.clone(),
            router: None,
            mode,
        };
        let ready = dir.join("router.ready");
        let router = holder(
            "router",
            &["--net"],
            &format!(
                "echo 1 > /proc/sys/net/ipv4/ip_forward; ip link set lo up; touch {}; exec sleep infinity",
                ready.display()
            ),
            &ready,
            &dir.join("router.log"),
        )?;
        let router_pid = router.pid();
        network.router = Some(router);
        let plans: Vec<NodePlan> = nodes
            .iter()
            .enumerate()
            .map(|(i, name)| NodePlan::new(bed, i, name, mode))
            .collect();
        let host_ip = format!("172.30.{bed}.1/30");
        let router_ip = format!("172.30.{bed}.2");
        let peer = format!("xccr{bed}");
        run(
            "ip",
            &["link", "set", &peer, "netns", &router_pid.to_string()],
        )?;
        run("ip", &["addr", "add", &host_ip, "dev", &host_link])?;
        run("ip", &["link", "set", &host_link, "up"])?;
        run_in(
            router_pid,
            false,
            &["ip", "link", "set", &peer, "name", "host"],
        )?;
        run_in(
            router_pid,
            false,
            &[
                "ip",
                "addr",
                "add",
                &format!("{router_ip}/30"),
                "dev",
                "host",
            ],
        )?;
        run_in(router_pid, false, &["ip", "link", "set", "host", "up"])?;
        // Pod ranges are routed (table 100) only for what comes from the host.
        run_in(
            router_pid,
            false,
            &[
                "ip", "rule", "add", "iif", "host", "lookup", "100", "pref", "100",
            ],
        )?;
        let mut host_routes = vec![format!("172.30.{bed}.0/24")];
        for plan in &plans {
            // Identical pod ranges cannot be routed: the host reaches no pod there.
            if mode != NetworkMode::IdenticalRanges {
                host_routes.push(plan.pod_cidr.clone());
            }
            host_routes.push(plan.lb_pool.clone());
        }
        for route in &host_routes {
            run(
                "ip",
                &["route", "add", route, "via", &router_ip, "dev", &host_link],
            )?;
        }
        Ok((network, plans))
    }

    fn router_pid(&self) -> u32 {
        self.router.as_ref().map_or(0, Process::pid)
    }

    /// The host's link (gone with the router's namespace).
    pub fn host_link(&self) -> &str {
        &self.host_link
    }

    /// Pid of the process that holds the router's network namespace.
    pub fn router_holder_pid(&self) -> u32 {
        self.router_pid()
    }

    /// Links the node (whose namespaces `holder_pid` holds) to the router.
    fn link_node(&self, plan: &NodePlan, holder_pid: u32) -> anyhow::Result<()> {
        let router = self.router_pid();
        let link = format!("node{}", plan.index);
        run_in(
            router,
            false,
            &[
                "ip",
                "link",
                "add",
                &link,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                &holder_pid.to_string(),
            ],
        )?;
        run_in(
            router,
            false,
            &[
                "ip",
                "addr",
                "add",
                &format!("{}/30", plan.gateway_ip),
                "dev",
                &link,
            ],
        )?;
        run_in(router, false, &["ip", "link", "set", &link, "up"])?;
        let node_ip = plan.node_ip.to_string();
        run_in(
            router,
            false,
            &["ip", "route", "add", &plan.lb_pool, "via", &node_ip],
        )?;
        match self.mode {
            // From the host only (the policy rule sends the host's packets to table 100).
            NetworkMode::Isolated => run_in(
                router,
                false,
                &[
                    "ip",
                    "route",
                    "add",
                    &plan.pod_cidr,
                    "via",
                    &node_ip,
                    "table",
                    "100",
                ],
            )?,
            // From anywhere: the main table.
            NetworkMode::Flat => run_in(
                router,
                false,
                &["ip", "route", "add", &plan.pod_cidr, "via", &node_ip],
            )?,
            NetworkMode::IdenticalRanges => String::new(),
        };
        run_in(
            holder_pid,
            false,
            &[
                "ip",
                "addr",
                "add",
                &format!("{}/30", plan.node_ip),
                "dev",
                "eth0",
            ],
        )?;
        run_in(holder_pid, false, &["ip", "link", "set", "eth0", "up"])?;
        run_in(
            holder_pid,
            false,
            &[
                "ip",
                "route",
                "add",
                "default",
                "via",
                &plan.gateway_ip.to_string(),
            ],
        )?;
        Ok(())
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        if let Some(mut router) = self.router.take() {
            router.kill();
        }
        // Normally gone with the router's namespace already.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The `/proc/sys` files kubelet rewrites: shadowed by plain files in the node's mount namespace.
const SHADOWED_SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// One real node of a cluster (and the cluster's controller-manager and scheduler).
pub struct Node {
    /// The node's name.
    pub name: String,
    /// Addresses and ranges of the node and its cluster.
    pub plan: NodePlan,
    dir: PathBuf,
    cgroup_root: String,
    holder: Option<Process>,
    containerd: Option<Process>,
    daemons: Mutex<Vec<Process>>,
    lb: Option<tokio::task::JoinHandle<()>>,
}

impl Node {
    /// The node's namespaces, link, cgroups and containerd with the images imported. The
    /// Kubernetes parts start with [`Node::start_kubernetes`] once the API server is ready.
    pub(crate) fn prepare(
        network: &Network,
        plan: &NodePlan,
        dir: &Path,
        images: &[Image],
    ) -> anyhow::Result<Node> {
        std::fs::create_dir_all(dir.join("log"))?;
        std::fs::create_dir_all(dir.join("sysctl"))?;
        std::fs::create_dir_all(dir.join("cni"))?;
        let cgroup_root = format!(
            "xcc-testbed-{}-{}-{}",
            std::process::id(),
            plan.bed,
            plan.cluster
        );
        let mut node = Node {
            name: plan.node_name.clone(),
            plan: plan.clone(),
            dir: dir.to_path_buf(),
            cgroup_root: cgroup_root.clone(),
            holder: None,
            containerd: None,
            daemons: Mutex::new(Vec::new()),
            lb: None,
        };
        node.make_cgroups()?;
        let d = dir.display();
        let mut script = String::from(
            "mount -t tmpfs -o mode=755 tmpfs /run\n\
             mount -t tmpfs -o mode=755 tmpfs /var/lib\n\
             mkdir -p /var/lib/kubelet /var/lib/cni\n",
        );
        script.push_str(&format!("mount --bind {d}/log /var/log\n"));
        for sysctl in SHADOWED_SYSCTLS {
            let file = format!("{d}/sysctl/{}", sysctl.replace('/', "."));
            script.push_str(&format!(
                "if [ -e /proc/sys/{sysctl} ]; then cat /proc/sys/{sysctl} > {file}; mount --bind {file} /proc/sys/{sysctl}; fi\n"
            ));
        }
        script.push_str(
            "ip link set lo up\n\
             echo 1 > /proc/sys/net/ipv4/ip_forward\n\
             if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables; fi\n",
        );
        let ready = dir.join("holder.ready");
        script.push_str(&format!("touch {}\nexec sleep infinity\n", ready.display()));
        node.holder = Some(holder(
            &format!("{}-holder", plan.cluster),
            &["--net", "--mount", "--propagation", "private"],
            &script,
            &ready,
            &dir.join("holder.log"),
        )?);
        network.link_node(plan, node.holder_pid())?;
        node.write_cni()?;
        node.start_containerd()?;
        node.import(images)?;
        Ok(node)
    }

    /// Pid of the process that holds the node's namespaces.
    pub fn holder_pid(&self) -> u32 {
        self.holder.as_ref().map_or(0, Process::pid)
    }

    /// The node's folder in the test bed (configs, `log/` = the node's `/var/log`, process logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The containerd socket of the node.
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// Kubelet's cgroup root (a folder of that name in every hierarchy of /sys/fs/cgroup).
    pub fn cgroup_root(&self) -> &str {
        &self.cgroup_root
    }

    /// Every cgroup folder of the node that exists now.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        cgroup_hierarchies()
            .into_iter()
            .map(|h| h.join(&self.cgroup_root))
            .filter(|p| p.exists())
            .collect()
    }

    /// Runs `args` inside the node's network and mount namespaces (e.g. `iptables-save`,
    /// `ctr --address <socket> ...`); returns stdout, fails with stderr.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        run_in(self.holder_pid(), true, args)
    }

    fn make_cgroups(&self) -> anyhow::Result<()> {
        for h in cgroup_hierarchies() {
            let dir = h.join(&self.cgroup_root);
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("creating cgroup {}", dir.display()))?;
            if h.ends_with("cpuset") {
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let parent = std::fs::read_to_string(h.join(f))?;
                    std::fs::write(dir.join(f), parent.trim())?;
                }
            }
        }
        std::fs::create_dir_all(self.daemons_cgroup())?;
        Ok(())
    }

    fn daemons_cgroup(&self) -> PathBuf {
        Path::new("/sys/fs/cgroup/pids")
            .join(&self.cgroup_root)
            .join("daemons")
    }

    /// Spawns `program args` in the node's namespaces, in the node's `daemons` cgroup.
    fn spawn_daemon(&self, name: &str, program: &Path, args: &[String]) -> anyhow::Result<Process> {
        // sh joins the cgroup ($0), then becomes nsenter into the holder's namespaces ($1).
        let mut full = vec![
            "-c".to_string(),
            "echo $$ > \"$0\"; holder=$1; shift; exec nsenter -t \"$holder\" -m -n -- \"$@\""
                .into(),
        ];
        full.push(
            self.daemons_cgroup()
                .join("cgroup.procs")
                .display()
                .to_string(),
        );
        full.push(self.holder_pid().to_string());
        full.push(program.display().to_string());
        full.extend(args.iter().cloned());
        spawn(
            &format!("{}-{name}", self.plan.cluster),
            Path::new("/bin/sh"),
            &full,
            &self.dir.join(format!("{name}.log")),
        )
    }

    fn write_cni(&self) -> anyhow::Result<()> {
        let conf = serde_json::json!({
            "cniVersion": "0.4.0",
            "name": "xcc-testbed",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": true,
                    // A flat network keeps pod sources; elsewhere what leaves the node is seen
                    // from the node's address (with identical ranges, a pod source would be
                    // ambiguous).
                    "ipMasq": self.plan.mode != NetworkMode::Flat,
                    "hairpinMode": true,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.plan.pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": true}},
            ],
        });
        std::fs::write(
            self.dir.join("cni/10-xcc-testbed.conflist"),
            serde_json::to_vec_pretty(&conf)?,
        )?;
        Ok(())
    }

    fn start_containerd(&mut self) -> anyhow::Result<()> {
        let d = self.dir.display();
        let config = format!(
            r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{d}/containerd.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"#,
            pause = images::PAUSE,
        );
        std::fs::write(self.dir.join("containerd.toml"), config)?;
        let process = self.spawn_daemon(
            "containerd",
            Path::new(&crate::binaries::which("containerd").context("containerd")?),
            &[format!("--config={d}/containerd.toml")],
        )?;
        self.containerd = Some(process);
        let socket = self.containerd_socket();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if let Some(status) = self.containerd.as_mut().and_then(Process::exited) {
                bail!(
                    "containerd of {} exited ({status}); see {}",
                    self.name,
                    self.dir.join("containerd.log").display()
                );
            }
            if Instant::now() > deadline {
                bail!("containerd of {} does not answer after 20 s", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Imports image archives into the node's containerd (namespace `k8s.io`, where the kubelet
    /// looks), in parallel. Parallel imports of images that share a layer can race in containerd
    /// (`blob sha256:... expected at ...: not found`): an image whose import failed is imported
    /// again, alone, once the others are done.
    pub fn import(&self, images: &[Image]) -> anyhow::Result<()> {
        let socket = self.containerd_socket().display().to_string();
        let import = |image: &Image| {
            Command::new("ctr")
                .args(["--address", &socket, "-n", "k8s.io", "images", "import"])
                .arg(&image.archive)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
        };
        let children: Vec<_> = images
            .iter()
            .map(|image| import(image).map(|c| (image, c)))
            .collect::<Result<_, _>>()?;
        let mut failed = Vec::new();
        for (image, child) in children {
            let out = child.wait_with_output()?;
            if !out.status.success() {
                failed.push(image);
            }
        }
        for image in failed {
            let out = import(image)?.wait_with_output()?;
            if !out.status.success() {
                bail!(
                    "ctr images import {} on {}: {}",
                    image.reference,
                    self.name,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(())
    }

    /// Starts kube-controller-manager and kube-scheduler (on the host) and kubelet and
    /// kube-proxy (on the node) for `cluster`, whose API server listens on `port`.
    pub(crate) fn start_kubernetes(
        &self,
        binaries: &Binaries,
        node_bins: &NodeBinaries,
        cluster_dir: &Path,
        admin_kubeconfig: &Path,
        admin_token: &str,
        port: u16,
    ) -> anyhow::Result<()> {
        let p = |f: &str| cluster_dir.join(f).display().to_string();
        let d = &self.dir;
        let server = format!("https://{}:{port}", self.plan.host_ip);
        std::fs::write(
            d.join("kubelet.kubeconfig"),
            format!(
                "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: u
  user:
    client-certificate: {crt}
    client-key: {key}
contexts:
- name: c
  context: {{cluster: c, user: u}}
current-context: c
",
                ca = p("serving-ca.crt"),
                crt = p("kubelet.crt"),
                key = p("kubelet.key"),
            ),
        )?;
        let ca = std::fs::read_to_string(cluster_dir.join("serving-ca.crt"))?;
        std::fs::write(
            d.join("kube-proxy.kubeconfig"),
            crate::cluster::kubeconfig_yaml(&self.plan.cluster, &server, &ca, admin_token),
        )?;
        std::fs::write(
            d.join("resolv.conf"),
            format!("nameserver {}\n", self.plan.host_ip),
        )?;
        let socket = self.containerd_socket();
        std::fs::write(
            d.join("kubelet.yaml"),
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /{root}
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://{socket}
address: {ip}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
clusterDNS: [{dns}]
clusterDomain: cluster.local
resolvConf: {resolv}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
protectKernelDefaults: false
failSwapOn: false
syncFrequency: 5s
nodeStatusUpdateFrequency: 5s
fileCheckFrequency: 5s
serializeImagePulls: false
maxPods: 50
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true, cacheTTL: 10s}}
  x509: {{clientCAFile: {client_ca}}}
authorization:
  mode: Webhook
  webhook: {{cacheAuthorizedTTL: 10s, cacheUnauthorizedTTL: 5s}}
",
                root = self.cgroup_root,
                socket = socket.display(),
                ip = self.plan.node_ip,
                dns = self.plan.dns_ip,
                resolv = d.join("resolv.conf").display(),
                client_ca = p("client-ca.crt"),
            ),
        )?;
        std::fs::write(
            d.join("kube-proxy.yaml"),
            format!(
                "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: {node}
bindAddress: {ip}
clusterCIDR: {pods}
clientConnection:
  kubeconfig: {kubeconfig}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  syncPeriod: 10s
  minSyncPeriod: 0s
",
                node = self.name,
                ip = self.plan.node_ip,
                pods = self.plan.pod_cidr,
                kubeconfig = d.join("kube-proxy.kubeconfig").display(),
            ),
        )?;
        let host = |name: &str, program: &Path, args: Vec<String>| {
            spawn(
                &format!("{}-{name}", self.plan.cluster),
                program,
                &args,
                &d.join(format!("{name}.log")),
            )
        };
        let kcm = host(
            "kube-controller-manager",
            &binaries.kube_controller_manager,
            vec![
                format!("--kubeconfig={}", admin_kubeconfig.display()),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                format!("--root-ca-file={}", p("serving-ca.crt")),
                format!("--service-account-private-key-file={}", p("sa.key")),
                format!("--service-cluster-ip-range={}", self.plan.service_cidr),
                "--use-service-account-credentials=false".into(),
                "--controllers=*".into(),
                "--concurrent-deployment-syncs=5".into(),
                "--v=1".into(),
            ],
        )?;
        let scheduler = host(
            "kube-scheduler",
            &node_bins.kube_scheduler,
            vec![
                format!("--kubeconfig={}", admin_kubeconfig.display()),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--v=1".into(),
            ],
        )?;
        let kubelet = self.spawn_daemon(
            "kubelet",
            &node_bins.kubelet,
            &[
                format!("--config={}", d.join("kubelet.yaml").display()),
                format!("--kubeconfig={}", d.join("kubelet.kubeconfig").display()),
                format!("--hostname-override={}", self.name),
                format!("--node-ip={}", self.plan.node_ip),
                "--v=1".into(),
            ],
        )?;
        let proxy = self.spawn_daemon(
            "kube-proxy",
            &node_bins.kube_proxy,
            &[
                format!("--config={}", d.join("kube-proxy.yaml").display()),
                "--v=1".into(),
            ],
        )?;
        self.daemons
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend([kcm, scheduler, kubelet, proxy]);
        Ok(())
    }

    /// Fails when a daemon of the node (or its control plane) has exited, naming its log.
    pub fn check_alive(&self) -> anyhow::Result<()> {
        let mut daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        for p in daemons.iter_mut() {
            if let Some(status) = p.exited() {
                bail!("{} exited ({status}); see {}", p.name, self.dir.display());
            }
        }
        Ok(())
    }

    pub(crate) fn set_lb_controller(&mut self, task: tokio::task::JoinHandle<()>) {
        self.lb = Some(task);
    }

    /// Every process of the node now: the holder, the daemons, containerd's shims and every
    /// container (whatever is in its cgroups or its namespaces), and its control plane.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = std::collections::BTreeSet::new();
        pids.insert(self.holder_pid());
        for p in self
            .daemons
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            pids.insert(p.pid());
        }
        if let Some(c) = &self.containerd {
            pids.insert(c.pid());
        }
        pids.extend(self.cgroup_pids());
        pids.extend(self.namespace_pids());
        pids.remove(&0);
        pids.into_iter().collect()
    }

    /// Pids in any of the node's cgroups.
    fn cgroup_pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for dir in self.cgroup_dirs() {
            collect_cgroup_pids(&dir, &mut pids);
        }
        pids
    }

    /// Pids in the node's network or mount namespace.
    fn namespace_pids(&self) -> Vec<u32> {
        let holder = self.holder_pid();
        if holder == 0 {
            return vec![];
        }
        let ns = |pid: u32, kind: &str| std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok();
        let (Some(net), Some(mnt)) = (ns(holder, "net"), ns(holder, "mnt")) else {
            return vec![];
        };
        procs()
            .into_iter()
            .filter(|&pid| {
                ns(pid, "net").as_ref() == Some(&net) || ns(pid, "mnt").as_ref() == Some(&mnt)
            })
            .collect()
    }

    /// SIGKILLs everything of the node and removes its cgroups.
    fn teardown(&mut self) {
        if let Some(task) = self.lb.take() {
            task.abort();
        }
        // Control plane (on the host) first, politely: nothing of the node needs it any more.
        for mut p in self
            .daemons
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            p.kill();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut pids = self.cgroup_pids();
            pids.extend(self.namespace_pids());
            pids.retain(|&p| p != self.holder_pid() && p != std::process::id());
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for pid in pids {
                #[expect(unsafe_code, reason = "killing processes std did not start")]
                // SAFETY: signalling a process of this node.
                unsafe {
                    libc::kill(pid as i32, libc::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(mut c) = self.containerd.take() {
            c.kill();
        }
        if let Some(mut h) = self.holder.take() {
            h.kill();
        }
        // Cgroups: deepest first; a cgroup whose last process just died may need a moment.
        for dir in self.cgroup_dirs() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while remove_cgroup_tree(&dir).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// The folders of /sys/fs/cgroup (one per v1 hierarchy, plus the named and unified ones).
pub fn cgroup_hierarchies() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
        for e in entries.flatten() {
            let path = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) && path.join("cgroup.procs").exists() {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn collect_cgroup_pids(dir: &Path, pids: &mut Vec<u32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_cgroup_pids(&e.path(), pids);
            }
        }
    }
}

fn remove_cgroup_tree(dir: &Path) -> std::io::Result<()> {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path())?;
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Kills what is left in the cgroups of node test beds whose test process died (containers and
/// shims outlive a SIGKILLed test process), and removes those cgroups.
fn sweep_dead_beds() {
    for h in cgroup_hierarchies() {
        let Ok(entries) = std::fs::read_dir(&h) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(pid) = name
                .strip_prefix("xcc-testbed-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            if Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let mut pids = Vec::new();
                collect_cgroup_pids(&e.path(), &mut pids);
                if pids.is_empty() || Instant::now() > deadline {
                    break;
                }
                for pid in pids {
                    #[expect(unsafe_code, reason = "killing processes std did not start")]
                    // SAFETY: a leftover process of a dead test bed.
                    unsafe {
                        libc::kill(pid as i32, libc::SIGKILL);
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = remove_cgroup_tree(&e.path());
        }
    }
}

/// Every pid of the machine.
fn procs() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Every cgroup folder of any node test bed (`xcc-testbed-*`) on the machine, for leak checks.
pub fn leftover_cgroups(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("xcc-testbed-{pid}-");
    let mut out = Vec::new();
    for h in cgroup_hierarchies() {
        if let Ok(entries) = std::fs::read_dir(&h) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    out.push(e.path());
                }
            }
        }
    }
    out
}

/// The CoreDNS add-on of a node cluster (kubeadm's objects: ConfigMap `coredns` with its
/// `Corefile`, Deployment `coredns`, Service `kube-dns` at `dns_ip`, its RBAC).
pub fn coredns_manifest(image: &str, dns_ip: Ipv4Addr) -> String {
    include_str!("../fixtures/coredns.yaml")
        .replace("${COREDNS_IMAGE}", image)
        .replace("${DNS_IP}", &dns_ip.to_string())
}

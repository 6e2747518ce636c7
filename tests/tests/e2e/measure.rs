//! Figures the benchmarks print.

use std::time::Duration;

/// The `p`th percentile (nearest rank) of `sorted`, which must not be empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Resident memory of process `pid` in MiB (0 when it cannot be read).
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Concurrent requests while creating a benchmark's objects.
const CREATORS: usize = 32;

/// Creates `objects` with [`CREATORS`] requests in flight (creating is not what is measured).
pub async fn create_all<T>(api: &kube::Api<T>, objects: Vec<T>)
where
    T: Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(objects)
        .map(|o| async move { api.create(&Default::default(), &o).await })
        .buffer_unordered(CREATORS)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
}

/// Established TCP connections of process `pid` to `127.0.0.1:port` (its sockets, matched by
/// inode against the kernel's table; 0 when they cannot be read).
pub fn tcp_connections(pid: u32, port: u16) -> usize {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|link| {
                    let link = link.to_string_lossy().into_owned();
                    Some(
                        link.strip_prefix("socket:[")?
                            .strip_suffix(']')?
                            .to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    // rem_address is 0100007F:<port hex> for 127.0.0.1; state 01 is ESTABLISHED.
    let remote = format!("0100007F:{port:04X}");
    std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 9
                && fields[2] == remote
                && fields[3] == "01"
                && inodes.contains(fields[9])
        })
        .count()
}

/// Lists `api` (retrying while RBAC settles) and returns the list's resourceVersion.
pub async fn wait_list<T>(api: &kube::Api<T>) -> String
where
    T: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match api.list(&Default::default()).await {
            Ok(list) => return list.metadata.resource_version.unwrap_or_default(),
            Err(error) if std::time::Instant::now() < deadline => {
                eprintln!("list not allowed yet: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("cannot list: {error}"),
        }
    }
}

/// `apiserver_request_total` of `cluster`, summed by `"VERB resource[/subresource]"`, for the
/// resources `wanted` accepts.
pub async fn request_counts(
    cluster: &xcc_e2e::Cluster,
    wanted: impl Fn(&str) -> bool,
) -> std::collections::BTreeMap<String, f64> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a request");
    let text = cluster.client.request_text(request).await.unwrap();
    let label = |labels: &str, name: &str| {
        labels
            .split(&format!("{name}=\""))
            .nth(1)
            .and_then(|v| v.split('"').next())
            .unwrap_or_default()
            .to_string()
    };
    let mut counts = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(labels) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let resource = label(labels, "resource");
        if !wanted(&resource) {
            continue;
        }
        let subresource = label(labels, "subresource");
        let key = match subresource.as_str() {
            "" => format!("{} {resource}", label(labels, "verb")),
            sub => format!("{} {resource}/{sub}", label(labels, "verb")),
        };
        let count: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *counts.entry(key).or_insert(0.0) += count;
    }
    counts
}

/// What `after` counts beyond `before` (only the keys that grew).
pub fn count_delta(
    after: &std::collections::BTreeMap<String, f64>,
    before: &std::collections::BTreeMap<String, f64>,
) -> std::collections::BTreeMap<String, f64> {
    after
        .iter()
        .map(|(key, n)| (key.clone(), n - before.get(key).unwrap_or(&0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect()
}

/// CPU time (user + system) process `pid` has used so far (zero when it cannot be read).
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command (which may hold spaces), from the third: utime is the 14th
    // field of the line, stime the 15th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    #[expect(unsafe_code, reason = "std cannot read sysconf values")]
    // SAFETY: sysconf only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64((ticks(11) + ticks(12)) as f64 / hz)
}

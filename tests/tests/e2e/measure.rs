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

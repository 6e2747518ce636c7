//! Standalone feed: the records file. It is polled (a `stat` per interval, cheap, and it works on
//! every filesystem including ConfigMap volumes whose files are swapped through symlinks); a
//! changed file is parsed and published as one source. A bad file never replaces a good table,
//! and neither does one that would empty it or take away more than a set share of its names
//! (a half-written copy, the wrong file): see [`ShrinkLimit`]. Loads run on a blocking thread,
//! so that parsing a large file never delays an answer.

use std::{
    hash::{Hash, Hasher},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use xcc_dns::{RecordTable, ShrinkLimit};

use super::metrics::Metrics;

/// The table source name under which the file's records are published.
const SOURCE: &str = "records-file";

/// What we remember of the file to notice a change without reading it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    use std::os::unix::fs::MetadataExt;
    // `metadata` follows symlinks, so a ConfigMap's atomic `..data` swap is seen.
    let meta = std::fs::metadata(path)?;
    Ok(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode: meta.ino(),
    })
}

pub struct RecordsFeed {
    path: PathBuf,
    table: Arc<RecordTable>,
    metrics: Arc<Metrics>,
    stamp: Option<Stamp>,
    content: Option<u64>,
    limit: ShrinkLimit,
}

impl RecordsFeed {
    pub fn new(path: PathBuf, table: Arc<RecordTable>, metrics: Arc<Metrics>) -> Self {
        RecordsFeed {
            path,
            table,
            metrics,
            stamp: None,
            content: None,
            limit: ShrinkLimit::default(),
        }
    }

    /// Sets how much one reload may take away (the first load is never limited).
    pub fn with_limit(mut self, limit: ShrinkLimit) -> Self {
        self.limit = limit;
        self
    }

    /// Loads the file if it changed since the last call. `Ok(true)` when the table changed.
    /// Blocking: reads and parses the file.
    pub fn refresh(&mut self) -> Result<bool, xcc_dns::Error> {
        let mut parsed = false;
        let result = self.load(&mut parsed);
        if parsed {
            // The file's text and the parsed records are dropped by now, whether the load
            // succeeded or failed: give their pages back.
            release_free_memory();
        }
        result
    }

    fn load(&mut self, parsed: &mut bool) -> Result<bool, xcc_dns::Error> {
        let stamp = stamp(&self.path).map_err(|source| xcc_dns::Error::ReadRecords {
            path: self.path.clone(),
            source,
        });
        let stamp = match stamp {
            Ok(stamp) if Some(stamp) == self.stamp => return Ok(false),
            Ok(stamp) => stamp,
            Err(error) => return self.failed(error),
        };
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(source) => {
                return self.failed(xcc_dns::Error::ReadRecords {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        self.stamp = Some(stamp);
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut hasher);
        let content = hasher.finish();
        if Some(content) == self.content {
            return Ok(false);
        }
        *parsed = true;
        let records = match xcc_dns::parse_records(&text) {
            Ok(records) => records,
            Err(message) => {
                return self.failed(xcc_dns::Error::InvalidRecords {
                    path: self.path.clone(),
                    message,
                });
            }
        };
        drop(text);
        let count = records.len();
        if let Err(error) = self.table.set_source_limited(SOURCE, records, self.limit) {
            return self.failed(error);
        }
        self.content = Some(content);
        self.metrics.records_loaded(None);
        let snapshot = self.table.snapshot();
        self.metrics
            .table_published(snapshot.len(), snapshot.serial());
        tracing::info!(path = %self.path.display(), names = count, serial = snapshot.serial(), "records file loaded");
        Ok(true)
    }

    fn failed(&mut self, error: xcc_dns::Error) -> Result<bool, xcc_dns::Error> {
        self.metrics.records_loaded(Some(error.label()));
        Err(error)
    }

    /// Moves the feed to its own thread, where every load (the first one too) runs: the query
    /// path never waits for a load, and every table is built from that thread's malloc arena.
    /// Loads spread over several threads left a table-sized footprint in each one's arena.
    pub fn start(self) -> std::io::Result<Loader> {
        let (requests, inbox) = std::sync::mpsc::channel::<Reply>();
        let path = self.path.clone();
        let mut feed = self;
        std::thread::Builder::new()
            .name("records-loader".into())
            .spawn(move || {
                lower_priority();
                // Ends when the `Loader` is dropped.
                while let Ok(reply) = inbox.recv() {
                    let _ = reply.send(feed.refresh());
                }
            })?;
        Ok(Loader { requests, path })
    }
}

type Reply = tokio::sync::oneshot::Sender<Result<bool, xcc_dns::Error>>;

/// A [`RecordsFeed`] running on its loader thread.
pub struct Loader {
    requests: std::sync::mpsc::Sender<Reply>,
    path: PathBuf,
}

impl Loader {
    /// The file this feed reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// [`RecordsFeed::refresh`] on the loader thread. `None` if that thread is gone (it
    /// panicked): serving goes on with the table as it was.
    pub async fn refresh(&self) -> Option<Result<bool, xcc_dns::Error>> {
        let (reply, result) = tokio::sync::oneshot::channel();
        self.requests.send(reply).ok()?;
        result.await.ok()
    }

    /// Polls the file every `interval` until `shutdown`; failures are logged once per change.
    pub async fn watch(self, interval: Duration, shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = shutdown;
        let mut last_error: Option<String> = None;
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.changed() => return,
            }
            match self.refresh().await {
                Some(Ok(_)) => last_error = None,
                Some(Err(error)) => {
                    let text = error_chain(&error);
                    if last_error.as_deref() != Some(&text) {
                        tracing::error!(error = %text, "records file not loaded; still serving the last good table");
                        last_error = Some(text);
                    }
                }
                None => {
                    tracing::error!("records loader thread ended; reloads stop");
                    return;
                }
            }
        }
    }
}

/// Gives the calling thread the lowest CPU priority (nice 19). A load of a large file is seconds
/// of CPU; sharing a core with the serving threads at equal weight, it delayed answers by up to
/// 125 ms (bench/dns-reload.sh, agent pinned to one CPU). Best effort.
fn lower_priority() {
    #[expect(unsafe_code, reason = "std cannot set a thread's priority")]
    // SAFETY: setpriority has no memory effects; on Linux, `who = 0` with PRIO_PROCESS means the
    // calling thread.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
}

/// An error and its causes, each once: `cannot read records file x: No such file or directory`.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Hands the parser's freed buffers back to the OS. A large file is parsed once per change; glibc
/// keeps the freed heap otherwise, and the agent's RSS would carry the parse's peak forever.
fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    #[expect(unsafe_code, reason = "glibc's malloc_trim has no safe binding")]
    // SAFETY: malloc_trim only releases free heap pages; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xcc_dns::{Zone, ZoneSettings};

    fn feed(path: &Path) -> RecordsFeed {
        let table = Arc::new(
            RecordTable::new(
                vec![Zone::new("xcc.test").unwrap()],
                ZoneSettings::default(),
            )
            .unwrap(),
        );
        RecordsFeed::new(path.to_path_buf(), table, Arc::new(Metrics::default()))
    }

    #[test]
    fn a_bad_file_keeps_the_last_good_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.yaml");
        std::fs::write(
            &path,
            "records:\n  a.xcc.test:\n    addresses: [192.0.2.1]\n",
        )
        .unwrap();
        let mut feed = feed(&path);
        assert!(feed.refresh().unwrap());
        assert!(!feed.refresh().unwrap(), "unchanged file, no new table");
        let serial = feed.table.snapshot().serial();

        std::fs::write(
            &path,
            "records:\n  a.xcc.test:\n    addresses: [not-an-ip]\n",
        )
        .unwrap();
        let err = feed.refresh().unwrap_err().to_string();
        assert!(err.contains("line 3"), "{err}");
        assert_eq!(feed.table.snapshot().serial(), serial);
        assert_eq!(feed.table.snapshot().len(), 1);

        std::fs::write(
            &path,
            "records:\n  other.example:\n    addresses: [192.0.2.1]\n",
        )
        .unwrap();
        let err = feed.refresh().unwrap_err().to_string();
        assert!(err.contains("other.example"), "{err}");
        assert_eq!(feed.table.snapshot().len(), 1);

        std::fs::remove_file(&path).unwrap();
        assert!(feed.refresh().is_err());
        assert_eq!(feed.table.snapshot().len(), 1);

        // `a` is kept: replacing every name at once would be refused (see below).
        std::fs::write(&path, "records:\n  a.xcc.test:\n    addresses: [192.0.2.1]\n  b.xcc.test:\n    addresses: [192.0.2.2]\n  c.xcc.test:\n    cname: b.xcc.test\n").unwrap();
        assert!(feed.refresh().unwrap());
        assert_eq!(feed.table.snapshot().len(), 3);
    }

    fn hosts(range: std::ops::Range<usize>) -> String {
        let mut text = String::from("records:\n");
        for i in range {
            text.push_str(&format!("  h{i}.xcc.test:\n    addresses: [192.0.2.1]\n"));
        }
        text
    }

    #[test]
    fn an_emptied_file_is_refused_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.yaml");
        std::fs::write(&path, hosts(0..10)).unwrap();
        let mut feed = feed(&path);
        assert!(feed.refresh().unwrap());
        for empty in ["", "records: {}\n"] {
            std::fs::write(&path, empty).unwrap();
            let err = feed.refresh().unwrap_err();
            assert_eq!(err.label(), "empty_reload", "{err}");
            assert_eq!(feed.table.snapshot().len(), 10);
        }
        let metrics = feed.metrics.encode();
        assert!(
            metrics.contains(r#"xcc_records_reloads_total{result="empty_reload"} 2"#),
            "{metrics}"
        );
        // The operator's flag allows it.
        let mut feed = feed.with_limit(ShrinkLimit {
            allow_empty: true,
            max_removed_share: 1.0,
        });
        std::fs::write(&path, "records: {}\n# now really empty\n").unwrap();
        assert!(feed.refresh().unwrap());
        assert_eq!(feed.table.snapshot().len(), 0);
    }

    #[test]
    fn a_file_that_drops_more_than_the_share_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.yaml");
        std::fs::write(&path, hosts(0..100)).unwrap();
        let mut feed = feed(&path).with_limit(ShrinkLimit {
            allow_empty: false,
            max_removed_share: 0.25,
        });
        assert!(feed.refresh().unwrap());
        // A copy cut after 70 names: 30% gone.
        std::fs::write(&path, hosts(0..70)).unwrap();
        let err = feed.refresh().unwrap_err();
        assert_eq!(err.label(), "too_many_removed", "{err}");
        assert!(err.to_string().contains("30 of its 100 names"), "{err}");
        assert_eq!(feed.table.snapshot().len(), 100);
        // 25% is within the share.
        std::fs::write(&path, hosts(0..75)).unwrap();
        assert!(feed.refresh().unwrap());
        assert_eq!(feed.table.snapshot().len(), 75);
    }

    #[test]
    fn read_errors_name_their_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut feed = feed(&dir.path().join("missing.yaml"));
        let text = error_chain(&feed.refresh().unwrap_err());
        assert_eq!(text.matches("No such file").count(), 1, "{text}");
        assert!(text.contains("missing.yaml"), "{text}");
    }
}

//! Per-cluster write queues: one lane per (workload cluster, GatewayDNS), all lanes sharing one
//! bound on the writes in flight. A lane runs one write at a time; while it runs, newer desired
//! states for that lane coalesce (only the latest is written next), so a slow or unreachable
//! cluster delays nobody else and never builds up a backlog.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::{Arc, Mutex},
};

use futures::future::BoxFuture;
use tokio::sync::{Semaphore, watch};

/// A write that has not started: it is run at most once, or dropped unpolled when a newer one
/// replaces it.
pub type Job<O> = BoxFuture<'static, O>;

/// The last write a lane finished: the number of the submission it ran, and its outcome.
type Done<O> = (u64, Option<Arc<O>>);

struct Lane<O> {
    /// Submissions so far (the number of the latest).
    submitted: u64,
    /// The next write, if one waits: (its number, the write).
    next: Option<(u64, Job<O>)>,
    /// A task runs this lane's writes.
    running: bool,
    done: watch::Sender<Done<O>>,
}

/// The lanes and their shared bound.
pub struct Queues<K, O> {
    bound: Arc<Semaphore>,
    lanes: Arc<Mutex<HashMap<K, Lane<O>>>>,
}

/// What a submission waits on: the outcome of its own write, or of a later one that replaced it.
pub struct Ticket<O> {
    number: u64,
    done: watch::Receiver<Done<O>>,
}

impl<O> Ticket<O> {
    /// The outcome of the write that covered this submission (its own, or a later one that
    /// replaced it before it started). `None` when the lane was dropped before writing.
    pub async fn done(mut self) -> Option<Arc<O>> {
        let number = self.number;
        match self
            .done
            .wait_for(|(finished, _)| *finished >= number)
            .await
        {
            Ok(done) => done.1.clone(),
            Err(_) => None,
        }
    }
}

impl<K, O> Queues<K, O>
where
    K: Hash + Eq + Clone + Send + 'static,
    O: Send + Sync + 'static,
{
    /// Lanes sharing at most `bound` writes in flight (at least one).
    pub fn new(bound: usize) -> Self {
        Queues {
            bound: Arc::new(Semaphore::new(bound.max(1))),
            lanes: Arc::default(),
        }
    }

    /// The keys of every lane.
    pub fn keys(&self) -> Vec<K> {
        let lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        lanes.keys().cloned().collect()
    }

    /// Queues `job` on lane `key`: started at once if the lane is idle and the bound allows,
    /// otherwise it replaces whatever waits there (which is never run).
    pub fn submit(&self, key: K, job: Job<O>) -> Ticket<O> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let lane = lanes.entry(key.clone()).or_insert_with(|| Lane {
            submitted: 0,
            next: None,
            running: false,
            done: watch::channel((0, None)).0,
        });
        lane.submitted += 1;
        let number = lane.submitted;
        lane.next = Some((number, job));
        let ticket = Ticket {
            number,
            done: lane.done.subscribe(),
        };
        if !lane.running {
            lane.running = true;
            let (lanes, bound) = (self.lanes.clone(), self.bound.clone());
            tokio::spawn(run_lane(lanes, bound, key));
        }
        ticket
    }

    /// The outcome of the last write lane `key` finished, and whether a write is queued or
    /// running there now.
    pub fn last(&self, key: &K) -> (Option<Arc<O>>, bool) {
        let lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        match lanes.get(key) {
            Some(lane) => (lane.done.borrow().1.clone(), lane.running),
            None => (None, false),
        }
    }

    /// Drops every lane for which `keep` is false, with its last outcome (a write in flight
    /// finishes; one waiting is dropped).
    pub fn retain(&self, mut keep: impl FnMut(&K) -> bool) {
        self.lanes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|key, lane| lane.running || keep(key));
    }
}

/// Runs lane `key`'s writes one after another, each within the shared bound, until none waits.
async fn run_lane<K, O>(lanes: Arc<Mutex<HashMap<K, Lane<O>>>>, bound: Arc<Semaphore>, key: K)
where
    K: Hash + Eq,
{
    loop {
        // The permit first: the write taken after it is the latest submitted by then.
        let Ok(permit) = bound.clone().acquire_owned().await else {
            return;
        };
        let next = {
            let mut lanes = lanes.lock().unwrap_or_else(|e| e.into_inner());
            let Some(lane) = lanes.get_mut(&key) else {
                return;
            };
            match lane.next.take() {
                Some(next) => next,
                None => {
                    lane.running = false;
                    return;
                }
            }
        };
        let (number, job) = next;
        let outcome = Arc::new(job.await);
        drop(permit);
        let lanes = lanes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lane) = lanes.get(&key) {
            lane.done.send_replace((number, Some(outcome)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::oneshot;

    /// A fake writer: each write records (cluster, state) when it starts, and the test decides
    /// when a write to a given cluster finishes.
    #[derive(Clone, Default)]
    struct Fake {
        started: Arc<Mutex<Vec<(String, u32)>>>,
        gates: Arc<Mutex<HashMap<String, oneshot::Receiver<()>>>>,
        in_flight: Arc<AtomicUsize>,
        most_in_flight: Arc<AtomicUsize>,
    }

    impl Fake {
        /// Writes to `cluster` stall until the returned sender fires (or is dropped).
        fn stall(&self, cluster: &str) -> oneshot::Sender<()> {
            let (tx, rx) = oneshot::channel();
            self.gates.lock().unwrap().insert(cluster.to_string(), rx);
            tx
        }

        fn write(&self, cluster: &str, state: u32) -> Job<(String, u32)> {
            let fake = self.clone();
            let cluster = cluster.to_string();
            async move {
                fake.started.lock().unwrap().push((cluster.clone(), state));
                let now = fake.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                fake.most_in_flight.fetch_max(now, Ordering::SeqCst);
                let gate = fake.gates.lock().unwrap().remove(&cluster);
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
                fake.in_flight.fetch_sub(1, Ordering::SeqCst);
                (cluster, state)
            }
            .boxed()
        }

        fn started(&self) -> Vec<(String, u32)> {
            self.started.lock().unwrap().clone()
        }
    }

    #[tokio::test]
    async fn a_stalled_cluster_does_not_delay_the_others() {
        let fake = Fake::default();
        let queues: Queues<String, (String, u32)> = Queues::new(4);
        let release = fake.stall("slow");
        let slow = queues.submit("slow".into(), fake.write("slow", 1));
        let others: Vec<_> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|c| queues.submit(c.to_string(), fake.write(c, 1)))
            .collect();
        // Every other cluster is written while the slow one still hangs (six writes through
        // the three places the stalled write leaves).
        for (ticket, cluster) in others.into_iter().zip(["a", "b", "c", "d", "e", "f"]) {
            let outcome = ticket.done().await.expect("written");
            assert_eq!(*outcome, (cluster.to_string(), 1));
        }
        assert_eq!(
            fake.in_flight.load(Ordering::SeqCst),
            1,
            "the stalled write is still in flight"
        );
        assert!(queues.last(&"slow".to_string()).1, "its lane is busy");
        assert!(fake.most_in_flight.load(Ordering::SeqCst) <= 4);
        release.send(()).unwrap();
        assert_eq!(*slow.done().await.unwrap(), ("slow".to_string(), 1));
    }

    #[tokio::test]
    async fn changes_during_a_write_coalesce_into_one_write_of_the_last_state() {
        let fake = Fake::default();
        let queues: Queues<String, (String, u32)> = Queues::new(8);
        let release = fake.stall("c");
        let first = queues.submit("c".into(), fake.write("c", 1));
        // The first write has started (and hangs) before the next three changes arrive.
        while fake.started().is_empty() {
            tokio::task::yield_now().await;
        }
        let tickets: Vec<_> = (2..=4)
            .map(|state| queues.submit("c".into(), fake.write("c", state)))
            .collect();
        release.send(()).unwrap();
        // The first ticket is done by its own write, or by the later one if it looks late.
        assert!(first.done().await.is_some());
        // Each of the three waits for the one write that covers them all: the last state.
        for ticket in tickets {
            assert_eq!(*ticket.done().await.unwrap(), ("c".to_string(), 4));
        }
        let (last, _) = queues.last(&"c".to_string());
        assert_eq!(*last.unwrap(), ("c".to_string(), 4));
        assert_eq!(
            fake.started(),
            [("c".to_string(), 1), ("c".to_string(), 4)],
            "exactly one further write, with the last state"
        );
    }

    #[tokio::test]
    async fn no_more_writes_are_in_flight_than_the_bound() {
        let fake = Fake::default();
        let queues: Queues<String, (String, u32)> = Queues::new(2);
        let clusters = ["a", "b", "c", "d"];
        let mut gates: HashMap<&str, oneshot::Sender<()>> =
            clusters.iter().map(|c| (*c, fake.stall(c))).collect();
        let tickets: Vec<_> = clusters
            .iter()
            .map(|c| queues.submit(c.to_string(), fake.write(c, 1)))
            .collect();
        // Open the gates one at a time, each of a write that has started.
        while !gates.is_empty() {
            let started = loop {
                let open = fake
                    .started()
                    .into_iter()
                    .find(|(c, _)| gates.contains_key(c.as_str()));
                match open {
                    Some((c, _)) => break c,
                    None => tokio::task::yield_now().await,
                }
            };
            gates.remove(started.as_str()).unwrap().send(()).unwrap();
        }
        for ticket in tickets {
            assert!(ticket.done().await.is_some());
        }
        assert_eq!(fake.started().len(), 4);
        assert_eq!(fake.most_in_flight.load(Ordering::SeqCst), 2);
    }
}

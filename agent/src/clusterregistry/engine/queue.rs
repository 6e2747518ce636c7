//! The engine's wake queue: what its sources, timers and the run loop ask it to look at, kept as
//! a set (a key woken ten times before the engine gets to it is looked at once), and the keys a
//! batch of wakes stands for.
//!
//! kube-runtime's `Controller` queue fits one kind keyed by object; the engine's wakes are keys of
//! any kind, whole kinds (after a list) and the topology (rules or peers), handled in batches
//! that a refresh of the topology precedes, so it keeps this small type.

use std::{
    collections::{BTreeSet, HashMap},
    time::Duration,
};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::super::{api::GroupVersionKind, decide::Key};

/// What the engine is woken for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Wake {
    /// One object key.
    Key(Key),
    /// Every key of a kind (after a full list).
    Kind(GroupVersionKind),
    /// The rules or the peers changed.
    Topology,
}

/// The wakes waiting to be handled, and the channel through which tasks add to them.
pub struct WakeQueue {
    tx: UnboundedSender<Wake>,
    rx: UnboundedReceiver<Wake>,
    pending: BTreeSet<Wake>,
}

/// What one turn of the engine handles.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// The rules or the peers changed: refresh before looking at the keys.
    pub topology: bool,
    /// The keys and kinds woken.
    pub wakes: BTreeSet<Wake>,
}

impl Default for WakeQueue {
    fn default() -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        WakeQueue {
            tx,
            rx,
            pending: BTreeSet::new(),
        }
    }
}

impl WakeQueue {
    /// Where tasks send their wakes.
    pub fn sender(&self) -> UnboundedSender<Wake> {
        self.tx.clone()
    }

    /// Wakes the engine for `wake` on its next turn.
    pub fn wake(&self, wake: Wake) {
        let _ = self.tx.send(wake);
    }

    /// Wakes the engine for `wake` once `delay` has passed (the task ends with the engine, or
    /// when the handle returned is aborted).
    pub fn wake_after(&self, wake: Wake, delay: Duration) -> tokio::task::AbortHandle {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(wake);
        })
        .abort_handle()
    }

    /// Adds `wake` to this turn.
    pub fn push(&mut self, wake: Wake) {
        self.pending.insert(wake);
    }

    /// Waits for a wake sent by a task and adds it to this turn.
    pub async fn arrival(&mut self) {
        match self.rx.recv().await {
            Some(wake) => {
                self.pending.insert(wake);
            }
            // Never: the queue holds a sender itself.
            None => std::future::pending().await,
        }
    }

    /// Takes every wake pending and sent so far.
    pub fn take(&mut self) -> Batch {
        while let Ok(wake) = self.rx.try_recv() {
            self.pending.insert(wake);
        }
        let topology = self.pending.remove(&Wake::Topology);
        Batch {
            topology,
            wakes: std::mem::take(&mut self.pending),
        }
    }
}

/// The keys `wakes` stand for: the keys woken, and every key of each kind woken (`keys_of`),
/// and of every other rule kind whose copies are written as that kind (`targets`: per rule kind,
/// the kinds its copies are written as), since a list of the copies' kind may change what those
/// rules decide.
pub fn keys_to_look_at(
    wakes: BTreeSet<Wake>,
    targets: &HashMap<GroupVersionKind, BTreeSet<GroupVersionKind>>,
    keys_of: impl Fn(&GroupVersionKind) -> BTreeSet<Key>,
) -> BTreeSet<Key> {
    let mut keys = BTreeSet::new();
    for wake in wakes {
        match wake {
            Wake::Key(key) => {
                keys.insert(key);
            }
            Wake::Kind(gvk) => {
                for (rule_gvk, written_as) in targets {
                    if *rule_gvk != gvk && written_as.contains(&gvk) {
                        keys.extend(keys_of(rule_gvk));
                    }
                }
                keys.extend(keys_of(&gvk));
            }
            Wake::Topology => {}
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(annotation: &str) -> Key {
        Key::parse(annotation).expect("a key")
    }

    #[tokio::test]
    async fn wakes_are_taken_once_each_with_the_topology_apart() {
        let mut queue = WakeQueue::default();
        let db = key("v1/Secret/team-a/db");
        queue.push(Wake::Key(db.clone()));
        queue.push(Wake::Key(db.clone()));
        queue.push(Wake::Topology);
        // A task's wakes join the turn, also when the engine has not waited for them.
        let sender = queue.sender();
        sender.send(Wake::Key(db.clone())).unwrap();
        sender.send(Wake::Kind(db.gvk.clone())).unwrap();
        let batch = queue.take();
        assert!(batch.topology);
        assert_eq!(
            batch.wakes,
            BTreeSet::from([Wake::Key(db.clone()), Wake::Kind(db.gvk.clone())])
        );
        assert_eq!(queue.take(), Batch::default(), "taken once");
    }

    #[tokio::test]
    async fn the_engine_waits_for_a_task_s_wake() {
        let mut queue = WakeQueue::default();
        let db = key("v1/Secret/team-a/db");
        let sender = queue.sender();
        let woken = db.clone();
        tokio::spawn(async move { sender.send(Wake::Key(woken)) });
        queue.arrival().await;
        assert_eq!(queue.take().wakes, BTreeSet::from([Wake::Key(db)]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_wake_arrives_after_its_delay_unless_aborted() {
        let mut queue = WakeQueue::default();
        let db = key("v1/Secret/team-a/db");
        let started = tokio::time::Instant::now();
        queue.wake_after(Wake::Key(db.clone()), Duration::from_secs(5));
        queue
            .wake_after(Wake::Topology, Duration::from_secs(1))
            .abort();
        queue.arrival().await;
        assert!(started.elapsed() >= Duration::from_secs(5));
        let batch = queue.take();
        assert!(!batch.topology, "the aborted wake never came");
        assert_eq!(batch.wakes, BTreeSet::from([Wake::Key(db)]));
    }

    #[test]
    fn a_kind_woken_stands_for_its_keys_and_those_of_the_rules_writing_it() {
        let secret = key("v1/Secret/team-a/db").gvk;
        let map = key("v1/ConfigMap/team-a/db").gvk;
        let node = key("v1/Node//n").gvk;
        // ConfigMaps are copied as Secrets; Secrets as themselves.
        let targets = HashMap::from([
            (map.clone(), BTreeSet::from([secret.clone()])),
            (secret.clone(), BTreeSet::from([secret.clone()])),
        ]);
        let keys_of = |gvk: &GroupVersionKind| -> BTreeSet<Key> {
            let held = [
                "v1/Secret/team-a/db",
                "v1/ConfigMap/team-a/db",
                "v1/ConfigMap/team-b/x",
            ];
            held.iter()
                .map(|a| key(a))
                .filter(|k| k.gvk == *gvk)
                .collect()
        };
        let set = |annotations: &[&str]| -> BTreeSet<Key> {
            annotations.iter().map(|a| key(a)).collect()
        };
        // (what, wakes, the keys looked at)
        let cases = [
            (
                "a key woken is looked at, whether it is held or not",
                vec![Wake::Key(key("v1/Secret/team-z/gone"))],
                set(&["v1/Secret/team-z/gone"]),
            ),
            (
                "a list of ConfigMaps: every ConfigMap",
                vec![Wake::Kind(map.clone())],
                set(&["v1/ConfigMap/team-a/db", "v1/ConfigMap/team-b/x"]),
            ),
            (
                "a list of Secrets: every Secret, and every ConfigMap copied as one",
                vec![Wake::Kind(secret.clone())],
                set(&[
                    "v1/Secret/team-a/db",
                    "v1/ConfigMap/team-a/db",
                    "v1/ConfigMap/team-b/x",
                ]),
            ),
            (
                "a kind no rule concerns: only its own keys (none here)",
                vec![Wake::Kind(node)],
                set(&[]),
            ),
            ("the topology alone: no key", vec![Wake::Topology], set(&[])),
        ];
        for (what, wakes, want) in cases {
            let got = keys_to_look_at(wakes.into_iter().collect(), &targets, keys_of);
            assert_eq!(got, want, "{what}");
        }
    }
}

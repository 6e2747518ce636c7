//! Watches that wake a reconciler: one task per reconciled object, watching whatever that object
//! reads (a remote Secret, the instances of a monitored kind) and sending the object's reference
//! to its controller on every change, and when the watch starts failing or recovers. A task is replaced when what it
//! watches changes (its `identity`), and stopped when the object goes.

use std::{fmt::Debug, hash::Hash};

use dashmap::{DashMap, mapref::entry::Entry};
use futures::{Stream, StreamExt};
use kube::{Resource, runtime::reflector::ObjectRef, runtime::watcher};
use tokio::sync::mpsc::UnboundedSender;

/// The wake-up watches of one reconciler's objects, one task per object.
pub struct Wakers<K: Resource>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// Concurrent reconciles ensure and stop their objects' tasks at once: a concurrent map.
    tasks: DashMap<ObjectRef<K>, (String, tokio::task::AbortHandle)>,
    trigger: UnboundedSender<ObjectRef<K>>,
}

impl<K> Wakers<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + Hash + Clone + Debug + Send + Sync,
{
    /// No watches yet; each sends the reference of its object on `trigger`.
    pub fn new(trigger: UnboundedSender<ObjectRef<K>>) -> Self {
        Wakers {
            tasks: DashMap::new(),
            trigger,
        }
    }

    /// Makes sure `object` is woken by `events` (a watch described by `identity`); a running
    /// watch with the same identity is kept and `events` dropped unpolled.
    pub fn ensure<T, S>(&self, object: ObjectRef<K>, identity: String, what: String, events: S)
    where
        S: Stream<Item = Result<watcher::Event<T>, watcher::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let spawn = |object: ObjectRef<K>| {
            tokio::spawn(wake_on(events, object, what, self.trigger.clone())).abort_handle()
        };
        match self.tasks.entry(object) {
            Entry::Occupied(running) if running.get().0 == identity => {}
            Entry::Occupied(mut running) => {
                running.get().1.abort();
                let task = spawn(running.key().clone());
                running.insert((identity, task));
            }
            Entry::Vacant(vacant) => {
                let task = spawn(vacant.key().clone());
                vacant.insert((identity, task));
            }
        }
    }

    /// Stops the watch of `object` (it is gone), if it has one.
    pub fn stop(&self, object: &ObjectRef<K>) {
        if let Some((_, (_, task))) = self.tasks.remove(object) {
            task.abort();
        }
    }
}

impl<K: Resource> Drop for Wakers<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        for running in self.tasks.iter() {
            running.value().1.abort();
        }
    }
}

/// Sends `object` on every change (after the first full list), when the watch starts failing and
/// when it recovers, so that the reconciler re-reads the source and its status follows an
/// unreachable or returning peer. A watch that keeps failing (a peer away, a Secret not yet
/// exported) wakes the object once, not on every retry: a thousand such watches must not turn
/// into a storm of reconciles against the peer.
async fn wake_on<K, T, S>(
    events: S,
    object: ObjectRef<K>,
    what: String,
    trigger: UnboundedSender<ObjectRef<K>>,
) where
    K: Resource,
    K::DynamicType: Eq + Hash + Clone,
    S: Stream<Item = Result<watcher::Event<T>, watcher::Error>> + Send,
{
    let mut events = std::pin::pin!(events);
    let mut failing = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                failing = false;
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
            Err(error) => {
                tracing::debug!(watch = %what, %error, "watch failed; retrying");
                if std::mem::replace(&mut failing, true) {
                    continue;
                }
            }
        }
        if trigger.send(object.clone()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;

    fn event(name: &str) -> Result<watcher::Event<String>, watcher::Error> {
        Ok(watcher::Event::Apply(name.to_string()))
    }

    #[tokio::test]
    async fn changes_wake_the_object_and_a_new_identity_replaces_the_watch() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let wakers: Wakers<Secret> = Wakers::new(tx);
        let object = ObjectRef::<Secret>::new("dumbo").within("project-1");
        let first = futures::stream::iter(vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply("a".to_string())),
            Ok(watcher::Event::InitDone),
            event("a"),
        ]);
        wakers.ensure(object.clone(), "one".into(), "test".into(), first);
        assert_eq!(rx.recv().await, Some(object.clone()));
        assert_eq!(rx.recv().await, Some(object.clone()));
        // Same identity: the new stream is not used.
        wakers.ensure(
            object.clone(),
            "one".into(),
            "test".into(),
            futures::stream::iter(vec![event("b")]),
        );
        wakers.ensure(
            object.clone(),
            "two".into(),
            "test".into(),
            futures::stream::iter(vec![event("c")]),
        );
        assert_eq!(rx.recv().await, Some(object.clone()));
        wakers.stop(&object);
        assert!(rx.try_recv().is_err());
    }

    fn failure() -> Result<watcher::Event<String>, watcher::Error> {
        Err(watcher::Error::NoResourceVersion)
    }

    #[tokio::test]
    async fn a_failing_watch_wakes_once_until_it_recovers() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let wakers: Wakers<Secret> = Wakers::new(tx);
        let object = ObjectRef::<Secret>::new("dumbo").within("project-1");
        let events = futures::stream::iter(vec![
            failure(),
            failure(),
            failure(),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitDone),
            failure(),
            failure(),
        ]);
        wakers.ensure(object.clone(), "one".into(), "test".into(), events);
        // Started failing, recovered, failed again: three wakes, not six.
        for _ in 0..3 {
            assert_eq!(rx.recv().await, Some(object.clone()));
        }
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err());
    }
}

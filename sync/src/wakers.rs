//! Watches that wake a reconciler: one task per reconciled object, watching whatever that object
//! reads (a remote Secret, the instances of a monitored kind) and sending the object's reference
//! to its controller on every change, and when the watch starts failing or recovers. A task is
//! replaced when what it watches changes (its `identity`), and stopped when the object goes.
//!
//! The reconciler says what to watch ([`WakeWatch`]: an `Api`, a `watcher::Config`, a
//! [`Schedule`]); [`Wakers::ensure`] opens the watch with [`sources::watch`](crate::sources::watch)
//! (a new list after every failure), so a reconciler never opens one itself.

use std::{fmt::Debug, hash::Hash};

use dashmap::{DashMap, mapref::entry::Entry};
use futures::{Stream, StreamExt};
use kube::{Api, Resource, runtime::reflector::ObjectRef, runtime::watcher};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;

use crate::sources::{self, Schedule};

/// What a hook of [`WakeWatch::inspect`] sees: every event of the watch.
pub type WatchEvent<T> = Result<watcher::Event<T>, watcher::Error>;

/// A hook of [`WakeWatch::inspect`].
type Hook<T> = Box<dyn FnMut(&WatchEvent<T>) + Send>;

/// The watch that wakes one object: what it watches, how it retries, and its name in logs.
pub struct WakeWatch<T> {
    api: Api<T>,
    config: watcher::Config,
    schedule: Schedule,
    what: String,
    hook: Option<Hook<T>>,
}

impl<T> WakeWatch<T> {
    /// A watch of `api` with `config`, retrying on `schedule`; `what` names it in logs.
    pub fn new(
        api: Api<T>,
        config: watcher::Config,
        schedule: Schedule,
        what: impl Into<String>,
    ) -> WakeWatch<T> {
        WakeWatch {
            api,
            config,
            schedule,
            what: what.into(),
            hook: None,
        }
    }

    /// Calls `hook` with every event before it wakes the object: to keep what the watch says
    /// (so that a reconcile need not read it again), or to learn from a failure.
    #[must_use]
    pub fn inspect(mut self, hook: impl FnMut(&WatchEvent<T>) + Send + 'static) -> WakeWatch<T> {
        self.hook = Some(Box::new(hook));
        self
    }
}

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

    /// Makes sure `object` is woken by `watch`, which `identity` describes: a running watch with
    /// the same identity is kept (and `watch` not opened); one with another identity is replaced.
    pub fn ensure<T>(&self, object: ObjectRef<K>, identity: String, watch: WakeWatch<T>)
    where
        T: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let WakeWatch {
            api,
            config,
            schedule,
            what,
            hook,
        } = watch;
        self.ensure_events(object, identity, what, move || {
            let events = sources::watch(api, config, schedule);
            match hook {
                Some(mut hook) => events.inspect(move |event| hook(event)).boxed(),
                None => events,
            }
        });
    }

    /// [`Wakers::ensure`] with the events `open` returns, called only when a task starts.
    fn ensure_events<T, S>(
        &self,
        object: ObjectRef<K>,
        identity: String,
        what: String,
        open: impl FnOnce() -> S,
    ) where
        S: Stream<Item = WatchEvent<T>> + Send + 'static,
        T: Send + 'static,
    {
        let spawn = |object: ObjectRef<K>| {
            tokio::spawn(wake_on(open(), object, what, self.trigger.clone())).abort_handle()
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
    S: Stream<Item = WatchEvent<T>> + Send,
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
    use crate::sources::test_server::*;
    use k8s_openapi::api::core::v1::Secret;

    fn event(name: &str) -> WatchEvent<String> {
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
        wakers.ensure_events(object.clone(), "one".into(), "test".into(), || first);
        assert_eq!(rx.recv().await, Some(object.clone()));
        assert_eq!(rx.recv().await, Some(object.clone()));
        // Same identity: the new stream is not used.
        wakers.ensure_events(object.clone(), "one".into(), "test".into(), || {
            futures::stream::iter(vec![event("b")])
        });
        wakers.ensure_events(object.clone(), "two".into(), "test".into(), || {
            futures::stream::iter(vec![event("c")])
        });
        assert_eq!(rx.recv().await, Some(object.clone()));
        wakers.stop(&object);
        assert!(rx.try_recv().is_err());
    }

    fn failure() -> WatchEvent<String> {
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
        wakers.ensure_events(object.clone(), "one".into(), "test".into(), || events);
        // Started failing, recovered, failed again: three wakes, not six.
        for _ in 0..3 {
            assert_eq!(rx.recv().await, Some(object.clone()));
        }
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn ensure_opens_the_watch_once_per_identity_and_hooks_see_its_events() {
        let (client, server) = mock();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let wakers: Wakers<Secret> = Wakers::new(tx);
        let object = ObjectRef::<Secret>::new("dumbo").within("project-1");
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let watch = || {
            WakeWatch::new(
                Api::<Secret>::all(client.clone()),
                watcher::Config::default(),
                Schedule::Local,
                "secrets",
            )
        };
        let hook = move |event: &WatchEvent<Secret>| {
            if let Ok(watcher::Event::InitApply(secret)) = event {
                let _ = seen_tx.send(secret.metadata.name.clone());
            }
        };
        wakers.ensure(object.clone(), "one".into(), watch().inspect(hook));
        let woken = tokio::time::timeout(LIST_WAIT, rx.recv()).await;
        assert_eq!(
            woken.expect("the list wakes the object"),
            Some(object.clone())
        );
        assert_eq!(seen.recv().await, Some(Some("dumbo".to_string())));
        // Same identity: no second watch.
        wakers.ensure(object.clone(), "one".into(), watch());
        wait_until("the watch is watching", || {
            count(&server, "watch full") == 1
        })
        .await;
        tokio::task::yield_now().await;
        assert_eq!(count(&server, "list full"), 1, "{:?}", requests(&server));
        wakers.stop(&object);
    }
}

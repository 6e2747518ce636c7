//! Tasks that end with their owner: [`spawn_owned`].
//!
//! A task started with `tokio::spawn` runs until it returns, whoever held its `JoinHandle`:
//! dropping the handle detaches it. A reconciler's work is dropped when it is aborted (the
//! Lease lost and the work not stopped within its grace, or the process shutting down), so a
//! task it spawned that way would go on (a forwarder still writing, a feed still watching)
//! after the replica stopped leading. Every task a reconciler starts is spawned with
//! [`spawn_owned`] instead: its handle aborts the task when dropped, with the future that owns
//! it.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::task::{JoinError, JoinHandle};

/// Spawns `future` as a task that is aborted when the returned handle is dropped.
pub fn spawn_owned<F>(future: F) -> Owned<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Owned(tokio::spawn(future))
}

/// The handle of a task started by [`spawn_owned`]: awaiting it awaits the task; dropping it
/// aborts the task.
#[derive(Debug)]
#[must_use = "dropping the handle aborts the task"]
pub struct Owned<T>(JoinHandle<T>);

impl<T> Owned<T> {
    /// Aborts the task now.
    pub fn abort(&self) {
        self.0.abort();
    }

    /// Whether the task has ended.
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for Owned<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

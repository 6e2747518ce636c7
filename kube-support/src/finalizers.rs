//! What a reconcile run through kube's `finalizer()` means when the finalizer patch itself fails.

use kube::runtime::{controller::Action, finalizer::Error};

/// The outcome of a reconcile run through kube's `finalizer()`, with the finalizer patches that
/// are not failures taken as success:
/// - a 404 adding or removing the finalizer: the object is gone (a stale trigger cleaned up an
///   object whose finalizer was already removed, or another replica removed it first);
/// - a 409 or 422 adding it: the object handed over predates a change (typically the finalizer
///   added a moment ago, when another wake came before the watch delivered it); the newer
///   version, already on its way, wakes the object again.
pub fn finalized<E>(result: Result<Action, Error<E>>) -> Result<Action, Error<E>>
where
    E: std::error::Error + 'static,
{
    match result {
        Err(
            Error::AddFinalizer(kube::Error::Api(s)) | Error::RemoveFinalizer(kube::Error::Api(s)),
        ) if s.code == 404 => Ok(Action::await_change()),
        Err(Error::AddFinalizer(kube::Error::Api(s))) if s.code == 409 || s.code == 422 => {
            tracing::debug!(message = %s.message, "finalizer not added to an older version; waiting for the newer one");
            Ok(Action::await_change())
        }
        other => other,
    }
}

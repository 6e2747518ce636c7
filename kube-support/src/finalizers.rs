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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reconcile failed")]
    struct Failed;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("answer", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn gone_objects_and_older_versions_are_no_failure_and_the_rest_is() {
        let ok = |r: Result<Action, Error<Failed>>| finalized(r).is_ok();
        assert!(ok(Err(Error::AddFinalizer(api(404)))));
        assert!(ok(Err(Error::RemoveFinalizer(api(404)))));
        assert!(ok(Err(Error::AddFinalizer(api(409)))));
        assert!(ok(Err(Error::AddFinalizer(api(422)))));
        // Removing over a conflict must be retried: the cleanup ran, the object stays.
        assert!(!ok(Err(Error::RemoveFinalizer(api(409)))));
        assert!(!ok(Err(Error::AddFinalizer(api(500)))));
        assert!(!ok(Err(Error::ApplyFailed(Failed))));
        assert!(!ok(Err(Error::CleanupFailed(Failed))));
        assert!(ok(Ok(Action::await_change())));
    }
}

//! Errors as one line for a person: the shared rendering of every xcc binary.

pub use xcc_kube::report::kube_cause;

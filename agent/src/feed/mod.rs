//! The record feed: what fills the DNS record table and what is told about it. The EndpointSlices
//! of the agent's namespace ([`slices`]) or, standalone, a records file ([`records`]); the
//! Multi-Cluster Services names of the clusterset zone ([`mcs`]); the
//! announcement of what this agent reads ([`announce`]); `/explain` ([`explain`]); and the DNS
//! series of the agent's metrics ([`metrics`], which also registers the sync core's).

pub mod announce;
pub mod explain;
pub mod health;
pub mod mcs;
pub mod metrics;
pub mod prober;
pub mod records;
pub mod slices;

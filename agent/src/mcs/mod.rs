//! The Multi-Cluster Services API (KEP-1645): ServiceExport, ServiceImport and the cluster IDs of
//! the About API (KEP-2149).

pub mod api;

//! The process: its flags ([`args`]), the wiring of runtime, table, feeds, DNS and admin servers
//! and reconcilers ([`run`]), and the admin HTTP server ([`admin`]).

mod admin;
pub mod args;
pub mod run;

//! Socket-free tests of the DNS engine: each builds a request from bytes, runs the handler with a
//! capturing response handler, and asserts what a client would see. `serve` alone runs the
//! serving loops on real sockets on 127.0.0.1.
#![allow(
    clippy::too_many_lines,
    reason = "a test is one scenario read top to bottom; the line limit is for production code"
)]

mod answers;
mod fuzz;
mod message;
mod serve;
mod support;
mod table;

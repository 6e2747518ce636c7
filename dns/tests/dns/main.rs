//! Socket-free tests of the DNS engine: each builds a request from bytes, runs the handler with a
//! capturing response handler, and asserts what a client would see.

mod answers;
mod fuzz;
mod message;
mod support;
mod table;

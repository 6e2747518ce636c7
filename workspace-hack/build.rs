//! Empty: it makes the host-side `[build-dependencies]` count (see Cargo.toml).

fn main() {}

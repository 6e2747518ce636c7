//! No code: the dependencies of this crate give every xcc binary the same feature set of its
//! dependencies, so that building the binaries one at a time compiles each dependency once
//! (`bench/one-build.sh` checks it).

#![forbid(unsafe_code)]

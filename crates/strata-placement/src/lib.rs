//! Replica placement, as pure deterministic functions: Kinesis (k failure-
//! isolated segments, linear hashing per segment, r of k chosen by storage
//! and load), Chain (the single-choice baseline), and the building blocks the
//! cluster manager and the simulator share, so both follow one code path.
//!
//! Owns: hash functions, linear hashing, the choice rules.
//! Must not depend on: any I/O, clock, async runtime or other Strata crate.
//! Determinism: the same inputs (and seed, where there is one) give the same
//! placement on every machine and version; hash seeds are part of the contract.
//!
//! Layer rule (checked by the test command): may use no Strata crate;
//! never an async runtime or an HTTP crate.

pub mod ambry;
pub mod chain;
pub mod fds;
pub mod hash;
pub mod kinesis;
pub mod linear;
pub mod rng;
pub mod spock;

/// Index of a server (or disk) in a placement's topology.
pub type ServerId = usize;

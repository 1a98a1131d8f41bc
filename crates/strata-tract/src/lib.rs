//! FDS's striped mutable blobs (Nightingale et al., OSDI 2012): a blob,
//! named by a 128-bit GUID, is read and written in tracts of the size the
//! cluster's tract locator table fixed; tract `i` of blob `g` lives on the
//! disks of row `(hash(g) + i) mod rows` (the table is the cluster map's,
//! `strata_cluster::tract`).
//!
//! - [`guid`]: blob GUIDs.
//! - [`store`]: a tractserver's part, on one engine replica of a row: a
//!   tract write is a new version of the tract (the engine's versioned
//!   records, newest version wins), a read the newest version.
//! - [`meta`]: a blob's metadata tract (FDS §2.3): create, open, delete and
//!   extend, applied by the row's primary one at a time per blob.
//! - [`client`]: the client library: the table cached from the map, each
//!   tract write sent to every disk of its row and complete when all have
//!   it, each read to one of them at random, many in flight at once
//!   (non-blocking: the futures complete in any order), a request under a
//!   stale row version refused by the node and retried after a refresh.
//!
//! Writes are not ordered with each other (FDS §3.5): of two concurrent
//! writes of one tract, every replica keeps the one with the higher
//! version, so replicas agree, but which one that is, is not the order in
//! which the clients issued them.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-format, strata-engine, strata-cluster, strata-client; never the
//! router, RPC, the server, the node crate, the transaction crate or axum.

pub mod client;
pub mod error;
pub mod guid;
pub mod meta;
pub mod store;

pub use client::{Blob, TractClient};
pub use error::TractError;
pub use guid::Guid;

/// Request header: the row version the client's table holds.
pub const ROW_VERSION_HEADER: &str = "x-strata-row-version";
/// Request header of a write: the version it writes; answer header of a
/// read or a write: the newest version the replica holds.
pub const TRACT_VERSION_HEADER: &str = "x-strata-tract-version";
/// Request header of a tract read or write: the blob's incarnation (see
/// [`meta`]; 0 when absent).
pub const INCARNATION_HEADER: &str = "x-strata-incarnation";

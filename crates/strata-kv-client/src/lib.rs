//! Voldemort's client side (Spock §3.1.2, §4.3.2): a client that routes
//! key-value requests itself, from the cluster map, to the nodes that hold
//! a key's partition, nearest zone first, with the monotonic-read floors
//! that keep a client from going back a version during a swap.
//!
//! Owns: client-side routing of read-only store gets ([`KvRouter`]); the
//! read-write stores' client with applyUpdate ([`RwClient`], server-side
//! routing).
//! It speaks the nodes' public HTTP API through `strata-client`, as any
//! client would; it reads the map's layout from `strata-cluster` and the
//! key-to-partition hash from `strata-placement`, the same functions the
//! nodes use, so both sides agree on where a key lives.
//!
//! Read-write store requests may instead go through sessions, binary
//! messages (`strata_format::rw_session`) on connections upgraded from
//! HTTP.
//!
//! Layer rule (checked by the test command): may use strata-client,
//! strata-cluster, strata-placement, strata-format; never the engine, the router or the
//! server.

mod routing;
mod rw;

pub use routing::{KvRouteError, KvRouter, KvValue};
pub use rw::{RwClient, RwClientError, RwVersions};

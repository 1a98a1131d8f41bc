//! Spock's read-write stores (Spock §3.1): values versioned by vector
//! clocks, with concurrent versions kept side by side; puts through a
//! key's pseudo-master with required writes and hinted handoff; gets from
//! required reads with read repair; server-side transforms. (applyUpdate,
//! a client loop, is `strata_kv_client::RwClient::apply_update`.)
//!
//! - [`clock`]: vector clocks.
//! - [`value`]: a versioned value and its stored form in the engine (one
//!   engine version per clock, `strata_engine`'s versioned records).
//! - [`local`]: one node's replica and the checks it makes on its own.
//! - [`coordinator`]: a request over a key's preference list; other nodes
//!   through the [`coordinator::Transport`] trait.
//! - [`transform`]: server-side transforms.
//!
//! Routing (the ring, preference lists, zones) is the placement library's
//! and the cluster map's; the HTTP API and the node-to-node transport are
//! the server's.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-format, strata-engine; never the router, the cluster map, RPC, the
//! server, the node crate or an HTTP crate.

pub mod clock;
pub mod coordinator;
pub mod error;
pub mod local;
pub mod transform;
pub mod value;

pub use clock::{ClockError, Occurred, VectorClock};
pub use coordinator::{Coordinator, DELETE_GRACE_MS, HintReport, ReclaimReport, Route, RwStats, SLOP_STORE, StorePolicy, Transport, resolve};
pub use error::{Result, RwError};
pub use local::{LocalStore, PutOutcome};
pub use transform::Transform;
pub use value::Versioned;

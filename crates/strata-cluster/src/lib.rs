//! The cluster map and the metadata service that keeps it.
//!
//! The map (Ambry §2.1, FDS §2.2) is one versioned document: the hardware
//! layout (zones, racks, nodes, disks with capacity and state) and the
//! logical layout (partitions with state and replica placements). Every
//! change goes through a [`Command`] applied deterministically, which bumps
//! the epoch; nodes, frontends and routers cache the map and refresh it when
//! a datanode answers "stale epoch".
//!
//! The metadata service's members talk Raft through `strata-net` (the one
//! node-to-node client, mutual TLS once the cluster's certificates are set);
//! its files are written with `strata-fs`.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-format, strata-fs, strata-net, strata-placement, strata-names;
//! never the engine, the router, the server, or an HTTP crate.

pub mod codec;
mod command;
pub mod kv;
pub mod liveness;
pub mod map;
pub mod meta;
mod moves;
mod placement;
pub mod tract;

pub use codec::{CodecError, decode_map, encode_map};
pub use kv::{KvReplication, KvSection, KvStoreSpec, RW_VALUE_LIMIT_MAX, RwStoreSpec};
pub use liveness::{DiskReport, Heartbeat, KIND_HEARTBEAT, Liveness};
pub use map::{
    ClusterMap, Command, Disk, DiskState, MapError, Move, MovePhase, Node, NodeId, NodeState, Outcome, Partition, PartitionKind, PartitionState, PlanState,
    PlannedMove, Rebalance, ReplicaLoc, Spread,
};
pub use moves::RecoveryPlacement;
pub use tract::{METADATA_TRACT, TractRoute, TractTable};

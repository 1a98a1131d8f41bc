//! The cluster map and the metadata service that keeps it.
//!
//! The map (Ambry §2.1, FDS §2.2) is one versioned document: the hardware
//! layout (zones, racks, nodes, disks with capacity and state) and the
//! logical layout (partitions with state and replica placements). Every
//! change goes through a [`Command`] applied deterministically, which bumps
//! the epoch; nodes, frontends and routers cache the map and refresh it when
//! a datanode answers "stale epoch".
//!
//! Must not depend on: the storage engine, the router, HTTP or the server.

pub mod codec;
pub mod kv;
pub mod map;
pub mod meta;

pub use codec::{CodecError, decode_map, encode_map};
pub use kv::{KvReplication, KvSection, KvStoreSpec};
pub use map::{ClusterMap, Command, Disk, DiskState, MapError, Node, NodeId, Outcome, Partition, PartitionState, ReplicaLoc};

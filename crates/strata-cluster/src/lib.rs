//! The cluster map and the metadata service that keeps it.
//!
//! The map (Ambry §2.1, FDS §2.2) is one versioned document: the hardware
//! layout (zones, racks, nodes, disks with capacity and state) and the
//! logical layout (partitions with state and replica placements). Every
//! change goes through a [`Command`] applied deterministically, which bumps
//! the epoch; nodes, frontends and routers cache the map and refresh it when
//! a datanode answers "stale epoch".
//!
//! The metadata service's members talk Raft over HTTP with mutual TLS
//! (`meta::network`: the one node-to-node client, set up once with the
//! cluster's certificates by `meta::set_cluster_tls`).
//!
//! Must not depend on: the router or the server; of the storage engine it
//! uses only the file helpers (atomic replace), of `strata-auth` only the
//! cluster's server name.

pub mod codec;
pub mod kv;
pub mod map;
pub mod meta;

pub use codec::{CodecError, decode_map, encode_map};
pub use kv::{KvReplication, KvSection, KvStoreSpec};
pub use map::{ClusterMap, Command, Disk, DiskState, MapError, Node, NodeId, Outcome, Partition, PartitionState, ReplicaLoc};

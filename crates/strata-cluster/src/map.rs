//! The map document, its types and what it answers (holders, serving
//! replicas, allocation); the commands that change it are `command.rs`.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use strata_types::{PartitionId, Policies};

/// A node's id, chosen by the operator and unique in the cluster.
pub type NodeId = u64;

/// Whether a disk serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DiskState {
    /// Serving.
    Up,
    /// Out of service (an operator's choice): holds no new replicas, and
    /// routers skip it.
    Down,
    /// Failed: its node reported I/O errors or that it stopped answering
    /// (marked by the metadata leader). Routers skip it and it holds no new
    /// replicas; it serves again only when an operator sets it up. Its
    /// replicas are re-created elsewhere.
    Failed,
    /// Being removed (`strata disk remove`): it serves while its replicas
    /// move away, and takes no new ones.
    Removing,
    /// Removed: it holds nothing. Kept in the node's list so the other
    /// disks keep their indexes.
    Removed,
}

impl DiskState {
    /// Whether the disk serves requests (its replicas are read and written).
    pub fn serves(self) -> bool {
        matches!(self, Self::Up | Self::Removing)
    }

    /// Whether the disk takes new replicas (new partitions, moves).
    pub fn takes_replicas(self) -> bool {
        self == Self::Up
    }
}

/// Whether a node answers its heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum NodeState {
    /// Heartbeating.
    #[default]
    Up,
    /// Missed its heartbeats (marked by the metadata leader): routers skip
    /// it until it is back up.
    Down {
        /// When the leader marked it down (ms since the epoch).
        since_ms: u64,
    },
}

impl NodeState {
    /// Whether the node is up.
    pub fn is_up(self) -> bool {
        self == Self::Up
    }
}

/// A replica being moved from one disk to another (`docs/architecture.md`,
/// "Replica moves").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The replica that leaves.
    pub from: ReplicaLoc,
    /// The replica that takes its place.
    pub to: ReplicaLoc,
    /// When the move was started (ms since the epoch).
    pub started_ms: u64,
    /// How far it got.
    pub phase: MovePhase,
}

/// One move of a rebalancing plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedMove {
    /// Partition.
    pub partition: PartitionId,
    /// The replica that leaves.
    pub from: ReplicaLoc,
    /// Where it goes.
    pub to: ReplicaLoc,
    /// Bytes it carries (the partition's capacity).
    pub bytes: u64,
}

/// A rebalancing under way: Ambry's Algorithm 1 planned on the map, carried
/// out by the metadata leader a few moves at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rebalance {
    /// The plan, in the order its moves start.
    pub moves: Vec<PlannedMove>,
    /// Moves under way at most.
    pub max_moves: u32,
    /// Each node copies at most this many MB/s into the replicas the plan
    /// fills there, all together (0: unthrottled).
    pub throttle_mb_s: u32,
    /// When it started (ms since the epoch).
    pub started_ms: u64,
}

/// Where a planned move stands, read from the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanState {
    /// Not started.
    Pending,
    /// Its move is under way.
    UnderWay,
    /// Done: `to` holds the replica, `from` no longer does.
    Done,
    /// Overtaken (the partition moved otherwise, or is gone): skipped.
    Stale,
}

/// Disk usage spread: allocated bytes over capacity, per disk that takes
/// replicas.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Disks counted.
    pub disks: usize,
    /// Lowest fraction.
    pub min: f64,
    /// Highest fraction.
    pub max: f64,
    /// Mean fraction.
    pub mean: f64,
    /// Standard deviation of the fractions.
    pub stddev: f64,
}

/// The phases of a replica move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MovePhase {
    /// `to` exists and pulls from the replicas; it serves nothing yet and
    /// `from` is still a full replica. May be cancelled.
    Filling,
    /// `to` has caught up and took `from`'s place among the replicas;
    /// `from` takes no writes and `to` drains what it still holds. Ends
    /// when `to` has all of it (or `from` is down or failed).
    Draining {
        /// The map epoch at which `to` was promoted.
        since_epoch: u64,
    },
}

/// Whether a partition takes new puts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionState {
    /// Takes puts.
    ReadWrite,
    /// Full or frozen: gets, deletes and TTL updates only.
    ReadOnly,
}

/// A disk of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disk {
    /// Mount point or directory on the node.
    pub path: String,
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// State.
    pub state: DiskState,
}

/// A datanode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Id.
    pub id: NodeId,
    /// Address its HTTP/RPC listener serves on, `host:port`.
    pub addr: String,
    /// Zone (datacenter).
    pub zone: String,
    /// Rack: the failure domain inside a zone.
    pub rack: String,
    /// Disks, indexed by position.
    pub disks: Vec<Disk>,
    /// Up, or down since when.
    pub state: NodeState,
    /// Being removed (`strata node remove`): it serves while its replicas
    /// move away, takes no new ones, and leaves the map once it holds none.
    pub removing: bool,
}

impl Node {
    /// Whether the node takes new replicas: up, not being removed.
    pub fn takes_replicas(&self) -> bool {
        self.state.is_up() && !self.removing
    }
}

/// Where one replica lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReplicaLoc {
    /// Node.
    pub node: NodeId,
    /// Disk index on the node.
    pub disk: u32,
}

/// What a partition holds, and so who writes it and how its replicas
/// agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum PartitionKind {
    /// Ambry's immutable blobs: routers place puts on it and its replicas
    /// pull from each other (Ambry §4.1).
    #[default]
    Blob,
    /// A row of the tract locator table (FDS §2.2, [`crate::tract`]):
    /// clients write each tract to every replica; no blob put lands on it
    /// and its replicas pull only while a move fills a new one.
    Tract,
}

/// A partition: a replicated append-only log (Ambry §2.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    /// Id (the one blob ids carry).
    pub id: PartitionId,
    /// State.
    pub state: PartitionState,
    /// Capacity of each replica, bytes.
    pub capacity_bytes: u64,
    /// Replicas, in every zone.
    pub replicas: Vec<ReplicaLoc>,
    /// A replica move under way, if any (one at a time per partition).
    pub moving: Option<Move>,
    /// What it holds.
    pub kind: PartitionKind,
    /// The epoch at which its replicas or its move last changed: a tract
    /// row's version (FDS §3.2), which requests carry so a replica refuses
    /// a client whose row is out of date.
    pub version: u64,
}

impl Partition {
    /// A partition that takes writes, with no move under way (its version
    /// is set by the command that adds it).
    pub fn new(id: PartitionId, capacity_bytes: u64, replicas: Vec<ReplicaLoc>, kind: PartitionKind) -> Self {
        Self { id, state: PartitionState::ReadWrite, capacity_bytes, replicas, moving: None, kind, version: 0 }
    }
}

/// The cluster map: one document, versioned by its epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClusterMap {
    /// Grows by one on every change.
    pub epoch: u64,
    /// Nodes by id.
    pub nodes: BTreeMap<NodeId, Node>,
    /// Partitions by id.
    pub partitions: BTreeMap<PartitionId, Partition>,
    /// The cluster's default quorum policies (Ambry's: put 2, get 1,
    /// delete 2, TTL update 2); requests may override within limits.
    pub policies: Policies,
    /// Read-only stores: their shared ring and definitions.
    pub kv: crate::kv::KvSection,
    /// A rebalancing under way.
    pub rebalance: Option<Rebalance>,
    /// Read-write stores by name (Spock §3.1), on the read-only stores' ring.
    pub rw_stores: BTreeMap<String, crate::kv::RwStoreSpec>,
    /// The tract locator table of striped blobs (FDS §2.2), once made.
    pub tracts: Option<crate::tract::TractTable>,
}

pub use crate::command::{Command, Outcome};

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum MapError {
    /// A node with this id exists.
    #[error("node {0} already exists")]
    NodeExists(NodeId),
    /// Another node serves on this address.
    #[error("address {addr} is already used by node {node}")]
    AddressInUse {
        /// Address.
        addr: String,
        /// Node using it.
        node: NodeId,
    },
    /// No such node.
    #[error("node {0} does not exist")]
    NoSuchNode(NodeId),
    /// No such disk.
    #[error("node {node} has no disk {disk}")]
    NoSuchDisk {
        /// Node.
        node: NodeId,
        /// Disk index.
        disk: u32,
    },
    /// No such partition.
    #[error("partition {0} does not exist")]
    NoSuchPartition(PartitionId),
    /// A field is empty or out of range.
    #[error("invalid {field}: {detail}")]
    Invalid {
        /// Field.
        field: String,
        /// What is wrong.
        detail: String,
    },
    /// The partition has a move under way.
    #[error("partition {0} is already moving a replica (finish or cancel that move first)")]
    AlreadyMoving(PartitionId),
    /// The partition has no move under way (or another one than named).
    #[error("partition {0} has no such move under way")]
    NoSuchMove(PartitionId),
    /// A move that cannot be made, and why.
    #[error("cannot move partition {partition}'s replica: {detail}")]
    BadMove {
        /// Partition.
        partition: PartitionId,
        /// Why.
        detail: String,
    },
    /// A removal that would leave a partition without a place for its
    /// replica (or a zone without nodes).
    #[error("cannot remove {what}: {detail}")]
    CannotRemove {
        /// The node or disk.
        what: String,
        /// Why (naming the partition).
        detail: String,
    },
    /// A rebalancing cannot start (or end), and why.
    #[error("cannot rebalance: {0}")]
    CannotRebalance(String),
    /// Not enough room or nodes to place replicas.
    #[error("cannot place partition replicas in zone {zone}: {detail}")]
    NoRoom {
        /// Zone.
        zone: String,
        /// Why.
        detail: String,
    },
}

impl ClusterMap {
    /// Zones, sorted.
    pub fn zones(&self) -> BTreeSet<&str> {
        self.nodes.values().map(|n| n.zone.as_str()).collect()
    }

    /// Where a partition has (or is getting, or still keeps) a copy: its
    /// replicas, and the other end of a move under way.
    pub fn holders(&self, partition: PartitionId) -> Vec<ReplicaLoc> {
        let Some(p) = self.partitions.get(&partition) else { return Vec::new() };
        let mut out = p.replicas.clone();
        if let Some(m) = p.moving {
            for loc in [m.from, m.to] {
                if !out.contains(&loc) {
                    out.push(loc);
                }
            }
        }
        out
    }

    /// Whether the replica at `loc` serves: its node is up and its disk up.
    pub fn serves(&self, loc: ReplicaLoc) -> bool {
        self.nodes.get(&loc.node).is_some_and(|n| n.state.is_up() && n.disks.get(loc.disk as usize).is_some_and(|d| d.state.serves()))
    }

    /// Partitions with a replica that does not serve (on a node that is
    /// down or a disk that is down or failed): they run with fewer copies
    /// than they should.
    pub fn degraded(&self) -> Vec<PartitionId> {
        self.partitions.values().filter(|p| p.replicas.iter().any(|r| !self.serves(*r))).map(|p| p.id).collect()
    }

    /// The node serving at `addr`, if any.
    pub fn node_at(&self, addr: &str) -> Option<&Node> {
        self.nodes.values().find(|n| n.addr == addr)
    }

    /// Bytes allocated to replicas on each disk.
    pub fn allocated(&self) -> BTreeMap<ReplicaLoc, u64> {
        let mut out = BTreeMap::new();
        for p in self.partitions.values() {
            for r in self.holders(p.id) {
                *out.entry(r).or_insert(0) += p.capacity_bytes;
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "map_tests.rs"]
mod tests;

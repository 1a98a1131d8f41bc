//! The map document and the commands that change it.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use strata_types::{PartitionId, Policies, Policy};

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

/// A change to the map, as the metadata service's log carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Adds a node (no disks yet).
    AddNode {
        /// Id, unique.
        id: NodeId,
        /// `host:port`.
        addr: String,
        /// Zone.
        zone: String,
        /// Rack.
        rack: String,
    },
    /// Adds a disk to a node.
    AddDisk {
        /// Node.
        node: NodeId,
        /// Path on the node.
        path: String,
        /// Capacity in bytes.
        capacity_bytes: u64,
    },
    /// Marks a disk up or down.
    SetDiskState {
        /// Node.
        node: NodeId,
        /// Disk index.
        disk: u32,
        /// New state.
        state: DiskState,
    },
    /// Creates partitions, placing `replicas_per_zone` replicas in every zone
    /// greedily (most unallocated disk first, one replica per node, racks
    /// spread) through the placement library.
    AddPartitions {
        /// How many.
        count: u32,
        /// Replicas in each zone (capped at the zone's node count).
        replicas_per_zone: u32,
        /// Capacity of each replica, bytes.
        capacity_bytes: u64,
    },
    /// Sets the cluster's default quorum policies.
    SetPolicies {
        /// The new defaults.
        policies: Policies,
    },
    /// Sets a partition read-write or read-only.
    SetPartitionState {
        /// Partition.
        partition: PartitionId,
        /// New state.
        state: PartitionState,
    },
    /// Sets up the read-only stores' ring: `partitions` equal ranges spread
    /// over the nodes, zones interleaved.
    KvInitRing {
        /// Ring partitions.
        partitions: u32,
    },
    /// Gives ring partitions new owners (rebalancing); refused if a store
    /// could no longer be placed.
    KvSetRing {
        /// The owner of every partition.
        owners: Vec<NodeId>,
    },
    /// Defines a read-only store on the ring.
    KvCreateStore {
        /// Name.
        name: String,
        /// Chunks, replication, required reads.
        spec: crate::kv::KvStoreSpec,
    },
    /// Removes a read-only store's definition.
    KvDropStore {
        /// Name.
        name: String,
    },
    /// A change to the named blobs of the S3 API (buckets, object names,
    /// uploads, access keys): not part of the map, applied by the metadata
    /// service's state machine to its name state (`strata-names`).
    Names(strata_names::NameOp),
    /// Marks a node up or down (the metadata leader, from heartbeats).
    SetNodeState {
        /// Node.
        node: NodeId,
        /// New state.
        state: NodeState,
    },
    /// Starts moving a partition's replica from one disk to another (in
    /// the same zone, to a node that holds no replica of it, with room).
    StartMove {
        /// Partition.
        partition: PartitionId,
        /// The replica that leaves.
        from: ReplicaLoc,
        /// Where its copy goes.
        to: ReplicaLoc,
        /// When (ms since the epoch).
        now_ms: u64,
    },
    /// `to` caught up: it takes `from`'s place (the move drains).
    PromoteMove {
        /// Partition.
        partition: PartitionId,
        /// The moving replica's destination (a stale proposal names another).
        to: ReplicaLoc,
    },
    /// `to` has everything `from` held: the move is over.
    FinishMove {
        /// Partition.
        partition: PartitionId,
        /// The destination.
        to: ReplicaLoc,
    },
    /// Gives up a move that has not been promoted; `to`'s copy is dropped.
    CancelMove {
        /// Partition.
        partition: PartitionId,
    },
    /// Starts removing a node: its replicas move away (the metadata
    /// leader's evacuation), then it leaves the map. Refused if a replica
    /// could not go anywhere, or if it is the last node of its zone.
    RemoveNode {
        /// Node.
        node: NodeId,
    },
    /// Starts removing a disk, as [`Command::RemoveNode`] for one disk.
    RemoveDisk {
        /// Node.
        node: NodeId,
        /// Disk index.
        disk: u32,
    },
    /// A node being removed holds nothing any more: it leaves the map.
    DropNode {
        /// Node.
        node: NodeId,
    },
    /// A disk being removed holds nothing any more: it is removed.
    DropDisk {
        /// Node.
        node: NodeId,
        /// Disk index.
        disk: u32,
    },
    /// Starts carrying out a rebalancing plan. Refused while one is under
    /// way, while a node is down or being removed or a disk not up, or for
    /// an empty plan.
    StartRebalance {
        /// The plan.
        plan: Rebalance,
    },
    /// Ends the rebalancing (done, or given up: moves under way finish).
    EndRebalance,
    /// Defines a read-write store on the ring.
    RwCreateStore {
        /// Name.
        name: String,
        /// Replication, required reads and writes, value limit.
        spec: crate::kv::RwStoreSpec,
    },
    /// Removes a read-write store's definition (its data stays on the
    /// nodes until truncated).
    RwDropStore {
        /// Name.
        name: String,
    },
    /// Makes the tract locator table of striped blobs (FDS §2.2, §3.3):
    /// rows of `replicas` disks in distinct failure domains, each disk
    /// sharing rows with about `scatter` others (Copysets), each row a
    /// partition of kind tract with replicas of `capacity_bytes`.
    TractInit {
        /// Bytes per tract, fixed for the cluster's life.
        tract_bytes: u64,
        /// Disks per row: the most replicas a blob may have.
        replicas: u32,
        /// Scatter width: the other disks each disk shares rows with.
        scatter: u32,
        /// Capacity of each row's replicas.
        capacity_bytes: u64,
        /// Seed of the table's permutations.
        seed: u64,
    },
    /// Gives disks with fewer tract rows than their share (new ones) rows
    /// of the disks with the most (FDS §3.4): a move per row, whose new
    /// replica takes writes while it fills (a pending member) and takes
    /// the old one's place when it has caught up (committed).
    TractGrow {
        /// When (ms since the epoch).
        now_ms: u64,
    },
}

/// What an applied command reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Applied; the map is now at this epoch.
    Applied {
        /// New epoch.
        epoch: u64,
    },
    /// Partitions created.
    PartitionsAdded {
        /// New epoch.
        epoch: u64,
        /// Their ids.
        ids: Vec<PartitionId>,
    },
    /// Refused; the map did not change.
    Refused(MapError),
    /// What a [`Command::Names`] op did.
    Names(Result<strata_names::Outcome, strata_names::NameError>),
}

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
    /// Applies a command. On success the epoch grows by one; on refusal the
    /// map is unchanged. Deterministic: every replica of the metadata log
    /// computes the same map.
    pub fn apply(&mut self, cmd: &Command) -> Outcome {
        if let Command::Names(_) = cmd {
            return Outcome::Names(Err(strata_names::NameError::Unavailable("name ops are applied by the metadata service, not the map".into())));
        }
        let mut next = self.clone();
        match next.apply_inner(cmd) {
            Ok(ids) => {
                next.epoch += 1;
                // A partition whose replicas or move changed (or that is
                // new) has a new version: the epoch that changed it.
                for p in next.partitions.values_mut() {
                    if self.partitions.get(&p.id).is_none_or(|old| old.replicas != p.replicas || old.moving != p.moving) {
                        p.version = next.epoch;
                    }
                }
                *self = next;
                match ids {
                    Some(ids) => Outcome::PartitionsAdded { epoch: self.epoch, ids },
                    None => Outcome::Applied { epoch: self.epoch },
                }
            }
            Err(e) => Outcome::Refused(e),
        }
    }

    fn apply_inner(&mut self, cmd: &Command) -> Result<Option<Vec<PartitionId>>, MapError> {
        let invalid = |field: &str, detail: &str| MapError::Invalid { field: field.to_string(), detail: detail.to_string() };
        match cmd {
            Command::Names(_) => Err(invalid("command", "name ops are not map commands")),
            Command::AddNode { id, addr, zone, rack } => {
                if self.nodes.contains_key(id) {
                    return Err(MapError::NodeExists(*id));
                }
                if addr.is_empty() || !addr.contains(':') {
                    return Err(invalid("address", "expected host:port"));
                }
                if zone.is_empty() || rack.is_empty() {
                    return Err(invalid("zone or rack", "must not be empty"));
                }
                if let Some(n) = self.nodes.values().find(|n| n.addr == *addr) {
                    return Err(MapError::AddressInUse { addr: addr.clone(), node: n.id });
                }
                self.nodes.insert(
                    *id,
                    Node { id: *id, addr: addr.clone(), zone: zone.clone(), rack: rack.clone(), disks: Vec::new(), state: NodeState::Up, removing: false },
                );
                Ok(None)
            }
            Command::AddDisk { node, path, capacity_bytes } => {
                let n = self.nodes.get_mut(node).ok_or(MapError::NoSuchNode(*node))?;
                if path.is_empty() {
                    return Err(invalid("disk path", "must not be empty"));
                }
                if *capacity_bytes == 0 {
                    return Err(invalid("disk capacity", "must be positive"));
                }
                if n.disks.iter().any(|d| d.path == *path) {
                    return Err(invalid("disk path", &format!("node {node} already has a disk at {path}")));
                }
                n.disks.push(Disk { path: path.clone(), capacity_bytes: *capacity_bytes, state: DiskState::Up });
                Ok(None)
            }
            Command::SetDiskState { node, disk, state } => {
                let n = self.nodes.get_mut(node).ok_or(MapError::NoSuchNode(*node))?;
                let d = n.disks.get_mut(*disk as usize).ok_or(MapError::NoSuchDisk { node: *node, disk: *disk })?;
                d.state = *state;
                Ok(None)
            }
            Command::SetNodeState { node, state } => {
                let n = self.nodes.get_mut(node).ok_or(MapError::NoSuchNode(*node))?;
                if n.state.is_up() == state.is_up() {
                    return Err(invalid("node state", &format!("node {node} is already {}", if state.is_up() { "up" } else { "down" })));
                }
                n.state = *state;
                Ok(None)
            }
            Command::StartMove { partition, from, to, now_ms } => self.start_move(*partition, *from, *to, *now_ms).map(|()| None),
            Command::PromoteMove { partition, to } => {
                let epoch = self.epoch + 1;
                let p = self.partitions.get_mut(partition).ok_or(MapError::NoSuchPartition(*partition))?;
                let m = p.moving.as_mut().filter(|m| m.to == *to && m.phase == MovePhase::Filling).ok_or(MapError::NoSuchMove(*partition))?;
                let slot = p.replicas.iter().position(|r| *r == m.from).ok_or(MapError::NoSuchMove(*partition))?;
                p.replicas[slot] = m.to;
                m.phase = MovePhase::Draining { since_epoch: epoch };
                Ok(None)
            }
            Command::FinishMove { partition, to } => {
                let p = self.partitions.get_mut(partition).ok_or(MapError::NoSuchPartition(*partition))?;
                if !p.moving.is_some_and(|m| m.to == *to && matches!(m.phase, MovePhase::Draining { .. })) {
                    return Err(MapError::NoSuchMove(*partition));
                }
                p.moving = None;
                Ok(None)
            }
            Command::CancelMove { partition } => {
                let p = self.partitions.get_mut(partition).ok_or(MapError::NoSuchPartition(*partition))?;
                match p.moving {
                    None => Err(MapError::NoSuchMove(*partition)),
                    Some(Move { phase: MovePhase::Draining { .. }, .. }) => Err(MapError::BadMove {
                        partition: *partition,
                        detail: "the new replica already took the old one's place; the move finishes on its own".into(),
                    }),
                    Some(_) => {
                        p.moving = None;
                        Ok(None)
                    }
                }
            }
            Command::RemoveNode { node } => {
                let n = self.nodes.get(node).ok_or(MapError::NoSuchNode(*node))?;
                let what = format!("node {node}");
                if n.removing {
                    return Err(MapError::CannotRemove { what, detail: "it is being removed already".into() });
                }
                if self.kv.ring.contains(node) {
                    return Err(MapError::CannotRemove {
                        what,
                        detail: "it owns read-only store ring partitions (rebalance the ring first: strata kv ring)".into(),
                    });
                }
                let zone = n.zone.clone();
                if !self.nodes.values().any(|o| o.id != *node && o.zone == zone && o.takes_replicas()) {
                    return Err(MapError::CannotRemove { what, detail: format!("it is the last node of zone {zone} that takes replicas") });
                }
                let locs: Vec<ReplicaLoc> = (0..n.disks.len() as u32).map(|disk| ReplicaLoc { node: *node, disk }).collect();
                let mut next = self.clone();
                if let Some(n) = next.nodes.get_mut(node) {
                    n.removing = true;
                }
                next.check_evacuable(&locs, &what)?;
                *self = next;
                Ok(None)
            }
            Command::RemoveDisk { node, disk } => {
                let n = self.nodes.get(node).ok_or(MapError::NoSuchNode(*node))?;
                let d = n.disks.get(*disk as usize).ok_or(MapError::NoSuchDisk { node: *node, disk: *disk })?;
                let what = format!("node {node} disk {disk}");
                if matches!(d.state, DiskState::Removing | DiskState::Removed) {
                    return Err(MapError::CannotRemove { what, detail: "it is being removed already".into() });
                }
                let mut next = self.clone();
                if let Some(d) = next.nodes.get_mut(node).and_then(|n| n.disks.get_mut(*disk as usize)) {
                    d.state = DiskState::Removing;
                }
                next.check_evacuable(&[ReplicaLoc { node: *node, disk: *disk }], &what)?;
                *self = next;
                Ok(None)
            }
            Command::DropNode { node } => {
                let n = self.nodes.get(node).ok_or(MapError::NoSuchNode(*node))?;
                if !n.removing {
                    return Err(MapError::CannotRemove { what: format!("node {node}"), detail: "it is not being removed".into() });
                }
                if let Some(p) = self.partitions.keys().find(|p| self.holders(**p).iter().any(|r| r.node == *node)) {
                    return Err(MapError::CannotRemove { what: format!("node {node}"), detail: format!("it still holds partition {p}") });
                }
                self.nodes.remove(node);
                Ok(None)
            }
            Command::DropDisk { node, disk } => {
                let loc = ReplicaLoc { node: *node, disk: *disk };
                let what = format!("node {node} disk {disk}");
                let state = self
                    .nodes
                    .get(node)
                    .ok_or(MapError::NoSuchNode(*node))?
                    .disks
                    .get(*disk as usize)
                    .ok_or(MapError::NoSuchDisk { node: *node, disk: *disk })?
                    .state;
                if state != DiskState::Removing {
                    return Err(MapError::CannotRemove { what, detail: "it is not being removed".into() });
                }
                if let Some(p) = self.partitions.keys().find(|p| self.holders(**p).contains(&loc)) {
                    return Err(MapError::CannotRemove { what, detail: format!("it still holds partition {p}") });
                }
                if let Some(d) = self.nodes.get_mut(node).and_then(|n| n.disks.get_mut(*disk as usize)) {
                    d.state = DiskState::Removed;
                }
                Ok(None)
            }
            Command::StartRebalance { plan } => {
                if self.rebalance.is_some() {
                    return Err(MapError::CannotRebalance("a rebalancing is under way (strata cluster rebalance --cancel ends it)".into()));
                }
                self.unsettled().map_err(MapError::CannotRebalance)?;
                if plan.moves.is_empty() {
                    return Err(MapError::CannotRebalance("the plan moves nothing".into()));
                }
                if plan.max_moves == 0 || plan.max_moves > 64 {
                    return Err(invalid("max moves", "must be 1..=64"));
                }
                self.rebalance = Some(plan.clone());
                Ok(None)
            }
            Command::EndRebalance => {
                if self.rebalance.take().is_none() {
                    return Err(MapError::CannotRebalance("no rebalancing is under way".into()));
                }
                Ok(None)
            }
            Command::SetPolicies { policies } => {
                for (op, p) in [("put", policies.put), ("get", policies.get), ("delete", policies.delete), ("ttl update", policies.ttl_update)] {
                    if let Policy::Count(k) | Policy::Local(k) = p
                        && !(1..=16).contains(&k)
                    {
                        return Err(invalid("policy", &format!("{op} needs 1..=16 acks, not {k}")));
                    }
                }
                self.policies = *policies;
                Ok(None)
            }
            Command::SetPartitionState { partition, state } => {
                let p = self.partitions.get_mut(partition).ok_or(MapError::NoSuchPartition(*partition))?;
                p.state = *state;
                Ok(None)
            }
            Command::AddPartitions { count, replicas_per_zone, capacity_bytes } => {
                if *count == 0 || *count > 100_000 {
                    return Err(invalid("partition count", "must be 1..=100000"));
                }
                if *replicas_per_zone == 0 || *replicas_per_zone > 16 {
                    return Err(invalid("replicas per zone", "must be 1..=16"));
                }
                if *capacity_bytes == 0 {
                    return Err(invalid("partition capacity", "must be positive"));
                }
                self.add_partitions(*count, *replicas_per_zone as usize, *capacity_bytes).map(Some)
            }
            Command::KvInitRing { partitions } => self.kv_init_ring(*partitions).map(|()| None),
            Command::KvSetRing { owners } => self.kv_set_ring(owners).map(|()| None),
            Command::KvCreateStore { name, spec } => self.kv_create_store(name, spec).map(|()| None),
            Command::KvDropStore { name } => self.kv_drop_store(name).map(|()| None),
            Command::RwCreateStore { name, spec } => self.rw_create_store(name, spec).map(|()| None),
            Command::RwDropStore { name } => self.rw_drop_store(name).map(|()| None),
            Command::TractInit { tract_bytes, replicas, scatter, capacity_bytes, seed } => {
                self.tract_init(*tract_bytes, *replicas, *scatter, *capacity_bytes, *seed).map(Some)
            }
            Command::TractGrow { now_ms } => self.tract_grow(*now_ms).map(Some),
        }
    }

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

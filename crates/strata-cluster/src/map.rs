//! The map document and the commands that change it.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use strata_placement::ambry::{Disk as PlacementDisk, Layout, Replica as PlacementReplica};
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
        }
    }

    /// Zones, sorted.
    pub fn zones(&self) -> BTreeSet<&str> {
        self.nodes.values().map(|n| n.zone.as_str()).collect()
    }

    fn add_partitions(&mut self, count: u32, per_zone: usize, capacity: u64) -> Result<Vec<PartitionId>, MapError> {
        let zones: Vec<String> = self.zones().into_iter().map(String::from).collect();
        if zones.is_empty() {
            return Err(MapError::NoRoom { zone: "-".into(), detail: "the cluster has no nodes".into() });
        }
        // One placement layout per zone; inside a zone, racks play the part
        // of the placement library's zones so replicas spread over racks.
        let mut layouts = Vec::new();
        for zone in &zones {
            let mut disks = Vec::new();
            let mut where_: Vec<ReplicaLoc> = Vec::new();
            let racks: Vec<&str> = self.nodes.values().filter(|n| n.zone == *zone).map(|n| n.rack.as_str()).collect::<BTreeSet<_>>().into_iter().collect();
            for n in self.nodes.values().filter(|n| n.zone == *zone) {
                let rack = racks.iter().position(|r| *r == n.rack).unwrap_or(0);
                for (i, d) in n.disks.iter().enumerate() {
                    if d.state.takes_replicas() && n.takes_replicas() {
                        disks.push(PlacementDisk { node: n.id as usize, zone: rack, capacity: d.capacity_bytes });
                        where_.push(ReplicaLoc { node: n.id, disk: i as u32 });
                    }
                }
            }
            let mut replicas = vec![Vec::new(); disks.len()];
            for p in self.partitions.values() {
                for r in &p.replicas {
                    if let Some(d) = where_.iter().position(|w| w == r) {
                        replicas[d].push(PlacementReplica {
                            partition: p.id as usize,
                            read_write: p.state == PartitionState::ReadWrite,
                            used: 0,
                            allocated: p.capacity_bytes,
                        });
                    }
                }
            }
            let nodes_in_zone =
                self.nodes.values().filter(|n| n.zone == *zone && n.takes_replicas() && n.disks.iter().any(|d| d.state.takes_replicas())).count();
            if nodes_in_zone == 0 {
                return Err(MapError::NoRoom { zone: zone.clone(), detail: "no node that is up with a disk that is up".into() });
            }
            layouts.push((zone.clone(), Layout { disks, replicas }, where_, per_zone.min(nodes_in_zone)));
        }
        let first = self.partitions.keys().next_back().map_or(0, |p| p + 1);
        let mut ids = Vec::with_capacity(count as usize);
        for id in first..first + count as u64 {
            let mut replicas = Vec::new();
            for (zone, layout, where_, n) in layouts.iter_mut() {
                let chosen = layout.place_partition(id as usize, *n, capacity).ok_or_else(|| MapError::NoRoom {
                    zone: zone.clone(),
                    detail: format!("{n} replicas of {capacity} bytes on distinct nodes do not fit the unallocated space"),
                })?;
                replicas.extend(chosen.into_iter().map(|d| where_[d]));
            }
            self.partitions.insert(id, Partition { id, state: PartitionState::ReadWrite, capacity_bytes: capacity, replicas, moving: None });
            ids.push(id);
        }
        Ok(ids)
    }

    fn start_move(&mut self, partition: PartitionId, from: ReplicaLoc, to: ReplicaLoc, now_ms: u64) -> Result<(), MapError> {
        let bad = |detail: String| MapError::BadMove { partition, detail };
        let p = self.partitions.get(&partition).ok_or(MapError::NoSuchPartition(partition))?;
        if p.moving.is_some() {
            return Err(MapError::AlreadyMoving(partition));
        }
        if !p.replicas.contains(&from) {
            return Err(bad(format!("node {} disk {} holds no replica of it", from.node, from.disk)));
        }
        let source = self.nodes.get(&from.node).ok_or(MapError::NoSuchNode(from.node))?;
        let dest = self.nodes.get(&to.node).ok_or(MapError::NoSuchNode(to.node))?;
        let disk = dest.disks.get(to.disk as usize).ok_or(MapError::NoSuchDisk { node: to.node, disk: to.disk })?;
        if p.replicas.iter().any(|r| r.node == to.node) {
            return Err(bad(format!("node {} already holds a replica of it (replicas go to distinct nodes)", to.node)));
        }
        if dest.zone != source.zone {
            return Err(bad(format!("node {} is in zone {}, the replica's zone is {} (a move stays in its zone)", to.node, dest.zone, source.zone)));
        }
        if !dest.takes_replicas() || !disk.state.takes_replicas() {
            return Err(bad(format!("node {} disk {} is not up (or is being removed)", to.node, to.disk)));
        }
        let used = self.allocated().get(&to).copied().unwrap_or(0);
        if used.saturating_add(p.capacity_bytes) > disk.capacity_bytes {
            return Err(bad(format!(
                "node {} disk {} has {} of {} bytes unallocated, the replica needs {}",
                to.node,
                to.disk,
                disk.capacity_bytes.saturating_sub(used),
                disk.capacity_bytes,
                p.capacity_bytes
            )));
        }
        let p = self.partitions.get_mut(&partition).ok_or(MapError::NoSuchPartition(partition))?;
        p.moving = Some(Move { from, to, started_ms: now_ms, phase: MovePhase::Filling });
        Ok(())
    }

    /// Whether a replica at `loc` must leave: its node or disk is being
    /// removed, its disk failed, or its node has been down for
    /// `down_out_ms` (Ceph's down-out interval) at `now_ms`.
    pub fn must_leave(&self, loc: ReplicaLoc, now_ms: u64, down_out_ms: u64) -> bool {
        let Some(n) = self.nodes.get(&loc.node) else { return true };
        let disk = n.disks.get(loc.disk as usize).map(|d| d.state);
        n.removing
            || matches!(disk, None | Some(DiskState::Failed | DiskState::Removing | DiskState::Removed))
            || matches!(n.state, NodeState::Down { since_ms } if now_ms.saturating_sub(since_ms) >= down_out_ms)
    }

    /// Where the replica of `partition` at `from` can go: a disk of its
    /// zone that takes replicas, with room, on a node holding no copy of
    /// the partition; a rack the partition does not use yet first, then
    /// the disk with the most unallocated room (Ambry's greedy choice).
    pub fn move_target(&self, partition: PartitionId, from: ReplicaLoc) -> Option<ReplicaLoc> {
        let p = self.partitions.get(&partition)?;
        let zone = &self.nodes.get(&from.node)?.zone;
        let holders = self.holders(partition);
        let racks: BTreeSet<&str> = holders.iter().filter(|r| **r != from).filter_map(|r| self.nodes.get(&r.node)).map(|n| n.rack.as_str()).collect();
        let allocated = self.allocated();
        let mut best: Option<(bool, u64, ReplicaLoc)> = None;
        for n in self.nodes.values().filter(|n| &n.zone == zone && n.takes_replicas() && !holders.iter().any(|r| r.node == n.id)) {
            for (i, d) in n.disks.iter().enumerate() {
                let loc = ReplicaLoc { node: n.id, disk: i as u32 };
                let used = allocated.get(&loc).copied().unwrap_or(0);
                if !d.state.takes_replicas() || used.saturating_add(p.capacity_bytes) > d.capacity_bytes {
                    continue;
                }
                let key = (!racks.contains(n.rack.as_str()), d.capacity_bytes - used, loc);
                if best.is_none_or(|b| (key.0, key.1) > (b.0, b.1)) {
                    best = Some(key);
                }
            }
        }
        best.map(|b| b.2)
    }

    /// Refuses a removal (already marked in `self`) if a replica at `locs`
    /// would have nowhere to go, naming the partition.
    fn check_evacuable(&self, locs: &[ReplicaLoc], what: &str) -> Result<(), MapError> {
        let mut trial = self.clone();
        for p in self.partitions.values() {
            for r in p.replicas.iter().filter(|r| locs.contains(r)) {
                let Some(to) = trial.move_target(p.id, *r) else {
                    return Err(MapError::CannotRemove {
                        what: what.to_string(),
                        detail: format!(
                            "partition {}'s replica on node {} disk {} has nowhere to go in its zone (a node without a copy, with room)",
                            p.id, r.node, r.disk
                        ),
                    });
                };
                // Book the room, as the moves will.
                if let Some(tp) = trial.partitions.get_mut(&p.id) {
                    tp.replicas.push(to);
                }
            }
        }
        Ok(())
    }

    /// The next steps of evacuation (removals, failed disks, nodes down
    /// past `down_out_ms`), for the metadata leader to propose: a move for
    /// each partition with a replica that must leave and no move under way
    /// (at most `max_moves` under way in all), and the removal of nodes and
    /// disks that hold nothing any more.
    pub fn evacuation(&self, now_ms: u64, down_out_ms: u64, max_moves: usize) -> Vec<Command> {
        let mut out = Vec::new();
        let mut under_way = self.partitions.values().filter(|p| p.moving.is_some()).count();
        // Each move chosen is booked in a trial map before the next is
        // chosen, so a batch spreads its writes over the zone's disks
        // instead of piling them on the one with the most room.
        let mut trial = self.clone();
        for p in self.partitions.values().filter(|p| p.moving.is_none()) {
            if under_way >= max_moves {
                break;
            }
            let Some(from) = p.replicas.iter().copied().find(|r| self.must_leave(*r, now_ms, down_out_ms)) else { continue };
            // A partition none of whose replicas serves has nothing to copy from.
            if !p.replicas.iter().any(|r| *r != from && self.serves(*r)) {
                continue;
            }
            if let Some(to) = trial.move_target(p.id, from) {
                let cmd = Command::StartMove { partition: p.id, from, to, now_ms };
                trial.apply(&cmd);
                out.push(cmd);
                under_way += 1;
            }
        }
        for n in self.nodes.values() {
            let holds = |loc: &dyn Fn(&ReplicaLoc) -> bool| self.partitions.keys().any(|p| self.holders(*p).iter().any(loc));
            if n.removing && !holds(&|r| r.node == n.id) {
                out.push(Command::DropNode { node: n.id });
                continue;
            }
            for (i, d) in n.disks.iter().enumerate() {
                let loc = ReplicaLoc { node: n.id, disk: i as u32 };
                if d.state == DiskState::Removing && !holds(&|r| *r == loc) {
                    out.push(Command::DropDisk { node: n.id, disk: i as u32 });
                }
            }
        }
        out
    }

    /// Why the cluster is not settled enough to rebalance: a node down or
    /// being removed, a disk not up, a move under way.
    pub fn unsettled(&self) -> Result<(), String> {
        for n in self.nodes.values() {
            if !n.state.is_up() {
                return Err(format!("node {} is down (wait for it, or remove it, first)", n.id));
            }
            if n.removing {
                return Err(format!("node {} is being removed", n.id));
            }
            if let Some((i, d)) = n.disks.iter().enumerate().find(|(_, d)| !matches!(d.state, DiskState::Up | DiskState::Removed)) {
                return Err(format!("node {} disk {i} is {:?}", n.id, d.state));
            }
        }
        if let Some(p) = self.partitions.values().find(|p| p.moving.is_some()) {
            return Err(format!("partition {} is moving a replica", p.id));
        }
        Ok(())
    }

    /// Ambry's rebalancing (Algorithm 1, `strata_placement::ambry`, the
    /// code the simulator runs) planned on this map, zone by zone (racks
    /// standing in for the library's zones, as for placement), over the
    /// disks that take replicas.
    pub fn rebalance_plan(&self, seed: u64) -> Result<Vec<PlannedMove>, MapError> {
        if self.rebalance.is_some() {
            return Err(MapError::CannotRebalance("a rebalancing is under way (strata cluster rebalance --cancel ends it)".into()));
        }
        self.unsettled().map_err(MapError::CannotRebalance)?;
        let mut plan = Vec::new();
        for zone in self.zones() {
            let racks: Vec<&str> = self.nodes.values().filter(|n| n.zone == zone).map(|n| n.rack.as_str()).collect::<BTreeSet<_>>().into_iter().collect();
            let mut disks = Vec::new();
            let mut where_: Vec<ReplicaLoc> = Vec::new();
            for n in self.nodes.values().filter(|n| n.zone == zone && n.takes_replicas()) {
                let rack = racks.iter().position(|r| *r == n.rack).unwrap_or(0);
                for (i, d) in n.disks.iter().enumerate().filter(|(_, d)| d.state.takes_replicas()) {
                    disks.push(PlacementDisk { node: n.id as usize, zone: rack, capacity: d.capacity_bytes });
                    where_.push(ReplicaLoc { node: n.id, disk: i as u32 });
                }
            }
            let mut replicas = vec![Vec::new(); disks.len()];
            for p in self.partitions.values() {
                for r in &p.replicas {
                    if let Some(d) = where_.iter().position(|w| w == r) {
                        let read_write = p.state == PartitionState::ReadWrite;
                        replicas[d].push(PlacementReplica { partition: p.id as usize, read_write, used: p.capacity_bytes, allocated: p.capacity_bytes });
                    }
                }
            }
            let mut layout = Layout { disks, replicas };
            for m in layout.rebalance(seed, strata_placement::ambry::Phase1Rule::WholePartitions) {
                plan.push(PlannedMove { partition: m.partition as PartitionId, from: where_[m.from], to: where_[m.to], bytes: m.bytes });
            }
        }
        Ok(plan)
    }

    /// Where a planned move stands.
    pub fn plan_state(&self, m: &PlannedMove) -> PlanState {
        let Some(p) = self.partitions.get(&m.partition) else { return PlanState::Stale };
        if let Some(mv) = p.moving {
            return if mv.from == m.from && mv.to == m.to { PlanState::UnderWay } else { PlanState::Stale };
        }
        match (p.replicas.contains(&m.from), p.replicas.contains(&m.to)) {
            (false, true) => PlanState::Done,
            (true, false) => PlanState::Pending,
            _ => PlanState::Stale,
        }
    }

    /// The next steps of the rebalancing under way, for the leader: start
    /// pending moves (in plan order) while fewer than its `max_moves` are
    /// under way, skipping one that can no longer be made; end it once no
    /// move is pending or under way.
    pub fn rebalance_steps(&self, now_ms: u64) -> Vec<Command> {
        let Some(plan) = &self.rebalance else { return Vec::new() };
        let states: Vec<PlanState> = plan.moves.iter().map(|m| self.plan_state(m)).collect();
        if states.iter().all(|s| matches!(s, PlanState::Done | PlanState::Stale)) {
            return vec![Command::EndRebalance];
        }
        let mut under_way = self.partitions.values().filter(|p| p.moving.is_some()).count();
        let mut trial = self.clone();
        let mut out = Vec::new();
        for (m, st) in plan.moves.iter().zip(&states) {
            if under_way >= plan.max_moves as usize {
                break;
            }
            if *st != PlanState::Pending {
                continue;
            }
            let cmd = Command::StartMove { partition: m.partition, from: m.from, to: m.to, now_ms };
            if let Outcome::Applied { .. } = trial.apply(&cmd) {
                out.push(cmd);
                under_way += 1;
            }
        }
        out
    }

    /// How evenly the disks that take replicas are allocated.
    pub fn spread(&self) -> Spread {
        let allocated = self.allocated();
        let fractions: Vec<f64> = self
            .nodes
            .values()
            .filter(|n| n.takes_replicas())
            .flat_map(|n| n.disks.iter().enumerate().filter(|(_, d)| d.state.takes_replicas()).map(move |(i, d)| (n.id, i as u32, d.capacity_bytes)))
            .map(|(node, disk, cap)| allocated.get(&ReplicaLoc { node, disk }).copied().unwrap_or(0) as f64 / cap.max(1) as f64)
            .collect();
        let n = fractions.len();
        if n == 0 {
            return Spread { disks: 0, min: 0.0, max: 0.0, mean: 0.0, stddev: 0.0 };
        }
        let mean = fractions.iter().sum::<f64>() / n as f64;
        let var = fractions.iter().map(|f| (f - mean).powi(2)).sum::<f64>() / n as f64;
        Spread {
            disks: n,
            min: fractions.iter().copied().fold(f64::INFINITY, f64::min),
            max: fractions.iter().copied().fold(0.0, f64::max),
            mean,
            stddev: var.sqrt(),
        }
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
mod tests {
    use super::*;

    fn cluster(zones: usize, nodes_per_zone: usize, racks_per_zone: usize) -> ClusterMap {
        let mut m = ClusterMap::default();
        for z in 0..zones {
            for i in 0..nodes_per_zone {
                let id = (z * nodes_per_zone + i + 1) as u64;
                let cmd = Command::AddNode { id, addr: format!("127.0.0.{id}:7000"), zone: format!("z{z}"), rack: format!("r{}", i % racks_per_zone) };
                assert!(matches!(m.apply(&cmd), Outcome::Applied { .. }));
                let cmd = Command::AddDisk { node: id, path: "d0".into(), capacity_bytes: 1 << 40 };
                assert!(matches!(m.apply(&cmd), Outcome::Applied { .. }));
            }
        }
        m
    }

    #[test]
    fn partitions_spread_over_zones_nodes_and_racks() {
        let mut m = cluster(3, 4, 2);
        let out = m.apply(&Command::AddPartitions { count: 20, replicas_per_zone: 2, capacity_bytes: 1 << 30 });
        let Outcome::PartitionsAdded { ids, epoch } = out else { panic!("{out:?}") };
        assert_eq!(ids.len(), 20);
        assert_eq!(epoch, m.epoch);
        for p in m.partitions.values() {
            assert_eq!(p.replicas.len(), 6);
            let nodes: BTreeSet<NodeId> = p.replicas.iter().map(|r| r.node).collect();
            assert_eq!(nodes.len(), 6, "one replica per node");
            for z in m.zones() {
                let in_zone: Vec<&Node> = p.replicas.iter().map(|r| &m.nodes[&r.node]).filter(|n| n.zone == z).collect();
                assert_eq!(in_zone.len(), 2, "two replicas in zone {z}");
                let racks: BTreeSet<&str> = in_zone.iter().map(|n| n.rack.as_str()).collect();
                assert_eq!(racks.len(), 2, "replicas in a zone on distinct racks");
            }
        }
        // Greedy by unallocated space: every node ends with the same count.
        let per_node: BTreeMap<NodeId, usize> = m.allocated().into_iter().map(|(l, b)| (l.node, (b >> 30) as usize)).collect();
        assert!(per_node.values().all(|&c| c == 10), "{per_node:?}");
    }

    #[test]
    fn refused_commands_change_nothing() {
        let mut m = cluster(1, 2, 1);
        let before = m.clone();
        for cmd in [
            Command::AddNode { id: 1, addr: "x:1".into(), zone: "z".into(), rack: "r".into() },
            Command::AddNode { id: 9, addr: "127.0.0.1:7000".into(), zone: "z".into(), rack: "r".into() },
            Command::AddNode { id: 9, addr: "nocolon".into(), zone: "z".into(), rack: "r".into() },
            Command::AddDisk { node: 42, path: "d".into(), capacity_bytes: 1 },
            Command::AddDisk { node: 1, path: "d0".into(), capacity_bytes: 1 },
            Command::SetDiskState { node: 1, disk: 5, state: DiskState::Down },
            Command::SetPartitionState { partition: 3, state: PartitionState::ReadOnly },
            Command::AddPartitions { count: 0, replicas_per_zone: 3, capacity_bytes: 1 },
            Command::SetPolicies { policies: strata_types::Policies { put: Policy::Count(0), ..Default::default() } },
            Command::SetPolicies { policies: strata_types::Policies { get: Policy::Count(17), ..Default::default() } },
            // Three replicas per zone capped at two nodes; but 2 TiB replicas do not fit 1 TiB disks.
            Command::AddPartitions { count: 1, replicas_per_zone: 3, capacity_bytes: 2 << 40 },
        ] {
            assert!(matches!(m.apply(&cmd), Outcome::Refused(_)), "{cmd:?}");
            assert_eq!(m, before, "{cmd:?} changed the map");
        }
    }

    #[test]
    fn down_disks_get_no_new_replicas() {
        let mut m = cluster(1, 3, 3);
        m.apply(&Command::SetDiskState { node: 2, disk: 0, state: DiskState::Down });
        m.apply(&Command::AddPartitions { count: 5, replicas_per_zone: 3, capacity_bytes: 1 << 30 });
        assert!(m.partitions.values().all(|p| p.replicas.len() == 2 && p.replicas.iter().all(|r| r.node != 2)));
    }

    #[test]
    fn a_move_fills_is_promoted_drains_and_finishes() {
        let mut m = cluster(2, 4, 2);
        m.apply(&Command::AddPartitions { count: 1, replicas_per_zone: 2, capacity_bytes: 1 << 30 });
        let p0 = m.partitions[&0].clone();
        let from = p0.replicas[0];
        let zone = m.nodes[&from.node].zone.clone();
        let to_node = m.nodes.values().find(|n| n.zone == zone && !p0.replicas.iter().any(|r| r.node == n.id)).expect("a free node").id;
        let to = ReplicaLoc { node: to_node, disk: 0 };
        assert!(matches!(m.apply(&Command::StartMove { partition: 0, from, to, now_ms: 5 }), Outcome::Applied { .. }));
        assert_eq!(m.holders(0).len(), 5, "four replicas and the pending one");
        assert!(m.partitions[&0].replicas.contains(&from) && !m.partitions[&0].replicas.contains(&to), "pending until promoted");
        assert_eq!(m.allocated()[&to], 1 << 30, "the pending replica's room is taken");
        // A stale promotion naming another destination is refused.
        let other = ReplicaLoc { node: to_node, disk: 7 };
        assert!(matches!(m.apply(&Command::PromoteMove { partition: 0, to: other }), Outcome::Refused(MapError::NoSuchMove(0))));
        assert!(matches!(m.apply(&Command::FinishMove { partition: 0, to }), Outcome::Refused(MapError::NoSuchMove(0))), "not before promotion");
        assert!(matches!(m.apply(&Command::PromoteMove { partition: 0, to }), Outcome::Applied { .. }));
        let p = &m.partitions[&0];
        assert_eq!(p.replicas[0], to, "the new replica takes the old one's slot");
        assert_eq!(p.moving.map(|m| m.phase), Some(MovePhase::Draining { since_epoch: m.epoch }));
        assert!(matches!(m.apply(&Command::CancelMove { partition: 0 }), Outcome::Refused(MapError::BadMove { .. })), "too late to cancel");
        assert!(matches!(m.apply(&Command::FinishMove { partition: 0, to }), Outcome::Applied { .. }));
        assert_eq!(m.holders(0), m.partitions[&0].replicas);
        assert!(!m.holders(0).contains(&from));
        // Cancelled before promotion: as if it never started.
        let from = m.partitions[&0].replicas[1];
        let to = ReplicaLoc { node: p0.replicas[0].node, disk: 0 };
        let zone_ok = m.nodes[&from.node].zone == m.nodes[&to.node].zone;
        if zone_ok {
            let before = m.partitions[&0].clone();
            assert!(matches!(m.apply(&Command::StartMove { partition: 0, from, to, now_ms: 9 }), Outcome::Applied { .. }));
            assert!(matches!(m.apply(&Command::CancelMove { partition: 0 }), Outcome::Applied { .. }));
            assert_eq!(m.partitions[&0], before);
        }
    }

    /// A move to a disk without room, to a node that already holds a
    /// replica, to another zone, to a disk that is not up, of a replica
    /// that is not there, or of a partition already moving: refused, and
    /// the map is unchanged.
    #[test]
    fn bad_moves_are_refused_and_change_nothing() {
        let mut m = cluster(2, 3, 1);
        m.apply(&Command::AddDisk { node: 3, path: "small".into(), capacity_bytes: 1 << 20 });
        m.apply(&Command::AddPartitions { count: 2, replicas_per_zone: 2, capacity_bytes: 1 << 30 });
        let p = m.partitions[&0].clone();
        let from = p.replicas[0];
        let zone = m.nodes[&from.node].zone.clone();
        let in_zone: Vec<NodeId> = m.nodes.values().filter(|n| n.zone == zone).map(|n| n.id).collect();
        let free = *in_zone.iter().find(|n| !p.replicas.iter().any(|r| r.node == **n)).expect("a free node in the zone");
        let holder = p.replicas.iter().find(|r| r.node != from.node && in_zone.contains(&r.node)).expect("another replica in the zone").node;
        let elsewhere = m.nodes.values().find(|n| n.zone != zone && !p.replicas.iter().any(|r| r.node == n.id)).expect("a free node in another zone").id;
        m.apply(&Command::SetDiskState { node: free, disk: 0, state: DiskState::Failed });
        let before = m.clone();
        let cases = [
            (Command::StartMove { partition: 0, from, to: ReplicaLoc { node: holder, disk: 0 }, now_ms: 1 }, "already holds a replica"),
            (Command::StartMove { partition: 0, from, to: ReplicaLoc { node: from.node, disk: 0 }, now_ms: 1 }, "already holds a replica"),
            (Command::StartMove { partition: 0, from, to: ReplicaLoc { node: elsewhere, disk: 0 }, now_ms: 1 }, "stays in its zone"),
            (Command::StartMove { partition: 0, from, to: ReplicaLoc { node: free, disk: 0 }, now_ms: 1 }, "is not up"),
            (
                Command::StartMove { partition: 0, from: ReplicaLoc { node: free, disk: 0 }, to: ReplicaLoc { node: free, disk: 0 }, now_ms: 1 },
                "holds no replica",
            ),
            (Command::StartMove { partition: 9, from, to: ReplicaLoc { node: free, disk: 0 }, now_ms: 1 }, "does not exist"),
            (Command::StartMove { partition: 0, from, to: ReplicaLoc { node: free, disk: 5 }, now_ms: 1 }, "has no disk"),
            (Command::CancelMove { partition: 0 }, "no such move"),
        ];
        for (cmd, why) in cases {
            match m.apply(&cmd) {
                Outcome::Refused(e) => assert!(e.to_string().contains(why), "{cmd:?}: {e}"),
                other => panic!("{cmd:?} was not refused: {other:?}"),
            }
            assert_eq!(m, before, "{cmd:?} changed the map");
        }
        // No room: node 3's small disk (if node 3 is a free node of the zone).
        if m.nodes[&3].zone == zone && !p.replicas.iter().any(|r| r.node == 3) {
            let out = m.apply(&Command::StartMove { partition: 0, from, to: ReplicaLoc { node: 3, disk: 1 }, now_ms: 1 });
            assert!(matches!(&out, Outcome::Refused(MapError::BadMove { detail, .. }) if detail.contains("unallocated")), "{out:?}");
        }
        // Already moving.
        m.apply(&Command::SetDiskState { node: free, disk: 0, state: DiskState::Up });
        assert!(matches!(m.apply(&Command::StartMove { partition: 0, from, to: ReplicaLoc { node: free, disk: 0 }, now_ms: 1 }), Outcome::Applied { .. }));
        let moving = m.clone();
        let again = m.apply(&Command::StartMove { partition: 0, from: p.replicas[1], to: ReplicaLoc { node: free, disk: 0 }, now_ms: 2 });
        assert!(matches!(again, Outcome::Refused(MapError::AlreadyMoving(0))), "{again:?}");
        assert_eq!(m, moving);
    }

    /// Runs evacuation as the leader would, with every move finishing at
    /// once, until it has nothing left to do.
    fn evacuate(m: &mut ClusterMap, now_ms: u64, down_out_ms: u64) {
        for _ in 0..100 {
            let cmds = m.evacuation(now_ms, down_out_ms, 2);
            let moving: Vec<(PartitionId, ReplicaLoc)> = m.partitions.values().filter_map(|p| p.moving.map(|mv| (p.id, mv.to))).collect();
            if cmds.is_empty() && moving.is_empty() {
                return;
            }
            for c in cmds {
                assert!(matches!(m.apply(&c), Outcome::Applied { .. }), "{c:?}");
            }
            for (partition, to) in moving {
                assert!(matches!(m.apply(&Command::PromoteMove { partition, to }), Outcome::Applied { .. }));
                assert!(matches!(m.apply(&Command::FinishMove { partition, to }), Outcome::Applied { .. }));
            }
        }
        panic!("evacuation never ended");
    }

    #[test]
    fn a_removed_node_is_emptied_then_dropped_and_impossible_removals_are_refused() {
        let mut m = cluster(2, 4, 2);
        m.apply(&Command::AddPartitions { count: 8, replicas_per_zone: 3, capacity_bytes: 1 << 30 });
        assert!(matches!(m.apply(&Command::RemoveNode { node: 1 }), Outcome::Applied { .. }));
        assert!(m.nodes[&1].removing && m.serves(ReplicaLoc { node: 1, disk: 0 }), "it serves while it empties");
        evacuate(&mut m, 0, u64::MAX);
        assert!(!m.nodes.contains_key(&1), "dropped once empty");
        for p in m.partitions.values() {
            assert_eq!(p.replicas.len(), 6);
            let nodes: BTreeSet<NodeId> = p.replicas.iter().map(|r| r.node).collect();
            assert_eq!(nodes.len(), 6, "still one replica per node");
            assert_eq!(p.replicas.iter().filter(|r| m.nodes[&r.node].zone == "z0").count(), 3, "still three in zone z0");
        }
        // Zone z0 has three nodes for three replicas: none can go now.
        let before = m.clone();
        match m.apply(&Command::RemoveNode { node: 2 }) {
            Outcome::Refused(MapError::CannotRemove { detail, .. }) => assert!(detail.contains("partition") && detail.contains("nowhere to go"), "{detail}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(m, before);
        // The last node of a zone cannot go either.
        let mut m = cluster(2, 1, 1);
        match m.apply(&Command::RemoveNode { node: 1 }) {
            Outcome::Refused(MapError::CannotRemove { detail, .. }) => assert!(detail.contains("last node of zone z0"), "{detail}"),
            other => panic!("{other:?}"),
        }
        // A disk: its replicas go to other nodes' disks, then it is removed
        // (its index stays).
        let mut m = cluster(1, 4, 2);
        m.apply(&Command::AddDisk { node: 1, path: "d1".into(), capacity_bytes: 1 << 40 });
        m.apply(&Command::AddPartitions { count: 6, replicas_per_zone: 2, capacity_bytes: 1 << 30 });
        assert!(matches!(m.apply(&Command::RemoveDisk { node: 1, disk: 0 }), Outcome::Applied { .. }));
        evacuate(&mut m, 0, u64::MAX);
        assert_eq!(m.nodes[&1].disks[0].state, DiskState::Removed);
        assert!(m.partitions.values().all(|p| !p.replicas.contains(&ReplicaLoc { node: 1, disk: 0 })));
        assert!(matches!(m.apply(&Command::DropNode { node: 2 }), Outcome::Refused(_)), "not being removed");
    }

    #[test]
    fn failed_disks_and_nodes_down_past_the_down_out_time_are_re_replicated() {
        let mut m = cluster(1, 5, 5);
        m.apply(&Command::AddPartitions { count: 6, replicas_per_zone: 3, capacity_bytes: 1 << 30 });
        m.apply(&Command::SetNodeState { node: 2, state: NodeState::Down { since_ms: 1_000 } });
        // Not yet out: nothing moves.
        assert!(m.evacuation(5_000, 10_000, 8).is_empty());
        // Out: every replica on node 2 goes elsewhere, from the survivors.
        evacuate(&mut m, 11_000, 10_000);
        assert!(m.partitions.values().all(|p| p.replicas.len() == 3 && p.replicas.iter().all(|r| r.node != 2)));
        assert!(m.nodes.contains_key(&2), "a dead node stays in the map (empty) until removed");
        m.apply(&Command::SetDiskState { node: 3, disk: 0, state: DiskState::Failed });
        evacuate(&mut m, 11_000, 10_000);
        assert!(m.partitions.values().all(|p| p.replicas.iter().all(|r| r.node != 2 && r.node != 3)));
        assert_eq!(m.degraded(), Vec::<PartitionId>::new());
        // Bounded: no more than the moves allowed start at once.
        let mut m = cluster(1, 5, 5);
        m.apply(&Command::AddPartitions { count: 6, replicas_per_zone: 3, capacity_bytes: 1 << 30 });
        m.apply(&Command::SetDiskState { node: 1, disk: 0, state: DiskState::Failed });
        let starts = m.evacuation(0, u64::MAX, 2).iter().filter(|c| matches!(c, Command::StartMove { .. })).count();
        assert!(starts <= 2, "{starts}");
        // A batch spreads over the zone: no disk takes two of it while
        // another free one takes none.
        let mut m = cluster(1, 9, 9);
        m.apply(&Command::AddPartitions { count: 9, replicas_per_zone: 3, capacity_bytes: 1 << 30 });
        m.apply(&Command::SetDiskState { node: 1, disk: 0, state: DiskState::Failed });
        let targets: Vec<NodeId> =
            m.evacuation(0, u64::MAX, 16).iter().filter_map(|c| if let Command::StartMove { to, .. } = c { Some(to.node) } else { None }).collect();
        let distinct: BTreeSet<NodeId> = targets.iter().copied().collect();
        assert!(targets.len() >= 2 && distinct.len() * 2 >= targets.len(), "{targets:?}");
    }

    #[test]
    fn a_rebalance_onto_a_new_node_plans_carries_out_and_ends() {
        let mut m = cluster(1, 3, 3);
        m.apply(&Command::AddPartitions { count: 12, replicas_per_zone: 2, capacity_bytes: 1 << 30 });
        let before = m.spread();
        // Balanced already: nothing to move.
        assert!(m.rebalance_plan(1).unwrap().is_empty());
        m.apply(&Command::AddNode { id: 9, addr: "127.0.0.9:7000".into(), zone: "z0".into(), rack: "r9".into() });
        m.apply(&Command::AddDisk { node: 9, path: "d0".into(), capacity_bytes: 1 << 40 });
        let plan = m.rebalance_plan(1).unwrap();
        assert!(!plan.is_empty() && plan.iter().all(|p| p.to.node == 9), "{plan:?}");
        let again = m.rebalance_plan(1).unwrap();
        assert_eq!(plan, again, "deterministic for a seed");
        let out = m.apply(&Command::StartRebalance { plan: Rebalance { moves: plan.clone(), max_moves: 2, throttle_mb_s: 0, started_ms: 1 } });
        assert!(matches!(out, Outcome::Applied { .. }), "{out:?}");
        assert!(matches!(m.apply(&Command::StartRebalance { plan: m.rebalance.clone().unwrap() }), Outcome::Refused(MapError::CannotRebalance(_))));
        for _ in 0..100 {
            let steps = m.rebalance_steps(5);
            assert!(steps.iter().filter(|c| matches!(c, Command::StartMove { .. })).count() <= 2);
            if steps == vec![Command::EndRebalance] {
                m.apply(&Command::EndRebalance);
                break;
            }
            for c in steps {
                assert!(matches!(m.apply(&c), Outcome::Applied { .. }), "{c:?}");
            }
            let moving: Vec<(PartitionId, ReplicaLoc)> = m.partitions.values().filter_map(|p| p.moving.map(|mv| (p.id, mv.to))).collect();
            for (partition, to) in moving {
                m.apply(&Command::PromoteMove { partition, to });
                m.apply(&Command::FinishMove { partition, to });
            }
        }
        assert!(m.rebalance.is_none(), "the rebalancing ended");
        assert!(plan.iter().all(|p| m.plan_state(p) == PlanState::Done));
        let after = m.spread();
        assert!(after.max - after.min < 1.0, "{after:?}");
        assert!(m.partitions.values().filter(|p| p.replicas.iter().any(|r| r.node == 9)).count() >= 4, "node 9 took its share");
        assert!(before.disks == 3 && after.disks == 4);
        // Not while a node is down.
        m.apply(&Command::SetNodeState { node: 2, state: NodeState::Down { since_ms: 1 } });
        match m.rebalance_plan(1) {
            Err(MapError::CannotRebalance(why)) => assert!(why.contains("node 2 is down"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}

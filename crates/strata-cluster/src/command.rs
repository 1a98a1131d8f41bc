//! The commands that change the map and how one is applied: checked
//! against the map, then applied to a copy that replaces it, the epoch one
//! higher and every partition whose replicas changed at that version.

use crate::map::*;
use serde::{Deserialize, Serialize};
use strata_types::{PartitionId, Policies, Policy};

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
    /// `cmd`, with who asked for it and when (change capture,
    /// docs/events.md): applied as `cmd` is; the metadata service records
    /// the cluster event it makes in the same entry.
    As {
        /// The access key, `strata` for the cluster's own work (failure
        /// detection, evacuation, rebalancing), `node` for a peer.
        who: Option<String>,
        /// When (ms since the epoch).
        now_ms: u64,
        /// The command.
        cmd: Box<Command>,
    },
}

/// Who a change the cluster makes by itself is recorded as.
pub const SYSTEM: &str = "strata";

impl Command {
    /// This command as asked for by `who` at `now_ms` (a wrapped one is
    /// rewrapped; name ops carry their own cause and stay as they are).
    pub fn by(self, who: Option<String>, now_ms: u64) -> Command {
        match self {
            Command::As { cmd, .. } => Command::As { who, now_ms, cmd },
            Command::Names(_) => self,
            c => Command::As { who, now_ms, cmd: Box::new(c) },
        }
    }

    /// This command as the cluster's own work at `now_ms`, unless it
    /// already says who asked.
    pub fn by_system(self, now_ms: u64) -> Command {
        match self {
            Command::As { .. } | Command::Names(_) => self,
            c => c.by(Some(SYSTEM.into()), now_ms),
        }
    }

    /// The cluster event (type, subject) this command makes if it applies
    /// to `before` (docs/events.md).
    pub fn event(&self, before: &ClusterMap) -> Option<(&'static str, String)> {
        Some(match self {
            Command::AddNode { id, .. } => ("strata:NodeAdded", id.to_string()),
            Command::AddDisk { node, .. } => ("strata:DiskAdded", format!("{node}/{}", before.nodes.get(node).map_or(0, |n| n.disks.len()))),
            Command::SetNodeState { node, state } => {
                if before.nodes.get(node).is_some_and(|n| n.state.is_up() == state.is_up()) {
                    return None;
                }
                (if state.is_up() { "strata:NodeUp" } else { "strata:NodeDown" }, node.to_string())
            }
            Command::SetDiskState { node, disk, state } => {
                let kind = match state {
                    DiskState::Up => "strata:DiskUp",
                    DiskState::Down => "strata:DiskDown",
                    DiskState::Failed => "strata:DiskFailed",
                    _ => return None,
                };
                (kind, format!("{node}/{disk}"))
            }
            Command::RemoveNode { node } => ("strata:NodeRemoving", node.to_string()),
            Command::DropNode { node } => ("strata:NodeRemoved", node.to_string()),
            Command::RemoveDisk { node, disk } => ("strata:DiskRemoving", format!("{node}/{disk}")),
            Command::DropDisk { node, disk } => ("strata:DiskRemoved", format!("{node}/{disk}")),
            Command::StartRebalance { plan } => ("strata:RebalanceStarted", format!("{} moves", plan.moves.len())),
            Command::EndRebalance => {
                // Ended with every move done (or no longer possible), or given up.
                let done = before.rebalance_steps(0) == vec![Command::EndRebalance];
                (if done { "strata:RebalanceFinished" } else { "strata:RebalanceCancelled" }, "rebalance".into())
            }
            Command::As { cmd, .. } => return cmd.event(before),
            _ => return None,
        })
    }
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

impl ClusterMap {
    /// Applies a command. On success the epoch grows by one; on refusal the
    /// map is unchanged. Deterministic: every replica of the metadata log
    /// computes the same map.
    pub fn apply(&mut self, cmd: &Command) -> Outcome {
        if let Command::As { cmd, .. } = cmd {
            return self.apply(cmd);
        }
        if let Command::Names(_) = cmd {
            return Outcome::Names(Err(strata_names::NameError::Unavailable("name ops are applied by the metadata service, not the map".into())));
        }
        let mut next = self.clone();
        match next.apply_inner(cmd) {
            Ok(ids) => {
                next.epoch += 1;
                // A partition whose replicas or move changed (or that is
                // new), or one of whose replicas started or stopped serving
                // (its node went down or came back, its disk failed), has a
                // new version: the epoch that changed it. Whoever leads a
                // row (its first serving replica) therefore changes only
                // with its version, so two nodes never both act as a row's
                // primary at one version (the fencing in
                // docs/transactions.md, "Failures", rests on this).
                let serving = |m: &ClusterMap, p: &Partition| -> Vec<bool> {
                    p.replicas.iter().copied().chain(p.moving.iter().flat_map(|mv| [mv.from, mv.to])).map(|r| m.serves(r)).collect()
                };
                let changed: Vec<PartitionId> = next
                    .partitions
                    .values()
                    .filter(|p| {
                        self.partitions
                            .get(&p.id)
                            .is_none_or(|old| old.replicas != p.replicas || old.moving != p.moving || serving(self, old) != serving(&next, p))
                    })
                    .map(|p| p.id)
                    .collect();
                for id in changed {
                    if let Some(p) = next.partitions.get_mut(&id) {
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
            Command::As { cmd, .. } => self.apply_inner(cmd),
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
}

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
    /// Out of service: holds no new replicas, and routers skip it.
    Down,
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
                self.nodes.insert(*id, Node { id: *id, addr: addr.clone(), zone: zone.clone(), rack: rack.clone(), disks: Vec::new() });
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
                    if d.state == DiskState::Up {
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
            let nodes_in_zone = self.nodes.values().filter(|n| n.zone == *zone && n.disks.iter().any(|d| d.state == DiskState::Up)).count();
            if nodes_in_zone == 0 {
                return Err(MapError::NoRoom { zone: zone.clone(), detail: "no node with a disk that is up".into() });
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
            self.partitions.insert(id, Partition { id, state: PartitionState::ReadWrite, capacity_bytes: capacity, replicas });
            ids.push(id);
        }
        Ok(ids)
    }

    /// The node serving at `addr`, if any.
    pub fn node_at(&self, addr: &str) -> Option<&Node> {
        self.nodes.values().find(|n| n.addr == addr)
    }

    /// Bytes allocated to replicas on each disk.
    pub fn allocated(&self) -> BTreeMap<ReplicaLoc, u64> {
        let mut out = BTreeMap::new();
        for p in self.partitions.values() {
            for r in &p.replicas {
                *out.entry(*r).or_insert(0) += p.capacity_bytes;
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
}

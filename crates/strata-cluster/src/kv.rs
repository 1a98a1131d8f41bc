//! The read-only stores' part of the map (Spock §3.1.2): the ring every
//! store shares (its partitions' owners) and the store definitions. A
//! store's layout on the nodes is its replica table, computed from the ring
//! by `strata_placement::spock` whenever it is needed, so the map stores
//! only owners and definitions.

use crate::map::{ClusterMap, MapError, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use strata_placement::spock::{ReplicaTable, Replication, Ring, RingNode};

/// How a read-only store is replicated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvReplication {
    /// This many replicas on distinct nodes.
    Nodes(u32),
    /// So many replicas in each named zone, on distinct nodes.
    Zones(BTreeMap<String, u32>),
}

/// A read-only store's definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvStoreSpec {
    /// Chunks per (partition, replica) bucket.
    pub chunks: u32,
    /// Replicas.
    pub replication: KvReplication,
    /// Replicas a get reads before it answers (1: the nearest that has it).
    pub required_reads: u32,
}

impl KvStoreSpec {
    /// Replicas in all.
    pub fn factor(&self) -> u32 {
        match &self.replication {
            KvReplication::Nodes(n) => *n,
            KvReplication::Zones(z) => z.values().sum(),
        }
    }
}

/// A read-write store's definition (Spock §3.1: replication per zone,
/// required reads and writes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RwStoreSpec {
    /// Replicas.
    pub replication: KvReplication,
    /// Replicas that must answer a get.
    pub required_reads: u32,
    /// Replicas that must take a put.
    pub required_writes: u32,
    /// Largest value, in bytes.
    pub value_limit: u32,
}

/// Largest value limit a read-write store may set.
pub const RW_VALUE_LIMIT_MAX: u32 = 16 << 20;

/// The ring and the stores.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvSection {
    /// The owner of each ring partition; empty before `KvInitRing`.
    pub ring: Vec<NodeId>,
    /// Stores by name.
    pub stores: BTreeMap<String, KvStoreSpec>,
}

fn invalid(field: &str, detail: impl Into<String>) -> MapError {
    MapError::Invalid { field: field.to_string(), detail: detail.into() }
}

impl ClusterMap {
    /// Zones by name, numbered in name order for the ring.
    fn zone_numbers(&self) -> BTreeMap<String, u32> {
        let mut names: Vec<&String> = self.nodes.values().map(|n| &n.zone).collect();
        names.sort();
        names.dedup();
        names.into_iter().enumerate().map(|(i, z)| (z.clone(), i as u32)).collect()
    }

    fn ring_nodes(&self) -> Result<Vec<RingNode>, MapError> {
        let zones = self.zone_numbers();
        self.nodes
            .values()
            .map(|n| {
                let id = u32::try_from(n.id).map_err(|_| invalid("node id", format!("node {} is too large for the read-only ring (u32)", n.id)))?;
                Ok(RingNode { id, zone: zones[&n.zone] })
            })
            .collect()
    }

    /// The read-only stores' ring.
    pub fn kv_ring(&self) -> Result<Ring, MapError> {
        if self.kv.ring.is_empty() {
            return Err(invalid("ring", "the read-only ring is not set up (strata kv ring init)"));
        }
        let owners: Vec<u32> = self.kv.ring.iter().map(|&n| n as u32).collect();
        Ring::new(owners, &self.ring_nodes()?).map_err(|e| invalid("ring", e.to_string()))
    }

    /// The placement library's view of a store's replication.
    fn replication_of(&self, replication: &KvReplication) -> Result<Replication, MapError> {
        Ok(match replication {
            KvReplication::Nodes(n) => Replication::Nodes(*n),
            KvReplication::Zones(z) => {
                let zones = self.zone_numbers();
                let mut out = BTreeMap::new();
                for (name, count) in z {
                    let id = zones.get(name).ok_or_else(|| invalid("zone", format!("no node is in zone {name:?}")))?;
                    out.insert(*id, *count);
                }
                Replication::Zones(out)
            }
        })
    }

    /// A store's replica table: each primary partition's nodes, in replica order.
    pub fn kv_table(&self, store: &str) -> Result<ReplicaTable, MapError> {
        let spec = self.kv.stores.get(store).ok_or_else(|| invalid("store", format!("no read-only store {store:?}")))?;
        self.table_of(&spec.replication)
    }

    fn table_of(&self, replication: &KvReplication) -> Result<ReplicaTable, MapError> {
        self.kv_ring()?.replica_table(&self.replication_of(replication)?).map_err(|e| invalid("replication", e.to_string()))
    }

    /// A read-write store's replica table.
    pub fn rw_table(&self, store: &str) -> Result<ReplicaTable, MapError> {
        let spec = self.rw_stores.get(store).ok_or_else(|| invalid("store", format!("no read-write store {store:?}")))?;
        self.table_of(&spec.replication)
    }

    /// A read-write store's preference list for a key's primary partition,
    /// in replica order (the first is the pseudo-master when up).
    pub fn rw_preference(&self, store: &str, partition: u32) -> Result<Vec<NodeId>, MapError> {
        let table = self.rw_table(store)?;
        let row = table.get(partition as usize).ok_or_else(|| invalid("partition", format!("the ring has {} partitions", table.len())))?;
        Ok(row.iter().map(|&n| u64::from(n)).collect())
    }

    /// The primary ring partition of a read-write store key.
    pub fn rw_partition_of(&self, key: &[u8]) -> u32 {
        strata_placement::spock::partition_of(&strata_placement::spock::key_digest(key), self.kv.ring.len() as u32)
    }

    /// A read-write store's preference list for `key`: its primary ring
    /// partition's nodes in replica order (Spock §3.1.2).
    pub fn rw_route(&self, store: &str, key: &[u8]) -> Result<Vec<NodeId>, MapError> {
        self.rw_preference(store, self.rw_partition_of(key))
    }

    pub(crate) fn rw_create_store(&mut self, name: &str, spec: &RwStoreSpec) -> Result<(), MapError> {
        if name.is_empty() || name.len() > 128 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(invalid("store name", "1 to 128 letters, digits, '-' and '_'"));
        }
        if self.rw_stores.contains_key(name) || self.kv.stores.contains_key(name) {
            return Err(invalid("store name", format!("a store {name:?} exists")));
        }
        let factor = match &spec.replication {
            KvReplication::Nodes(n) => *n,
            KvReplication::Zones(z) => z.values().sum(),
        };
        if factor == 0 || factor > 16 {
            return Err(invalid("replication", "1..=16 replicas"));
        }
        if spec.required_reads == 0 || spec.required_reads > factor {
            return Err(invalid("required reads", format!("must be 1..={factor}")));
        }
        if spec.required_writes == 0 || spec.required_writes > factor {
            return Err(invalid("required writes", format!("must be 1..={factor}")));
        }
        if spec.value_limit == 0 || spec.value_limit > RW_VALUE_LIMIT_MAX {
            return Err(invalid("value limit", format!("must be 1..={RW_VALUE_LIMIT_MAX} bytes")));
        }
        self.table_of(&spec.replication)?;
        self.rw_stores.insert(name.to_string(), spec.clone());
        Ok(())
    }

    pub(crate) fn rw_drop_store(&mut self, name: &str) -> Result<(), MapError> {
        self.rw_stores.remove(name).map(|_| ()).ok_or_else(|| invalid("store", format!("no read-write store {name:?}")))
    }

    /// A store's nodes for a key's primary partition, reordered by the
    /// zone proximity list (Spock §3.1.2): nodes of `proximity[0]` (the
    /// caller's zone) first, then `proximity[1]`, ..., zones not listed
    /// last; replica order breaks ties.
    pub fn kv_preference(&self, store: &str, partition: u32, proximity: &[String]) -> Result<Vec<NodeId>, MapError> {
        let table = self.kv_table(store)?;
        let row = table.get(partition as usize).ok_or_else(|| invalid("partition", format!("the ring has {} partitions", table.len())))?;
        let mut out: Vec<NodeId> = row.iter().map(|&n| u64::from(n)).collect();
        let rank = |n: &NodeId| self.nodes.get(n).and_then(|node| proximity.iter().position(|z| *z == node.zone)).unwrap_or(usize::MAX);
        out.sort_by_key(rank);
        Ok(out)
    }

    pub(crate) fn kv_init_ring(&mut self, partitions: u32) -> Result<(), MapError> {
        if !self.kv.ring.is_empty() {
            return Err(invalid("ring", "the read-only ring is already set up; rebalance to change it"));
        }
        if partitions == 0 || partitions > 1 << 16 {
            return Err(invalid("ring partitions", "must be 1..=65536"));
        }
        let ring = Ring::balanced(partitions, &self.ring_nodes()?).map_err(|e| invalid("ring", e.to_string()))?;
        self.kv.ring = ring.owners().iter().map(|&n| u64::from(n)).collect();
        Ok(())
    }

    pub(crate) fn kv_set_ring(&mut self, owners: &[NodeId]) -> Result<(), MapError> {
        if self.kv.ring.is_empty() {
            return Err(invalid("ring", "the read-only ring is not set up"));
        }
        if owners.len() != self.kv.ring.len() {
            return Err(invalid("ring", format!("{} owners for a ring of {} partitions", owners.len(), self.kv.ring.len())));
        }
        if let Some(n) = owners.iter().find(|n| !self.nodes.contains_key(n)) {
            return Err(MapError::NoSuchNode(*n));
        }
        self.kv.ring = owners.to_vec();
        // Every store must still be placeable on the new ring.
        for name in self.kv.stores.keys() {
            self.kv_table(name)?;
        }
        for name in self.rw_stores.keys() {
            self.rw_table(name)?;
        }
        Ok(())
    }

    pub(crate) fn kv_create_store(&mut self, name: &str, spec: &KvStoreSpec) -> Result<(), MapError> {
        if name.is_empty() || name.len() > 128 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(invalid("store name", "1 to 128 letters, digits, '-' and '_'"));
        }
        if self.kv.stores.contains_key(name) || self.rw_stores.contains_key(name) {
            return Err(invalid("store name", format!("a store {name:?} exists")));
        }
        if spec.chunks == 0 || spec.chunks > 1 << 16 {
            return Err(invalid("chunks", "must be 1..=65536"));
        }
        let factor = spec.factor();
        if factor == 0 || factor > 16 {
            return Err(invalid("replication", "1..=16 replicas"));
        }
        if spec.required_reads == 0 || spec.required_reads > factor {
            return Err(invalid("required reads", format!("must be 1..={factor}")));
        }
        self.kv.stores.insert(name.to_string(), spec.clone());
        if let Err(e) = self.kv_table(name) {
            self.kv.stores.remove(name);
            return Err(e);
        }
        Ok(())
    }

    pub(crate) fn kv_drop_store(&mut self, name: &str) -> Result<(), MapError> {
        self.kv.stores.remove(name).map(|_| ()).ok_or_else(|| invalid("store", format!("no read-only store {name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use crate::kv::{KvReplication, KvStoreSpec};
    use crate::map::{ClusterMap, Command, Outcome};

    fn map() -> ClusterMap {
        let mut m = ClusterMap::default();
        for id in 1..=6u64 {
            let z = format!("z{}", id % 3);
            assert!(matches!(m.apply(&Command::AddNode { id, addr: format!("127.0.0.{id}:7000"), zone: z, rack: "r".into() }), Outcome::Applied { .. }));
        }
        m
    }

    fn spec(rep: KvReplication) -> KvStoreSpec {
        KvStoreSpec { chunks: 2, replication: rep, required_reads: 1 }
    }

    #[test]
    fn stores_live_on_the_ring() {
        let mut m = map();
        let create = |r| Command::KvCreateStore { name: "s".into(), spec: spec(r) };
        assert!(matches!(m.apply(&create(KvReplication::Nodes(2))), Outcome::Refused(_)), "no ring yet");
        assert!(matches!(m.apply(&Command::KvInitRing { partitions: 12 }), Outcome::Applied { .. }));
        assert!(matches!(m.apply(&Command::KvInitRing { partitions: 12 }), Outcome::Refused(_)));
        let zones = [("z0".to_string(), 1), ("z1".to_string(), 1), ("z2".to_string(), 1)].into_iter().collect();
        assert!(matches!(m.apply(&create(KvReplication::Zones(zones))), Outcome::Applied { .. }));
        let table = m.kv_table("s").unwrap();
        assert_eq!(table.len(), 12);
        for row in &table {
            let zones: std::collections::BTreeSet<&str> = row.iter().map(|n| m.nodes[&u64::from(*n)].zone.as_str()).collect();
            assert_eq!(zones.len(), 3, "one replica per zone: {row:?}");
        }
        let near = m.kv_preference("s", 0, &["z2".to_string(), "z0".to_string()]).unwrap();
        let zones: Vec<&str> = near.iter().map(|n| m.nodes[n].zone.as_str()).collect();
        assert_eq!(zones, vec!["z2", "z0", "z1"], "the proximity list orders the replicas");
        // Refusals change nothing.
        let epoch = m.epoch;
        for bad in [
            Command::KvCreateStore { name: "s".into(), spec: spec(KvReplication::Nodes(1)) },
            Command::KvCreateStore { name: "t".into(), spec: spec(KvReplication::Nodes(7)) },
            Command::KvCreateStore { name: "bad name".into(), spec: spec(KvReplication::Nodes(1)) },
            Command::KvCreateStore { name: "u".into(), spec: KvStoreSpec { chunks: 2, replication: KvReplication::Nodes(2), required_reads: 3 } },
            Command::KvCreateStore { name: "v".into(), spec: spec(KvReplication::Zones([("nowhere".to_string(), 1)].into_iter().collect())) },
            Command::KvSetRing { owners: vec![1; 11] },
            Command::KvSetRing { owners: vec![99; 12] },
            // One owner for every partition cannot hold one replica per zone.
            Command::KvSetRing { owners: vec![1; 12] },
            Command::KvDropStore { name: "nope".into() },
        ] {
            assert!(matches!(m.apply(&bad), Outcome::Refused(_)), "{bad:?}");
        }
        assert_eq!(m.epoch, epoch);
        assert!(matches!(m.apply(&Command::KvDropStore { name: "s".into() }), Outcome::Applied { .. }));
    }
}

//! The stores of one node: one per disk. A single node has one; a cluster
//! node opens one for each disk the cluster map gives it.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use strata_engine::{CompactionReport, Replica, Store};
use strata_types::PartitionId;

/// A node's stores, by disk index.
#[derive(Default)]
pub struct Disks {
    stores: RwLock<BTreeMap<u32, Arc<Store>>>,
}

impl Disks {
    /// One store as disk 0.
    pub fn single(store: Arc<Store>) -> Arc<Self> {
        let d = Self::default();
        d.insert(0, store);
        Arc::new(d)
    }

    /// Adds (or replaces) the store of a disk.
    pub fn insert(&self, disk: u32, store: Arc<Store>) {
        self.stores.write().unwrap_or_else(|p| p.into_inner()).insert(disk, store);
    }

    /// The store of a disk.
    pub fn get(&self, disk: u32) -> Option<Arc<Store>> {
        self.stores.read().unwrap_or_else(|p| p.into_inner()).get(&disk).cloned()
    }

    /// Every store, with its disk index.
    pub fn indexed(&self) -> Vec<(u32, Arc<Store>)> {
        self.stores.read().unwrap_or_else(|p| p.into_inner()).iter().map(|(i, s)| (*i, s.clone())).collect()
    }

    /// Every store.
    pub fn stores(&self) -> Vec<Arc<Store>> {
        self.stores.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Every replica on every disk.
    pub fn replicas(&self) -> Vec<Arc<Replica>> {
        self.stores().iter().flat_map(|s| s.replicas()).collect()
    }

    /// The replica of a partition, on whichever disk holds it.
    pub fn replica(&self, partition: PartitionId) -> Option<Arc<Replica>> {
        self.stores().iter().find_map(|s| s.replica(partition))
    }

    /// Compacts every store.
    pub fn compact_all(&self, force: bool) -> strata_engine::Result<CompactionReport> {
        let mut total = CompactionReport::default();
        for s in self.stores() {
            let r = s.compact_all(force)?;
            total.segments_compacted += r.segments_compacted;
            total.bytes_reclaimed += r.bytes_reclaimed;
        }
        Ok(total)
    }

    /// Re-evaluates read-only states.
    pub fn refresh_read_only(&self) {
        for s in self.stores() {
            s.refresh_read_only();
        }
    }

    /// Closes every store.
    pub fn close(&self) {
        for s in self.stores() {
            s.close();
        }
    }
}

impl strata_router::LocalReplicas for Disks {
    fn replica(&self, partition: PartitionId) -> Option<Arc<Replica>> {
        Disks::replica(self, partition)
    }
}

//! Where replicas go in a zone through the placement library: the zone's
//! disks as Ambry's layout (`zone_layout`, shared by new partitions and
//! rebalancing) and the greedy placement of new partitions.

use crate::map::*;
use strata_placement::ambry::{Disk as PlacementDisk, Layout, Replica as PlacementReplica};
use strata_types::PartitionId;

impl ClusterMap {
    /// The disks of `zone` that take replicas, as the placement library's
    /// layout (racks standing in for its zones, so replicas spread over
    /// racks), with each layout disk's place in the map; every replica
    /// counts its partition's capacity as used and allocated.
    pub(crate) fn zone_layout(&self, zone: &str) -> (Layout, Vec<ReplicaLoc>) {
        let racks: Vec<&str> =
            self.nodes.values().filter(|n| n.zone == zone).map(|n| n.rack.as_str()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
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
        (Layout { disks, replicas }, where_)
    }

    pub(crate) fn add_partitions(&mut self, count: u32, per_zone: usize, capacity: u64) -> Result<Vec<PartitionId>, MapError> {
        let zones: Vec<String> = self.zones().into_iter().map(String::from).collect();
        if zones.is_empty() {
            return Err(MapError::NoRoom { zone: "-".into(), detail: "the cluster has no nodes".into() });
        }
        // One placement layout per zone; inside a zone, racks play the part
        // of the placement library's zones so replicas spread over racks.
        let mut layouts = Vec::new();
        for zone in &zones {
            let (layout, where_) = self.zone_layout(zone);
            let nodes_in_zone =
                self.nodes.values().filter(|n| n.zone == *zone && n.takes_replicas() && n.disks.iter().any(|d| d.state.takes_replicas())).count();
            if nodes_in_zone == 0 {
                return Err(MapError::NoRoom { zone: zone.clone(), detail: "no node that is up with a disk that is up".into() });
            }
            layouts.push((zone.clone(), layout, where_, per_zone.min(nodes_in_zone)));
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
            self.partitions.insert(id, Partition::new(id, capacity, replicas, PartitionKind::Blob));
            ids.push(id);
        }
        Ok(ids)
    }
}

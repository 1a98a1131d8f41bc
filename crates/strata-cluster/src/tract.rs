//! The tract locator table of striped blobs (FDS §2.2, §3.3) in the map.
//!
//! Each row of the table is a partition of kind [`PartitionKind::Tract`]
//! whose replicas are the row's disks, so the mechanisms every partition
//! has serve the rows too: the engine holds a row's tracts as versioned
//! records, a failed disk's rows are re-created elsewhere by replica moves
//! (FDS §3.2), and growth is a move whose new replica fills before it
//! takes the old one's place (FDS §3.4). A row's version is its
//! partition's [`Partition::version`], the epoch that last changed its
//! replicas or its move.
//!
//! The table is built once (`Command::TractInit`) by the placement
//! library's Copysets construction ([`strata_placement::fds::Tlt::copysets`]):
//! FDS's all-pairs table would make every pair of disks share a row, so
//! 300 disks would each hold about 435 row replicas (each a partition with
//! its own writer) and any three failures would lose data; a bounded
//! scatter width keeps a disk's rows few and a triple failure unlikely to
//! cover a row, at the cost of recovering from `scatter` disks rather than
//! from all of them.

use crate::map::{ClusterMap, MapError, MovePhase, Partition, PartitionKind, ReplicaLoc};
use serde::{Deserialize, Serialize};
use strata_types::PartitionId;

/// The tract index of a blob's metadata tract (FDS §2.3's "tract -1").
pub const METADATA_TRACT: u64 = u64::MAX;
/// Smallest tract size a table takes.
pub const TRACT_BYTES_MIN: u64 = 4 << 10;
/// Largest tract size a table takes (a tract is one engine record).
pub const TRACT_BYTES_MAX: u64 = 64 << 20;
/// Most disks per row.
pub const TRACT_REPLICAS_MAX: u32 = 16;

/// The table: fixed settings and the rows in locator order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TractTable {
    /// Bytes per tract.
    pub tract_bytes: u64,
    /// Disks per row: the most replicas a blob may have.
    pub replicas: u32,
    /// Scatter width the table was built with.
    pub scatter: u32,
    /// The rows' partitions, in locator order.
    pub rows: Vec<PartitionId>,
}

/// Where one tract is read and written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TractRoute {
    /// The row's partition.
    pub partition: PartitionId,
    /// The row's version, which requests carry.
    pub version: u64,
    /// Every disk a write goes to: the row's first `n` replicas (`n` the
    /// blob's replication level), and a new one a move is filling in place
    /// of one of them (FDS §3.4's pending member). A replica that does not
    /// serve is skipped only once a move replaces it (FDS §3.2: the dead
    /// disk's place in the row is taken); until then a write waits, so no
    /// replica that may serve again lacks an acknowledged write.
    pub write: Vec<ReplicaLoc>,
    /// The disks a read may go to: those of the first `n` that serve, but
    /// never a replica a move is replacing (it may have missed writes
    /// while down, and it leaves the row when the move ends).
    pub read: Vec<ReplicaLoc>,
    /// The row's primary, which serializes its blobs' metadata operations
    /// (FDS §2.3): the first of all its replicas that serves.
    pub primary: Option<ReplicaLoc>,
}

impl ClusterMap {
    /// Builds the table over the disks that take replicas (every zone: FDS
    /// has no zones). A row's disks are in distinct racks when the cluster
    /// has at least `replicas` racks, else on distinct nodes.
    pub(crate) fn tract_init(&mut self, tract_bytes: u64, replicas: u32, scatter: u32, capacity: u64, seed: u64) -> Result<Vec<PartitionId>, MapError> {
        let invalid = |field: &str, detail: String| MapError::Invalid { field: field.to_string(), detail };
        if self.tracts.is_some() {
            return Err(invalid("tract table", "the cluster has one already (its tract size is fixed for its life)".into()));
        }
        if !(TRACT_BYTES_MIN..=TRACT_BYTES_MAX).contains(&tract_bytes) || !tract_bytes.is_power_of_two() {
            return Err(invalid("tract size", format!("must be a power of two from {TRACT_BYTES_MIN} to {TRACT_BYTES_MAX} bytes")));
        }
        if !(1..=TRACT_REPLICAS_MAX).contains(&replicas) {
            return Err(invalid("replicas", format!("must be 1..={TRACT_REPLICAS_MAX}")));
        }
        if scatter < replicas.saturating_sub(1) {
            return Err(invalid("scatter width", format!("must be at least replicas - 1 ({})", replicas - 1)));
        }
        if capacity < tract_bytes {
            return Err(invalid("capacity", "a row's replica must hold one tract at least".into()));
        }
        let mut disks: Vec<(ReplicaLoc, (String, String), u64)> = Vec::new();
        for n in self.nodes.values().filter(|n| n.takes_replicas()) {
            for (i, _) in n.disks.iter().enumerate().filter(|(_, d)| d.state.takes_replicas()) {
                disks.push((ReplicaLoc { node: n.id, disk: i as u32 }, (n.zone.clone(), n.rack.clone()), n.id));
            }
        }
        let racks: std::collections::BTreeSet<&(String, String)> = disks.iter().map(|(_, r, _)| r).collect();
        let by_rack = racks.len() >= replicas as usize;
        let domain_keys: Vec<String> = disks.iter().map(|(_, (z, r), n)| if by_rack { format!("{z}/{r}") } else { n.to_string() }).collect();
        let distinct: Vec<&String> = domain_keys.iter().collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        let domains: Vec<usize> = domain_keys.iter().map(|k| distinct.iter().position(|d| *d == k).unwrap_or(0)).collect();
        let tlt = if replicas == 1 {
            strata_placement::fds::Tlt::permutations(disks.len(), (scatter as usize).max(1), seed)
        } else {
            strata_placement::fds::Tlt::copysets(&domains, replicas as usize, scatter as usize, seed)
                .map_err(|e| invalid("replicas", format!("{e:?}: {} disks take replicas", disks.len())))?
        };
        if tlt.is_empty() {
            return Err(MapError::NoRoom { zone: "-".into(), detail: "no disk that is up takes replicas".into() });
        }
        let first = self.partitions.keys().next_back().map_or(0, |p| p + 1);
        let mut rows = Vec::with_capacity(tlt.len());
        for (i, row) in tlt.rows().iter().enumerate() {
            let id = first + i as u64;
            let replicas = row.disks.iter().map(|&d| disks[d].0).collect();
            self.partitions.insert(id, Partition::new(id, capacity, replicas, PartitionKind::Tract));
            rows.push(id);
        }
        self.tracts = Some(TractTable { tract_bytes, replicas, scatter, rows: rows.clone() });
        Ok(rows)
    }

    /// The row partition of tract `tract` of the blob `guid`:
    /// `(hash(guid) + tract) mod rows` (FDS §2.2).
    pub fn tract_partition(&self, guid: &[u8; 16], tract: u64) -> Option<PartitionId> {
        let t = self.tracts.as_ref()?;
        if t.rows.is_empty() {
            return None;
        }
        Some(t.rows[strata_placement::fds::locator(strata_placement::fds::blob_hash(guid), tract, t.rows.len())])
    }

    /// Where a tract row's replica at `from` is re-created (FDS §3.2): a
    /// disk that takes replicas, with room, on a node without a copy of
    /// the row, in any zone; a rack the row's other disks do not use
    /// first, then the disk holding the fewest rows (so a dead disk's rows
    /// spread over the cluster and all of it takes part in the copying),
    /// then the one with the most unallocated room.
    pub fn tract_target(&self, partition: PartitionId, from: ReplicaLoc) -> Option<ReplicaLoc> {
        let p = self.partitions.get(&partition)?;
        let holders = self.holders(partition);
        let racks: std::collections::BTreeSet<(&str, &str)> =
            holders.iter().filter(|r| **r != from).filter_map(|r| self.nodes.get(&r.node)).map(|n| (n.zone.as_str(), n.rack.as_str())).collect();
        let rows_on = self.rows_per_disk();
        let allocated = self.allocated();
        let mut best: Option<((bool, usize, u64), ReplicaLoc)> = None;
        for n in self.nodes.values().filter(|n| n.takes_replicas() && !holders.iter().any(|r| r.node == n.id)) {
            for (i, d) in n.disks.iter().enumerate().filter(|(_, d)| d.state.takes_replicas()) {
                let loc = ReplicaLoc { node: n.id, disk: i as u32 };
                let used = allocated.get(&loc).copied().unwrap_or(0);
                if used.saturating_add(p.capacity_bytes) > d.capacity_bytes {
                    continue;
                }
                let rank = (racks.contains(&(n.zone.as_str(), n.rack.as_str())), rows_on.get(&loc).copied().unwrap_or(0), used);
                if best.as_ref().is_none_or(|(b, _)| rank < *b) {
                    best = Some((rank, loc));
                }
            }
        }
        best.map(|(_, loc)| loc)
    }

    /// Tract rows each disk that takes replicas holds (moves' new
    /// replicas counted where they go, not where they leave).
    fn rows_per_disk(&self) -> std::collections::BTreeMap<ReplicaLoc, usize> {
        let mut out: std::collections::BTreeMap<ReplicaLoc, usize> = std::collections::BTreeMap::new();
        for n in self.nodes.values().filter(|n| n.takes_replicas()) {
            for (i, _) in n.disks.iter().enumerate().filter(|(_, d)| d.state.takes_replicas()) {
                out.insert(ReplicaLoc { node: n.id, disk: i as u32 }, 0);
            }
        }
        for p in self.partitions.values().filter(|p| p.kind == PartitionKind::Tract) {
            for r in &p.replicas {
                let r = p.moving.filter(|m| m.from == *r).map_or(*r, |m| m.to);
                if let Some(c) = out.get_mut(&r) {
                    *c += 1;
                }
            }
        }
        out
    }

    /// Growth (FDS §3.4): while a disk holds fewer rows than the floor of
    /// the mean, it takes a row, not already moving, from the disk with
    /// the most (above the floor of the mean), whose other members are
    /// on other nodes and (when the rows' disks are in distinct racks)
    /// other racks; each as a move started now. The rows moved.
    pub(crate) fn tract_grow(&mut self, now_ms: u64) -> Result<Vec<PartitionId>, MapError> {
        let t =
            self.tracts.as_ref().ok_or_else(|| MapError::Invalid { field: "tract table".into(), detail: "the cluster has none (strata tract init)".into() })?;
        let rows = t.rows.clone();
        let rack_of = |m: &ClusterMap, r: &ReplicaLoc| m.nodes.get(&r.node).map(|n| (n.zone.clone(), n.rack.clone()));
        // The table keeps racks distinct when every row of it does.
        let by_rack = rows.iter().filter_map(|id| self.partitions.get(id)).all(|p| {
            let racks: std::collections::BTreeSet<_> = p.replicas.iter().filter_map(|r| rack_of(self, r)).collect();
            racks.len() == p.replicas.len()
        });
        let mut moved = Vec::new();
        loop {
            let counts = self.rows_per_disk();
            if counts.is_empty() {
                break;
            }
            let total: usize = counts.values().sum();
            let floor = total / counts.len();
            let Some((&to, _)) = counts.iter().filter(|(_, c)| **c < floor).min_by_key(|(_, c)| **c) else { break };
            let mut best: Option<(usize, PartitionId, ReplicaLoc)> = None;
            for id in &rows {
                let Some(p) = self.partitions.get(id) else { continue };
                if p.moving.is_some() || p.replicas.iter().any(|r| r.node == to.node) {
                    continue;
                }
                for from in &p.replicas {
                    let load = counts.get(from).copied().unwrap_or(0);
                    if load <= floor {
                        continue;
                    }
                    let others_racks: std::collections::BTreeSet<_> = p.replicas.iter().filter(|r| *r != from).filter_map(|r| rack_of(self, r)).collect();
                    if by_rack && rack_of(self, &to).is_some_and(|r| others_racks.contains(&r)) {
                        continue;
                    }
                    if best.as_ref().is_none_or(|(l, _, _)| load > *l) {
                        best = Some((load, *id, *from));
                    }
                }
            }
            let Some((load, id, from)) = best else { break };
            if load <= counts[&to] + 1 {
                break;
            }
            self.start_move(id, from, to, now_ms)?;
            moved.push(id);
        }
        if moved.is_empty() {
            return Err(MapError::Invalid { field: "tract table".into(), detail: "every disk already holds its share of the rows".into() });
        }
        Ok(moved)
    }

    /// How many tract requests one client may have in flight (FDS's
    /// simultaneous limit): four per disk in the table, from 8 to 256.
    pub fn tract_simultaneous_limit(&self) -> usize {
        let Some(t) = &self.tracts else { return 8 };
        let disks: std::collections::BTreeSet<ReplicaLoc> =
            t.rows.iter().filter_map(|r| self.partitions.get(r)).flat_map(|p| p.replicas.iter().copied()).collect();
        (4 * disks.len()).clamp(8, 256)
    }

    /// Where tract `tract` of the blob `guid`, of `n` replicas, is read
    /// and written.
    pub fn tract_route(&self, guid: &[u8; 16], tract: u64, n: usize) -> Option<TractRoute> {
        self.row_route(self.tract_partition(guid, tract)?, n)
    }

    /// Where the tracts of `n` replicas of one row are read and written
    /// (FDS §3.1: a blob of `n` replicas uses the first `n` disks of each
    /// row).
    pub fn row_route(&self, partition: PartitionId, n: usize) -> Option<TractRoute> {
        let p = self.partitions.get(&partition).filter(|p| p.kind == PartitionKind::Tract)?;
        let first: Vec<ReplicaLoc> = p.replicas.iter().take(n.max(1)).copied().collect();
        let leaving = p.moving.map(|m| m.from);
        let mut write: Vec<ReplicaLoc> = first.iter().copied().filter(|r| Some(*r) != leaving || self.serves(*r)).collect();
        if let Some(m) = p.moving
            && m.phase == MovePhase::Filling
            && first.contains(&m.from)
            && !write.contains(&m.to)
        {
            write.push(m.to);
        }
        let read = first.iter().copied().filter(|r| self.serves(*r) && Some(*r) != leaving).collect();
        let primary = p.replicas.iter().copied().find(|r| self.serves(*r) && Some(*r) != leaving);
        Some(TractRoute { partition, version: p.version, write, read, primary })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::{Command, Outcome};

    fn cluster(nodes: u64, disks: u32) -> ClusterMap {
        let mut m = ClusterMap::default();
        for id in 1..=nodes {
            m.apply(&Command::AddNode { id, addr: format!("10.0.0.{id}:1"), zone: "z".into(), rack: format!("r{}", id % 3) });
            for d in 0..disks {
                m.apply(&Command::AddDisk { node: id, path: format!("d{d}"), capacity_bytes: 1 << 40 });
            }
        }
        m
    }

    fn init(m: &mut ClusterMap, replicas: u32, scatter: u32) -> Outcome {
        m.apply(&Command::TractInit { tract_bytes: 1 << 20, replicas, scatter, capacity_bytes: 1 << 30, seed: 7 })
    }

    #[test]
    fn rows_are_tract_partitions_on_distinct_domains_with_a_bounded_scatter() {
        let mut m = cluster(6, 2);
        m.apply(&Command::AddPartitions { count: 4, replicas_per_zone: 3, capacity_bytes: 1 << 30 });
        let Outcome::PartitionsAdded { ids, epoch } = init(&mut m, 3, 4) else { panic!("table refused") };
        let t = m.tracts.clone().unwrap();
        assert_eq!(t.rows, ids);
        assert!(ids.iter().all(|id| *id >= 4), "rows come after the blob partitions");
        let rack = |r: &ReplicaLoc| m.nodes[&r.node].rack.clone();
        for id in &ids {
            let p = &m.partitions[id];
            assert_eq!((p.kind, p.version, p.replicas.len()), (PartitionKind::Tract, epoch, 3));
            let racks: std::collections::BTreeSet<_> = p.replicas.iter().map(rack).collect();
            assert_eq!(racks.len(), 3, "a row's disks are in distinct racks: {:?}", p.replicas);
        }
        // Every disk is in some row; each shares rows with a bounded set.
        for n in 1..=6 {
            for d in 0..2 {
                let loc = ReplicaLoc { node: n, disk: d };
                let rows: Vec<_> = ids.iter().filter(|id| m.partitions[id].replicas.contains(&loc)).collect();
                assert!(!rows.is_empty(), "{loc:?} is in no row");
                let partners: std::collections::BTreeSet<_> =
                    rows.iter().flat_map(|id| m.partitions[id].replicas.iter().copied()).filter(|r| *r != loc).collect();
                assert!(partners.len() <= 2 * 4, "{loc:?} shares rows with {} disks", partners.len());
            }
        }
        // Consecutive tracts of one blob walk the rows in order.
        let guid = [9u8; 16];
        let first = t.rows.iter().position(|r| Some(*r) == m.tract_partition(&guid, 0)).unwrap();
        for i in 0..20u64 {
            assert_eq!(m.tract_partition(&guid, i), Some(t.rows[(first + i as usize) % t.rows.len()]));
        }
        assert!(m.tract_route(&guid, METADATA_TRACT, 3).is_some());
        // A second table, and bad settings, are refused naming the problem.
        assert!(format!("{:?}", init(&mut m, 3, 4)).contains("has one already"));
        let mut fresh = cluster(2, 1);
        assert!(format!("{:?}", init(&mut fresh, 3, 4)).contains("replicas"));
        let bad = fresh.apply(&Command::TractInit { tract_bytes: 1000, replicas: 1, scatter: 1, capacity_bytes: 1 << 30, seed: 1 });
        assert!(format!("{bad:?}").contains("tract size"), "{bad:?}");
    }

    #[test]
    fn a_move_changes_the_row_version_and_a_filling_replica_takes_writes_but_no_reads() {
        let mut m = cluster(4, 1);
        let Outcome::PartitionsAdded { ids, .. } = init(&mut m, 3, 2) else { panic!("table refused") };
        let row = ids[0];
        let before = m.row_route(row, 3).unwrap();
        assert_eq!(before.primary, Some(before.write[0]));
        // A blob of fewer replicas uses the row's first disks.
        assert_eq!(m.row_route(row, 2).unwrap().write, before.write[..2].to_vec());
        let spare = (1..=4).find(|n| !before.write.iter().any(|r| r.node == *n)).unwrap();
        let (from, to) = (before.write[0], ReplicaLoc { node: spare, disk: 0 });
        let out = m.apply(&Command::StartMove { partition: row, from, to, now_ms: 1 });
        assert!(matches!(out, Outcome::Applied { .. }), "{out:?}");
        let during = m.row_route(row, 3).unwrap();
        assert!(during.version > before.version);
        assert!(during.write.contains(&to) && !during.read.contains(&to));
        // The replica being replaced still takes writes while it serves,
        // but is read no more.
        assert!(during.write.contains(&from) && !during.read.contains(&from));
        m.apply(&Command::SetNodeState { node: from.node, state: crate::map::NodeState::Down { since_ms: 1 } });
        let down = m.row_route(row, 3).unwrap();
        assert!(!down.write.contains(&from) && down.write.contains(&to));
        // Rows the commands left alone keep their version.
        for other in &ids[1..] {
            if !m.partitions[other].replicas.iter().any(|r| r.node == from.node) {
                assert!(m.partitions[other].version <= before.version);
            }
        }
    }

    #[test]
    fn a_row_s_primary_changes_only_with_its_version() {
        let mut m = cluster(6, 1);
        let Outcome::PartitionsAdded { ids, .. } = init(&mut m, 3, 3) else { panic!("table refused") };
        let routes = |m: &ClusterMap| ids.iter().map(|r| m.row_route(*r, 3).unwrap()).collect::<Vec<_>>();
        let before = routes(&m);
        let node = before[0].primary.unwrap().node;
        // The row's primary goes down: its next replica leads, at a new
        // version; so does every row with a replica there, and no other.
        let Outcome::Applied { epoch } = m.apply(&Command::SetNodeState { node, state: crate::map::NodeState::Down { since_ms: 1 } }) else {
            panic!("refused")
        };
        let down = routes(&m);
        assert_ne!(down[0].primary, before[0].primary);
        for (b, d) in before.iter().zip(&down) {
            let touched = b.write.iter().any(|r| r.node == node);
            assert_eq!(d.version == epoch, touched, "row {} (replicas {:?})", b.partition, b.write);
            assert!(touched || d.version == b.version);
        }
        // It comes back: the primary returns, at a newer version still.
        let Outcome::Applied { epoch: back } = m.apply(&Command::SetNodeState { node, state: crate::map::NodeState::Up }) else { panic!("refused") };
        let up = routes(&m);
        assert_eq!(up[0].primary, before[0].primary);
        assert_eq!(up[0].version, back);
        // Whatever happened, two routes with one version have one primary.
        for (a, b) in before.iter().chain(&down).zip(down.iter().chain(&up)) {
            if a.partition == b.partition && a.version == b.version {
                assert_eq!(a.primary, b.primary);
            }
        }
    }

    #[test]
    fn a_dead_node_s_rows_all_move_at_once_and_blob_partitions_wait() {
        // Three racks of three nodes: a dead node's rows can go to the two
        // others of its rack (a row keeps its racks distinct).
        let mut m = cluster(9, 1);
        m.apply(&Command::AddPartitions { count: 6, replicas_per_zone: 3, capacity_bytes: 1 << 30 });
        let Outcome::PartitionsAdded { ids, .. } = init(&mut m, 3, 4) else { panic!("table refused") };
        let dead = 1;
        let rows_on_dead: Vec<_> = ids.iter().filter(|id| m.partitions[id].replicas.iter().any(|r| r.node == dead)).copied().collect();
        assert!(rows_on_dead.len() >= 2, "the test needs a node in several rows");
        m.apply(&Command::SetNodeState { node: dead, state: crate::map::NodeState::Down { since_ms: 1_000 } });
        let cmds = m.evacuation(1_001, 600_000, 0, 1, crate::RecoveryPlacement::default());
        let moved: Vec<_> = cmds
            .iter()
            .filter_map(|c| match c {
                Command::StartMove { partition, from, .. } => {
                    assert_eq!(from.node, dead);
                    Some(*partition)
                }
                _ => None,
            })
            .collect();
        assert_eq!(moved, rows_on_dead, "every row of the dead node moves, beyond max_moves, and no blob partition does yet");
        // Each to a node outside its row, spread over the cluster.
        let targets: std::collections::BTreeSet<u64> = cmds
            .iter()
            .filter_map(|c| match c {
                Command::StartMove { partition, to, .. } => {
                    assert!(!m.partitions[partition].replicas.iter().any(|r| r.node == to.node));
                    Some(to.node)
                }
                _ => None,
            })
            .collect();
        assert_eq!(targets.len(), 2, "the rows went to {targets:?}");
        let rack = |n: u64| m.nodes[&n].rack.clone();
        assert!(targets.iter().all(|t| rack(*t) == rack(dead)), "a row's racks stay distinct");
        // Past the blob down-out, blob partitions follow, max_moves at a time.
        for c in &cmds {
            m.apply(c);
        }
        let later = m.evacuation(700_000, 600_000, 0, 1, crate::RecoveryPlacement::default());
        let blob_moves = later.iter().filter(|c| matches!(c, Command::StartMove { partition, .. } if !ids.contains(partition))).count();
        assert_eq!(blob_moves, 1);
    }

    #[test]
    fn new_disks_take_rows_from_the_fullest_as_pending_members() {
        let mut m = cluster(6, 1);
        let Outcome::PartitionsAdded { .. } = init(&mut m, 3, 4) else { panic!("table refused") };
        assert!(format!("{:?}", m.apply(&Command::TractGrow { now_ms: 1 })).contains("share"), "nothing to grow into");
        for id in 7..=9u64 {
            m.apply(&Command::AddNode { id, addr: format!("10.0.0.{id}:1"), zone: "z".into(), rack: format!("r{}", id % 3) });
            m.apply(&Command::AddDisk { node: id, path: "d0".into(), capacity_bytes: 1 << 40 });
        }
        let before = m.rows_per_disk();
        assert!(before.iter().filter(|(l, _)| l.node >= 7).all(|(_, c)| *c == 0));
        let Outcome::PartitionsAdded { ids: moved, .. } = m.apply(&Command::TractGrow { now_ms: 2 }) else { panic!("growth refused") };
        assert!(!moved.is_empty());
        let after = m.rows_per_disk();
        let (lo, hi) = (after.values().min().copied().unwrap(), after.values().max().copied().unwrap());
        assert!(hi - lo <= 2, "rows per disk after growth: {after:?}");
        for id in &moved {
            let p = &m.partitions[id];
            let mv = p.moving.expect("a pending member");
            assert!(mv.to.node >= 7 && mv.phase == MovePhase::Filling);
            // Still distinct racks and nodes once committed.
            let members: Vec<ReplicaLoc> = p.replicas.iter().map(|r| if *r == mv.from { mv.to } else { *r }).collect();
            let racks: std::collections::BTreeSet<_> = members.iter().map(|r| m.nodes[&r.node].rack.clone()).collect();
            assert_eq!(racks.len(), 3, "{members:?}");
            // The pending member takes writes, not reads.
            let route = m.row_route(*id, 3).unwrap();
            assert!(route.write.contains(&mv.to) && !route.read.contains(&mv.to));
        }
    }
}

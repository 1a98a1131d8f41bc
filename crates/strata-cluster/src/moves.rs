//! What changes where replicas live on a running cluster, as pure
//! functions of the map: a move's checks, where a leaving replica goes,
//! evacuation (removals, failed disks, down-out), and Ambry's rebalancing
//! planned and stepped on the live map. The commands that apply them are
//! in `map.rs`; the node that drives a move is in `strata-node`.

use crate::map::*;
use std::collections::{BTreeMap, BTreeSet};
use strata_placement::kinesis::{Kinesis, RecoveryRule, ServerState};
use strata_types::PartitionId;

/// Where evacuation (re-replication after a failure, removals) re-creates
/// a replica that must leave. A node setting (`strata server
/// --recovery-placement`), read by the metadata leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryPlacement {
    /// Kinesis's recovery rule LR (§3.4, §6.2.4), the placement library's
    /// `Kinesis::recover`: the zone's racks are the segments, the disks
    /// their servers, the partition id the key; of the partition's unused
    /// hash locations that can take it, the one with the least recovery
    /// work under way (replicas filling on it, or being read from it), then
    /// the least allocated. A dead disk's replicas are re-created on many
    /// disks at once, not piled on the emptiest ones. Falls back to `MostRoom` where no hash
    /// location on a rack the partition does not use can take the replica.
    #[default]
    Kinesis,
    /// Ambry's greedy choice ([`ClusterMap::move_target`]): the disk with
    /// the most unallocated room, which restores storage balance but sends
    /// every copy to the emptiest disks.
    MostRoom,
}

impl std::str::FromStr for RecoveryPlacement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "kinesis" => Ok(Self::Kinesis),
            "most-room" => Ok(Self::MostRoom),
            _ => Err(format!("unknown recovery placement {s:?} (kinesis or most-room)")),
        }
    }
}

/// The map's disks of one zone as Kinesis's servers.
struct ZoneDisks<'a> {
    map: &'a ClusterMap,
    disks: Vec<ReplicaLoc>,
    allocated: BTreeMap<ReplicaLoc, u64>,
    /// Bytes the replica needs.
    need: u64,
    /// Disks that are no candidates: on nodes holding a copy (one copy per
    /// node) or on racks the partition uses. Kinesis reads them as the
    /// surviving replicas, so they count as alive.
    taken: BTreeSet<usize>,
}

impl ServerState for ZoneDisks<'_> {
    fn used(&self, s: usize) -> u64 {
        self.allocated.get(&self.disks[s]).copied().unwrap_or(0)
    }
    fn capacity(&self, s: usize) -> u64 {
        let loc = self.disks[s];
        self.map.nodes.get(&loc.node).and_then(|n| n.disks.get(loc.disk as usize)).map_or(0, |d| d.capacity_bytes)
    }
    fn queue(&self, _: usize) -> u64 {
        0
    }
    /// A disk that cannot take the replica: not up, on a node that takes
    /// none, or without room.
    fn faulty(&self, s: usize) -> bool {
        if self.taken.contains(&s) {
            return false;
        }
        let loc = self.disks[s];
        let Some(n) = self.map.nodes.get(&loc.node) else { return true };
        let up = n.takes_replicas() && n.disks.get(loc.disk as usize).is_some_and(|d| d.state.takes_replicas());
        !up || self.used(s).saturating_add(self.need) > self.capacity(s)
    }
}

impl ClusterMap {
    pub(crate) fn start_move(&mut self, partition: PartitionId, from: ReplicaLoc, to: ReplicaLoc, now_ms: u64) -> Result<(), MapError> {
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
        if dest.zone != source.zone && p.kind == PartitionKind::Blob {
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

    /// Where evacuation sends the replica of `partition` at `from`, by
    /// `rule`.
    pub fn recovery_target(&self, rule: RecoveryPlacement, partition: PartitionId, from: ReplicaLoc) -> Option<ReplicaLoc> {
        match rule {
            RecoveryPlacement::Kinesis => self.kinesis_target(partition, from).or_else(|| self.move_target(partition, from)),
            RecoveryPlacement::MostRoom => self.move_target(partition, from),
        }
    }

    /// [`RecoveryPlacement::Kinesis`], on racks the partition does not use
    /// (a copy never joins another on its rack while
    /// [`ClusterMap::move_target`] can find one that does not).
    fn kinesis_target(&self, partition: PartitionId, from: ReplicaLoc) -> Option<ReplicaLoc> {
        let p = self.partitions.get(&partition)?;
        let zone = &self.nodes.get(&from.node)?.zone;
        // Kinesis's failure-isolated segments are the zone's racks, its
        // servers their disks.
        let mut disks = Vec::new();
        let mut racks: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for n in self.nodes.values().filter(|n| &n.zone == zone) {
            for i in 0..n.disks.len() {
                racks.entry(n.rack.as_str()).or_default().push(disks.len());
                disks.push(ReplicaLoc { node: n.id, disk: i as u32 });
            }
        }
        // Kinesis needs r < k; with one rack there is nothing to choose.
        let k = racks.len();
        if k < 2 {
            return None;
        }
        let layout = Kinesis::new(k, p.replicas.len().clamp(1, k - 1), racks.into_values().collect());
        let holders = self.holders(partition);
        let used_racks: BTreeSet<&str> = holders.iter().filter(|h| **h != from).filter_map(|h| self.nodes.get(&h.node)).map(|n| n.rack.as_str()).collect();
        let taken: BTreeSet<usize> = (0..disks.len())
            .filter(|&s| {
                let loc: ReplicaLoc = disks[s];
                holders.iter().any(|h| h.node == loc.node) || self.nodes.get(&loc.node).is_some_and(|n| used_racks.contains(n.rack.as_str()))
            })
            .collect();
        let load = self.recovery_load();
        let surviving: Vec<usize> = taken.iter().copied().collect();
        let st = ZoneDisks { map: self, disks, allocated: self.allocated(), need: p.capacity_bytes, taken };
        // The recovery work under way first; on a tie (a batch's first
        // pick, or after a batch has finished), the least allocated disk,
        // in 16 MiB units, so successive batches keep the storage even.
        // Only on a rack the partition does not use: where none of its hash
        // locations qualifies, the greedy choice looks further.
        let recovery_load = |s: usize| (load.get(&st.disks[s]).copied().unwrap_or(0) << 32) | (st.used(s) >> 24).min((1 << 32) - 1);
        let (_, dest) = layout.recover(&partition.to_be_bytes(), &surviving, RecoveryRule::Load, &st, recovery_load)?;
        Some(st.disks[dest])
    }

    /// The copying under way on each disk, in sixtieths of a replica: a
    /// filling replica counts whole on its disk, and is shared among the
    /// serving replicas it pulls from (each fetch batch goes to one of
    /// them).
    pub fn recovery_load(&self) -> BTreeMap<ReplicaLoc, u64> {
        let mut load: BTreeMap<ReplicaLoc, u64> = BTreeMap::new();
        for q in self.partitions.values() {
            let Some(m) = q.moving else { continue };
            *load.entry(m.to).or_default() += 60;
            let sources: Vec<ReplicaLoc> = q.replicas.iter().copied().filter(|r| *r != m.from && *r != m.to && self.serves(*r)).collect();
            for r in &sources {
                *load.entry(*r).or_default() += 60 / sources.len().clamp(1, 60) as u64;
            }
        }
        load
    }

    /// Refuses a removal (already marked in `self`) if a replica at `locs`
    /// would have nowhere to go, naming the partition.
    pub(crate) fn check_evacuable(&self, locs: &[ReplicaLoc], what: &str) -> Result<(), MapError> {
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
    /// (to where `rule` says; at most `max_moves` under way in all), and the removal of nodes and
    /// disks that hold nothing any more. Tract rows (FDS §3.2) leave a node
    /// down past `tract_down_out_ms` (FDS: as soon as it is declared dead),
    /// all at once: `max_moves` bounds blob partitions only, so every disk
    /// of the cluster takes part in recovering a dead one's rows.
    pub fn evacuation(&self, now_ms: u64, down_out_ms: u64, tract_down_out_ms: u64, max_moves: usize, rule: RecoveryPlacement) -> Vec<Command> {
        let mut out = Vec::new();
        let mut under_way = self.partitions.values().filter(|p| p.moving.is_some() && p.kind == PartitionKind::Blob).count();
        // Each move chosen is booked in a trial map before the next is
        // chosen, so a batch spreads its writes over the zone's disks
        // instead of piling them on the one with the most room.
        let mut trial = self.clone();
        for p in self.partitions.values().filter(|p| p.moving.is_none()) {
            let tract = p.kind == PartitionKind::Tract;
            if under_way >= max_moves && !tract {
                continue;
            }
            let out_after = if tract { tract_down_out_ms } else { down_out_ms };
            let Some(from) = p.replicas.iter().copied().find(|r| self.must_leave(*r, now_ms, out_after)) else { continue };
            // A partition none of whose replicas serves has nothing to copy from.
            if !p.replicas.iter().any(|r| *r != from && self.serves(*r)) {
                continue;
            }
            let target = if tract { trial.tract_target(p.id, from) } else { trial.recovery_target(rule, p.id, from) };
            if let Some(to) = target {
                let cmd = Command::StartMove { partition: p.id, from, to, now_ms };
                trial.apply(&cmd);
                out.push(cmd);
                under_way += usize::from(!tract);
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
            let (mut layout, where_) = self.zone_layout(zone);
            for m in layout.rebalance(seed, strata_placement::ambry::Phase1Rule::WholePartitions) {
                // Tract rows keep the table's own rules (distinct racks): they grow by `TractGrow`.
                if self.partitions.get(&(m.partition as PartitionId)).is_some_and(|p| p.kind == PartitionKind::Tract) {
                    continue;
                }
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
}

//! Failure detection in the map (FDS §3.2): every node heartbeats the
//! metadata group with the health of its disks; the leader turns missed
//! heartbeats and failing disks into map commands, so every router and
//! operator sees one truth. Pure: time comes in as milliseconds, so the
//! same code runs under a test's clock.
//!
//! Ambry's zero-cost detection (`strata-router`'s failure detector) stays
//! in the router, for choosing replicas request by request; this is the
//! slower, cluster-wide view that changes the map.

use crate::map::{ClusterMap, Command, DiskState, NodeId, NodeState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Frame kind of a heartbeat (`POST /meta/v1/heartbeat`); the answer, of
/// the same kind, is the member's map epoch (postcard `u64`).
pub const KIND_HEARTBEAT: u16 = 0x17;

/// What a node sends the metadata members every heartbeat period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The sender.
    pub node: NodeId,
    /// The map epoch it has.
    pub epoch: u64,
    /// The health of each disk the map gives it.
    pub disks: Vec<DiskReport>,
}

/// One disk's health, as its node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskReport {
    /// Disk index on the node.
    pub disk: u32,
    /// Whether the disk works: it opened, a probe write and fsync
    /// succeeded in time, and no replica on it saw an I/O error.
    pub healthy: bool,
    /// Why not, when not.
    pub detail: String,
}

/// The leader's view of heartbeats.
#[derive(Debug, Clone)]
pub struct Liveness {
    down_after_ms: u64,
    /// Last heartbeat per node (ms).
    seen: BTreeMap<NodeId, u64>,
    /// Latest disk reports per node, with when they came.
    disks: BTreeMap<NodeId, (u64, Vec<DiskReport>)>,
    /// Since when this member leads (ms), while it does.
    leading_since: Option<u64>,
    /// When this member first saw each node in the map (ms): a node just
    /// added gets a full period to heartbeat before it is judged.
    known_since: BTreeMap<NodeId, u64>,
}

impl Liveness {
    /// A node silent for `down_after_ms` is marked down.
    pub fn new(down_after_ms: u64) -> Self {
        Self { down_after_ms: down_after_ms.max(1), seen: BTreeMap::new(), disks: BTreeMap::new(), leading_since: None, known_since: BTreeMap::new() }
    }

    /// Records a heartbeat received at `now_ms`.
    pub fn heartbeat(&mut self, hb: &Heartbeat, now_ms: u64) {
        self.seen.insert(hb.node, now_ms);
        self.disks.insert(hb.node, (now_ms, hb.disks.clone()));
    }

    /// When `node` was last heard from, if ever.
    pub fn last_seen(&self, node: NodeId) -> Option<u64> {
        self.seen.get(&node).copied()
    }

    /// The commands that bring `map` in line with the heartbeats, at
    /// `now_ms`, if this member leads (`leading`); none otherwise. A new
    /// leader waits one full `down_after` before it marks anyone down, so
    /// nodes that heartbeated only its predecessor are not taken for dead.
    pub fn decide(&mut self, map: &ClusterMap, now_ms: u64, leading: bool) -> Vec<Command> {
        if !leading {
            self.leading_since = None;
            return Vec::new();
        }
        let since = *self.leading_since.get_or_insert(now_ms);
        self.known_since.retain(|id, _| map.nodes.contains_key(id));
        let mut out = Vec::new();
        for n in map.nodes.values() {
            let known = *self.known_since.entry(n.id).or_insert(now_ms);
            let last = self.seen.get(&n.id).copied();
            let fresh = last.is_some_and(|t| now_ms.saturating_sub(t) < self.down_after_ms);
            match n.state {
                NodeState::Up => {
                    let silent_for = now_ms.saturating_sub(last.unwrap_or(0).max(since).max(known));
                    if silent_for >= self.down_after_ms {
                        out.push(Command::SetNodeState { node: n.id, state: NodeState::Down { since_ms: now_ms } });
                        continue;
                    }
                }
                NodeState::Down { since_ms } => {
                    // Back when it heartbeats again after being marked down.
                    if fresh && last.is_some_and(|t| t > since_ms) {
                        out.push(Command::SetNodeState { node: n.id, state: NodeState::Up });
                    }
                    continue;
                }
            }
            // A node that heartbeats reports its disks: a failing one is
            // marked failed (an operator sets it up again once replaced).
            if let Some((at, reports)) = self.disks.get(&n.id)
                && now_ms.saturating_sub(*at) < self.down_after_ms
            {
                for r in reports.iter().filter(|r| !r.healthy) {
                    if n.disks.get(r.disk as usize).is_some_and(|d| d.state == DiskState::Up) {
                        out.push(Command::SetDiskState { node: n.id, disk: r.disk, state: DiskState::Failed });
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(nodes: u64) -> ClusterMap {
        let mut m = ClusterMap::default();
        for id in 1..=nodes {
            m.apply(&Command::AddNode { id, addr: format!("h:{id}"), zone: "z".into(), rack: "r".into() });
            m.apply(&Command::AddDisk { node: id, path: "d0".into(), capacity_bytes: 1 << 30 });
            m.apply(&Command::AddDisk { node: id, path: "d1".into(), capacity_bytes: 1 << 30 });
        }
        m
    }

    fn hb(node: NodeId, bad_disk: Option<u32>) -> Heartbeat {
        let disks = (0..2).map(|d| DiskReport { disk: d, healthy: Some(d) != bad_disk, detail: String::new() }).collect();
        Heartbeat { node, epoch: 1, disks }
    }

    fn apply(m: &mut ClusterMap, cmds: Vec<Command>) -> usize {
        let n = cmds.len();
        for c in cmds {
            assert!(matches!(m.apply(&c), crate::Outcome::Applied { .. }), "{c:?}");
        }
        n
    }

    #[test]
    fn a_silent_node_goes_down_and_comes_back_up() {
        let mut m = map(3);
        let mut l = Liveness::new(5_000);
        // Not leading: nothing to decide, whatever the silence.
        assert!(l.decide(&m, 100_000, false).is_empty());
        // A new leader waits a full period before judging.
        for t in (0..5_000).step_by(1_000) {
            l.heartbeat(&hb(1, None), t);
            l.heartbeat(&hb(2, None), t);
            assert!(l.decide(&m, t, true).is_empty(), "at {t}");
        }
        l.heartbeat(&hb(1, None), 5_000);
        l.heartbeat(&hb(2, None), 5_000);
        let cmds = l.decide(&m, 5_000, true);
        assert_eq!(cmds, vec![Command::SetNodeState { node: 3, state: NodeState::Down { since_ms: 5_000 } }]);
        apply(&mut m, cmds);
        assert!(l.decide(&m, 5_500, true).is_empty(), "already down");
        // Node 2 stops; node 3 comes back.
        l.heartbeat(&hb(1, None), 9_000);
        l.heartbeat(&hb(3, None), 9_000);
        let cmds = l.decide(&m, 9_000, true);
        assert_eq!(cmds, vec![Command::SetNodeState { node: 3, state: NodeState::Up }]);
        apply(&mut m, cmds);
        let cmds = l.decide(&m, 10_000, true);
        assert_eq!(cmds, vec![Command::SetNodeState { node: 2, state: NodeState::Down { since_ms: 10_000 } }]);
        // Losing the lead forgets when it began: the next lead waits again.
        assert!(l.decide(&m, 10_100, false).is_empty());
        assert!(l.decide(&m, 20_000, true).is_empty());
    }

    /// A node added to the map while this member leads gets a full period
    /// to heartbeat before it is judged (it was marked down at once).
    #[test]
    fn a_node_just_added_is_not_judged_before_a_full_period() {
        let mut m = map(2);
        let mut l = Liveness::new(5_000);
        for t in [0, 2_000, 4_000, 6_000] {
            l.heartbeat(&hb(1, None), t);
            l.heartbeat(&hb(2, None), t);
            assert!(l.decide(&m, t, true).is_empty());
        }
        m.apply(&Command::AddNode { id: 3, addr: "h:3".into(), zone: "z".into(), rack: "r".into() });
        l.heartbeat(&hb(1, None), 7_000);
        l.heartbeat(&hb(2, None), 7_000);
        assert!(l.decide(&m, 7_000, true).is_empty(), "just added");
        l.heartbeat(&hb(1, None), 11_000);
        l.heartbeat(&hb(2, None), 11_000);
        assert!(l.decide(&m, 11_000, true).is_empty(), "still within its first period");
        l.heartbeat(&hb(1, None), 12_000);
        l.heartbeat(&hb(2, None), 12_000);
        assert_eq!(l.decide(&m, 12_000, true), vec![Command::SetNodeState { node: 3, state: NodeState::Down { since_ms: 12_000 } }]);
    }

    #[test]
    fn a_failing_disk_is_marked_failed_once() {
        let mut m = map(2);
        let mut l = Liveness::new(5_000);
        l.heartbeat(&hb(1, Some(1)), 0);
        l.heartbeat(&hb(2, None), 0);
        let cmds = l.decide(&m, 100, true);
        assert_eq!(cmds, vec![Command::SetDiskState { node: 1, disk: 1, state: DiskState::Failed }]);
        apply(&mut m, cmds);
        assert!(l.decide(&m, 200, true).is_empty(), "marked once");
        assert_eq!(m.degraded(), Vec::<u64>::new(), "no partitions yet");
        // A stale report says nothing.
        let mut l = Liveness::new(5_000);
        l.heartbeat(&hb(2, Some(0)), 0);
        l.heartbeat(&hb(1, None), 9_000);
        l.heartbeat(&hb(2, None), 9_000);
        let mut m = map(2);
        l.disks.insert(2, (0, hb(2, Some(0)).disks));
        assert!(l.decide(&m, 9_000, true).is_empty());
        m.apply(&Command::SetDiskState { node: 2, disk: 0, state: DiskState::Down });
        l.heartbeat(&hb(2, Some(0)), 9_100);
        assert!(l.decide(&m, 9_100, true).is_empty(), "an operator's down disk stays down, not failed");
    }
}

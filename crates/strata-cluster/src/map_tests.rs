//! The map's commands: placement, states, moves, removal, evacuation and
//! rebalancing, each refused cleanly when it cannot be done.

use super::*;
use crate::RecoveryPlacement;
use strata_types::Policy;

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
        // The same replicas, under a newer version: a client that saw the
        // move's new replica must learn that it is gone.
        let after = &m.partitions[&0];
        assert!(after.version > before.version);
        assert_eq!(*after, Partition { version: after.version, ..before });
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
        (Command::StartMove { partition: 0, from: ReplicaLoc { node: free, disk: 0 }, to: ReplicaLoc { node: free, disk: 0 }, now_ms: 1 }, "holds no replica"),
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
    evacuate_by(m, now_ms, down_out_ms, 2, RecoveryPlacement::default());
}

fn evacuate_by(m: &mut ClusterMap, now_ms: u64, down_out_ms: u64, max_moves: usize, rule: RecoveryPlacement) {
    for _ in 0..100 {
        let cmds = m.evacuation(now_ms, down_out_ms, down_out_ms, max_moves, rule);
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
    assert!(m.evacuation(5_000, 10_000, 10_000, 8, RecoveryPlacement::default()).is_empty());
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
    let starts = m.evacuation(0, u64::MAX, u64::MAX, 2, RecoveryPlacement::default()).iter().filter(|c| matches!(c, Command::StartMove { .. })).count();
    assert!(starts <= 2, "{starts}");
    // A batch spreads over the zone: no disk takes two of it while
    // another free one takes none.
    let mut m = cluster(1, 9, 9);
    m.apply(&Command::AddPartitions { count: 9, replicas_per_zone: 3, capacity_bytes: 1 << 30 });
    m.apply(&Command::SetDiskState { node: 1, disk: 0, state: DiskState::Failed });
    let targets: Vec<NodeId> = m
        .evacuation(0, u64::MAX, u64::MAX, 16, RecoveryPlacement::default())
        .iter()
        .filter_map(|c| if let Command::StartMove { to, .. } = c { Some(to.node) } else { None })
        .collect();
    let distinct: BTreeSet<NodeId> = targets.iter().copied().collect();
    assert!(targets.len() >= 2 && distinct.len() * 2 >= targets.len(), "{targets:?}");
}

/// A cluster grown from five nodes to eight, not yet rebalanced, whose
/// node 5 fails: twelve replicas to re-create.
fn grown_then_failed() -> ClusterMap {
    let mut m = cluster(1, 5, 5);
    m.apply(&Command::AddPartitions { count: 30, replicas_per_zone: 2, capacity_bytes: 1 << 30 });
    for id in 6..=8u64 {
        m.apply(&Command::AddNode { id, addr: format!("127.0.0.{id}:7000"), zone: "z0".into(), rack: format!("n{id}") });
        m.apply(&Command::AddDisk { node: id, path: "d0".into(), capacity_bytes: 1 << 40 });
    }
    m.apply(&Command::SetDiskState { node: 5, disk: 0, state: DiskState::Failed });
    m
}

/// Copies each node receives from one batch of evacuation.
fn targets(m: &ClusterMap, rule: RecoveryPlacement) -> BTreeMap<NodeId, usize> {
    let mut out = BTreeMap::new();
    for c in m.evacuation(0, u64::MAX, u64::MAX, 64, rule) {
        if let Command::StartMove { to, .. } = c {
            *out.entry(to.node).or_default() += 1;
        }
    }
    out
}

#[test]
fn kinesis_spreads_recovery_where_most_room_piles_it_on_the_emptiest_disks() {
    let m = grown_then_failed();
    let most_room = targets(&m, RecoveryPlacement::MostRoom);
    let kinesis = targets(&m, RecoveryPlacement::Kinesis);
    assert_eq!(most_room.values().sum::<usize>(), 12);
    assert_eq!(kinesis.values().sum::<usize>(), 12);
    // Ambry's greedy sends every copy to the three empty nodes.
    assert_eq!(most_room.keys().copied().collect::<Vec<_>>(), vec![6, 7, 8], "{most_room:?}");
    // Kinesis's LR shares the copying among more of the survivors (the
    // busiest sources, nodes 1 and 4 here, get no copies).
    assert!(kinesis.len() >= 5 && kinesis.values().all(|&c| c <= 3), "{kinesis:?}");
    assert!(!kinesis.contains_key(&5));
    // Counting the reads from the surviving copies too, no node works
    // more under Kinesis than under the greedy choice.
    let work = |rule| {
        let mut work: BTreeMap<NodeId, usize> = BTreeMap::new();
        for c in m.evacuation(0, u64::MAX, u64::MAX, 64, rule) {
            if let Command::StartMove { partition, from, to, .. } = c {
                *work.entry(to.node).or_default() += 1;
                for r in m.partitions[&partition].replicas.iter().filter(|r| **r != from) {
                    *work.entry(r.node).or_default() += 1;
                }
            }
        }
        work.into_values().max().unwrap_or(0)
    };
    assert!(work(RecoveryPlacement::Kinesis) <= work(RecoveryPlacement::MostRoom));
    // Both end with every partition at two copies on distinct nodes,
    // none on the failed disk.
    for rule in [RecoveryPlacement::Kinesis, RecoveryPlacement::MostRoom] {
        let mut m = grown_then_failed();
        evacuate_by(&mut m, 0, u64::MAX, 4, rule);
        for p in m.partitions.values() {
            let nodes: BTreeSet<NodeId> = p.replicas.iter().map(|r| r.node).collect();
            assert_eq!(nodes.len(), 2, "{rule:?} {p:?}");
            assert!(!nodes.contains(&5), "{rule:?} {p:?}");
        }
    }
}

#[test]
fn kinesis_recovery_keeps_racks_apart_and_falls_back_when_its_locations_are_full() {
    // Two racks of three nodes: a copy re-created for a partition on rack
    // r0 and r1 stays off the surviving copy's rack when it can.
    let mut m = cluster(1, 6, 2);
    m.apply(&Command::AddPartitions { count: 6, replicas_per_zone: 2, capacity_bytes: 1 << 30 });
    m.apply(&Command::SetDiskState { node: 1, disk: 0, state: DiskState::Failed });
    for c in m.evacuation(0, u64::MAX, u64::MAX, 64, RecoveryPlacement::Kinesis) {
        let Command::StartMove { partition, from, to, .. } = c else { continue };
        let other = m.partitions[&partition].replicas.iter().find(|r| **r != from).map(|r| m.nodes[&r.node].rack.clone());
        assert_ne!(Some(m.nodes[&to.node].rack.clone()), other, "partition {partition} went to its other copy's rack");
    }
    // A hash location without room is passed over; if none has room, the
    // greedy choice still finds the disk that has.
    let mut m = cluster(1, 3, 3);
    m.apply(&Command::AddPartitions { count: 3, replicas_per_zone: 2, capacity_bytes: 1 << 39 });
    m.apply(&Command::AddNode { id: 9, addr: "127.0.0.9:7000".into(), zone: "z0".into(), rack: "r9".into() });
    m.apply(&Command::AddDisk { node: 9, path: "d0".into(), capacity_bytes: 1 << 41 });
    m.apply(&Command::SetDiskState { node: 1, disk: 0, state: DiskState::Failed });
    let p = *m.partitions.values().find(|p| p.replicas.iter().any(|r| r.node == 1)).map(|p| &p.id).unwrap();
    let from = ReplicaLoc { node: 1, disk: 0 };
    assert_eq!(m.recovery_target(RecoveryPlacement::Kinesis, p, from).map(|t| t.node), Some(9));
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

//! Ambry's replica placement (§2.2) and rebalancing (§3, Algorithm 1).
//!
//! Placement: a new partition's replicas go to the disks with the most
//! unallocated capacity, at most one replica per datanode, spread over zones.
//! Rebalancing: from the ideal state (read-write partitions, read-only
//! partitions and used bytes per disk, each the cluster total over the disk
//! count), phase 1 moves partitions off disks above ideal into a pool (the
//! least-used read-write ones; random read-only ones) without taking a disk
//! below ideal; phase 2 deals the pool round-robin over a shuffled list of the
//! disks below ideal. The result is a move plan. By default the ideal is read
//! in whole partitions (`Phase1Rule::WholePartitions`); the paper's other
//! readings stay available for the simulator's comparison.

use crate::rng::SplitMix64;

/// A disk of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// Datanode holding it.
    pub node: usize,
    /// Zone (datacenter) of the datanode.
    pub zone: usize,
    /// Capacity in bytes.
    pub capacity: u64,
}

/// One replica of a partition on a disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replica {
    /// Partition id.
    pub partition: usize,
    /// Whether the partition still takes writes.
    pub read_write: bool,
    /// Bytes used by the replica.
    pub used: u64,
    /// Bytes allocated to the replica (the partition's capacity).
    pub allocated: u64,
}

/// How phase 1 decides that a disk has shed enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase1Rule {
    /// As the paper's text says: never take a disk below ideal (a disk may
    /// stay up to one partition above). Moves less than the minimum.
    NeverBelowIdeal,
    /// As its pseudo-code reads: shed while above ideal (`NumRW > idealRW`,
    /// `NumRO > idealRO & used > idealUsed`). Balances better, moves more.
    Literal,
    /// Never below ideal, but read-only partitions judged by count alone
    /// (without the `used > idealUsed` stop): balances allocation, which is
    /// what greedy placement of the next batches looks at.
    CountsOnly,
    /// The ideal state in whole partitions: a disk cannot hold 1.3
    /// partitions, so each disk's target is the floor or the ceiling of the
    /// ideal, the ceilings summing to the cluster total. Ceilings go to the
    /// disks holding the most already (fewest moves), and a disk with a
    /// read-write ceiling gets a read-only floor where possible, so
    /// allocation ends within one partition across disks and greedy
    /// placement of the next batch spreads it instead of piling it up.
    #[default]
    WholePartitions,
}

/// A move of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// Partition moved.
    pub partition: usize,
    /// From disk.
    pub from: usize,
    /// To disk.
    pub to: usize,
    /// Bytes it carries.
    pub bytes: u64,
}

/// Disks and the replicas on each.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Disks.
    pub disks: Vec<Disk>,
    /// Replicas on each disk.
    pub replicas: Vec<Vec<Replica>>,
}

impl Layout {
    /// Bytes allocated on a disk.
    pub fn allocated(&self, d: usize) -> u64 {
        self.replicas[d].iter().map(|r| r.allocated).sum()
    }
    /// Bytes used on a disk.
    pub fn used(&self, d: usize) -> u64 {
        self.replicas[d].iter().map(|r| r.used).sum()
    }
    fn nodes_of(&self, partition: usize) -> Vec<usize> {
        (0..self.disks.len()).filter(|&d| self.replicas[d].iter().any(|r| r.partition == partition)).map(|d| self.disks[d].node).collect()
    }

    /// Greedy placement of a new partition of `allocated` bytes with `count`
    /// replicas: most unallocated disk first, one replica per node, a new zone
    /// preferred while one is left. `None` if not enough disks have room.
    pub fn place_partition(&mut self, partition: usize, count: usize, allocated: u64) -> Option<Vec<usize>> {
        let mut order: Vec<usize> = (0..self.disks.len()).filter(|&d| self.disks[d].capacity >= self.allocated(d) + allocated).collect();
        order.sort_by_key(|&d| (std::cmp::Reverse(self.disks[d].capacity - self.allocated(d)), d));
        let zones: std::collections::BTreeSet<usize> = self.disks.iter().map(|d| d.zone).collect();
        let mut chosen: Vec<usize> = Vec::new();
        while chosen.len() < count {
            let used_zones: std::collections::BTreeSet<usize> = chosen.iter().map(|&d| self.disks[d].zone).collect();
            let fresh_zone_left = used_zones.len() < zones.len();
            let pick = order.iter().copied().find(|&d| {
                !chosen.contains(&d)
                    && !chosen.iter().any(|&c| self.disks[c].node == self.disks[d].node)
                    && (!fresh_zone_left || !used_zones.contains(&self.disks[d].zone))
            })?;
            chosen.push(pick);
        }
        for &d in &chosen {
            self.replicas[d].push(Replica { partition, read_write: true, used: 0, allocated });
        }
        Some(chosen)
    }

    /// Plans a rebalancing (Algorithm 1) and applies it to the layout.
    pub fn rebalance(&mut self, seed: u64, rule: Phase1Rule) -> Vec<Move> {
        if self.disks.is_empty() {
            return Vec::new();
        }
        let mut rng = SplitMix64::new(seed);
        let n = self.disks.len() as f64;
        let total_rw: usize = self.replicas.iter().map(|r| r.iter().filter(|x| x.read_write).count()).sum();
        let total_ro: usize = self.replicas.iter().map(|r| r.iter().filter(|x| !x.read_write).count()).sum();
        let total_used: u64 = (0..self.disks.len()).map(|d| self.used(d)).sum();
        let (ideal_rw, ideal_ro, ideal_used) = (total_rw as f64 / n, total_ro as f64 / n, total_used as f64 / n);
        let count = |l: &Layout, d: usize, rw: bool| l.replicas[d].iter().filter(|x| x.read_write == rw).count();
        let (rw_target, ro_target) = if rule == Phase1Rule::WholePartitions {
            let rw_target = self.whole_targets(total_rw, |d| (count(self, d, true), 0));
            let ro_target = self.whole_targets(total_ro, |d| {
                (count(self, d, false).min(total_ro.div_ceil(self.disks.len())), usize::from(rw_target[d] * self.disks.len() <= total_rw))
            });
            (rw_target, ro_target)
        } else {
            (vec![ideal_rw.ceil() as usize; self.disks.len()], vec![ideal_ro.ceil() as usize; self.disks.len()])
        };
        // Phase 1: extra partitions into the pool.
        let mut pool: Vec<(usize, Replica)> = Vec::new();
        for d in 0..self.disks.len() {
            loop {
                let rw: Vec<usize> = (0..self.replicas[d].len()).filter(|&i| self.replicas[d][i].read_write).collect();
                let keep = match rule {
                    Phase1Rule::Literal => rw.len() as f64 <= ideal_rw,
                    Phase1Rule::WholePartitions => rw.len() <= rw_target[d],
                    Phase1Rule::NeverBelowIdeal | Phase1Rule::CountsOnly => (rw.len() as f64 - 1.0) < ideal_rw,
                };
                if keep {
                    break;
                }
                // The least-used read-write partition, preferring one not pooled
                // already: two replicas of a partition could not both land on
                // the same new datanode.
                let pooled = |i: &usize| pool.iter().any(|(_, r)| r.partition == self.replicas[d][*i].partition);
                let i = *rw.iter().min_by_key(|i| (pooled(i), self.replicas[d][**i].used)).expect("non-empty");
                pool.push((d, self.replicas[d].swap_remove(i)));
            }
            loop {
                let ro: Vec<usize> = (0..self.replicas[d].len()).filter(|&i| !self.replicas[d][i].read_write).collect();
                let keep = match rule {
                    Phase1Rule::Literal => ro.len() as f64 <= ideal_ro || self.used(d) as f64 <= ideal_used,
                    Phase1Rule::WholePartitions => ro.len() <= ro_target[d],
                    Phase1Rule::NeverBelowIdeal | Phase1Rule::CountsOnly => (ro.len() as f64 - 1.0) < ideal_ro,
                };
                if keep || ro.is_empty() {
                    break;
                }
                let i = ro[rng.below(ro.len())];
                if rule == Phase1Rule::NeverBelowIdeal && (self.used(d) - self.replicas[d][i].used) as f64 <= ideal_used {
                    break;
                }
                pool.push((d, self.replicas[d].swap_remove(i)));
            }
        }
        // Phase 2: read-write first, then read-only, dealt round-robin over
        // the shuffled disks below ideal; an item no such disk can take (one
        // replica per node, capacity) goes to the least loaded disk that can,
        // or back where it was.
        let mut moves = Vec::new();
        for rw in [true, false] {
            let items: Vec<(usize, Replica)> = pool.iter().copied().filter(|p| p.1.read_write == rw).collect();
            let target = if rw { &rw_target } else { &ro_target };
            let mut below: Vec<usize> = (0..self.disks.len()).filter(|&d| count(self, d, rw) < target[d]).collect();
            rng.shuffle(&mut below);
            let mut cursor = 0;
            for (from, rep) in items {
                let fits =
                    |l: &Layout, d: usize| !l.nodes_of(rep.partition).contains(&l.disks[d].node) && l.disks[d].capacity >= l.allocated(d) + rep.allocated;
                let dealt =
                    (0..below.len()).map(|k| (cursor + k) % below.len()).find(|&k| count(self, below[k], rw) < target[below[k]] && fits(self, below[k]));
                let to = match dealt {
                    Some(k) => {
                        cursor = k + 1;
                        below[k]
                    }
                    None => (0..self.disks.len()).filter(|&d| fits(self, d)).min_by_key(|&d| (count(self, d, rw), d)).unwrap_or(from),
                };
                self.replicas[to].push(rep);
                if to != from {
                    moves.push(Move { partition: rep.partition, from, to, bytes: rep.used });
                }
            }
        }
        self.settle(ideal_rw, &mut moves);
        moves
    }

    /// Whole-partition targets for `total` replicas over the disks: every
    /// disk gets the floor of the ideal, and the disks ranking highest by
    /// `rank` (then lowest index) get one more until the total is reached.
    fn whole_targets(&self, total: usize, rank: impl Fn(usize) -> (usize, usize)) -> Vec<usize> {
        let n = self.disks.len();
        let mut target = vec![total / n; n];
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&d| (std::cmp::Reverse(rank(d)), d));
        for &d in order.iter().take(total % n) {
            target[d] += 1;
        }
        target
    }

    /// After phase 2: dealing in pool order can strand a partition whose only
    /// legal homes filled up first. While a disk above ideal has a read-write
    /// partition that a disk below ideal could take (one replica per node,
    /// capacity), move it. Bounded by the number of replicas.
    fn settle(&mut self, ideal_rw: f64, moves: &mut Vec<Move>) {
        let rw = |l: &Layout, d: usize| l.replicas[d].iter().filter(|x| x.read_write).count() as f64;
        let bound: usize = self.replicas.iter().map(Vec::len).sum();
        for _ in 0..bound {
            let above: Vec<usize> = (0..self.disks.len()).filter(|&d| rw(self, d) > ideal_rw.ceil()).collect();
            let below: Vec<usize> = (0..self.disks.len()).filter(|&d| rw(self, d) < ideal_rw.floor()).collect();
            let found = above.iter().find_map(|&a| {
                below.iter().find_map(|&b| {
                    let i = (0..self.replicas[a].len()).find(|&i| {
                        let x = self.replicas[a][i];
                        x.read_write && !self.nodes_of(x.partition).contains(&self.disks[b].node) && self.disks[b].capacity >= self.allocated(b) + x.allocated
                    })?;
                    Some((a, b, i))
                })
            });
            let Some((a, b, i)) = found else { break };
            let rep = self.replicas[a].swap_remove(i);
            self.replicas[b].push(rep);
            moves.push(Move { partition: rep.partition, from: a, to: b, bytes: rep.used });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cluster(nodes: usize, disks_per_node: usize) -> Layout {
        let disks: Vec<Disk> = (0..nodes * disks_per_node).map(|d| Disk { node: d / disks_per_node, zone: 0, capacity: 4000 }).collect();
        let replicas = vec![Vec::new(); disks.len()];
        Layout { disks, replicas }
    }

    #[test]
    fn greedy_uses_the_emptiest_disks_one_per_node() {
        let mut l = cluster(4, 2);
        let placed = l.place_partition(0, 3, 100).unwrap();
        let nodes: std::collections::BTreeSet<usize> = placed.iter().map(|&d| l.disks[d].node).collect();
        assert_eq!(nodes.len(), 3);
        assert!(l.place_partition(1, 5, 100).is_none(), "5 replicas cannot fit on 4 nodes");
    }

    /// The default rule brings every disk to the floor or the ceiling of the
    /// ideal in both kinds, and allocation to within one partition, so the
    /// next batch placed greedily spreads instead of piling onto new disks.
    #[test]
    fn whole_partitions_balances_counts_and_allocation() {
        let mut l = cluster(10, 4);
        for p in 0..200 {
            l.place_partition(p, 3, 100).unwrap();
        }
        for reps in l.replicas.iter_mut() {
            for r in reps.iter_mut() {
                (r.read_write, r.used) = if r.partition < 170 { (false, 100) } else { (true, 40) };
            }
        }
        for i in 0..4 * 4 {
            l.disks.push(Disk { node: 10 + i / 4, zone: 0, capacity: 4000 });
            l.replicas.push(Vec::new());
        }
        let moves = l.rebalance(7, Phase1Rule::default());
        assert!(!moves.is_empty());
        let n = l.disks.len();
        for rw in [true, false] {
            let counts: Vec<usize> = (0..n).map(|d| l.replicas[d].iter().filter(|x| x.read_write == rw).count()).collect();
            let total: usize = counts.iter().sum();
            assert!(counts.iter().all(|&c| c == total / n || c == total.div_ceil(n)), "read_write={rw}: {counts:?}");
        }
        let alloc: Vec<u64> = (0..n).map(|d| l.allocated(d)).collect();
        assert!(alloc.iter().max().unwrap() - alloc.iter().min().unwrap() <= 100, "allocation {alloc:?}");
    }

    proptest! {
        /// After rebalancing a grown cluster, with either phase-1 rule: no two
        /// replicas of a partition share a node, no disk is over capacity, and
        /// no disk is left above ideal while a disk below ideal could take one
        /// of its read-write partitions.
        #[test]
        fn rebalancing_reaches_ideal_and_keeps_invariants(old_nodes in 3usize..8, new_nodes in 1usize..6, parts in 10usize..60, seed: u64, rule_index in 0usize..4) {
            let mut l = cluster(old_nodes, 2);
            for p in 0..parts {
                if l.place_partition(p, 3, 100).is_none() { break; }
            }
            // Old partitions fill and turn read-only; then the cluster grows.
            for d in 0..l.disks.len() {
                for r in l.replicas[d].iter_mut() {
                    if r.partition % 2 == 0 { r.read_write = false; r.used = 100; } else { r.used = 30; }
                }
            }
            for i in 0..new_nodes * 2 {
                l.disks.push(Disk { node: old_nodes + i / 2, zone: 0, capacity: 4000 });
                l.replicas.push(Vec::new());
            }
            let rule = [Phase1Rule::NeverBelowIdeal, Phase1Rule::Literal, Phase1Rule::CountsOnly, Phase1Rule::WholePartitions][rule_index];
            let _ = l.rebalance(seed, rule);
            for p in 0..parts {
                let nodes = l.nodes_of(p);
                let distinct: std::collections::BTreeSet<usize> = nodes.iter().copied().collect();
                prop_assert_eq!(nodes.len(), distinct.len(), "partition {} has two replicas on one node", p);
            }
            prop_assert!((0..l.disks.len()).all(|d| l.allocated(d) <= l.disks[d].capacity));
            // No disk is left above ideal while a disk below ideal could take
            // one of its read-write partitions (one replica per node, capacity).
            let n = l.disks.len() as f64;
            let total_rw: usize = l.replicas.iter().map(|r| r.iter().filter(|x| x.read_write).count()).sum();
            let ideal = total_rw as f64 / n;
            let rw = |d: usize| l.replicas[d].iter().filter(|x| x.read_write).count() as f64;
            for a in (0..l.disks.len()).filter(|&a| rw(a) > ideal.ceil()) {
                for b in (0..l.disks.len()).filter(|&b| rw(b) < ideal.floor()) {
                    let movable = l.replicas[a].iter().filter(|x| x.read_write).any(|x| {
                        !l.nodes_of(x.partition).contains(&l.disks[b].node) && l.disks[b].capacity >= l.allocated(b) + x.allocated
                    });
                    prop_assert!(!movable, "disk {} has {} read-write partitions, disk {} has {} (ideal {:.2}) and could take one", a, rw(a), b, rw(b), ideal);
                }
            }
        }
    }
}

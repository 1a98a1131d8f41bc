//! Spock/Voldemort's partition ring (§3.1.2): the hash ring split into
//! equal-size partitions, each owned by one node. A key's preference list
//! starts at its primary partition and jumps clockwise to partitions owned
//! by nodes not yet in the list (and, zone-aware, in zones still short of
//! their replica count). The position in that walk is the replica id, which
//! names the chunk files (`<partition>_<replica>_<chunk>`). Requests then go
//! to the list reordered by zone proximity, local zone first.
//!
//! Every primary partition's list depends only on the ring, so a store's
//! whole layout is a small table: for each partition, its nodes in replica
//! order (`ReplicaTable`). Builders (the Rust one and the Spark job) route
//! records through that table; nodes, routers and the rebalancer read it.

use std::collections::{BTreeMap, BTreeSet};

/// The MD5 digest a key is placed by (Spock §4.1).
pub fn key_digest(key: &[u8]) -> [u8; 16] {
    use md5::Digest;
    md5::Md5::digest(key).into()
}

/// The primary ring partition of a digest: the 64-bit space of its last 8
/// bytes (big-endian) split into `partitions` equal ranges. Independent of
/// the chunk and index bits, which come from the first 8.
pub fn partition_of(digest: &[u8; 16], partitions: u32) -> u32 {
    let pos = u64::from_be_bytes([digest[8], digest[9], digest[10], digest[11], digest[12], digest[13], digest[14], digest[15]]);
    ((pos as u128 * partitions.max(1) as u128) >> 64) as u32
}

/// The chunk of a digest in its bucket: its first 4 bytes (big-endian)
/// modulo the chunk count.
pub fn chunk_of(digest: &[u8; 16], chunks: u32) -> u32 {
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % chunks.max(1)
}

/// The index's search key: the digest's first 8 bytes, big-endian, so that
/// numeric order is byte order.
pub fn prefix(digest: &[u8; 16]) -> u64 {
    u64::from_be_bytes([digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7]])
}

/// A node of the ring and its zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RingNode {
    /// Node id.
    pub id: u32,
    /// Zone id.
    pub zone: u32,
}

/// How many replicas a store keeps, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replication {
    /// `n` replicas on distinct nodes, zones ignored.
    Nodes(u32),
    /// So many replicas in each zone, on distinct nodes.
    Zones(BTreeMap<u32, u32>),
}

impl Replication {
    /// Replicas in all.
    pub fn factor(&self) -> u32 {
        match self {
            Self::Nodes(n) => *n,
            Self::Zones(z) => z.values().sum(),
        }
    }
}

/// Why a ring or a preference list cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The ring has no partitions or no nodes.
    #[error("a ring needs at least one partition and one node")]
    Empty,
    /// A partition's owner is not a node of the ring.
    #[error("partition {partition} is owned by node {node}, which is not in the ring")]
    UnknownOwner {
        /// Partition.
        partition: u32,
        /// Owner.
        node: u32,
    },
    /// Not enough distinct nodes (in some zone) for the replication.
    #[error("cannot place {wanted} replicas: {detail}")]
    Unsatisfiable {
        /// Replicas wanted.
        wanted: u32,
        /// What is short.
        detail: String,
    },
}

/// Partitions and their owners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    owners: Vec<u32>,
    zones: BTreeMap<u32, u32>,
}

/// For each primary partition, its nodes in replica order.
pub type ReplicaTable = Vec<Vec<u32>>;

impl Ring {
    /// A ring with the given owner of each partition.
    pub fn new(owners: Vec<u32>, nodes: &[RingNode]) -> Result<Self, RingError> {
        if owners.is_empty() || nodes.is_empty() {
            return Err(RingError::Empty);
        }
        let zones: BTreeMap<u32, u32> = nodes.iter().map(|n| (n.id, n.zone)).collect();
        for (p, &node) in owners.iter().enumerate() {
            if !zones.contains_key(&node) {
                return Err(RingError::UnknownOwner { partition: p as u32, node });
            }
        }
        Ok(Self { owners, zones })
    }

    /// `partitions` spread evenly, interleaving zones around the ring
    /// (zone 0's first node, zone 1's first node, ..., zone 0's second
    /// node, ...), so walking the ring meets other nodes and zones at once.
    pub fn balanced(partitions: u32, nodes: &[RingNode]) -> Result<Self, RingError> {
        let mut by_zone: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for n in nodes {
            by_zone.entry(n.zone).or_default().push(n.id);
        }
        for ids in by_zone.values_mut() {
            ids.sort_unstable();
            ids.dedup();
        }
        let deepest = by_zone.values().map(Vec::len).max().unwrap_or(0);
        let order: Vec<u32> = (0..deepest).flat_map(|i| by_zone.values().filter_map(move |ids| ids.get(i).copied())).collect();
        if order.is_empty() || partitions == 0 {
            return Err(RingError::Empty);
        }
        Self::new((0..partitions as usize).map(|p| order[p % order.len()]).collect(), nodes)
    }

    /// Number of partitions.
    pub fn partitions(&self) -> u32 {
        self.owners.len() as u32
    }

    /// The owner of each partition.
    pub fn owners(&self) -> &[u32] {
        &self.owners
    }

    /// The nodes and their zones.
    pub fn nodes(&self) -> impl Iterator<Item = RingNode> + '_ {
        self.zones.iter().map(|(&id, &zone)| RingNode { id, zone })
    }

    /// The zone of a node of the ring.
    pub fn zone_of(&self, node: u32) -> Option<u32> {
        self.zones.get(&node).copied()
    }

    /// The preference list of keys whose primary partition is `primary`:
    /// `(partition, node)` in replica order.
    pub fn preference_list(&self, primary: u32, rep: &Replication) -> Result<Vec<(u32, u32)>, RingError> {
        let wanted = rep.factor();
        let n = self.owners.len();
        let mut list: Vec<(u32, u32)> = Vec::with_capacity(wanted as usize);
        let mut used = BTreeSet::new();
        let mut per_zone: BTreeMap<u32, u32> = BTreeMap::new();
        for step in 0..n {
            if list.len() as u32 == wanted {
                break;
            }
            let p = (primary as usize + step) % n;
            let node = self.owners[p];
            if used.contains(&node) {
                continue;
            }
            if let Replication::Zones(z) = rep {
                let zone = self.zones[&node];
                let have = per_zone.get(&zone).copied().unwrap_or(0);
                if have >= z.get(&zone).copied().unwrap_or(0) {
                    continue;
                }
                per_zone.insert(zone, have + 1);
            }
            used.insert(node);
            list.push((p as u32, node));
        }
        if list.len() as u32 != wanted {
            let detail = match rep {
                Replication::Nodes(_) => format!("the ring has {} distinct owners", self.owners.iter().collect::<BTreeSet<_>>().len()),
                Replication::Zones(z) => {
                    let short: Vec<String> = z
                        .iter()
                        .filter(|(zone, want)| per_zone.get(zone).copied().unwrap_or(0) < **want)
                        .map(|(zone, want)| format!("zone {zone} wants {want}, has {} owners", per_zone.get(zone).copied().unwrap_or(0)))
                        .collect();
                    short.join("; ")
                }
            };
            return Err(RingError::Unsatisfiable { wanted, detail });
        }
        Ok(list)
    }

    /// Every primary partition's nodes in replica order.
    pub fn replica_table(&self, rep: &Replication) -> Result<ReplicaTable, RingError> {
        (0..self.partitions()).map(|p| Ok(self.preference_list(p, rep)?.into_iter().map(|(_, n)| n).collect())).collect()
    }

    /// The ring after adding `node`: it takes partitions, one at a time,
    /// from whichever node owns the most (its highest-numbered partition),
    /// until it owns its fair share; a node that owns partitions already is
    /// refused.
    pub fn with_node(&self, node: RingNode) -> Result<Self, RingError> {
        if self.owners.contains(&node.id) {
            return Err(RingError::Unsatisfiable { wanted: 0, detail: format!("node {} already owns partitions of the ring", node.id) });
        }
        let mut owners = self.owners.clone();
        let target = owners.len() / (self.owners.iter().collect::<BTreeSet<_>>().len() + 1);
        for _ in 0..target {
            let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
            for &o in &owners {
                *counts.entry(o).or_default() += 1;
            }
            let Some((&donor, _)) = counts.iter().filter(|(n, _)| **n != node.id).max_by_key(|(n, c)| (**c, std::cmp::Reverse(**n))) else { break };
            if let Some(p) = owners.iter().rposition(|&o| o == donor) {
                owners[p] = node.id;
            }
        }
        let mut nodes: Vec<RingNode> = self.nodes().filter(|n| n.id != node.id).collect();
        nodes.push(node);
        Self::new(owners, &nodes)
    }
}

/// `list` reordered by zone proximity: nodes of `proximity[0]` (the local
/// zone) first, then `proximity[1]`, ...; zones not listed last. Stable, so
/// replica order breaks ties.
pub fn by_proximity(list: &[(u32, u32)], ring: &Ring, proximity: &[u32]) -> Vec<(u32, u32)> {
    let rank = |node: u32| ring.zone_of(node).and_then(|z| proximity.iter().position(|&p| p == z)).unwrap_or(usize::MAX);
    let mut out = list.to_vec();
    out.sort_by_key(|&(_, node)| rank(node));
    out
}

/// One step of moving a ring's data: `stealer` needs the chunk files of
/// (`partition`, `replica`), and copies those of (`partition`,
/// `from_replica`) from `donor` (the same keys: every replica of a
/// partition holds them). A donor equal to the stealer is a local rename.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Move {
    /// Primary partition.
    pub partition: u32,
    /// Replica id on the stealer.
    pub replica: u32,
    /// The node that needs the files.
    pub stealer: u32,
    /// A node that has them under the old table.
    pub donor: u32,
    /// Their replica id on the donor.
    pub from_replica: u32,
}

/// The moves that take a store from `old` to `new`: for every (partition,
/// replica) whose node changes, a copy from a node holding the partition
/// under `old` (the stealer itself if it does, else the old holder of the
/// same replica). Also the (partition, replica, node) files each node drops
/// afterwards.
pub fn plan(old: &ReplicaTable, new: &ReplicaTable) -> (Vec<Move>, Vec<(u32, u32, u32)>) {
    let mut moves = Vec::new();
    let mut drops = Vec::new();
    for (p, (o, n)) in old.iter().zip(new).enumerate() {
        let p = p as u32;
        for (r, &node) in n.iter().enumerate() {
            if o.get(r) == Some(&node) {
                continue;
            }
            let (donor, from_replica) = match o.iter().position(|&x| x == node) {
                Some(fr) => (node, fr as u32),
                None => (o.get(r).copied().unwrap_or(o[0]), if r < o.len() { r as u32 } else { 0 }),
            };
            moves.push(Move { partition: p, replica: r as u32, stealer: node, donor, from_replica });
        }
        for (r, &node) in o.iter().enumerate() {
            if n.get(r) != Some(&node) {
                drops.push((p, r as u32, node));
            }
        }
    }
    (moves, drops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(zones: &[u32]) -> Vec<RingNode> {
        zones.iter().enumerate().map(|(i, &z)| RingNode { id: i as u32, zone: z }).collect()
    }

    /// The paper's Figure 2 ring: 12 partitions over nodes 0, 1, 2 in turn.
    #[test]
    fn consistent_routing_jumps_to_distinct_nodes() {
        let ring = Ring::new((0..12).map(|p| p % 3).collect(), &nodes(&[0, 0, 0])).unwrap();
        assert_eq!(ring.preference_list(0, &Replication::Nodes(2)).unwrap(), vec![(0, 0), (1, 1)]);
        assert_eq!(ring.preference_list(11, &Replication::Nodes(3)).unwrap(), vec![(11, 2), (0, 0), (1, 1)]);
        // Owners repeat: 0,0,1 -> the second 0 is skipped.
        let ring = Ring::new(vec![0, 0, 1, 2], &nodes(&[0, 0, 0])).unwrap();
        assert_eq!(ring.preference_list(0, &Replication::Nodes(2)).unwrap(), vec![(0, 0), (2, 1)]);
        assert!(matches!(ring.preference_list(0, &Replication::Nodes(4)), Err(RingError::Unsatisfiable { wanted: 4, .. })));
    }

    #[test]
    fn zone_routing_meets_each_zones_count_and_proximity_orders() {
        // Nodes 0..6, zones 0,1,2 twice over.
        let ns = nodes(&[0, 1, 2, 0, 1, 2]);
        let ring = Ring::balanced(18, &ns).unwrap();
        let rep = Replication::Zones([(0, 2), (1, 1), (2, 1)].into_iter().collect());
        for p in 0..18 {
            let list = ring.preference_list(p, &rep).unwrap();
            assert_eq!(list[0].0, p, "the primary partition comes first");
            let distinct: BTreeSet<u32> = list.iter().map(|x| x.1).collect();
            assert_eq!(distinct.len(), 4);
            let in_zone = |z| list.iter().filter(|x| ring.zone_of(x.1) == Some(z)).count();
            assert_eq!((in_zone(0), in_zone(1), in_zone(2)), (2, 1, 1), "partition {p}: {list:?}");
            let near = by_proximity(&list, &ring, &[2, 1, 0]);
            assert_eq!(ring.zone_of(near[0].1), Some(2));
            assert_eq!(ring.zone_of(near[3].1), Some(0));
        }
        let too_many = Replication::Zones([(0, 3)].into_iter().collect());
        let e = ring.preference_list(0, &too_many).unwrap_err();
        assert!(e.to_string().contains("zone 0 wants 3"), "{e}");
    }

    /// §4.3.2's example: node 3 joins the Figure 2 ring and takes
    /// partition 3; with 2 replicas it steals 3_0 and 2_1 from node 0.
    #[test]
    fn the_papers_rebalancing_example() {
        let old = Ring::new((0..12).map(|p| p % 3).collect(), &nodes(&[0, 0, 0])).unwrap();
        let mut owners = old.owners().to_vec();
        owners[3] = 3;
        let new = Ring::new(owners, &nodes(&[0, 0, 0, 0])).unwrap();
        let rep = Replication::Nodes(2);
        let (moves, drops) = plan(&old.replica_table(&rep).unwrap(), &new.replica_table(&rep).unwrap());
        let stolen: Vec<(u32, u32, u32, u32)> = moves.iter().map(|m| (m.stealer, m.donor, m.partition, m.replica)).collect();
        assert_eq!(stolen, vec![(3, 0, 2, 1), (3, 0, 3, 0)]);
        assert!(moves.iter().all(|m| m.from_replica == m.replica));
        assert_eq!(drops, vec![(2, 1, 0), (3, 0, 0)]);
        // Node 0 keeps 0_0, 6_0, 9_0, 5_1, 8_1, 11_1 as in the paper's table.
        let table = new.replica_table(&rep).unwrap();
        let mut node0: Vec<(u32, u32)> =
            table.iter().enumerate().flat_map(|(p, ns)| ns.iter().enumerate().filter(|x| *x.1 == 0).map(move |(r, _)| (p as u32, r as u32))).collect();
        node0.sort_by_key(|&(p, r)| (r, p));
        assert_eq!(node0, vec![(0, 0), (6, 0), (9, 0), (5, 1), (8, 1), (11, 1)]);
    }

    #[test]
    fn balanced_interleaves_zones() {
        let ring = Ring::balanced(8, &nodes(&[0, 0, 1, 1])).unwrap();
        // Zone 0's nodes 0,1 and zone 1's 2,3: 0,2,1,3,...
        assert_eq!(ring.owners(), &[0, 2, 1, 3, 0, 2, 1, 3]);
        assert!(matches!(Ring::new(vec![0, 9], &nodes(&[0])), Err(RingError::UnknownOwner { partition: 1, node: 9 })));
        assert_eq!(Ring::balanced(0, &nodes(&[0])), Err(RingError::Empty));
    }

    #[test]
    fn adding_a_node_moves_a_fair_share_and_the_plan_covers_it() {
        let ns = nodes(&[0, 1, 2]);
        let ring = Ring::balanced(12, &ns).unwrap();
        let bigger = ring.with_node(RingNode { id: 3, zone: 0 }).unwrap();
        let owned = |r: &Ring, n| r.owners().iter().filter(|&&o| o == n).count();
        assert_eq!((0..4).map(|n| owned(&bigger, n)).collect::<Vec<_>>(), vec![3, 3, 3, 3]);
        let moved = ring.owners().iter().zip(bigger.owners()).filter(|(a, b)| a != b).count();
        assert_eq!(moved, 3, "only the new node's share moves");
        let rep = Replication::Nodes(2);
        let (old, new) = (ring.replica_table(&rep).unwrap(), bigger.replica_table(&rep).unwrap());
        let (moves, drops) = plan(&old, &new);
        // Applying the plan gives every node exactly its new files.
        let mut held: BTreeSet<(u32, u32, u32)> =
            old.iter().enumerate().flat_map(|(p, ns)| ns.iter().enumerate().map(move |(r, &n)| (p as u32, r as u32, n))).collect();
        for m in &moves {
            assert!(held.contains(&(m.partition, m.from_replica, m.donor)), "{m:?}: the donor holds the source files");
        }
        for m in &moves {
            held.insert((m.partition, m.replica, m.stealer));
        }
        for d in &drops {
            held.remove(d);
        }
        let want: BTreeSet<(u32, u32, u32)> =
            new.iter().enumerate().flat_map(|(p, ns)| ns.iter().enumerate().map(move |(r, &n)| (p as u32, r as u32, n))).collect();
        assert_eq!(held, want);
        assert!(ring.with_node(RingNode { id: 1, zone: 0 }).is_err());
    }
}

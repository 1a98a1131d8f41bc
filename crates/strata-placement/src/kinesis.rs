//! Kinesis(k, r) (MacCormick et al., TOS 2009): servers in `k` failure-
//! isolated segments, an independent linear-hashing function per segment, so
//! every object has `k` hash locations, one per segment; `r < k` replicas go
//! on the `r` locations chosen by storage, load, or both (§3.2, §3.3); reads
//! go to the least loaded replica; lost replicas are recreated on unused hash
//! locations (§3.4); new servers join segments round-robin (§3.5).

use crate::ServerId;
use crate::hash::segment_hash;
use crate::linear::KeySpace;

/// How the `r` replica locations of a new object are picked among its `k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteRule {
    /// Kinesis S: the `r` with the least storage used.
    Storage,
    /// Kinesis L: the `r` with the shortest I/O queues.
    Load,
    /// Kinesis S+L: the least storage among those with empty queues, then the
    /// shortest queues.
    StorageLoad,
}

/// How a lost replica's source and destination are picked (§6.2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryRule {
    /// SR: source is the primary (lowest-id surviving replica); destination
    /// the unused hash location with the most spare capacity.
    Storage,
    /// LR: source and destination with the lowest recovery load so far.
    Load,
}

/// What the choice rules need to know of a server.
pub trait ServerState {
    /// Bytes stored.
    fn used(&self, s: ServerId) -> u64;
    /// Capacity in bytes.
    fn capacity(&self, s: ServerId) -> u64;
    /// Requests queued (load).
    fn queue(&self, s: ServerId) -> u64;
    /// Whether the server has failed.
    fn faulty(&self, s: ServerId) -> bool;
}

/// A plain table of server state, for simulators and tests: one capacity for
/// every server, and per-server bytes used, queue length and failure.
#[derive(Debug, Clone, Default)]
pub struct ServerTable {
    /// Bytes used per server.
    pub used: Vec<u64>,
    /// Queued requests per server.
    pub queue: Vec<u64>,
    /// Failed servers.
    pub down: Vec<bool>,
    /// Capacity of every server.
    pub capacity: u64,
}

impl ServerTable {
    /// `n` empty, idle, healthy servers of `capacity` bytes.
    pub fn new(n: usize, capacity: u64) -> Self {
        Self { used: vec![0; n], queue: vec![0; n], down: vec![false; n], capacity }
    }
    /// Adds an empty server and returns its id.
    pub fn add_server(&mut self) -> ServerId {
        self.used.push(0);
        self.queue.push(0);
        self.down.push(false);
        self.used.len() - 1
    }
}

impl ServerState for ServerTable {
    fn used(&self, s: ServerId) -> u64 {
        self.used[s]
    }
    fn capacity(&self, _: ServerId) -> u64 {
        self.capacity
    }
    fn queue(&self, s: ServerId) -> u64 {
        self.queue[s]
    }
    fn faulty(&self, s: ServerId) -> bool {
        self.down[s]
    }
}

/// A Kinesis layout: segments of servers and their key spaces.
#[derive(Debug, Clone)]
pub struct Kinesis {
    k: usize,
    r: usize,
    /// Global server ids of each segment, in the order they joined it.
    segments: Vec<Vec<ServerId>>,
    spaces: Vec<KeySpace>,
    /// Segment that receives the next added server.
    next_segment: usize,
}

impl Kinesis {
    /// A layout with `k` segments, `r` replicas per object, and the given
    /// servers per segment (each segment one failure domain, ideally).
    pub fn new(k: usize, r: usize, segments: Vec<Vec<ServerId>>) -> Self {
        assert!(0 < r && r < k, "Kinesis needs 0 < r < k");
        assert_eq!(segments.len(), k, "one server list per segment");
        assert!(segments.iter().all(|s| !s.is_empty()), "every segment needs a server");
        let spaces = segments.iter().map(|s| KeySpace::new(s.len())).collect();
        Self { k, r, segments, spaces, next_segment: 0 }
    }

    /// `n` servers numbered 0.. dealt round-robin into `k` segments.
    pub fn round_robin(k: usize, r: usize, n: usize) -> Self {
        let mut segments = vec![Vec::new(); k];
        for s in 0..n {
            segments[s % k].push(s);
        }
        let mut me = Self::new(k, r, segments);
        me.next_segment = n % k;
        me
    }

    /// Segments.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Replicas per object.
    pub fn r(&self) -> usize {
        self.r
    }
    /// The servers of each segment.
    pub fn segments(&self) -> &[Vec<ServerId>] {
        &self.segments
    }

    /// The hash location of `key` in segment `s`, skipping faulty servers.
    pub fn location(&self, key: &[u8], s: usize, faulty: impl Fn(ServerId) -> bool) -> Option<ServerId> {
        let seg = &self.segments[s];
        self.spaces[s].locate(segment_hash(key, s), |i| faulty(seg[i])).map(|i| seg[i])
    }

    /// The `k` hash locations of `key` (one per segment; `None` where a whole
    /// segment is down).
    pub fn locations(&self, key: &[u8], faulty: impl Fn(ServerId) -> bool + Copy) -> Vec<Option<ServerId>> {
        (0..self.k).map(|s| self.location(key, s, faulty)).collect()
    }

    /// Picks the `r` replica locations of a new object (fewer if fewer
    /// segments have a live server). Ties go to the lower segment, so the
    /// choice is deterministic.
    pub fn place(&self, key: &[u8], rule: WriteRule, st: &impl ServerState) -> Vec<ServerId> {
        let mut locs: Vec<ServerId> = self.locations(key, |s| st.faulty(s)).into_iter().flatten().collect();
        locs.sort_by_key(|&s| match rule {
            WriteRule::Storage => (st.used(s), 0, 0),
            WriteRule::Load => (st.queue(s), 0, 0),
            // Empty queues first, by storage; then by queue length.
            WriteRule::StorageLoad => {
                if st.queue(s) == 0 {
                    (0, st.used(s), 0)
                } else {
                    (1, st.queue(s), 0)
                }
            }
        });
        locs.truncate(self.r);
        locs
    }

    /// The replica a read goes to: the least loaded (lowest id on ties).
    pub fn read_from(&self, replicas: &[ServerId], st: &impl ServerState) -> Option<ServerId> {
        replicas.iter().copied().filter(|&s| !st.faulty(s)).min_by_key(|&s| (st.queue(s), s))
    }

    /// Chooses (source, destination) to recreate a replica of `key` lost on a
    /// failed server: the source among the surviving replicas, the destination
    /// among the hash locations not holding a replica. `recovery_load` counts
    /// the recovery work each server has taken so far (for LR).
    pub fn recover(
        &self,
        key: &[u8],
        surviving: &[ServerId],
        rule: RecoveryRule,
        st: &impl ServerState,
        recovery_load: impl Fn(ServerId) -> u64,
    ) -> Option<(ServerId, ServerId)> {
        let live: Vec<ServerId> = surviving.iter().copied().filter(|&s| !st.faulty(s)).collect();
        // The unused hash locations proper (§3.4): not the servers that took
        // over a failed server's key space, which would unbalance it.
        let spare: Vec<ServerId> = self.locations(key, |_| false).into_iter().flatten().filter(|&s| !surviving.contains(&s) && !st.faulty(s)).collect();
        let (source, dest) = match rule {
            RecoveryRule::Storage => {
                (live.iter().copied().min(), spare.iter().copied().max_by_key(|&s| (st.capacity(s).saturating_sub(st.used(s)), std::cmp::Reverse(s))))
            }
            RecoveryRule::Load => (live.iter().copied().min_by_key(|&s| (recovery_load(s), s)), spare.iter().copied().min_by_key(|&s| (recovery_load(s), s))),
        };
        Some((source?, dest?))
    }

    /// Lazy relocation (§3.5): after expansion an object may still sit where
    /// it was before its key range was split. The servers it may be on, in
    /// segment `s`, newest first, given the segment had `since` servers when
    /// relocation last completed. Deterministic, so no pointers are stored.
    pub fn candidates(&self, key: &[u8], s: usize, since: usize) -> Vec<ServerId> {
        let seg = &self.segments[s];
        let h = segment_hash(key, s);
        let mut out: Vec<ServerId> = Vec::new();
        for n in (since.max(1)..=seg.len()).rev() {
            let server = seg[crate::linear::bucket(h, n)];
            if !out.contains(&server) {
                out.push(server);
            }
        }
        out
    }

    /// Adds a server to the next segment in round-robin order and returns
    /// (segment, the server it splits): objects of that segment on the split
    /// server whose location is now the new server must move there (lazily,
    /// §3.5).
    pub fn add_server(&mut self, id: ServerId) -> (usize, ServerId) {
        let s = self.next_segment;
        self.next_segment = (s + 1) % self.k;
        let n = self.segments[s].len();
        let split = self.segments[s][crate::linear::split_of(n)];
        self.segments[s].push(id);
        self.spaces[s] = KeySpace::new(n + 1);
        (s, split)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn flat(n: usize) -> ServerTable {
        ServerTable::new(n, 1 << 40)
    }

    proptest! {
        /// Replicas land in distinct segments (failure domains), one per segment.
        #[test]
        fn replicas_never_share_a_segment(key: Vec<u8>, n in 7usize..200, used in proptest::collection::vec(0u64..1000, 200)) {
            let kin = Kinesis::round_robin(7, 3, n);
            let mut st = flat(n);
            st.used.copy_from_slice(&used[..n]);
            let reps = kin.place(&key, WriteRule::Storage, &st);
            prop_assert_eq!(reps.len(), 3);
            let segs: std::collections::BTreeSet<usize> = reps.iter().map(|s| s % 7).collect();
            prop_assert_eq!(segs.len(), 3);
        }

        /// The same inputs give the same placement.
        #[test]
        fn placement_is_deterministic(key: Vec<u8>, n in 7usize..100) {
            let a = Kinesis::round_robin(7, 3, n);
            let b = Kinesis::round_robin(7, 3, n);
            prop_assert_eq!(a.place(&key, WriteRule::StorageLoad, &flat(n)), b.place(&key, WriteRule::StorageLoad, &flat(n)));
        }

        /// Adding a server moves only objects of the split server, to the new one.
        #[test]
        fn expansion_moves_only_split_keys(keys in proptest::collection::vec(any::<u64>(), 1..200), n in 7usize..100) {
            let mut kin = Kinesis::round_robin(7, 3, n);
            let before: Vec<Vec<Option<ServerId>>> = keys.iter().map(|k| kin.locations(&k.to_le_bytes(), |_| false)).collect();
            let (seg, split) = kin.add_server(n);
            for (k, b) in keys.iter().zip(before) {
                let a = kin.locations(&k.to_le_bytes(), |_| false);
                for s in 0..7 {
                    if a[s] != b[s] {
                        prop_assert_eq!(s, seg);
                        prop_assert_eq!(b[s], Some(split));
                        prop_assert_eq!(a[s], Some(n));
                    }
                }
            }
        }
    }

    proptest! {
        /// Whatever servers were added since, the object's old location is
        /// among the candidates, and the current one comes first.
        #[test]
        fn lazy_relocation_finds_old_locations(key: u64, n in 7usize..60, added in 0usize..40) {
            let mut kin = Kinesis::round_robin(7, 3, n);
            let key = key.to_le_bytes();
            let before: Vec<Option<ServerId>> = kin.locations(&key, |_| false);
            let sizes: Vec<usize> = kin.segments().iter().map(Vec::len).collect();
            for i in 0..added {
                kin.add_server(n + i);
            }
            for s in 0..7 {
                let c = kin.candidates(&key, s, sizes[s]);
                prop_assert_eq!(Some(c[0]), kin.location(&key, s, |_| false));
                prop_assert!(c.contains(&before[s].unwrap()));
            }
        }
    }

    #[test]
    fn rules_pick_what_they_promise() {
        let kin = Kinesis::round_robin(7, 3, 14);
        let key = b"object";
        let locs: Vec<ServerId> = kin.locations(key, |_| false).into_iter().flatten().collect();
        let mut st = flat(14);
        // Storage: the three emptiest locations.
        for (i, &s) in locs.iter().enumerate() {
            st.used[s] = 100 - i as u64;
        }
        let mut want: Vec<ServerId> = locs[4..].to_vec();
        let mut got = kin.place(key, WriteRule::Storage, &st);
        want.sort();
        got.sort();
        assert_eq!(got, want);
        // S+L: a busy server loses to idle ones even if emptier.
        st.queue[locs[6]] = 5;
        let got = kin.place(key, WriteRule::StorageLoad, &st);
        assert!(!got.contains(&locs[6]));
        assert!(got.contains(&locs[5]) && got.contains(&locs[4]) && got.contains(&locs[3]));
        // Reads go to the least loaded replica.
        assert_eq!(kin.read_from(&[locs[6], locs[5]], &st), Some(locs[5]));
        // Recovery lands on an unused hash location, never on a replica holder.
        st.down[locs[4]] = true;
        let (src, dst) = kin.recover(key, &[locs[5], locs[3]], RecoveryRule::Storage, &st, |_| 0).unwrap();
        assert_eq!(src, locs[5].min(locs[3]));
        assert!(locs.contains(&dst) && ![locs[3], locs[4], locs[5]].contains(&dst));
    }
}

//! FDS tract locator tables (Nightingale et al., OSDI 2012, §2.2, §3.3, §3.4).
//!
//! Tract `i` of blob `g` lives on the disks of row `(Hash(g) + i) mod len`.
//! Tables: `m` concatenated random permutations (one replica); the all-pairs
//! table with `r - 2` random extra disks per row (r >= 3), never two disks of
//! one failure domain in a row; and a Copysets variant (Cidon et al. 2013) with
//! a bounded scatter width, trading recovery parallelism for a much lower
//! chance of data loss when several disks fail at once. Every row carries a
//! version, bumped whenever its disks change.

use crate::ServerId;
use crate::rng::SplitMix64;
use xxhash_rust::xxh3::xxh3_64;

/// Why a table cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TltError {
    /// Fewer failure domains than replicas per row.
    NotEnoughDomains {
        /// Distinct domains.
        domains: usize,
        /// Disks per row.
        replicas: usize,
    },
    /// No disk can replace a failed one in some row.
    NoReplacement {
        /// The row.
        row: usize,
    },
}

/// A row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Bumped on every change of the row.
    pub version: u64,
    /// The disks holding the row's tracts, primary first.
    pub disks: Vec<ServerId>,
    /// A new disk copying in to replace `disks[slot]` (cluster growth, §3.4).
    pub pending: Option<(usize, ServerId)>,
}

/// A tract locator table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tlt {
    rows: Vec<Row>,
}

/// The hash of a blob's GUID that [`locator`] starts from (FDS uses SHA-1;
/// any hash that spreads GUIDs evenly does).
pub fn blob_hash(guid: &[u8]) -> u64 {
    xxh3_64(guid)
}

/// The tract locator of tract `i` of a blob whose GUID hashes to `blob_hash`.
pub fn locator(blob_hash: u64, tract: u64, len: usize) -> usize {
    (blob_hash.wrapping_add(tract) % len as u64) as usize
}

/// The discarded locator `Hash(g + i)`: one independent row per tract.
pub fn rejected_locator(guid: u64, tract: u64, len: usize) -> usize {
    (xxh3_64(&guid.wrapping_add(tract).to_le_bytes()) % len as u64) as usize
}

fn row(disks: Vec<ServerId>) -> Row {
    Row { version: 1, disks, pending: None }
}

impl Tlt {
    /// Single replica: `m` random permutations of the `n` disks concatenated.
    pub fn permutations(n: usize, m: usize, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let mut rows = Vec::with_capacity(n * m);
        for _ in 0..m {
            let mut p: Vec<ServerId> = (0..n).collect();
            rng.shuffle(&mut p);
            rows.extend(p.into_iter().map(|d| row(vec![d])));
        }
        Self { rows }
    }

    /// The all-pairs table: one row per pair of disks in different failure
    /// domains, each extended with `replicas - 2` random disks from domains
    /// not yet in the row. `domains[d]` is disk `d`'s failure domain.
    pub fn all_pairs(domains: &[usize], replicas: usize, seed: u64) -> Result<Self, TltError> {
        assert!(replicas >= 2, "all-pairs needs at least two replicas");
        let distinct = domains.iter().collect::<std::collections::BTreeSet<_>>().len();
        if distinct < replicas {
            return Err(TltError::NotEnoughDomains { domains: distinct, replicas });
        }
        let mut rng = SplitMix64::new(seed);
        let n = domains.len();
        let mut rows = Vec::with_capacity(n * (n - 1) / 2);
        for a in 0..n {
            for b in a + 1..n {
                if domains[a] == domains[b] {
                    continue;
                }
                let mut disks = vec![a, b];
                while disks.len() < replicas {
                    let d = rng.below(n);
                    if !disks.iter().any(|&x| domains[x] == domains[d]) {
                        disks.push(d);
                    }
                }
                rows.push(row(disks));
            }
        }
        rng.shuffle(&mut rows);
        Ok(Self { rows })
    }

    /// Copysets: `ceil(scatter / (replicas - 1))` random permutations, each cut
    /// into groups of `replicas` consecutive disks, repaired by swaps so no
    /// group shares a failure domain; each group is a row. A disk then shares rows
    /// with about `scatter` others instead of all of them.
    pub fn copysets(domains: &[usize], replicas: usize, scatter: usize, seed: u64) -> Result<Self, TltError> {
        let distinct = domains.iter().collect::<std::collections::BTreeSet<_>>().len();
        if distinct < replicas {
            return Err(TltError::NotEnoughDomains { domains: distinct, replicas });
        }
        let mut rng = SplitMix64::new(seed);
        let n = domains.len();
        let perms = scatter.div_ceil(replicas - 1).max(1);
        let mut rows = Vec::new();
        for _ in 0..perms {
            let mut p: Vec<ServerId> = (0..n).collect();
            rng.shuffle(&mut p);
            let mut groups: Vec<Vec<ServerId>> = p.chunks(replicas).map(<[ServerId]>::to_vec).collect();
            // Leftover disks (n not a multiple of r) get random partners, so every disk is in a row.
            if let Some(last) = groups.last_mut()
                && last.len() < replicas
            {
                while last.len() < replicas {
                    let d = rng.below(n);
                    if !last.iter().any(|&x| domains[x] == domains[d]) {
                        last.push(d);
                    }
                }
            }
            repair_domains(&mut groups, domains);
            rows.extend(groups.into_iter().filter(|g| distinct_domains(g, domains)).map(row));
        }
        rng.shuffle(&mut rows);
        Ok(Self { rows })
    }

    /// The rows.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True if the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The row of tract `tract` of a blob whose GUID hashes to `blob_hash`.
    pub fn locate(&self, blob_hash: u64, tract: u64) -> &Row {
        &self.rows[locator(blob_hash, tract, self.rows.len())]
    }

    /// Replaces `failed` in every row where it appears with a random disk that
    /// is neither failed nor in a failure domain already in the row, bumping
    /// those rows' versions. Returns the rows changed. Disks with pending
    /// assignments are not eligible (they are busy copying, §3.4).
    pub fn replace_disk(&mut self, failed: ServerId, domains: &[usize], is_down: impl Fn(ServerId) -> bool, seed: u64) -> Result<Vec<usize>, TltError> {
        let mut rng = SplitMix64::new(seed);
        let busy: std::collections::BTreeSet<ServerId> = self.rows.iter().filter_map(|r| r.pending.map(|p| p.1)).collect();
        let mut changed = Vec::new();
        for (i, r) in self.rows.iter_mut().enumerate() {
            let Some(slot) = r.disks.iter().position(|&d| d == failed) else { continue };
            let candidates: Vec<ServerId> = (0..domains.len())
                .filter(|&d| d != failed && !is_down(d) && !busy.contains(&d) && !r.disks.iter().any(|&x| x != failed && domains[x] == domains[d]))
                .collect();
            if candidates.is_empty() {
                return Err(TltError::NoReplacement { row: i });
            }
            r.disks[slot] = candidates[rng.below(candidates.len())];
            r.version += 1;
            changed.push(i);
        }
        Ok(changed)
    }

    /// Cluster growth, phase one: `new` takes over `disks[slot]` of `row` as a
    /// pending assignment (clients write to both while it copies).
    pub fn begin_assign(&mut self, row: usize, slot: usize, new: ServerId) {
        let r = &mut self.rows[row];
        r.pending = Some((slot, new));
        r.version += 1;
    }

    /// Phase two: the copy is done; the assignment becomes the row's disk.
    pub fn commit_assign(&mut self, row: usize) -> Option<ServerId> {
        let r = &mut self.rows[row];
        let (slot, new) = r.pending.take()?;
        let old = std::mem::replace(&mut r.disks[slot], new);
        r.version += 1;
        Some(old)
    }

    /// The new disk failed while pending: drop the assignment.
    pub fn abort_assign(&mut self, row: usize) {
        let r = &mut self.rows[row];
        if r.pending.take().is_some() {
            r.version += 1;
        }
    }

    /// For each disk, how many distinct other disks share a row with it: the
    /// parallelism of recovering that disk.
    pub fn scatter_widths(&self, n: usize) -> Vec<usize> {
        let mut peers: Vec<std::collections::BTreeSet<ServerId>> = vec![Default::default(); n];
        for r in &self.rows {
            for &a in &r.disks {
                for &b in &r.disks {
                    if a != b {
                        peers[a].insert(b);
                    }
                }
            }
        }
        peers.into_iter().map(|p| p.len()).collect()
    }

    /// Rows of each disk, for loss checks.
    pub fn rows_by_disk(&self, n: usize) -> Vec<Vec<usize>> {
        let mut by = vec![Vec::new(); n];
        for (i, r) in self.rows.iter().enumerate() {
            for &d in &r.disks {
                by[d].push(i);
            }
        }
        by
    }
}

/// Swaps disks between groups until no group holds two disks of one failure
/// domain (bounded: one pass over the groups, trying every swap partner).
fn repair_domains(groups: &mut [Vec<ServerId>], domains: &[usize]) {
    for g in 0..groups.len() {
        while let Some(i) = (0..groups[g].len()).find(|&i| (0..i).any(|j| domains[groups[g][i]] == domains[groups[g][j]])) {
            let x = groups[g][i];
            let found = (0..groups.len()).filter(|&h| h != g).find_map(|h| {
                (0..groups[h].len())
                    .find(|&k| {
                        let y = groups[h][k];
                        let g_ok = groups[g].iter().enumerate().all(|(a, &z)| a == i || domains[z] != domains[y]);
                        let h_ok = groups[h].iter().enumerate().all(|(b, &z)| b == k || domains[z] != domains[x]);
                        g_ok && h_ok
                    })
                    .map(|k| (h, k))
            });
            match found {
                Some((h, k)) => {
                    let y = groups[h][k];
                    groups[g][i] = y;
                    groups[h][k] = x;
                }
                None => break,
            }
        }
    }
}

fn distinct_domains(g: &[ServerId], domains: &[usize]) -> bool {
    g.iter().enumerate().all(|(i, &a)| g[..i].iter().all(|&b| domains[a] != domains[b]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn racks(n: usize, per_rack: usize) -> Vec<usize> {
        (0..n).map(|d| d / per_rack).collect()
    }

    proptest! {
        /// No row holds two disks of one failure domain, in any table, before
        /// and after replacing a failed disk.
        #[test]
        fn rows_never_share_a_domain(n in 12usize..40, per_rack in 1usize..4, seed: u64, failed in 0usize..40) {
            let d = racks(n, per_rack);
            let ok = |t: &Tlt| t.rows().iter().all(|r| distinct_domains(&r.disks, &d));
            let mut ap = Tlt::all_pairs(&d, 3, seed).unwrap();
            prop_assert!(ok(&ap));
            let cs = Tlt::copysets(&d, 3, 4, seed).unwrap();
            prop_assert!(ok(&cs));
            let failed = failed % n;
            let changed = ap.replace_disk(failed, &d, |x| x == failed, seed).unwrap();
            prop_assert!(ok(&ap));
            prop_assert!(ap.rows().iter().all(|r| !r.disks.contains(&failed)));
            prop_assert!(changed.iter().all(|&i| ap.rows()[i].version == 2));
        }

        /// Every disk is in some row of a Copysets table, whatever n mod r.
        #[test]
        fn copysets_use_every_disk(n in 12usize..80, per_rack in 1usize..4, scatter in 2usize..8, seed: u64) {
            let d = racks(n, per_rack);
            let t = Tlt::copysets(&d, 3, scatter, seed).unwrap();
            let by = t.rows_by_disk(n);
            prop_assert!(by.iter().all(|rows| !rows.is_empty()), "a disk is in no row");
        }

        /// Same inputs, same table.
        #[test]
        fn tables_are_deterministic(n in 4usize..30, seed: u64) {
            let d = racks(n, 1);
            prop_assert_eq!(Tlt::all_pairs(&d, 3, seed).unwrap(), Tlt::all_pairs(&d, 3, seed).unwrap());
            prop_assert_eq!(Tlt::permutations(n, 5, seed), Tlt::permutations(n, 5, seed));
        }
    }

    #[test]
    fn all_pairs_covers_every_cross_domain_pair_and_copysets_bound_scatter() {
        let d = racks(30, 3);
        let ap = Tlt::all_pairs(&d, 3, 1).unwrap();
        // Each disk shares rows with every disk outside its rack: 27.
        assert!(ap.scatter_widths(30).iter().all(|&w| w >= 27));
        let cs = Tlt::copysets(&d, 3, 4, 1).unwrap();
        assert!(cs.scatter_widths(30).iter().all(|&w| w <= 4), "{:?}", cs.scatter_widths(30));
    }

    #[test]
    fn two_phase_growth() {
        let mut t = Tlt::permutations(4, 1, 9);
        t.begin_assign(0, 0, 7);
        assert_eq!(t.rows()[0].version, 2);
        let old = t.rows()[0].disks[0];
        assert_eq!(t.commit_assign(0), Some(old));
        assert_eq!(t.rows()[0].disks[0], 7);
        assert_eq!(t.rows()[0].version, 3);
        t.begin_assign(1, 0, 8);
        t.abort_assign(1);
        assert_eq!((t.rows()[1].pending, t.rows()[1].version), (None, 3));
    }
}

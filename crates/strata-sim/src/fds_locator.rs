//! FDS §2.2 and §3.3: tracts per server under the tract locator
//! `(Hash(g) + i) mod len` against the rejected `Hash(g + i)`, and the
//! recovery parallelism of the all-pairs table against Copysets tables of
//! bounded scatter width, beside their chance of losing data when several
//! disks fail at once.

use strata_placement::fds::{Tlt, rejected_locator};
use strata_placement::rng::SplitMix64;

/// Parameters.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Params {
    /// Tractservers (one disk each).
    pub servers: usize,
    /// Tracts written (1 TB of 8 MB tracts = 125,000).
    pub tracts: u64,
    /// Permutations in the single-replica table (FDS uses 20).
    pub permutations: usize,
    /// Disks in the replicated-layout part (all-pairs is O(n^2) rows).
    pub layout_disks: usize,
    /// Disks per failure domain (rack).
    pub disks_per_rack: usize,
    /// Simultaneous failures tried.
    pub failures: Vec<usize>,
    /// Monte Carlo trials per point.
    pub trials: usize,
    /// Seed.
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self { servers: 1000, tracts: 125_000, permutations: 20, layout_disks: 300, disks_per_rack: 10, failures: vec![3, 5, 10, 20], trials: 4000, seed: 7 }
    }
}

/// Tracts per server: (min, max, mean, standard deviation).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Spread {
    /// Locator name.
    pub locator: String,
    /// Fewest tracts on a server.
    pub min: u64,
    /// Most tracts on a server.
    pub max: u64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub stddev: f64,
}

fn spread(name: &str, counts: &[u64]) -> Spread {
    let n = counts.len() as f64;
    let mean = counts.iter().sum::<u64>() as f64 / n;
    let var = counts.iter().map(|&c| (c as f64 - mean).powi(2)).sum::<f64>() / n;
    Spread { locator: name.into(), min: *counts.iter().min().unwrap_or(&0), max: *counts.iter().max().unwrap_or(&0), mean, stddev: var.sqrt() }
}

/// Tract distribution of one large blob under both locators.
pub fn locators(p: &Params) -> Vec<Spread> {
    let tlt = Tlt::permutations(p.servers, p.permutations, p.seed);
    let guid = 0x5eed_f00d_u64;
    let blob_hash = guid_hash(guid);
    let mut uniform = vec![0u64; p.servers];
    let mut rejected = vec![0u64; p.servers];
    for i in 0..p.tracts {
        uniform[tlt.locate(blob_hash, i).disks[0]] += 1;
        rejected[tlt.rows()[rejected_locator(guid, i, tlt.len())].disks[0]] += 1;
    }
    vec![spread("(Hash(g)+i) mod len", &uniform), spread("Hash(g+i) mod len", &rejected)]
}

fn guid_hash(g: u64) -> u64 {
    strata_placement::hash::segment_hash(&g.to_le_bytes(), 0)
}

/// One layout's recovery parallelism and loss probabilities.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Layout {
    /// Name.
    pub layout: String,
    /// Rows in the table.
    pub rows: usize,
    /// Mean disks that share rows with a disk (recovery parallelism).
    pub scatter_width: f64,
    /// (simultaneous failures, probability that some row lost all its disks).
    pub loss: Vec<(usize, f64)>,
}

fn layout(name: &str, t: &Tlt, p: &Params) -> Layout {
    let n = p.layout_disks;
    let widths = t.scatter_widths(n);
    let by_disk = t.rows_by_disk(n);
    let mut rng = SplitMix64::new(p.seed ^ 0xfa11);
    let mut loss = Vec::new();
    for &f in &p.failures {
        let mut lost = 0;
        let mut down = vec![false; n];
        for _ in 0..p.trials {
            let mut ids: Vec<usize> = (0..n).collect();
            rng.shuffle(&mut ids);
            let failed = &ids[..f.min(n)];
            for &d in failed {
                down[d] = true;
            }
            if failed.iter().any(|&d| by_disk[d].iter().any(|&r| t.rows()[r].disks.iter().all(|&x| down[x]))) {
                lost += 1;
            }
            for &d in failed {
                down[d] = false;
            }
        }
        loss.push((f, lost as f64 / p.trials as f64));
    }
    Layout { layout: name.into(), rows: t.len(), scatter_width: widths.iter().sum::<usize>() as f64 / n as f64, loss }
}

/// All-pairs and Copysets tables (3 replicas) on `layout_disks` disks in racks.
pub fn layouts(p: &Params) -> Vec<Layout> {
    let domains: Vec<usize> = (0..p.layout_disks).map(|d| d / p.disks_per_rack).collect();
    let mut out = Vec::new();
    if let Ok(t) = Tlt::all_pairs(&domains, 3, p.seed) {
        out.push(layout("all-pairs", &t, p));
    }
    for s in [2usize, 4, 10, 30] {
        if let Ok(t) = Tlt::copysets(&domains, 3, s, p.seed) {
            out.push(layout(&format!("copysets S={s}"), &t, p));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_locator_is_flat_and_rejected_one_is_binomial() {
        let p = Params::default();
        let s = locators(&p);
        let (u, r) = (&s[0], &s[1]);
        assert!((u.mean - 125.0).abs() < 1e-9);
        assert!(u.max - u.min <= 2, "uniform locator spread {}..{}", u.min, u.max);
        // Binomial(125000, 1/1000): sd about 11.2, extremes about 90..160.
        assert!((9.5..13.0).contains(&r.stddev), "sd {}", r.stddev);
        assert!(r.min < 100 && r.max > 150, "{}..{}", r.min, r.max);
    }

    #[test]
    fn copysets_trade_parallelism_for_fewer_losses() {
        let p = Params { layout_disks: 60, disks_per_rack: 3, failures: vec![5], trials: 2000, ..Params::default() };
        let l = layouts(&p);
        let (ap, cs) = (&l[0], &l[1]);
        assert!(ap.scatter_width > 50.0 && cs.scatter_width <= 2.0);
        assert!(ap.loss[0].1 > cs.loss[0].1 * 2.0, "all-pairs {} vs copysets {}", ap.loss[0].1, cs.loss[0].1);
    }
}

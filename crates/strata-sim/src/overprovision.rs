//! Kinesis Fig. 3: the overprovisioning percentage β of Kinesis(k, 3),
//! 5 <= k <= 10, against Chain(3) (§6.2.1).
//!
//! The block trace: objects of one size (10 MB) inserted one by one into a
//! cluster that starts with 100 servers of 64 GB and grows by 10 servers
//! whenever the total storage used exceeds ρ of the total capacity. New
//! servers take over half of a split server's key space and the objects
//! there move to them (the invariant that replicas sit on hash locations).
//! ρ_max is the largest ρ for which no server ever exceeds its capacity;
//! β = 1/ρ_max - 1. Storage is counted in whole objects.

use strata_placement::chain::Chain;
use strata_placement::hash::segment_hash;
use strata_placement::kinesis::{Kinesis, ServerTable, WriteRule};
use strata_placement::linear::{bucket, split_of};

/// Parameters of the experiment.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Params {
    /// Servers at the start.
    pub initial_servers: usize,
    /// Servers added per expansion.
    pub servers_per_expansion: usize,
    /// Capacity of a server, in objects (64 GB / 10 MB = 6553).
    pub capacity_objects: u64,
    /// Objects inserted.
    pub objects: usize,
    /// Replicas per object.
    pub r: usize,
    /// Precision of the bisection on ρ.
    pub rho_precision: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self { initial_servers: 100, servers_per_expansion: 10, capacity_objects: 6553, objects: 2_000_000, r: 3, rho_precision: 0.002 }
    }
}

/// A placement scheme under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Scheme {
    /// Kinesis(k, r) with the storage rule.
    Kinesis(usize),
    /// Chain(r).
    Chain,
}

impl Scheme {
    /// The label used in tables and plots.
    pub fn label(&self) -> String {
        match self {
            Self::Kinesis(k) => format!("K({k})"),
            Self::Chain => "Chain".into(),
        }
    }
}

fn key(o: usize) -> [u8; 8] {
    (o as u64).to_le_bytes()
}

/// Runs the workload with expansion threshold `rho`; true if no server ever
/// exceeded its capacity. Also returns the final number of servers.
pub fn run(p: &Params, scheme: Scheme, rho: f64) -> (bool, usize) {
    let mut n = p.initial_servers;
    let mut c = ServerTable::new(n, p.capacity_objects);
    let mut total: u64 = 0;
    // Per server: objects stored there (Kinesis) or whose primary it is (Chain).
    let mut lists: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut kin = match scheme {
        Scheme::Kinesis(k) => Some(Kinesis::round_robin(k, p.r, n)),
        Scheme::Chain => None,
    };
    for o in 0..p.objects {
        let k = key(o);
        let reps = match &kin {
            Some(kin) => kin.place(&k, WriteRule::Storage, &c),
            None => Chain { r: p.r, n }.replicas(&k),
        };
        for &s in &reps {
            c.used[s] += 1;
            if c.used[s] > c.capacity {
                return (false, n);
            }
            if kin.is_some() {
                lists[s].push(o as u32);
            }
        }
        if kin.is_none() {
            lists[reps[0]].push(o as u32);
        }
        total += reps.len() as u64;
        while total as f64 > rho * (n as u64 * p.capacity_objects) as f64 {
            for _ in 0..p.servers_per_expansion {
                let new = c.add_server();
                n += 1;
                lists.push(Vec::new());
                match kin.as_mut() {
                    Some(kin) => {
                        let (seg, split) = kin.add_server(new);
                        // Objects of the split server whose location in this segment is now the new server move.
                        let objs = std::mem::take(&mut lists[split]);
                        for obj in objs {
                            if kin.location(&key(obj as usize), seg, |_| false) == Some(new) {
                                c.used[split] -= 1;
                                c.used[new] += 1;
                                lists[new].push(obj);
                            } else {
                                lists[split].push(obj);
                            }
                        }
                    }
                    None => {
                        // Chain: objects whose primary bucket is the split server may
                        // move wholesale; chains that wrapped around the end change.
                        let old_n = n - 1;
                        let split = split_of(old_n);
                        let mut affected: Vec<usize> = vec![split];
                        affected.extend((old_n.saturating_sub(p.r - 1))..old_n);
                        affected.sort();
                        affected.dedup();
                        for prim in affected {
                            let objs = std::mem::take(&mut lists[prim]);
                            for obj in objs {
                                let kk = key(obj as usize);
                                let old = Chain { r: p.r, n: old_n }.replicas(&kk);
                                let new_reps = Chain { r: p.r, n }.replicas(&kk);
                                for s in old {
                                    c.used[s] -= 1;
                                }
                                for &s in &new_reps {
                                    c.used[s] += 1;
                                }
                                let np = bucket(segment_hash(&kk, 0), n);
                                lists[np].push(obj);
                            }
                        }
                    }
                }
            }
            if c.used.iter().any(|&u| u > c.capacity) {
                return (false, n);
            }
        }
    }
    (true, n)
}

/// One scheme's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// Scheme label.
    pub scheme: String,
    /// Largest safe expansion threshold.
    pub rho_max: f64,
    /// Overprovisioning percentage, 100 (1/ρ_max - 1).
    pub beta_percent: f64,
    /// Servers at the end of the run at ρ_max.
    pub final_servers: usize,
}

/// Bisects ρ for one scheme.
pub fn rho_max(p: &Params, scheme: Scheme) -> Row {
    let (mut lo, mut hi) = (0.3f64, 1.0f64);
    let mut servers = 0;
    while hi - lo > p.rho_precision {
        let mid = (lo + hi) / 2.0;
        let (ok, n) = run(p, scheme, mid);
        if ok {
            lo = mid;
            servers = n;
        } else {
            hi = mid;
        }
    }
    Row { scheme: scheme.label(), rho_max: lo, beta_percent: 100.0 * (1.0 / lo - 1.0), final_servers: servers }
}

/// The whole experiment: Kinesis(5..=10, 3) and Chain(3).
pub fn experiment(p: &Params) -> Vec<Row> {
    let mut schemes: Vec<Scheme> = (5..=10).map(Scheme::Kinesis).collect();
    schemes.push(Scheme::Chain);
    schemes.into_iter().map(|s| rho_max(p, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinesis_7_needs_20_points_less_overprovisioning_than_chain() {
        let p = Params { objects: 150_000, initial_servers: 30, servers_per_expansion: 6, capacity_objects: 6553, rho_precision: 0.01, ..Params::default() };
        let k7 = rho_max(&p, Scheme::Kinesis(7));
        let chain = rho_max(&p, Scheme::Chain);
        assert!(k7.beta_percent + 20.0 <= chain.beta_percent, "K(7) β {} vs Chain β {}", k7.beta_percent, chain.beta_percent);
    }
}

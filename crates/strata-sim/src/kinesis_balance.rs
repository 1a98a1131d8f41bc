//! Kinesis Fig. 4 (storage imbalance on 32 servers for three object-size
//! distributions) and Fig. 9 / Table IV (recovery of a failed server: how
//! many servers take part, and how much each carries), Kinesis(7, 3) against
//! Chain(3), on the placement library.
//!
//! The paper's traces are not public; object sizes are drawn from
//! distributions shaped after Table II: block (all 10 MB), MSN (lognormal with
//! median 5.53 MB and mean 7.97 MB, capped at 160.8 MB) and Plan 9 (lognormal
//! with median 3,215 B and mean 93.4 KB, capped at 2 GB).

use strata_placement::ServerId;
use strata_placement::chain::Chain;
use strata_placement::kinesis::{Kinesis, RecoveryRule, ServerTable, WriteRule};
use strata_placement::rng::SplitMix64;

/// An object-size distribution.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Trace {
    /// Name.
    pub name: &'static str,
    /// Objects inserted.
    pub objects: usize,
    /// Median size, bytes.
    pub median: f64,
    /// Mean size, bytes.
    pub mean: f64,
    /// Largest size, bytes.
    pub max: f64,
}

/// The three traces of Table II (object counts scaled for block and Plan 9).
pub fn traces() -> [Trace; 3] {
    [
        Trace { name: "block", objects: 200_000, median: 10e6, mean: 10e6, max: 10e6 },
        Trace { name: "msn", objects: 30_656, median: 5.53e6, mean: 7.97e6, max: 160.8e6 },
        Trace { name: "plan9", objects: 400_000, median: 3215.0, mean: 93.4e3, max: 2e9 },
    ]
}

impl Trace {
    /// A size drawn from the trace's distribution.
    pub fn sample(&self, rng: &mut SplitMix64) -> u64 {
        if self.median >= self.mean {
            return self.median as u64;
        }
        // Lognormal: median = e^mu, mean = e^(mu + sigma^2 / 2).
        let (mu, sigma) = (self.median.ln(), (2.0 * (self.mean / self.median).ln()).sqrt());
        let u1 = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let u2 = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        (mu + sigma * z).exp().min(self.max).max(1.0) as u64
    }
}

/// Storage imbalance over time of one trace and scheme.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Imbalance {
    /// Trace.
    pub trace: String,
    /// Scheme.
    pub scheme: String,
    /// (objects added, max minus mean bytes, that as a percent of the mean).
    pub points: Vec<(usize, f64, f64)>,
}

/// Fig. 4: inserts each trace into 32 servers under both schemes.
pub fn imbalance(servers: usize, seed: u64) -> Vec<Imbalance> {
    let mut out = Vec::new();
    for t in traces() {
        for kinesis in [true, false] {
            let kin = Kinesis::round_robin(7, 3, servers);
            let chain = Chain { r: 3, n: servers };
            let mut st = ServerTable::new(servers, u64::MAX / 4);
            let mut rng = SplitMix64::new(seed);
            let mut points = Vec::new();
            let every = (t.objects / 50).max(1);
            for o in 0..t.objects {
                let size = t.sample(&mut rng);
                let key = (o as u64).to_le_bytes();
                let reps = if kinesis { kin.place(&key, WriteRule::Storage, &st) } else { chain.replicas(&key) };
                for s in reps {
                    st.used[s] += size;
                }
                if (o + 1) % every == 0 {
                    let mean = st.used.iter().sum::<u64>() as f64 / servers as f64;
                    let max = *st.used.iter().max().unwrap_or(&0) as f64;
                    points.push((o + 1, max - mean, 100.0 * (max - mean) / mean.max(1.0)));
                }
            }
            out.push(Imbalance { trace: t.name.into(), scheme: if kinesis { "Kinesis(7,3)" } else { "Chain(3)" }.into(), points });
        }
    }
    out
}

/// Recovery of one failed server.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Recovery {
    /// Scheme and strategy.
    pub scheme: String,
    /// Servers in the cluster.
    pub servers: usize,
    /// Distinct servers sending data (degree of parallelism of reads).
    pub sources: usize,
    /// Distinct servers receiving data.
    pub destinations: usize,
    /// Servers sending or receiving anything.
    pub servers_involved: usize,
    /// Most bytes any one server sends plus receives: recovery time is about
    /// this over one server's bandwidth.
    pub max_server_bytes: u64,
    /// Bytes recovered.
    pub bytes: u64,
    /// Degree of parallelism (§6.2.4): bytes transferred by all servers over
    /// those of the most burdened one.
    pub parallelism: f64,
}

fn summarize(scheme: &str, n: usize, load: &[u64], src: usize, dst: usize, bytes: u64) -> Recovery {
    let max = *load.iter().max().unwrap_or(&0);
    let parallelism = load.iter().sum::<u64>() as f64 / max.max(1) as f64;
    Recovery {
        scheme: scheme.into(),
        servers: n,
        sources: src,
        destinations: dst,
        servers_involved: load.iter().filter(|&&b| b > 0).count(),
        max_server_bytes: max,
        bytes,
        parallelism,
    }
}

/// Fig. 9 / Table IV: fail server 0 after inserting `objects_per_server`
/// block-trace objects per server and plan its recovery under Kinesis SR,
/// Kinesis LR and Chain.
pub fn recovery(server_counts: &[usize], objects_per_server: usize) -> Vec<Recovery> {
    let size = 10_000_000u64;
    let mut out = Vec::new();
    for &n in server_counts {
        let kin = Kinesis::round_robin(7, 3, n);
        let chain = Chain { r: 3, n };
        let mut st = ServerTable::new(n, u64::MAX / 4);
        let objects = objects_per_server * n;
        let mut placed: Vec<Vec<ServerId>> = Vec::with_capacity(objects);
        for o in 0..objects {
            let reps = kin.place(&(o as u64).to_le_bytes(), WriteRule::Storage, &st);
            for &s in &reps {
                st.used[s] += size;
            }
            placed.push(reps);
        }
        st.down[0] = true;
        for rule in [RecoveryRule::Storage, RecoveryRule::Load] {
            let mut load = vec![0u64; n];
            let (mut src, mut dst) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
            let mut bytes = 0;
            for (o, reps) in placed.iter().enumerate() {
                if !reps.contains(&0) {
                    continue;
                }
                let surviving: Vec<ServerId> = reps.iter().copied().filter(|&s| s != 0).collect();
                if let Some((s, d)) = kin.recover(&(o as u64).to_le_bytes(), &surviving, rule, &st, |x| load[x]) {
                    load[s] += size;
                    load[d] += size;
                    src.insert(s);
                    dst.insert(d);
                    bytes += size;
                }
            }
            let name = if rule == RecoveryRule::Storage { "Kinesis(7,3) SR" } else { "Kinesis(7,3) LR" };
            out.push(summarize(name, n, &load, src.len(), dst.len(), bytes));
        }
        // Chain: objects whose chain holds server 0; the source is the first live
        // server of the chain, the destination the next server past its end.
        let mut load = vec![0u64; n];
        let (mut src, mut dst) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
        let mut bytes = 0;
        for o in 0..objects {
            let reps = chain.replicas(&(o as u64).to_le_bytes());
            if !reps.contains(&0) {
                continue;
            }
            let s = *reps.iter().find(|&&s| s != 0).expect("3 replicas, one down");
            let d = (reps[reps.len() - 1] + 1) % n;
            load[s] += size;
            load[d] += size;
            src.insert(s);
            dst.insert(d);
            bytes += size;
        }
        out.push(summarize("Chain(3)", n, &load, src.len(), dst.len(), bytes));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinesis_is_better_balanced_than_chain_on_every_trace() {
        let runs = imbalance(32, 3);
        for pair in runs.chunks(2) {
            let (k, c) = (&pair[0], &pair[1]);
            let last = |r: &Imbalance| r.points.last().map_or(0.0, |p| p.2);
            assert!(last(k) < last(c), "{}: Kinesis {:.1}% vs Chain {:.1}%", k.trace, last(k), last(c));
        }
    }

    #[test]
    fn kinesis_recovery_is_parallel_and_chain_is_not() {
        let rows = recovery(&[64], 300);
        let (sr, lr, chain) = (&rows[0], &rows[1], &rows[2]);
        // Chain's bound is 2r - 1 = 5 servers (§6.2.4); Kinesis can use n(k-1)/k.
        assert!(chain.servers_involved <= 5 && chain.parallelism <= 5.0, "chain {chain:?}");
        assert!(sr.servers_involved > 20 && lr.servers_involved > 20, "kinesis {sr:?} {lr:?}");
        assert!(lr.parallelism > 3.0 * chain.parallelism, "LR {} vs chain {}", lr.parallelism, chain.parallelism);
    }
}

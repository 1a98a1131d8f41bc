//! `strata bench-txn`: Týr's MonALISA workload (Týr §II, §VI-A) on a
//! cluster of `strata` processes on this machine. Each measurement appends
//! (time, value) to its generator's blob and updates three aggregates
//! (the generator's, its cluster's, and the global one) by adding 1 to a
//! count and the value to a sum, at the offset of the current minute. Three
//! ways, each at 1 to 64 concurrent clients:
//!
//! - `tyr-atomic`: one transaction, the aggregates updated with atomic
//!   adds applied on the server;
//! - `tyr-ruw`: one transaction, each aggregate read, updated and written
//!   back (read-update-write);
//! - `locks`: Strata's blobs with no transaction around them, each
//!   aggregate's update under a lock held in etcd (a 3-member cluster from
//!   Debian's `etcd-server`; Týr used ZooKeeper): the locks taken in one
//!   order, the aggregate read, written back, the lock released.
//!
//! Then Týr's reader/writer isolation experiment (§VI-C): 16 clients, a
//! growing share of them writers, the others reading aggregates; the read
//! rate per reader, with and without transactions' multiversioning
//! (readers of the lock-based store take the aggregate's lock).

use crate::bench_cluster::{Nodes, command};
use anyhow::{Context, Result, bail};
use base64::Engine;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use strata_txn::{TxnClient, TxnError};

#[derive(clap::Args, Debug)]
pub struct BenchTxnArgs {
    /// Directory for the nodes' and etcd's data (removed afterwards).
    #[arg(long, default_value = "./strata-bench-txn")]
    pub data_dir: PathBuf,
    /// Nodes of the Strata cluster (3 replicas of every row).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Concurrent clients, one point each.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    pub clients: Vec<usize>,
    /// Seconds per point.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Generators (per-generator blobs), spread over `--clusters` clusters.
    #[arg(long, default_value_t = 64)]
    pub generators: u64,
    /// Clusters of generators (one aggregate blob each).
    #[arg(long, default_value_t = 4)]
    pub clusters: u64,
    /// The etcd binary.
    #[arg(long, default_value = "etcd")]
    pub etcd: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
enum Way {
    #[serde(rename = "tyr-atomic")]
    Atomic,
    #[serde(rename = "tyr-ruw")]
    Ruw,
    #[serde(rename = "locks")]
    Locks,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Self::Atomic => "tyr-atomic",
            Self::Ruw => "tyr-ruw",
            Self::Locks => "locks",
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
struct Point {
    way: Way,
    clients: usize,
    per_second: f64,
    aborted_per_second: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Isolation {
    way: Way,
    writers_percent: u32,
    reads_per_reader_per_second: f64,
    writes_per_second: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Verdict {
    floor: String,
    measured: String,
    pass: bool,
}

/// A lock service on etcd's v3 JSON gateway: a lock is a key created only
/// if absent (a transaction comparing its create revision with 0).
#[derive(Clone)]
struct Locks {
    members: Vec<strata_client::Client>,
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

impl Locks {
    async fn lock(&self, worker: usize, key: &str) -> Result<()> {
        let c = &self.members[worker % self.members.len()];
        let k = b64(key);
        let body = json!({
            "compare": [{ "key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
            "success": [{ "request_put": { "key": k, "value": b64("held") } }],
        });
        let mut pause = Duration::from_micros(200);
        loop {
            let r = c.post_json("/v3/kv/txn", &body).await.context("etcd lock")?;
            if r["succeeded"] == true {
                return Ok(());
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    async fn unlock(&self, worker: usize, key: &str) -> Result<()> {
        let c = &self.members[worker % self.members.len()];
        c.post_json("/v3/kv/deleterange", &json!({ "key": b64(key) })).await.context("etcd unlock")?;
        Ok(())
    }
}

/// The blobs and offset one measurement touches.
struct Measurement {
    generator: String,
    aggregates: [String; 3],
    offset: u64,
    value: i64,
    record: [u8; 16],
}

fn measurement(a: &BenchTxnArgs, worker: usize, i: u64, started: Instant) -> Measurement {
    let g = (worker as u64 * 7919 + i) % a.generators;
    let minute = started.elapsed().as_secs() / 60;
    let value = ((i * 31 + worker as u64) % 1000) as i64;
    let mut record = [0u8; 16];
    record[..8].copy_from_slice(&(started.elapsed().as_millis() as u64).to_le_bytes());
    record[8..].copy_from_slice(&value.to_le_bytes());
    Measurement {
        generator: format!("gen-{g}"),
        aggregates: [format!("a_gen-{g}"), format!("a_cluster-{}", g % a.clusters), "a_all".to_string()],
        offset: minute * 16,
        value,
        record,
    }
}

fn counts(b: &[u8]) -> (i64, i64) {
    let n = |r: std::ops::Range<usize>| b.get(r).and_then(|s| s.try_into().ok()).map_or(0, i64::from_le_bytes);
    (n(0..8), n(8..16))
}

/// One measurement stored one way; false when its transaction aborted.
async fn store(way: Way, c: &Arc<TxnClient>, locks: &Locks, worker: usize, m: &Measurement) -> Result<bool> {
    match way {
        Way::Atomic | Way::Ruw => {
            let mut t = c.begin();
            t.append(&m.generator, &m.record).await?;
            for blob in &m.aggregates {
                if way == Way::Atomic {
                    t.add(blob, m.offset, 1)?;
                    t.add(blob, m.offset + 8, m.value)?;
                } else {
                    let (n, sum) = counts(&t.read(blob, m.offset, 16).await?);
                    let mut rec = [0u8; 16];
                    rec[..8].copy_from_slice(&(n + 1).to_le_bytes());
                    rec[8..].copy_from_slice(&(sum + m.value).to_le_bytes());
                    t.write(blob, m.offset, &rec);
                }
            }
            match t.commit().await {
                Ok(_) => Ok(true),
                Err(TxnError::Conflict(_)) => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
        Way::Locks => {
            // The generator's blob: appended with no lock (one operation).
            append_alone(c, &m.generator, &m.record).await?;
            let mut keys: Vec<String> = m.aggregates.iter().map(|b| format!("lock/{b}/{}", m.offset)).collect();
            keys.sort();
            for k in &keys {
                locks.lock(worker, k).await?;
            }
            let mut result = Ok(true);
            for blob in &m.aggregates {
                let (n, sum) = counts(&c.read(blob, m.offset, 16).await?);
                let mut rec = [0u8; 16];
                rec[..8].copy_from_slice(&(n + 1).to_le_bytes());
                rec[8..].copy_from_slice(&(sum + m.value).to_le_bytes());
                let mut t = c.begin();
                t.write(blob, m.offset, &rec);
                if let Err(e) = t.commit().await {
                    result = Err(anyhow::Error::from(e).context("a write under lock"));
                    break;
                }
            }
            for k in keys.iter().rev() {
                locks.unlock(worker, k).await?;
            }
            result
        }
    }
}

/// An append as one operation, retried until it lands (others append to
/// the same generator's blob).
async fn append_alone(c: &Arc<TxnClient>, blob: &str, data: &[u8]) -> Result<()> {
    loop {
        let mut t = c.begin();
        t.append(blob, data).await?;
        match t.commit().await {
            Ok(_) => return Ok(()),
            Err(TxnError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Runs `clients` workers for `--seconds`, each calling `step(worker, i)`
/// for i = 1, 2, ... until the time is up; the seconds it took.
async fn drive<F, Fut>(a: &BenchTxnArgs, clients: usize, step: F) -> Result<f64>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let step = Arc::new(step);
    let tasks: Vec<_> = (0..clients)
        .map(|w| {
            let (stop, step) = (stop.clone(), step.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    step(w, i).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(a.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(started.elapsed().as_secs_f64())
}

fn shared(a: &BenchTxnArgs) -> Arc<BenchTxnArgs> {
    Arc::new(BenchTxnArgs { data_dir: a.data_dir.clone(), clients: Vec::new(), etcd: String::new(), ..*a })
}

async fn point(a: &BenchTxnArgs, way: Way, c: &Arc<TxnClient>, locks: &Locks, clients: usize) -> Result<Point> {
    let started = Instant::now();
    let (done, aborted) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (args, c, locks, d, ab) = (shared(a), c.clone(), locks.clone(), done.clone(), aborted.clone());
    let secs = drive(a, clients, move |w, i| {
        let (args, c, locks, d, ab) = (args.clone(), c.clone(), locks.clone(), d.clone(), ab.clone());
        async move {
            let m = measurement(&args, w, i, started);
            let counter = if store(way, &c, &locks, w, &m).await? { d } else { ab };
            counter.fetch_add(1, Ordering::Relaxed);
            anyhow::Ok(())
        }
    })
    .await?;
    Ok(Point { way, clients, per_second: done.load(Ordering::Relaxed) as f64 / secs, aborted_per_second: aborted.load(Ordering::Relaxed) as f64 / secs })
}

/// Reader/writer isolation: `total` clients, `writers` of them storing
/// measurements, the others reading a random aggregate's current record.
async fn isolation(a: &BenchTxnArgs, way: Way, c: &Arc<TxnClient>, locks: &Locks, total: usize, writers: usize) -> Result<Isolation> {
    let started = Instant::now();
    let (reads, writes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (args, c, locks, r, wr) = (shared(a), c.clone(), locks.clone(), reads.clone(), writes.clone());
    let secs = drive(a, total, move |w, i| {
        let (args, c, locks, r, wr) = (args.clone(), c.clone(), locks.clone(), r.clone(), wr.clone());
        async move {
            let m = measurement(&args, w, i, started);
            if w < writers {
                if store(way, &c, &locks, w, &m).await? {
                    wr.fetch_add(1, Ordering::Relaxed);
                }
                return anyhow::Ok(());
            }
            let blob = &m.aggregates[(i % 3) as usize];
            if way == Way::Locks {
                let k = format!("lock/{blob}/{}", m.offset);
                locks.lock(w, &k).await?;
                c.read(blob, m.offset, 16).await?;
                locks.unlock(w, &k).await?;
            } else {
                c.read(blob, m.offset, 16).await?;
            }
            r.fetch_add(1, Ordering::Relaxed);
            anyhow::Ok(())
        }
    })
    .await?;
    let readers = (total - writers).max(1) as f64;
    Ok(Isolation {
        way,
        writers_percent: (writers * 100 / total) as u32,
        reads_per_reader_per_second: reads.load(Ordering::Relaxed) as f64 / secs / readers,
        writes_per_second: writes.load(Ordering::Relaxed) as f64 / secs,
    })
}

pub async fn run(a: BenchTxnArgs) -> Result<()> {
    if !(3..=9).contains(&a.nodes) {
        bail!("--nodes takes 3 to 9");
    }
    if a.clients.is_empty() || a.clients.iter().any(|c| !(1..=512).contains(c)) {
        bail!("--clients takes client counts from 1 to 512");
    }
    if a.generators == 0 || a.clusters == 0 {
        bail!("--generators and --clusters must be at least 1");
    }
    let _ = std::fs::remove_dir_all(&a.data_dir);
    std::fs::create_dir_all(&a.data_dir).with_context(|| format!("creating {}", a.data_dir.display()))?;
    eprintln!("etcd, 3 members ...");
    let (_etcd, urls) = crate::bench_rw::start_etcd(&a.etcd, &a.data_dir.join("etcd"), 201).await?;
    let locks = Locks { members: urls.iter().map(|u| strata_client::Client::new(u)).collect() };
    eprintln!("strata, {} nodes ...", a.nodes);
    std::fs::create_dir_all(a.data_dir.join("strata"))?;
    // Own addresses: other benchmarks use 127.0.10x, 12x, 14x and 127.0.200.
    let nodes = Nodes::start_on(160, &a.data_dir.join("strata"), a.nodes, a.nodes, 0, 3, &[]).await?;
    nodes.wait_for_tail_caches().await?;
    command(&nodes.client(0), json!({ "TractInit": { "tract_bytes": 64 << 10, "replicas": 3, "scatter": 8, "capacity_bytes": 16u64 << 30, "seed": 1 } }))
        .await?;
    let seeds: Vec<String> = (0..a.nodes).map(|i| format!("https://{}", nodes.addr_of(i))).collect();
    let opts = nodes.client(0).options().clone();
    let client = loop {
        // The nodes open their rows as the map reaches them.
        match TxnClient::connect(&seeds, &opts, 4096).await {
            Ok(c) if c.map().tracts.is_some() => break c,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    // Warm up: every blob written once, every row's replicas opened.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match point(&a, Way::Atomic, &client, &locks, 4).await {
            Ok(p) if p.per_second > 0.0 => break,
            Ok(_) | Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Ok(_) => bail!("no measurement was stored in a minute"),
            Err(e) => return Err(e),
        }
    }
    let mut points = Vec::new();
    let mut timing = Vec::new();
    for way in [Way::Atomic, Way::Ruw, Way::Locks] {
        for &n in &a.clients {
            eprintln!("{}: {n} clients ...", way.name());
            let t = client.timings();
            let before = [&t.reads_ns, &t.forward_ns, &t.decide_ns, &t.backward_ns, &t.hops, &t.commits].map(|x| x.load(Ordering::Relaxed));
            points.push(point(&a, way, &client, &locks, n).await?);
            let after = [&t.reads_ns, &t.forward_ns, &t.decide_ns, &t.backward_ns, &t.hops, &t.commits].map(|x| x.load(Ordering::Relaxed));
            let d: Vec<f64> = before.iter().zip(after).map(|(b, a)| a.saturating_sub(*b) as f64).collect();
            if way != Way::Locks && d[5] > 0.0 {
                timing.push(json!({
                    "way": way.name(), "clients": n,
                    "reads_ms": d[0] / d[5] / 1e6, "forward_ms": d[1] / d[5] / 1e6, "decide_ms": d[2] / d[5] / 1e6, "backward_ms": d[3] / d[5] / 1e6,
                    "hops": d[4] / d[5],
                }));
            }
        }
    }
    let mut iso = Vec::new();
    for way in [Way::Atomic, Way::Locks] {
        for writers in [1usize, 4, 8, 12] {
            eprintln!("isolation, {}: {writers} writers of 16 ...", way.name());
            iso.push(isolation(&a, way, &client, &locks, 16, writers).await?);
        }
    }
    drop(nodes);
    let _ = std::fs::remove_dir_all(&a.data_dir);
    let peak = |w: Way| points.iter().filter(|p| p.way == w).map(|p| p.per_second).fold(0.0, f64::max);
    let (atomic, ruw, locked) = (peak(Way::Atomic), peak(Way::Ruw), peak(Way::Locks));
    let read_rate = |w: Way, pct: u32| iso.iter().find(|i| i.way == w && i.writers_percent == pct).map_or(0.0, |i| i.reads_per_reader_per_second);
    let verdicts = vec![
        Verdict {
            floor: "tyr-atomic peak >= lock-based peak (Týr: 1.78x)".into(),
            measured: format!("{atomic:.0} against {locked:.0} measurements/s: {:.2}x", atomic / locked.max(1e-9)),
            pass: atomic >= locked,
        },
        Verdict {
            floor: "tyr-atomic peak >= tyr-ruw peak (Týr: 1.33x)".into(),
            measured: format!("{atomic:.0} against {ruw:.0} measurements/s: {:.2}x", atomic / ruw.max(1e-9)),
            pass: atomic >= ruw,
        },
        Verdict {
            floor: "reads per reader with 75% writers >= 0.5x with 6% (multiversioning: readers never wait for writers)".into(),
            measured: format!(
                "{:.0} against {:.0} reads/s: {:.2}x",
                read_rate(Way::Atomic, 75),
                read_rate(Way::Atomic, 6),
                read_rate(Way::Atomic, 75) / read_rate(Way::Atomic, 6).max(1e-9)
            ),
            pass: read_rate(Way::Atomic, 75) >= 0.5 * read_rate(Way::Atomic, 6),
        },
    ];
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json!({ "points": points, "timing": timing, "isolation": iso, "verdicts": verdicts }))?);
        return Ok(());
    }
    println!(
        "MonALISA measurements (an append and three aggregates updated) on {} nodes (3 replicas, every node on this machine and disk), {} s per point",
        a.nodes, a.seconds
    );
    println!();
    println!("| way | clients | measurements/s | aborted/s |");
    println!("|---|---|---|---|");
    for p in &points {
        println!("| {} | {} | {:.0} | {:.0} |", p.way.name(), p.clients, p.per_second, p.aborted_per_second);
    }
    println!();
    println!("where a committed transaction's time goes (client side, ms per commit):");
    println!("| way | clients | reads | forward pass | decider | backward pass | hops |");
    println!("|---|---|---|---|---|---|---|");
    for t in &timing {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} |",
            t["way"].as_str().unwrap_or(""),
            t["clients"],
            t["reads_ms"].as_f64().unwrap_or(0.0),
            t["forward_ms"].as_f64().unwrap_or(0.0),
            t["decide_ms"].as_f64().unwrap_or(0.0),
            t["backward_ms"].as_f64().unwrap_or(0.0),
            t["hops"].as_f64().unwrap_or(0.0)
        );
    }
    println!();
    println!("reader/writer isolation, 16 clients:");
    println!("| way | writers | reads/s per reader | measurements/s |");
    println!("|---|---|---|---|");
    for i in &iso {
        println!("| {} | {}% | {:.0} | {:.0} |", i.way.name(), i.writers_percent, i.reads_per_reader_per_second, i.writes_per_second);
    }
    println!();
    println!("| floor | measured | verdict |");
    println!("|---|---|---|");
    for v in &verdicts {
        println!("| {} | {} | {} |", v.floor, v.measured, if v.pass { "PASS" } else { "FAIL" });
    }
    Ok(())
}

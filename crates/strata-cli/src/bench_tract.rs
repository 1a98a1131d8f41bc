//! `strata bench-tract`: FDS's striped blobs on clusters of 3, 6 and 9
//! `strata` processes on this machine. One client writes a blob's whole
//! tracts in order and in a random order, and reads them back both ways,
//! with the cluster's simultaneous limit in flight (FDS §5.2: random and
//! sequential whole-tract access run at the same rate); each rate is a
//! ratio to the loopback and disk limits measured in the same run. Then a
//! node dies (SIGKILL) and every row it was in is re-replicated (FDS §5.3),
//! at each cluster size and for two amounts of data per node: how long it
//! takes, at what rate, and what bounds it (the disk's fsync'd write rate,
//! or the two cores, both measured while it runs).

use crate::bench::{MB, disk_write_limit, loopback_limit};
use crate::bench_cluster::{Nodes, command};
use crate::size::{format_size, parse_size};
use anyhow::{Context, Result, bail};
use bytes::Bytes;
use futures_util::StreamExt;
use rand::RngCore;
use rand::seq::SliceRandom;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata_tract::{Blob, Guid, TractClient};

#[derive(clap::Args, Debug)]
pub struct BenchTractArgs {
    /// Directory for the nodes' data (removed afterwards).
    #[arg(long, default_value = "./strata-bench-tract")]
    pub data_dir: PathBuf,
    /// Cluster sizes.
    #[arg(long, value_delimiter = ',', default_value = "3,6,9")]
    pub nodes: Vec<usize>,
    /// Bytes per tract (the table's, fixed per cluster).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub tract_size: u64,
    /// Bytes of the blob the client writes and reads in each throughput phase.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub blob: u64,
    /// Tract data per node before a node dies (each amount on a cluster of its own).
    #[arg(long, value_delimiter = ',', default_value = "256MiB,768MiB", value_parser = parse_size)]
    pub per_node: Vec<u64>,
    /// Scatter width of the table: a dead disk's rows are copied to and from
    /// about this many others (Copysets), so recovery can only grow with the
    /// node count up to it. The cluster's default is 8; here 16, so that
    /// every node of these clusters takes part.
    #[arg(long, default_value_t = 16)]
    pub scatter: u32,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Fast failure detection: a dead node is down after a second.
const FAST: [&str; 4] = ["--heartbeat-ms", "200", "--down-after-ms", "1000"];

#[derive(Debug, Clone, serde::Serialize)]
struct Throughput {
    nodes: usize,
    replicas: u32,
    op: &'static str,
    order: &'static str,
    mbps: f64,
    /// To the loopback limit (reads), or to the disk's fsync'd write rate
    /// divided by the replica count (writes: every replica is on this disk).
    ratio: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Recovery {
    nodes: usize,
    replicas: u32,
    rows: usize,
    bytes: u64,
    detect_seconds: f64,
    copy_seconds: f64,
    mbps: f64,
    ratio_to_disk: f64,
    cpu_busy: f64,
    targets: usize,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Verdict {
    floor: String,
    measured: String,
    pass: bool,
}

struct Cluster {
    nodes: Nodes,
    n: usize,
    replicas: u32,
    client: Arc<TractClient>,
}

async fn start(a: &BenchTractArgs, n: usize, run: usize) -> Result<Cluster> {
    let root = a.data_dir.join(format!("run{run}"));
    std::fs::create_dir_all(&root)?;
    // Own addresses: other benchmarks use 127.0.10x, 127.0.12x and 127.0.200.
    let nodes = Nodes::start_on(140 + n as u8, &root, n, n, 0, 3, &FAST).await?;
    nodes.wait_for_tail_caches().await?;
    // A row of every node leaves the dead one's place nowhere to go: one fewer.
    let replicas = 3.min(n as u32 - 1);
    let init = json!({ "TractInit": { "tract_bytes": a.tract_size, "replicas": replicas, "scatter": a.scatter, "capacity_bytes": 16u64 << 30, "seed": 1 + run as u64 } });
    command(&nodes.client(0), init).await?;
    let urls: Vec<String> = (0..n).map(|i| format!("https://{}", nodes.addr_of(i))).collect();
    let opts = nodes.client(0).options().clone();
    // Every node opens its rows before the client writes.
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0..n {
        loop {
            let table = nodes.client(i).json(http::Method::GET, "/admin/tracts").await.ok();
            let mine = table.as_ref().map_or(usize::MAX, |t| {
                t["rows"].as_array().map_or(0, |r| {
                    r.iter()
                        .filter(|r| r["disks"].as_array().is_some_and(|d| d.iter().any(|d| d.as_str().is_some_and(|d| d.starts_with(&format!("{}:", i + 1))))))
                        .count()
                })
            });
            let open = nodes.client(i).json(http::Method::GET, "/admin/partitions").await.map_or(0, |v| v.as_array().map_or(0, Vec::len));
            if table.is_some() && open >= mine {
                break;
            }
            if Instant::now() > deadline {
                bail!("node {} did not open its rows", i + 1);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let client = Arc::new(TractClient::connect(&urls, &opts).await?);
    Ok(Cluster { nodes, n, replicas, client })
}

/// A new blob of `tracts` tracts.
async fn blob(c: &TractClient, tracts: u64) -> Result<Blob> {
    let g = Guid::random();
    c.create_blob(&g, None).await?;
    Ok(c.extend_blob(&g, tracts).await?)
}

/// Writes (or reads) `order`'s tracts of `blob` with the simultaneous limit
/// in flight, issued in that order; MB/s.
async fn run_phase(c: &Arc<TractClient>, blob: Blob, order: &[u64], write: Option<Bytes>) -> Result<f64> {
    let t = Instant::now();
    let mut bytes = 0u64;
    let mut ops = futures_util::stream::iter(order.iter().map(|&i| {
        let (c, data) = (c.clone(), write.clone());
        async move {
            match data {
                Some(d) => c.write_tract(&blob, i, d.clone()).await.map(|_| d.len() as u64),
                None => c.read_tract(&blob, i).await.map(|d| d.len() as u64),
            }
        }
    }))
    .buffer_unordered(c.simultaneous_limit());
    while let Some(r) = ops.next().await {
        bytes += r.with_context(|| format!("tract of blob {}", blob.guid))?;
    }
    Ok(bytes as f64 / MB / t.elapsed().as_secs_f64())
}

async fn throughput(a: &BenchTractArgs, c: &Cluster, disk_write: f64, loopback: f64) -> Result<Vec<Throughput>> {
    let tracts = (a.blob / a.tract_size).max(1);
    let mut data = vec![0u8; a.tract_size as usize];
    rand::rng().fill_bytes(&mut data);
    let data = Bytes::from(data);
    let seq: Vec<u64> = (0..tracts).collect();
    let mut shuffled = seq.clone();
    shuffled.shuffle(&mut rand::rng());
    let (first, second) = (blob(&c.client, tracts).await?, blob(&c.client, tracts).await?);
    let mut out: Vec<Throughput> = Vec::new();
    let write_limit = disk_write / f64::from(c.replicas);
    // Two rounds, the orders alternating, each phase's best kept: the first
    // writes of a fresh cluster pay for its warm-up, whichever order goes first.
    for _ in 0..2 {
        for (op, order, b, payload) in [
            ("write", "sequential", first, Some(data.clone())),
            ("write", "random", second, Some(data.clone())),
            ("read", "sequential", first, None),
            ("read", "random", second, None),
        ] {
            let ord = if order == "sequential" { &seq } else { &shuffled };
            let mbps = run_phase(&c.client, b, ord, payload).await?;
            let ratio = if op == "write" { mbps / write_limit } else { mbps / loopback };
            match out.iter_mut().find(|t| t.op == op && t.order == order) {
                Some(t) if t.mbps >= mbps => {}
                Some(t) => *t = Throughput { nodes: c.n, replicas: c.replicas, op, order, mbps, ratio },
                None => out.push(Throughput { nodes: c.n, replicas: c.replicas, op, order, mbps, ratio }),
            }
        }
    }
    Ok(out)
}

/// Busy share of the machine's cores since `before` (`/proc/stat`).
fn cpu_busy(before: &[u64]) -> f64 {
    let now = cpu_ticks();
    let d: Vec<u64> = now.iter().zip(before).map(|(a, b)| a.saturating_sub(*b)).collect();
    let total: u64 = d.iter().sum();
    let idle = d.get(3).copied().unwrap_or(0) + d.get(4).copied().unwrap_or(0);
    if total == 0 { 0.0 } else { 1.0 - idle as f64 / total as f64 }
}

fn cpu_ticks() -> Vec<u64> {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| s.lines().next().map(|l| l.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect()))
        .unwrap_or_default()
}

async fn recovery(a: &BenchTractArgs, c: &mut Cluster, per_node: u64, disk_write: f64) -> Result<Recovery> {
    // Fill: per_node bytes of tracts on every node, counting every replica.
    let tracts = (per_node * c.n as u64 / u64::from(c.replicas) / a.tract_size).max(1);
    let mut data = vec![0u8; a.tract_size as usize];
    rand::rng().fill_bytes(&mut data);
    let b = blob(&c.client, tracts).await?;
    run_phase(&c.client, b, &(0..tracts).collect::<Vec<_>>(), Some(Bytes::from(data))).await?;
    // The last node dies (node 1 holds the metadata group).
    let victim = c.n - 1;
    let victim_id = c.n as u64;
    let map = c.client.map();
    let rows: Vec<u64> = map
        .partitions
        .values()
        .filter(|p| p.kind == strata_cluster::PartitionKind::Tract && p.replicas.iter().any(|r| r.node == victim_id))
        .map(|p| p.id)
        .collect();
    let held: u64 = c
        .nodes
        .client(victim)
        .json(http::Method::GET, "/admin/partitions")
        .await?
        .as_array()
        .map(|a| a.iter().filter(|p| p["partition"].as_u64().is_some_and(|id| rows.contains(&id))).filter_map(|p| p["used_bytes"].as_u64()).sum())
        .unwrap_or(0);
    c.nodes.kill(victim);
    let t0 = Instant::now();
    let ticks = cpu_ticks();
    let mut first_move = None;
    let mut targets = std::collections::BTreeSet::new();
    let deadline = t0 + Duration::from_secs(600);
    loop {
        c.client.refresh().await?;
        let map = c.client.map();
        for id in &rows {
            if let Some(m) = map.partitions[id].moving {
                first_move.get_or_insert_with(Instant::now);
                targets.insert(m.to.node);
            }
        }
        let done = rows.iter().all(|id| map.partitions[id].moving.is_none() && map.partitions[id].replicas.iter().all(|r| r.node != victim_id));
        if done && first_move.is_some() {
            break;
        }
        if Instant::now() > deadline {
            bail!("node {victim_id}'s rows were not re-replicated within 600 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let end = Instant::now();
    let first = first_move.unwrap_or(t0);
    let copy_seconds = (end - first).as_secs_f64().max(1e-3);
    let mbps = held as f64 / MB / copy_seconds;
    Ok(Recovery {
        nodes: c.n,
        replicas: c.replicas,
        rows: rows.len(),
        bytes: held,
        detect_seconds: (first - t0).as_secs_f64(),
        copy_seconds,
        mbps,
        ratio_to_disk: mbps / disk_write,
        cpu_busy: cpu_busy(&ticks),
        targets: targets.len(),
    })
}

pub async fn run(a: BenchTractArgs) -> Result<()> {
    if a.nodes.iter().any(|n| !(3..=40).contains(n)) {
        bail!("--nodes takes cluster sizes from 3 to 40");
    }
    if a.per_node.is_empty() {
        bail!("--per-node needs at least one amount");
    }
    let _ = std::fs::remove_dir_all(&a.data_dir);
    std::fs::create_dir_all(&a.data_dir).with_context(|| format!("creating {}", a.data_dir.display()))?;
    let disk_write = disk_write_limit(&a.data_dir, 2.0, 1)?;
    let _ = std::fs::remove_file(a.data_dir.join("disk-probe-0"));
    let loopback = loopback_limit(1.0, 8).await?;
    let (mut rates, mut recoveries) = (Vec::new(), Vec::new());
    let mut run = 0;
    for &n in &a.nodes {
        eprintln!("{n} nodes: throughput ...");
        run += 1;
        let c = start(&a, n, run).await?;
        rates.extend(throughput(&a, &c, disk_write, loopback).await?);
        drop(c);
        let _ = std::fs::remove_dir_all(a.data_dir.join(format!("run{run}")));
        for &per_node in &a.per_node {
            eprintln!("{n} nodes: recovery of {} per node ...", format_size(per_node));
            run += 1;
            let mut c = start(&a, n, run).await?;
            recoveries.push(recovery(&a, &mut c, per_node, disk_write).await?);
            drop(c);
            let _ = std::fs::remove_dir_all(a.data_dir.join(format!("run{run}")));
        }
    }
    let _ = std::fs::remove_dir_all(&a.data_dir);
    let verdicts = judge(&a, &rates, &recoveries);
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({ "disk_write_mbps": disk_write, "loopback_mbps": loopback, "throughput": rates, "recovery": recoveries, "verdicts": verdicts })
            )?
        );
        return Ok(());
    }
    println!(
        "limits measured in this run: disk fsync'd write {disk_write:.0} MB/s (one stream), loopback TCP {loopback:.0} MB/s; every node on this machine and disk"
    );
    println!("one client, tracts of {}, the cluster's simultaneous limit in flight, a blob of {}", format_size(a.tract_size), format_size(a.blob));
    println!();
    println!("| nodes | replicas | op | order | MB/s | ratio |");
    println!("|---|---|---|---|---|---|");
    for r in &rates {
        let to = if r.op == "write" { "x (disk write / replicas)" } else { "x loopback" };
        println!("| {} | {} | {} | {} | {:.0} | {:.2} {to} |", r.nodes, r.replicas, r.op, r.order, r.mbps, r.ratio);
    }
    println!();
    println!("a node dies (SIGKILL); it is down after 1 s and every row it was in moves at once:");
    println!("| nodes | replicas | rows | data on the dead node | detected after s | re-replicated in s | MB/s | x disk write | CPU busy | nodes written to |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in &recoveries {
        println!(
            "| {} | {} | {} | {:.1} MB | {:.2} | {:.2} | {:.1} | {:.2} | {:.0}% | {} |",
            r.nodes,
            r.replicas,
            r.rows,
            r.bytes as f64 / MB,
            r.detect_seconds,
            r.copy_seconds,
            r.mbps,
            r.ratio_to_disk,
            r.cpu_busy * 100.0,
            r.targets
        );
    }
    println!();
    println!("| floor | measured | verdict |");
    println!("|---|---|---|");
    for v in &verdicts {
        println!("| {} | {} | {} |", v.floor, v.measured, if v.pass { "PASS" } else { "FAIL" });
    }
    Ok(())
}

/// The floors: random whole-tract access at least 0.8 of sequential (FDS:
/// the same); recovery, with the most data per node, faster with more
/// nodes until the machine is the bottleneck (the copy at half the disk's
/// fsync'd write rate or more, or the cores 90% busy or more).
fn judge(a: &BenchTractArgs, rates: &[Throughput], recoveries: &[Recovery]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for &n in &a.nodes {
        for op in ["write", "read"] {
            let rate = |order: &str| rates.iter().find(|r| r.nodes == n && r.op == op && r.order == order).map(|r| r.mbps);
            if let (Some(s), Some(r)) = (rate("sequential"), rate("random")) {
                out.push(Verdict {
                    floor: format!("{n} nodes: random {op}s >= 0.8x sequential"),
                    measured: format!("{r:.0} against {s:.0} MB/s: {:.2}x", r / s.max(1e-9)),
                    pass: r >= 0.8 * s,
                });
            }
        }
    }
    // Recovery growth is judged with the most data per node: with less, the
    // move's own round trips (about half a second) weigh as much as the copy.
    if let Some(&per_node) = a.per_node.iter().max() {
        let mut prev: Option<&Recovery> = None;
        for &n in &a.nodes {
            let Some(r) = recoveries.iter().filter(|r| r.nodes == n).nth(a.per_node.iter().position(|p| *p == per_node).unwrap_or(0)) else { continue };
            if let Some(p) = prev {
                let bound = if p.ratio_to_disk >= 0.5 {
                    Some(format!("disk-bound at {} nodes ({:.2}x its fsync'd write)", p.nodes, p.ratio_to_disk))
                } else if p.cpu_busy >= 0.9 {
                    Some(format!("CPU-bound at {} nodes ({:.0}% busy)", p.nodes, p.cpu_busy * 100.0))
                } else {
                    None
                };
                let grew = r.mbps >= 1.1 * p.mbps;
                out.push(Verdict {
                    floor: format!("{} per node: recovery faster at {n} nodes than at {}, or the machine is the bottleneck", format_size(per_node), p.nodes),
                    measured: format!("{:.1} against {:.1} MB/s{}", r.mbps, p.mbps, bound.as_deref().map(|b| format!("; {b}")).unwrap_or_default()),
                    pass: grew || bound.is_some(),
                });
            }
            prev = Some(r);
        }
    }
    out
}

//! `strata bench-recovery`: how fast a cluster of real `strata` processes
//! re-creates a dead node's replicas on the others (Ceph's down-out, with
//! the evacuation's moves), at several cluster sizes, against the disk's
//! fsync'd write bandwidth measured in the same run; and how evenly the
//! disks are allocated before and after `cluster rebalance` on a cluster
//! grown from 3 to 6 nodes; and, on a cluster grown from 5 to 8 nodes and
//! not rebalanced, how a dead node's copies spread under Kinesis's
//! recovery rule beside Ambry's greedy choice, in the same run.

use crate::bench::{MB, disk_write_limit};
use crate::bench_cluster::{Nodes, command};
use crate::size::{format_size, parse_size};
use anyhow::{Context, Result, bail};
use bytes::Bytes;
use rand::RngCore;
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use strata_client::PutArgs;

#[derive(clap::Args, Debug)]
pub struct BenchRecoveryArgs {
    /// Directory for the nodes' data (removed afterwards).
    #[arg(long, default_value = "./strata-bench-recovery")]
    pub data_dir: PathBuf,
    /// Cluster sizes at which a node dies and is replaced.
    #[arg(long, value_delimiter = ',', default_value = "3,6,9")]
    pub nodes: Vec<usize>,
    /// Blob bytes written per node before the failure (each stored 3 times).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    pub per_node: u64,
    /// Replica moves under way at once during recovery (--max-moves).
    #[arg(long, default_value_t = 8)]
    pub max_moves: usize,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(serde::Serialize)]
struct Recovery {
    nodes: usize,
    replicas: usize,
    bytes: u64,
    detect_seconds: f64,
    copy_seconds: f64,
    mbps: f64,
    ratio_to_disk: f64,
    targets: usize,
}

#[derive(serde::Serialize)]
struct Rebalanced {
    moves: usize,
    seconds: f64,
    before: strata_cluster::Spread,
    after: strata_cluster::Spread,
    replicas_per_disk_before: (usize, usize),
    replicas_per_disk_after: (usize, usize),
}

#[derive(serde::Serialize)]
struct Placed {
    rule: &'static str,
    bytes: u64,
    seconds: f64,
    mbps: f64,
    /// Nodes that received a copy.
    written: usize,
    /// The most copies one node received.
    most_copies: usize,
    /// Kinesis's degree of recovery parallelism π = Σ b / max b, b a
    /// node's copies received plus read from it (a copy read from several
    /// sources shared among them), as `strata sim kinesis-recovery`.
    parallelism: f64,
    after: strata_cluster::Spread,
}

/// The flags every node runs with here: fast detection, quick down-out.
const FAST: [&str; 6] = ["--heartbeat-ms", "200", "--down-after-ms", "1000", "--down-out-ms", "1500"];

async fn map_of(nodes: &Nodes, i: usize) -> Result<strata_cluster::ClusterMap> {
    let v = nodes.client(i).json(http::Method::GET, "/admin/cluster/status").await?;
    serde_json::from_value(v["map"].clone()).context("the cluster map in the status")
}

/// Writes `bytes` of 1 MiB blobs through every node, 8 at a time.
async fn fill(nodes: &Nodes, n: usize, bytes: u64) -> Result<()> {
    let mut payload = vec![0u8; 1 << 20];
    rand::rng().fill_bytes(&mut payload);
    let payload = Bytes::from(payload);
    let count = bytes.div_ceil(1 << 20) as usize;
    let mut i = 0;
    while i < count {
        let batch: Vec<_> = (i..(i + 8).min(count))
            .map(|k| {
                let c = nodes.client(k % n);
                let p = payload.clone();
                async move { c.put_bytes(p, &PutArgs::default()).await }
            })
            .collect();
        for r in futures_util::future::join_all(batch).await {
            r?;
        }
        i += 8;
    }
    Ok(())
}

/// Waits until no node reports replication lag.
async fn drained(nodes: &Nodes, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut behind = 0u64;
        for i in 0..n {
            if let Ok(v) = nodes.client(i).json(http::Method::GET, "/admin/replication").await {
                behind += v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|l| l["token_lsn"].as_u64().unwrap_or(0) < l["peer_lsn"].as_u64().unwrap_or(0))
                    .filter(|b| *b)
                    .count() as u64;
            }
        }
        if behind == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("replication did not drain in 300 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn recovery(a: &BenchRecoveryArgs, n: usize, disk_write_mbps: f64) -> Result<Recovery> {
    let max_moves = a.max_moves.to_string();
    let extra: Vec<&str> = FAST.iter().copied().chain(["--max-moves", &max_moves]).collect();
    // Three copies where a fourth node can take the dead one's; two on three nodes.
    let replicas = 3.min(n - 1);
    let mut nodes = Nodes::start_with(&a.data_dir, n, 4, replicas, &extra).await?;
    fill(&nodes, n, a.per_node * n as u64).await?;
    drained(&nodes, n).await?;
    // The last node dies (node 1 holds the metadata group).
    let victim = n - 1;
    let victim_id = n as u64;
    let bytes: u64 = nodes
        .client(victim)
        .json(http::Method::GET, "/admin/partitions")
        .await?
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["used_bytes"].as_u64()).sum())
        .unwrap_or(0);
    nodes.kill(victim);
    let t0 = Instant::now();
    let mut first_move = None;
    let mut targets = std::collections::BTreeSet::new();
    let deadline = t0 + Duration::from_secs(600);
    loop {
        let map = map_of(&nodes, 0).await?;
        for p in map.partitions.values() {
            if let Some(m) = p.moving {
                first_move.get_or_insert_with(Instant::now);
                targets.insert(m.to);
            }
        }
        let done = map.partitions.values().all(|p| p.moving.is_none() && p.replicas.iter().all(|r| r.node != victim_id));
        if done && first_move.is_some() {
            break;
        }
        if Instant::now() > deadline {
            bail!("node {victim_id}'s replicas were not re-created within 600 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let end = Instant::now();
    let first = first_move.unwrap_or(t0);
    let copy_seconds = (end - first).as_secs_f64().max(1e-3);
    let mbps = bytes as f64 / MB / copy_seconds;
    Ok(Recovery {
        nodes: n,
        replicas,
        bytes,
        detect_seconds: (first - t0).as_secs_f64(),
        copy_seconds,
        mbps,
        ratio_to_disk: mbps / disk_write_mbps,
        targets: targets.iter().map(|t| t.node).collect::<std::collections::BTreeSet<_>>().len(),
    })
}

fn per_disk(map: &strata_cluster::ClusterMap) -> (usize, usize) {
    let mut counts: std::collections::BTreeMap<strata_cluster::ReplicaLoc, usize> = std::collections::BTreeMap::new();
    for n in map.nodes.values() {
        for i in 0..n.disks.len() {
            counts.insert(strata_cluster::ReplicaLoc { node: n.id, disk: i as u32 }, 0);
        }
    }
    for p in map.partitions.values() {
        for r in &p.replicas {
            *counts.entry(*r).or_default() += 1;
        }
    }
    (counts.values().copied().min().unwrap_or(0), counts.values().copied().max().unwrap_or(0))
}

/// Adds the running processes `from + 1 ..= to` to the map (one disk
/// each, racks of their own) and waits until their disks take replicas
/// and nothing is unsettled; returns that map.
async fn grow(nodes: &Nodes, from: usize, to: usize) -> Result<strata_cluster::ClusterMap> {
    let c0 = nodes.client(0);
    for i in from as u64 + 1..=to as u64 {
        command(&c0, json!({ "AddNode": { "id": i, "addr": nodes.addr_of(i as usize - 1), "zone": "z1", "rack": format!("r{i}") } })).await?;
        command(&c0, json!({ "AddDisk": { "node": i, "path": "d0", "capacity_bytes": 1u64 << 40 } })).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let map = map_of(nodes, 0).await?;
        match map.unsettled() {
            Ok(()) if map.spread().disks == to => return Ok(map),
            Ok(()) if Instant::now() > deadline => bail!("only {} of {to} disks take replicas", map.spread().disks),
            Err(e) if Instant::now() > deadline => bail!("the grown cluster never settled: {e}"),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn rebalance(a: &BenchRecoveryArgs) -> Result<Rebalanced> {
    // Six processes, three in the map at first; partitions fill them; then
    // the other three join and the cluster rebalances.
    let nodes = Nodes::start_partial(&a.data_dir, 6, 3, 4, 3, &FAST).await?;
    fill(&nodes, 3, a.per_node * 3).await?;
    let c0 = nodes.client(0);
    let map = grow(&nodes, 3, 6).await?;
    let before = map.spread();
    let replicas_per_disk_before = per_disk(&map);
    let plan = map.rebalance_plan(1).map_err(|e| anyhow::anyhow!("{e}"))?;
    let moves = plan.len();
    let t = Instant::now();
    let started_ms = strata_types::Clock::now_ms(&strata_types::SystemClock);
    let out = command(&c0, json!({ "StartRebalance": { "plan": { "moves": plan, "max_moves": 4, "throttle_mb_s": 0, "started_ms": started_ms } } })).await?;
    let started_epoch = out["Applied"]["epoch"].as_u64().unwrap_or(0);
    let deadline = t + Duration::from_secs(600);
    let after = loop {
        let map = map_of(&nodes, 0).await?;
        // The node's published map may lag the command it just applied.
        if map.epoch > started_epoch && map.rebalance.is_none() && map.partitions.values().all(|p| p.moving.is_none()) {
            break map;
        }
        if Instant::now() > deadline {
            bail!("the rebalancing did not finish within 600 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    Ok(Rebalanced {
        moves,
        seconds: t.elapsed().as_secs_f64(),
        before,
        after: after.spread(),
        replicas_per_disk_before,
        replicas_per_disk_after: per_disk(&after),
    })
}

/// Five nodes hold the data (two copies); three empty ones join and the
/// cluster is not rebalanced; node 5 dies. Where its copies go, and how
/// long they take, under the leader's `--recovery-placement rule`.
async fn grown_recovery(a: &BenchRecoveryArgs, rule: &'static str) -> Result<Placed> {
    let max_moves = a.max_moves.to_string();
    let extra: Vec<&str> = FAST.iter().copied().chain(["--max-moves", &max_moves, "--recovery-placement", rule]).collect();
    let mut nodes = Nodes::start_partial(&a.data_dir, 8, 5, 6, 2, &extra).await?;
    fill(&nodes, 5, a.per_node * 5).await?;
    drained(&nodes, 5).await?;
    let before = grow(&nodes, 5, 8).await?;
    let victim = 5u64;
    let bytes: u64 = nodes
        .client(4)
        .json(http::Method::GET, "/admin/partitions")
        .await?
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["used_bytes"].as_u64()).sum())
        .unwrap_or(0);
    nodes.kill(4);
    let mut first_move = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    let after = loop {
        let map = map_of(&nodes, 0).await?;
        if map.partitions.values().any(|p| p.moving.is_some()) {
            first_move.get_or_insert_with(Instant::now);
        }
        if first_move.is_some() && map.partitions.values().all(|p| p.moving.is_none() && p.replicas.iter().all(|r| r.node != victim)) {
            break map;
        }
        if Instant::now() > deadline {
            bail!("node {victim}'s replicas were not re-created within 600 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let seconds = first_move.map_or(0.0, |t| t.elapsed().as_secs_f64()).max(1e-3);
    // Each copy re-created: where it went, and the copy it was read from.
    let mut copies: std::collections::BTreeMap<u64, usize> = std::collections::BTreeMap::new();
    let mut work: std::collections::BTreeMap<u64, f64> = std::collections::BTreeMap::new();
    for (id, p) in &before.partitions {
        if !p.replicas.iter().any(|r| r.node == victim) {
            continue;
        }
        let now = after.partitions.get(id).map(|q| q.replicas.clone()).unwrap_or_default();
        let sources: Vec<_> = p.replicas.iter().filter(|r| r.node != victim).collect();
        for to in now.iter().filter(|r| !p.replicas.contains(r)) {
            *copies.entry(to.node).or_default() += 1;
            *work.entry(to.node).or_default() += 1.0;
            for from in &sources {
                *work.entry(from.node).or_default() += 1.0 / sources.len() as f64;
            }
        }
    }
    let mbps = bytes as f64 / MB / seconds;
    Ok(Placed {
        rule,
        bytes,
        seconds,
        mbps,
        written: copies.len(),
        most_copies: copies.values().copied().max().unwrap_or(0),
        parallelism: work.values().sum::<f64>() / work.values().copied().fold(f64::MIN_POSITIVE, f64::max),
        after: after.spread(),
    })
}

pub async fn run(a: BenchRecoveryArgs) -> Result<()> {
    std::fs::create_dir_all(&a.data_dir).with_context(|| format!("creating {}", a.data_dir.display()))?;
    let disk_write_mbps = disk_write_limit(&a.data_dir, 2.0, 1)?;
    let _ = std::fs::remove_file(a.data_dir.join("disk-probe-0"));
    let mut rows = Vec::new();
    for &n in &a.nodes {
        if !(4..=50).contains(&(n + 1)) {
            bail!("--nodes takes cluster sizes from 3 to 49, not {n}");
        }
        rows.push(recovery(&a, n, disk_write_mbps).await?);
    }
    let rebalanced = rebalance(&a).await?;
    let placed = vec![grown_recovery(&a, "most-room").await?, grown_recovery(&a, "kinesis").await?];
    let _ = std::fs::remove_dir_all(&a.data_dir);
    if a.json {
        println!("{}", json!({ "disk_write_mbps": disk_write_mbps, "recovery": rows, "rebalance": rebalanced, "recovery_placement": placed }));
        return Ok(());
    }
    println!("limit measured in this run: disk fsync'd write {disk_write_mbps:.0} MB/s (one stream); every node process on this one machine and disk");
    println!("a node dies (SIGKILL); after --down-after-ms 1000 and --down-out-ms 1500 the leader moves its replicas, at most {} at a time", a.max_moves);
    println!();
    println!("| nodes | copies | data on the dead node | detected and out after s | re-replicated in s | MB/s | x disk write | nodes written to |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.1} | {:.2} | {} |",
            r.nodes,
            r.replicas,
            format_size(r.bytes),
            r.detect_seconds,
            r.copy_seconds,
            r.mbps,
            r.ratio_to_disk,
            r.targets
        );
    }
    let r = &rebalanced;
    println!();
    println!("rebalance after growing 3 -> 6 nodes (Ambry's Algorithm 1 on the live map): {} moves in {:.2} s", r.moves, r.seconds);
    println!("| | disks | allocated min..max | stddev | replicas per disk min..max |");
    println!("|---|---|---|---|---|");
    for (what, s, (lo, hi)) in [("before", &r.before, r.replicas_per_disk_before), ("after", &r.after, r.replicas_per_disk_after)] {
        println!("| {what} | {} | {:.2}%..{:.2}% | {:.3} points | {lo}..{hi} |", s.disks, s.min * 100.0, s.max * 100.0, s.stddev * 100.0);
    }
    println!();
    println!("recovery placement on a cluster grown from 5 to 8 nodes, not rebalanced, whose node 5 dies (2 copies; the leader's --recovery-placement):");
    println!(
        "| rule | data on the dead node | re-replicated in s | MB/s | x disk write | nodes written to | most copies to one node | parallelism (sum/max of copies read + written per node) | allocated min..max after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for p in &placed {
        println!(
            "| {} | {} | {:.2} | {:.1} | {:.2} | {} | {} | {:.2} | {:.2}%..{:.2}% |",
            p.rule,
            format_size(p.bytes),
            p.seconds,
            p.mbps,
            p.mbps / disk_write_mbps,
            p.written,
            p.most_copies,
            p.parallelism,
            p.after.min * 100.0,
            p.after.max * 100.0
        );
    }
    Ok(())
}

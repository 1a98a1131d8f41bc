//! `strata kv ring ...` and `strata kv define`: the read-only stores' ring
//! in the cluster map, store definitions on it, and the ring files builders
//! take (`strata kv build --ring`, `tools/spark/build_store.py`).

use crate::commands::Common;
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use strata_client::Client;
use strata_cluster::{ClusterMap, KvReplication, decode_map};
use strata_kv::{RingFile, StoreDef};
use strata_placement::spock::{Replication, Ring, RingNode};

#[derive(clap::Subcommand, Debug)]
pub enum RingCmd {
    /// Sets up the cluster's ring: partitions spread over the nodes, zones interleaved.
    Init(InitArgs),
    /// Writes a store's ring file from the cluster map, for builders.
    Export(ExportArgs),
    /// Writes a ring file without a cluster (nodes given as ID:ZONE).
    Plan(PlanArgs),
}

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// Ring partitions (shared by every store; more partitions, finer rebalancing).
    #[arg(long)]
    pub partitions: u32,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Where to write the ring file.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Nodes as ID:ZONE, comma-separated (zones are numbers).
    #[arg(long, value_delimiter = ',')]
    pub nodes: Vec<String>,
    /// Ring partitions.
    #[arg(long)]
    pub partitions: u32,
    /// Chunks per (partition, replica).
    #[arg(long, default_value_t = 2)]
    pub chunks: u32,
    /// Replicas on distinct nodes.
    #[arg(long, conflicts_with = "zone_replicas")]
    pub replicas: Option<u32>,
    /// Replicas per zone as ZONE=N, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub zone_replicas: Vec<String>,
    /// Where to write the ring file.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct DefineArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Chunks per (partition, replica).
    #[arg(long, default_value_t = 2)]
    pub chunks: u32,
    /// Replicas on distinct nodes.
    #[arg(long, conflicts_with = "zone_replicas")]
    pub replicas: Option<u32>,
    /// Replicas per zone as ZONE=N, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub zone_replicas: Vec<String>,
    /// Replicas a get reads before answering.
    #[arg(long, default_value_t = 1)]
    pub required_reads: u32,
    #[command(flatten)]
    pub common: Common,
}

fn zone_counts(list: &[String]) -> Result<BTreeMap<String, u32>> {
    list.iter()
        .map(|z| {
            let (name, n) = z.split_once('=').with_context(|| format!("{z:?}: expected ZONE=N"))?;
            Ok((name.to_string(), n.parse().with_context(|| format!("{z:?}: N is a number"))?))
        })
        .collect()
}

pub(crate) fn replication(replicas: Option<u32>, zones: &[String]) -> Result<KvReplication> {
    match (replicas, zones.is_empty()) {
        (Some(n), true) => Ok(KvReplication::Nodes(n)),
        (None, false) => Ok(KvReplication::Zones(zone_counts(zones)?)),
        (None, true) => Ok(KvReplication::Nodes(1)),
        (Some(_), false) => bail!("give --replicas or --zone-replicas, not both"),
    }
}

/// The cluster map, as a node serves it.
pub(crate) async fn fetch_map(c: &Client) -> Result<ClusterMap> {
    let r = c.send(http::Method::GET, "/meta/v1/map", &[], strata_client::full(bytes::Bytes::new())).await?;
    Ok(decode_map(&r.bytes().await?)?)
}

/// A store's ring file from the map.
pub(crate) fn ring_file(map: &ClusterMap, store: &str) -> Result<RingFile> {
    let spec = map.kv.stores.get(store).with_context(|| format!("the cluster has no read-only store {store:?} (strata kv define)"))?;
    let table = map.kv_table(store)?;
    let def = StoreDef { name: store.to_string(), partitions: table.len() as u32, replication: spec.factor(), chunks: spec.chunks };
    Ok(RingFile::new(def, table))
}

pub async fn ring(cmd: RingCmd) -> Result<()> {
    match cmd {
        RingCmd::Init(a) => {
            crate::cluster::propose(&a.common, json!({ "KvInitRing": { "partitions": a.partitions } })).await?;
            let map = fetch_map(&a.common.client()?).await?;
            let mut owned: BTreeMap<u64, usize> = BTreeMap::new();
            for n in &map.kv.ring {
                *owned.entry(*n).or_default() += 1;
            }
            println!("ring of {} partitions: {}", map.kv.ring.len(), owned.iter().map(|(n, c)| format!("node {n} owns {c}")).collect::<Vec<_>>().join(", "));
        }
        RingCmd::Export(a) => {
            let map = fetch_map(&a.common.client()?).await?;
            let f = ring_file(&map, &a.store)?;
            f.write(&a.out)?;
            println!(
                "wrote {} (store {}, {} partitions, {} replicas, ring {:#010x})",
                a.out.display(),
                a.store,
                f.store.partitions,
                f.store.replication,
                f.ring
            );
        }
        RingCmd::Plan(a) => {
            let nodes = a
                .nodes
                .iter()
                .map(|n| {
                    let (id, zone) = n.split_once(':').with_context(|| format!("{n:?}: expected ID:ZONE"))?;
                    Ok(RingNode { id: id.parse().context("node id")?, zone: zone.parse().context("zone number")? })
                })
                .collect::<Result<Vec<_>>>()?;
            let rep = match replication(a.replicas, &a.zone_replicas)? {
                KvReplication::Nodes(n) => Replication::Nodes(n),
                KvReplication::Zones(z) => Replication::Zones(z.into_iter().map(|(k, v)| Ok((k.parse().context("zone number")?, v))).collect::<Result<_>>()?),
            };
            let ring = Ring::balanced(a.partitions, &nodes)?;
            let table = ring.replica_table(&rep)?;
            let def = StoreDef { name: a.store.clone(), partitions: a.partitions, replication: rep.factor(), chunks: a.chunks };
            def.validate()?;
            let f = RingFile::new(def, table);
            f.write(&a.out)?;
            println!("wrote {} (ring {:#010x})", a.out.display(), f.ring);
        }
    }
    Ok(())
}

pub async fn define(a: DefineArgs) -> Result<()> {
    let rep = replication(a.replicas, &a.zone_replicas)?;
    let spec = strata_cluster::KvStoreSpec { chunks: a.chunks, replication: rep, required_reads: a.required_reads };
    crate::cluster::propose(&a.common, json!({ "KvCreateStore": { "name": a.store, "spec": spec } })).await?;
    println!("defined read-only store {} on the ring", a.store);
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct PushArgs {
    /// Store name (defined on the cluster's ring).
    #[arg(long)]
    pub store: String,
    /// The build's output: a directory every node can read, an http(s):// URL, or strata://host:port/<manifest>.
    #[arg(long)]
    pub from: String,
    /// Version number on every node (default: the highest on any node + 1).
    #[arg(long)]
    pub version: Option<u64>,
    /// Pace each node's fetch to this many MB/s.
    #[arg(long)]
    pub throttle_mb_s: Option<f64>,
    #[command(flatten)]
    pub common: Common,
}

/// The nodes holding a store on the ring, with clients for them.
fn store_nodes(base: &Client, map: &ClusterMap, store: &str) -> Result<Vec<(u64, Client)>> {
    let table = map.kv_table(store)?;
    let ids: std::collections::BTreeSet<u64> = table.iter().flatten().map(|&n| u64::from(n)).collect();
    ids.into_iter().map(|id| Ok((id, node_client(base, map, id)?))).collect()
}

/// A node's row for `store` in `GET /admin/kv`, if it has the store.
async fn store_row(c: &Client, store: &str) -> Result<Option<serde_json::Value>> {
    let rows = c.json(http::Method::GET, "/admin/kv").await?;
    Ok(rows.as_array().into_iter().flatten().find(|r| r["store"] == store).cloned())
}

async fn all<T, F: std::future::Future<Output = T>>(futs: impl IntoIterator<Item = F>) -> Vec<T> {
    futures_util::future::join_all(futs).await
}

/// `strata kv push`: fetch on every node of the store, then swap every
/// node; nothing swaps unless every fetch succeeded, and a failed swap rolls
/// the swapped nodes back (Spock §4.3).
pub async fn push(a: PushArgs) -> Result<()> {
    let summary = push_summary(&a).await?;
    if a.common.json {
        println!("{summary}");
    } else {
        println!(
            "pushed {} version {} to {} nodes: {:.1} MB fetched in {:.2} s, swapped everywhere in {:.1} ms",
            a.store,
            summary["version"],
            summary["nodes"],
            summary["bytes"].as_f64().unwrap_or(0.0) / 1e6,
            summary["fetch_seconds"].as_f64().unwrap_or(0.0),
            summary["swap_ms"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(())
}

/// The push itself; returns its summary (version, nodes, bytes, fetch
/// seconds, MB/s per node, swap milliseconds).
pub(crate) async fn push_summary(a: &PushArgs) -> Result<serde_json::Value> {
    use indicatif::{ProgressBar, ProgressStyle};
    let base = a.common.client()?;
    let map = fetch_map(&base).await?;
    let nodes = store_nodes(&base, &map, &a.store)?;
    let rows = all(nodes.iter().map(|(_, u)| store_row(u, &a.store))).await;
    let mut highest = 0;
    let mut previous = Vec::new();
    for ((id, _), r) in nodes.iter().zip(rows) {
        let r = r.with_context(|| format!("asking node {id}"))?;
        highest = highest.max(r.as_ref().and_then(|r| r["versions"].as_array()?.iter().filter_map(|v| v.as_u64()).max()).unwrap_or(0));
        previous.push(r.and_then(|r| r["live"].as_u64()));
    }
    let version = a.version.unwrap_or(highest + 1);
    // Fetch everywhere, with one bar over every node's progress.
    let started = std::time::Instant::now();
    let body = json!({ "source": a.from, "version": version, "throttle_mb_s": a.throttle_mb_s });
    let path = format!("/admin/kv/{}/fetch", a.store);
    let fetches = all(nodes.iter().map(|(_, u)| {
        let (c, body, path) = (u.clone(), body.clone(), path.clone());
        async move { c.post_json(&path, &body).await }
    }));
    tokio::pin!(fetches);
    let pb = if a.common.json { ProgressBar::hidden() } else { ProgressBar::new(0) };
    if let Ok(s) = ProgressStyle::with_template("fetching [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}") {
        pb.set_style(s.progress_chars("=> "));
    }
    let results = loop {
        tokio::select! {
            r = &mut fetches => break r,
            () = tokio::time::sleep(std::time::Duration::from_millis(250)) => {
                let (mut done, mut total) = (0, 0);
                for r in all(nodes.iter().map(|(_, u)| store_row(u, &a.store))).await.into_iter().flatten().flatten() {
                    done += r["loading"]["copied"].as_u64().unwrap_or(0);
                    total += r["loading"]["total"].as_u64().unwrap_or(0);
                }
                pb.set_length(total.max(done));
                pb.set_position(done);
            }
        }
    };
    pb.finish_and_clear();
    let fetch_secs = started.elapsed().as_secs_f64();
    let failed: Vec<String> = nodes.iter().zip(&results).filter_map(|((id, _), r)| r.as_ref().err().map(|e| format!("node {id}: {e}"))).collect();
    if !failed.is_empty() {
        // Nothing swaps; the nodes that fetched drop the version again.
        let fetched: Vec<&Client> = nodes.iter().zip(&results).filter(|(_, r)| r.is_ok()).map(|((_, u), _)| u).collect();
        let discard = format!("/admin/kv/{}/discard", a.store);
        for r in all(fetched.iter().map(|u| (*u).clone().post_json_owned(discard.clone(), json!({ "version": version })))).await {
            if let Err(e) = r {
                eprintln!("warning: discarding the fetched version: {e}");
            }
        }
        bail!("push of {} version {version} failed, nothing swapped:\n  {}", a.store, failed.join("\n  "));
    }
    let bytes: Vec<u64> = results.iter().map(|r| r.as_ref().map_or(0, |v| v["bytes"].as_u64().unwrap_or(0))).collect();
    let secs: Vec<f64> = results.iter().map(|r| r.as_ref().map_or(0.0, |v| v["seconds"].as_f64().unwrap_or(0.0))).collect();
    // Swap everywhere at once; undo on the swapped nodes if any fails.
    let t = std::time::Instant::now();
    let swap = format!("/admin/kv/{}/swap", a.store);
    let swaps = all(nodes.iter().map(|(_, u)| u.clone().post_json_owned(swap.clone(), json!({ "version": version })))).await;
    let swap_ms = t.elapsed().as_secs_f64() * 1e3;
    let bad: Vec<String> = nodes.iter().zip(&swaps).filter_map(|((id, _), r)| r.as_ref().err().map(|e| format!("node {id}: {e}"))).collect();
    if !bad.is_empty() {
        let rollback = format!("/admin/kv/{}/rollback", a.store);
        for (((id, u), r), prev) in nodes.iter().zip(&swaps).zip(&previous) {
            if r.is_ok() {
                let undo = match prev {
                    Some(p) => u.clone().post_json_owned(rollback.clone(), json!({ "version": p })).await.map(|_| ()),
                    None => Err(strata_client::ClientError::Protocol("no earlier version to go back to".into())),
                };
                if let Err(e) = undo {
                    eprintln!("warning: node {id} keeps version {version}: {e}");
                }
            }
        }
        bail!("swap of {} version {version} failed, the swapped nodes were rolled back:\n  {}", a.store, bad.join("\n  "));
    }
    let total: u64 = bytes.iter().sum();
    Ok(json!({
        "store": a.store, "version": version, "nodes": nodes.len(), "bytes": total, "fetch_seconds": fetch_secs,
        "node_mb_per_s": nodes.iter().zip(bytes.iter().zip(&secs)).map(|((id, _), (b, s))| json!({ "node": id, "bytes": b, "mb_per_s": *b as f64 / 1e6 / s.max(1e-9) })).collect::<Vec<_>>(),
        "swap_ms": swap_ms,
    }))
}

/// `strata kv rollback --all-nodes`: every node of the store back to one
/// version (given, or the newest below the live one that every node has);
/// if a node fails, the others return to the version they had.
pub async fn rollback_all(store: &str, version: Option<u64>, common: &Common) -> Result<()> {
    let base = common.client()?;
    let map = fetch_map(&base).await?;
    let nodes = store_nodes(&base, &map, store)?;
    let rows: Vec<serde_json::Value> = all(nodes.iter().map(|(_, u)| store_row(u, store)))
        .await
        .into_iter()
        .zip(&nodes)
        .map(|(r, (id, _))| r?.with_context(|| format!("node {id} has no store {store:?}")))
        .collect::<Result<_>>()?;
    let live: Vec<Option<u64>> = rows.iter().map(|r| r["live"].as_u64()).collect();
    let target = match version {
        Some(v) => v,
        None => {
            let cur = live.iter().flatten().max().copied().context("no node has a live version")?;
            let common_versions = rows
                .iter()
                .map(|r| r["versions"].as_array().into_iter().flatten().filter_map(|v| v.as_u64()).collect::<std::collections::BTreeSet<_>>())
                .reduce(|a, b| a.intersection(&b).copied().collect())
                .unwrap_or_default();
            *common_versions.range(..cur).next_back().with_context(|| format!("no version below {cur} is kept on every node"))?
        }
    };
    let path = format!("/admin/kv/{store}/rollback");
    let res = all(nodes.iter().map(|(_, u)| u.clone().post_json_owned(path.clone(), json!({ "version": target })))).await;
    let bad: Vec<String> = nodes.iter().zip(&res).filter_map(|((id, _), r)| r.as_ref().err().map(|e| format!("node {id}: {e}"))).collect();
    if !bad.is_empty() {
        for (((_, u), r), prev) in nodes.iter().zip(&res).zip(&live) {
            if let (Ok(_), Some(p)) = (r, prev) {
                let _ = u.clone().post_json_owned(path.clone(), json!({ "version": p })).await;
            }
        }
        bail!("rollback of {store} to version {target} failed, the others were restored:\n  {}", bad.join("\n  "));
    }
    println!("rolled {store} back to version {target} on {} nodes", nodes.len());
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct RebalanceArgs {
    /// The node joining the ring (added to the cluster with `strata node add` first).
    #[arg(long)]
    pub add_node: u64,
    /// Ring partitions moved per step (each step is a checkpoint).
    #[arg(long, default_value_t = 2)]
    pub batch: usize,
    /// Pace each stealer's copy to this many MB/s.
    #[arg(long)]
    pub throttle_mb_s: Option<f64>,
    /// Where the target ring is kept, so an interrupted rebalance resumes
    /// (default `strata-rebalance-<node>.json` here).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

/// A store's replica table on a ring with these owners.
fn table_with(map: &ClusterMap, owners: &[u64], store: &str) -> Result<Vec<Vec<u32>>> {
    let mut m = map.clone();
    m.kv.ring = owners.to_vec();
    Ok(m.kv_table(store)?)
}

/// A node's URL, with the scheme `base` uses (a cluster whose nodes speak
/// TLS is reached over `https://` everywhere).
fn node_url(base: &Client, map: &ClusterMap, id: u64) -> Result<String> {
    let scheme = if base.base().starts_with("https://") { "https" } else { "http" };
    Ok(format!("{scheme}://{}", map.nodes.get(&id).with_context(|| format!("node {id} is not in the map"))?.addr))
}

/// A client of node `id` with `base`'s credentials and trust.
pub(crate) fn node_client(base: &Client, map: &ClusterMap, id: u64) -> Result<Client> {
    Ok(base.to(&node_url(base, map, id)?))
}

/// Waits until every node's map has reached `epoch`.
async fn map_everywhere(base: &Client, map: &ClusterMap, epoch: u64) -> Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for id in map.nodes.keys() {
        let c = node_client(base, map, *id)?;
        loop {
            if fetch_map(&c).await.is_ok_and(|m| m.epoch >= epoch) {
                break;
            }
            if std::time::Instant::now() > deadline {
                bail!("node {id} has not seen map epoch {epoch}: is it down?");
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

async fn relayout(c: &Client, store: &str, layout: &strata_kv::Layout, version: Option<u64>) -> Result<()> {
    c.post_json(&format!("/admin/kv/{store}/relayout"), &json!({ "layout": layout, "version": version })).await?;
    Ok(())
}

/// `strata kv rebalance --add-node N` (Spock §4.3.2): moves the new node's
/// share of ring partitions to it in batches. For each batch and store:
/// stealers copy the chunk files from donors and take them into their live
/// version (holding old and new at once); the map changes; once every node
/// has the new map, every node of the batch keeps exactly its new share.
/// A failure before the map change undoes the stealers' additions; the
/// checkpoint file lets a rerun resume after any step.
pub async fn rebalance(a: RebalanceArgs) -> Result<()> {
    let base = a.common.client()?;
    let mut map = fetch_map(&base).await?;
    let node = map.nodes.get(&a.add_node).with_context(|| format!("node {} is not in the cluster map (strata node add)", a.add_node))?;
    let _ = node;
    let checkpoint = a.checkpoint.clone().unwrap_or_else(|| PathBuf::from(format!("strata-rebalance-{}.json", a.add_node)));
    let target: Vec<u64> = match std::fs::read(&checkpoint) {
        Ok(b) => serde_json::from_slice::<serde_json::Value>(&b)?["target"]
            .as_array()
            .context("checkpoint without a target")?
            .iter()
            .filter_map(|v| v.as_u64())
            .collect(),
        Err(_) => {
            let ring = map.kv_ring()?;
            let zone = ring.zone_of(a.add_node as u32).context("node not on the ring's node list")?;
            let t: Vec<u64> = ring.with_node(RingNode { id: a.add_node as u32, zone })?.owners().iter().map(|&n| u64::from(n)).collect();
            std::fs::write(&checkpoint, serde_json::to_vec(&json!({ "node": a.add_node, "target": t }))?)?;
            t
        }
    };
    if target.len() != map.kv.ring.len() {
        bail!("{} holds a target for a ring of {} partitions, not {}", checkpoint.display(), target.len(), map.kv.ring.len());
    }
    let moving: Vec<usize> = (0..target.len()).filter(|&p| map.kv.ring[p] != target[p]).collect();
    let batches: Vec<&[usize]> = moving.chunks(a.batch.max(1)).collect();
    let stores: Vec<String> = map.kv.stores.keys().cloned().collect();
    for (bi, batch) in batches.iter().enumerate() {
        let mut next = map.kv.ring.clone();
        for &p in *batch {
            next[p] = target[p];
        }
        let mut bytes = 0u64;
        // 1. Stealers copy and take in their new buckets, keeping the old.
        let mut added: Vec<(Client, String, strata_kv::Layout)> = Vec::new();
        let result: Result<()> = async {
            for store in &stores {
                let (old, new) = (map.kv_table(store)?, table_with(&map, &next, store)?);
                let version = {
                    let donor = old.iter().flatten().next().copied().context("empty table")?;
                    store_row(&node_client(&base, &map, u64::from(donor))?, store).await?.and_then(|r| r["live"].as_u64())
                };
                let (moves, _) = strata_placement::spock::plan(&old, &new);
                let mut by_pair: BTreeMap<(u32, u32), Vec<(String, String)>> = BTreeMap::new();
                let chunks = map.kv.stores[store].chunks;
                for m in &moves {
                    for c in 0..chunks {
                        for ext in ["index", "data"] {
                            let from = format!("{}.{ext}", StoreDef::chunk_name(m.partition, m.from_replica, c));
                            let to = format!("{}.{ext}", StoreDef::chunk_name(m.partition, m.replica, c));
                            by_pair.entry((m.stealer, m.donor)).or_default().push((from, to));
                        }
                    }
                }
                for ((stealer, donor), files) in &by_pair {
                    let r = node_client(&base, &map, u64::from(*stealer))?
                        .post_json(
                            &format!("/admin/kv/{store}/steal"),
                            &json!({ "donor": node_url(&base, &map, u64::from(*donor))?, "files": files, "throttle_mb_s": a.throttle_mb_s }),
                        )
                        .await
                        .with_context(|| format!("node {stealer} stealing from node {donor}"))?;
                    bytes += r["bytes"].as_u64().unwrap_or(0);
                }
                let stealers: std::collections::BTreeSet<u32> = by_pair.keys().map(|(s, _)| *s).collect();
                for s in stealers {
                    let (was, will) = (strata_kv::Layout::for_node(&old, s), strata_kv::Layout::for_node(&new, s));
                    let union = strata_kv::Layout { node: Some(s), ring: will.ring, buckets: was.buckets.union(&will.buckets).copied().collect() };
                    let c = node_client(&base, &map, u64::from(s))?;
                    relayout(&c, store, &union, version).await.with_context(|| format!("node {s} taking its new partitions"))?;
                    added.push((c, store.clone(), was));
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            for (c, store, was) in &added {
                if let Err(u) = relayout(c, store, was, None).await {
                    eprintln!("warning: undoing on {}: {u}", c.base());
                }
            }
            return Err(e.context(format!("batch {} of {}: nothing changed in the map; rerun to resume", bi + 1, batches.len())));
        }
        // Read-write stores: the nodes that join a partition's preference
        // list get its data before the map changes (they take no writes
        // yet), and again once every node routes by the new map (what was
        // written meanwhile), and once more a moment later (puts that were
        // under way then).
        let copied = crate::kv_rw::copy_for_ring(&base, &map, &next, true).await.context("copying read-write store data")?;
        // 2. The map changes; 3. once everyone has it, every node keeps its exact share.
        let out = crate::cluster::propose(&a.common, json!({ "KvSetRing": { "owners": next } })).await?;
        let epoch = out["Applied"]["epoch"].as_u64().unwrap_or(map.epoch + 1);
        map_everywhere(&base, &map, epoch).await?;
        let mut rw_copied = copied;
        for _ in 0..2 {
            rw_copied += crate::kv_rw::copy_for_ring(&base, &map, &next, false).await.context("copying read-write store data after the ring change")?;
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let newmap = fetch_map(&base).await?;
        for store in &stores {
            let (old, new) = (map.kv_table(store)?, newmap.kv_table(store)?);
            let nodes: std::collections::BTreeSet<u32> = old.iter().chain(new.iter()).flatten().copied().collect();
            for n in nodes {
                let (was, will) = (strata_kv::Layout::for_node(&old, n), strata_kv::Layout::for_node(&new, n));
                if was != will {
                    relayout(&node_client(&base, &newmap, u64::from(n))?, store, &will, None)
                        .await
                        .with_context(|| format!("node {n} dropping its old partitions"))?;
                }
            }
        }
        map = newmap;
        println!(
            "batch {}/{}: ring partitions {:?} now on node {}, {:.1} MB copied, {rw_copied} read-write versions copied",
            bi + 1,
            batches.len(),
            batch,
            a.add_node,
            bytes as f64 / 1e6
        );
    }
    let _ = std::fs::remove_file(&checkpoint);
    println!("rebalanced: node {} owns {} of {} ring partitions", a.add_node, map.kv.ring.iter().filter(|&&n| n == a.add_node).count(), map.kv.ring.len());
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct UploadArgs {
    /// A build's output (node-<id>/ folders, or one single-node version).
    #[arg(long)]
    pub dir: PathBuf,
    #[command(flatten)]
    pub common: Common,
}

/// `strata kv upload`: stores a build's files as blobs in Strata, and a
/// manifest naming them; prints the `strata://` source `kv push` and
/// `/admin/kv/{store}/fetch` take.
pub async fn upload(a: UploadArgs) -> Result<()> {
    use futures_util::StreamExt;
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(&a.dir).with_context(|| format!("reading {}", a.dir.display()))? {
        let p = e?.path();
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if p.is_dir() && name.starts_with("node-") {
            for f in std::fs::read_dir(&p)? {
                let f = f?.path();
                let fname = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                files.push((format!("{name}/{fname}"), f));
            }
        } else if p.is_file() {
            files.push((name, p));
        }
    }
    files.sort();
    if !files.iter().any(|(n, _)| n.ends_with(".metadata")) {
        bail!("{} holds no build (no .metadata)", a.dir.display());
    }
    let total: u64 = files.iter().map(|(_, p)| std::fs::metadata(p).map_or(0, |m| m.len())).sum();
    let pb = if a.common.json { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(total) };
    if let Ok(s) = indicatif::ProgressStyle::with_template("uploading [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}") {
        pb.set_style(s.progress_chars("=> "));
    }
    let client = a.common.client()?;
    let mut manifest = BTreeMap::new();
    for (name, path) in &files {
        let f = tokio::fs::File::open(path).await?;
        let len = f.metadata().await?.len();
        let pb2 = pb.clone();
        let stream = strata_client::read_stream(f).inspect(move |r| {
            if let Ok(b) = r {
                pb2.inc(b.len() as u64);
            }
        });
        let r = client.put(strata_client::streaming(stream), Some(len), &strata_client::PutArgs::default()).await.with_context(|| format!("storing {name}"))?;
        manifest.insert(name.clone(), r.id);
    }
    pb.finish_and_clear();
    let m = strata_node::kv_fetch::Manifest { format: 1, files: manifest };
    let r = client.put_bytes(serde_json::to_vec(&m)?, &strata_client::PutArgs::default()).await?;
    let host = a.common.server.trim_start_matches("http://").trim_start_matches("https://").trim_end_matches('/');
    let source = format!("strata://{host}/{}", r.id);
    if a.common.json {
        println!("{}", json!({ "source": source, "files": files.len(), "bytes": total }));
    } else {
        println!("{source}");
    }
    Ok(())
}

//! `strata kv ...`: read-only key-value stores (Spock/Voldemort). `build`
//! turns a CSV or JSON Lines file into a version directory offline, with
//! bounded memory, a progress bar and a summary.

use crate::size::parse_size;
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;
use strata_kv::input::{Extent, InputFormat, extent, read};
use strata_kv::{Builder, Duplicates, StoreDef};

#[derive(clap::Subcommand, Debug)]
pub enum KvCmd {
    /// Builds a version of a store from a CSV or JSON Lines file.
    Build(BuildArgs),
    /// Creates a store on a node.
    Create(CreateArgs),
    /// Copies a built version onto a node after checking it (not live yet).
    Load(LoadArgs),
    /// Makes a loaded version live.
    Swap(SwapArgs),
    /// Makes an older version live again (default: the one before the live one).
    Rollback(RollbackArgs),
    /// Lists a node's stores, their versions and the live one.
    Versions(crate::commands::Common),
    /// Looks a key up (given as text, or as base64url with --base64).
    Get(GetArgs),
    /// The cluster's ring for read-only stores, and ring files for builders.
    #[command(subcommand)]
    Ring(crate::kv_ring::RingCmd),
    /// Defines a read-only store on the cluster's ring.
    Define(crate::kv_ring::DefineArgs),
    /// Fetches a build onto every node of a store, then swaps them all.
    Push(crate::kv_ring::PushArgs),
    /// Gives a new node its share of the ring, moving chunk files in batches.
    Rebalance(crate::kv_ring::RebalanceArgs),
    /// Stores a build's files as blobs in Strata; prints the strata:// source for push.
    Upload(crate::kv_ring::UploadArgs),
    /// Read-write stores (cluster mode): define, put, get, delete, truncate, export, import.
    #[command(subcommand)]
    Rw(crate::kv_rw::RwCmd),
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Partitions of its ring (must match the versions built for it).
    #[arg(long, default_value_t = 8)]
    pub partitions: u32,
    /// Chunks per partition.
    #[arg(long, default_value_t = 2)]
    pub chunks: u32,
    /// Index search: binary, or interpolation (fewer probes on uncached indexes).
    #[arg(long, default_value = "binary")]
    pub search: String,
    /// Old versions kept for rollbacks.
    #[arg(long, default_value_t = 2)]
    pub keep: usize,
    #[command(flatten)]
    pub common: crate::commands::Common,
}

#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Directory `strata kv build` wrote (on the node's filesystem).
    #[arg(long)]
    pub dir: PathBuf,
    /// Version number (default: the highest present + 1).
    #[arg(long, conflicts_with = "timestamp")]
    pub version: Option<u64>,
    /// Number the version by the node's clock (UNIX seconds), as Voldemort's
    /// timestamped versions.
    #[arg(long)]
    pub timestamp: bool,
    #[command(flatten)]
    pub common: crate::commands::Common,
}

#[derive(clap::Args, Debug)]
pub struct SwapArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Version to make live.
    #[arg(long)]
    pub version: u64,
    #[command(flatten)]
    pub common: crate::commands::Common,
}

#[derive(clap::Args, Debug)]
pub struct RollbackArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Version to go back to.
    #[arg(long)]
    pub version: Option<u64>,
    /// On every node of the store's ring (from the cluster map), not just --server.
    #[arg(long)]
    pub all_nodes: bool,
    #[command(flatten)]
    pub common: crate::commands::Common,
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// The key.
    pub key: String,
    /// The key is base64url already.
    #[arg(long)]
    pub base64: bool,
    #[command(flatten)]
    pub common: crate::commands::Common,
}

fn show(common: &crate::commands::Common, v: &serde_json::Value, text: String) {
    if common.json {
        println!("{v}");
    } else {
        println!("{text}");
    }
}

#[derive(clap::Args, Debug)]
pub struct BuildArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Input file.
    #[arg(long)]
    pub input: PathBuf,
    /// Output directory (the version's chunk files and .metadata).
    #[arg(long)]
    pub out: PathBuf,
    /// Input format: csv, jsonl or parquet (default: from the extension).
    #[arg(long)]
    pub format: Option<String>,
    /// Column holding the key.
    #[arg(long, default_value = "key")]
    pub key_field: String,
    /// Column holding the value.
    #[arg(long, default_value = "value")]
    pub value_field: String,
    /// Partitions of the store's ring.
    #[arg(long, default_value_t = 8)]
    pub partitions: u32,
    /// Chunks per partition.
    #[arg(long, default_value_t = 2)]
    pub chunks: u32,
    /// Memory for records before they are sorted and spilled to disk.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub memory: u64,
    /// Keep the last value of a key given twice (default: fail, naming it).
    #[arg(long)]
    pub last_wins: bool,
    /// Build for a ring: the ring file (`strata kv ring export|plan`) gives
    /// partitions, replicas and chunks; one `node-<id>/` folder per node.
    #[arg(long, conflicts_with_all = ["partitions", "chunks"])]
    pub ring: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(cmd: KvCmd) -> Result<()> {
    use serde_json::json;
    match cmd {
        KvCmd::Build(a) => tokio::task::spawn_blocking(move || build(a)).await?,
        KvCmd::Ring(c) => crate::kv_ring::ring(c).await,
        KvCmd::Define(a) => crate::kv_ring::define(a).await,
        KvCmd::Push(a) => crate::kv_ring::push(a).await,
        KvCmd::Rebalance(a) => crate::kv_ring::rebalance(a).await,
        KvCmd::Upload(a) => crate::kv_ring::upload(a).await,
        KvCmd::Rw(c) => crate::kv_rw::run(c).await,
        KvCmd::Create(a) => {
            let v = a.common.client()?.post_json(&format!("/admin/kv/{}", a.store), &json!({ "partitions": a.partitions, "chunks": a.chunks })).await?;
            show(&a.common, &v, format!("store {} created ({} partitions, {} chunks)", a.store, a.partitions, a.chunks));
            Ok(())
        }
        KvCmd::Load(a) => {
            let dir = std::path::absolute(&a.dir)?;
            let c = a.common.client()?;
            let body = json!({ "dir": dir, "version": a.version, "timestamp": a.timestamp });
            let path = format!("/admin/kv/{}/load", a.store);
            let load = c.post_json(&path, &body);
            tokio::pin!(load);
            // A progress bar from the node's status while the load runs.
            let pb = if a.common.json { ProgressBar::hidden() } else { ProgressBar::new(0) };
            if let Ok(s) = ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}") {
                pb.set_style(s.progress_chars("=> "));
            }
            let poll = a.common.client()?;
            let v = loop {
                tokio::select! {
                    r = &mut load => break r?,
                    _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {
                        if let Ok(list) = poll.json(http::Method::GET, "/admin/kv").await
                            && let Some(p) = list.as_array().into_iter().flatten().find(|s| s["store"] == a.store.as_str()).map(|s| s["loading"].clone())
                            && !p.is_null()
                        {
                            pb.set_message(p["phase"].as_str().unwrap_or("").to_string());
                            pb.set_length(p["total"].as_u64().unwrap_or(0));
                            pb.set_position(p["copied"].as_u64().unwrap_or(0));
                        }
                    }
                }
            };
            pb.finish_and_clear();
            show(&a.common, &v, format!("loaded {} as version {} of {} (not live until swapped)", dir.display(), v["version"], a.store));
            Ok(())
        }
        KvCmd::Swap(a) => {
            let v = a.common.client()?.post_json(&format!("/admin/kv/{}/swap", a.store), &json!({ "version": a.version })).await?;
            show(&a.common, &v, format!("version {} of {} is live", a.version, a.store));
            Ok(())
        }
        KvCmd::Rollback(a) if a.all_nodes => crate::kv_ring::rollback_all(&a.store, a.version, &a.common).await,
        KvCmd::Rollback(a) => {
            let v = a.common.client()?.post_json(&format!("/admin/kv/{}/rollback", a.store), &json!({ "version": a.version })).await?;
            show(&a.common, &v, format!("rolled {} back: version {} is live", a.store, v["live"]));
            Ok(())
        }
        KvCmd::Versions(c) => {
            let v = c.client()?.json(http::Method::GET, "/admin/kv").await?;
            let mut text = format!("{:<20} {:>6} {:>10} {:>12}  VERSIONS", "STORE", "LIVE", "PARTITIONS", "RECORDS");
            for s in v.as_array().into_iter().flatten() {
                text.push_str(&format!(
                    "\n{:<20} {:>6} {:>10} {:>12}  {}",
                    s["store"].as_str().unwrap_or(""),
                    s["live"].as_u64().map_or("-".into(), |n| n.to_string()),
                    s["partitions"],
                    s["records"].as_u64().map_or("-".into(), |n| n.to_string()),
                    s["versions"]
                ));
            }
            show(&c, &v, text);
            Ok(())
        }
        KvCmd::Get(a) => {
            use base64::Engine;
            let key = if a.base64 { a.key.clone() } else { base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(a.key.as_bytes()) };
            let resp = a.common.client()?.send(http::Method::GET, &format!("/kv/{}/{key}", a.store), &[], strata_client::full(bytes::Bytes::new())).await?;
            let body = resp.bytes().await?;
            use std::io::Write;
            std::io::stdout().write_all(&body)?;
            Ok(())
        }
    }
}

fn build(a: BuildArgs) -> Result<()> {
    let ring = a.ring.as_deref().map(strata_kv::RingFile::read).transpose()?;
    if let Some(r) = &ring
        && r.store.name != a.store
    {
        anyhow::bail!("the ring file is for store {:?}, not {:?}", r.store.name, a.store);
    }
    let def = match &ring {
        Some(r) => r.store.clone(),
        None => StoreDef { name: a.store.clone(), partitions: a.partitions, replication: 1, chunks: a.chunks },
    };
    let format = InputFormat::pick(a.format.as_deref(), &a.input)?;
    let extent = extent(&a.input, format)?;
    if a.out.exists() && std::fs::read_dir(&a.out)?.next().is_some() {
        anyhow::bail!("{} is not empty: a version is built into a new directory", a.out.display());
    }
    let dup = if a.last_wins { Duplicates::LastWins } else { Duplicates::Fail };
    let t = Instant::now();
    let mut b = match ring {
        Some(r) => Builder::for_ring(&def, &a.out, dup, a.memory as usize, r.table)?,
        None => Builder::new(&def, &a.out, dup, a.memory as usize)?,
    };
    let (total, template) = match extent {
        Extent::Bytes(n) => (n, "reading [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"),
        Extent::Rows(n) => (n, "reading [{bar:40}] {human_pos}/{human_len} rows {per_sec} eta {eta}"),
    };
    let pb = if a.json { ProgressBar::hidden() } else { ProgressBar::new(total) };
    if let Ok(s) = ProgressStyle::with_template(template) {
        pb.set_style(s.progress_chars("=> "));
    }
    let (mut read_bytes, mut rows) = (0u64, 0u64);
    let mut batch = Vec::with_capacity(strata_kv::build::BATCH);
    for r in read(&a.input, format, &a.key_field, &a.value_field)? {
        let (k, v) = r?;
        read_bytes += (k.len() + v.len() + 2) as u64;
        rows += 1;
        batch.push((k, v));
        if batch.len() == strata_kv::build::BATCH {
            b.add_batch(std::mem::replace(&mut batch, Vec::with_capacity(strata_kv::build::BATCH)))?;
            pb.set_position(match extent {
                Extent::Bytes(n) => read_bytes.min(n),
                Extent::Rows(n) => rows.min(n),
            });
        }
    }
    b.add_batch(batch)?;
    pb.finish_and_clear();
    let report = b.finish()?;
    let secs = t.elapsed().as_secs_f64();
    if a.json {
        println!("{}", serde_json::json!({ "store": a.store, "out": a.out, "report": report, "seconds": secs }));
    } else {
        println!(
            "built {} for store {}: {} records, {} collided prefixes, {} runs spilled, {:.1} MB in, {:.1} MB of chunks, {:.2} s ({:.0} records/s)",
            a.out.display(),
            a.store,
            report.records,
            report.collided_prefixes,
            report.runs,
            report.input_bytes as f64 / 1e6,
            report.output_bytes as f64 / 1e6,
            secs,
            report.records as f64 / secs.max(1e-9)
        );
    }
    Ok(())
}

//! `strata tract`: the tract locator table of striped blobs (FDS) and
//! whole files written to and read from a blob's tracts, many at once.

use crate::commands::Common;
use crate::size::parse_size;
use anyhow::{Context, Result};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::json;
use std::sync::Arc;
use strata_tract::{Guid, TractClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(clap::Subcommand, Debug)]
pub enum TractCmd {
    /// Makes the cluster's tract locator table (once: the tract size is fixed for the cluster's life).
    Init(InitArgs),
    /// Shows the table: tract size, replicas, scatter width, rows with their versions and disks.
    Table(Common),
    /// Rows being re-replicated or grown: bytes copied and left on every node, MB/s; `--wait` follows until done.
    Recovery(RecoveryArgs),
    /// Runs a pass of the node's reclaimer of orphaned tracts now (of deleted blobs, or beyond a blob's size).
    Orphans(Common),
    /// Gives new disks their share of the rows (FDS growth): each moved row's new disk fills while it takes writes.
    Grow(Common),
    /// Creates a blob and writes a file into its tracts, all in flight at once up to the cluster's limit.
    Write(WriteArgs),
    /// Reads a whole blob into a file.
    Read(ReadArgs),
    /// Shows a blob's metadata: size in tracts, replication, incarnation.
    Stat(GuidArgs),
    /// Deletes a blob (its tracts become orphans).
    Delete(GuidArgs),
}

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// Bytes per tract (a power of two, 4KiB to 64MiB).
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    pub tract_size: u64,
    /// Disks per row: the most replicas a blob may have.
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Scatter width: how many other disks each disk shares rows with (what recovers its data in parallel).
    #[arg(long, default_value_t = 8)]
    pub scatter: u32,
    /// Capacity of each row's replicas.
    #[arg(long, default_value = "64GiB", value_parser = parse_size)]
    pub capacity: u64,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct WriteArgs {
    /// The file to write.
    pub file: std::path::PathBuf,
    /// The new blob's GUID (32 hex digits); a random one when absent.
    #[arg(long)]
    pub guid: Option<String>,
    /// Replicas of each tract (default: the table's row width).
    #[arg(long)]
    pub replication: Option<u8>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct RecoveryArgs {
    /// Follow the copying with a progress bar until every row has caught up.
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct GuidArgs {
    /// The blob's GUID.
    #[arg(long)]
    pub guid: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct ReadArgs {
    /// The blob's GUID.
    #[arg(long)]
    pub guid: String,
    /// Where to write it.
    #[arg(short, long)]
    pub output: std::path::PathBuf,
    #[command(flatten)]
    pub common: Common,
}

async fn client(common: &Common) -> Result<Arc<TractClient>> {
    Ok(Arc::new(TractClient::connect(std::slice::from_ref(&common.server), &common.auth.options()?).await?))
}

pub async fn run(c: TractCmd) -> Result<()> {
    match c {
        TractCmd::Init(a) => {
            let seed: u64 = rand::random();
            let cmd = json!({ "TractInit": { "tract_bytes": a.tract_size, "replicas": a.replicas, "scatter": a.scatter, "capacity_bytes": a.capacity, "seed": seed } });
            let out = crate::cluster::propose(&a.common, cmd).await?;
            let rows = out["PartitionsAdded"]["ids"].as_array().map_or(0, Vec::len);
            if a.common.json {
                println!("{out}");
            } else {
                println!(
                    "tract locator table: {rows} rows of {} disks, tracts of {} bytes (epoch {})",
                    a.replicas, a.tract_size, out["PartitionsAdded"]["epoch"]
                );
            }
        }
        TractCmd::Recovery(a) => recovery(a).await?,
        TractCmd::Orphans(common) => {
            let v = common.client()?.post_json("/admin/tracts/orphans", &json!({})).await?;
            if common.json {
                println!("{v}");
            } else {
                println!("{} tract versions listed on {} rows, {} blobs checked, {} reclaimed", v["tracts"], v["rows"], v["blobs"], v["reclaimed"]);
                for e in v["errors"].as_array().into_iter().flatten() {
                    println!("  kept: {}", e.as_str().unwrap_or("?"));
                }
            }
        }
        TractCmd::Grow(common) => {
            let now = strata_types::Clock::now_ms(&strata_types::SystemClock);
            let out = crate::cluster::propose(&common, json!({ "TractGrow": { "now_ms": now } })).await?;
            let rows = out["PartitionsAdded"]["ids"].as_array().map_or(0, Vec::len);
            if common.json {
                println!("{out}");
            } else {
                println!("{rows} rows move to disks below their share (strata tract table shows them filling)");
            }
        }
        TractCmd::Table(common) => {
            let v = common.client()?.json(http::Method::GET, "/admin/tracts").await?;
            if common.json {
                println!("{v}");
                return Ok(());
            }
            println!(
                "tracts of {} bytes, {} disks per row, scatter width {}, {} in flight per client",
                v["tract_bytes"], v["replicas"], v["scatter"], v["simultaneous_limit"]
            );
            println!("{:>10} {:>8}  disks", "row", "version");
            for r in v["rows"].as_array().into_iter().flatten() {
                let disks: Vec<&str> = r["disks"].as_array().into_iter().flatten().filter_map(|d| d.as_str()).collect();
                let filling = r["filling"].as_str().map(|f| format!(" (filling {f})")).unwrap_or_default();
                println!("{:>10} {:>8}  {}{filling}", r["partition"], r["version"], disks.join(" "));
            }
        }
        TractCmd::Write(a) => {
            let guid = match &a.guid {
                Some(g) => Guid::parse(g)?,
                None => Guid::random(),
            };
            let c = client(&a.common).await?;
            let tract = c.tract_bytes()?;
            let mut f = tokio::fs::File::open(&a.file).await.with_context(|| format!("opening {}", a.file.display()))?;
            let len = f.metadata().await?.len();
            let tracts = len.div_ceil(tract);
            c.create_blob(&guid, a.replication).await?;
            let blob = c.extend_blob(&guid, tracts).await?;
            let first = blob.size_tracts - tracts;
            let bar = crate::commands::bar(len, "writing");
            let mut writes = futures_util::stream::FuturesUnordered::new();
            for i in first..blob.size_tracts {
                let mut buf = vec![0u8; tract.min(len - (i - first) * tract) as usize];
                f.read_exact(&mut buf).await.with_context(|| format!("reading {}", a.file.display()))?;
                // Hold no more tracts in memory than can be in flight.
                while writes.len() >= c.simultaneous_limit() {
                    if let Some(r) = writes.next().await {
                        bar.inc(r?);
                    }
                }
                let (c, data) = (c.clone(), Bytes::from(buf));
                writes.push(async move { c.write_tract(&blob, i, data.clone()).await.map(|_| data.len() as u64) });
            }
            while let Some(r) = writes.next().await {
                bar.inc(r?);
            }
            bar.finish_and_clear();
            println!("{guid} {tracts} tracts ({len} bytes)");
        }
        TractCmd::Read(a) => {
            let guid = Guid::parse(&a.guid)?;
            let c = client(&a.common).await?;
            let blob = c.open_blob(&guid).await?;
            let mut out = tokio::fs::File::create(&a.output).await.with_context(|| format!("creating {}", a.output.display()))?;
            let bar = crate::commands::bar(blob.size_tracts * c.tract_bytes()?, "reading");
            // In flight out of order; written in order.
            let mut reads = futures_util::stream::iter((0..blob.size_tracts).map(|i| {
                let c = c.clone();
                async move { c.read_tract(&blob, i).await.with_context(|| format!("tract {i}")) }
            }))
            .buffered(c.simultaneous_limit());
            let mut total = 0u64;
            while let Some(r) = reads.next().await {
                let data = r?;
                out.write_all(&data).await?;
                total += data.len() as u64;
                bar.inc(data.len() as u64);
            }
            out.sync_all().await?;
            bar.finish_and_clear();
            println!("{total} bytes");
        }
        TractCmd::Stat(a) => {
            let blob = client(&a.common).await?.open_blob(&Guid::parse(&a.guid)?).await?;
            if a.common.json {
                println!(
                    "{}",
                    json!({ "guid": a.guid, "size_tracts": blob.size_tracts, "replication": blob.replication, "incarnation": blob.incarnation, "created_ms": blob.created_ms })
                );
            } else {
                println!("{}: {} tracts, {} replicas, incarnation {}", blob.guid, blob.size_tracts, blob.replication, blob.incarnation);
            }
        }
        TractCmd::Delete(a) => {
            client(&a.common).await?.delete_blob(&Guid::parse(&a.guid)?).await?;
            println!("deleted {}", a.guid);
        }
    }
    Ok(())
}

/// Every node's filling row replicas: (rows moving in the map, bytes
/// copied, bytes to copy, the rows as JSON).
async fn fills(c: &TractClient, common: &Common) -> Result<(usize, u64, u64, Vec<serde_json::Value>)> {
    c.refresh().await?;
    let map = c.map();
    let moving = map.partitions.values().filter(|p| p.kind == strata_cluster::PartitionKind::Tract && p.moving.is_some()).count();
    let scheme = if common.server.starts_with("https") { "https" } else { "http" };
    let opts = common.auth.options()?;
    let (mut copied, mut total, mut rows) = (0u64, 0u64, Vec::new());
    for n in map.nodes.values().filter(|n| n.state.is_up()) {
        let node = strata_client::Client::with_options(&format!("{scheme}://{}", n.addr), &opts);
        let Ok(v) = node.json(http::Method::GET, "/admin/tracts/recovery").await else { continue };
        for r in v.as_array().into_iter().flatten() {
            let got = r["copied_bytes"].as_u64().unwrap_or(0);
            copied += got;
            total += r["source_bytes"].as_u64().unwrap_or(got).max(got);
            rows.push(r.clone());
        }
    }
    Ok((moving, copied, total, rows))
}

async fn recovery(a: RecoveryArgs) -> Result<()> {
    let c = client(&a.common).await?;
    let (moving, copied, total, rows) = fills(&c, &a.common).await?;
    if !a.wait {
        if a.common.json {
            println!("{}", json!({ "rows_moving": moving, "copied_bytes": copied, "source_bytes": total, "rows": rows }));
        } else {
            println!("{moving} rows moving; {copied} of {total} bytes copied into their new replicas ({} left)", total.saturating_sub(copied));
            for r in &rows {
                println!(
                    "  row {} {} -> {}: {} of {} bytes",
                    r["partition"],
                    r["from"].as_str().unwrap_or("?"),
                    r["to"].as_str().unwrap_or("?"),
                    r["copied_bytes"],
                    r["source_bytes"]
                );
            }
        }
        return Ok(());
    }
    let bar = indicatif::ProgressBar::new(total.max(1));
    if let Ok(style) = indicatif::ProgressStyle::with_template("recovering [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    loop {
        let (moving, copied, total, _) = fills(&c, &a.common).await?;
        bar.set_length(total.max(copied).max(1));
        bar.set_position(copied);
        bar.set_message(format!("{moving} rows moving"));
        if moving == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    bar.finish_and_clear();
    println!("every row has caught up");
    Ok(())
}

//! `strata bench events`: what change capture costs. Two single-node
//! servers on the same filesystem, one with no event target and one with
//! a target of every event (a JSON-lines file on the same disk, fsync'd
//! before each stored position, or a Kafka topic with `--kafka`), take the same PUT phases
//! over S3 and the native API, alternating which goes first; the table
//! gives each "on" figure over its "off" one, with the limit (at
//! most 10% slower) and a verdict. After each "on" phase the bench waits
//! for every event to be delivered, and at the end checks the target holds
//! at least one event per acknowledged PUT.

use crate::bench::{percentile, phase};
use crate::bench_s3::{Target as S3Server, start_strata};
use crate::size::parse_size;
use anyhow::{Context, Result};
use bytes::Bytes;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct BenchEventsArgs {
    /// Directory for both servers' data (removed afterwards).
    #[arg(long, default_value = "./strata-bench-events")]
    pub dir: PathBuf,
    /// Object sizes.
    #[arg(long, value_delimiter = ',', default_value = "4KiB,1MiB", value_parser = parse_size)]
    pub sizes: Vec<u64>,
    /// Client concurrency.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Seconds per PUT phase.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Rounds per cell (the median ratio is shown), alternating which server goes first.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Send the events to this Kafka cluster (host:port) instead of a file.
    #[arg(long)]
    pub kafka: Option<String>,
    /// The most "on" may cost, in percent of "off"'s PUTs/s.
    #[arg(long, default_value_t = 10.0)]
    pub limit_percent: f64,
    /// Keep the data directory.
    #[arg(long)]
    pub keep: bool,
}

#[derive(Clone, serde::Serialize)]
struct Row {
    api: &'static str,
    size: u64,
    on: bool,
    ops: u64,
    per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    drain_ms: f64,
}

pub async fn run(a: BenchEventsArgs) -> Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let r = run_in(&a).await;
    if !a.keep {
        let _ = std::fs::remove_dir_all(&a.dir);
    }
    r
}

fn admin(s: &S3Server) -> Result<strata_client::Client> {
    let url = s.admin.as_deref().context("the server printed no HTTP address")?;
    Ok(strata_client::Client::with_options(url, &strata_client::ClientOptions { credentials: Some(s.client.creds.clone()), ..Default::default() }))
}

/// Waits until the "on" server's targets have every event; returns how long that took.
async fn drained(c: &strata_client::Client) -> Result<f64> {
    let t = Instant::now();
    loop {
        let st = c.json(http::Method::GET, "/admin/events").await?;
        let names = st["targets"].as_array().into_iter().flatten().all(|t| t["pending"] == 0);
        let blobs = st["blob_senders"].as_array().into_iter().flatten().all(|t| t["pending"] == 0);
        if names && blobs {
            return Ok(t.elapsed().as_secs_f64() * 1000.0);
        }
        anyhow::ensure!(t.elapsed() < Duration::from_secs(120), "events were not delivered within 2 minutes: {st}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One PUT phase; returns its count, seconds, latencies and what it wrote
/// (S3 paths or blob ids), so large cells can be cleared.
async fn put_phase(s: &S3Server, api: &'static str, conc: usize, secs: f64, data: Bytes, tag: String) -> Result<(u64, f64, Vec<u64>, Vec<String>)> {
    let written = Arc::new(Mutex::new(Vec::new()));
    let w2 = written.clone();
    let (n, elapsed, lat) = match api {
        "s3" => {
            let client = s.client.clone();
            phase(conc, secs, move |w, i| {
                let (client, data, path, written) = (client.clone(), data.clone(), format!("/bench/{tag}/w{w}/{i}"), w2.clone());
                async move {
                    client.call(http::Method::PUT, &path, data).await?;
                    written.lock().unwrap_or_else(|p| p.into_inner()).push(path);
                    Ok(())
                }
            })
            .await?
        }
        _ => {
            let client = admin(s)?;
            phase(conc, secs, move |_, _| {
                let (client, data, written) = (client.clone(), data.clone(), w2.clone());
                async move {
                    let put = client.put_bytes(data, &strata_client::PutArgs::default()).await?;
                    written.lock().unwrap_or_else(|p| p.into_inner()).push(put.id);
                    Ok(())
                }
            })
            .await?
        }
    };
    let written = std::mem::take(&mut *written.lock().unwrap_or_else(|p| p.into_inner()));
    Ok((n, elapsed, lat, written))
}

/// Deletes what a phase wrote and compacts, so large cells do not fill the disk.
async fn clear(s: &S3Server, api: &'static str, written: Vec<String>) -> Result<()> {
    let items = Arc::new(written);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let native = admin(s)?;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (client, native, items, next) = (s.client.clone(), native.clone(), items.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else { return Ok::<_, anyhow::Error>(()) };
                if api == "s3" {
                    client.call(http::Method::DELETE, item, Bytes::new()).await?;
                } else {
                    native.delete(item).await?;
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    native.json(http::Method::POST, "/admin/compact").await.context("compaction")?;
    Ok(())
}

async fn run_in(a: &BenchEventsArgs) -> Result<()> {
    let off = start_strata(&a.dir.join("off"), &[])?;
    let on = start_strata(&a.dir.join("on"), &[])?;
    let events_file = a.dir.join("events.jsonl");
    let spec = match &a.kafka {
        Some(brokers) => serde_json::json!({ "kind": "kafka", "brokers": brokers, "topic": "strata-bench-events" }),
        None => serde_json::json!({ "kind": "file", "path": std::path::absolute(&events_file)? }),
    };
    let on_admin = admin(&on)?;
    crate::identity::send_json(&on_admin, http::Method::PUT, "/admin/events/targets/bench", serde_json::json!({ "spec": spec, "all": true }))
        .await
        .context("adding the event target")?;
    for s in [&off, &on] {
        s.client.call(http::Method::PUT, "/bench", Bytes::new()).await.context("creating the bucket")?;
    }
    // Both servers fault their tail caches in at start, on idle CPU but
    // with host faults that slow the other server's phases on a VM: measure
    // only once both are done (the other benchmarks wait the same way).
    for s in [&off, &on] {
        crate::bench_s3::warmed_up(s).await?;
    }
    // The senders start within the node's reconcile period.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut rows = Vec::new();
    let mut acked_on = 0u64;
    for api in ["s3", "native"] {
        for &size in &a.sizes {
            let data = Bytes::from((0..size).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect::<Vec<u8>>());
            let mut cell = Vec::new();
            for round in 0..a.rounds.max(1) {
                let order = if round % 2 == 0 { [(&off, false), (&on, true)] } else { [(&on, true), (&off, false)] };
                for (s, is_on) in order {
                    let which = if is_on { "on" } else { "off" };
                    eprintln!("{api} PUT {} x{} events {which} (round {})...", crate::size::format_size(size), a.concurrency, round + 1);
                    let tag = format!("{api}-{size}-r{round}");
                    let (n, secs, lat, written) = put_phase(s, api, a.concurrency, a.seconds, data.clone(), tag).await?;
                    let drain_ms = if is_on { drained(&on_admin).await? } else { 0.0 };
                    if size >= 1 << 20 {
                        clear(s, api, written).await?;
                        if is_on {
                            // The deletes' events, before the next phase.
                            drained(&on_admin).await?;
                        }
                    }
                    if is_on {
                        acked_on += n;
                    }
                    let per_s = n as f64 / secs;
                    eprintln!(
                        "  {per_s:.0} PUTs/s, p50 {:.2} ms{}",
                        percentile(&lat, 0.5),
                        if is_on { format!(", delivered {drain_ms:.0} ms after") } else { String::new() }
                    );
                    cell.push(Row { api, size, on: is_on, ops: n, per_s, p50_ms: percentile(&lat, 0.5), p99_ms: percentile(&lat, 0.99), drain_ms });
                }
            }
            // Each round's two phases run back to back: their ratio cancels
            // the drift across rounds (the log and index grow, the page
            // cache fills) that the medians of each server alone keep.
            let mut ratios: Vec<f64> =
                cell.chunks(2).map(|p| if p[0].on { p[0].per_s / p[1].per_s.max(1e-9) } else { p[1].per_s / p[0].per_s.max(1e-9) }).collect();
            ratios.sort_by(f64::total_cmp);
            let median = |v: &[f64]| {
                if v.is_empty() {
                    0.0
                } else if v.len() % 2 == 1 {
                    v[v.len() / 2]
                } else {
                    (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
                }
            };
            let mut pair = Vec::new();
            for is_on in [false, true] {
                let mut mine: Vec<Row> = cell.iter().filter(|r| r.on == is_on).cloned().collect();
                mine.sort_by(|x, y| x.per_s.total_cmp(&y.per_s));
                if let Some(m) = mine.get(mine.len() / 2) {
                    pair.push(m.clone());
                }
            }
            if let [off, on] = &pair[..] {
                rows.push((off.clone(), on.clone(), median(&ratios), ratios.first().copied().unwrap_or(0.0), ratios.last().copied().unwrap_or(0.0)));
            }
        }
    }
    let st = on_admin.json(http::Method::GET, "/admin/events").await?;
    let delivered: u64 = st["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(st["blob_senders"].as_array().into_iter().flatten())
        .map(|t| t["delivered"].as_u64().unwrap_or(0))
        .sum();
    println!("Change capture's cost: PUTs/s with a target of every event over PUTs/s with none, single node, data in {}", a.dir.display());
    println!(
        "target: {}; {} rounds of {}s at concurrency {}, each an off and an on phase back to back (alternating which first); limit: at most {}% slower",
        a.kafka.as_ref().map_or_else(|| "a JSON-lines file on the same disk, fsync'd before each stored position".to_owned(), |k| format!("Kafka at {k}")),
        a.rounds.max(1),
        a.seconds,
        a.concurrency,
        a.limit_percent
    );
    println!("PUT/s and p99 (ms): each server's median round; on/off: the median of the rounds' ratios (range: their lowest and highest)");
    println!(
        "{:<7} {:>7} {:>10} {:>10} {:>8} {:>13} {:>9} {:>9} {:>10} {:>8}",
        "api", "size", "off PUT/s", "on PUT/s", "on/off", "range", "off p99", "on p99", "drained ms", "verdict"
    );
    let mut failed = false;
    for (off, on, ratio, low, high) in &rows {
        let ok = *ratio >= 1.0 - a.limit_percent / 100.0;
        failed |= !ok;
        println!(
            "{:<7} {:>7} {:>10.0} {:>10.0} {:>7.2}x {:>6.2}-{:>5.2}x {:>9.2} {:>9.2} {:>10.0} {:>8}",
            off.api,
            crate::size::format_size(off.size),
            off.per_s,
            on.per_s,
            ratio,
            low,
            high,
            off.p99_ms,
            on.p99_ms,
            on.drain_ms,
            if ok { "PASS" } else { "FAIL" }
        );
    }
    println!(
        "events delivered to the target: {delivered} for {acked_on} acknowledged PUTs on the \"on\" server (S3 PUTs make a names event and one per data blob)"
    );
    anyhow::ensure!(delivered >= acked_on, "the target got fewer events ({delivered}) than PUTs were acknowledged ({acked_on})");
    anyhow::ensure!(!failed, "change capture cost more than {}% on some row", a.limit_percent);
    Ok(())
}

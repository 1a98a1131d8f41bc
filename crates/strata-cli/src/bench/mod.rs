//! `strata bench`: PUT and GET over loopback against a real server, beside
//! this machine's limits measured in the same run (fsync'd sequential write
//! and O_DIRECT read of the data directory's filesystem, loopback TCP), so
//! every figure is also a ratio to what the hardware allows.

mod limits;
mod load;

pub(crate) use limits::{MB, disk_direct_limit, disk_limits, disk_read_limit, disk_write_bytes, disk_write_limit, loopback_for, loopback_limit};
pub(crate) use load::{RawGetter, percentile, phase, tail_cache_gauges, wait_for_tail_cache};

use crate::server::{ServerArgs, open_node};
use crate::size::{format_size, parse_size};
use anyhow::{Context, Result};
use bytes::Bytes;
use rand::RngCore;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use strata_client::{Client, PutArgs};

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// Another benchmark instead of the blob API's.
    #[command(subcommand)]
    pub what: Option<BenchWhat>,
    /// Directory for the benchmark's data (removed afterwards); its filesystem is the one measured.
    #[arg(long, default_value = "./strata-bench-data")]
    pub data_dir: PathBuf,
    /// Blob sizes.
    #[arg(long, value_delimiter = ',', default_value = "4KiB,64KiB,1MiB,16MiB", value_parser = parse_size)]
    pub sizes: Vec<u64>,
    /// Client concurrencies.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub concurrency: Vec<usize>,
    /// Seconds per PUT or GET phase.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Seconds of each loopback TCP probe (one before every GET row).
    #[arg(long, default_value_t = 1.0)]
    pub net_probe_seconds: f64,
    /// Partitions of the benchmarked node.
    #[arg(long, default_value_t = 4)]
    pub partitions: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Keep the data directory.
    #[arg(long)]
    pub keep: bool,
    /// Also measure what authentication and TLS cost: the same rows against
    /// nodes with authentication off, with SigV4, and with SigV4 over TLS,
    /// taking turns, and print the ratios.
    #[arg(long)]
    pub security_cost: bool,
    /// Rounds of the security-cost comparison (the median round is shown).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

/// Benchmarks besides the blob API's.
#[derive(clap::Subcommand, Debug)]
pub enum BenchWhat {
    /// S3 PUT/GET against MinIO on the same filesystem, with our own SigV4 load generator.
    S3(crate::bench_s3::BenchS3Args),
    /// What change capture costs: PUTs/s over S3 and the native API with a target of every event and with none.
    Events(crate::bench_events::BenchEventsArgs),
    /// How fast the web console's pages answer on a node holding many objects (p99 against a limit).
    Console(crate::bench_console::BenchConsoleArgs),
    /// Every benchmark with a floor (native, S3 against MinIO, cluster,
    /// key-value against SQLite), and one table of verdicts.
    All(crate::bench_all::BenchAllArgs),
}

struct Limits {
    /// Single-stream fsync'd sequential write: the limit PUTs are measured against.
    disk_write_mbps: f64,
    /// The same split over one stream per partition, for information.
    disk_write_parallel_mbps: f64,
    disk_read_mbps: f64,
    /// Best of `loopback_one` and `loopback_many`: the limit GETs are measured against.
    loopback_mbps: f64,
    loopback_one: f64,
    loopback_many: f64,
    streams_max: usize,
}

#[derive(serde::Serialize)]
struct Row {
    op: &'static str,
    size: u64,
    concurrency: usize,
    ops: u64,
    ops_per_sec: f64,
    mb_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    limit: &'static str,
    limit_mb_per_sec: f64,
    ratio_to_limit: f64,
}

pub async fn run(a: BenchArgs) -> Result<()> {
    match a.what {
        Some(BenchWhat::S3(s3)) => return crate::bench_s3::run(s3).await,
        Some(BenchWhat::Events(e)) => return crate::bench_events::run(e).await,
        Some(BenchWhat::Console(c)) => return crate::bench_console::run(c).await,
        Some(BenchWhat::All(all)) => return crate::bench_all::run(all).await,
        None => {}
    }
    std::fs::create_dir_all(&a.data_dir).with_context(|| format!("creating {}", a.data_dir.display()))?;
    let probe_dir = a.data_dir.clone();
    let secs = a.seconds;
    let streams = a.partitions.max(1) as usize;
    eprintln!("measuring the disk (fsync'd sequential write by 1 and {streams} streams, O_DIRECT read) ...");
    let (disk_write_mbps, disk_write_parallel_mbps, disk_read_mbps) = tokio::task::spawn_blocking(move || disk_limits(&probe_dir, secs, streams)).await??;
    eprintln!("measuring loopback TCP ...");
    // For the header only; each GET row gets its own probe, taken right before it.
    let streams_max = a.concurrency.iter().copied().max().unwrap_or(1).max(1);
    let loopback_one = loopback_limit(a.net_probe_seconds, 1).await?;
    let loopback_many = loopback_limit(a.net_probe_seconds, streams_max).await?;
    let loopback_mbps = loopback_one.max(loopback_many);
    let limits = Limits { disk_write_mbps, disk_write_parallel_mbps, disk_read_mbps, loopback_mbps, loopback_one, loopback_many, streams_max };

    let target = Target::start(&a.data_dir.join("node"), a.partitions, Security::SigV4, None).await?;
    let mut rows = Vec::new();
    for &size in &a.sizes {
        for &conc in &a.concurrency {
            let get_limit = |conc| loopback_for(conc, a.net_probe_seconds);
            rows.extend(target.rows(size, conc, a.seconds, limits.disk_write_mbps, get_limit).await?);
        }
    }
    let conc_max = a.concurrency.iter().copied().max().unwrap_or(1);
    if let Some(cold) = target.cold_row(1 << 20, conc_max, a.seconds, limits.disk_read_mbps).await? {
        rows.push(cold);
    }
    target.stop().await?;
    // The next measurements start from an empty disk.
    let _ = std::fs::remove_dir_all(a.data_dir.join("node"));
    if a.security_cost {
        let cost = security_cost(&a).await?;
        if !a.keep {
            let _ = std::fs::remove_dir_all(&a.data_dir);
        }
        report(&a, &limits, &rows);
        report_security(&a, &cost);
        return Ok(());
    }
    if !a.keep {
        let _ = std::fs::remove_dir_all(&a.data_dir);
    }
    report(&a, &limits, &rows);
    Ok(())
}

/// How a benchmarked server authenticates and what its port speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) enum Security {
    /// `--auth off`, plain HTTP: the baseline of the cost.
    Off,
    /// Every request signed and checked (the default), plain HTTP.
    SigV4,
    /// Signed and checked, over TLS (no sendfile: bytes are encrypted in user space).
    Tls,
}

impl Security {
    fn name(self) -> &'static str {
        match self {
            Self::Off => "auth off",
            Self::SigV4 => "SigV4",
            Self::Tls => "SigV4+TLS",
        }
    }
}

/// An in-process node under load, and its clients.
pub(crate) struct Target {
    addr: std::net::SocketAddr,
    client: Client,
    signer: Option<Arc<strata_auth::Signer>>,
    tls: Option<Arc<rustls::ClientConfig>>,
    store: Arc<strata_engine::Store>,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Bytes of recent writes the node keeps in memory: its tail cache and
    /// its page-cache window.
    cache_bytes: u64,
    /// Bytes PUT so far.
    written: std::sync::atomic::AtomicU64,
    /// Each PUT phase's blobs, by (size, concurrency), with `written` at
    /// its end.
    phases: std::sync::Mutex<Vec<PutPhase>>,
}

/// A PUT phase's (size, concurrency), the bytes PUT by its end, its blobs.
type PutPhase = ((u64, usize), u64, Arc<Vec<String>>);

/// What a "page-cached" GET row reads: the blobs written last, up to this
/// many bytes (or a quarter of the node's cache, if smaller), the recent
/// blobs a blob store serves from memory (Ambry §2.2). Reading the whole
/// PUT phase instead would read more than any cache holds once the disk
/// is fast: the cold row measures that, against the disk.
const HOT_BYTES: u64 = 1 << 30;

impl Target {
    /// A node with `partitions` in `dir` (wiped), authenticating as
    /// `security` says; `tail_cache` overrides the default tail cache.
    pub(crate) async fn start(dir: &Path, partitions: u64, security: Security, tail_cache: Option<&str>) -> Result<Self> {
        let mut server_args = ServerArgs { partitions, ..ServerArgs::for_bench(dir.to_owned()) };
        if let Some(t) = tail_cache {
            server_args.tail_cache = t.into();
        }
        if security == Security::Off {
            server_args.auth = "off".into();
        }
        let _ = std::fs::remove_dir_all(&server_args.data_dir);
        let engine = server_args.engine_config()?;
        let cache_bytes = engine.tail_cache_bytes + engine.write_cache_bytes;
        let (store, router) = open_node(&server_args)?;
        wait_for_tail_cache("strata", || async { Ok(store.tail_cache_stats().map_or((0, 0), |t| (t.ready, t.capacity))) }).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let kv = strata_server::KvStores::open(server_args.data_dir.join("kv"))?;
        let (mut ids, creds) = crate::server::bench_identities(&server_args.data_dir, addr).await?;
        ids.config = server_args.auth_config(addr)?;
        let state = strata_server::AppState::new(router, strata_node::Disks::single(store.clone()), kv, ids, strata_node::Workers::new());
        let (server_tls, tls) = if security == Security::Tls {
            let (cert, key) = strata_auth::tls::self_signed(&["127.0.0.1".into()])?;
            let (cert_path, key_path) = (dir.join("bench-cert.pem"), dir.join("bench-key.pem"));
            std::fs::write(&cert_path, &cert)?;
            std::fs::write(&key_path, &key)?;
            let identity = strata_auth::Identity::from_pem_files(&cert_path, &key_path)?;
            let roots = strata_auth::tls::roots_from_pem(cert.as_bytes(), "the benchmark's certificate")?;
            (Some(strata_auth::tls::server_config(Some(&identity), None)?), Some(strata_auth::tls::client_config(roots, None)?))
        } else {
            (None, None)
        };
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(strata_server::serve(listener, state, strata_server::limits::Limits::default(), server_tls, async move {
            let _ = stop_rx.await;
        }));
        let signed = security != Security::Off;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let opts = strata_client::ClientOptions { credentials: signed.then(|| creds.clone()), tls: tls.clone(), ..Default::default() };
        let client = Client::with_options(&format!("{scheme}://{addr}"), &opts);
        let signer = signed.then(|| Arc::new(strata_auth::Signer::new(creds, "us-east-1", strata_auth::SERVICE)));
        Ok(Self { addr, client, signer, tls, store, stop, server, cache_bytes, written: Default::default(), phases: Default::default() })
    }

    /// PUT then GET of `size` bytes by `conc` clients, `secs` each; GET's
    /// limit comes from `get_limit` right before it.
    async fn rows<F, Fut>(&self, size: u64, conc: usize, secs: f64, put_limit: f64, get_limit: F) -> Result<Vec<Row>>
    where
        F: FnOnce(usize) -> Fut,
        Fut: std::future::Future<Output = Result<f64>>,
    {
        let mut payload = vec![0u8; size as usize];
        rand::rng().fill_bytes(&mut payload);
        let payload = Bytes::from(payload);
        eprintln!("PUT {} x{conc} ...", format_size(size));
        let ids = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (c, p, i2) = (self.client.clone(), payload.clone(), ids.clone());
        let (n, took, lat) = phase(conc, secs, move |_, _| {
            let (c, p, ids) = (c.clone(), p.clone(), i2.clone());
            async move {
                let r = c.put_bytes(p, &PutArgs::default()).await?;
                ids.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.push(r.id);
                Ok(())
            }
        })
        .await?;
        let put = row("PUT", size, conc, n, took, &lat, "disk write", put_limit);
        let ids: Arc<Vec<String>> = Arc::new(std::mem::take(&mut *ids.lock().map_err(|_| anyhow::anyhow!("poisoned"))?));
        let written = self.written.fetch_add(ids.len() as u64 * size, std::sync::atomic::Ordering::Relaxed) + ids.len() as u64 * size;
        self.phases.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.push(((size, conc), written, ids.clone()));
        // The GET phase reads the blobs written last (see HOT_BYTES).
        let hot = (HOT_BYTES.min(self.cache_bytes / 4) / size.max(1)).max(1) as usize;
        let ids: Arc<Vec<String>> = Arc::new(ids[ids.len().saturating_sub(hot)..].to_vec());
        let limit = get_limit(conc).await?;
        eprintln!("GET {} x{conc} (loopback now {limit:.0} MB/s) ...", format_size(size));
        let (n, took, lat) = self.get_phase(ids, size, conc, secs, |w, i, _| w + i * 7919).await?;
        Ok(vec![put, row("GET", size, conc, n, took, &lat, "loopback", limit)])
    }

    /// `conc` raw GET clients reading `ids` for `secs`; the `w`th client's
    /// `i`th read takes the blob at `pick(w, i, conc)` (modulo the count).
    async fn get_phase(
        &self,
        ids: Arc<Vec<String>>,
        size: u64,
        conc: usize,
        secs: f64,
        pick: fn(usize, usize, usize) -> usize,
    ) -> Result<(u64, f64, Vec<u64>)> {
        let mut getters = Vec::with_capacity(conc);
        for _ in 0..conc {
            getters.push(Arc::new(tokio::sync::Mutex::new(RawGetter::connect_with(self.addr, self.signer.clone(), self.tls.clone()).await?)));
        }
        let getters = Arc::new(getters);
        phase(conc, secs, move |w, i| {
            let (getters, ids) = (getters.clone(), ids.clone());
            async move {
                let id = &ids[pick(w, i as usize, conc) % ids.len()];
                let n = getters[w].lock().await.get(id).await?;
                anyhow::ensure!(n == size, "short read: {n} of {size} bytes");
                Ok(())
            }
        })
        .await
    }

    /// GETs of blobs out of every cache: the blobs of the PUT phase of
    /// (`size`, `conc`), once more than the node's caches have been written
    /// after them (filler blobs are written first if the later rows did not
    /// write that much), read by `conc` clients for `secs`, against the
    /// disk's O_DIRECT read limit. None if that phase did not run.
    async fn cold_row(&self, size: u64, conc: usize, secs: f64, limit: f64) -> Result<Option<Row>> {
        let found = self.phases.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.iter().find(|(k, _, _)| *k == (size, conc)).cloned();
        let Some((_, end, ids)) = found else { return Ok(None) };
        if ids.is_empty() {
            return Ok(None);
        }
        let since = self.written.load(std::sync::atomic::Ordering::Relaxed) - end;
        let need = (self.cache_bytes + (512 << 20)).saturating_sub(since);
        if need > 0 {
            eprintln!("writing {} more so the {} blobs are out of every cache ...", format_size(need), format_size(size));
            let mut payload = vec![0u8; 1 << 20];
            rand::rng().fill_bytes(&mut payload);
            let payload = Bytes::from(payload);
            let count = need.div_ceil(1 << 20);
            let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let mut tasks = Vec::new();
            for _ in 0..16 {
                let (c, p, next) = (self.client.clone(), payload.clone(), next.clone());
                tasks.push(tokio::spawn(async move {
                    while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < count {
                        c.put_bytes(p.clone(), &PutArgs::default()).await?;
                    }
                    Ok::<_, anyhow::Error>(())
                }));
            }
            for t in tasks {
                t.await??;
            }
            self.written.fetch_add(count << 20, std::sync::atomic::Ordering::Relaxed);
        }
        eprintln!("GET {} x{conc}, cold (disk O_DIRECT read {limit:.0} MB/s) ...", format_size(size));
        // Each read a different blob, in a scattered order, none twice
        // unless the phase outlasts the set.
        let (n, took, lat) = self.get_phase(ids, size, conc, secs, |w, i, conc| (i * conc + w).wrapping_mul(7919)).await?;
        Ok(Some(row("GET", size, conc, n, took, &lat, COLD, limit)))
    }

    async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        let _ = self.server.await;
        let s = self.store.clone();
        tokio::task::spawn_blocking(move || s.close()).await?;
        Ok(())
    }
}

/// One cell of the security-cost table: a row's ops/s under each mode
/// (the median of the rounds).
#[derive(serde::Serialize)]
struct CostRow {
    op: &'static str,
    size: u64,
    concurrency: usize,
    ops_per_sec: Vec<(Security, f64)>,
}

/// `--security-cost`: the same rows against nodes with authentication
/// off, with SigV4, and with SigV4 over TLS, taking turns for `--rounds`
/// rounds so a noisy stretch of the machine hits all three; the median
/// round of each. Each turn starts from an empty node (and removes it), so
/// the rounds do not fill the disk.
async fn security_cost(a: &BenchArgs) -> Result<Vec<CostRow>> {
    let modes = [Security::Off, Security::SigV4, Security::Tls];
    let mut samples: std::collections::BTreeMap<(&'static str, u64, usize, usize), Vec<f64>> = Default::default();
    for round in 0..a.rounds.max(1) {
        for (i, m) in modes.iter().enumerate() {
            eprintln!("round {} of {}: {} ...", round + 1, a.rounds.max(1), m.name());
            let dir = a.data_dir.join("cost");
            let t = Target::start(&dir, a.partitions, *m, Some("512MiB")).await?;
            for &size in &a.sizes {
                for &conc in &a.concurrency {
                    for r in t.rows(size, conc, a.seconds, 1.0, |_| async { Ok(1.0) }).await? {
                        samples.entry((r.op, size, conc, i)).or_default().push(r.ops_per_sec);
                    }
                }
            }
            t.stop().await?;
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let mut rows = Vec::new();
    for &size in &a.sizes {
        for &conc in &a.concurrency {
            for op in ["PUT", "GET"] {
                let ops = modes.iter().enumerate().map(|(i, m)| (*m, median(samples.remove(&(op, size, conc, i)).unwrap_or_default()))).collect();
                rows.push(CostRow { op, size, concurrency: conc, ops_per_sec: ops });
            }
        }
    }
    Ok(rows)
}

fn report_security(a: &BenchArgs, rows: &[CostRow]) {
    if a.json {
        println!("{}", serde_json::json!({ "security_cost": rows }));
        return;
    }
    println!();
    println!("cost of authentication and TLS (same run, {} rounds of {} s, median round; ratios to auth off):", a.rounds.max(1), a.seconds);
    println!("| op  | size  | conc | auth off ops/s | SigV4 ops/s | SigV4+TLS ops/s | SigV4/off | TLS/off |");
    println!("|-----|-------|------|----------------|-------------|-----------------|-----------|---------|");
    for r in rows {
        let get = |m: Security| r.ops_per_sec.iter().find(|(x, _)| *x == m).map_or(0.0, |(_, v)| *v);
        let (off, sig, tls) = (get(Security::Off), get(Security::SigV4), get(Security::Tls));
        let ratio = |x: f64| if off > 0.0 { x / off } else { 0.0 };
        println!(
            "| {:<3} | {:<5} | {:>4} | {off:>14.0} | {sig:>11.0} | {tls:>15.0} | {:>9.2} | {:>7.2} |",
            r.op,
            format_size(r.size),
            r.concurrency,
            ratio(sig),
            ratio(tls)
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn row(op: &'static str, size: u64, conc: usize, n: u64, secs: f64, lat: &[u64], limit: &'static str, limit_mbps: f64) -> Row {
    let ops_per_sec = n as f64 / secs;
    let mb_per_sec = ops_per_sec * size as f64 / MB;
    Row {
        op,
        size,
        concurrency: conc,
        ops: n,
        ops_per_sec,
        mb_per_sec,
        p50_ms: percentile(lat, 0.50),
        p99_ms: percentile(lat, 0.99),
        limit,
        limit_mb_per_sec: limit_mbps,
        ratio_to_limit: mb_per_sec / limit_mbps,
    }
}

fn find<'a>(rows: &'a [Row], op: &str, size: u64, conc: usize) -> Option<&'a Row> {
    rows.iter().find(|r| r.op == op && r.size == size && r.concurrency == conc && r.limit != COLD)
}

/// The limit of the cold GET row.
const COLD: &str = "O_DIRECT disk read";

fn report(a: &BenchArgs, l: &Limits, rows: &[Row]) {
    let floors: Vec<(String, Option<bool>)> = vec![
        ("durable 1MiB PUT x16 >= 70% of fsync'd disk write".into(), find(rows, "PUT", 1 << 20, 16).map(|r| r.ratio_to_limit >= 0.70)),
        ("page-cached 1MiB GET x16 >= 60% of loopback".into(), find(rows, "GET", 1 << 20, 16).map(|r| r.ratio_to_limit >= 0.60)),
        ("durable 4KiB PUT x16 >= 5000 ops/s".into(), find(rows, "PUT", 4 << 10, 16).map(|r| r.ops_per_sec >= 5000.0)),
        (
            "cold 1MiB GET x16 >= 40% of O_DIRECT disk read".into(),
            rows.iter().find(|r| r.limit == COLD && r.size == 1 << 20 && r.concurrency == 16).map(|r| r.ratio_to_limit >= 0.40),
        ),
    ];
    if a.json {
        let v = serde_json::json!({
            "limits": { "disk_write_fsync_mb_per_sec": l.disk_write_mbps, "disk_write_fsync_parallel_mb_per_sec": l.disk_write_parallel_mbps, "disk_read_direct_mb_per_sec": l.disk_read_mbps, "loopback_tcp_mb_per_sec": l.loopback_mbps, "loopback_tcp_one_stream_mb_per_sec": l.loopback_one, "loopback_tcp_many_streams_mb_per_sec": l.loopback_many },
            "rows": rows,
            "floors": floors.iter().map(|(n, ok)| serde_json::json!({ "floor": n, "pass": ok })).collect::<Vec<_>>(),
        });
        println!("{v}");
        return;
    }
    println!(
        "limits (same run): fsync'd sequential write {:.0} MB/s (split over {} parallel streams: {:.0} MB/s), O_DIRECT sequential read {:.0} MB/s,\n  loopback TCP at start {:.0} MB/s (one stream {:.0}, {} streams {:.0}); each GET row's limit is re-measured right before it",
        l.disk_write_mbps, a.partitions, l.disk_write_parallel_mbps, l.disk_read_mbps, l.loopback_mbps, l.loopback_one, l.streams_max, l.loopback_many
    );
    println!(
        "each GET row reads the blobs its PUT row wrote last, up to {} (what the node holds in memory); the row against the disk's O_DIRECT read reads blobs written before more than the node's caches hold",
        format_size(HOT_BYTES)
    );
    println!();
    println!("| op  | size  | conc | ops/s    | MB/s    | p50 ms  | p99 ms  | limit MB/s          | ratio |");
    println!("|-----|-------|------|----------|---------|---------|---------|---------------------|-------|");
    for r in rows {
        let limit = format!("{:.0} {}", r.limit_mb_per_sec, r.limit);
        let (op, size, ratio) = (r.op, format_size(r.size), r.ratio_to_limit);
        println!(
            "| {op:<3} | {size:<5} | {:>4} | {:>8.0} | {:>7.1} | {:>7.2} | {:>7.2} | {limit:<19} | {ratio:>5.2} |",
            r.concurrency, r.ops_per_sec, r.mb_per_sec, r.p50_ms, r.p99_ms
        );
    }
    println!();
    for (name, ok) in floors {
        let verdict = match ok {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "not measured",
        };
        println!("floor: {name}: {verdict}");
    }
}

//! `strata bench-cluster`: aggregate PUT/GET throughput of 1, 3 and 6 real
//! node processes on this machine (127.0.x.y addresses, one zone, 3
//! replicas per partition where there are 3 nodes), the replication lag
//! seen while the PUTs run, and how fast a wiped node's replicas catch up
//! through replication, beside the disk's fsync'd write bandwidth and the
//! loopback TCP bandwidth measured in the same run.

use crate::bench::{MB, disk_read_limit, disk_write_bytes, disk_write_limit, loopback_limit, percentile, phase};
use crate::size::{format_size, parse_size};
use anyhow::{Context, Result, bail};
use bytes::Bytes;
use rand::RngCore;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_client::{Client, PutArgs};

#[derive(clap::Args, Debug)]
pub struct BenchClusterArgs {
    /// Directory for the nodes' data (removed afterwards).
    #[arg(long, default_value = "./strata-bench-cluster")]
    pub data_dir: PathBuf,
    /// Cluster sizes to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,3,6")]
    pub nodes: Vec<usize>,
    /// Blob size.
    #[arg(long, default_value = "256KiB", value_parser = parse_size)]
    pub size: u64,
    /// Concurrent clients (spread over the nodes).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Seconds per PUT or GET phase.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Partitions per node.
    #[arg(long, default_value_t = 2)]
    pub partitions_per_node: u32,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Keep the data directory.
    #[arg(long)]
    pub keep: bool,
}

pub(crate) struct Nodes {
    procs: Vec<Child>,
    addrs: Vec<String>,
    dirs: Vec<PathBuf>,
    net: u8,
    /// The cluster secret the nodes run with; the benchmark acts as a
    /// holder of it (mutual TLS) to administer and load them.
    secret: PathBuf,
    opts: strata_client::ClientOptions,
}

impl Nodes {
    fn addr(net: u8, i: usize) -> String {
        format!("127.0.{net}.{i}:7000")
    }

    fn spawn(net: u8, i: usize, dir: &Path, secret: &Path) -> Result<Child> {
        Self::spawn_with(net, i, dir, secret, &[])
    }

    fn spawn_with(net: u8, i: usize, dir: &Path, secret: &Path, extra: &[&str]) -> Result<Child> {
        let exe = std::env::current_exe().context("finding the strata binary")?;
        let log = std::fs::File::create(dir.with_extension("log"))?;
        Command::new(exe)
            .args(["server", "--data-dir"])
            .arg(dir)
            .arg("--cluster-secret")
            .arg(secret)
            .args(["--listen", &Self::addr(net, i), "--node-id", &i.to_string(), "--meta", &format!("1={}", Self::addr(net, 1))])
            .args(["--outbound-ip", &format!("127.0.{net}.{i}"), "--disk-reserve", "0"])
            // Every node shares this machine's memory.
            .args(["--tail-cache", "256MiB"])
            .args(extra)
            // Warnings only, unless the caller asks for more (with --keep,
            // the logs stay in the data directory).
            .env("STRATA_LOG", std::env::var("STRATA_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("spawning a node")
    }

    /// Starts `n` nodes in one zone; `partitions` per node for blobs (0: none).
    pub(crate) async fn start(root: &Path, n: usize, partitions: u32) -> Result<Nodes> {
        Self::start_partial(root, n, n, partitions, 3, &[]).await
    }

    /// [`Nodes::start`] with extra server flags.
    pub(crate) async fn start_with(root: &Path, n: usize, partitions: u32, replicas: usize, extra: &[&str]) -> Result<Nodes> {
        Self::start_partial(root, n, n, partitions, replicas, extra).await
    }

    /// The address of node `i` (from 0).
    pub(crate) fn addr_of(&self, i: usize) -> String {
        self.addrs[i].clone()
    }

    /// Starts `n` node processes, of which the first `in_map` join the map
    /// (the others wait to be added), with `replicas` per partition and
    /// extra server flags.
    pub(crate) async fn start_partial(root: &Path, n: usize, in_map: usize, partitions: u32, replicas: usize, extra: &[&str]) -> Result<Nodes> {
        Self::start_on(100 + n as u8, root, n, in_map, partitions, replicas, extra).await
    }

    /// [`Nodes::start_partial`] on addresses `127.0.{net}.*` (benchmarks
    /// that may run at once keep to their own nets).
    pub(crate) async fn start_on(net: u8, root: &Path, n: usize, in_map: usize, partitions: u32, replicas: usize, extra: &[&str]) -> Result<Nodes> {
        let secret_path = root.join(format!("c{n}.secret"));
        let secret = strata_auth::ClusterSecret::generate()?;
        strata_auth::credentials::write_private(&secret_path, &secret.to_file())?;
        let opts = crate::identity::AuthArgs { cluster_secret: Some(secret_path.clone()), ..Default::default() }.options()?;
        let mut nodes = Nodes { procs: Vec::new(), addrs: Vec::new(), dirs: Vec::new(), net, secret: secret_path, opts };
        for i in 1..=n {
            let dir = root.join(format!("c{n}-node{i}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            nodes.procs.push(Self::spawn_with(net, i, &dir, &nodes.secret, extra)?);
            nodes.addrs.push(Self::addr(net, i));
            nodes.dirs.push(dir);
        }
        for i in 0..n {
            wait_healthy(&nodes.client(i)).await?;
        }
        let c0 = nodes.client(0);
        let empty = json!({});
        retry(|| c0.post_json("/admin/cluster/init", &empty)).await?;
        for i in 1..=in_map {
            let add = json!({ "AddNode": { "id": i, "addr": Self::addr(net, i), "zone": "z1", "rack": format!("r{i}") } });
            command(&c0, add).await?;
            command(&c0, json!({ "AddDisk": { "node": i, "path": "d0", "capacity_bytes": 1u64 << 40 } })).await?;
        }
        if partitions == 0 {
            return Ok(nodes);
        }
        let count = partitions * in_map as u32;
        command(&c0, json!({ "AddPartitions": { "count": count, "replicas_per_zone": replicas, "capacity_bytes": 64u64 << 30 } })).await?;
        let per_node = count as usize * in_map.min(replicas) / in_map;
        for i in 0..in_map {
            let deadline = Instant::now() + Duration::from_secs(30);
            while nodes.client(i).json(http::Method::GET, "/admin/partitions").await.map_or(0, |v| v.as_array().map_or(0, |a| a.len())) < per_node {
                if Instant::now() > deadline {
                    bail!("node {} did not open its replicas", i + 1);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(nodes)
    }

    /// Waits until every node's tail cache has faulted in, as `strata
    /// bench` and `strata bench s3` wait for theirs: on a VM each fresh
    /// page is a host fault that no guest priority holds back, and six
    /// nodes' 256 MiB each took seconds of a PUT phase's CPU.
    pub(crate) async fn wait_for_tail_caches(&self) -> Result<()> {
        for i in 0..self.addrs.len() {
            let client = self.client(i);
            crate::bench::wait_for_tail_cache(&format!("node {}", i + 1), || async {
                let text = client.get_text("/metrics").await.with_context(|| format!("node {}: reading /metrics", i + 1))?;
                let (ready, size) = crate::bench::tail_cache_gauges(&text);
                // No tail cache yet: the node has not opened its disk's
                // store (every node here runs with one of 256 MiB).
                Ok(if size == 0 { (0, 1) } else { (ready, size) })
            })
            .await?;
        }
        Ok(())
    }

    pub(crate) fn client(&self, i: usize) -> Client {
        Client::with_options(&format!("https://{}", self.addrs[i]), &self.opts)
    }

    /// How a CLI command reaches these nodes.
    pub(crate) fn auth(&self) -> crate::identity::AuthArgs {
        crate::identity::AuthArgs { cluster_secret: Some(self.secret.clone()), ..Default::default() }
    }

    pub(crate) fn kill(&mut self, i: usize) {
        let _ = self.procs[i].kill();
        let _ = self.procs[i].wait();
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

async fn wait_healthy(c: &Client) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.json(http::Method::GET, "/health").await.is_err() {
        if Instant::now() > deadline {
            bail!("{} never became healthy", c.base());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn retry<F, Fut>(f: F) -> Result<serde_json::Value>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<serde_json::Value, strata_client::ClientError>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

pub(crate) async fn command(c: &Client, cmd: serde_json::Value) -> Result<serde_json::Value> {
    let v = retry(|| c.post_json("/admin/cluster/command", &cmd)).await?;
    if let Some(r) = v.get("Refused") {
        bail!("{cmd} refused: {r}");
    }
    Ok(v)
}

/// Replication lag across every node: (max bytes, max seconds, records behind in total).
async fn lag(nodes: &Nodes) -> (u64, f64, u64) {
    let mut out = (0u64, 0f64, 0u64);
    for i in 0..nodes.addrs.len() {
        let Ok(v) = nodes.client(i).json(http::Method::GET, "/admin/replication").await else { continue };
        for l in v.as_array().into_iter().flatten() {
            out.0 = out.0.max(l["lag_bytes"].as_u64().unwrap_or(0));
            out.1 = out.1.max(l["lag_seconds"].as_f64().unwrap_or(0.0));
            out.2 += l["lag_records"].as_u64().unwrap_or(0);
        }
    }
    out
}

/// The bytes of each replica on a node that holds records. A replica with
/// none is left out: its log is only a header, which a restarted node
/// writes whenever it first opens the replica (its system partitions some
/// seconds after start), and would make a caught-up node look behind.
async fn used_bytes(c: &Client) -> BTreeMap<u64, u64> {
    let Ok(v) = c.json(http::Method::GET, "/admin/partitions").await else { return BTreeMap::new() };
    v.as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["next_lsn"].as_u64().unwrap_or(0) > 1)
        .filter_map(|p| Some((p["partition"].as_u64()?, p["used_bytes"].as_u64()?)))
        .collect()
}

/// The write path's counters summed over every node (engine records,
/// group-commit batches, fsyncs and seconds in them; bytes pull
/// replication copied, puts a replica already had from it), to say where a
/// PUT phase's time went.
async fn write_path(nodes: &Nodes) -> [f64; 7] {
    const NAMES: [&str; 7] = [
        "strata_engine_records",
        "strata_engine_batches",
        "strata_engine_fsyncs",
        "strata_engine_fsync_seconds",
        "strata_replication_bytes_intra_zone",
        "strata_replication_bytes_inter_zone",
        "strata_router_put_replication_races",
    ];
    let mut out = [0f64; 7];
    for i in 0..nodes.addrs.len() {
        let Ok(text) = nodes.client(i).get_text("/metrics").await else { continue };
        for (k, name) in NAMES.iter().enumerate() {
            out[k] += text
                .lines()
                .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.trim_start_matches("_total").starts_with(['{', ' '])))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>();
        }
    }
    out
}

#[derive(serde::Serialize)]
struct Row {
    nodes: usize,
    replicas: usize,
    put_mbps: f64,
    put_ops: f64,
    put_p50_ms: f64,
    put_p99_ms: f64,
    get_mbps: f64,
    get_ops: f64,
    get_p50_ms: f64,
    get_p99_ms: f64,
    lag_max_bytes: u64,
    lag_max_seconds: f64,
    drain_seconds: f64,
    /// Replica records written per fsync during the PUT phase.
    records_per_fsync: f64,
    /// fsyncs per second, all nodes together.
    fsyncs_per_s: f64,
    /// Mean time of one fsync, ms.
    fsync_ms: f64,
    /// Bytes pull replication copied while the PUTs ran: blobs whose
    /// pushed copy had not arrived yet when a replica looked.
    pulled_during_put_bytes: f64,
    /// Pushed copies a replica already had, from pull replication.
    put_races: f64,
}

#[derive(serde::Serialize)]
struct CatchUp {
    nodes: usize,
    bytes: u64,
    seconds: f64,
    /// Of `seconds`, those until the restarted process answered `/health`,
    /// and until its first replica held a record.
    start_seconds: f64,
    first_record_seconds: f64,
    mbps: f64,
    disk_write_mbps: f64,
    ratio_to_disk: f64,
    /// The disk's fsync'd write rate for as many bytes as the catch-up
    /// copied, measured right before the wipe, and the ratio to it.
    disk_write_now_mbps: f64,
    ratio_to_disk_now: f64,
    /// The O_DIRECT read rate of the same disk.
    disk_read_mbps: f64,
    /// Over the rate of copying from this disk to itself, reading and
    /// writing each byte once: 1 / (1/write + 1/read).
    ratio_to_disk_copy: f64,
}

pub async fn run(a: BenchClusterArgs) -> Result<()> {
    std::fs::create_dir_all(&a.data_dir).with_context(|| format!("creating {}", a.data_dir.display()))?;
    let disk_write_mbps = disk_write_limit(&a.data_dir, 2.0, 1)?;
    // Catch-up reads what it writes from the same disk (the peers' cold
    // replicas): its limit here is the disk doing both.
    let disk_read_mbps = disk_read_limit(&a.data_dir)?;
    let _ = std::fs::remove_file(a.data_dir.join("disk-probe-0"));
    let loopback_mbps = loopback_limit(1.0, a.concurrency.clamp(1, 8)).await?;
    let mut rows = Vec::new();
    let mut catch_up = None;
    let biggest = a.nodes.iter().copied().max().unwrap_or(1);
    for &n in &a.nodes {
        if n == 0 || n > 50 {
            bail!("--nodes takes cluster sizes from 1 to 50, not {n}");
        }
        let mut nodes = Nodes::start(&a.data_dir, n, a.partitions_per_node).await?;
        nodes.wait_for_tail_caches().await?;
        let mut payload = vec![0u8; a.size as usize];
        rand::rng().fill_bytes(&mut payload);
        let payload = Bytes::from(payload);
        let ids: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
        let clients: Arc<Vec<Client>> = Arc::new((0..n).map(|i| nodes.client(i)).collect());
        // Sample replication lag while the PUTs run.
        let sampling = Arc::new(AtomicUsize::new(1));
        let lag_max = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let sampler = {
            let (sampling, lag_max) = (sampling.clone(), lag_max.clone());
            let probe = Nodes {
                procs: Vec::new(),
                addrs: nodes.addrs.clone(),
                dirs: Vec::new(),
                net: nodes.net,
                secret: nodes.secret.clone(),
                opts: nodes.opts.clone(),
            };
            tokio::spawn(async move {
                while sampling.load(Ordering::Relaxed) == 1 {
                    let (b, s, _) = lag(&probe).await;
                    lag_max.0.fetch_max(b, Ordering::Relaxed);
                    lag_max.1.fetch_max((s * 1000.0) as u64, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        };
        let written_before = write_path(&nodes).await;
        let (puts, put_secs, put_lat) = {
            let (ids, clients, payload) = (ids.clone(), clients.clone(), payload.clone());
            phase(a.concurrency, a.seconds, move |w, i| {
                let (ids, clients, payload) = (ids.clone(), clients.clone(), payload.clone());
                async move {
                    let c = &clients[(w + i as usize) % clients.len()];
                    let id = c.put_bytes(payload, &PutArgs::default()).await?.id;
                    ids.lock().unwrap_or_else(|p| p.into_inner()).push(id);
                    Ok(())
                }
            })
            .await?
        };
        let written = write_path(&nodes).await;
        let [records, _, fsyncs, fsync_secs, pulled_intra, pulled_inter, races] = std::array::from_fn(|k| written[k] - written_before[k]);
        sampling.store(0, Ordering::Relaxed);
        let _ = sampler.await;
        // Time for replication to drain once the load stops.
        let t = Instant::now();
        let drain_deadline = t + Duration::from_secs(120);
        while n > 1 && lag(&nodes).await.2 > 0 && Instant::now() < drain_deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let drain_seconds = t.elapsed().as_secs_f64();
        // The GETs read the blobs written last, 128 MiB per node at most
        // (each node's tail cache is 256 MiB here): the recent blobs a blob
        // store serves from memory, as `strata bench`'s GET rows do.
        let all_ids: Vec<String> = ids.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let hot = ((n as u64 * (128 << 20)) / a.size.max(1)).max(1) as usize;
        let all_ids: Arc<Vec<String>> = Arc::new(all_ids[all_ids.len().saturating_sub(hot)..].to_vec());
        let (gets, get_secs, get_lat) = {
            let (ids, clients) = (all_ids.clone(), clients.clone());
            let size = a.size as usize;
            phase(a.concurrency, a.seconds, move |w, i| {
                let (ids, clients) = (ids.clone(), clients.clone());
                async move {
                    let c = &clients[(w * 7 + i as usize) % clients.len()];
                    let id = &ids[(w * 7919 + i as usize * 104_729) % ids.len()];
                    let b = c.get_bytes(id).await?;
                    if b.len() != size {
                        bail!("get {id} returned {} bytes, not {size}", b.len());
                    }
                    Ok(())
                }
            })
            .await?
        };
        let mb = a.size as f64 / MB;
        rows.push(Row {
            nodes: n,
            replicas: n.min(3),
            put_mbps: puts as f64 * mb / put_secs,
            put_ops: puts as f64 / put_secs,
            put_p50_ms: percentile(&put_lat, 0.5),
            put_p99_ms: percentile(&put_lat, 0.99),
            get_mbps: gets as f64 * mb / get_secs,
            get_ops: gets as f64 / get_secs,
            get_p50_ms: percentile(&get_lat, 0.5),
            get_p99_ms: percentile(&get_lat, 0.99),
            lag_max_bytes: lag_max.0.load(Ordering::Relaxed),
            lag_max_seconds: lag_max.1.load(Ordering::Relaxed) as f64 / 1000.0,
            drain_seconds,
            records_per_fsync: records / fsyncs.max(1.0),
            fsyncs_per_s: fsyncs / put_secs,
            fsync_ms: fsync_secs * 1000.0 / fsyncs.max(1.0),
            pulled_during_put_bytes: pulled_intra + pulled_inter,
            put_races: races,
        });
        // Catch-up: wipe the last node (not the metadata member) and let its
        // replicas bootstrap from their peers.
        if n == biggest && n >= 3 {
            let victim = n - 1;
            let before = used_bytes(&nodes.client(victim)).await;
            let before_total: u64 = before.values().sum();
            let disk_now = disk_write_bytes(&a.data_dir, before_total)?;
            nodes.kill(victim);
            std::fs::remove_dir_all(&nodes.dirs[victim])?;
            std::fs::create_dir_all(&nodes.dirs[victim])?;
            let t = Instant::now();
            nodes.procs[victim] = Nodes::spawn(nodes.net, victim + 1, &nodes.dirs[victim], &nodes.secret)?;
            wait_healthy(&nodes.client(victim)).await?;
            let start_seconds = t.elapsed().as_secs_f64();
            let deadline = t + Duration::from_secs(600);
            let mut first_record_seconds = None;
            loop {
                let now = used_bytes(&nodes.client(victim)).await;
                if !now.is_empty() {
                    first_record_seconds.get_or_insert(t.elapsed().as_secs_f64());
                }
                if before.iter().all(|(p, b)| now.get(p).is_some_and(|n| n >= b)) {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("the wiped node holds {} of {before_total} bytes after 600 s", now.values().sum::<u64>());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let seconds = t.elapsed().as_secs_f64();
            let mbps = before_total as f64 / MB / seconds;
            let copy_mbps = 1.0 / (1.0 / disk_write_mbps + 1.0 / disk_read_mbps);
            catch_up = Some(CatchUp {
                nodes: n,
                bytes: before_total,
                seconds,
                start_seconds,
                first_record_seconds: first_record_seconds.unwrap_or(seconds),
                mbps,
                disk_write_mbps,
                ratio_to_disk: mbps / disk_write_mbps,
                disk_write_now_mbps: disk_now,
                ratio_to_disk_now: mbps / disk_now,
                disk_read_mbps,
                ratio_to_disk_copy: mbps / copy_mbps,
            });
        }
        drop(nodes);
    }
    if !a.keep {
        let _ = std::fs::remove_dir_all(&a.data_dir);
    }
    if a.json {
        println!(
            "{}",
            json!({ "disk_write_mbps": disk_write_mbps, "loopback_mbps": loopback_mbps, "size": a.size, "concurrency": a.concurrency, "rows": rows, "catch_up": catch_up })
        );
        return Ok(());
    }
    println!("limits measured in this run: disk fsync'd write {disk_write_mbps:.0} MB/s (one stream), loopback TCP {loopback_mbps:.0} MB/s");
    println!(
        "{} blobs, {} clients spread over the nodes, {:.0} s per phase; every node process on this one machine",
        format_size(a.size),
        a.concurrency,
        a.seconds
    );
    println!();
    println!(
        "| nodes | replicas | PUT MB/s | PUT ops/s | PUT p50/p99 ms | GET MB/s | GET ops/s | GET p50/p99 ms | repl. lag max (bytes, s) | drain s | PUT: records/fsync, fsyncs/s, ms each | PUT: pulled MB, races |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.1} | {:.0} | {:.1} / {:.1} | {:.1} | {:.0} | {:.1} / {:.1} | {:.2} MB, {:.2} | {:.2} | {:.1}, {:.0}, {:.2} | {:.0}, {:.0} |",
            r.nodes,
            r.replicas,
            r.put_mbps,
            r.put_ops,
            r.put_p50_ms,
            r.put_p99_ms,
            r.get_mbps,
            r.get_ops,
            r.get_p50_ms,
            r.get_p99_ms,
            r.lag_max_bytes as f64 / MB,
            r.lag_max_seconds,
            r.drain_seconds,
            r.records_per_fsync,
            r.fsyncs_per_s,
            r.fsync_ms,
            r.pulled_during_put_bytes / MB,
            r.put_races
        );
    }
    if let Some(c) = catch_up {
        println!();
        println!(
            "catch-up of a wiped node ({} nodes): {:.0} MB in {:.2} s (healthy after {:.2} s, first record after {:.2} s) = {:.1} MB/s, {:.2}x the disk's fsync'd write bandwidth ({:.0} MB/s at the start; {:.2}x the {:.0} MB/s of writing as many bytes right before the wipe), {:.2}x its rate copying to itself ({:.0} MB/s read with O_DIRECT)",
            c.nodes,
            c.bytes as f64 / MB,
            c.seconds,
            c.start_seconds,
            c.first_record_seconds,
            c.mbps,
            c.ratio_to_disk,
            c.disk_write_mbps,
            c.ratio_to_disk_now,
            c.disk_write_now_mbps,
            c.ratio_to_disk_copy,
            c.disk_read_mbps
        );
    }
    Ok(())
}

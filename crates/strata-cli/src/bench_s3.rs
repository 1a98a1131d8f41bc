//! `strata bench s3`: Strata's S3 API against MinIO on the same machine and
//! filesystem, driven by one load generator of our own that speaks SigV4
//! (so it can drive any S3 server). Both servers run single-node with their
//! data under `--dir`; both make every PUT durable before answering (Strata
//! fsyncs each group commit and its name log, MinIO fdatasyncs each
//! object). Each cell is PUT then GET, alternating the systems, and the
//! table gives each Strata figure as a ratio to MinIO's; the fsync'd
//! sequential write limit of the disk and the loopback limit are measured
//! in the same run.

use crate::bench::{disk_direct_limit, disk_write_limit, loopback_limit, percentile, phase};
use crate::size::parse_size;
use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata_types::Clock;

#[derive(clap::Args, Debug)]
pub struct BenchS3Args {
    /// Directory for both servers' data (removed afterwards); its filesystem is the one measured.
    #[arg(long, default_value = "./strata-bench-s3")]
    pub dir: PathBuf,
    /// Object sizes.
    #[arg(long, value_delimiter = ',', default_value = "4KiB,1MiB,64MiB", value_parser = parse_size)]
    pub sizes: Vec<u64>,
    /// Client concurrencies.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub concurrency: Vec<usize>,
    /// Seconds per PUT or GET phase.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Rounds per cell, alternating which system goes first; the table shows each figure's median round.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// The MinIO server binary (default: `minio` in `go env GOPATH`/bin, then on PATH; scripts/bench-s3.sh installs it).
    #[arg(long)]
    pub minio: Option<PathBuf>,
    /// Benchmark Strata alone (no ratios).
    #[arg(long)]
    pub no_minio: bool,
    /// Leave out the SSE-S3 rows (Strata's PUTs with `x-amz-server-side-encryption: AES256`, and GETs of those objects).
    #[arg(long)]
    pub no_sse: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Keep the data directory.
    #[arg(long)]
    pub keep: bool,
    /// An extra flag for `strata server` (repeatable), e.g. `--server-arg=--write-cache=1GiB`.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
}

type Body = Full<Bytes>;

/// A minimal S3 client: path-style, SigV4 with `UNSIGNED-PAYLOAD` (the
/// payload is not hashed on either side, as clients do over TLS), signed
/// by the signer every Strata client uses.
#[derive(Clone)]
pub(crate) struct S3Client {
    http: HyperClient<HttpConnector, Body>,
    pub(crate) endpoint: String,
    host: String,
    signer: Arc<strata_auth::Signer>,
    pub(crate) creds: strata_auth::Credentials,
    /// Ask for SSE-S3 on PUTs.
    sse: bool,
}

impl S3Client {
    fn new(endpoint: &str, access_key: &str, secret_key: &str) -> Self {
        let mut conn = HttpConnector::new();
        conn.set_nodelay(true);
        let http = HyperClient::builder(hyper_util::rt::TokioExecutor::new()).pool_max_idle_per_host(64).build(conn);
        let host = endpoint.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let creds = strata_auth::Credentials { access_key_id: access_key.into(), secret_access_key: secret_key.into() };
        let signer = Arc::new(strata_auth::Signer::new(creds.clone(), "us-east-1", "s3"));
        Self { http, endpoint: endpoint.trim_end_matches('/').to_owned(), host, signer, creds, sse: false }
    }

    /// The SigV4 `Authorization` header and date for a request.
    /// The same client asking for SSE-S3 on every PUT.
    fn with_sse(&self) -> Self {
        Self { sse: true, ..self.clone() }
    }

    fn sign(&self, method: &str, path: &str) -> (String, String) {
        let sse = self.sse && method == "PUT";
        let all: [(&str, &[u8]); 2] = [("host", self.host.as_bytes()), ("x-amz-server-side-encryption", b"AES256")];
        let headers = if sse { &all[..] } else { &all[..1] };
        let view = strata_auth::RequestView { method, path, query: "", headers };
        let sig = self.signer.sign(&view, strata_auth::sigv4::UNSIGNED_PAYLOAD, strata_types::SystemClock.now_ms() / 1000);
        (sig.authorization, sig.amz_date)
    }

    /// Sends a request; returns the status and the number of body bytes read.
    pub(crate) async fn call(&self, method: http::Method, path: &str, body: Bytes) -> Result<(u16, u64)> {
        let (auth, date) = self.sign(method.as_str(), path);
        let sse = self.sse && method == http::Method::PUT;
        let mut req = http::Request::builder();
        if sse {
            req = req.header("x-amz-server-side-encryption", "AES256");
        }
        let req = req
            .method(method)
            .uri(format!("{}{path}", self.endpoint))
            .header("host", &self.host)
            .header("x-amz-date", date)
            .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
            .header("authorization", auth)
            .header("content-length", body.len())
            .body(Full::new(body))?;
        let resp = self.http.request(req).await.context("S3 request")?;
        let status = resp.status().as_u16();
        let mut body = resp.into_body();
        let mut n = 0u64;
        let mut error = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(d) = frame.context("reading the response")?.into_data() {
                n += d.len() as u64;
                if !(200..300).contains(&status) && error.len() < 400 {
                    error.extend_from_slice(&d[..d.len().min(400 - error.len())]);
                }
            }
        }
        // A refusal says why (the S3 error document), so a failed run can be
        // diagnosed from its output.
        anyhow::ensure!(status < 400, "{path} answered {status}: {}", String::from_utf8_lossy(&error));
        Ok((status, n))
    }
}

/// A server under test.
pub(crate) struct Target {
    name: &'static str,
    pub(crate) client: S3Client,
    /// The server (None: another target's server, asked differently).
    child: Option<Child>,
    /// Strata's own API, for compaction between cells.
    pub(crate) admin: Option<String>,
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(crate) fn start_strata(dir: &Path, extra: &[String]) -> Result<Target> {
    let exe = std::env::current_exe().context("locating the strata binary")?;
    let mut child = Command::new(exe)
        .args(["server", "--data-dir"])
        .arg(dir)
        .args(["--listen", "127.0.0.1:0", "--s3-listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting strata server")?;
    let stdout = child.stdout.take().context("strata stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let (mut endpoint, mut keys, mut admin) = (None, None, None);
    let deadline = Instant::now() + Duration::from_secs(60);
    while endpoint.is_none() || keys.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).context("strata server did not print its S3 endpoint")?;
        if line.starts_with("Strata is serving") {
            admin = line.split_whitespace().find(|w| w.starts_with("http://")).map(str::to_owned);
        }
        if line.contains("S3 API on") {
            endpoint = line.split_whitespace().find(|w| w.starts_with("http://")).map(str::to_owned);
        }
        if let Some(rest) = line.trim().strip_prefix("AWS_ACCESS_KEY_ID=") {
            let mut parts = rest.split(" AWS_SECRET_ACCESS_KEY=");
            keys = Some((parts.next().unwrap_or("").to_owned(), parts.next().unwrap_or("").to_owned()));
        }
    }
    let (endpoint, (ak, sk)) = (endpoint.context("no endpoint")?, keys.context("no key")?);
    Ok(Target { name: "strata", client: S3Client::new(&endpoint, &ak, &sk), child: Some(child), admin })
}

fn find_minio(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_owned());
    }
    let gopath = Command::new("go").args(["env", "GOPATH"]).output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let mut candidates: Vec<PathBuf> = gopath.into_iter().filter(|g| !g.is_empty()).map(|g| PathBuf::from(g).join("bin/minio")).collect();
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(home).join("go/bin/minio"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|p| p.join("minio")));
    }
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .context("MinIO not found: run scripts/bench-s3.sh (it installs a pinned MinIO with go install), pass --minio, or --no-minio")
}

async fn start_minio(bin: &Path, dir: &Path) -> Result<Target> {
    let (port, console) = (free_port()?, free_port()?);
    let (ak, sk) = ("strata-bench", "strata-bench-secret");
    let child = Command::new(bin)
        .args(["server", "--quiet", "--address", &format!("127.0.0.1:{port}"), "--console-address", &format!("127.0.0.1:{console}")])
        .arg(dir)
        .env("MINIO_ROOT_USER", ak)
        .env("MINIO_ROOT_PASSWORD", sk)
        .env("MINIO_BROWSER", "off")
        .env("MINIO_UPDATE", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let target = Target { name: "minio", client: S3Client::new(&endpoint, ak, sk), child: Some(child), admin: None };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((200, _)) = target.client.call(http::Method::GET, "/minio/health/ready", Bytes::new()).await {
            return Ok(target);
        }
        if Instant::now() > deadline {
            bail!("MinIO did not become ready on {endpoint}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[derive(serde::Serialize, Clone)]
struct Row {
    op: &'static str,
    size: u64,
    conc: usize,
    system: &'static str,
    ops: u64,
    objects_per_s: f64,
    mb_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

async fn put_phase(t: &Target, size: u64, conc: usize, secs: f64, data: Bytes, round: usize) -> Result<(Row, Vec<String>)> {
    let keys = Arc::new(Mutex::new(Vec::new()));
    let (client, k, name) = (t.client.clone(), keys.clone(), t.name);
    let (n, elapsed, lat) = phase(conc, secs, move |w, i| {
        let (client, k, data) = (client.clone(), k.clone(), data.clone());
        async move {
            let path = format!("/bench/{name}/s{size}-c{conc}/r{round}/w{w}/{i}");
            let (status, _) = client.call(http::Method::PUT, &path, data).await?;
            anyhow::ensure!(status == 200, "PUT {path} answered {status}");
            k.lock().unwrap_or_else(|p| p.into_inner()).push(path);
            Ok(())
        }
    })
    .await?;
    let keys = std::mem::take(&mut *keys.lock().unwrap_or_else(|p| p.into_inner()));
    Ok((row("PUT", size, conc, t.name, n, elapsed, &lat), keys))
}

/// Deletes a cell's objects, and has Strata compact its logs, so the next
/// cell starts from the same near-empty disk on both systems and a run
/// needs only one cell's worth of free space.
async fn clear(t: &Target, keys: Vec<String>) -> Result<()> {
    let keys = Arc::new(keys);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (client, keys, next) = (t.client.clone(), keys.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(path) = keys.get(i) else { return Ok::<_, anyhow::Error>(()) };
                let (status, _) = client.call(http::Method::DELETE, path, Bytes::new()).await?;
                anyhow::ensure!(status == 204, "DELETE {path} answered {status}");
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    if let Some(admin) = &t.admin {
        // Strata's own port, signed with the same (admin) key.
        let opts = strata_client::ClientOptions { credentials: Some(t.client.creds.clone()), ..Default::default() };
        strata_client::Client::with_options(admin, &opts)
            .json(http::Method::POST, "/admin/compact")
            .await
            .with_context(|| format!("{}: compaction", t.name))?;
    }
    Ok(())
}

/// Waits until Strata's tail cache is faulted in, as its metrics say
/// (`strata_engine_tail_cache_ready_bytes` against `_bytes`); see
/// [`crate::bench::wait_for_tail_cache`].
pub(crate) async fn warmed_up(t: &Target) -> Result<()> {
    let Some(admin) = &t.admin else { return Ok(()) };
    let opts = strata_client::ClientOptions { credentials: Some(t.client.creds.clone()), ..Default::default() };
    let client = strata_client::Client::with_options(admin, &opts);
    crate::bench::wait_for_tail_cache(t.name, || async {
        let text = client.get_text("/metrics").await.with_context(|| format!("{}: reading /metrics", t.name))?;
        Ok(crate::bench::tail_cache_gauges(&text))
    })
    .await
}

async fn get_phase(t: &Target, size: u64, conc: usize, secs: f64, keys: Arc<Vec<String>>) -> Result<Row> {
    anyhow::ensure!(!keys.is_empty(), "no objects to GET: a PUT phase wrote none");
    let client = t.client.clone();
    let (n, elapsed, lat) = phase(conc, secs, move |w, i| {
        let (client, keys) = (client.clone(), keys.clone());
        async move {
            let path = &keys[(w as u64 * 7919 + i * 104_729) as usize % keys.len()];
            let (status, got) = client.call(http::Method::GET, path, Bytes::new()).await?;
            anyhow::ensure!(status == 200 && got == size, "GET {path} answered {status} with {got} of {size} bytes");
            Ok(())
        }
    })
    .await?;
    Ok(row("GET", size, conc, t.name, n, elapsed, &lat))
}

/// One PUT phase, logged; its keys go to `written`.
async fn put_logged(t: &Target, size: u64, conc: usize, secs: f64, data: &Bytes, round: usize, written: &mut Vec<Vec<String>>) -> Result<Row> {
    eprintln!("{} PUT {} x{conc} (round {})...", t.name, size_text(size), round + 1);
    let (r, keys) = put_phase(t, size, conc, secs, data.clone(), round).await?;
    eprintln!("  {:.0} objects/s, p50 {:.2} ms", r.objects_per_s, r.p50_ms);
    written.push(keys);
    Ok(r)
}

/// One GET phase of `keys`, logged.
async fn get_logged(t: &Target, size: u64, conc: usize, secs: f64, keys: Arc<Vec<String>>, round: usize) -> Result<Row> {
    eprintln!("{} GET {} x{conc} (round {})...", t.name, size_text(size), round + 1);
    let r = get_phase(t, size, conc, secs, keys).await?;
    eprintln!("  {:.0} objects/s, p50 {:.2} ms", r.objects_per_s, r.p50_ms);
    Ok(r)
}

/// The objects each system's GET phase reads: the same number from every
/// system (the fewest any of them wrote in its PUT phase), each system's
/// most recent ones. Like warp's GET, which reads a fixed count of objects
/// from any server: a system that wrote more in its PUT phase would
/// otherwise be measured serving a bigger dataset than the others.
fn same_size_sets(written: Vec<Vec<String>>) -> Vec<Arc<Vec<String>>> {
    let k = written.iter().map(Vec::len).min().unwrap_or(0);
    written.into_iter().map(|mut keys| Arc::new(keys.split_off(keys.len() - k))).collect()
}

fn row(op: &'static str, size: u64, conc: usize, system: &'static str, n: u64, secs: f64, lat: &[u64]) -> Row {
    let ops = n as f64 / secs;
    Row { op, size, conc, system, ops: n, objects_per_s: ops, mb_per_s: ops * size as f64 / 1e6, p50_ms: percentile(lat, 0.50), p99_ms: percentile(lat, 0.99) }
}

fn size_text(s: u64) -> String {
    match s {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

/// The fastest PUT rate the free-space estimate assumes (this machine's
/// disk takes about 2 GB/s with O_DIRECT).
const PUT_BYTES_PER_S_MAX: f64 = 2e9;

pub async fn run(a: BenchS3Args) -> Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let result = run_in(&a).await;
    if !a.keep {
        let _ = std::fs::remove_dir_all(&a.dir);
    }
    result
}

async fn run_in(a: &BenchS3Args) -> Result<()> {
    let minio_bin = if a.no_minio { None } else { Some(find_minio(a.minio.as_deref())?) };
    // A cell's objects stay until its last round (GET phases read what PUT
    // phases wrote): warn before a full disk stops a run halfway.
    let systems = if minio_bin.is_some() { 2 } else { 1 };
    let needed = a.rounds.max(1) as f64 * systems as f64 * a.seconds * PUT_BYTES_PER_S_MAX;
    if let Ok(free) = strata_engine::fsutil::free_bytes(&a.dir)
        && (free as f64) < needed
    {
        eprintln!(
            "warning: {} holds {:.0} GB free; a cell may write up to {:.0} GB (its objects are kept until its last round), and a full disk stops it",
            a.dir.display(),
            free as f64 / 1e9,
            needed / 1e9
        );
    }
    eprintln!("measuring the disk (fsync'd sequential write), loopback and MD5 limits...");
    let disk_mbps = disk_write_limit(&a.dir, 2.0, 1)?;
    // O_DIRECT needs a filesystem that takes it (tmpfs does not).
    let direct_mbps = disk_direct_limit(&a.dir, 2.0).ok();
    let loop_mbps = loopback_limit(1.0, 4).await?;
    let md5_one = strata_s3::md5_throughput(1, 256, false).await;
    let md5_crate = tokio::task::spawn_blocking(|| strata_s3::md5_crate_throughput(256)).await?;
    let md5_16 = strata_s3::md5_throughput(16, 32, true).await;
    let strata = start_strata(&a.dir.join("strata"), &a.server_args)?;
    // SSE-S3 on the same server: its cost is measured against Strata's own
    // unencrypted rows (MinIO without a KMS has no SSE-S3).
    let sse = (!a.no_sse).then(|| Target { name: "sse-s3", client: strata.client.with_sse(), child: None, admin: strata.admin.clone() });
    let mut targets = vec![strata];
    targets.extend(sse);
    if let Some(bin) = &minio_bin {
        targets.push(start_minio(bin, &a.dir.join("minio")).await?);
    }
    for t in targets.iter().filter(|t| t.child.is_some()) {
        warmed_up(t).await?;
        let (status, _) = t.client.call(http::Method::PUT, "/bench", Bytes::new()).await?;
        anyhow::ensure!(status == 200, "{}: creating the bucket answered {status}", t.name);
    }
    let mut rows = Vec::new();
    for &size in &a.sizes {
        let data = Bytes::from((0..size).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect::<Vec<u8>>());
        for &conc in &a.concurrency {
            let mut all: Vec<Row> = Vec::new();
            let mut cell_keys: Vec<Vec<String>> = targets.iter().map(|_| Vec::new()).collect();
            for round in 0..a.rounds.max(1) {
                // Alternate who goes first, so drift in the machine's state
                // (page cache, disk) does not favor one system.
                // The SSE-S3 phases run after the others: they share
                // Strata's server, and their PUTs would push the objects
                // Strata's GET phase reads out of its tail cache.
                let (compared, extra): (Vec<&Target>, Vec<&Target>) = targets.iter().partition(|t| t.name != "sse-s3");
                let order: Vec<&Target> = if round % 2 == 0 { compared.into_iter().collect() } else { compared.into_iter().rev().collect() };
                let mut written = Vec::new();
                for t in &order {
                    all.push(put_logged(t, size, conc, a.seconds, &data, round, &mut written).await?);
                }
                let k = written.iter().map(Vec::len).min().unwrap_or(0);
                for (t, keys) in order.iter().zip(&written) {
                    let i = targets.iter().position(|x| std::ptr::eq(x, *t)).expect("ordered from targets");
                    cell_keys[i].extend(keys.iter().cloned());
                }
                for (t, keys) in order.iter().zip(same_size_sets(written)) {
                    all.push(get_logged(t, size, conc, a.seconds, keys, round).await?);
                }
                for t in extra {
                    let mut mine = Vec::new();
                    all.push(put_logged(t, size, conc, a.seconds, &data, round, &mut mine).await?);
                    let i = targets.iter().position(|x| std::ptr::eq(x, t)).expect("from targets");
                    cell_keys[i].extend(mine[0].iter().cloned());
                    // As many objects as the others read (or all it wrote, if fewer).
                    let mut keys = mine.remove(0);
                    let keys = Arc::new(keys.split_off(keys.len().saturating_sub(k.max(1))));
                    all.push(get_logged(t, size, conc, a.seconds, keys, round).await?);
                }
            }
            // Small objects take little space; large ones would fill the disk.
            if size >= 1 << 20 {
                for (t, keys) in targets.iter().zip(cell_keys) {
                    eprintln!("{} deleting {} objects of {} x{conc}...", t.name, keys.len(), size_text(size));
                    clear(t, keys).await?;
                }
            }
            for op in ["PUT", "GET"] {
                for t in &targets {
                    let mut mine: Vec<Row> = all.iter().filter(|r| r.op == op && r.system == t.name).cloned().collect();
                    mine.sort_by(|x, y| x.objects_per_s.total_cmp(&y.objects_per_s));
                    if let Some(median) = mine.get(mine.len() / 2) {
                        rows.push(median.clone());
                    }
                }
            }
        }
    }
    drop(targets);
    if a.json {
        let limits = serde_json::json!({
            "disk_write_mbps": disk_mbps, "disk_direct_write_mbps": direct_mbps, "loopback_mbps": loop_mbps,
            "md5_one_stream_mbps": md5_one, "md5_crate_one_stream_mbps": md5_crate, "md5_16_streams_mbps": md5_16,
        });
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "limits": limits, "rows": rows }))?);
        return Ok(());
    }
    println!("S3 PUT/GET, single node, data in {}; median of {} rounds of {}s", a.dir.display(), a.rounds.max(1), a.seconds);
    let direct = direct_mbps.map_or("n/a".to_owned(), |m| format!("{m:.0}"));
    println!(
        "limits, MB/s: disk fsync'd sequential write {disk_mbps:.0} (O_DIRECT {direct}), loopback {loop_mbps:.0}, MD5 one stream {md5_one:.0} (md-5 crate {md5_crate:.0}), 16 streams {md5_16:.0}"
    );
    println!(
        "{:<4} {:>7} {:>4} {:<7} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9}",
        "op", "size", "conc", "system", "obj/s", "MB/s", "p50 ms", "p99 ms", "×MinIO", "p50 ×M", "p99 ×M"
    );
    for r in &rows {
        // SSE-S3 rows are over Strata's unencrypted ones: encryption's cost.
        let of = if r.system == "sse-s3" { "strata" } else { "minio" };
        let base = rows.iter().find(|b| b.system == of && b.op == r.op && b.size == r.size && b.conc == r.conc);
        let ratio = |x: f64, y: f64| if y > 0.0 { format!("{:.2}x", x / y) } else { "-".into() };
        let (tput, p50, p99) = match base {
            Some(b) if r.system != "minio" => (ratio(r.objects_per_s, b.objects_per_s), ratio(r.p50_ms, b.p50_ms), ratio(r.p99_ms, b.p99_ms)),
            _ => ("".into(), "".into(), "".into()),
        };
        println!(
            "{:<4} {:>7} {:>4} {:<7} {:>9.0} {:>8.1} {:>8.2} {:>8.2} {:>9} {:>9} {:>9}",
            r.op,
            size_text(r.size),
            r.conc,
            r.system,
            r.objects_per_s,
            r.mb_per_s,
            r.p50_ms,
            r.p99_ms,
            tput,
            p50,
            p99
        );
    }
    println!("×MinIO: Strata's objects/s (= MB/s) over MinIO's; p50/p99 ×M: Strata's latency over MinIO's (below 1 is faster).");
    println!(
        "sse-s3: Strata with SSE-S3 (AES-256-GCM at rest), its phases after the others' each round; its ratios are over Strata's unencrypted rows, not MinIO's."
    );
    println!("GET reads, from each system, the same number of objects (the fewest either wrote in the round's PUT phase), its most recent ones.");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_phases_read_equal_sets_of_the_latest_objects() {
        let keys = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>();
        let sets = same_size_sets(vec![keys(5), keys(3)]);
        assert_eq!(*sets[0], ["2", "3", "4"]);
        assert_eq!(*sets[1], ["0", "1", "2"]);
        assert_eq!(*same_size_sets(vec![keys(4)])[0], keys(4));
    }
}

//! `strata bench-rw`: a read-write store (Spock §3.1) on 1 node and on 3
//! nodes (3 replicas, 2 required reads and writes) against Redis with
//! `appendfsync always` on 1 node and a 3-member etcd cluster, all on this
//! machine and driven by the same load generator: blind puts of fresh
//! keys, then gets of the keys written, each phase for a fixed time with
//! the same concurrency. Strata's clients route themselves (each put goes
//! to its key's pseudo-master). Every system acknowledges a put only once it is
//! on disk (fsync'd), so durability is equal; etcd and the 3-node store
//! also write every put to several members.
//!
//! Redis and etcd come from Debian's packages (`redis-server`,
//! `etcd-server`); a system that is not installed is reported as not
//! measured.

use crate::bench::percentile;
use anyhow::{Context, Result, bail};
use base64::Engine;
use bytes::Bytes;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(clap::Args, Debug)]
pub struct BenchRwArgs {
    /// Directory for every system's data (removed afterwards).
    #[arg(long, default_value = "./strata-bench-rw")]
    pub data_dir: PathBuf,
    /// Seconds per put or get phase.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Value size, bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// The redis-server binary.
    #[arg(long, default_value = "redis-server")]
    pub redis: String,
    /// The etcd binary.
    #[arg(long, default_value = "etcd")]
    pub etcd: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One system under load.
#[derive(Clone)]
enum Target {
    /// Strata nodes' HTTP API (server-side routing through each worker's node).
    Strata { urls: Vec<String>, opts: strata_client::ClientOptions, store: String },
    /// Redis's protocol on one address.
    Redis { addr: String },
    /// etcd's v3 JSON gateway on its members.
    Etcd { urls: Vec<String> },
}

/// One worker's connection.
enum Conn {
    Strata(strata_kv_client::RwClient, String),
    Redis(tokio::net::TcpStream, Vec<u8>),
    Etcd(strata_client::Client),
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

impl Target {
    async fn connect(&self, worker: usize) -> Result<Conn> {
        Ok(match self {
            // Client-side routing: puts straight to each key's pseudo-master.
            Self::Strata { urls, opts, store } => {
                let seeds: Vec<String> = (0..urls.len()).map(|i| urls[(worker + i) % urls.len()].clone()).collect();
                Conn::Strata(strata_kv_client::RwClient::connect(&seeds, vec!["z1".into()], opts).await?, store.clone())
            }
            Self::Redis { addr } => {
                let s = tokio::net::TcpStream::connect(addr).await.with_context(|| format!("connecting to Redis at {addr}"))?;
                s.set_nodelay(true)?;
                Conn::Redis(s, Vec::with_capacity(4096))
            }
            Self::Etcd { urls } => Conn::Etcd(strata_client::Client::new(&urls[worker % urls.len()])),
        })
    }
}

/// Reads one RESP reply; returns its payload for a bulk string (None for nil).
async fn redis_reply(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Result<Option<Vec<u8>>> {
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            let line = buf[..end].to_vec();
            match line.first() {
                Some(b'+') | Some(b':') => {
                    buf.drain(..end + 2);
                    return Ok(Some(line[1..].to_vec()));
                }
                Some(b'-') => bail!("Redis: {}", String::from_utf8_lossy(&line[1..])),
                Some(b'$') => {
                    let n: i64 = std::str::from_utf8(&line[1..])?.parse()?;
                    if n < 0 {
                        buf.drain(..end + 2);
                        return Ok(None);
                    }
                    let need = end + 2 + n as usize + 2;
                    if buf.len() >= need {
                        let v = buf[end + 2..end + 2 + n as usize].to_vec();
                        buf.drain(..need);
                        return Ok(Some(v));
                    }
                }
                _ => bail!("Redis: unexpected reply {:?}", String::from_utf8_lossy(&line)),
            }
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            bail!("Redis closed the connection");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut b = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        b.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        b.extend_from_slice(a);
        b.extend_from_slice(b"\r\n");
    }
    b
}

impl Conn {
    async fn put(&mut self, key: &[u8], value: &Bytes) -> Result<()> {
        match self {
            Self::Strata(c, store) => {
                c.put(store, key, value.clone(), "").await?;
            }
            Self::Redis(s, buf) => {
                s.write_all(&resp(&[b"SET", key, value])).await?;
                redis_reply(s, buf).await?;
            }
            Self::Etcd(c) => {
                c.post_json("/v3/kv/put", &json!({ "key": b64(key), "value": b64(value) })).await?;
            }
        }
        Ok(())
    }

    /// Whether the key was found.
    async fn get(&mut self, key: &[u8]) -> Result<bool> {
        Ok(match self {
            Self::Strata(c, store) => !c.get(store, key).await?.versions.is_empty(),
            Self::Redis(s, buf) => {
                s.write_all(&resp(&[b"GET", key])).await?;
                redis_reply(s, buf).await?.is_some()
            }
            Self::Etcd(c) => c.post_json("/v3/kv/range", &json!({ "key": b64(key) })).await?["kvs"].as_array().is_some_and(|a| !a.is_empty()),
        })
    }
}

/// What one phase measured.
#[derive(Debug, Clone, Copy, Default)]
struct Phase {
    ops_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    missing: u64,
}

fn key(worker: usize, i: u64) -> Vec<u8> {
    format!("bench-{worker:03}-{i:09}").into_bytes()
}

/// Puts fresh keys for `secs`, then gets the keys written for `secs`.
async fn load(target: &Target, concurrency: usize, secs: f64, value_size: usize) -> Result<(Phase, Phase)> {
    let value = Bytes::from(vec![b'v'; value_size]);
    let mut conns = Vec::new();
    for w in 0..concurrency {
        conns.push(target.connect(w).await?);
    }
    let run = |get: bool, conns: Vec<Conn>, written: Arc<Vec<u64>>| {
        let value = value.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs_f64(secs);
            let start = Instant::now();
            let tasks: Vec<_> = conns
                .into_iter()
                .enumerate()
                .map(|(w, mut conn)| {
                    let (value, written) = (value.clone(), written.clone());
                    tokio::spawn(async move {
                        let mut lat = Vec::new();
                        let (mut i, mut missing) = (0u64, 0u64);
                        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ w as u64;
                        while Instant::now() < deadline {
                            let t = Instant::now();
                            if get {
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                let n = written[w].max(1);
                                missing += u64::from(!conn.get(&key(w, x % n)).await?);
                            } else {
                                conn.put(&key(w, i), &value).await?;
                            }
                            lat.push(t.elapsed().as_micros() as u64);
                            i += 1;
                        }
                        anyhow::Ok((conn, lat, i, missing))
                    })
                })
                .collect();
            let mut out = Vec::new();
            let (mut lat, mut missing) = (Vec::new(), 0);
            for t in tasks {
                let (conn, l, n, m) = t.await??;
                lat.extend(l);
                out.push((conn, n));
                missing += m;
            }
            let elapsed = start.elapsed().as_secs_f64();
            lat.sort_unstable();
            let phase = Phase { ops_per_s: lat.len() as f64 / elapsed, p50_ms: percentile(&lat, 0.5), p99_ms: percentile(&lat, 0.99), missing };
            anyhow::Ok((phase, out))
        }
    };
    let (put, done) = run(false, conns, Arc::new(Vec::new())).await?;
    let written: Vec<u64> = done.iter().map(|(_, n)| *n).collect();
    let conns = done.into_iter().map(|(c, _)| c).collect();
    let (get, _) = run(true, conns, Arc::new(written)).await?;
    Ok((put, get))
}

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn start_redis(bin: &str, dir: &Path) -> Result<(Redis, String)> {
    std::fs::create_dir_all(dir)?;
    let port = "16379";
    let child = Command::new(bin)
        .args(["--port", port, "--bind", "127.0.0.1", "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {bin} (Debian: apt-get install redis-server)"))?;
    let guard = Redis(child);
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await {
            s.write_all(&resp(&[b"PING"])).await?;
            if redis_reply(&mut s, &mut Vec::new()).await.is_ok() {
                return Ok((guard, addr));
            }
        }
        if Instant::now() > deadline {
            bail!("Redis did not answer at {addr}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) struct Etcd(Vec<Child>);

impl Drop for Etcd {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts a 3-member etcd on `127.0.<net>.1..3` (each benchmark its own
/// `net`: the test command runs `bench-rw` and `bench-txn` at once, and two
/// clusters on one set of addresses would serve one of them from the
/// other's members, which it then stops).
pub(crate) async fn start_etcd(bin: &str, dir: &Path, net: u8) -> Result<(Etcd, Vec<String>)> {
    let host = |i: usize| format!("127.0.{net}.{i}");
    let cluster: Vec<String> = (1..=3).map(|i| format!("e{i}=http://{}:2380", host(i))).collect();
    let mut procs = Etcd(Vec::new());
    for i in 1..=3 {
        let data = dir.join(format!("e{i}"));
        std::fs::create_dir_all(&data)?;
        let log = std::fs::File::create(dir.join(format!("e{i}.log")))?;
        let child = Command::new(bin)
            .args(["--name", &format!("e{i}")])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &format!("http://{}:2379", host(i)), "--advertise-client-urls", &format!("http://{}:2379", host(i))])
            .args(["--listen-peer-urls", &format!("http://{}:2380", host(i)), "--initial-advertise-peer-urls", &format!("http://{}:2380", host(i))])
            .args(["--initial-cluster", &cluster.join(","), "--initial-cluster-state", "new", "--initial-cluster-token", "strata-bench-rw"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("starting {bin} (Debian: apt-get install etcd-server)"))?;
        procs.0.push(child);
    }
    let urls: Vec<String> = (1..=3).map(|i| format!("http://{}:2379", host(i))).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for u in &urls {
        let c = strata_client::Client::new(u);
        while !c.json(http::Method::GET, "/health").await.is_ok_and(|v| v["health"] == "true") {
            if Instant::now() > deadline {
                bail!("etcd member {u} did not become healthy");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok((procs, urls))
}

/// A Strata cluster of `n` nodes with one read-write store of `n` replicas
/// (required reads and writes: a majority).
async fn start_strata(root: &Path, n: usize) -> Result<(crate::bench_cluster::Nodes, Target)> {
    std::fs::create_dir_all(root)?;
    // Addresses of its own: `bench-cluster`'s and `bench-kv-push`'s are 127.0.10x.*.
    let nodes = crate::bench_cluster::Nodes::start_on(120 + n as u8, root, n, n, 0, 3, &[]).await?;
    nodes.wait_for_tail_caches().await?;
    let c0 = nodes.client(0);
    crate::bench_cluster::command(&c0, json!({ "KvInitRing": { "partitions": 16 } })).await?;
    let q = (n / 2 + 1) as u32;
    let spec = json!({ "replication": { "Nodes": n }, "required_reads": q, "required_writes": q, "value_limit": 1 << 20 });
    crate::bench_cluster::command(&c0, json!({ "RwCreateStore": { "name": "bench", "spec": spec } })).await?;
    let urls: Vec<String> = (0..n).map(|i| format!("https://{}", nodes.addr_of(i))).collect();
    for i in 0..n {
        let deadline = Instant::now() + Duration::from_secs(30);
        while nodes.client(i).json(http::Method::GET, "/admin/rw").await.map(|v| v["stores"].get("bench").is_none()).unwrap_or(true) {
            if Instant::now() > deadline {
                bail!("node {} never saw the store", i + 1);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let opts = nodes.client(0).options().clone();
    Ok((nodes, Target::Strata { urls, opts, store: "bench".into() }))
}

/// One row of the table.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct RwRow {
    pub system: String,
    pub nodes: usize,
    pub op: &'static str,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub missing: u64,
}

/// A floor: `system`'s `op` rate at least `factor` times the peer's, same nodes count.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct RwVerdict {
    pub floor: String,
    pub measured: String,
    pub pass: Option<bool>,
}

/// Runs every system; rows and verdicts.
pub(crate) async fn measure(a: &BenchRwArgs) -> Result<(Vec<RwRow>, Vec<RwVerdict>)> {
    let root = a.data_dir.clone();
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root)?;
    let mut rows = Vec::new();
    let push = |rows: &mut Vec<RwRow>, system: &str, nodes: usize, (put, get): (Phase, Phase)| {
        for (op, p) in [("put", put), ("get", get)] {
            rows.push(RwRow { system: system.into(), nodes, op, ops_per_s: p.ops_per_s, p50_ms: p.p50_ms, p99_ms: p.p99_ms, missing: p.missing });
        }
    };
    eprintln!("strata, 1 node ...");
    {
        let (_nodes, t) = start_strata(&root.join("strata1"), 1).await?;
        push(&mut rows, "strata", 1, load(&t, a.concurrency, a.seconds, a.value_size).await?);
    }
    eprintln!("redis (appendfsync always) ...");
    match start_redis(&a.redis, &root.join("redis")).await {
        Ok((_redis, addr)) => push(&mut rows, "redis", 1, load(&Target::Redis { addr }, a.concurrency, a.seconds, a.value_size).await?),
        Err(e) => eprintln!("redis not measured: {e:#}"),
    }
    eprintln!("strata, 3 nodes (N=3, R=W=2) ...");
    {
        let (_nodes, t) = start_strata(&root.join("strata3"), 3).await?;
        push(&mut rows, "strata", 3, load(&t, a.concurrency, a.seconds, a.value_size).await?);
    }
    eprintln!("etcd, 3 members ...");
    match start_etcd(&a.etcd, &root.join("etcd"), 200).await {
        Ok((_etcd, urls)) => push(&mut rows, "etcd", 3, load(&Target::Etcd { urls }, a.concurrency, a.seconds, a.value_size).await?),
        Err(e) => eprintln!("etcd not measured: {e:#}"),
    }
    let _ = std::fs::remove_dir_all(&root);
    let rate = |system: &str, nodes: usize, op: &str| rows.iter().find(|r| r.system == system && r.nodes == nodes && r.op == op).map(|r| r.ops_per_s);
    let mut verdicts = Vec::new();
    for (nodes, peer, factor) in [(1, "redis", 1.0), (3, "etcd", 2.0)] {
        for op in ["put", "get"] {
            let floor = format!("{nodes} node{}: durable {op}s >= {factor}x {peer}", if nodes > 1 { "s" } else { "" });
            let (measured, pass) = match (rate("strata", nodes, op), rate(peer, nodes, op)) {
                (Some(s), Some(p)) => (format!("{s:.0} against {p:.0} ops/s: {:.2}x", s / p.max(1e-9)), Some(s >= factor * p)),
                _ => ("not measured".into(), None),
            };
            verdicts.push(RwVerdict { floor, measured, pass });
        }
    }
    Ok((rows, verdicts))
}

pub async fn run(a: BenchRwArgs) -> Result<()> {
    let (rows, verdicts) = measure(&a).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json!({ "rows": rows, "verdicts": verdicts }))?);
        return Ok(());
    }
    println!("read-write store: {} clients, {} B values, {} s per phase, every put fsync'd before it is acknowledged", a.concurrency, a.value_size, a.seconds);
    println!();
    println!("| system | nodes | op | ops/s | p50 ms | p99 ms | not found |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!("| {} | {} | {} | {:.0} | {:.2} | {:.2} | {} |", r.system, r.nodes, r.op, r.ops_per_s, r.p50_ms, r.p99_ms, r.missing);
    }
    println!();
    println!("| floor | measured | verdict |");
    println!("|---|---|---|");
    for v in &verdicts {
        let verdict = match v.pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "not measured",
        };
        println!("| {} | {} | {verdict} |", v.floor, v.measured);
    }
    Ok(())
}

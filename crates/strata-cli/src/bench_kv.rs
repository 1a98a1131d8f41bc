//! `strata bench-kv`: read-only stores against SQLite on the same data, in
//! one run. For each size: build time and input bytes/s (Strata's builder
//! against SQLite inserting into a WITHOUT ROWID table in one transaction);
//! in-process lookup latency (p50/p99) and throughput for uniform and
//! Zipfian keys (SQLite through a prepared primary-key statement); and the
//! same over HTTP in this process: Strata's server (whose connection loop
//! answers `GET /kv/...` without going through hyper) and SQLite behind an
//! axum route, the service a user would write around it: latency at 1,000
//! requests/s, and throughput with 16 clients (the median of alternating
//! rounds).

use crate::bench::percentile;
use anyhow::{Context, Result};
use base64::Engine;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct BenchKvArgs {
    /// Record counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    pub records: Vec<u64>,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Lookups per latency measurement.
    #[arg(long, default_value_t = 200_000)]
    pub lookups: usize,
    /// Seconds per throughput measurement.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Directory for the data (removed afterwards).
    #[arg(long, default_value = "./strata-bench-kv")]
    pub data_dir: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:012}").into_bytes()
}

fn value(i: u64, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in v.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = b'a' + (x % 26) as u8;
    }
    v
}

/// Key indices: uniform, or Zipfian (s = 0.99) with ranks scattered over
/// the key space so popular keys are not neighbours.
fn sequence(n: u64, count: usize, zipf: bool, seed: u64) -> Vec<u64> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    if !zipf {
        return (0..count).map(|_| next() % n).collect();
    }
    let mut cdf = Vec::with_capacity(n as usize);
    let mut sum = 0.0;
    for r in 1..=n {
        sum += 1.0 / (r as f64).powf(0.99);
        cdf.push(sum);
    }
    (0..count)
        .map(|_| {
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64 * sum;
            let rank = cdf.partition_point(|&c| c < u) as u64;
            rank.wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1) % n
        })
        .collect()
}

#[derive(serde::Serialize, Default, Clone)]
struct Lat {
    p50_us: f64,
    p99_us: f64,
    ops_per_s: f64,
}

#[derive(serde::Serialize)]
struct Row {
    records: u64,
    system: &'static str,
    build_s: f64,
    build_mb_s: f64,
    uniform: Lat,
    zipf: Lat,
    http_p50_us_at_1000: f64,
    http_ops_per_s: f64,
}

/// Times each call of `f` over `keys`: p50/p99 in µs.
fn latency(keys: &[u64], mut f: impl FnMut(u64)) -> (f64, f64) {
    let mut ns: Vec<u64> = Vec::with_capacity(keys.len());
    for &k in keys {
        let t = Instant::now();
        f(k);
        ns.push(t.elapsed().as_nanos() as u64);
    }
    ns.sort_unstable();
    // percentile() takes µs in thousandths: feed nanoseconds, get µs.
    (percentile(&ns, 0.5), percentile(&ns, 0.99))
}

/// Ops/s of `threads` threads each running `f` over `keys` for `secs`.
fn throughput(threads: usize, secs: f64, keys: Arc<Vec<u64>>, f: impl Fn(usize, u64) + Send + Sync + 'static) -> f64 {
    let f = Arc::new(f);
    let done = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let deadline = t + Duration::from_secs_f64(secs);
    let hs: Vec<_> = (0..threads)
        .map(|w| {
            let (f, keys, done) = (f.clone(), keys.clone(), done.clone());
            std::thread::spawn(move || {
                let mut i = w * 7919;
                let mut n = 0u64;
                while Instant::now() < deadline {
                    for _ in 0..256 {
                        f(w, keys[i % keys.len()]);
                        i += 1;
                    }
                    n += 256;
                }
                done.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    for h in hs {
        let _ = h.join();
    }
    done.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64()
}

/// Latency at a fixed request rate of 1,000/s over one connection, with a
/// lean raw HTTP/1.1 client (so the load generator, on the same 2 cores,
/// takes as little as it can from the servers).
async fn http_latency(
    addr: std::net::SocketAddr,
    signer: Option<Arc<strata_auth::Signer>>,
    path: &(dyn Fn(u64) -> String + Send + Sync),
    keys: &[u64],
    secs: f64,
) -> Result<f64> {
    let mut c = crate::bench::RawGetter::connect(addr, signer).await?;
    // Requests are built (and signed) before they are timed.
    let heads: Vec<(String, Vec<u8>)> = keys
        .iter()
        .take(secs.ceil() as usize * 1000 + 1)
        .map(|&k| {
            let p = path(k);
            let h = c.head(&p);
            (p, h)
        })
        .collect();
    let mut lat = Vec::new();
    let start = Instant::now();
    let mut i = 0usize;
    while start.elapsed().as_secs_f64() < secs {
        let slot = start + Duration::from_micros(i as u64 * 1000);
        if let Some(wait) = slot.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let (p, head) = &heads[i % heads.len()];
        let t = Instant::now();
        c.send(head, p).await?;
        lat.push(t.elapsed().as_nanos() as u64);
        i += 1;
    }
    lat.sort_unstable();
    Ok(percentile(&lat, 0.5))
}

/// Requests per connection built before a throughput round starts: the
/// load generator shares the servers' two cores, so it builds (and signs)
/// its requests first, as wrk-style generators do, and cycles over them.
const HEADS_PER_CONNECTION: usize = 4096;

/// Requests/s with 16 connections, each sending its next request when the
/// last is answered.
async fn http_throughput(
    addr: std::net::SocketAddr,
    signer: Option<Arc<strata_auth::Signer>>,
    path: Arc<dyn Fn(u64) -> String + Send + Sync>,
    keys: Arc<Vec<u64>>,
    secs: f64,
) -> Result<f64> {
    let mut conns = Vec::new();
    for w in 0..16usize {
        let c = crate::bench::RawGetter::connect(addr, signer.clone()).await?;
        let heads: Vec<(String, Vec<u8>)> = (0..HEADS_PER_CONNECTION)
            .map(|j| {
                let p = path(keys[(w * 7919 + j) % keys.len()]);
                let h = c.head(&p);
                (p, h)
            })
            .collect();
        conns.push((c, heads));
    }
    let done = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for (mut c, heads) in conns {
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while t.elapsed().as_secs_f64() < secs {
                let (p, head) = &heads[i % heads.len()];
                if c.send(head, p).await.is_err() {
                    return;
                }
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    for tk in tasks {
        let _ = tk.await;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64())
}

/// HTTP throughput rounds per system, alternating between the systems so
/// a noisy stretch of the machine hits both; the median is reported.
const HTTP_ROUNDS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub async fn run(a: BenchKvArgs) -> Result<()> {
    let _ = std::fs::remove_dir_all(&a.data_dir);
    std::fs::create_dir_all(&a.data_dir).with_context(|| format!("creating {}", a.data_dir.display()))?;
    let mut rows = Vec::new();
    for &n in &a.records {
        let dir = a.data_dir.join(format!("n{n}"));
        std::fs::create_dir_all(&dir)?;
        let def = strata_kv::StoreDef { name: "bench".into(), partitions: 8, replication: 1, chunks: 4 };
        let input_mb = n as f64 * (16 + a.value_size) as f64 / 1e6;
        // Build: Strata.
        let (vs, d2) = (a.value_size, dir.clone());
        let t = Instant::now();
        let def2 = def.clone();
        tokio::task::spawn_blocking(move || -> Result<()> {
            let mut b = strata_kv::Builder::new(&def2, &d2.join("built"), strata_kv::Duplicates::Fail, strata_kv::build::DEFAULT_MEMORY)?;
            let mut i = 0;
            while i < n {
                let end = (i + strata_kv::build::BATCH as u64).min(n);
                b.add_batch((i..end).map(|j| (key(j), value(j, vs))).collect())?;
                i = end;
            }
            b.finish()?;
            Ok(())
        })
        .await??;
        let strata_build = t.elapsed().as_secs_f64();
        // Build: SQLite.
        let db = dir.join("bench.sqlite");
        let db2 = db.clone();
        let t = Instant::now();
        tokio::task::spawn_blocking(move || -> Result<()> {
            let mut c = rusqlite::Connection::open(&db2)?;
            c.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID;")?;
            let tx = c.transaction()?;
            {
                let mut st = tx.prepare("INSERT INTO kv (k, v) VALUES (?1, ?2)")?;
                for i in 0..n {
                    st.execute(rusqlite::params![key(i), value(i, vs)])?;
                }
            }
            tx.commit()?;
            Ok(())
        })
        .await??;
        let sqlite_build = t.elapsed().as_secs_f64();
        // Serve: Strata in-process.
        let kv_root = dir.join("kv");
        {
            let s = strata_kv::ReadOnlyStore::open(&kv_root.join("bench"), def.clone(), 1, strata_kv::Search::Binary)?;
            let v = s.load(&dir.join("built"), None)?;
            s.swap(v)?;
        }
        let store = Arc::new(strata_kv::ReadOnlyStore::open(&kv_root.join("bench"), def.clone(), 1, strata_kv::Search::Binary)?);
        let uni = Arc::new(sequence(n, a.lookups, false, 7));
        let zipf = Arc::new(sequence(n, a.lookups, true, 11));
        let measure_strata = |keys: &Arc<Vec<u64>>| -> Lat {
            let snap = store.snapshot().expect("live");
            // Warm the page cache and the branch predictors once.
            for &k in keys.iter().take(20_000) {
                std::hint::black_box(snap.get(&key(k), strata_kv::Search::Binary).ok());
            }
            let keys_b: Vec<Vec<u8>> = keys.iter().map(|&k| key(k)).collect();
            let mut it = keys_b.iter();
            let (p50, p99) = latency(keys, |_| {
                let k = it.next().expect("one per index");
                std::hint::black_box(snap.get(k, strata_kv::Search::Binary).ok());
            });
            let s2 = store.clone();
            let ops = throughput(2, a.seconds, keys.clone(), move |_, k| {
                let v = s2.snapshot().expect("live");
                std::hint::black_box(v.get(&key(k), strata_kv::Search::Binary).ok());
            });
            Lat { p50_us: p50, p99_us: p99, ops_per_s: ops }
        };
        let s_uni = measure_strata(&uni);
        let s_zipf = measure_strata(&zipf);
        // SQLite in-process.
        let measure_sqlite = |keys: &Arc<Vec<u64>>| -> Result<Lat> {
            let c = rusqlite::Connection::open(&db)?;
            let mut st = c.prepare("SELECT v FROM kv WHERE k = ?1")?;
            for &k in keys.iter().take(20_000) {
                let _: Option<Vec<u8>> = st.query_row([key(k)], |r| r.get(0)).ok();
            }
            let keys_b: Vec<Vec<u8>> = keys.iter().map(|&k| key(k)).collect();
            let mut it = keys_b.iter();
            let (p50, p99) = latency(keys, |_| {
                let k = it.next().expect("one per index");
                let v: Option<Vec<u8>> = st.query_row([k], |r| r.get(0)).ok();
                std::hint::black_box(v);
            });
            let conns: Arc<Vec<Mutex<rusqlite::Connection>>> =
                Arc::new((0..2).map(|_| rusqlite::Connection::open(&db).map(Mutex::new)).collect::<Result<_, _>>()?);
            let ops = throughput(2, a.seconds, keys.clone(), move |w, k| {
                let c = conns[w].lock().unwrap_or_else(|p| p.into_inner());
                let mut st = c.prepare_cached("SELECT v FROM kv WHERE k = ?1").expect("prepare");
                let v: Option<Vec<u8>> = st.query_row([key(k)], |r| r.get(0)).ok();
                std::hint::black_box(v);
            });
            Ok(Lat { p50_us: p50, p99_us: p99, ops_per_s: ops })
        };
        let q_uni = measure_sqlite(&uni)?;
        let q_zipf = measure_sqlite(&zipf)?;
        // Over HTTP: Strata's /kv route, and SQLite behind the same axum stack.
        drop(store);
        let kv = strata_server::KvStores::open(kv_root.clone())?;
        let conns: Arc<Vec<Mutex<rusqlite::Connection>>> = Arc::new((0..4).map(|_| rusqlite::Connection::open(&db).map(Mutex::new)).collect::<Result<_, _>>()?);
        let next = Arc::new(AtomicU64::new(0));
        let sqlite_app = axum::Router::new().route(
            "/sqlite/{key}",
            axum::routing::get(move |axum::extract::Path(k): axum::extract::Path<String>| {
                let (conns, next) = (conns.clone(), next.clone());
                async move {
                    let Ok(k) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&k) else {
                        return Err(axum::http::StatusCode::BAD_REQUEST);
                    };
                    let c = conns[next.fetch_add(1, Ordering::Relaxed) as usize % conns.len()].lock().unwrap_or_else(|p| p.into_inner());
                    let mut st = c.prepare_cached("SELECT v FROM kv WHERE k = ?1").map_err(|_| axum::http::StatusCode::INTERNAL_SERVER_ERROR)?;
                    st.query_row([k], |r| r.get::<_, Vec<u8>>(0)).map_err(|_| axum::http::StatusCode::NOT_FOUND)
                }
            }),
        );
        let sl = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let sqlite_addr = sl.local_addr()?;
        let sqlite_srv = tokio::spawn(async move { axum::serve(sl, sqlite_app).await });
        // The node serves only key-value lookups here: no tail cache, whose
        // background prefault (3 GiB of fresh pages, each a host fault on a
        // VM) would run during the HTTP rounds.
        let node_args = crate::server::ServerArgs { tail_cache: "0".into(), ..crate::server::ServerArgs::for_bench(dir.join("node")) };
        let (router_store, router) = crate::server::open_node(&node_args)?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let strata_addr = listener.local_addr()?;
        let (ids, creds) = crate::server::bench_identities(&dir.join("node"), strata_addr).await?;
        let signer = Some(Arc::new(strata_auth::Signer::new(creds, "us-east-1", strata_auth::SERVICE)));
        let state = strata_server::AppState::new(router, strata_node::Disks::single(router_store), kv, ids, strata_node::Workers::new());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let srv = tokio::spawn(strata_server::serve(listener, state, strata_server::limits::Limits::default(), None, async move {
            let _ = stop_rx.await;
        }));
        let b64 = |k: u64| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key(k));
        let s_path: Arc<dyn Fn(u64) -> String + Send + Sync> = Arc::new(move |k| format!("kv/bench/{}", b64(k)));
        let q_path: Arc<dyn Fn(u64) -> String + Send + Sync> = Arc::new(move |k| format!("sqlite/{}", b64(k)));
        // Strata's requests are signed (SigV4) as every client's are; the
        // SQLite server checks nothing.
        let s_http_p50 = http_latency(strata_addr, signer.clone(), &*s_path, &uni, a.seconds).await?;
        let q_http_p50 = http_latency(sqlite_addr, None, &*q_path, &uni, a.seconds).await?;
        let (mut s_rounds, mut q_rounds) = (Vec::new(), Vec::new());
        for _ in 0..HTTP_ROUNDS {
            s_rounds.push(http_throughput(strata_addr, signer.clone(), s_path.clone(), uni.clone(), a.seconds).await?);
            q_rounds.push(http_throughput(sqlite_addr, None, q_path.clone(), uni.clone(), a.seconds).await?);
        }
        let (s_http_ops, q_http_ops) = (median(s_rounds), median(q_rounds));
        let _ = stop_tx.send(());
        let _ = srv.await;
        sqlite_srv.abort();
        rows.push(Row {
            records: n,
            system: "strata",
            build_s: strata_build,
            build_mb_s: input_mb / strata_build,
            uniform: s_uni,
            zipf: s_zipf,
            http_p50_us_at_1000: s_http_p50,
            http_ops_per_s: s_http_ops,
        });
        rows.push(Row {
            records: n,
            system: "sqlite",
            build_s: sqlite_build,
            build_mb_s: input_mb / sqlite_build,
            uniform: q_uni,
            zipf: q_zipf,
            http_p50_us_at_1000: q_http_p50,
            http_ops_per_s: q_http_ops,
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_dir_all(&a.data_dir);
    if a.json {
        println!("{}", serde_json::to_string(&rows)?);
        return Ok(());
    }
    println!(
        "{}-byte values; in-process: {} lookups for latency, 2 threads for throughput; HTTP: 1,000 req/s for latency, 16 clients for throughput (median of {HTTP_ROUNDS} alternating rounds)",
        a.value_size, a.lookups
    );
    println!();
    println!(
        "| records | system | build s | build MB/s | uniform p50/p99 µs | uniform ops/s | zipf p50/p99 µs | zipf ops/s | HTTP p50 µs @1000/s | HTTP ops/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.1} | {:.0} | {:.2} / {:.2} | {:.0} | {:.2} / {:.2} | {:.0} | {:.0} | {:.0} |",
            r.records,
            r.system,
            r.build_s,
            r.build_mb_s,
            r.uniform.p50_us,
            r.uniform.p99_us,
            r.uniform.ops_per_s,
            r.zipf.p50_us,
            r.zipf.p99_us,
            r.zipf.ops_per_s,
            r.http_p50_us_at_1000,
            r.http_ops_per_s
        );
    }
    Ok(())
}

//! `strata bench console`: how fast the web console's pages answer on a
//! node holding many objects (issue 26: p99 within 100 ms at 100,000).
//! One single-node server; a bucket filled over S3 with `--objects`
//! objects in 100 folders; a signed-in session; then each page asked for
//! `--requests` times in turn, and beside it the one API call the page
//! itself makes (the baseline: what the page adds is the difference).

use crate::bench::percentile;
use crate::bench_s3::start_strata;
use anyhow::{Context, Result};
use bytes::Bytes;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct BenchConsoleArgs {
    /// Directory for the server's data (removed afterwards).
    #[arg(long, default_value = "./strata-bench-console")]
    pub dir: PathBuf,
    /// Objects in the browsed bucket.
    #[arg(long, default_value_t = 100_000)]
    pub objects: u64,
    /// Requests per page.
    #[arg(long, default_value_t = 200)]
    pub requests: usize,
    /// The most a page's p99 may take, ms.
    #[arg(long, default_value_t = 100.0)]
    pub limit_ms: f64,
    /// Keep the data directory.
    #[arg(long)]
    pub keep: bool,
}

pub async fn run(a: BenchConsoleArgs) -> Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let r = run_in(&a).await;
    if !a.keep {
        let _ = std::fs::remove_dir_all(&a.dir);
    }
    r
}

/// Latencies (µs, sorted) of `n` sequential calls of `f`, after 5 unmeasured ones.
async fn timed<F, Fut>(n: usize, f: F) -> Result<Vec<u64>>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    for _ in 0..5 {
        f().await?;
    }
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f().await?;
        lat.push(t.elapsed().as_micros() as u64);
    }
    lat.sort_unstable();
    Ok(lat)
}

async fn run_in(a: &BenchConsoleArgs) -> Result<()> {
    let server = start_strata(&a.dir.join("node"), &[])?;
    crate::bench_s3::warmed_up(&server).await?;
    let s3 = server.client.clone();
    s3.call(http::Method::PUT, "/bench", Bytes::new()).await.context("creating the bucket")?;

    // The bucket: `objects` small objects in 100 folders.
    let bar = indicatif::ProgressBar::new(a.objects);
    bar.set_style(
        indicatif::ProgressStyle::with_template("filling the bucket [{bar:30}] {pos}/{len} objects ({per_sec})").map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (s3, next, bar, total) = (s3.clone(), next.clone(), bar.clone(), a.objects);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok::<_, anyhow::Error>(());
                }
                s3.call(http::Method::PUT, &format!("/bench/d{:02}/obj{i:07}", i % 100), Bytes::from_static(b"strata console benchmark object")).await?;
                bar.inc(1);
            }
        }));
    }
    for t in tasks {
        t.await.context("a filling task")??;
    }
    bar.finish();

    // A session, as a browser gets one.
    let url = server.admin.clone().context("the server printed no HTTP address")?;
    let web = strata_client::Client::with_options(&url, &strata_client::ClientOptions::default());
    let creds = &s3.creds;
    let form = format!("access_key_id={}&secret_access_key={}", urlenc(&creds.access_key_id), urlenc(&creds.secret_access_key));
    let r = web
        .send(http::Method::POST, "/ui/login", &[("content-type", "application/x-www-form-urlencoded".into())], strata_client::full(form))
        .await
        .context("signing in to the console")?;
    let cookie = r
        .head
        .headers
        .get(http::header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .context("the console set no session cookie")?
        .to_owned();
    let page = |path: String| {
        let (web, cookie) = (web.clone(), cookie.clone());
        async move {
            let r = web.send(http::Method::GET, &path, &[("cookie", cookie)], strata_client::full(Bytes::new())).await?;
            let body = r.bytes().await?;
            anyhow::ensure!(!body.is_empty(), "{path}: an empty page");
            Ok::<_, anyhow::Error>(String::from_utf8_lossy(&body).into_owned())
        }
    };
    // A folder's fifth page (or its last, in a smaller bucket): the
    // continuation token the page before links to.
    let mut path = "/ui/buckets/bench?prefix=d42%2F".to_owned();
    for _ in 0..4 {
        let html = page(path.clone()).await?;
        let Some(at) = html.find("id=\"next-page\" href=\"") else { break };
        path = html[at + "id=\"next-page\" href=\"".len()..].split('"').next().unwrap_or("").replace("&amp;", "&");
    }
    let fifth = path;
    let token = fifth.split("token=").nth(1).unwrap_or("").to_owned();
    // The baselines' S3 calls, signed as the page signs them (with their queries).
    let s3api = strata_client::Client::with_options(&s3.endpoint, &strata_client::ClientOptions { credentials: Some(s3.creds.clone()), ..Default::default() });

    let pages: Vec<(&str, String, String)> = vec![
        ("overview", "/ui/overview".into(), "/health".into()),
        ("buckets", "/ui/buckets".into(), "/".into()),
        ("bucket root (100 folders)", "/ui/buckets/bench".into(), "/bench?list-type=2&delimiter=%2F&max-keys=100&prefix=".into()),
        ("folder, first page", "/ui/buckets/bench?prefix=d42%2F".into(), "/bench?list-type=2&delimiter=%2F&max-keys=100&prefix=d42%2F".into()),
        ("folder, fifth page", fifth, format!("/bench?list-type=2&delimiter=%2F&max-keys=100&prefix=d42%2F&continuation-token={token}")),
        ("object", "/ui/buckets/bench/object?key=d42%2Fobj0000042".into(), "/bench/d42/obj0000042".into()),
        ("access keys", "/ui/keys".into(), String::new()),
    ];
    println!(
        "console pages on one node holding {} objects (bucket `bench`, 100 folders), {} sequential requests each after 5 unmeasured",
        a.objects, a.requests
    );
    println!("baseline: the S3 or HTTP call the page makes, asked directly in the same run (what the page adds is the difference)");
    println!("{:<28} {:>9} {:>9} {:>9} {:>14} {:>9}  verdict", "page", "p50 ms", "p99 ms", "max ms", "call p99 ms", "limit");
    let mut failed = 0;
    for (name, ui, call) in pages {
        let lat = timed(a.requests, || {
            let p = page(ui.clone());
            async move { p.await.map(drop) }
        })
        .await?;
        let base = if call.is_empty() {
            "-".to_owned()
        } else if call.starts_with("/health") {
            let l = timed(a.requests, || {
                let web = web.clone();
                async move { web.json(http::Method::GET, "/health").await.map(drop).map_err(anyhow::Error::from) }
            })
            .await?;
            format!("{:.2}", percentile(&l, 0.99))
        } else {
            let method = if name == "object" { http::Method::HEAD } else { http::Method::GET };
            let l = timed(a.requests, || {
                let (s3api, call, method) = (s3api.clone(), call.clone(), method.clone());
                async move {
                    let r = s3api.send(method, &call, &[], strata_client::full(Bytes::new())).await?;
                    r.bytes().await?;
                    Ok(())
                }
            })
            .await?;
            format!("{:.2}", percentile(&l, 0.99))
        };
        let p99 = percentile(&lat, 0.99);
        let pass = p99 <= a.limit_ms;
        if !pass {
            failed += 1;
        }
        println!(
            "{name:<28} {:>9.2} {p99:>9.2} {:>9.2} {base:>14} {:>7.0}ms  {}",
            percentile(&lat, 0.5),
            lat.last().copied().unwrap_or(0) as f64 / 1000.0,
            a.limit_ms,
            if pass { "PASS" } else { "FAIL" }
        );
    }
    anyhow::ensure!(failed == 0, "{failed} pages over the {} ms p99 limit", a.limit_ms);
    Ok(())
}

fn urlenc(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

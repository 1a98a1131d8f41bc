//! The client commands: put, get, info, delete, ttl, partitions, compact.

use anyhow::{Context, Result, bail};
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use strata_client::{Client, PutArgs as ClientPutArgs};
use tokio::io::AsyncWriteExt;

/// Transfers larger than this show a progress bar (on a terminal).
const PROGRESS_MIN_BYTES: u64 = 4 << 20;

/// Flags every client command has.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Server URL.
    #[arg(long, env = "STRATA_URL", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub auth: crate::identity::AuthArgs,
}

impl Common {
    /// A client of `--server`, signing and trusting as the flags say.
    pub fn client(&self) -> Result<Client> {
        Ok(Client::with_options(&self.server, &self.auth.options()?))
    }
}

#[derive(clap::Args, Debug)]
pub struct PutArgs {
    /// File to store, or `-` for stdin.
    pub file: String,
    /// Time to live in seconds.
    #[arg(long)]
    pub ttl: Option<u64>,
    /// User metadata, repeatable: `--meta key=value`.
    #[arg(long, value_parser = parse_meta)]
    pub meta: Vec<(String, String)>,
    /// MIME type.
    #[arg(long)]
    pub content_type: Option<String>,
    /// Owner (service or account).
    #[arg(long)]
    pub owner: Option<String>,
    /// Acks the put needs: `one`, `majority`, `all` or a count (default: the cluster's policy).
    #[arg(long)]
    pub policy: Option<String>,
    /// The container, `account/container` (`strata container create`; default: default/default).
    #[arg(long)]
    pub container: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

fn parse_meta(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("expected key=value, got {s:?}"))?;
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(format!("metadata key {k:?} must be letters, digits, '-' or '_'"));
    }
    Ok((k.to_ascii_lowercase(), v.to_string()))
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// Blob id.
    pub id: String,
    /// Output file (default: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Byte range, e.g. `0-99`, `100-` or `-50`.
    #[arg(long)]
    pub range: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct IdArgs {
    /// Blob id.
    pub id: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct PresignArgs {
    /// Blob id.
    pub id: String,
    /// Seconds the URL works (at most 604800, seven days).
    #[arg(long, default_value_t = 3600)]
    pub expires: u64,
    #[command(flatten)]
    pub common: Common,
}

/// `strata presign`: a GET URL for a blob that anyone may use until it
/// expires, signed with the CLI's key (which must be able to read the blob).
pub async fn presign(a: PresignArgs) -> Result<()> {
    if !(1..=strata_auth::sigv4::PRESIGNED_EXPIRES_MAX_SECS).contains(&a.expires) {
        bail!("--expires must be from 1 to {} seconds (seven days)", strata_auth::sigv4::PRESIGNED_EXPIRES_MAX_SECS);
    }
    let url = a
        .common
        .client()?
        .presign(&http::Method::GET, &format!("/{}", a.id), a.expires)
        .context("presigning needs credentials (--credentials or an admin.credentials)")?;
    println!("{url}");
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct TtlArgs {
    /// Blob id.
    pub id: String,
    /// Seconds from now, or `never`.
    pub ttl: String,
    #[command(flatten)]
    pub common: Common,
}

pub(crate) fn bar(len: u64, verb: &str) -> ProgressBar {
    if len < PROGRESS_MIN_BYTES {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    let style = ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}").map(|s| s.progress_chars("=> "));
    if let Ok(s) = style {
        pb.set_style(s);
    }
    pb.set_message(verb.to_string());
    pb
}

pub async fn put(a: PutArgs) -> Result<()> {
    let client = a.common.client()?;
    let args = ClientPutArgs { ttl_secs: a.ttl, content_type: a.content_type, owner: a.owner, meta: a.meta, policy: a.policy, container: a.container };
    let (reader, size): (Box<dyn tokio::io::AsyncRead + Unpin + Send + Sync>, Option<u64>) = if a.file == "-" {
        (Box::new(tokio::io::stdin()), None)
    } else {
        let f = tokio::fs::File::open(&a.file).await.with_context(|| format!("opening {}", a.file))?;
        let len = f.metadata().await?.len();
        (Box::new(f), Some(len))
    };
    let pb = bar(size.unwrap_or(0), "put");
    let pb2 = pb.clone();
    let stream = strata_client::read_stream(reader).inspect(move |r| {
        if let Ok(b) = r {
            pb2.inc(b.len() as u64)
        }
    });
    let res = client.put(strata_client::streaming(stream), size, &args).await;
    pb.finish_and_clear();
    let res = res?;
    if a.common.json {
        println!("{}", serde_json::json!({ "id": res.id, "size": res.size }));
    } else {
        println!("{}", res.id);
    }
    Ok(())
}

pub async fn get(a: GetArgs) -> Result<()> {
    let client = a.common.client()?;
    let range = a.range.as_ref().map(|r| format!("bytes={r}"));
    let resp = client.get(&a.id, range.as_deref()).await?;
    let len = resp.content_length().unwrap_or(0);
    let pb = if a.output.is_some() { bar(len, "get") } else { ProgressBar::hidden() };
    let mut out: Box<dyn tokio::io::AsyncWrite + Unpin + Send> = match &a.output {
        Some(p) => Box::new(tokio::fs::File::create(p).await.with_context(|| format!("creating {}", p.display()))?),
        None => Box::new(tokio::io::stdout()),
    };
    let mut stream = Box::pin(resp.into_stream());
    let mut written = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        out.write_all(&chunk).await?;
        written += chunk.len() as u64;
        pb.inc(chunk.len() as u64);
    }
    out.flush().await?;
    pb.finish_and_clear();
    if written != len {
        bail!("the server sent {written} of {len} bytes: the transfer was cut short");
    }
    if a.common.json && a.output.is_some() {
        println!("{}", serde_json::json!({ "id": a.id, "bytes": written }));
    }
    Ok(())
}

pub async fn info(a: IdArgs) -> Result<()> {
    let v = a.common.client()?.info(&a.id).await?;
    if a.common.json {
        println!("{v}");
        return Ok(());
    }
    println!("id            {}", v["id"].as_str().unwrap_or(""));
    println!("size          {} bytes", v["size"]);
    println!("content type  {}", v["content_type"].as_str().unwrap_or(""));
    if let Some(o) = v["owner"].as_str().filter(|o| !o.is_empty()) {
        println!("owner         {o}");
    }
    println!("created (ms)  {}", v["created_ms"]);
    println!("expires (ms)  {}", v["expiry_ms"].as_u64().map_or("never".to_string(), |e| e.to_string()));
    if v["chunks"].as_u64().unwrap_or(0) > 0 {
        println!("chunks        {}", v["chunks"]);
    }
    if let Some(m) = v["meta"].as_object() {
        for (k, val) in m {
            println!("meta {k:<8} {}", val.as_str().unwrap_or(""));
        }
    }
    Ok(())
}

pub async fn delete(a: IdArgs) -> Result<()> {
    a.common.client()?.delete(&a.id).await?;
    if a.common.json {
        println!("{}", serde_json::json!({ "id": a.id, "deleted": true }));
    } else {
        println!("deleted {}", a.id);
    }
    Ok(())
}

pub async fn ttl(a: TtlArgs) -> Result<()> {
    a.common.client()?.update_ttl(&a.id, &a.ttl).await?;
    if a.common.json {
        println!("{}", serde_json::json!({ "id": a.id, "ttl": a.ttl }));
    } else {
        println!("ttl of {} set to {}", a.id, a.ttl);
    }
    Ok(())
}

pub async fn partitions(a: Common) -> Result<()> {
    let v = a.client()?.json(http::Method::GET, "/admin/partitions").await?;
    if a.json {
        println!("{v}");
        return Ok(());
    }
    println!("{:>9}  {:<10}  {:>12}  {:>12}  {:>8}  {:>10}  {:>7}", "PARTITION", "STATE", "USED", "CAPACITY", "SEGMENTS", "NEXT LSN", "DAMAGED");
    let mut damaged = Vec::new();
    for p in v.as_array().into_iter().flatten() {
        println!(
            "{:>9}  {:<10}  {:>12}  {:>12}  {:>8}  {:>10}  {:>7}",
            p["partition"].to_string(),
            p["state"].as_str().unwrap_or(""),
            p["used_bytes"].to_string(),
            p["capacity_bytes"].to_string(),
            p["segments"].to_string(),
            p["next_lsn"].to_string(),
            p["damaged_ranges"].as_u64().unwrap_or(0)
        );
        for d in p["damage"].as_array().into_iter().flatten() {
            damaged.push((p["partition"].to_string(), d.clone()));
        }
    }
    if !damaged.is_empty() {
        println!("\nQuarantined (damaged) records, awaiting repair from a replica:");
        for (p, d) in damaged {
            println!(
                "  partition {p}  segment {} gen {}  offset {}  {} bytes  key {}",
                d["segment"],
                d["generation"],
                d["offset"],
                d["len"],
                d["key"].as_str().unwrap_or("unknown (the record's header is damaged)")
            );
        }
    }
    Ok(())
}

/// `strata scrub`.
#[derive(clap::Subcommand, Debug)]
pub enum ScrubCmd {
    /// What the scrubber is doing and found in its last pass.
    Status(Common),
    /// Starts a scrub pass now.
    Now(ScrubNowArgs),
}

#[derive(clap::Args, Debug)]
pub struct ScrubNowArgs {
    /// Also compare each blob's data checksum with the other replicas.
    #[arg(long)]
    pub deep: bool,
    /// Wait for the pass to finish, with a progress bar, and print what it found.
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub common: Common,
}

fn print_scrub(v: &serde_json::Value) {
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let state = if v["running"].as_bool().unwrap_or(false) { "running" } else { "idle" };
    println!("state           {state}{}", if v["deep"].as_bool().unwrap_or(false) { " (deep)" } else { "" });
    println!("passes          {}", n("passes"));
    println!("replicas        {} of {}", n("replicas_done"), n("replicas_total"));
    println!("keys checked    {}", n("keys_checked"));
    println!("bytes verified  {}", n("bytes_verified"));
    println!("damaged found   {}", n("damaged_found"));
    println!("repaired        {}", n("repaired"));
    println!("deletes applied {}", n("deletes_applied"));
    println!("inconsistent    {}", n("inconsistent"));
    println!("unrepaired      {}", n("unrepaired"));
    for e in v["errors"].as_array().into_iter().flatten() {
        println!("error           {}", e.as_str().unwrap_or(""));
    }
}

pub async fn scrub(c: ScrubCmd) -> Result<()> {
    match c {
        ScrubCmd::Status(a) => {
            let v = a.client()?.json(http::Method::GET, "/admin/scrub").await?;
            if a.json {
                println!("{v}");
            } else {
                print_scrub(&v);
            }
            Ok(())
        }
        ScrubCmd::Now(a) => {
            let body = serde_json::json!({ "deep": a.deep });
            let started = format!("scrub pass started{}; follow it with `strata scrub status`", if a.deep { " (deep)" } else { "" });
            let pass = Pass { path: "/admin/scrub", body, started, bar: "scrub {bar:40} {pos}/{len} replicas {msg}" };
            let v = pass
                .run(&a.common, a.wait, |v| {
                    (v["replicas_done"].as_u64(), v["replicas_total"].as_u64(), format!("{} keys, {} damaged", v["keys_checked"], v["damaged_found"]))
                })
                .await?;
            if let Some(v) = v
                && !a.common.json
            {
                print_scrub(&v);
            }
            Ok(())
        }
    }
}

/// A background pass a node runs on request (scrub, sweep): started with a
/// POST, then, with `--wait`, followed with a progress bar until the node
/// reports it finished.
struct Pass {
    path: &'static str,
    body: serde_json::Value,
    started: String,
    bar: &'static str,
}

impl Pass {
    /// Starts the pass; with `wait`, returns its final status (printed as
    /// JSON here with `--json`). `progress` gives (done, total, message).
    async fn run(
        self,
        common: &Common,
        wait: bool,
        progress: impl Fn(&serde_json::Value) -> (Option<u64>, Option<u64>, String),
    ) -> Result<Option<serde_json::Value>> {
        let client = common.client()?;
        let before = client.json(http::Method::GET, self.path).await?["passes"].as_u64().unwrap_or(0);
        client.post_json(self.path, &self.body).await?;
        if !wait {
            if !common.json {
                println!("{}", self.started);
            }
            return Ok(None);
        }
        let bar = (!common.json).then(|| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(indicatif::ProgressStyle::with_template(self.bar).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()));
            b
        });
        let v = loop {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let v = client.json(http::Method::GET, self.path).await?;
            if let Some(b) = &bar {
                let (done, total, msg) = progress(&v);
                b.set_length(total.unwrap_or(0));
                b.set_position(done.unwrap_or(0));
                b.set_message(msg);
            }
            if v["passes"].as_u64().unwrap_or(0) > before && !v["running"].as_bool().unwrap_or(false) {
                break v;
            }
        };
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        if common.json {
            println!("{v}");
        }
        Ok(Some(v))
    }
}

/// `strata sweep`.
#[derive(clap::Subcommand, Debug)]
pub enum SweepCmd {
    /// What the orphan sweep is doing and freed in its last pass.
    Status(Common),
    /// Starts an orphan sweep pass now.
    Now(SweepNowArgs),
}

#[derive(clap::Args, Debug)]
pub struct SweepNowArgs {
    /// Wait for the pass to finish, with a progress bar, and print what it freed.
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub common: Common,
}

fn print_sweep(v: &serde_json::Value) {
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let state = if v["running"].as_bool().unwrap_or(false) { format!("running ({})", v["phase"].as_str().unwrap_or("")) } else { "idle".into() };
    println!("state           {state}");
    println!("passes          {}", n("passes"));
    println!("grace           {} s", n("grace_ms") / 1000);
    println!("partitions      {} of {}", n("partitions_listed"), n("partitions_total"));
    println!("keys            {}", n("keys"));
    println!("chunk lists     {}", n("composites_read"));
    println!("referenced      {}", n("referenced"));
    println!("candidates      {}", n("candidates"));
    println!("too young       {}", n("too_young"));
    println!("expiring        {}", n("expiring"));
    println!("freed           {}", n("freed"));
    if let Some(why) = v["stopped"].as_str() {
        println!("stopped         {why}");
    }
    for e in v["errors"].as_array().into_iter().flatten() {
        println!("error           {}", e.as_str().unwrap_or(""));
    }
}

pub async fn sweep(c: SweepCmd) -> Result<()> {
    match c {
        SweepCmd::Status(a) => {
            let v = a.client()?.json(http::Method::GET, "/admin/sweep").await?;
            if a.json {
                println!("{v}");
            } else {
                print_sweep(&v);
            }
            Ok(())
        }
        SweepCmd::Now(a) => {
            let started = "orphan sweep started; follow it with `strata sweep status`".to_string();
            let pass = Pass { path: "/admin/sweep", body: serde_json::json!({}), started, bar: "sweep {bar:40} {pos}/{len} partitions {msg}" };
            let v = pass
                .run(&a.common, a.wait, |v| {
                    (v["partitions_listed"].as_u64(), v["partitions_total"].as_u64(), format!("{}, {} freed", v["phase"].as_str().unwrap_or(""), v["freed"]))
                })
                .await?;
            let Some(v) = v else { return Ok(()) };
            if !a.common.json {
                print_sweep(&v);
            }
            // A pass that could not finish says so in the exit status.
            if let Some(why) = v["stopped"].as_str() {
                anyhow::bail!("the sweep stopped before freeing anything: {why}");
            }
            Ok(())
        }
    }
}

pub async fn compact(a: Common) -> Result<()> {
    let v = a.client()?.json(http::Method::POST, "/admin/compact").await?;
    if a.json {
        println!("{v}");
    } else {
        println!("compacted {} segments, reclaimed {} bytes", v["segments_compacted"], v["bytes_reclaimed"]);
    }
    Ok(())
}

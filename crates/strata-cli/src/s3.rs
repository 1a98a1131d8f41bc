//! The S3 side of the binary: starting the S3 listener next to a node, and
//! `strata key` / `strata bucket` (access keys, grants, public buckets).

use crate::commands::Common;
use anyhow::{Context, Result};
use serde_json::json;
use std::sync::Arc;

use strata_names::{NameIndex, NameOp};
use strata_types::Clock;

/// Opens the embedded name index under `data_dir`, creating its admin
/// key named `default` on first start; returns the index and that key's
/// id and secret.
pub async fn open_names(data_dir: &std::path::Path) -> Result<(Arc<dyn NameIndex>, AccessPair)> {
    let names = strata_names::EmbeddedIndex::open(&data_dir.join("names")).context("opening the name index")?;
    let names: Arc<dyn NameIndex> = Arc::new(names);
    let existing = strata_names::read(&*names, |s| s.keys.values().find(|k| k.name == "default" && k.admin).map(|k| (k.id.clone(), k.secret.clone())));
    let pair = match existing {
        Some(p) => p,
        None => {
            let key = strata_server::new_access_key("default", true, strata_types::SystemClock.now_ms());
            let pair = (key.id.clone(), key.secret.clone());
            names.apply(NameOp::CreateKey { key }).await.context("creating the default access key")?;
            pair
        }
    };
    Ok((names, pair))
}

/// An access key id and its secret.
pub type AccessPair = (String, String);

/// Starts the S3 listener on `listen` for `router` and `names`; returns the
/// bound address.
pub async fn start(
    listen: &str,
    domains: Vec<String>,
    region: String,
    state: Arc<strata_server::AppState>,
    names: Arc<dyn NameIndex>,
    limits: strata_server::limits::Limits,
    tls: Option<(Arc<rustls::ServerConfig>, Arc<strata_server::AppState>)>,
) -> Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("binding the S3 listener {listen}"))?;
    let addr = listener.local_addr()?;
    let clock: Arc<dyn Clock> = Arc::new(strata_types::SystemClock);
    let obs_state = state.clone();
    let observer: strata_s3::Observer = Arc::new(move |op, status, secs| obs_state.metrics.observe_s3(op, status, secs));
    let opts = strata_s3::S3Options { region, domains, kms_root: state.kms_root.clone(), ..strata_s3::S3Options::default() };
    let svc = strata_s3::service(state.router.clone(), names.clone(), clock.clone(), opts, Some(observer));
    strata_s3::spawn_expiry_sweeper(state.router.clone(), names, clock, std::time::Duration::from_secs(60));
    let gate = state.metrics.connection_gate(limits.max_connections);
    tokio::spawn(async move {
        if let Err(e) = strata_server::serve_service(listener, svc, gate, limits, tls, std::future::pending()).await {
            tracing::error!(error = %e, "the S3 listener stopped");
        }
    });
    Ok(addr)
}

#[derive(clap::Subcommand, Debug)]
pub enum BucketCmd {
    /// Lists buckets with their object counts and bytes.
    List(Common),
    /// Allows anonymous reads of a bucket (`--off` stops them).
    Public(BucketPublic),
}

#[derive(clap::Args, Debug)]
pub struct BucketPublic {
    #[command(flatten)]
    common: Common,
    /// Bucket.
    bucket: String,
    /// Make it private again.
    #[arg(long)]
    off: bool,
}

use crate::identity::{print, send_json};

#[derive(clap::Subcommand, Debug)]
pub enum KmsCmd {
    /// Lists the key store's keys (ids and states; key material never leaves the server).
    List(Common),
    /// Creates a key that SSE-KMS requests can name (`--sse aws:kms --sse-kms-key-id ID`).
    Create(KmsCreate),
    /// Enables a disabled key.
    Enable(KmsId),
    /// Disables a key: it seals no new object and opens none until enabled again.
    Disable(KmsId),
}

#[derive(clap::Args, Debug)]
pub struct KmsCreate {
    #[command(flatten)]
    common: Common,
    /// Key id: 1 to 64 of A-Z, a-z, 0-9, '-', '_', '/' and '.'.
    id: String,
    /// A description for people.
    #[arg(long, default_value = "")]
    description: String,
}

#[derive(clap::Args, Debug)]
pub struct KmsId {
    #[command(flatten)]
    common: Common,
    /// Key id.
    id: String,
}

pub async fn kms(cmd: KmsCmd) -> Result<()> {
    let line = |k: &serde_json::Value| {
        format!(
            "{:<40} {:<8} {}",
            k["id"].as_str().unwrap_or(""),
            if k["enabled"].as_bool().unwrap_or(false) { "enabled" } else { "disabled" },
            k["description"].as_str().unwrap_or("")
        )
    };
    match cmd {
        KmsCmd::List(c) => {
            let v = c.client()?.json(http::Method::GET, "/admin/kms/keys").await?;
            print(c.json, &v, |v| {
                let mut out = format!("{:<40} {:<8} description", "key id", "state");
                for k in v.as_array().into_iter().flatten() {
                    out.push('\n');
                    out.push_str(&line(k));
                }
                out
            })
        }
        KmsCmd::Create(a) => {
            let c = a.common.client()?;
            let v =
                send_json(&c, http::Method::POST, "/admin/kms/keys", json!({ "id": a.id, "description": a.description })).await.context("creating the key")?;
            print(a.common.json, &v, |v| format!("created key {}", v["id"].as_str().unwrap_or("")))
        }
        KmsCmd::Enable(a) => set_enabled(a, true).await,
        KmsCmd::Disable(a) => set_enabled(a, false).await,
    }
}

async fn set_enabled(a: KmsId, enabled: bool) -> Result<()> {
    let c = a.common.client()?;
    let v = send_json(&c, http::Method::PUT, &format!("/admin/kms/keys/{}/enabled", a.id), json!({ "enabled": enabled }))
        .await
        .context("changing the key's state")?;
    print(a.common.json, &v, |_| format!("key {} is {}", a.id, if enabled { "enabled" } else { "disabled" }))
}

pub async fn bucket(cmd: BucketCmd) -> Result<()> {
    match cmd {
        BucketCmd::List(c) => {
            let v = c.client()?.json(http::Method::GET, "/admin/s3/buckets").await?;
            print(c.json, &v, |v| {
                let mut out = format!("{:<32} {:>10} {:>14} {:<6}", "bucket", "objects", "bytes", "public");
                for b in v.as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "\n{:<32} {:>10} {:>14} {:<6}",
                        b["bucket"].as_str().unwrap_or(""),
                        b["objects"].as_u64().unwrap_or(0),
                        b["bytes"].as_u64().unwrap_or(0),
                        b["public"].as_bool().unwrap_or(false)
                    ));
                }
                out
            })
        }
        BucketCmd::Public(a) => {
            let c = a.common.client()?;
            let v = send_json(&c, http::Method::PUT, &format!("/admin/s3/buckets/{}/public", a.bucket), json!({ "public": !a.off }))
                .await
                .context("setting the bucket's access")?;
            print(a.common.json, &v, |_| format!("bucket {} is {}", a.bucket, if a.off { "private" } else { "public (anonymous reads allowed)" }))
        }
    }
}

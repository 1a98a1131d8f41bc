//! Who the CLI is and what it trusts (the flags every client command has),
//! and the commands that manage identities: `strata key` (access keys and
//! their rights), `strata container` (Ambry's accounts and containers of
//! native blobs) and `strata audit` (the log of administrative actions).
//!
//! Credentials, first found wins: `--access-key-id` with
//! `--secret-access-key` (or `STRATA_ACCESS_KEY_ID`/`STRATA_SECRET_ACCESS_KEY`);
//! `--credentials FILE` (`STRATA_CREDENTIALS`); `./strata-data/admin.credentials`,
//! which `strata server` writes on first start (so README's session needs no
//! set-up); `~/.config/strata/credentials`. `--cluster-secret` makes the CLI
//! present a certificate of the cluster's CA (a superuser, for `cluster
//! init` before any key exists); `--ca-file` says whom to trust on `https://`.

use crate::commands::Common;
use anyhow::{Context, Result, bail};
use bytes::Bytes;
use serde_json::json;
use std::path::{Path, PathBuf};
use strata_client::{Client, ClientOptions, Credentials, full};

/// Where `strata server` (with its default data directory) writes its admin key.
pub const DEFAULT_CREDENTIALS: &str = "strata-data/admin.credentials";

/// How a client command authenticates and what it trusts.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AuthArgs {
    /// A credentials file (AWS shared-credentials format) to sign with.
    #[arg(long, env = "STRATA_CREDENTIALS")]
    pub credentials: Option<PathBuf>,
    /// An access key id to sign with (with --secret-access-key).
    #[arg(long, env = "STRATA_ACCESS_KEY_ID", requires = "secret_access_key")]
    pub access_key_id: Option<String>,
    /// Its secret.
    #[arg(long, env = "STRATA_SECRET_ACCESS_KEY", hide_env_values = true, requires = "access_key_id")]
    pub secret_access_key: Option<String>,
    /// Certificates to trust for https:// (PEM: a cluster's cluster-ca.pem,
    /// a self-signed certificate, a private CA; or a cluster secret file).
    #[arg(long, env = "STRATA_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// The cluster secret: act as a node (trust its CA, present a
    /// certificate from it).
    #[arg(long, env = "STRATA_CLUSTER_SECRET")]
    pub cluster_secret: Option<PathBuf>,
    /// The region signatures are scoped to (the server's --s3-region).
    #[arg(long, env = "STRATA_REGION", default_value = "us-east-1")]
    pub region: String,
    /// Send unsigned requests, whatever credentials are around.
    #[arg(long)]
    pub anonymous: bool,
}

fn home_credentials() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".config/strata/credentials"))
}

impl AuthArgs {
    /// The credentials to sign with, if any (see the module docs for the order).
    pub fn credentials(&self) -> Result<Option<Credentials>> {
        if self.anonymous {
            return Ok(None);
        }
        if let (Some(id), Some(secret)) = (&self.access_key_id, &self.secret_access_key) {
            return Ok(Some(Credentials { access_key_id: id.clone(), secret_access_key: secret.clone() }));
        }
        if let Some(path) = &self.credentials {
            return Ok(Some(strata_auth::credentials::load(path)?));
        }
        for path in [Some(PathBuf::from(DEFAULT_CREDENTIALS)), home_credentials()].into_iter().flatten() {
            if path.exists() {
                return Ok(Some(strata_auth::credentials::load(&path)?));
            }
        }
        Ok(None)
    }

    /// The client options these flags describe.
    pub fn options(&self) -> Result<ClientOptions> {
        let secret = self.cluster_secret.as_deref().map(strata_auth::ClusterSecret::load).transpose()?;
        let roots = match (&self.ca_file, &secret) {
            (Some(f), _) => Some(strata_auth::tls::roots_from_file(f)?),
            (None, Some(s)) => Some(s.roots()?),
            (None, None) => None,
        };
        let identity = secret.as_ref().map(|s| s.mint(&["strata-cli".into()])).transpose()?;
        let tls = match roots {
            Some(r) => Some(strata_auth::tls::client_config(r, identity.as_ref())?),
            None => None,
        };
        // A node's certificate names the cluster; with only the secret to
        // go by, ask for that name whatever address the URL gives.
        let server_name = (secret.is_some() && self.ca_file.is_none()).then(|| strata_auth::CLUSTER_SERVER_NAME.to_owned());
        // With the cluster secret and no key named, the certificate is the
        // identity: a stray admin.credentials of another server must not
        // sign for it.
        let explicit = self.credentials.is_some() || self.access_key_id.is_some();
        let credentials = if secret.is_some() && !explicit { None } else { self.credentials()? };
        Ok(ClientOptions { credentials, region: Some(self.region.clone()), tls, server_name })
    }
}

/// Sends a JSON body and reads a JSON answer.
pub(crate) async fn send_json(c: &Client, method: http::Method, path: &str, body: serde_json::Value) -> Result<serde_json::Value> {
    let b = serde_json::to_vec(&body)?;
    let resp = c.send(method, path, &[("content-type", "application/json".to_string())], full(Bytes::from(b))).await?;
    Ok(serde_json::from_slice(&resp.bytes().await?)?)
}

/// Prints `v` as JSON with `--json`, else as `text` renders it.
pub(crate) fn print(json_out: bool, v: &serde_json::Value, text: impl FnOnce(&serde_json::Value) -> String) -> Result<()> {
    if json_out {
        println!("{}", serde_json::to_string_pretty(v)?);
    } else {
        println!("{}", text(v));
    }
    Ok(())
}

#[derive(clap::Subcommand, Debug)]
pub enum KeyCmd {
    /// Creates an access key and prints its id and secret (the secret is shown only now).
    Create(KeyCreate),
    /// Lists access keys and their rights (without secrets).
    List(Common),
    /// Deletes (revokes) an access key, on every node before it answers.
    Delete(KeyId),
    /// Grants a key rights on a bucket (the default), a container (`--container`) or a read-only store (`--kv`).
    Grant(KeyGrant),
    /// Sets when a key stops working.
    Expire(KeyExpire),
}

#[derive(clap::Args, Debug)]
pub struct KeyCreate {
    #[command(flatten)]
    common: Common,
    /// A name for people.
    #[arg(long, default_value = "")]
    name: String,
    /// Every right everywhere.
    #[arg(long)]
    admin: bool,
    /// Seconds until the key stops working (default: never).
    #[arg(long)]
    expires_in: Option<u64>,
    /// Also write the key to this credentials file (readable only by you).
    #[arg(long)]
    save: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct KeyId {
    #[command(flatten)]
    common: Common,
    /// Access key id.
    id: String,
}

#[derive(clap::Args, Debug)]
pub struct KeyGrant {
    #[command(flatten)]
    common: Common,
    /// Access key id.
    id: String,
    /// The bucket (or, with --container or --kv, the container `account/container`
    /// (`account/*`: all of the account's) or the store (`*`: every store)).
    target: String,
    /// Rights, comma-separated or none: buckets read, write (readwrite);
    /// containers read, write, delete; stores read, admin.
    rights: String,
    /// The target is a container of native blobs.
    #[arg(long, conflicts_with = "kv")]
    container: bool,
    /// The target is a read-only store.
    #[arg(long)]
    kv: bool,
}

#[derive(clap::Args, Debug)]
pub struct KeyExpire {
    #[command(flatten)]
    common: Common,
    /// Access key id.
    id: String,
    /// Seconds from now (0: at once), or `never`.
    when: String,
}

fn rights(list: &str, allowed: &[&str]) -> Result<Vec<String>> {
    if list == "none" {
        return Ok(Vec::new());
    }
    let out: Vec<String> =
        list.split(',').map(|r| r.trim().to_ascii_lowercase()).map(|r| if r == "readwrite" || r == "rw" { "read,write".into() } else { r }).collect();
    let out: Vec<String> = out.iter().flat_map(|r| r.split(',').map(str::to_owned).collect::<Vec<_>>()).collect();
    for r in &out {
        if !allowed.contains(&r.as_str()) {
            bail!("right {r:?} is not one of {} (or none)", allowed.join(", "));
        }
    }
    Ok(out)
}

pub async fn key(cmd: KeyCmd) -> Result<()> {
    match cmd {
        KeyCmd::Create(a) => {
            let c = a.common.client()?;
            let mut body = json!({ "name": a.name, "admin": a.admin });
            if let Some(s) = a.expires_in {
                body["expires_in_secs"] = s.into();
            }
            let v = c.post_json("/admin/keys", &body).await?;
            if let Some(path) = &a.save {
                let creds = Credentials {
                    access_key_id: v["access_key_id"].as_str().unwrap_or("").into(),
                    secret_access_key: v["secret_access_key"].as_str().unwrap_or("").into(),
                };
                strata_auth::credentials::write_private(path, strata_auth::credentials::render(&creds, &format!("key {:?}", a.name)).as_bytes())?;
            }
            print(a.common.json, &v, |v| {
                format!(
                    "access_key_id:     {}\nsecret_access_key: {}\n(the secret is not shown again{})",
                    v["access_key_id"].as_str().unwrap_or(""),
                    v["secret_access_key"].as_str().unwrap_or(""),
                    a.save.as_ref().map(|p| format!("; saved to {}", p.display())).unwrap_or_default()
                )
            })
        }
        KeyCmd::List(c) => {
            let v = c.client()?.json(http::Method::GET, "/admin/keys").await?;
            print(c.json, &v, |v| {
                let mut out = format!("{:<22} {:<16} {:<6} rights", "access_key_id", "name", "admin");
                for k in v.as_array().into_iter().flatten() {
                    let mut r: Vec<String> =
                        k["grants"].as_object().into_iter().flatten().map(|(b, g)| format!("bucket {b}:{}", g.as_str().unwrap_or(""))).collect();
                    for (c, g) in k["containers"].as_object().into_iter().flatten() {
                        let set: Vec<&str> = ["read", "write", "delete"].into_iter().filter(|x| g[*x].as_bool() == Some(true)).collect();
                        r.push(format!("container {c}:{}", set.join(",")));
                    }
                    for (s, g) in k["kv"].as_object().into_iter().flatten() {
                        let set: Vec<&str> = ["read", "admin"].into_iter().filter(|x| g[*x].as_bool() == Some(true)).collect();
                        r.push(format!("kv {s}:{}", set.join(",")));
                    }
                    if let Some(e) = k["expires_ms"].as_u64() {
                        r.push(format!("expires at {e} ms"));
                    }
                    out.push_str(&format!(
                        "\n{:<22} {:<16} {:<6} {}",
                        k["access_key_id"].as_str().unwrap_or(""),
                        k["name"].as_str().unwrap_or(""),
                        k["admin"].as_bool().unwrap_or(false),
                        r.join("  ")
                    ));
                }
                out
            })
        }
        KeyCmd::Delete(a) => {
            let resp = a.common.client()?.send(http::Method::DELETE, &format!("/admin/keys/{}", a.id), &[], full(Bytes::new())).await?;
            let v: serde_json::Value = serde_json::from_slice(&resp.bytes().await?)?;
            print(a.common.json, &v, |v| {
                let late: Vec<String> = v["unconfirmed_nodes"].as_array().into_iter().flatten().map(|n| n.to_string()).collect();
                if late.is_empty() {
                    format!("deleted access key {}", a.id)
                } else {
                    format!("deleted access key {}; nodes {} did not confirm in time (they refuse it once they catch up)", a.id, late.join(", "))
                }
            })
        }
        KeyCmd::Grant(a) => {
            let c = a.common.client()?;
            let v = if a.container {
                let (account, container) = a.target.split_once('/').context("a container is account/container (or account/*)")?;
                let r = rights(&a.rights, &["read", "write", "delete"])?;
                let has = |x: &str| r.iter().any(|y| y == x);
                let path = format!("/admin/keys/{}/containers/{account}/{container}", a.id);
                send_json(&c, http::Method::PUT, &path, json!({ "read": has("read"), "write": has("write"), "delete": has("delete") })).await?
            } else if a.kv {
                let r = rights(&a.rights, &["read", "admin"])?;
                let has = |x: &str| r.iter().any(|y| y == x);
                send_json(&c, http::Method::PUT, &format!("/admin/keys/{}/kv/{}", a.id, a.target), json!({ "read": has("read"), "admin": has("admin") }))
                    .await?
            } else {
                let r = rights(&a.rights, &["read", "write"])?;
                let has = |x: &str| r.iter().any(|y| y == x);
                send_json(&c, http::Method::PUT, &format!("/admin/keys/{}/grants/{}", a.id, a.target), json!({ "read": has("read"), "write": has("write") }))
                    .await?
            };
            print(a.common.json, &v, |_| format!("{} on {}: {}", a.id, a.target, a.rights))
        }
        KeyCmd::Expire(a) => {
            let expires_ms = match a.when.as_str() {
                "never" => 0,
                s => {
                    let secs: u64 = s.parse().with_context(|| format!("{s:?} is not a number of seconds or never"))?;
                    strata_types::Clock::now_ms(&strata_types::SystemClock).saturating_add(secs * 1000).max(1)
                }
            };
            let v = send_json(&a.common.client()?, http::Method::PUT, &format!("/admin/keys/{}/expiry", a.id), json!({ "expires_ms": expires_ms })).await?;
            print(a.common.json, &v, |_| if expires_ms == 0 { format!("{} never expires", a.id) } else { format!("{} expires at {expires_ms} ms", a.id) })
        }
    }
}

#[derive(clap::Subcommand, Debug)]
pub enum ContainerCmd {
    /// Creates a container of native blobs, `account/container` (and its account if new).
    Create(ContainerCreate),
    /// Lists containers with their ids.
    List(Common),
}

#[derive(clap::Args, Debug)]
pub struct ContainerCreate {
    #[command(flatten)]
    common: Common,
    /// `account/container`: 1 to 63 of a-z, 0-9, '-', '_', '.' each.
    name: String,
}

pub async fn container(cmd: ContainerCmd) -> Result<()> {
    match cmd {
        ContainerCmd::Create(a) => {
            let (account, container) = a.name.split_once('/').context("a container is account/container")?;
            let v = a.common.client()?.post_json("/admin/containers", &json!({ "account": account, "container": container })).await?;
            print(a.common.json, &v, |v| format!("container {} (ids {}/{})", a.name, v["account_id"], v["container_id"]))
        }
        ContainerCmd::List(c) => {
            let v = c.client()?.json(http::Method::GET, "/admin/containers").await?;
            print(c.json, &v, |v| {
                let mut out = format!("{:<40} {:>8} {:>10}", "container", "account", "container");
                for r in v.as_array().into_iter().flatten() {
                    let name = format!("{}/{}", r["account"].as_str().unwrap_or(""), r["container"].as_str().unwrap_or(""));
                    out.push_str(&format!("\n{name:<40} {:>8} {:>10}", r["account_id"].as_u64().unwrap_or(0), r["container_id"].as_u64().unwrap_or(0)));
                }
                out
            })
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    #[command(flatten)]
    common: Common,
    /// The last this many entries.
    #[arg(long, default_value_t = 50)]
    limit: usize,
}

/// `strata audit`: the node's log of administrative actions.
pub async fn audit(a: AuditArgs) -> Result<()> {
    let v = a.common.client()?.json(http::Method::GET, &format!("/admin/audit?limit={}", a.limit)).await?;
    print(a.common.json, &v, |v| {
        let mut out = format!("{:<15} {:<28} {:<7} {:<6} action", "time_ms", "who", "result", "status");
        for e in v["entries"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "\n{:<15} {:<28} {:<7} {:<6} {}",
                e["time_ms"],
                e["who"].as_str().unwrap_or(""),
                e["result"].as_str().unwrap_or(""),
                e["status"],
                e["action"].as_str().unwrap_or("")
            ));
        }
        if v["damaged_lines"].as_u64().unwrap_or(0) > 0 {
            out.push_str(&format!("\n({} damaged lines skipped)", v["damaged_lines"]));
        }
        out
    })
}

//! `strata kv rw ...`: Spock's read-write stores on a cluster (Spock §3.1,
//! the administrative service of §3.1.6): define and drop a store in the
//! map, put, get and delete through any node, truncate a store on every
//! node, stream a store's entries out and in (JSON Lines), push hints and
//! reclaim deletes on every node now, and the copy
//! `strata kv rebalance` makes of read-write data for the ring partitions
//! it moves.

use crate::commands::Common;
use crate::kv_ring::node_client;
use anyhow::{Context, Result, bail};
use base64::Engine;
use bytes::Bytes;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use strata_client::Client;
use strata_cluster::{ClusterMap, NodeId};
use strata_kv_client::RwClient;

#[derive(clap::Subcommand, Debug)]
pub enum RwCmd {
    /// Defines a read-write store on the cluster's ring.
    Create(CreateArgs),
    /// Removes a read-write store's definition (its data stays until truncated).
    Drop(StoreArgs),
    /// Deletes every version of a store on every node; the definition stays.
    Truncate(StoreArgs),
    /// Puts a value over what a get reads first (or over --clock).
    Put(PutArgs),
    /// Prints every concurrent version of a key.
    Get(KeyArgs),
    /// Deletes a key (over what a get reads first).
    Delete(KeyArgs),
    /// Writes every entry of a store, as JSON Lines, to stdout.
    Export(StoreArgs),
    /// Reads entries as `export` writes them from stdin onto each key's preference list.
    Import(StoreArgs),
    /// Pushes every node's hinted-handoff hints to their nodes now.
    PushHints(NodesArgs),
    /// Reclaims, on every node, the deletes that every replica of their key
    /// holds and that are older than the delete grace, now.
    ReclaimDeletes(NodesArgs),
}

#[derive(clap::Args, Debug)]
pub struct NodesArgs {
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Replicas on distinct nodes.
    #[arg(long)]
    pub replicas: Option<u32>,
    /// Replicas per zone instead, repeatable: `--zone-replicas z1=2`.
    #[arg(long)]
    pub zone_replicas: Vec<String>,
    /// Replicas that must answer a get.
    #[arg(long, default_value_t = 1)]
    pub required_reads: u32,
    /// Replicas that must take a put.
    #[arg(long, default_value_t = 1)]
    pub required_writes: u32,
    /// Largest value, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub value_limit: u32,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    #[command(flatten)]
    pub common: Common,
}

/// A store and a key: the same arguments as `strata kv get`.
pub type KeyArgs = crate::kv::GetArgs;

#[derive(clap::Args, Debug)]
pub struct PutArgs {
    #[command(flatten)]
    pub key: KeyArgs,
    /// The value, as text.
    pub value: String,
    /// The clock read (`node:counter,...`); default: read the key first
    /// and put over every version it has.
    #[arg(long)]
    pub clock: Option<String>,
}

fn key_bytes(a: &KeyArgs) -> Result<Vec<u8>> {
    if a.base64 {
        return base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&a.key).with_context(|| format!("{:?} is not base64url", a.key));
    }
    Ok(a.key.as_bytes().to_vec())
}

fn rw_client(common: &Common) -> Result<RwClient> {
    Ok(RwClient::new(std::slice::from_ref(&common.server), &common.auth.options()?))
}

pub async fn run(cmd: RwCmd) -> Result<()> {
    match cmd {
        RwCmd::Create(a) => {
            let replication = crate::kv_ring::replication(a.replicas, &a.zone_replicas)?;
            let spec =
                strata_cluster::RwStoreSpec { replication, required_reads: a.required_reads, required_writes: a.required_writes, value_limit: a.value_limit };
            crate::cluster::propose(&a.common, json!({ "RwCreateStore": { "name": a.store, "spec": spec } })).await?;
            println!("defined read-write store {} on the ring", a.store);
        }
        RwCmd::Drop(a) => {
            crate::cluster::propose(&a.common, json!({ "RwDropStore": { "name": a.store } })).await?;
            println!("dropped the definition of read-write store {}", a.store);
        }
        RwCmd::Truncate(a) => {
            let base = a.common.client()?;
            let map = crate::kv_ring::fetch_map(&base).await?;
            let mut deleted = 0;
            for id in map.nodes.keys() {
                let r = node_client(&base, &map, *id)?.post_json(&format!("/admin/rw/{}/truncate", a.store), &json!({})).await;
                deleted += r.with_context(|| format!("truncating on node {id}"))?["deleted"].as_u64().unwrap_or(0);
            }
            println!("truncated {}: {deleted} versions deleted on {} nodes", a.store, map.nodes.len());
        }
        RwCmd::PushHints(a) => {
            let per_node = on_every_node(&a.common, "/admin/rw/hints/push").await?;
            for (id, r) in &per_node {
                println!("node {id}: {} hints pushed, {} expired, {} failed, {} pending", r["pushed"], r["expired"], r["failed"], r["pending"]);
            }
        }
        RwCmd::ReclaimDeletes(a) => {
            let per_node = on_every_node(&a.common, "/admin/rw/deletes/reclaim").await?;
            for (id, r) in &per_node {
                println!("node {id}: {} deletes past the grace, {} reclaimed, {} kept", r["examined"], r["reclaimed"], r["kept"]);
            }
        }
        RwCmd::Put(a) => {
            let key = key_bytes(&a.key)?;
            let c = rw_client(&a.key.common)?;
            let clock = match a.clock {
                Some(c) => c,
                None => c.get(&a.key.store, &key).await?.clock,
            };
            let written = c.put(&a.key.store, &key, Bytes::from(a.value.into_bytes()), &clock).await?;
            println!("{written}");
        }
        RwCmd::Get(a) => {
            let key = key_bytes(&a)?;
            let got = rw_client(&a.common)?.get(&a.store, &key).await?;
            if a.common.json {
                let versions: Vec<_> = got.versions.iter().map(|(c, v)| json!({ "clock": c, "value": String::from_utf8_lossy(v) })).collect();
                println!("{}", json!({ "versions": versions, "clock": got.clock }));
            } else if got.versions.is_empty() {
                bail!("no value for that key in store {}", a.store);
            } else {
                for (clock, value) in &got.versions {
                    println!("[{clock}] {}", String::from_utf8_lossy(value));
                }
            }
        }
        RwCmd::Delete(a) => {
            let key = key_bytes(&a)?;
            let c = rw_client(&a.common)?;
            let clock = c.get(&a.store, &key).await?.clock;
            println!("{}", c.delete(&a.store, &key, &clock).await?);
        }
        RwCmd::Export(a) => {
            let base = a.common.client()?;
            let map = crate::kv_ring::fetch_map(&base).await?;
            let mut merged: BTreeMap<Bytes, Vec<strata_rwstore::Versioned>> = BTreeMap::new();
            for id in map.nodes.keys() {
                for (key, versions) in entries_of(&node_client(&base, &map, *id)?, &a.store, None).await? {
                    merged.entry(key).or_default().extend(versions);
                }
            }
            let mut out = std::io::stdout().lock();
            for (key, versions) in merged {
                writeln!(out, "{}", strata_rwstore::value::entry_line(&key, &strata_rwstore::resolve(versions)))?;
            }
        }
        RwCmd::Import(a) => {
            let base = a.common.client()?;
            let map = crate::kv_ring::fetch_map(&base).await?;
            let mut per_node: BTreeMap<NodeId, String> = BTreeMap::new();
            let mut lines = 0u64;
            for line in std::io::stdin().lock().lines() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                let (key, _) = strata_rwstore::value::parse_entry_line(line.as_bytes()).map_err(|e| anyhow::anyhow!("line {}: {e}", lines + 1))?;
                for n in map.rw_route(&a.store, &key)? {
                    let buf = per_node.entry(n).or_default();
                    buf.push_str(&line);
                    buf.push('\n');
                }
                lines += 1;
            }
            let mut written = 0;
            for (n, body) in per_node {
                let r = node_client(&base, &map, n)?
                    .send(http::Method::POST, &format!("/admin/rw/{}/entries", a.store), &[], strata_client::full(body))
                    .await
                    .with_context(|| format!("importing on node {n}"))?;
                let v: serde_json::Value = serde_json::from_slice(&r.bytes().await?)?;
                written += v["written"].as_u64().unwrap_or(0);
            }
            println!("imported {lines} entries into {}: {written} versions written across the replicas", a.store);
        }
    }
    Ok(())
}

/// A node's entries of `store` (of the ring partitions `partitions`, or all).
async fn entries_of(c: &Client, store: &str, partitions: Option<&BTreeSet<u32>>) -> Result<Vec<(Bytes, Vec<strata_rwstore::Versioned>)>> {
    let query = partitions.map(|p| format!("?partitions={}", p.iter().map(u32::to_string).collect::<Vec<_>>().join(","))).unwrap_or_default();
    let r = c.send(http::Method::GET, &format!("/admin/rw/{store}/entries{query}"), &[], strata_client::full(Bytes::new())).await?;
    let body = r.bytes().await?;
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| strata_rwstore::value::parse_entry_line(l).map_err(|e| anyhow::anyhow!("{}: {e}", c.base())))
        .collect()
}

/// POSTs `path` to every node of the map; each node's answer. A node that
/// fails is named, after the others have been asked.
async fn on_every_node(common: &Common, path: &str) -> Result<Vec<(NodeId, serde_json::Value)>> {
    let base = common.client()?;
    let map = crate::kv_ring::fetch_map(&base).await?;
    let (mut out, mut failed) = (Vec::new(), Vec::new());
    for id in map.nodes.keys() {
        match node_client(&base, &map, *id)?.post_json(path, &json!({})).await {
            Ok(v) => out.push((*id, v)),
            Err(e) => failed.push(format!("node {id}: {e}")),
        }
    }
    if !failed.is_empty() {
        for (id, _) in &out {
            eprintln!("node {id}: done");
        }
        bail!("{path} failed on {} of {} nodes: {}", failed.len(), map.nodes.len(), failed.join("; "));
    }
    Ok(out)
}

/// Before and after a ring change (`next`: the new owner of every ring
/// partition): every read-write store's data of the ring partitions
/// whose preference lists gain a node is copied to that node from every
/// node that held it (each may lack some versions: a put needs only its
/// required writes). Returns the versions written.
///
/// With `fresh` (the copy before the map changes, when the gaining nodes
/// take no writes of those partitions yet), a gaining node first drops
/// what it still holds of them from an earlier time in their preference
/// lists: left there, an old value whose delete the replicas have since
/// reclaimed would come back with the partition.
pub(crate) async fn copy_for_ring(base: &Client, map: &ClusterMap, next: &[NodeId], fresh: bool) -> Result<u64> {
    let mut after = map.clone();
    after.kv.ring = next.to_vec();
    let mut written = 0;
    for store in map.rw_stores.keys() {
        let (old, new) = (map.rw_table(store)?, after.rw_table(store)?);
        // (gaining node, holding node) → ring partitions.
        let mut pairs: BTreeMap<(u32, u32), BTreeSet<u32>> = BTreeMap::new();
        for (p, (was, will)) in old.iter().zip(new.iter()).enumerate() {
            for gainer in will.iter().filter(|n| !was.contains(n)) {
                for holder in was {
                    pairs.entry((*gainer, *holder)).or_default().insert(p as u32);
                }
            }
        }
        if fresh {
            let mut gained: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
            for ((gainer, _), partitions) in &pairs {
                gained.entry(*gainer).or_default().extend(partitions);
            }
            for (gainer, partitions) in gained {
                let list: Vec<String> = partitions.iter().map(u32::to_string).collect();
                node_client(base, map, u64::from(gainer))?
                    .send(http::Method::POST, &format!("/admin/rw/{store}/truncate?partitions={}", list.join(",")), &[], strata_client::full(""))
                    .await
                    .with_context(|| format!("dropping node {gainer}'s earlier copy of {store}'s partitions {list:?}"))?;
            }
        }
        for ((gainer, holder), partitions) in pairs {
            let entries = entries_of(&node_client(base, map, u64::from(holder))?, store, Some(&partitions))
                .await
                .with_context(|| format!("reading {store} from node {holder}"))?;
            if entries.is_empty() {
                continue;
            }
            let body: String = entries.iter().map(|(k, v)| strata_rwstore::value::entry_line(k, v) + "\n").collect();
            let r = node_client(base, &after, u64::from(gainer))?
                .send(http::Method::POST, &format!("/admin/rw/{store}/entries"), &[], strata_client::full(body))
                .await
                .with_context(|| format!("copying {store} to node {gainer}"))?;
            let v: serde_json::Value = serde_json::from_slice(&r.bytes().await?)?;
            written += v["written"].as_u64().unwrap_or(0);
        }
    }
    Ok(written)
}

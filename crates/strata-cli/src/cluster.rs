//! `strata cluster|node|disk|partition`: cluster administration through
//! any node's admin API (changes go through the metadata group).

use crate::commands::Common;
use crate::size::parse_size;
use anyhow::{Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;

#[derive(clap::Subcommand, Debug)]
pub enum ClusterCmd {
    /// Creates a cluster secret (the cluster's certificate authority) for every node's --cluster-secret.
    Secret(SecretArgs),
    /// Initializes the metadata group with the members given to the node's `--meta` (once, on one member,
    /// with --cluster-secret) and makes the cluster's first admin key.
    Init(InitArgs),
    /// Shows zones, nodes, disks, partitions, the metadata group and replica lag.
    Status(Common),
    /// Sets the cluster's default quorum policies (`one`, `majority`, `all` or a count); unnamed ones keep their value.
    Policy(PolicyArgs),
    /// Plans Ambry's rebalancing (Algorithm 1) on the live map, prints the
    /// plan, and has the metadata leader carry it out a few moves at a
    /// time (resumed after a crash or a leader change); waits with a bar.
    Rebalance(RebalanceArgs),
}

#[derive(clap::Args, Debug)]
pub struct RebalanceArgs {
    /// Print the plan (moves, bytes, spread before and after) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Moves under way at most.
    #[arg(long, default_value_t = 2)]
    pub max_moves: u32,
    /// Each node copies at most this many MB/s into the replicas the plan
    /// fills there, all together (0: unthrottled).
    #[arg(long, default_value_t = 0)]
    pub throttle_mb_s: u32,
    /// The plan's random choices (the same map and seed, the same plan).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Start it and return at once (cluster status shows its progress).
    #[arg(long)]
    pub no_wait: bool,
    /// End the rebalancing under way (moves already started finish).
    #[arg(long, conflicts_with_all = ["dry_run"])]
    pub cancel: bool,
    #[command(flatten)]
    pub common: Common,
}

fn spread_line(s: &strata_cluster::Spread) -> String {
    format!("{} disks allocated {:.1}%..{:.1}% (mean {:.1}%, stddev {:.2} points)", s.disks, s.min * 100.0, s.max * 100.0, s.mean * 100.0, s.stddev * 100.0)
}

async fn rebalance(a: RebalanceArgs) -> Result<()> {
    let client = a.common.client()?;
    if a.cancel {
        let out = propose(&a.common, json!("EndRebalance")).await?;
        report(&a.common, &out, "rebalancing ended (moves already under way finish)");
        return Ok(());
    }
    let v = client.json(http::Method::GET, "/admin/cluster/status").await?;
    let map: strata_cluster::ClusterMap = anyhow::Context::context(serde_json::from_value(v["map"].clone()), "the cluster map in the status")?;
    let plan = match map.rebalance_plan(a.seed) {
        Ok(p) => p,
        Err(e) => bail!("{e}"),
    };
    let mut after = map.clone();
    for m in &plan {
        if let Some(p) = after.partitions.get_mut(&m.partition)
            && let Some(slot) = p.replicas.iter().position(|r| *r == m.from)
        {
            p.replicas[slot] = m.to;
        }
    }
    let bytes: u64 = plan.iter().map(|m| m.bytes).sum();
    if a.common.json {
        println!("{}", json!({ "moves": plan, "bytes": bytes, "before": map.spread(), "after": after.spread() }));
    } else {
        println!("plan: {} moves, {} of replica capacity", plan.len(), crate::size::format_size(bytes));
        for m in &plan {
            println!("  partition {:>5}  {}:{} -> {}:{}", m.partition, m.from.node, m.from.disk, m.to.node, m.to.disk);
        }
        println!("before: {}", spread_line(&map.spread()));
        println!("after:  {}", spread_line(&after.spread()));
    }
    if a.dry_run || plan.is_empty() {
        if plan.is_empty() {
            println!("balanced already: nothing to move");
        }
        return Ok(());
    }
    let now_ms = strata_types::Clock::now_ms(&strata_types::SystemClock);
    let plan_json = json!({ "moves": plan, "max_moves": a.max_moves, "throttle_mb_s": a.throttle_mb_s, "started_ms": now_ms });
    let out = propose(&a.common, json!({ "StartRebalance": { "plan": plan_json } })).await?;
    report(&a.common, &out, &format!("rebalancing: {} moves, at most {} at a time", plan.len(), a.max_moves));
    if a.no_wait {
        return Ok(());
    }
    // The node answering may publish the map a moment after it applied the plan.
    let started_epoch = out["Applied"]["epoch"].as_u64().unwrap_or(0);
    let bar = indicatif::ProgressBar::new(plan.len() as u64);
    bar.set_style(indicatif::ProgressStyle::with_template("rebalancing [{bar:30}] {pos}/{len} moves ({elapsed})").map_err(|e| anyhow::anyhow!("{e}"))?);
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let Ok(v) = client.json(http::Method::GET, "/admin/cluster/status").await else { continue };
        let Ok(map) = serde_json::from_value::<strata_cluster::ClusterMap>(v["map"].clone()) else { continue };
        let done = plan.iter().filter(|m| matches!(map.plan_state(m), strata_cluster::PlanState::Done | strata_cluster::PlanState::Stale)).count();
        bar.set_position(done as u64);
        if map.epoch > started_epoch && map.rebalance.is_none() {
            bar.finish();
            println!("rebalanced: {}", spread_line(&map.spread()));
            return Ok(());
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct SecretArgs {
    /// Where to write it (readable only by you; give a copy to each node and to no one else).
    #[arg(long, default_value = "cluster.secret")]
    pub out: std::path::PathBuf,
    /// Where to write the CA certificate clients trust (--ca-file); not secret.
    #[arg(long, default_value = "cluster-ca.pem")]
    pub ca_out: std::path::PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// Where to write the cluster's first admin key (readable only by you).
    #[arg(long, default_value = "admin.credentials")]
    pub save: std::path::PathBuf,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct PolicyArgs {
    /// Acks a put needs.
    #[arg(long)]
    pub put: Option<String>,
    /// Replicas a get asks.
    #[arg(long)]
    pub get: Option<String>,
    /// Acks a delete needs.
    #[arg(long)]
    pub delete: Option<String>,
    /// Acks a TTL update needs.
    #[arg(long)]
    pub ttl: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Subcommand, Debug)]
pub enum NodeCmd {
    /// Registers a node.
    Add(NodeAddArgs),
    /// Decommissions a node: every replica on it moves to another node of
    /// its zone, then it leaves the map. Refused, naming the partition, if
    /// a replica would have nowhere to go.
    Remove(NodeRemoveArgs),
}

#[derive(clap::Args, Debug)]
pub struct NodeRemoveArgs {
    /// Node id.
    #[arg(long)]
    pub id: u64,
    /// Wait until the node has left the map, showing progress.
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct DiskRemoveArgs {
    /// Node.
    #[arg(long)]
    pub node: u64,
    /// Disk index on the node.
    #[arg(long)]
    pub disk: u32,
    /// Wait until the disk is empty and removed, showing progress.
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct NodeAddArgs {
    /// Node id (the `--node-id` its server runs with).
    #[arg(long)]
    pub id: u64,
    /// Address its server listens on, `host:port`.
    #[arg(long)]
    pub addr: String,
    /// Zone (datacenter).
    #[arg(long)]
    pub zone: String,
    /// Rack (failure domain within the zone).
    #[arg(long, default_value = "rack-1")]
    pub rack: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Subcommand, Debug)]
pub enum DiskCmd {
    /// Adds a disk to a node.
    Add(DiskAddArgs),
    /// Marks a disk up or down (a down disk gets no new replicas, and routers skip its replicas).
    SetState(DiskStateArgs),
    /// Decommissions a disk: its replicas move to other disks of the zone,
    /// then it is marked removed.
    Remove(DiskRemoveArgs),
}

#[derive(clap::Args, Debug)]
pub struct DiskStateArgs {
    /// Node.
    #[arg(long)]
    pub node: u64,
    /// Disk index on the node (from `cluster status --json`).
    #[arg(long)]
    pub disk: u32,
    /// `up` or `down`.
    #[arg(long)]
    pub state: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct DiskAddArgs {
    /// Node.
    #[arg(long)]
    pub node: u64,
    /// Directory on the node (relative paths are inside its data directory).
    #[arg(long)]
    pub path: String,
    /// Capacity, e.g. `4TiB`.
    #[arg(long, value_parser = parse_size)]
    pub capacity: u64,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Subcommand, Debug)]
pub enum PartitionCmd {
    /// Creates partitions, placed greedily across zones, nodes and racks.
    Add(PartitionAddArgs),
    /// Marks a partition read-write or read-only.
    SetState(PartitionStateArgs),
    /// Moves one replica of a partition to another disk (same zone, a node
    /// without a replica of it): the new one fills from the others, takes
    /// the old one's place, drains it, and the old one is deleted.
    Move(PartitionMoveArgs),
}

#[derive(clap::Args, Debug)]
pub struct PartitionMoveArgs {
    /// Partition.
    #[arg(long)]
    pub id: u64,
    /// The replica that leaves, `NODE:DISK` (disk index, from 0).
    #[arg(long, required_unless_present = "cancel")]
    pub from: Option<String>,
    /// Where it goes, `NODE:DISK`.
    #[arg(long, required_unless_present = "cancel")]
    pub to: Option<String>,
    /// Gives up the partition's move instead (before the new replica took
    /// the old one's place).
    #[arg(long, conflicts_with_all = ["from", "to"])]
    pub cancel: bool,
    #[command(flatten)]
    pub common: Common,
}

/// `NODE:DISK` as the map's replica location.
fn replica_loc(flag: &str, s: &str) -> Result<Value> {
    let (n, d) = s.split_once(':').ok_or_else(|| anyhow::anyhow!("{flag} takes NODE:DISK (for example 4:0), not {s:?}"))?;
    let node: u64 = n.parse().map_err(|_| anyhow::anyhow!("{flag}: node {n:?} is not a number"))?;
    let disk: u32 = d.parse().map_err(|_| anyhow::anyhow!("{flag}: disk {d:?} is not a number"))?;
    Ok(json!({ "node": node, "disk": disk }))
}

#[derive(clap::Args, Debug)]
pub struct PartitionStateArgs {
    /// Partition.
    #[arg(long)]
    pub id: u64,
    /// `read-write` or `read-only`.
    #[arg(long)]
    pub state: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct PartitionAddArgs {
    /// How many.
    #[arg(long)]
    pub count: u32,
    /// Replicas in each zone.
    #[arg(long, default_value_t = 3)]
    pub replicas_per_zone: u32,
    /// Capacity of each replica.
    #[arg(long, default_value = "64GiB", value_parser = parse_size)]
    pub capacity: u64,
    #[command(flatten)]
    pub common: Common,
}

pub(crate) async fn propose(common: &Common, cmd: Value) -> Result<Value> {
    let out = common.client()?.post_json("/admin/cluster/command", &cmd).await?;
    if let Some(refused) = out.get("Refused") {
        match out.get("message").and_then(Value::as_str) {
            Some(m) => bail!("refused: {m}"),
            None => bail!("refused: {}", describe(refused)),
        }
    }
    Ok(out)
}

fn describe(v: &Value) -> String {
    // MapError as serde renders it: {"Variant": {...}} or {"Variant": value}.
    match v {
        Value::Object(m) => m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

fn report(common: &Common, out: &Value, what: &str) {
    if common.json {
        println!("{out}");
    } else if let Some(p) = out.get("PartitionsAdded") {
        let ids: Vec<String> = p["ids"].as_array().into_iter().flatten().map(|v| v.to_string()).collect();
        println!("{what}: partitions {} (epoch {})", ids.join(", "), p["epoch"]);
    } else {
        println!("{what} (epoch {})", out["Applied"]["epoch"]);
    }
}

pub async fn cluster(cmd: ClusterCmd) -> Result<()> {
    match cmd {
        ClusterCmd::Secret(a) => {
            if a.out.exists() {
                bail!("{} exists: a cluster keeps its secret (delete the file first to make another cluster's)", a.out.display());
            }
            let secret = strata_auth::ClusterSecret::generate()?;
            strata_auth::credentials::write_private(&a.out, &secret.to_file())?;
            std::fs::write(&a.ca_out, secret.ca_cert_pem())?;
            println!("cluster {} secret in {} (give it to every node: --cluster-secret; keep it from everyone else)", secret.cluster_id(), a.out.display());
            println!("its CA certificate in {} (clients: --ca-file or STRATA_CA_FILE)", a.ca_out.display());
            Ok(())
        }
        ClusterCmd::Init(a) => {
            let c = &a.common;
            let out = c.client()?.post_json("/admin/cluster/init", &json!({})).await?;
            let key = &out["admin_key"];
            if let (Some(id), Some(secret)) = (key["access_key_id"].as_str(), key["secret_access_key"].as_str()) {
                let creds = strata_client::Credentials { access_key_id: id.into(), secret_access_key: secret.into() };
                let text = strata_auth::credentials::render(&creds, "the cluster's first admin key, made by strata cluster init");
                strata_auth::credentials::write_private(&a.save, text.as_bytes())?;
            }
            if c.json {
                println!("{out}");
            } else {
                println!("metadata group initialized with members {}", out["members"]);
                println!("admin access key {} in {} (use it with STRATA_CREDENTIALS)", key["access_key_id"].as_str().unwrap_or("?"), a.save.display());
            }
            Ok(())
        }
        ClusterCmd::Status(c) => status(c).await,
        ClusterCmd::Policy(a) => policy(a).await,
        ClusterCmd::Rebalance(a) => rebalance(a).await,
    }
}

async fn policy(a: PolicyArgs) -> Result<()> {
    let v = a.common.client()?.json(http::Method::GET, "/admin/cluster/status").await?;
    let mut policies: strata_types::Policies = serde_json::from_value(v["map"]["policies"].clone())?;
    for (flag, value, slot) in [
        ("--put", &a.put, &mut policies.put),
        ("--get", &a.get, &mut policies.get),
        ("--delete", &a.delete, &mut policies.delete),
        ("--ttl", &a.ttl, &mut policies.ttl_update),
    ] {
        if let Some(s) = value {
            *slot = strata_types::Policy::parse(s).ok_or_else(|| {
                anyhow::anyhow!("{flag} takes one, majority, all, a positive count (replicas in every zone), or local:N (N of the local zone's), not {s:?}")
            })?;
        }
    }
    let out = propose(&a.common, json!({ "SetPolicies": { "policies": policies } })).await?;
    report(
        &a.common,
        &out,
        &format!("policies set: put {}, get {}, delete {}, ttl update {}", policies.put, policies.get, policies.delete, policies.ttl_update),
    );
    Ok(())
}

/// Waits until `done` holds of the map, printing how many replicas are
/// still on the way out (a bar on a terminal).
async fn wait_evacuated(common: &Common, what: &str, left: impl Fn(&Value) -> Option<usize>) -> Result<()> {
    let client = common.client()?;
    let first = left(&client.json(http::Method::GET, "/admin/cluster/status").await?["map"]).unwrap_or(0);
    let bar = indicatif::ProgressBar::new(first as u64);
    bar.set_style(indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} replicas moved ({elapsed})").map_err(|e| anyhow::anyhow!("{e}"))?);
    bar.set_message(what.to_string());
    loop {
        let v = client.json(http::Method::GET, "/admin/cluster/status").await?;
        match left(&v["map"]) {
            None => {
                bar.finish_with_message(format!("{what}: done"));
                return Ok(());
            }
            Some(n) => bar.set_position(first.saturating_sub(n) as u64),
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// Replicas (and pending copies) on `node` (and `disk`, if given).
fn replicas_on(map: &Value, node: u64, disk: Option<u64>) -> usize {
    let at = |r: &Value| r["node"] == node && disk.is_none_or(|d| r["disk"] == d);
    map["partitions"]
        .as_object()
        .into_iter()
        .flat_map(|o| o.values())
        .filter(|p| p["replicas"].as_array().into_iter().flatten().any(at) || at(&p["moving"]["to"]))
        .count()
}

pub async fn node(cmd: NodeCmd) -> Result<()> {
    let a = match cmd {
        NodeCmd::Add(a) => a,
        NodeCmd::Remove(r) => {
            let out = propose(&r.common, json!({ "RemoveNode": { "node": r.id } })).await?;
            report(&r.common, &out, &format!("node {} is being removed: its replicas move to the other nodes of its zone", r.id));
            if r.wait {
                let id = r.id;
                wait_evacuated(&r.common, &format!("removing node {id}"), |m| m["nodes"].get(id.to_string()).map(|_| replicas_on(m, id, None))).await?;
            }
            return Ok(());
        }
    };
    let out = propose(&a.common, json!({ "AddNode": { "id": a.id, "addr": a.addr, "zone": a.zone, "rack": a.rack } })).await?;
    report(&a.common, &out, &format!("node {} added", a.id));
    Ok(())
}

pub async fn disk(cmd: DiskCmd) -> Result<()> {
    let a = match cmd {
        DiskCmd::Add(a) => a,
        DiskCmd::Remove(r) => {
            let out = propose(&r.common, json!({ "RemoveDisk": { "node": r.node, "disk": r.disk } })).await?;
            report(&r.common, &out, &format!("disk {} of node {} is being removed: its replicas move to other disks of the zone", r.disk, r.node));
            if r.wait {
                let (node, disk) = (r.node, r.disk);
                wait_evacuated(&r.common, &format!("removing node {node} disk {disk}"), |m| {
                    (m["nodes"][node.to_string()]["disks"][disk as usize]["state"] != "Removed").then(|| replicas_on(m, node, Some(disk as u64)))
                })
                .await?;
            }
            return Ok(());
        }
        DiskCmd::SetState(s) => {
            let state = match s.state.as_str() {
                "up" => "Up",
                "down" => "Down",
                other => bail!("--state takes up or down, not {other:?}"),
            };
            let out = propose(&s.common, json!({ "SetDiskState": { "node": s.node, "disk": s.disk, "state": state } })).await?;
            report(&s.common, &out, &format!("disk {} of node {} is {}", s.disk, s.node, s.state));
            return Ok(());
        }
    };
    let out = propose(&a.common, json!({ "AddDisk": { "node": a.node, "path": a.path, "capacity_bytes": a.capacity } })).await?;
    report(&a.common, &out, &format!("disk {} added to node {}", a.path, a.node));
    Ok(())
}

pub async fn partition(cmd: PartitionCmd) -> Result<()> {
    let a = match cmd {
        PartitionCmd::Add(a) => a,
        PartitionCmd::Move(m) => {
            if m.cancel {
                let out = propose(&m.common, json!({ "CancelMove": { "partition": m.id } })).await?;
                report(&m.common, &out, &format!("partition {}'s move cancelled", m.id));
                return Ok(());
            }
            let (from, to) = (m.from.as_deref().unwrap_or_default(), m.to.as_deref().unwrap_or_default());
            let now_ms = strata_types::Clock::now_ms(&strata_types::SystemClock);
            let cmd = json!({ "StartMove": { "partition": m.id, "from": replica_loc("--from", from)?, "to": replica_loc("--to", to)?, "now_ms": now_ms } });
            let out = propose(&m.common, cmd).await?;
            report(&m.common, &out, &format!("partition {} moving from {from} to {to} (cluster status shows its progress)", m.id));
            return Ok(());
        }
        PartitionCmd::SetState(s) => {
            let state = match s.state.as_str() {
                "read-write" => "ReadWrite",
                "read-only" => "ReadOnly",
                other => bail!("--state takes read-write or read-only, not {other:?}"),
            };
            let out = propose(&s.common, json!({ "SetPartitionState": { "partition": s.id, "state": state } })).await?;
            report(&s.common, &out, &format!("partition {} is {}", s.id, s.state));
            return Ok(());
        }
    };
    let out =
        propose(&a.common, json!({ "AddPartitions": { "count": a.count, "replicas_per_zone": a.replicas_per_zone, "capacity_bytes": a.capacity } })).await?;
    report(&a.common, &out, "added");
    Ok(())
}

async fn status(c: Common) -> Result<()> {
    let v = c.client()?.json(http::Method::GET, "/admin/cluster/status").await?;
    if c.json {
        println!("{v}");
        return Ok(());
    }
    let map = &v["map"];
    println!("cluster map epoch {} (as node {} has it); default policies {}", map["epoch"], v["node"], map["policies"]);
    if let Some(m) = v["meta"].as_object().or_else(|| v["learner"].as_object()) {
        let m = Value::Object(m.clone());
        println!("metadata group: leader {}, term {}, members {}, learners {}", m["leader"], m["term"], m["members"], m["learners"]);
    }
    let health: BTreeMap<u64, String> =
        v["failure_detector"].as_array().into_iter().flatten().filter_map(|h| Some((h["node"].as_u64()?, h["health"].as_str()?.to_string()))).collect();
    let mut replicas: BTreeMap<u64, usize> = BTreeMap::new();
    let (mut rw, mut ro) = (0, 0);
    for p in map["partitions"].as_object().into_iter().flat_map(|o| o.values()) {
        if p["state"] == "ReadWrite" {
            rw += 1
        } else {
            ro += 1
        }
        for r in p["replicas"].as_array().into_iter().flatten() {
            *replicas.entry(r["node"].as_u64().unwrap_or(0)).or_default() += 1;
        }
    }
    println!();
    println!("{:<6} {:<22} {:<10} {:<10} {:>5} {:>14} {:>9}  HEALTH", "NODE", "ADDRESS", "ZONE", "RACK", "DISKS", "CAPACITY", "REPLICAS");
    let mut zones: BTreeMap<String, usize> = BTreeMap::new();
    for n in map["nodes"].as_object().into_iter().flat_map(|o| o.values()) {
        let id = n["id"].as_u64().unwrap_or(0);
        let disks = n["disks"].as_array().cloned().unwrap_or_default();
        let cap: u64 = disks.iter().filter_map(|d| d["capacity_bytes"].as_u64()).sum();
        let down = disks.iter().filter(|d| d["state"] != "Up").count();
        let failed = disks.iter().filter(|d| d["state"] == "Failed").count();
        // The map's word (heartbeats) first, then this node's detector.
        let node_health = if n["state"].get("Down").is_some() {
            "down (map)".to_string()
        } else if failed > 0 {
            format!("{failed} disk(s) failed (map)")
        } else {
            health.get(&id).cloned().unwrap_or_else(|| "available".into())
        };
        *zones.entry(n["zone"].as_str().unwrap_or("").to_string()).or_default() += 1;
        println!(
            "{:<6} {:<22} {:<10} {:<10} {:>5} {:>14} {:>9}  {}",
            id,
            n["addr"].as_str().unwrap_or(""),
            n["zone"].as_str().unwrap_or(""),
            n["rack"].as_str().unwrap_or(""),
            if down > 0 { format!("{}/{}", disks.len() - down, disks.len()) } else { disks.len().to_string() },
            crate::size::format_size(cap),
            replicas.get(&id).copied().unwrap_or(0),
            node_health
        );
    }
    println!();
    println!("zones: {}", zones.iter().map(|(z, n)| format!("{z} ({n} nodes)")).collect::<Vec<_>>().join(", "));
    let moves: Vec<String> = map["partitions"]
        .as_object()
        .into_iter()
        .flat_map(|o| o.values())
        .filter(|p| !p["moving"].is_null())
        .map(|p| {
            let m = &p["moving"];
            let phase = if m["phase"] == "Filling" { "filling" } else { "draining" };
            format!("partition {} {}:{} -> {}:{} ({phase})", p["id"], m["from"]["node"], m["from"]["disk"], m["to"]["node"], m["to"]["disk"])
        })
        .collect();
    if !moves.is_empty() {
        println!("moves under way: {}", moves.join("; "));
    }
    if let Ok(m) = serde_json::from_value::<strata_cluster::ClusterMap>(map.clone())
        && let Some(r) = &m.rebalance
    {
        let done = r.moves.iter().filter(|pm| matches!(m.plan_state(pm), strata_cluster::PlanState::Done | strata_cluster::PlanState::Stale)).count();
        println!("rebalancing: {done} of {} moves done ({} at a time)", r.moves.len(), r.max_moves);
    }
    let degraded = v["degraded"].as_array().map_or(0, |d| d.len());
    println!("partitions: {} read-write, {} read-only, {} degraded (a replica on a node down or a disk not up)", rw, ro, degraded);
    let lag = v["replication"].as_array().cloned().unwrap_or_default();
    if !lag.is_empty() {
        let worst = lag.iter().max_by_key(|l| l["lag_records"].as_u64().unwrap_or(0));
        let behind = lag.iter().filter(|l| l["lag_records"].as_u64().unwrap_or(0) > 0).count();
        let errors = lag.iter().filter(|l| !l["error"].is_null()).count();
        println!("replication on this node: {} replica pairs, {} behind, {} failing", lag.len(), behind, errors);
        if let Some(w) = worst.filter(|w| w["lag_records"].as_u64().unwrap_or(0) > 0) {
            println!(
                "  most behind: partition {} from node {}: {} records, {} bytes, {:.1} s",
                w["partition"],
                w["peer"],
                w["lag_records"],
                w["lag_bytes"],
                w["lag_seconds"].as_f64().unwrap_or(0.0)
            );
        }
    }
    Ok(())
}

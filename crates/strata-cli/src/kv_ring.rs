//! `strata kv ring ...` and `strata kv define`: the read-only stores' ring
//! in the cluster map, store definitions on it, and the ring files builders
//! take (`strata kv build --ring`, `tools/spark/build_store.py`).

use crate::commands::Common;
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use strata_cluster::{ClusterMap, KvReplication, decode_map};
use strata_kv::{RingFile, StoreDef};
use strata_placement::spock::{Replication, Ring, RingNode};

#[derive(clap::Subcommand, Debug)]
pub enum RingCmd {
    /// Sets up the cluster's ring: partitions spread over the nodes, zones interleaved.
    Init(InitArgs),
    /// Writes a store's ring file from the cluster map, for builders.
    Export(ExportArgs),
    /// Writes a ring file without a cluster (nodes given as ID:ZONE).
    Plan(PlanArgs),
}

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// Ring partitions (shared by every store; more partitions, finer rebalancing).
    #[arg(long)]
    pub partitions: u32,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Where to write the ring file.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Nodes as ID:ZONE, comma-separated (zones are numbers).
    #[arg(long, value_delimiter = ',')]
    pub nodes: Vec<String>,
    /// Ring partitions.
    #[arg(long)]
    pub partitions: u32,
    /// Chunks per (partition, replica).
    #[arg(long, default_value_t = 2)]
    pub chunks: u32,
    /// Replicas on distinct nodes.
    #[arg(long, conflicts_with = "zone_replicas")]
    pub replicas: Option<u32>,
    /// Replicas per zone as ZONE=N, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub zone_replicas: Vec<String>,
    /// Where to write the ring file.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct DefineArgs {
    /// Store name.
    #[arg(long)]
    pub store: String,
    /// Chunks per (partition, replica).
    #[arg(long, default_value_t = 2)]
    pub chunks: u32,
    /// Replicas on distinct nodes.
    #[arg(long, conflicts_with = "zone_replicas")]
    pub replicas: Option<u32>,
    /// Replicas per zone as ZONE=N, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub zone_replicas: Vec<String>,
    /// Replicas a get reads before answering.
    #[arg(long, default_value_t = 1)]
    pub required_reads: u32,
    #[command(flatten)]
    pub common: Common,
}

fn zone_counts(list: &[String]) -> Result<BTreeMap<String, u32>> {
    list.iter()
        .map(|z| {
            let (name, n) = z.split_once('=').with_context(|| format!("{z:?}: expected ZONE=N"))?;
            Ok((name.to_string(), n.parse().with_context(|| format!("{z:?}: N is a number"))?))
        })
        .collect()
}

fn replication(replicas: Option<u32>, zones: &[String]) -> Result<KvReplication> {
    match (replicas, zones.is_empty()) {
        (Some(n), true) => Ok(KvReplication::Nodes(n)),
        (None, false) => Ok(KvReplication::Zones(zone_counts(zones)?)),
        (None, true) => Ok(KvReplication::Nodes(1)),
        (Some(_), false) => bail!("give --replicas or --zone-replicas, not both"),
    }
}

/// The cluster map, as a node serves it.
pub(crate) async fn fetch_map(server: &str) -> Result<ClusterMap> {
    let c = strata_client::Client::new(server);
    let r = c.send(http::Method::GET, "/meta/v1/map", &[], strata_client::full(bytes::Bytes::new())).await?;
    Ok(decode_map(&r.bytes().await?)?)
}

/// A store's ring file from the map.
pub(crate) fn ring_file(map: &ClusterMap, store: &str) -> Result<RingFile> {
    let spec = map.kv.stores.get(store).with_context(|| format!("the cluster has no read-only store {store:?} (strata kv define)"))?;
    let table = map.kv_table(store)?;
    let def = StoreDef { name: store.to_string(), partitions: table.len() as u32, replication: spec.factor(), chunks: spec.chunks };
    Ok(RingFile::new(def, table))
}

pub async fn ring(cmd: RingCmd) -> Result<()> {
    match cmd {
        RingCmd::Init(a) => {
            crate::cluster::propose(&a.common, json!({ "KvInitRing": { "partitions": a.partitions } })).await?;
            let map = fetch_map(&a.common.server).await?;
            let mut owned: BTreeMap<u64, usize> = BTreeMap::new();
            for n in &map.kv.ring {
                *owned.entry(*n).or_default() += 1;
            }
            println!("ring of {} partitions: {}", map.kv.ring.len(), owned.iter().map(|(n, c)| format!("node {n} owns {c}")).collect::<Vec<_>>().join(", "));
        }
        RingCmd::Export(a) => {
            let map = fetch_map(&a.common.server).await?;
            let f = ring_file(&map, &a.store)?;
            f.write(&a.out)?;
            println!(
                "wrote {} (store {}, {} partitions, {} replicas, ring {:#010x})",
                a.out.display(),
                a.store,
                f.store.partitions,
                f.store.replication,
                f.ring
            );
        }
        RingCmd::Plan(a) => {
            let nodes = a
                .nodes
                .iter()
                .map(|n| {
                    let (id, zone) = n.split_once(':').with_context(|| format!("{n:?}: expected ID:ZONE"))?;
                    Ok(RingNode { id: id.parse().context("node id")?, zone: zone.parse().context("zone number")? })
                })
                .collect::<Result<Vec<_>>>()?;
            let rep = match replication(a.replicas, &a.zone_replicas)? {
                KvReplication::Nodes(n) => Replication::Nodes(n),
                KvReplication::Zones(z) => Replication::Zones(z.into_iter().map(|(k, v)| Ok((k.parse().context("zone number")?, v))).collect::<Result<_>>()?),
            };
            let ring = Ring::balanced(a.partitions, &nodes)?;
            let table = ring.replica_table(&rep)?;
            let def = StoreDef { name: a.store.clone(), partitions: a.partitions, replication: rep.factor(), chunks: a.chunks };
            def.validate()?;
            let f = RingFile::new(def, table);
            f.write(&a.out)?;
            println!("wrote {} (ring {:#010x})", a.out.display(), f.ring);
        }
    }
    Ok(())
}

pub async fn define(a: DefineArgs) -> Result<()> {
    let rep = replication(a.replicas, &a.zone_replicas)?;
    let spec = strata_cluster::KvStoreSpec { chunks: a.chunks, replication: rep, required_reads: a.required_reads };
    crate::cluster::propose(&a.common, json!({ "KvCreateStore": { "name": a.store, "spec": spec } })).await?;
    println!("defined read-only store {} on the ring", a.store);
    Ok(())
}

//! The node as an FDS tractserver: tract writes and reads on its replicas
//! of the tract locator table's rows, each checked against the row's
//! version in the node's map (FDS §3.2: a client whose row is out of date
//! is refused and refreshes), a replica that is still filling taking
//! writes and refusing reads; and, on the primary of a blob's metadata
//! row, the blob's metadata operations (FDS §2.3), one at a time per blob,
//! each written to every replica of the row before it answers.

use crate::node::ClusterNode;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use strata_engine::{Replica, WriteOp};
use strata_tract::meta::{self, BlobMeta, METADATA_TRACT, MetaOp};
use strata_tract::{Guid, TractError};

/// One lock per blob whose metadata an operation is changing here.
#[derive(Default)]
pub(crate) struct MetaLocks(Mutex<HashMap<Guid, Weak<tokio::sync::Mutex<()>>>>);

impl MetaLocks {
    fn of(&self, guid: &Guid) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = m.get(guid).and_then(Weak::upgrade) {
            return l;
        }
        m.retain(|_, w| w.strong_count() > 0);
        let l = Arc::new(tokio::sync::Mutex::new(()));
        m.insert(*guid, Arc::downgrade(&l));
        l
    }
}

/// The local replica a tract request on `guid`'s tract `tract`, made
/// under row version `given`, goes to (a write may go to any replica of
/// the row, whatever the blob's replication level).
fn local_row(node: &ClusterNode, guid: &Guid, tract: u64, given: u64, write: bool) -> Result<Arc<Replica>, TractError> {
    let map = node.map();
    let width = map.tracts.as_ref().ok_or(TractError::NoTable)?.replicas as usize;
    let route = map.tract_route(&guid.0, tract, width).ok_or(TractError::NoTable)?;
    if route.version != given {
        if given > route.version {
            // The client saw a newer map than this node has: fetch it.
            node.saw_epoch(given);
        }
        return Err(TractError::StaleRow { partition: route.partition, current: route.version, given });
    }
    let me = node.config.node_id;
    let set = if write { &route.write } else { &route.read };
    if !set.iter().any(|r| r.node == me) {
        if !write && route.write.iter().any(|r| r.node == me) {
            return Err(TractError::Filling(route.partition));
        }
        return Err(TractError::NotHere(route.partition));
    }
    // Placed here by the map, not yet opened by the reconciler: as good as filling.
    node.disks.replica(route.partition).ok_or(TractError::Filling(route.partition))
}

/// Writes version `version` of a tract under row version `row_version`;
/// the newest version this replica then holds.
pub async fn write(node: &ClusterNode, guid: &Guid, incarnation: u32, tract: u64, row_version: u64, version: u64, data: Bytes) -> Result<u64, TractError> {
    if tract == METADATA_TRACT {
        return Err(TractError::Invalid("the metadata tract is written by its row's primary only (POST /tract/{guid})".into()));
    }
    let max = node.map().tracts.as_ref().map(|t| t.tract_bytes).ok_or(TractError::NoTable)?;
    if data.len() as u64 > max {
        return Err(TractError::TooLarge { size: data.len() as u64, max });
    }
    let replica = local_row(node, guid, tract, row_version, true)?;
    strata_tract::store::write(&replica, guid, incarnation, tract, version, data).await
}

/// The newest version of a tract and its bytes, under row version
/// `row_version`.
pub fn read(node: &ClusterNode, guid: &Guid, incarnation: u32, tract: u64, row_version: u64) -> Result<(u64, Bytes), TractError> {
    let replica = local_row(node, guid, tract, row_version, false)?;
    strata_tract::store::read(&replica, guid, incarnation, tract)?.ok_or_else(|| TractError::NotFound { guid: guid.to_string(), tract })
}

/// Applies a metadata operation as the primary of the blob's metadata
/// row: one at a time per blob, read from this node's replica, and a
/// change written to every replica of the row (this one and the others
/// through the replica RPC) before the answer. Its version is drawn from
/// this node's clock and id, above the version it replaces, so two
/// primaries one after the other never write the same version.
pub async fn meta(node: &ClusterNode, guid: &Guid, op: MetaOp, row_version: u64) -> Result<BlobMeta, TractError> {
    let map = node.map();
    let table = map.tracts.as_ref().ok_or(TractError::NoTable)?;
    let route = map.tract_route(&guid.0, METADATA_TRACT, table.replicas as usize).ok_or(TractError::NoTable)?;
    let me = node.config.node_id;
    if route.version != row_version {
        if row_version > route.version {
            node.saw_epoch(row_version);
        }
        return Err(TractError::StaleRow { partition: route.partition, current: route.version, given: row_version });
    }
    if route.primary.is_none_or(|p| p.node != me) {
        return Err(TractError::NotPrimary(route.partition));
    }
    let replica = node.disks.replica(route.partition).ok_or(TractError::Filling(route.partition))?;
    let lock = node.tract_locks.of(guid);
    let _held = lock.lock().await;
    let current = strata_tract::store::read(&replica, guid, 0, METADATA_TRACT)?;
    let held = current.as_ref().map(|(_, b)| BlobMeta::decode(b)).transpose()?;
    let now = node.clock().now_ms();
    let max = u8::try_from(table.replicas).unwrap_or(u8::MAX);
    let (write, answer) = meta::apply(held, op, max, now, &guid.to_string())?;
    let Some(new) = write else { return Ok(answer) };
    let last = current.map_or(0, |(v, _)| v >> 16);
    let version = (now.max(last + 1) << 16) | (me & 0xffff);
    let data = Bytes::from(new.encode());
    let key = strata_tract::store::tract_key(guid, 0, METADATA_TRACT, version);
    let op = WriteOp::Put { key, props: Default::default(), data };
    write_row(node, &map, &route, &replica, vec![op], false)
        .await
        .map_err(|(addr, detail)| TractError::Unreachable { node: addr, detail: format!("metadata write: {detail}") })?;
    Ok(answer)
}

/// Applies `ops` to every replica of a row `route` names for writes:
/// `replica` (this node's, when it is one of them) directly, the others
/// through the replica RPC, all at once; durable on all when it returns.
/// A put of a key a replica holds and a delete of one it lacks are done
/// already. An error names the replica's address and what went wrong.
/// The other replicas fence the row (`ReplicaHost::fence`): one whose map
/// says the row changed since `map` refuses, and this node learns of the
/// newer map. With `others_first`, this node's own replica is written only
/// once every other took the ops.
pub(crate) async fn write_row(
    node: &ClusterNode,
    map: &strata_cluster::ClusterMap,
    route: &strata_cluster::TractRoute,
    replica: &Arc<Replica>,
    ops: Vec<WriteOp>,
    others_first: bool,
) -> Result<(), (String, String)> {
    use strata_engine::EngineError as E;
    let me = node.config.node_id;
    // Every op at once (one group commit), as on the other replicas.
    let local = || async {
        let done = futures_util::future::join_all(ops.iter().map(|op| replica.submit(op.clone()))).await;
        done.into_iter().try_for_each(|r| match r {
            Ok(_) | Err(E::AlreadyExists | E::NotFound | E::Deleted) => Ok(()),
            Err(e) => Err(("this node".to_string(), e.to_string())),
        })
    };
    let remote = route.write.iter().filter(|loc| loc.node != me).flat_map(|loc| ops.iter().map(move |op| (loc, op))).map(|(loc, op)| async move {
        let addr = addr_of(map, loc)?;
        remote_write(node, map.epoch, route.partition, &addr, op).await
    });
    let mine = route.write.iter().any(|loc| loc.node == me);
    if others_first {
        futures_util::future::join_all(remote).await.into_iter().collect::<Result<(), _>>()?;
        return if mine { local().await } else { Ok(()) };
    }
    let (others, here) = tokio::join!(futures_util::future::join_all(remote), async { if mine { local().await } else { Ok(()) } });
    others.into_iter().collect::<Result<(), _>>()?;
    here
}

/// One op on another replica of a row, through the replica RPC.
async fn remote_write(node: &ClusterNode, epoch: u64, partition: u64, addr: &str, op: &WriteOp) -> Result<(), (String, String)> {
    use strata_rpc::{RpcError, WireError as W};
    match node.rpc().write(addr, epoch, partition, op, None).await {
        Ok(_) | Err(RpcError::Remote(W::AlreadyExists | W::NotFound | W::Deleted)) => Ok(()),
        Err(e) => Err((addr.to_string(), remote_error(node, e))),
    }
}

/// The address of a row replica's node.
fn addr_of(map: &strata_cluster::ClusterMap, loc: &strata_cluster::ReplicaLoc) -> Result<String, (String, String)> {
    map.nodes.get(&loc.node).map(|n| n.addr.clone()).ok_or_else(|| (format!("node {}", loc.node), "not in the map".to_string()))
}

/// What went wrong on another replica; a refusal that names a newer map
/// than this node's makes this node fetch it.
fn remote_error(node: &ClusterNode, e: strata_rpc::RpcError) -> String {
    if let strata_rpc::RpcError::Remote(strata_rpc::WireError::Fenced { node_epoch, .. }) = &e {
        node.saw_epoch(*node_epoch);
    }
    e.to_string()
}

/// The record under `key` on every other replica of a row (`None` where
/// there is none), read through the fenced replica RPC.
pub(crate) async fn read_others(
    node: &ClusterNode,
    map: &strata_cluster::ClusterMap,
    route: &strata_cluster::TractRoute,
    key: &strata_types::Key,
) -> Result<Vec<Option<Bytes>>, (String, String)> {
    use strata_rpc::{RpcError, WireError as W};
    let me = node.config.node_id;
    let reads = route.write.iter().filter(|loc| loc.node != me).map(|loc| async move {
        let addr = addr_of(map, loc)?;
        match node.rpc().read(&addr, map.epoch, route.partition, key, true).await {
            Ok((_, _, data)) => Ok(Some(data)),
            Err(RpcError::Remote(W::NotFound | W::Deleted)) => Ok(None),
            Err(e) => Err((addr, remote_error(node, e))),
        }
    });
    futures_util::future::join_all(reads).await.into_iter().collect()
}

/// What a pass of the orphan reclaimer did on this node.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct OrphanPass {
    /// Rows whose replica here was listed.
    pub rows: usize,
    /// Live tract versions listed (metadata tracts not counted).
    pub tracts: u64,
    /// Blobs whose metadata was read.
    pub blobs: usize,
    /// Tract versions deleted: of a blob that does not exist, of an
    /// incarnation deleted since, or beyond the blob's size.
    pub reclaimed: u64,
    /// Blobs whose metadata could not be read (their tracts are kept).
    pub errors: Vec<String>,
}

/// The metadata of `guid`, read from its metadata row's primary (this
/// node, or another through its HTTP port); `None` when the blob does not
/// exist.
async fn blob_meta(node: &ClusterNode, guid: &Guid) -> Result<Option<BlobMeta>, TractError> {
    let map = node.map();
    let width = map.tracts.as_ref().ok_or(TractError::NoTable)?.replicas as usize;
    let route = map.tract_route(&guid.0, METADATA_TRACT, width).ok_or(TractError::NoTable)?;
    let primary = route.primary.ok_or(TractError::Filling(route.partition))?;
    if primary.node == node.config.node_id {
        return match meta(node, guid, MetaOp::Open, route.version).await {
            Ok(m) => Ok(Some(m)),
            Err(TractError::NoSuchBlob(_)) => Ok(None),
            Err(e) => Err(e),
        };
    }
    let addr = map.nodes.get(&primary.node).map(|n| n.addr.clone()).ok_or(TractError::NotPrimary(route.partition))?;
    let c = crate::kv_fetch::peer_client(&addr);
    let headers = [(strata_tract::ROW_VERSION_HEADER, route.version.to_string())];
    match c.send(http::Method::POST, &format!("/tract/{guid}"), &headers, strata_client::full(Bytes::from_static(br#"{"op":"open"}"#))).await {
        Ok(resp) => {
            let b = resp.bytes().await.map_err(|e| TractError::Unreachable { node: addr.clone(), detail: e.to_string() })?;
            serde_json::from_slice(&b).map(Some).map_err(|e| TractError::Invalid(format!("blob metadata from {addr}: {e}")))
        }
        Err(strata_client::ClientError::Api { code, .. }) if code == "NoSuchBlob" => Ok(None),
        Err(error) => Err(TractError::Remote { node: addr, error }),
    }
}

/// One pass of the orphan reclaimer (FDS §2.3's scrubber of tracts with no
/// metadata): lists the live tract versions of this node's replicas of
/// the rows, then reads each blob's metadata, and deletes the versions of
/// a blob that does not exist, of an older incarnation, or beyond the
/// blob's size. Listing first is what makes it safe: a tract is written
/// only after the extend that covers it returned, so metadata read after
/// the listing covers every tract the listing saw that is still the
/// blob's. A blob whose metadata cannot be read keeps its tracts.
pub async fn reclaim_orphans(node: &ClusterNode) -> Result<OrphanPass, TractError> {
    let map = node.map();
    let mut pass = OrphanPass::default();
    let Some(table) = &map.tracts else { return Ok(pass) };
    let me = node.config.node_id;
    let mut found: Vec<(Arc<Replica>, strata_types::Key, Guid, u32, u64)> = Vec::new();
    for id in &table.rows {
        if !map.holders(*id).iter().any(|r| r.node == me) {
            continue;
        }
        let Some(replica) = node.disks.replica(*id) else { continue };
        pass.rows += 1;
        let r = replica.clone();
        let keys = tokio::task::spawn_blocking(move || r.keys()).await.map_err(|e| TractError::Invalid(e.to_string()))??;
        for (key, state) in keys {
            if key.kind() != strata_types::KeyKind::Tract || !matches!(state, strata_engine::KeyState::Live { .. }) {
                continue;
            }
            let Some(body) = key.versioned_body().filter(|b| b.len() == 28) else { continue };
            let mut g = [0u8; 16];
            g.copy_from_slice(&body[..16]);
            let incarnation = u32::from_be_bytes([body[16], body[17], body[18], body[19]]);
            let mut t = [0u8; 8];
            t.copy_from_slice(&body[20..]);
            let tract = u64::from_be_bytes(t);
            if tract == METADATA_TRACT {
                continue;
            }
            pass.tracts += 1;
            found.push((replica.clone(), key, Guid(g), incarnation, tract));
        }
    }
    let guids: std::collections::BTreeSet<Guid> = found.iter().map(|f| f.2).collect();
    let mut metas: HashMap<Guid, Option<BlobMeta>> = HashMap::new();
    for g in guids {
        match blob_meta(node, &g).await {
            Ok(m) => {
                metas.insert(g, m);
            }
            Err(e) => pass.errors.push(format!("blob {g}: {e}")),
        }
    }
    pass.blobs = metas.len();
    for (replica, key, guid, incarnation, tract) in found {
        let Some(m) = metas.get(&guid) else { continue };
        let orphan = match m {
            None => true,
            Some(m) => m.deleted || m.incarnation != incarnation || tract >= m.size_tracts,
        };
        if orphan {
            match replica.submit(WriteOp::Delete { key }).await {
                Ok(_) | Err(strata_engine::EngineError::NotFound | strata_engine::EngineError::Deleted) => pass.reclaimed += 1,
                Err(e) => pass.errors.push(format!("blob {guid} tract {tract}: {e}")),
            }
        }
    }
    Ok(pass)
}

/// Runs [`reclaim_orphans`] every `interval` as the worker `tract-orphans`.
pub fn start_orphan_reclaimer(node: &Arc<ClusterNode>, interval: std::time::Duration) {
    let weak = Arc::downgrade(node);
    node.workers.spawn("tract-orphans", crate::worker::Next::After(interval), move || {
        let weak = weak.clone();
        async move {
            let Some(node) = weak.upgrade() else { return Ok(crate::worker::Next::Done) };
            match reclaim_orphans(&node).await {
                Ok(p) => {
                    if p.reclaimed > 0 {
                        tracing::info!(reclaimed = p.reclaimed, blobs = p.blobs, "orphaned tracts reclaimed");
                    }
                    Ok(crate::worker::Next::After(interval))
                }
                Err(e) => Err(crate::worker::PassFailed::new(format!("orphan pass: {e}"), interval)),
            }
        }
    });
}

/// A row replica filling on this node (FDS §3.2's recovery, §3.4's
/// growth): what it holds so far against what its source holds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RowFill {
    /// The row's partition.
    pub partition: u64,
    /// The replica it replaces, `node:disk`.
    pub from: String,
    /// This node's new replica, `node:disk`.
    pub to: String,
    /// Bytes the new replica holds.
    pub copied_bytes: u64,
    /// Bytes the largest serving replica of the row holds (what there is
    /// to copy); `None` when none could be asked.
    pub source_bytes: Option<u64>,
    /// When the move started, ms since the epoch.
    pub started_ms: u64,
}

/// Bytes of this node's row replicas that are filling: the copy's progress
/// without asking anyone (the metrics' figure).
pub fn filling_bytes(node: &ClusterNode) -> u64 {
    let map = node.map();
    let me = node.config.node_id;
    map.partitions
        .values()
        .filter(|p| p.kind == strata_cluster::PartitionKind::Tract)
        .filter(|p| p.moving.is_some_and(|m| m.to.node == me && m.phase == strata_cluster::MovePhase::Filling))
        .filter_map(|p| node.disks.replica(p.id))
        .map(|r| r.status().used_bytes)
        .sum()
}

/// Every row replica filling on this node, with how far it got and what
/// its sources hold (asked through their HTTP ports).
pub async fn fills(node: &ClusterNode) -> Vec<RowFill> {
    let map = node.map();
    let me = node.config.node_id;
    let mut out = Vec::new();
    let mut sizes: HashMap<u64, HashMap<u64, u64>> = HashMap::new();
    for p in map.partitions.values().filter(|p| p.kind == strata_cluster::PartitionKind::Tract) {
        let Some(m) = p.moving.filter(|m| m.to.node == me && m.phase == strata_cluster::MovePhase::Filling) else { continue };
        let copied = node.disks.replica(p.id).map_or(0, |r| r.status().used_bytes);
        let mut source = None;
        for r in p.replicas.iter().filter(|r| **r != m.to && map.serves(**r)) {
            if let std::collections::hash_map::Entry::Vacant(slot) = sizes.entry(r.node) {
                let mut got = HashMap::new();
                if let Some(addr) = map.nodes.get(&r.node).map(|n| n.addr.clone()) {
                    let c = crate::kv_fetch::peer_client(&addr);
                    if let Ok(v) = c.json(http::Method::GET, "/admin/partitions").await {
                        for e in v.as_array().into_iter().flatten() {
                            if let (Some(id), Some(used)) = (e["partition"].as_u64(), e["used_bytes"].as_u64()) {
                                got.insert(id, used);
                            }
                        }
                    }
                }
                slot.insert(got);
            }
            if let Some(b) = sizes.get(&r.node).and_then(|s| s.get(&p.id)) {
                source = Some(source.map_or(*b, |s: u64| s.max(*b)));
            }
        }
        out.push(RowFill {
            partition: p.id,
            from: format!("{}:{}", m.from.node, m.from.disk),
            to: format!("{}:{}", m.to.node, m.to.disk),
            copied_bytes: copied,
            source_bytes: source,
            started_ms: m.started_ms,
        });
    }
    out
}

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
    let (epoch, partition) = (map.epoch, route.partition);
    let writes = route.write.iter().map(|loc| {
        let (key, data, replica) = (key.clone(), data.clone(), replica.clone());
        let addr = map.nodes.get(&loc.node).map(|n| n.addr.clone());
        let local = loc.node == me;
        async move {
            if local {
                return strata_tract::store::write(&replica, guid, 0, METADATA_TRACT, version, data).await.map(|_| ());
            }
            let addr = addr.ok_or_else(|| TractError::Invalid(format!("the map names no node {}", loc.node)))?;
            let op = WriteOp::Put { key, props: Default::default(), data };
            match node.rpc().write(&addr, epoch, partition, &op).await {
                Ok(_) | Err(strata_rpc::RpcError::Remote(strata_rpc::WireError::AlreadyExists)) => Ok(()),
                Err(e) => Err(TractError::Unreachable { node: addr, detail: format!("metadata write: {e}") }),
            }
        }
    });
    for r in futures_util::future::join_all(writes).await {
        r?;
    }
    Ok(answer)
}

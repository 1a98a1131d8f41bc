//! The node as an FDS tractserver: tract writes and reads on its replicas
//! of the tract locator table's rows, each checked against the row's
//! version in the node's map (FDS §3.2: a client whose row is out of date
//! is refused and refreshes), a replica that is still filling taking
//! writes and refusing reads.

use crate::node::ClusterNode;
use bytes::Bytes;
use std::sync::Arc;
use strata_engine::Replica;
use strata_tract::{Guid, TractError};

/// The local replica a tract request on `guid`'s tract `tract`, made
/// under row version `given`, goes to.
fn local_row(node: &ClusterNode, guid: &Guid, tract: u64, given: u64, write: bool) -> Result<Arc<Replica>, TractError> {
    let map = node.map();
    let route = map.tract_route(&guid.0, tract).ok_or(TractError::NoTable)?;
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
pub async fn write(node: &ClusterNode, guid: &Guid, tract: u64, row_version: u64, version: u64, data: Bytes) -> Result<u64, TractError> {
    let max = node.map().tracts.as_ref().map(|t| t.tract_bytes).ok_or(TractError::NoTable)?;
    if data.len() as u64 > max {
        return Err(TractError::TooLarge { size: data.len() as u64, max });
    }
    let replica = local_row(node, guid, tract, row_version, true)?;
    strata_tract::store::write(&replica, guid, tract, version, data).await
}

/// The newest version of a tract and its bytes, under row version
/// `row_version`.
pub fn read(node: &ClusterNode, guid: &Guid, tract: u64, row_version: u64) -> Result<(u64, Bytes), TractError> {
    let replica = local_row(node, guid, tract, row_version, false)?;
    strata_tract::store::read(&replica, guid, tract)?.ok_or_else(|| TractError::NotFound { guid: guid.to_string(), tract })
}

//! The node as a Týr participant: the commit chain's steps on the rows it
//! is the primary of (their intents and installs written to every replica
//! of the row), reads through a blob's version managers and of chunks as
//! of a blob version on any replica that serves reads, and the recovery
//! sweep that resolves intents a dead client or a failed primary left.

use crate::node::ClusterNode;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use strata_cluster::{ClusterMap, METADATA_TRACT, TractRoute};
use strata_engine::{Replica, WriteOp};
use strata_txn::model::{ChunkData, ChunkRead, Decision, Finish, Hop, Resolve, Step, StepAnswer, Usage, UsageQuery, VmAnswer, VmRead, decode, encode};
use strata_txn::{Participant, TxnError, store};

/// The row writer of one row on this node.
struct RowIo<'a> {
    node: &'a ClusterNode,
    map: Arc<ClusterMap>,
    route: TractRoute,
    replica: Arc<Replica>,
}

impl strata_txn::participant::RowWriter for RowIo<'_> {
    async fn write_all(&self, ops: Vec<WriteOp>) -> Result<(), TxnError> {
        crate::tracts::write_row(self.node, &self.map, &self.route, &self.replica, ops, false)
            .await
            .map_err(|(node, detail)| TxnError::Unreachable { node, detail })
    }
    async fn write_others_first(&self, ops: Vec<WriteOp>) -> Result<(), TxnError> {
        crate::tracts::write_row(self.node, &self.map, &self.route, &self.replica, ops, true)
            .await
            .map_err(|(node, detail)| TxnError::Unreachable { node, detail })
    }
    async fn read_others(&self, key: strata_types::Key) -> Result<Vec<Option<Bytes>>, TxnError> {
        crate::tracts::read_others(self.node, &self.map, &self.route, &key).await.map_err(|(node, detail)| TxnError::Unreachable { node, detail })
    }
}

fn width(map: &ClusterMap) -> Result<usize, TxnError> {
    Ok(map.tracts.as_ref().ok_or(TxnError::NoTable)?.replicas as usize)
}

fn checked(node: &ClusterNode, row: u64, given: u64) -> Result<(Arc<ClusterMap>, TractRoute), TxnError> {
    let map = node.map();
    let route = map.row_route(row, width(&map)?).ok_or_else(|| TxnError::Invalid(format!("no row {row} in the tract locator table")))?;
    if route.version != given {
        if given > route.version {
            node.saw_epoch(given);
        }
        return Err(TxnError::StaleRow { partition: row, current: route.version, given });
    }
    Ok((map, route))
}

/// The row's writer, when this node is its primary at version `given`.
fn primary(node: &ClusterNode, row: u64, given: u64) -> Result<RowIo<'_>, TxnError> {
    let (map, route) = checked(node, row, given)?;
    if route.primary.is_none_or(|p| p.node != node.config.node_id) {
        return Err(TxnError::NotPrimary(row));
    }
    let replica = node.disks.replica(row).ok_or(TxnError::NotPrimary(row))?;
    Ok(RowIo { node, map, route, replica })
}

/// This node's replica of the row, when it serves reads at version `given`.
fn reader(node: &ClusterNode, row: u64, given: u64) -> Result<Arc<Replica>, TxnError> {
    let (_, route) = checked(node, row, given)?;
    if !route.read.iter().any(|r| r.node == node.config.node_id) {
        return Err(TxnError::NotHere(row));
    }
    node.disks.replica(row).ok_or(TxnError::NotHere(row))
}

fn participant(node: &ClusterNode) -> &Participant {
    node.txn()
}

/// A forward-pass step.
pub async fn step(node: &ClusterNode, s: Step) -> Result<StepAnswer, TxnError> {
    let hop = s.chain.get(s.index as usize).copied().ok_or_else(|| TxnError::Invalid(format!("step {} of a chain of {}", s.index, s.chain.len())))?;
    let io = primary(node, hop.row, s.row_version)?;
    let now = node.clock().now_ms();
    participant(node).step(&io.replica, io.route.version, &io, s, now).await
}

/// A backward-pass decision on one hop.
pub async fn finish(node: &ClusterNode, f: Finish) -> Result<(), TxnError> {
    let io = primary(node, f.hop.row, f.row_version)?;
    participant(node).finish(&io.replica, io.route.version, &io, &f.txn, &f.hop, f.decision).await
}

/// A question to a decider.
pub async fn resolve(node: &ClusterNode, r: Resolve) -> Result<Decision, TxnError> {
    let io = primary(node, r.hop.row, r.row_version)?;
    participant(node).resolve(&io.replica, io.route.version, &io, &r.txn).await
}

/// A chunk as of a blob version, from this node's replica of its row;
/// refused when the blob version is older than the read lease (what it
/// needs may have been reclaimed).
pub fn chunk(node: &ClusterNode, r: ChunkRead) -> Result<ChunkData, TxnError> {
    let lease_ms = participant(node).config().read_lease.as_millis() as u64;
    let age_ms = node.clock().now_ms().saturating_sub(r.taken_ms);
    if age_ms > lease_ms {
        return Err(TxnError::SnapshotTooOld { age_ms, lease_ms });
    }
    let replica = reader(node, node.map().tract_partition(&r.guid, r.index).ok_or(TxnError::NoTable)?, r.row_version)?;
    store::read_chunk(&replica, &r.guid, r.index, r.as_of)
}

/// Sends one envelope to a node of the map; its answer decoded.
async fn remote<A: for<'a> serde::Deserialize<'a>>(map: &ClusterMap, to: strata_cluster::NodeId, path: &str, body: Vec<u8>) -> Result<A, TxnError> {
    let addr =
        map.nodes.get(&to).map(|n| n.addr.clone()).ok_or_else(|| TxnError::Unreachable { node: format!("node {to}"), detail: "not in the map".into() })?;
    let c = crate::kv_fetch::peer_client(&addr);
    let r = async {
        let resp = c.send(http::Method::POST, path, &[], strata_client::full(Bytes::from(body))).await?;
        resp.bytes().await
    }
    .await
    .map_err(|e| TxnError::Unreachable { node: addr.clone(), detail: e.to_string() })?;
    decode(&r)
}

/// A read through a blob's version manager (this node, the primary of the
/// blob's metadata row, which knows the writers still holding the blob):
/// the blob's version for a reader ([`Participant::snapshot`]) and the
/// chunks covering the range as of it, each from this node when it holds
/// a readable replica of the chunk's row, else from one at random.
///
/// The reader is registered as a user of the blob version it gets
/// (`Participant::usage`): transaction `txn` until it is decided or the
/// read lease ends, a read outside a transaction (`None`) while it runs.
pub async fn vm_read(node: &ClusterNode, r: VmRead, txn: Option<strata_txn::TxnId>) -> Result<VmAnswer, TxnError> {
    let reader = txn.unwrap_or_else(strata_txn::TxnId::random);
    let answer = vm_read_as(node, r, reader).await;
    if txn.is_none() {
        participant(node).done_reading(&reader);
    }
    answer
}

async fn vm_read_as(node: &ClusterNode, r: VmRead, reader: strata_txn::TxnId) -> Result<VmAnswer, TxnError> {
    let map = node.map();
    let row = map.tract_partition(&r.guid, METADATA_TRACT).ok_or(TxnError::NoTable)?;
    let io = primary(node, row, r.row_version)?;
    let taken_ms = node.clock().now_ms();
    let snapshot = participant(node).snapshot_for(&io.replica, io.route.version, &r.guid, reader, taken_ms)?;
    let end = r.offset.saturating_add(r.len).min(snapshot.size);
    let mut chunks = Vec::new();
    if end > r.offset && snapshot.chunk_bytes > 0 {
        let cb = snapshot.chunk_bytes;
        let n = width(&map)?;
        let reads = (r.offset / cb..=(end - 1) / cb).map(|index| {
            let map = map.clone();
            async move {
                let row = map.tract_partition(&r.guid, index).ok_or(TxnError::NoTable)?;
                let route = map.row_route(row, n).ok_or(TxnError::NoTable)?;
                if route.read.iter().any(|l| l.node == node.config.node_id)
                    && let Some(local) = node.disks.replica(row)
                {
                    return store::read_chunk(&local, &r.guid, index, snapshot.version);
                }
                if route.read.is_empty() {
                    return Err(TxnError::Unreachable { node: format!("row {row}"), detail: "no replica serves reads".into() });
                }
                let to = route.read[rand::random_range(0..route.read.len())].node;
                let req = ChunkRead { guid: r.guid, index, as_of: snapshot.version, taken_ms, row_version: route.version };
                remote(&map, to, "/txn/chunk", encode(&req)).await
            }
        });
        for c in futures_util::future::join_all(reads).await {
            chunks.push(c?);
        }
    }
    Ok(VmAnswer { snapshot, taken_ms, chunks })
}

/// Calls a row's primary: this node directly, else through its HTTP port.
async fn at_primary<A: for<'a> serde::Deserialize<'a>>(
    node: &ClusterNode,
    row: u64,
    path: &str,
    body: impl FnOnce(u64) -> Vec<u8>,
) -> Result<Option<A>, TxnError> {
    let map = node.map();
    let route = map.row_route(row, width(&map)?).ok_or(TxnError::NoTable)?;
    let to = route.primary.ok_or_else(|| TxnError::Unreachable { node: format!("row {row}"), detail: "no replica serves".into() })?.node;
    if to == node.config.node_id {
        return Ok(None);
    }
    remote(&map, to, path, body(route.version)).await.map(Some)
}

async fn resolve_anywhere(node: &ClusterNode, txn: strata_txn::TxnId, hop: Hop) -> Result<Decision, TxnError> {
    match at_primary(node, hop.row, "/txn/resolve", |row_version| encode(&Resolve { txn, hop, row_version })).await? {
        Some(d) => Ok(d),
        None => {
            let v = node.map().row_route(hop.row, width(&node.map())?).map_or(0, |r| r.version);
            resolve(node, Resolve { txn, hop, row_version: v }).await
        }
    }
}

async fn finish_anywhere(node: &ClusterNode, txn: strata_txn::TxnId, hop: Hop, decision: Decision) -> Result<(), TxnError> {
    match at_primary::<()>(node, hop.row, "/txn/finish", |row_version| encode(&Finish { txn, hop, row_version, decision })).await? {
        Some(()) => Ok(()),
        None => {
            let v = node.map().row_route(hop.row, width(&node.map())?).map_or(0, |r| r.version);
            finish(node, Finish { txn, hop, row_version: v, decision }).await
        }
    }
}

/// What a recovery pass did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct RecoveryPass {
    /// Intents older than the timeout, found on rows this node leads.
    pub expired: usize,
    /// Of those, finished as committed.
    pub committed: usize,
    /// Of those, finished as aborted.
    pub aborted: usize,
    /// What could not be finished this time (retried next pass).
    pub errors: Vec<String>,
}

/// One pass of the recovery sweep: reads the intents of every row this
/// node now leads, and resolves each held longer than the intent timeout
/// with its decider. A committed transaction is finished on the chain's
/// later hops first (so a version manager installs only after the
/// chunks), then here; an aborted one here and on its later hops.
pub async fn recover(node: &ClusterNode) -> RecoveryPass {
    let mut pass = RecoveryPass::default();
    let map = node.map();
    let (Some(table), Ok(n)) = (map.tracts.as_ref(), width(&map)) else { return pass };
    let me = node.config.node_id;
    let lead = |row: u64| -> Option<(Arc<Replica>, u64)> {
        let route = map.row_route(row, n)?;
        (route.primary?.node == me).then_some(())?;
        Some((node.disks.replica(row)?, route.version))
    };
    for row in &table.rows {
        if let Some((replica, version)) = lead(*row)
            && let Err(e) = participant(node).adopt(&replica, version)
        {
            pass.errors.push(format!("row {row}: reading its intents: {e}"));
        }
    }
    let now = node.clock().now_ms();
    for (_replica, _version, intent) in participant(node).expired(now, lead) {
        pass.expired += 1;
        let s = &intent.step;
        let (txn, me_hop) = (s.txn, s.hop());
        let Some(decider) = s.chain.last().copied() else { continue };
        let decision = match resolve_anywhere(node, txn, decider).await {
            Ok(d) => d,
            Err(e) => {
                pass.errors.push(format!("transaction {txn}: asking its decider: {e}"));
                continue;
            }
        };
        let later: Vec<Hop> = s.chain[s.index as usize + 1..].to_vec();
        let mut ok = true;
        for hop in later.iter().rev() {
            if let Err(e) = finish_anywhere(node, txn, *hop, decision).await {
                pass.errors.push(format!("transaction {txn}: finishing row {}: {e}", hop.row));
                ok = false;
                break;
            }
        }
        if !ok && matches!(decision, Decision::Commit(_)) {
            continue;
        }
        match finish_anywhere(node, txn, me_hop, decision).await {
            Ok(()) if matches!(decision, Decision::Commit(_)) => pass.committed += 1,
            Ok(()) => pass.aborted += 1,
            Err(e) => pass.errors.push(format!("transaction {txn}: finishing row {}: {e}", me_hop.row)),
        }
    }
    pass
}

/// Runs [`recover`] every `interval` as the worker `txn-recovery`.
pub fn start_recovery(node: &Arc<ClusterNode>, interval: Duration) {
    let weak = Arc::downgrade(node);
    node.workers.spawn("txn-recovery", crate::worker::Next::After(interval), move || {
        let weak = weak.clone();
        async move {
            let Some(node) = weak.upgrade() else { return Ok(crate::worker::Next::Done) };
            let p = recover(&node).await;
            if p.expired > 0 {
                tracing::info!(
                    expired = p.expired,
                    committed = p.committed,
                    aborted = p.aborted,
                    errors = p.errors.len(),
                    first_error = p.errors.first().map(String::as_str),
                    "transaction intents resolved"
                );
            }
            match p.errors.first() {
                Some(e) => Err(crate::worker::PassFailed::new(format!("{} intents left: {e}", p.errors.len()), interval)),
                None => Ok(crate::worker::Next::After(interval)),
            }
        }
    });
}

/// What a pass of the version collector did on this node.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct GcSummary {
    /// Rows this node leads, collected.
    pub rows: usize,
    /// Chunks and blob records with more than one version.
    pub versioned: usize,
    /// Versions deleted.
    pub deleted: u64,
    /// Of those, cleared by their version manager's usage (the others
    /// waited out the read lease).
    pub cleared: u64,
    /// Superseded versions kept for now (in use, or within the read lease).
    pub waiting: u64,
    /// Rows that could not be collected this time.
    pub errors: Vec<String>,
}

/// The versions of blob `g` in use, on this node as the primary of the
/// blob's metadata row (its version manager).
pub fn usage(node: &ClusterNode, q: UsageQuery) -> Result<Usage, TxnError> {
    let map = node.map();
    let row = map.tract_partition(&q.guid, METADATA_TRACT).ok_or(TxnError::NoTable)?;
    let io = primary(node, row, q.row_version)?;
    participant(node).usage(&io.replica, io.route.version, &q.guid, node.clock().now_ms())
}

/// The versions of blob `g` in use, from its version manager (this node
/// or another).
async fn usage_of(node: &ClusterNode, g: strata_txn::model::Guid) -> Result<Usage, TxnError> {
    let map = node.map();
    let row = map.tract_partition(&g, METADATA_TRACT).ok_or(TxnError::NoTable)?;
    let route = map.row_route(row, width(&map)?).ok_or(TxnError::NoTable)?;
    let q = UsageQuery { guid: g, row_version: route.version };
    match at_primary::<Usage>(node, row, "/txn/usage", |_| encode(&q)).await? {
        Some(u) => Ok(u),
        None => usage(node, q),
    }
}

/// One pass of the version collector ([`strata_txn::gc`]) over every row
/// this node leads.
pub async fn collect(node: &ClusterNode) -> GcSummary {
    let mut sum = GcSummary::default();
    let map = node.map();
    let (Some(table), Ok(n)) = (map.tracts.as_ref(), width(&map)) else { return sum };
    let lease_ms = participant(node).config().read_lease.as_millis() as u64;
    for row in &table.rows {
        let Some(route) = map.row_route(*row, n) else { continue };
        if route.primary.is_none_or(|p| p.node != node.config.node_id) {
            continue;
        }
        let Ok(io) = primary(node, *row, route.version) else { continue };
        let now = node.clock().now_ms();
        match participant(node).gc.pass(&io.replica, &io, now, lease_ms, |g| usage_of(node, g)).await {
            Ok(p) => {
                sum.rows += 1;
                sum.versioned += p.versioned;
                sum.deleted += p.deleted;
                sum.cleared += p.cleared;
                sum.waiting += p.waiting;
            }
            Err(e) => sum.errors.push(format!("row {row}: {e}")),
        }
    }
    sum
}

/// Runs [`collect`] every `interval` as the worker `txn-gc`.
pub fn start_collector(node: &Arc<ClusterNode>, interval: Duration) {
    let weak = Arc::downgrade(node);
    node.workers.spawn("txn-gc", crate::worker::Next::After(interval), move || {
        let weak = weak.clone();
        async move {
            let Some(node) = weak.upgrade() else { return Ok(crate::worker::Next::Done) };
            let s = collect(&node).await;
            if s.deleted > 0 {
                tracing::info!(deleted = s.deleted, waiting = s.waiting, "superseded transaction versions reclaimed");
            }
            match s.errors.first() {
                Some(e) => Err(crate::worker::PassFailed::new(format!("{} rows left: {e}", s.errors.len()), interval)),
                None => Ok(crate::worker::Next::After(interval)),
            }
        }
    });
}

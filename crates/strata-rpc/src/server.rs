//! The answering side: runs a request against this node's replicas.

use crate::wire::*;
use bytes::Bytes;
use std::sync::Arc;
use strata_engine::{KeyState, Replica, WriteOp};
use strata_format::RecordKind;
use strata_types::PartitionId;

/// What the RPC server needs of the node.
pub trait ReplicaHost: Send + Sync {
    /// The node's map epoch.
    fn epoch(&self) -> u64;
    /// The local replica of a partition.
    fn replica(&self, partition: PartitionId) -> Option<Arc<Replica>>;
    /// The local replica of a partition, if it takes writes: a replica the
    /// map is moving away (or no longer places here) still answers reads,
    /// journals and fetches while the new one drains it, but refuses
    /// writes, so a router with an older map learns of the move.
    fn writable(&self, partition: PartitionId) -> Option<Arc<Replica>> {
        self.replica(partition)
    }
    /// The node's read-write stores, if it serves them.
    fn rw(&self) -> Option<&dyn RwHost> {
        None
    }
    /// Whether a write or read of `partition` made under the caller's map
    /// `caller_epoch` may proceed here ([`WireError::Fenced`] if not).
    /// Rows whose primary acts for them (tract rows) refuse a caller whose
    /// map predates the row's version, and one whose map is newer than
    /// this node can catch up to.
    fn fence(&self, partition: PartitionId, caller_epoch: u64) -> RwFuture<'_, ()> {
        let _ = (partition, caller_epoch);
        Box::pin(async { Ok(()) })
    }
}

/// A future an [`RwHost`] answers with.
pub type RwFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, WireError>> + Send + 'a>>;

/// What the RPC server needs of a node's read-write stores.
pub trait RwHost: Send + Sync {
    /// Every version of a key this node's replica holds.
    fn rw_get(&self, req: RwGetRequest) -> RwFuture<'_, Vec<WireVersion>>;
    /// Every version of each of several keys this node's replica holds, in order.
    fn rw_get_many(&self, req: RwGetManyRequest) -> RwFuture<'_, Vec<Vec<WireVersion>>>;
    /// Writes one version to this node's replica; how many it replaced.
    fn rw_put(&self, req: RwPutRequest) -> RwFuture<'_, u32>;
    /// Coordinates a put as the key's pseudo-master; the clock written.
    fn rw_coordinate(&self, req: RwCoordinateRequest) -> RwFuture<'_, Vec<u8>>;
}

/// Most entries returned from the index at once when the journal no longer
/// reaches back (the whole index is listed; keys are small).
const INDEX_LIST_MAX: usize = 1_000_000;

fn no_replica(host: &dyn ReplicaHost, partition: PartitionId, caller_epoch: u64) -> WireError {
    let node_epoch = host.epoch();
    WireError::NoReplica { partition, node_epoch, stale: caller_epoch < node_epoch }
}

/// Answers one request frame with one answer frame, as chunks to send in
/// order (a read's or a fetch's blob data shared, not copied).
pub async fn serve(host: &dyn ReplicaHost, body: Bytes) -> Vec<Bytes> {
    let kind = if body.len() >= 8 { u16::from_le_bytes([body[6], body[7]]) } else { 0 };
    let epoch = host.epoch();
    let garbage = |kind: u16, e: DecodeError| message(kind, &Answer::<()> { epoch, result: Err(WireError::Invalid(e.to_string())) }, Vec::new());
    match kind {
        KIND_WRITE => {
            let (req, ext, data): (WriteRequest, Extension, Bytes) = match decode_message_ext(KIND_WRITE, &body) {
                Ok(x) => x,
                Err(e) => return garbage(kind, e),
            };
            let result = write(host, req, ext.actor, data).await;
            message(KIND_WRITE, &Answer { epoch, result }, Vec::new())
        }
        KIND_READ => {
            let (req, _): (ReadRequest, Bytes) = match decode_message(KIND_READ, &body) {
                Ok(x) => x,
                Err(e) => return garbage(kind, e),
            };
            match host.fence(req.partition, req.epoch).await.and_then(|()| read(host, &req)) {
                Ok((rec, data)) => {
                    let ext = Extension { actor: rec.actor.clone(), ..Extension::default() };
                    message_ext(KIND_READ, &Answer { epoch, result: Ok(rec) }, &ext, vec![data])
                }
                Err(e) => message(KIND_READ, &Answer::<WireRecord> { epoch, result: Err(e) }, Vec::new()),
            }
        }
        KIND_JOURNAL => {
            let (items, _): (Vec<JournalItem>, Bytes) = match decode_message(KIND_JOURNAL, &body) {
                Ok(x) => x,
                Err(e) => return garbage(kind, e),
            };
            let answers: Vec<JournalAnswer> = items.into_iter().map(|i| JournalAnswer { partition: i.partition, result: journal(host, &i) }).collect();
            let actors = answers.iter().filter_map(|a| a.result.as_ref().ok()).flat_map(|c| c.entries.iter().map(|e| e.actor.clone())).collect();
            message_ext(KIND_JOURNAL, &Answer { epoch, result: Ok(answers) }, &Extension { actors, ..Extension::default() }, Vec::new())
        }
        KIND_DIGEST => {
            let (req, _): (DigestRequest, Bytes) = match decode_message(KIND_DIGEST, &body) {
                Ok(x) => x,
                Err(e) => return garbage(kind, e),
            };
            message(KIND_DIGEST, &Answer { epoch, result: digest(host, &req) }, Vec::new())
        }
        KIND_FETCH => {
            let (req, _): (FetchRequest, Bytes) = match decode_message(KIND_FETCH, &body) {
                Ok(x) => x,
                Err(e) => return garbage(kind, e),
            };
            match fetch(host, &req) {
                Ok((states, data)) => {
                    let actors = states.iter().filter_map(|s| if let Fetched::Live(r) = s { Some(r.actor.clone()) } else { None }).collect();
                    message_ext(KIND_FETCH, &Answer { epoch, result: Ok(states) }, &Extension { actors, ..Extension::default() }, data)
                }
                Err(e) => message(KIND_FETCH, &Answer::<Vec<Fetched>> { epoch, result: Err(e) }, Vec::new()),
            }
        }
        KIND_RW_GET | KIND_RW_GET_MANY | KIND_RW_PUT | KIND_RW_COORDINATE => {
            let Some(rw) = host.rw() else {
                return message(kind, &Answer::<()> { epoch, result: Err(WireError::Invalid("this node serves no read-write stores".into())) }, Vec::new());
            };
            match kind {
                KIND_RW_GET => match decode_message::<RwGetRequest>(kind, &body) {
                    Ok((req, _)) => message(kind, &Answer { epoch, result: rw.rw_get(req).await }, Vec::new()),
                    Err(e) => garbage(kind, e),
                },
                KIND_RW_GET_MANY => match decode_message::<RwGetManyRequest>(kind, &body) {
                    Ok((req, _)) => message(kind, &Answer { epoch, result: rw.rw_get_many(req).await }, Vec::new()),
                    Err(e) => garbage(kind, e),
                },
                KIND_RW_PUT => match decode_message::<RwPutRequest>(kind, &body) {
                    Ok((req, _)) => message(kind, &Answer { epoch, result: rw.rw_put(req).await }, Vec::new()),
                    Err(e) => garbage(kind, e),
                },
                _ => match decode_message::<RwCoordinateRequest>(kind, &body) {
                    Ok((req, _)) => message(kind, &Answer { epoch, result: rw.rw_coordinate(req).await }, Vec::new()),
                    Err(e) => garbage(kind, e),
                },
            }
        }
        k => message(k, &Answer::<()> { epoch, result: Err(WireError::Invalid(format!("unknown message kind {k:#x}"))) }, Vec::new()),
    }
}

async fn write(host: &dyn ReplicaHost, req: WriteRequest, actor: Option<String>, data: Bytes) -> Result<WireAck, WireError> {
    host.fence(req.partition, req.epoch).await?;
    let r = host.writable(req.partition).ok_or_else(|| no_replica(host, req.partition, req.epoch))?;
    let op = match req.op {
        WireOp::Put { key, props } => WriteOp::Put { key: decode_key(&key)?, props: props.into(), data },
        WireOp::Delete { key } => WriteOp::Delete { key: decode_key(&key)? },
        WireOp::TtlUpdate { key, expiry_ms } => WriteOp::TtlUpdate { key: decode_key(&key)?, expiry_ms },
        WireOp::Repair { key, props, created_ms } => WriteOp::ReplicaPut { key: decode_key(&key)?, props: props.into(), data, created_ms },
    };
    let ack = r.submit_as(op, actor.map(Arc::from)).await?;
    // The row may have changed while the write waited for its fsync: a
    // write the fence would refuse now is not acknowledged (it is durable
    // here, and the row's recovery treats it as never answered).
    host.fence(req.partition, req.epoch).await?;
    Ok(WireAck { lsn: ack.lsn, time_ms: ack.time_ms })
}

fn read(host: &dyn ReplicaHost, req: &ReadRequest) -> Result<(WireRecord, Bytes), WireError> {
    let r = host.replica(req.partition).ok_or_else(|| no_replica(host, req.partition, req.epoch))?;
    let key = decode_key(&req.key)?;
    let rec = if req.with_data { r.get(&key)? } else { r.info(&key)? };
    Ok((wire_record(&rec), rec.data))
}

/// A record's header on the wire, its actor with it.
fn wire_record(rec: &strata_engine::BlobRecord) -> WireRecord {
    let actor = (!rec.actor.is_empty()).then(|| rec.actor.clone());
    WireRecord { props: (&rec.props).into(), created_ms: rec.created_ms, expiry_ms: rec.expiry_ms, size: rec.size, actor }
}

fn journal(host: &dyn ReplicaHost, item: &JournalItem) -> Result<JournalChunk, WireError> {
    let r = host.replica(item.partition).ok_or_else(|| no_replica(host, item.partition, u64::MAX))?;
    let status = r.status();
    let kind_byte = |k: RecordKind| k as u8;
    match r.journal_since(item.after_lsn, item.max.max(1) as usize) {
        Some(entries) => Ok(JournalChunk {
            incarnation: r.incarnation(),
            entries: entries
                .into_iter()
                .map(|e| WireEntry {
                    lsn: e.lsn,
                    key: e.key.as_bytes().to_vec(),
                    kind: kind_byte(e.kind),
                    record_len: e.record_len,
                    actor: e.actor.as_deref().map(String::from),
                })
                .collect(),
            from_index: false,
            next_lsn: status.next_lsn,
            used_bytes: status.used_bytes,
        }),
        None => {
            // The journal no longer reaches back: list the index. `next_lsn`
            // was read first, so nothing listed is newer than what the
            // journal will give after it.
            let keys = r.keys()?;
            let entries = keys
                .into_iter()
                .take(INDEX_LIST_MAX)
                .filter_map(|(k, s)| match s {
                    KeyState::Live { .. } => Some(WireEntry { lsn: 0, key: k.as_bytes().to_vec(), kind: RecordKind::Put as u8, record_len: 0, actor: None }),
                    KeyState::Deleted => Some(WireEntry { lsn: 0, key: k.as_bytes().to_vec(), kind: RecordKind::Delete as u8, record_len: 0, actor: None }),
                    KeyState::Missing => None,
                })
                .collect();
            Ok(JournalChunk { incarnation: r.incarnation(), entries, from_index: true, next_lsn: status.next_lsn, used_bytes: status.used_bytes })
        }
    }
}

/// Most keys in one digest page (keys are at most 64 bytes).
const DIGEST_PAGE_MAX: u32 = 10_000;

fn digest(host: &dyn ReplicaHost, req: &DigestRequest) -> Result<Vec<WireDigest>, WireError> {
    let r = host.replica(req.partition).ok_or_else(|| no_replica(host, req.partition, u64::MAX))?;
    let after = req.after.as_deref().map(decode_key).transpose()?;
    let page = r.digest_after(after.as_ref(), req.max.min(DIGEST_PAGE_MAX) as usize, req.deep)?;
    Ok(page
        .into_iter()
        .map(|d| {
            let (state, expiry_ms) = match d.state {
                strata_engine::DigestState::Live { expiry_ms } => (1, expiry_ms),
                strata_engine::DigestState::Deleted => (2, 0),
                strata_engine::DigestState::Damaged => (3, 0),
            };
            WireDigest { key: d.key.as_bytes().to_vec(), state, expiry_ms, data_crc: d.data_crc }
        })
        .collect())
}

fn fetch(host: &dyn ReplicaHost, req: &FetchRequest) -> Result<(Vec<Fetched>, Vec<Bytes>), WireError> {
    let r = host.replica(req.partition).ok_or_else(|| no_replica(host, req.partition, u64::MAX))?;
    let mut states = Vec::with_capacity(req.keys.len());
    let mut data = Vec::new();
    for k in &req.keys {
        let key = decode_key(k)?;
        match r.get_for_replication(&key) {
            Ok(rec) => {
                states.push(Fetched::Live(wire_record(&rec)));
                data.push(rec.data);
            }
            Err(strata_engine::EngineError::Deleted) => states.push(Fetched::Deleted),
            Err(strata_engine::EngineError::NotFound) => states.push(Fetched::Missing),
            Err(strata_engine::EngineError::Damaged { .. }) => states.push(Fetched::Damaged),
            Err(e) => return Err(e.into()),
        }
    }
    Ok((states, data))
}

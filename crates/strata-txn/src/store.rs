//! What a participant keeps on an engine replica of its row, and how it
//! reads it back: chunk versions and blob records (engine records of
//! kind `ChunkVersion`, one version per commit sequence, every version
//! kept), and the transaction records (kind `TxnRecord`): one intent per
//! transaction and hop while it is held here, one decision per
//! transaction on its decider's row.

use crate::error::TxnError;
use crate::model::{ChunkData, Decision, Guid, Hop, Intent, Op, TxnId, decode};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use strata_engine::{KeyState, Replica, WriteOp};
use strata_format::PutProps;
use strata_types::{Key, KeyKind};

/// The chunk index a blob's record is kept under.
const BLOB_RECORD: u64 = u64::MAX;

/// A blob's record at one version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRecord {
    /// Size in bytes.
    pub size: u64,
    /// Chunk size.
    pub chunk_bytes: u64,
    /// The transaction that wrote this version.
    pub txn: TxnId,
}

/// A chunk at one version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRecord {
    /// The transaction that wrote this version.
    pub txn: TxnId,
    /// The chunk's bytes.
    pub data: Vec<u8>,
}

fn versioned(kind: KeyKind, body: &[u8], version: u64) -> Key {
    Key::versioned(kind, body, version).expect("transaction key bodies are at most 26 bytes")
}

/// The key of version `seq` of chunk `index` of `guid`.
pub fn chunk_key(guid: &Guid, index: u64, seq: u64) -> Key {
    let mut body = [0u8; 24];
    body[..16].copy_from_slice(guid);
    body[16..].copy_from_slice(&index.to_be_bytes());
    versioned(KeyKind::ChunkVersion, &body, seq)
}

/// The key of version `seq` of `guid`'s blob record.
pub fn blob_key(guid: &Guid, seq: u64) -> Key {
    chunk_key(guid, BLOB_RECORD, seq)
}

/// The key of a transaction's intent on one hop of this row.
pub fn intent_key(txn: &TxnId, hop: &Hop) -> Key {
    let mut body = [0u8; 18];
    body[0] = b'I';
    body[1..17].copy_from_slice(&txn.0);
    body[17] = u8::from(hop.chunks);
    versioned(KeyKind::TxnRecord, &body, 1)
}

/// The key of a transaction's decision on its decider's row.
pub fn decision_key(txn: &TxnId) -> Key {
    let mut body = [0u8; 17];
    body[0] = b'D';
    body[1..].copy_from_slice(&txn.0);
    versioned(KeyKind::TxnRecord, &body, 1)
}

/// A put of `data` under `key`.
pub fn put(key: Key, data: Vec<u8>) -> WriteOp {
    WriteOp::Put { key, props: PutProps::default(), data: Bytes::from(data) }
}

fn newest_at(replica: &Replica, key: &Key) -> Result<Option<(u64, Bytes)>, TxnError> {
    let Some(rec) = replica.floor(key)? else { return Ok(None) };
    let v = rec.key.version().ok_or_else(|| TxnError::Corrupt(format!("key {} has no version", rec.key)))?;
    Ok(Some((v, rec.data)))
}

/// The newest version of a chunk at or below `as_of` (`u64::MAX`: the newest).
pub fn chunk_as_of(replica: &Replica, guid: &Guid, index: u64, as_of: u64) -> Result<Option<(u64, ChunkRecord)>, TxnError> {
    newest_at(replica, &chunk_key(guid, index, as_of))?.map(|(v, b)| Ok((v, decode(&b)?))).transpose()
}

/// The newest version of a blob's record at or below `as_of`.
pub fn blob_as_of(replica: &Replica, guid: &Guid, as_of: u64) -> Result<Option<(u64, BlobRecord)>, TxnError> {
    newest_at(replica, &blob_key(guid, as_of))?.map(|(v, b)| Ok((v, decode(&b)?))).transpose()
}

/// The decision recorded for `txn` on this row, if any.
pub fn decision(replica: &Replica, txn: &TxnId) -> Result<Option<Decision>, TxnError> {
    newest_at(replica, &decision_key(txn))?.map(|(_, b)| decode(&b)).transpose()
}

/// Every intent held on this replica (read when a node becomes the row's
/// primary, or first serves it).
pub fn intents(replica: &Replica) -> Result<Vec<Intent>, TxnError> {
    let mut out = Vec::new();
    for (key, state) in replica.keys()? {
        if key.kind() != KeyKind::TxnRecord || !matches!(state, KeyState::Live { .. }) || key.versioned_body().and_then(|b| b.first()) != Some(&b'I') {
            continue;
        }
        match replica.get(&key) {
            Ok(rec) => out.push(decode(&rec.data)?),
            Err(strata_engine::EngineError::NotFound | strata_engine::EngineError::Deleted) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// One chunk as of a blob version, from this replica of its row.
pub fn read_chunk(replica: &Replica, guid: &Guid, index: u64, as_of: u64) -> Result<ChunkData, TxnError> {
    Ok(match chunk_as_of(replica, guid, index, as_of)? {
        Some((version, r)) => ChunkData { index, version, data: r.data },
        None => ChunkData { index, version: 0, data: Vec::new() },
    })
}

/// Applies a chunk's operations to its bytes.
pub fn apply(base: &mut Vec<u8>, ops: &[Op], chunk_bytes: u64) -> Result<(), TxnError> {
    for op in ops {
        let (offset, len) = match op {
            Op::Put { offset, data } => (*offset, data.len() as u64),
            Op::Add { offset, .. } => (*offset, 8),
            Op::Grow { .. } => return Err(TxnError::Invalid("a grow applies to a blob record, not a chunk".into())),
        };
        let end = offset
            .checked_add(len)
            .filter(|e| *e <= chunk_bytes)
            .ok_or_else(|| TxnError::Invalid(format!("{len} bytes at {offset} overrun a chunk of {chunk_bytes}")))?;
        let (o, e) = (offset as usize, end as usize);
        if base.len() < e {
            base.resize(e, 0);
        }
        match op {
            Op::Put { data, .. } => base[o..e].copy_from_slice(data),
            Op::Add { delta, .. } => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&base[o..e]);
                let v = i64::from_le_bytes(b).wrapping_add(*delta);
                base[o..e].copy_from_slice(&v.to_le_bytes());
            }
            Op::Grow { .. } => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_apply_in_order_and_refuse_to_overrun_the_chunk() {
        let mut b = Vec::new();
        apply(&mut b, &[Op::Put { offset: 2, data: vec![1, 2] }, Op::Add { offset: 8, delta: 5 }, Op::Add { offset: 8, delta: -7 }], 16).unwrap();
        assert_eq!(&b[..4], &[0, 0, 1, 2]);
        assert_eq!(i64::from_le_bytes(b[8..16].try_into().unwrap()), -2);
        assert!(apply(&mut b, &[Op::Add { offset: 12, delta: 1 }], 16).unwrap_err().to_string().contains("overrun"));
    }

    #[test]
    fn keys_of_a_blob_sort_by_chunk_then_version_and_records_apart() {
        let g = [7u8; 16];
        assert!(chunk_key(&g, 1, 9) < chunk_key(&g, 2, 1));
        assert!(chunk_key(&g, 2, 1) < chunk_key(&g, 2, 3));
        assert!(chunk_key(&g, 5, 1) < blob_key(&g, 1));
        let t = TxnId([1; 16]);
        assert_ne!(intent_key(&t, &Hop { chunks: true, row: 1 }), intent_key(&t, &Hop { chunks: false, row: 1 }));
        assert_ne!(intent_key(&t, &Hop { chunks: true, row: 1 }), decision_key(&t));
    }
}

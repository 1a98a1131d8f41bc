//! A tractserver's part, on one engine replica of a row: each tract write
//! is a new version of the tract (a versioned record of kind
//! [`KeyKind::Tract`], whose retention keeps only the newest), a read
//! returns the newest version.

use crate::error::TractError;
use crate::guid::Guid;
use bytes::Bytes;
use strata_engine::{EngineError, Replica, WriteOp};
use strata_format::PutProps;
use strata_types::{Key, KeyKind};

/// The engine key of version `version` of tract `tract` of incarnation
/// `incarnation` of `guid`: the body is the GUID, the incarnation and the
/// tract index, big-endian (so a blob's tracts sort together and in
/// order). The metadata tract is incarnation 0.
pub fn tract_key(guid: &Guid, incarnation: u32, tract: u64, version: u64) -> Key {
    let mut body = [0u8; 28];
    body[..16].copy_from_slice(&guid.0);
    body[16..20].copy_from_slice(&incarnation.to_be_bytes());
    body[20..].copy_from_slice(&tract.to_be_bytes());
    Key::versioned(KeyKind::Tract, &body, version).expect("a 28-byte body fits a versioned key")
}

/// Writes version `version` of a tract (durable when it returns); the
/// newest version the replica then holds, which is `version` unless a
/// newer write got there first. Writing a version the replica holds
/// already (a retried write) is no error.
pub async fn write(replica: &Replica, guid: &Guid, incarnation: u32, tract: u64, version: u64, data: Bytes) -> Result<u64, TractError> {
    let key = tract_key(guid, incarnation, tract, version);
    match replica.submit(WriteOp::Put { key: key.clone(), props: PutProps::default(), data }).await {
        Ok(_) | Err(EngineError::AlreadyExists) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(replica.versions(&key)?.last().copied().unwrap_or(version).max(version))
}

/// The newest version of a tract and its bytes; `None` if it was never
/// written here.
pub fn read(replica: &Replica, guid: &Guid, incarnation: u32, tract: u64) -> Result<Option<(u64, Bytes)>, TractError> {
    let Some(rec) = replica.newest(&tract_key(guid, incarnation, tract, 0))? else { return Ok(None) };
    let version = rec.key.version().ok_or_else(|| TractError::Invalid(format!("stored tract key {} carries no version", rec.key)))?;
    Ok(Some((version, rec.data)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn replica(dir: &std::path::Path) -> Arc<Replica> {
        let store = strata_engine::Store::open(dir, strata_engine::EngineConfig::default(), Arc::new(strata_types::SystemClock)).unwrap();
        store.create_replica(7).unwrap()
    }

    #[tokio::test]
    async fn the_newest_version_wins_whatever_the_order_of_arrival() {
        let dir = tempfile::tempdir().unwrap();
        let r = replica(dir.path());
        let g = Guid([1; 16]);
        assert!(read(&r, &g, 1, 0).unwrap().is_none());
        assert_eq!(write(&r, &g, 1, 0, 20, Bytes::from_static(b"twenty")).await.unwrap(), 20);
        // An older version arriving late does not replace it.
        assert_eq!(write(&r, &g, 1, 0, 10, Bytes::from_static(b"ten")).await.unwrap(), 20);
        assert_eq!(read(&r, &g, 1, 0).unwrap().unwrap(), (20, Bytes::from_static(b"twenty")));
        // A retried write of a version held is no error.
        assert_eq!(write(&r, &g, 1, 0, 20, Bytes::from_static(b"twenty")).await.unwrap(), 20);
        assert_eq!(write(&r, &g, 1, 0, 30, Bytes::from_static(b"thirty")).await.unwrap(), 30);
        assert_eq!(read(&r, &g, 1, 0).unwrap().unwrap(), (30, Bytes::from_static(b"thirty")));
        // Other tracts and blobs are apart.
        assert!(read(&r, &g, 1, 1).unwrap().is_none());
        assert!(read(&r, &Guid([2; 16]), 1, 0).unwrap().is_none());
        write(&r, &g, 0, crate::meta::METADATA_TRACT, 1, Bytes::from_static(b"meta")).await.unwrap();
        assert_eq!(read(&r, &g, 1, 0).unwrap().unwrap().0, 30);
        // Another incarnation of the blob does not see this one's tracts.
        assert!(read(&r, &g, 2, 0).unwrap().is_none());
    }
}

//! A blob's metadata tract (FDS §2.3's "tract -1"): the blob's state,
//! size in tracts, replication level and incarnation, kept as the newest
//! version of tract [`METADATA_TRACT`] of the blob (incarnation 0), and
//! the operations on it, which the row's primary serializes.
//!
//! The incarnation tells a blob created again under the same GUID from
//! the one deleted before it: data tracts are keyed by (GUID, incarnation,
//! tract), so the old blob's tracts are never read as the new one's (they
//! are orphans, for the scrubber).

use crate::error::TractError;
use serde::{Deserialize, Serialize};

pub use strata_cluster::METADATA_TRACT;

/// `SBLM` read as a little-endian u32.
const MAGIC: u32 = u32::from_le_bytes(*b"SBLM");
/// Layout version of the stored form.
const VERSION: u8 = 1;
/// Bytes of the stored form.
pub const META_BYTES: usize = 4 + 1 + 1 + 1 + 1 + 8 + 8 + 4 + 4;

/// What the metadata tract says of a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobMeta {
    /// Deleted (a tombstone kept so a later create takes a new incarnation).
    pub deleted: bool,
    /// Replicas of each tract: the first this many disks of each row.
    pub replication: u8,
    /// Size in tracts.
    pub size_tracts: u64,
    /// When the incarnation was created, ms since the epoch.
    pub created_ms: u64,
    /// Incarnation: 1 for the first create of the GUID, one more per create
    /// after a delete.
    pub incarnation: u32,
}

impl BlobMeta {
    /// The stored form: magic, layout version, deleted flag, replication,
    /// a reserved byte, size in tracts, creation time, incarnation (all
    /// little-endian), CRC32C of the bytes before it.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(META_BYTES);
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.push(VERSION);
        b.push(u8::from(self.deleted));
        b.push(self.replication);
        b.push(0);
        b.extend_from_slice(&self.size_tracts.to_le_bytes());
        b.extend_from_slice(&self.created_ms.to_le_bytes());
        b.extend_from_slice(&self.incarnation.to_le_bytes());
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes the stored form, checking its checksum and version.
    pub fn decode(b: &[u8]) -> Result<Self, TractError> {
        let bad = |why: &str| TractError::Invalid(format!("blob metadata: {why}"));
        if b.len() != META_BYTES {
            return Err(bad(&format!("{} bytes, want {META_BYTES}", b.len())));
        }
        let (body, crc) = b.split_at(META_BYTES - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().map_err(|_| bad("checksum"))?) {
            return Err(bad("checksum mismatch"));
        }
        let u64_at = |o: usize| body[o..o + 8].try_into().map(u64::from_le_bytes).map_err(|_| bad("truncated"));
        if u32::from_le_bytes([body[0], body[1], body[2], body[3]]) != MAGIC {
            return Err(bad("bad magic"));
        }
        if body[4] != VERSION {
            return Err(bad(&format!("layout version {} (this build reads {VERSION})", body[4])));
        }
        Ok(Self {
            deleted: body[5] != 0,
            replication: body[6],
            size_tracts: u64_at(8)?,
            created_ms: u64_at(16)?,
            incarnation: u32::from_le_bytes([body[24], body[25], body[26], body[27]]),
        })
    }
}

/// An operation on a blob's metadata (FDS Fig. 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MetaOp {
    /// Creates the blob with size 0; refused if it exists.
    Create {
        /// Replicas of each tract (at most the table's).
        replication: u8,
    },
    /// What the metadata says; refused if the blob does not exist.
    Open,
    /// Deletes the blob; its tracts become orphans.
    Delete,
    /// Grows the blob by `tracts` and returns the new size: the caller may
    /// write tracts `[size - tracts, size)` without meeting another
    /// extender (GFS's atomic append).
    Extend {
        /// Tracts to add.
        tracts: u64,
    },
}

/// Most tracts one blob may have.
pub const BLOB_TRACTS_MAX: u64 = 1 << 40;

/// Applies `op` to the metadata held (`None`: the GUID was never
/// created): the metadata to write (`None`: nothing changes) and the
/// metadata to answer with.
pub fn apply(held: Option<BlobMeta>, op: MetaOp, max_replication: u8, now_ms: u64, guid: &str) -> Result<(Option<BlobMeta>, BlobMeta), TractError> {
    let live = held.filter(|m| !m.deleted);
    let missing = || TractError::NoSuchBlob(guid.to_string());
    match op {
        MetaOp::Create { replication } => {
            if live.is_some() {
                return Err(TractError::BlobExists(guid.to_string()));
            }
            if replication == 0 || replication > max_replication {
                return Err(TractError::Invalid(format!("replication {replication}: the table has rows of {max_replication} disks")));
            }
            let incarnation = held.map_or(1, |m| m.incarnation + 1);
            let m = BlobMeta { deleted: false, replication, size_tracts: 0, created_ms: now_ms, incarnation };
            Ok((Some(m), m))
        }
        MetaOp::Open => live.map(|m| (None, m)).ok_or_else(missing),
        MetaOp::Delete => {
            let m = live.ok_or_else(missing)?;
            let gone = BlobMeta { deleted: true, ..m };
            Ok((Some(gone), gone))
        }
        MetaOp::Extend { tracts } => {
            let m = live.ok_or_else(missing)?;
            let size = m.size_tracts.checked_add(tracts).filter(|s| *s <= BLOB_TRACTS_MAX).ok_or_else(|| {
                TractError::Invalid(format!("a blob has at most {BLOB_TRACTS_MAX} tracts; it has {} and {tracts} more were asked", m.size_tracts))
            })?;
            if tracts == 0 {
                return Ok((None, m));
            }
            let grown = BlobMeta { size_tracts: size, ..m };
            Ok((Some(grown), grown))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_form_round_trips_and_damage_is_named() {
        let m = BlobMeta { deleted: false, replication: 3, size_tracts: 77, created_ms: 123, incarnation: 4 };
        let b = m.encode();
        assert_eq!(b.len(), META_BYTES);
        assert_eq!(BlobMeta::decode(&b).unwrap(), m);
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x10;
            assert!(BlobMeta::decode(&bad).is_err(), "a flipped byte {i} went unnoticed");
        }
        assert!(BlobMeta::decode(&b[..10]).unwrap_err().to_string().contains("bytes"));
    }

    #[test]
    fn operations_follow_the_blob_s_life() {
        let g = "g";
        assert!(matches!(apply(None, MetaOp::Open, 3, 1, g), Err(TractError::NoSuchBlob(_))));
        assert!(matches!(apply(None, MetaOp::Create { replication: 4 }, 3, 1, g), Err(TractError::Invalid(_))));
        let (w, m) = apply(None, MetaOp::Create { replication: 2 }, 3, 10, g).unwrap();
        assert_eq!((w, m.size_tracts, m.incarnation), (Some(m), 0, 1));
        assert!(matches!(apply(Some(m), MetaOp::Create { replication: 2 }, 3, 11, g), Err(TractError::BlobExists(_))));
        let (_, a) = apply(Some(m), MetaOp::Extend { tracts: 5 }, 3, 12, g).unwrap();
        let (_, b) = apply(Some(a), MetaOp::Extend { tracts: 3 }, 3, 13, g).unwrap();
        assert_eq!((a.size_tracts, b.size_tracts), (5, 8));
        assert_eq!(apply(Some(b), MetaOp::Extend { tracts: 0 }, 3, 13, g).unwrap(), (None, b));
        assert!(apply(Some(b), MetaOp::Extend { tracts: u64::MAX }, 3, 13, g).is_err());
        assert_eq!(apply(Some(b), MetaOp::Open, 3, 14, g).unwrap(), (None, b));
        let (Some(d), _) = apply(Some(b), MetaOp::Delete, 3, 15, g).unwrap() else { panic!("a delete writes") };
        assert!(d.deleted);
        assert!(matches!(apply(Some(d), MetaOp::Open, 3, 16, g), Err(TractError::NoSuchBlob(_))));
        assert!(matches!(apply(Some(d), MetaOp::Delete, 3, 16, g), Err(TractError::NoSuchBlob(_))));
        assert!(matches!(apply(Some(d), MetaOp::Extend { tracts: 1 }, 3, 16, g), Err(TractError::NoSuchBlob(_))));
        // Created again: a new incarnation, empty.
        let (_, again) = apply(Some(d), MetaOp::Create { replication: 3 }, 3, 17, g).unwrap();
        assert_eq!((again.incarnation, again.size_tracts, again.deleted), (2, 0, false));
    }
}

//! What the scrubber needs of a replica: its keys a page at a time, each
//! key's record read back from the disk and checked, and a digest of each
//! key (state and data checksum) to compare with other replicas.

use crate::error::{EngineError, Result};
use crate::index::KeyState;
use crate::replica::Replica;
use strata_types::Key;

/// What a replica holds of one key, for comparing replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DigestState {
    /// A put, with its effective expiry (0 = never).
    Live {
        /// Effective expiry.
        expiry_ms: u64,
    },
    /// A tombstone.
    Deleted,
    /// This replica's copy is quarantined.
    Damaged,
}

/// One key's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDigest {
    /// The key.
    pub key: Key,
    /// Its state here.
    pub state: DigestState,
    /// CRC32C of the blob's data, when asked for (a deep digest) and live.
    pub data_crc: Option<u32>,
}

/// The outcome of verifying one key's record against the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verified {
    /// The record read back whole: its data's CRC32C and the bytes read.
    Whole {
        /// CRC32C of the data.
        data_crc: u32,
        /// Record bytes read.
        bytes: u64,
    },
    /// The record failed its checks and is now quarantined.
    Quarantined,
    /// Nothing to verify: the key is not live here (missing, deleted, or
    /// already quarantined).
    NotLive,
}

impl Replica {
    /// Up to `max` keys after `after` (from the first when `None`), in key
    /// order, with their states: a page of the index for the scrubber.
    pub fn keys_after(&self, after: Option<&Key>, max: usize) -> Vec<(Key, KeyState)> {
        let st = self.shared.read_state();
        let mut keys: Vec<Key> = st.memtable.keys_after(after, max);
        for f in &st.index_files {
            keys.extend(f.keys_after(after, max));
        }
        keys.sort();
        keys.dedup();
        keys.truncate(max);
        keys.into_iter()
            .map(|k| {
                let s = st.lookup(&k);
                (k, s)
            })
            .collect()
    }

    /// Reads `key`'s put record back from the disk (past the page cache
    /// where the filesystem allows, so bit rot under cached pages shows)
    /// and checks it whole; a record that fails is quarantined.
    pub fn verify_key(&self, key: &Key) -> Result<Verified> {
        let sh = &self.shared;
        let (put, seg) = {
            let st = sh.read_state();
            match st.lookup(key) {
                KeyState::Live { put, .. } if !sh.damage.has_key(key) => {
                    let seg = st.segments.get(&put.segment_id).cloned().ok_or(EngineError::Closed)?;
                    (put, seg)
                }
                _ => return Ok(Verified::NotLive),
            }
        };
        let e = &put.entry;
        let direct = seg.read_direct(&sh.direct, e.record_offset, e.record_len as u64).transpose()?;
        let buf: &[u8] = match &direct {
            Some(b) => b,
            None => seg.slice(e.record_offset, e.record_len as u64),
        };
        let checked = strata_format::record::decode(buf, true).map_err(|err| seg.corrupt(e.record_offset, err)).and_then(|rec| {
            if rec.key != *key || rec.kind != strata_format::RecordKind::Put {
                let detail = "key or kind differs from index".into();
                return Err(seg.corrupt(e.record_offset, strata_format::FormatError::Invalid { what: "indexed record", detail }));
            }
            let data = &buf[rec.data_offset as usize..rec.data_offset as usize + rec.data_len as usize];
            Ok(strata_format::crc::crc32c(data))
        });
        match checked {
            Ok(data_crc) => Ok(Verified::Whole { data_crc, bytes: e.record_len as u64 }),
            Err(err) => {
                sh.quarantine(&seg, e.record_offset, e.record_len as u64, Some(key), &err);
                Ok(Verified::Quarantined)
            }
        }
    }

    /// Digests of up to `max` keys after `after`; with `deep`, each live
    /// key's record is verified and its data checksummed (reading it).
    pub fn digest_after(&self, after: Option<&Key>, max: usize, deep: bool) -> Result<Vec<KeyDigest>> {
        let mut out = Vec::new();
        for (key, state) in self.keys_after(after, max) {
            let damaged = self.shared.damage.has_key(&key);
            let (state, data_crc) = match state {
                KeyState::Deleted => (DigestState::Deleted, None),
                _ if damaged => (DigestState::Damaged, None),
                KeyState::Missing => continue,
                KeyState::Live { expiry_ms, .. } if deep => match self.verify_key(&key)? {
                    Verified::Whole { data_crc, .. } => (DigestState::Live { expiry_ms }, Some(data_crc)),
                    Verified::Quarantined | Verified::NotLive => (DigestState::Damaged, None),
                },
                KeyState::Live { expiry_ms, .. } => (DigestState::Live { expiry_ms }, None),
            };
            out.push(KeyDigest { key, state, data_crc });
        }
        Ok(out)
    }
}

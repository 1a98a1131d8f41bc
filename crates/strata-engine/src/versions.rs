//! Versioned records: FDS tracts (overwritten in place, the newest version
//! wins), Týr's MVCC chunk versions (read "as of" a version) and the values
//! of Spock's read-write stores (concurrent versions kept side by side).
//!
//! A version is an ordinary engine key ([`Key::versioned`]: the body, then
//! the version big-endian), written once like a blob, deleted with its own
//! tombstone, copied by replication like any key a replica lacks. What this
//! module adds are the lookups across the versions of one body: they sort
//! together in the memtable and in every index file, and index files of
//! format version 2 hold each version group in their Bloom filter.
//!
//! What compaction keeps is the key kind's retention rule ([`Retention`]);
//! tombstones of versioned keys are reclaimed once the caller says every
//! replica has them ([`Replica::set_reclaim_horizon`]). Blob keys are
//! untouched by all of this.

use crate::error::{EngineError, Result};
use crate::index::{KeyState, fold};
use crate::replica::{BlobRecord, Replica, State};
use std::sync::atomic::Ordering;
use strata_format::index::IndexEntry;
use strata_types::{Key, KeyKind};

/// What compaction keeps of the versions of one body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Blobs: a put lives until deleted or expired; tombstones stay.
    Immutable,
    /// Only the newest live version; older ones go without a tombstone
    /// (FDS tracts: an overwrite supersedes what it overwrote).
    NewestOnly,
    /// Every live version until it is deleted (Týr chunk versions, read-write
    /// store siblings: the layer above deletes what it no longer needs).
    AllLive,
}

impl Retention {
    /// The rule of a key kind.
    pub fn of(kind: KeyKind) -> Self {
        match kind {
            KeyKind::Blob => Self::Immutable,
            KeyKind::Tract => Self::NewestOnly,
            KeyKind::ChunkVersion | KeyKind::KvValue | KeyKind::TxnRecord => Self::AllLive,
        }
    }
}

fn not_versioned(key: &Key) -> EngineError {
    EngineError::Invalid(format!("key {key} is not a versioned key"))
}

/// Entries grouped by key, in key order.
type KeyEntries = Vec<(Key, Vec<IndexEntry>)>;

impl State {
    /// Every version of `key`'s body from version `lo` to `hi` (both
    /// included) that the index holds, with its state ([`State::lookup`]
    /// of each), oldest first. One search of the memtable and of each
    /// index file whose Bloom filter holds the group, where a listing and
    /// then a lookup per version would search each source again per version.
    pub(crate) fn version_states_between(&self, key: &Key, lo: u64, hi: u64) -> Vec<(Key, KeyState)> {
        let (Some(lo), Some(hi)) = (key.with_version(lo), key.with_version(hi)) else { return Vec::new() };
        // Each source's entries by key, newest source first (as `lookup` reads them).
        let mut sources: Vec<(u64, KeyEntries)> = Vec::with_capacity(1 + self.index_files.len());
        let mem: Vec<_> = self.memtable.between(&lo, &hi).map(|(k, ls)| (k.clone(), ls.iter().map(|l| l.entry.clone()).collect())).collect();
        sources.push((self.active().id, mem));
        for f in self.index_files.iter().rev() {
            let found = f.version_entries_between(&lo, &hi);
            if !found.is_empty() {
                sources.push((f.segment_id(), found));
            }
        }
        let mut keys: Vec<Key> = sources.iter().flat_map(|(_, s)| s.iter().map(|(k, _)| k.clone())).collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .map(|k| {
                let mut ttl = None;
                let state = sources
                    .iter()
                    .find_map(|(segment_id, s)| {
                        let i = s.binary_search_by(|(sk, _)| sk.cmp(&k)).ok()?;
                        fold(&mut ttl, *segment_id, s[i].1.iter().cloned())
                    })
                    .unwrap_or(KeyState::Missing);
                (k, state)
            })
            .collect()
    }
}

impl Replica {
    /// Every version of `key`'s body the index knows (`key` may name any
    /// of them), with its state, oldest first.
    pub fn version_states(&self, key: &Key) -> Result<Vec<(u64, KeyState)>> {
        self.states_between(key, 0, u64::MAX)
    }

    fn states_between(&self, key: &Key, lo: u64, hi: u64) -> Result<Vec<(u64, KeyState)>> {
        key.version().ok_or_else(|| not_versioned(key))?;
        let sh = &self.shared;
        // Unsure while damage may hide one of the versions (or a delete of one).
        if sh.damage.blocks_versions(key, lo, hi) {
            return Err(sh.damaged(key));
        }
        let st = sh.read_state();
        Ok(st.version_states_between(key, lo, hi).into_iter().filter_map(|(k, s)| Some((k.version()?, s))).collect())
    }

    /// The live versions of `key`'s body (neither deleted nor expired), oldest first.
    pub fn versions(&self, key: &Key) -> Result<Vec<u64>> {
        let now = self.shared.clock.now_ms();
        Ok(self
            .version_states(key)?
            .into_iter()
            .filter_map(|(v, s)| match s {
                KeyState::Live { expiry_ms, .. } if expiry_ms == 0 || expiry_ms > now => Some(v),
                _ => None,
            })
            .collect())
    }

    /// Every live version of `key`'s body with its data, oldest first: one
    /// index lookup per version (the state and the place read together).
    pub fn live_versions(&self, key: &Key) -> Result<Vec<BlobRecord>> {
        key.version().ok_or_else(|| not_versioned(key))?;
        let sh = &self.shared;
        if sh.damage.blocks_versions(key, 0, u64::MAX) {
            return Err(sh.damaged(key));
        }
        let now = sh.clock.now_ms();
        let found: Vec<_> = {
            let st = sh.read_state();
            st.version_states_between(key, 0, u64::MAX)
                .into_iter()
                .filter_map(|(k, state)| match state {
                    KeyState::Live { put, expiry_ms } if expiry_ms == 0 || expiry_ms > now => {
                        let seg = st.segments.get(&put.segment_id)?.clone();
                        Some((k, put, expiry_ms, seg))
                    }
                    _ => None,
                })
                .collect()
        };
        found.into_iter().map(|(k, put, expiry_ms, seg)| self.read_located(&k, &put, expiry_ms, &seg, true)).collect()
    }

    /// The newest live version of `key`'s body, with its data; `None` when
    /// no version is live.
    pub fn newest(&self, key: &Key) -> Result<Option<BlobRecord>> {
        self.newest_between(key, u64::MAX)
    }

    /// The newest live version of `key`'s body at or below `key`'s own
    /// version (a read "as of" that version); `None` when there is none.
    pub fn floor(&self, key: &Key) -> Result<Option<BlobRecord>> {
        let v = key.version().ok_or_else(|| not_versioned(key))?;
        self.newest_between(key, v)
    }

    fn newest_between(&self, key: &Key, hi: u64) -> Result<Option<BlobRecord>> {
        let now = self.shared.clock.now_ms();
        for (v, state) in self.states_between(key, 0, hi)?.into_iter().rev() {
            if !matches!(state, KeyState::Live { expiry_ms, .. } if expiry_ms == 0 || expiry_ms > now) {
                continue;
            }
            let k = key.with_version(v).ok_or_else(|| not_versioned(key))?;
            match self.get(&k) {
                Ok(r) => return Ok(Some(r)),
                // Deleted or expired since the listing: the next older one
                // is the answer. Damage is an error, never an older version.
                Err(EngineError::NotFound | EngineError::Deleted | EngineError::Expired) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Promises that every replica of this partition holds every record of
    /// this one with a sequence number up to `lsn`: tombstones of versioned
    /// keys up to it may then be reclaimed by compaction (no replica can
    /// bring their put back). Only ever raised; not persisted (after a
    /// restart nothing is reclaimed until the caller says it again).
    pub fn set_reclaim_horizon(&self, lsn: u64) {
        self.shared.reclaim_horizon.fetch_max(lsn, Ordering::AcqRel);
    }

    /// The horizon last set.
    pub fn reclaim_horizon(&self) -> u64 {
        self.shared.reclaim_horizon.load(Ordering::Acquire)
    }
}

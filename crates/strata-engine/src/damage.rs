//! Quarantined damage: the ranges of a replica's log that failed their
//! checks (found by recovery, by a read, or by compaction), kept in
//! `damage.list` so the knowledge survives once an index file covers the
//! range and recovery no longer scans it.
//!
//! A key named by a damaged range answers [`crate::EngineError::Damaged`]
//! (never "not found", never wrong bytes) until a later put or delete of
//! the key repairs it: a copy from a peer replica ([`crate::WriteOp::ReplicaPut`]),
//! or a delete. A range whose header was too damaged to name its key makes
//! the whole replica unsure of absence: a key it does not hold answers
//! `Damaged` too, since it may have been in that range.

use crate::error::{EngineError, Result, io};
use std::collections::HashMap;
use std::path::Path;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use strata_format::DamagedRange;
use strata_types::{Key, PartitionId};

/// Name of a replica's damage list.
pub const DAMAGE_FILE: &str = "damage.list";

/// The damaged ranges of one replica.
#[derive(Debug, Default)]
pub(crate) struct DamageSet {
    ranges: Vec<DamagedRange>,
    /// Ranges per key named.
    keys: HashMap<Key, usize>,
    /// Ranges whose key is unknown.
    unknown: usize,
}

impl DamageSet {
    /// Loads `damage.list` from `dir` (none: empty). A list that fails its
    /// own checks cannot say which keys were damaged, so it becomes one
    /// range of unknown keys: the replica then never claims a key absent.
    pub fn load(dir: &Path, partition: PartitionId, now_ms: u64) -> Result<Self> {
        let path = dir.join(DAMAGE_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(io(format!("read {}", path.display()))(e)),
        };
        let ranges = strata_format::damage::decode(&bytes).unwrap_or_else(|e| {
            tracing::error!(partition, file = %path.display(), error = %e, "the damage list is itself damaged; this replica no longer answers \"not found\" for sure");
            vec![DamagedRange { segment_id: 0, generation: 0, offset: 0, len: 0, detected_ms: now_ms, key: None }]
        });
        let mut set = Self::default();
        for r in ranges {
            set.insert(r);
        }
        Ok(set)
    }

    /// Adds a range unless the same one is listed; true if it was new.
    pub fn insert(&mut self, r: DamagedRange) -> bool {
        if self.ranges.iter().any(|x| (x.segment_id, x.generation, x.offset, &x.key) == (r.segment_id, r.generation, r.offset, &r.key)) {
            return false;
        }
        match &r.key {
            Some(k) => *self.keys.entry(k.clone()).or_default() += 1,
            None => self.unknown += 1,
        }
        self.ranges.push(r);
        true
    }

    /// Drops every range naming `key`; true if there was one.
    pub fn clear_key(&mut self, key: &Key) -> bool {
        if self.keys.remove(key).is_none() {
            return false;
        }
        self.ranges.retain(|r| r.key.as_ref() != Some(key));
        true
    }

    /// Whether `key` lies in a damaged range.
    pub fn has_key(&self, key: &Key) -> bool {
        self.keys.contains_key(key)
    }

    /// Whether some damaged range's key is unknown.
    pub fn has_unknown(&self) -> bool {
        self.unknown > 0
    }

    /// Every damaged range.
    pub fn ranges(&self) -> &[DamagedRange] {
        &self.ranges
    }

    /// True when nothing is damaged.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Replaces `damage.list` with this set, durably.
    pub fn persist(&self, dir: &Path) -> Result<()> {
        if self.ranges.len() > strata_format::damage::DAMAGE_ENTRIES_MAX {
            return Err(EngineError::Invalid(format!("{} damaged ranges, more than a damage list holds", self.ranges.len())));
        }
        crate::fsutil::write_atomic(&dir.join(DAMAGE_FILE), &strata_format::damage::encode(&self.ranges))
    }
}

/// A replica's damage set with a lock-free "anything damaged?" check, so
/// the read and write paths of an undamaged replica pay one atomic load.
#[derive(Debug, Default)]
pub(crate) struct Damage {
    set: RwLock<DamageSet>,
    any: AtomicBool,
}

impl Damage {
    pub fn new(set: DamageSet) -> Self {
        let any = AtomicBool::new(!set.is_empty());
        Self { set: RwLock::new(set), any }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, DamageSet> {
        self.set.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether reads of `key` must answer `Damaged`: the key lies in a
    /// damaged range, or (when `missing`) some range's key is unknown.
    pub fn blocks(&self, key: &Key, missing: bool) -> bool {
        if !self.any.load(Ordering::Acquire) {
            return false;
        }
        let s = self.read();
        s.has_key(key) || (missing && s.has_unknown())
    }

    /// Whether `key` itself lies in a damaged range.
    pub fn has_key(&self, key: &Key) -> bool {
        self.any.load(Ordering::Acquire) && self.read().has_key(key)
    }

    /// Records new ranges and persists the list if any was new. Returns how many were new.
    pub fn add(&self, dir: &Path, ranges: impl IntoIterator<Item = DamagedRange>) -> Result<usize> {
        let mut s = self.set.write().unwrap_or_else(|p| p.into_inner());
        let added = ranges.into_iter().filter(|r| s.insert(r.clone())).count();
        if added > 0 {
            self.any.store(true, Ordering::Release);
            s.persist(dir)?;
        }
        Ok(added)
    }

    /// Forgets the damage of `keys` (repaired or deleted) and persists the
    /// list if anything changed. Returns how many keys were cleared.
    pub fn clear(&self, dir: &Path, keys: &[Key]) -> Result<usize> {
        if !self.any.load(Ordering::Acquire) || keys.is_empty() {
            return Ok(0);
        }
        let mut s = self.set.write().unwrap_or_else(|p| p.into_inner());
        let cleared = keys.iter().filter(|k| s.clear_key(k)).count();
        if cleared > 0 {
            self.any.store(!s.is_empty(), Ordering::Release);
            s.persist(dir)?;
        }
        Ok(cleared)
    }

    /// A copy of every damaged range.
    pub fn ranges(&self) -> Vec<DamagedRange> {
        if !self.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        self.read().ranges().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_types::KeyKind;

    fn range(offset: u64, key: Option<&[u8]>) -> DamagedRange {
        DamagedRange { segment_id: 0, generation: 0, offset, len: 10, detected_ms: 1, key: key.map(|k| Key::new(KeyKind::Blob, k).unwrap()) }
    }

    #[test]
    fn keys_block_until_cleared_and_the_list_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let d = Damage::new(DamageSet::load(dir.path(), 1, 0).unwrap());
        let k = Key::new(KeyKind::Blob, b"a").unwrap();
        let other = Key::new(KeyKind::Blob, b"b").unwrap();
        assert!(!d.blocks(&k, true));
        assert_eq!(d.add(dir.path(), [range(64, Some(b"a")), range(64, Some(b"a"))]).unwrap(), 1);
        assert!(d.blocks(&k, false) && !d.blocks(&other, true));
        let d = Damage::new(DamageSet::load(dir.path(), 1, 0).unwrap());
        assert!(d.blocks(&k, false), "reloaded from damage.list");
        d.add(dir.path(), [range(200, None)]).unwrap();
        assert!(d.blocks(&other, true), "an unknown key makes absence unsure");
        assert!(!d.blocks(&other, false), "but a key held elsewhere in the log is fine");
        assert_eq!(d.clear(dir.path(), std::slice::from_ref(&k)).unwrap(), 1);
        assert!(!d.has_key(&k));
        assert_eq!(d.ranges().len(), 1);
    }

    #[test]
    fn a_damaged_list_means_unknown_damage() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(DAMAGE_FILE), b"garbage that fails its crc").unwrap();
        let d = Damage::new(DamageSet::load(dir.path(), 1, 0).unwrap());
        assert!(d.blocks(&Key::new(KeyKind::Blob, b"x").unwrap(), true));
    }
}

//! Quarantined damage: the ranges of a replica's log that failed their
//! checks (found by recovery, by a read, or by compaction), kept in
//! `damage.list` so the knowledge survives once an index file covers the
//! range and recovery no longer scans it.
//!
//! A key named by a damaged range answers [`crate::EngineError::Damaged`]
//! (never "not found", never wrong bytes) until a later put or delete of
//! the key repairs it: a copy from a peer replica ([`crate::WriteOp::ReplicaPut`]),
//! or a delete. Any damage makes the replica unsure of absence: a key it
//! does not hold answers `Damaged` too, since its put may be what was
//! damaged. A range that may hold a delete or TTL update of another key
//! (its header is damaged, or it is small enough to be one) also makes
//! every key put before it answer `Damaged`: serving it could bring back a
//! deleted blob. A scrub that finds the replica agreeing with a peer
//! settles those ranges.

use crate::error::{EngineError, Result, io};
use std::collections::HashSet;
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
    /// The keys the ranges name (derived from `ranges`).
    keys: HashSet<Key>,
    /// The highest `after_lsn` of a range that may hide other keys: a put
    /// with this lsn or a lower one may have been deleted in it.
    hiding_after_lsn: Option<u64>,
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
            vec![DamagedRange { segment_id: 0, generation: 0, offset: 0, len: 0, detected_ms: now_ms, key: None, after_lsn: u64::MAX, hides_others: true }]
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
        self.index(&r);
        self.ranges.push(r);
        true
    }

    /// Adds what one range contributes to the derived fields.
    fn index(&mut self, r: &DamagedRange) {
        if let Some(k) = &r.key {
            self.keys.insert(k.clone());
        }
        if r.hides_others {
            self.hiding_after_lsn = self.hiding_after_lsn.max(Some(r.after_lsn));
        }
    }

    /// Derives `keys` and `hiding_after_lsn` again after ranges changed.
    fn reindex(&mut self) {
        self.keys.clear();
        self.hiding_after_lsn = None;
        for r in std::mem::take(&mut self.ranges) {
            self.index(&r);
            self.ranges.push(r);
        }
    }

    /// `key` was repaired or deleted: ranges naming it stop naming it, and
    /// those that cannot hide other keys go. True if one named it.
    pub fn clear_key(&mut self, key: &Key) -> bool {
        if !self.keys.contains(key) {
            return false;
        }
        self.ranges.retain_mut(|r| {
            if r.key.as_ref() != Some(key) {
                return true;
            }
            r.key = None;
            r.hides_others
        });
        self.reindex();
        true
    }

    /// A scrub found the replica agreeing with a peer since `before_ms`:
    /// what the ranges found before then may hide is settled. Those that
    /// name no key go; those that do keep blocking only their key. True if
    /// anything changed.
    pub fn settle(&mut self, before_ms: u64) -> bool {
        let n = self.ranges.len();
        let mut changed = false;
        self.ranges.retain_mut(|r| {
            if r.detected_ms >= before_ms {
                return true;
            }
            changed |= r.hides_others;
            r.hides_others = false;
            r.key.is_some()
        });
        self.reindex();
        changed || self.ranges.len() != n
    }

    /// Whether `key` lies in a damaged range.
    pub fn has_key(&self, key: &Key) -> bool {
        self.keys.contains(key)
    }

    /// Whether a read of `key` must answer `Damaged`: its own record is
    /// damaged; or it is missing here while anything is damaged; or it was
    /// put (with `put_lsn`) before a range that may hide its delete.
    pub fn blocks(&self, key: &Key, put_lsn: Option<u64>) -> bool {
        self.has_key(key)
            || match put_lsn {
                None => !self.ranges.is_empty(),
                Some(lsn) => self.hiding_after_lsn.is_some_and(|after| lsn <= after),
            }
    }

    /// Whether a lookup across versions `lo..=hi` of `key`'s body must
    /// answer `Damaged`: a range names one of those versions, names no key,
    /// or may hide other keys' records.
    pub fn blocks_versions(&self, key: &Key, lo: u64, hi: u64) -> bool {
        let group = key.version_group();
        self.ranges
            .iter()
            .any(|r| r.hides_others || r.key.as_ref().is_none_or(|k| k.version_group() == group && k.version().is_some_and(|v| (lo..=hi).contains(&v))))
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
    /// The list in memory is newer than `damage.list` (a write failed, a
    /// full disk): nothing that would make recovery stop rescanning a
    /// damaged range (an index flush) or remove a damaged record
    /// (compaction) may happen until it is written.
    dirty: AtomicBool,
}

impl Damage {
    pub fn new(set: DamageSet) -> Self {
        let any = AtomicBool::new(!set.is_empty());
        Self { set: RwLock::new(set), any, dirty: AtomicBool::new(false) }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, DamageSet> {
        self.set.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether reads of `key` must answer `Damaged` ([`DamageSet::blocks`]):
    /// `put_lsn` is the lsn of its live put here, `None` if it has none.
    pub fn blocks(&self, key: &Key, put_lsn: Option<u64>) -> bool {
        self.any.load(Ordering::Acquire) && self.read().blocks(key, put_lsn)
    }

    /// Whether `key` itself lies in a damaged range.
    pub fn has_key(&self, key: &Key) -> bool {
        self.any.load(Ordering::Acquire) && self.read().has_key(key)
    }

    /// [`DamageSet::blocks_versions`].
    pub fn blocks_versions(&self, key: &Key, lo: u64, hi: u64) -> bool {
        self.any.load(Ordering::Acquire) && self.read().blocks_versions(key, lo, hi)
    }

    /// Records new ranges and persists the list if any was new. Returns how many were new.
    pub fn add(&self, dir: &Path, ranges: impl IntoIterator<Item = DamagedRange>) -> Result<usize> {
        let mut s = self.set.write().unwrap_or_else(|p| p.into_inner());
        let added = ranges.into_iter().filter(|r| s.insert(r.clone())).count();
        if added > 0 {
            self.any.store(true, Ordering::Release);
            self.dirty.store(true, Ordering::Release);
            s.persist(dir)?;
            self.dirty.store(false, Ordering::Release);
        }
        Ok(added)
    }

    /// Marks the list in memory as not yet written (recovery could not).
    pub fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// Writes the list if an earlier write failed; `Err` while it cannot.
    pub fn persist_if_dirty(&self, dir: &Path) -> Result<()> {
        if !self.dirty.load(Ordering::Acquire) {
            return Ok(());
        }
        let s = self.set.write().unwrap_or_else(|p| p.into_inner());
        s.persist(dir)?;
        self.dirty.store(false, Ordering::Release);
        Ok(())
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

    /// Settles what the ranges found before `before_ms` may hide
    /// ([`DamageSet::settle`]); persists the list if anything changed.
    pub fn settle(&self, dir: &Path, before_ms: u64) -> Result<bool> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(false);
        }
        let mut s = self.set.write().unwrap_or_else(|p| p.into_inner());
        let settled = s.settle(before_ms);
        if settled {
            self.any.store(!s.is_empty(), Ordering::Release);
            s.persist(dir)?;
        }
        Ok(settled)
    }

    /// How many ranges there are, and how many name no key.
    pub fn counts(&self) -> (usize, usize) {
        if !self.any.load(Ordering::Acquire) {
            return (0, 0);
        }
        let s = self.read();
        (s.ranges.len(), s.ranges.iter().filter(|r| r.key.is_none()).count())
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

    fn range(offset: u64, key: Option<&[u8]>, after_lsn: u64, hides_others: bool) -> DamagedRange {
        DamagedRange {
            segment_id: 0,
            generation: 0,
            offset,
            len: 10,
            detected_ms: 1,
            key: key.map(|k| Key::new(KeyKind::Blob, k).unwrap()),
            after_lsn,
            hides_others,
        }
    }

    #[test]
    fn keys_block_until_cleared_and_the_list_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let d = Damage::new(DamageSet::load(dir.path(), 1, 0).unwrap());
        let k = Key::new(KeyKind::Blob, b"a").unwrap();
        let other = Key::new(KeyKind::Blob, b"b").unwrap();
        assert!(!d.blocks(&k, None));
        assert_eq!(d.add(dir.path(), [range(64, Some(b"a"), 5, false), range(64, Some(b"a"), 5, false)]).unwrap(), 1);
        assert!(d.blocks(&k, Some(9)) && !d.blocks(&other, Some(1)));
        assert!(d.blocks(&other, None), "any damage makes absence unsure");
        let d = Damage::new(DamageSet::load(dir.path(), 1, 0).unwrap());
        assert!(d.blocks(&k, Some(9)), "reloaded from damage.list");
        d.add(dir.path(), [range(200, None, 40, true)]).unwrap();
        assert!(d.blocks(&other, Some(40)), "a put before a range that may hide its delete");
        assert!(!d.blocks(&other, Some(41)), "a put after it is fine");
        assert_eq!(d.clear(dir.path(), std::slice::from_ref(&k)).unwrap(), 1);
        assert!(!d.has_key(&k));
        assert_eq!(d.ranges().len(), 1);
        assert!(d.settle(dir.path(), 2).unwrap());
        assert!(!d.blocks(&other, Some(1)) && !d.blocks(&other, None));
    }

    /// A repaired key's range that may hide other keys stays, nameless.
    #[test]
    fn clearing_a_key_keeps_what_its_range_may_hide() {
        let dir = tempfile::tempdir().unwrap();
        let d = Damage::new(DamageSet::load(dir.path(), 1, 0).unwrap());
        let k = Key::new(KeyKind::Blob, b"a").unwrap();
        let other = Key::new(KeyKind::Blob, b"b").unwrap();
        d.add(dir.path(), [range(64, Some(b"a"), 10, true)]).unwrap();
        d.clear(dir.path(), std::slice::from_ref(&k)).unwrap();
        assert!(!d.has_key(&k));
        assert!(d.blocks(&other, Some(3)));
    }

    #[test]
    fn a_damaged_list_means_unknown_damage() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(DAMAGE_FILE), b"garbage that fails its crc").unwrap();
        let d = Damage::new(DamageSet::load(dir.path(), 1, 0).unwrap());
        assert!(d.blocks(&Key::new(KeyKind::Blob, b"x").unwrap(), None));
        assert!(d.blocks(&Key::new(KeyKind::Blob, b"x").unwrap(), Some(u64::MAX - 1)));
    }
}

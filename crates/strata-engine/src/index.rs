//! The per-replica index (Ambry Fig. 6): the newest entries in an in-memory
//! memtable, older ones in immutable sorted index files with Bloom filters.
//! Lookups go newest to oldest, so a tombstone is seen before its put.

use crate::error::{EngineError, Result, io};
use crate::fsutil;
use crate::segment::index_name;
use memmap2::Mmap;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use strata_format::index::{self as fmt, IndexFileHeader};
use strata_format::{Bloom, EntryKind, IndexEntry};
use strata_types::Key;

/// An index entry with the segment its record lives in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Segment id.
    pub segment_id: u64,
    /// The entry.
    pub entry: IndexEntry,
}

/// What the index knows of a key, newest first, collapsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyState {
    /// No record of the key.
    Missing,
    /// A tombstone hides the key; the put may or may not still be stored.
    Deleted,
    /// The put, and the effective expiry after any TTL updates.
    Live {
        /// Where the put record is.
        put: Located,
        /// Effective expiry (0 = never).
        expiry_ms: u64,
    },
}

/// The in-memory index segment: entries of the active log segment since the
/// last persisted index file. Keyed by the key alone (its entries, at most
/// one per kind, in kind order, beside it), so a lookup borrows the key's
/// bytes instead of building a (key, kind) bound.
#[derive(Debug, Default)]
pub struct Memtable {
    map: BTreeMap<Key, Vec<Located>>,
    entries: usize,
}

impl Memtable {
    /// Adds or replaces the entry of its (key, kind).
    pub fn insert(&mut self, l: Located) {
        let kinds = self.map.entry(l.entry.key.clone()).or_default();
        let kind = l.entry.kind as u8;
        match kinds.binary_search_by_key(&kind, |e| e.entry.kind as u8) {
            Ok(i) => kinds[i] = l,
            Err(i) => {
                kinds.insert(i, l);
                self.entries += 1;
            }
        }
    }
    /// Up to `max` distinct keys after `after` (all keys when `None`), in order.
    pub fn keys_after(&self, after: Option<&Key>, max: usize) -> Vec<Key> {
        use std::ops::Bound;
        let from = match after {
            Some(a) => Bound::Excluded(a.as_bytes()),
            None => Bound::Unbounded,
        };
        self.map.range::<[u8], _>((from, Bound::Unbounded)).take(max).map(|(k, _)| k.clone()).collect()
    }

    /// The keys from `lo` to `hi` (both included) with their entries, in
    /// order: one descent of the tree (the upper bound is checked while
    /// walking, not searched for).
    pub fn between(&self, lo: &Key, hi: &Key) -> impl Iterator<Item = (&Key, &Vec<Located>)> {
        use std::ops::Bound;
        let h = hi.as_bytes();
        self.map.range::<[u8], _>((Bound::Included(lo.as_bytes()), Bound::Unbounded)).take_while(move |(k, _)| k.as_bytes() <= h)
    }

    /// Entries of `key`, at most one per kind.
    pub fn find(&self, key: &Key) -> impl Iterator<Item = &Located> {
        self.map.get(key.as_bytes()).into_iter().flatten()
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Entries sorted by (key, kind).
    pub fn sorted_entries(&self) -> Vec<IndexEntry> {
        self.iter().map(|l| l.entry.clone()).collect()
    }
    /// Iterates all entries, by (key, kind).
    pub fn iter(&self) -> impl Iterator<Item = &Located> {
        self.map.values().flatten()
    }
    /// Removes everything.
    pub fn clear(&mut self) {
        self.map.clear();
        self.entries = 0;
    }
}

/// A persisted, immutable, mmap'd index file.
#[derive(Debug)]
pub struct IndexFile {
    /// Path of the file.
    pub path: PathBuf,
    /// Decoded header.
    pub header: IndexFileHeader,
    map: Mmap,
    bloom: Bloom,
}

impl IndexFile {
    /// Opens and fully verifies an index file (both CRCs).
    pub fn open(path: &Path) -> Result<Self> {
        let f = File::open(path).map_err(io(format!("open {}", path.display())))?;
        // SAFETY: index files are immutable once renamed into place.
        let map = unsafe { Mmap::map(&f) }.map_err(io(format!("mmap {}", path.display())))?;
        let corrupt = |source| EngineError::Corrupt { file: path.display().to_string(), offset: 0, source };
        let header = fmt::decode_header(&map).map_err(corrupt)?;
        let bloom = fmt::decode_bloom(&map, &header).map_err(corrupt)?;
        Ok(Self { path: path.to_owned(), header, map, bloom })
    }

    /// Writes a new index file atomically and opens it. Callers guarantee the
    /// log bytes it covers are already durable (the durability order).
    pub fn write(dir: &Path, segment_id: u64, generation: u32, start: u64, end: u64, entries: &[IndexEntry]) -> Result<Self> {
        let path = dir.join(index_name(segment_id, generation, start));
        fsutil::write_atomic(&path, &fmt::encode_file(segment_id, generation, start, end, entries))?;
        Self::open(&path)
    }

    /// Segment covered.
    pub fn segment_id(&self) -> u64 {
        self.header.segment_id
    }

    /// Entries of `key` in this file, at most one per kind.
    pub fn find(&self, key: &Key) -> Vec<IndexEntry> {
        let k = key.as_bytes();
        if !self.bloom.may_contain(k) {
            return Vec::new();
        }
        let n = self.header.entry_count as usize;
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if fmt::entry_key(&self.map, &self.header, mid) < k { lo = mid + 1 } else { hi = mid }
        }
        let mut out = Vec::new();
        while lo < n && fmt::entry_key(&self.map, &self.header, lo) == k {
            // Verified by CRC at open; a decode failure here is a programming error.
            if let Ok(e) = fmt::decode_entry(&self.map, &self.header, lo) {
                out.push(e);
            }
            lo += 1;
        }
        out
    }

    /// The entries of every version of `lo`'s version group from `lo` to
    /// `hi` (both of that group), grouped by key, in key order: one search
    /// for all of them. The Bloom filter holds each group (format version
    /// 2), so files without the group cost no search; version 1 files hold
    /// no versioned keys.
    pub fn version_entries_between(&self, lo: &Key, hi: &Key) -> Vec<(Key, Vec<IndexEntry>)> {
        let Some(group) = lo.version_group() else { return Vec::new() };
        if self.header.version < 2 || !self.bloom.may_contain(group) {
            return Vec::new();
        }
        let n = self.header.entry_count as usize;
        let (l, h) = (lo.as_bytes(), hi.as_bytes());
        let (mut i, mut hi_i) = (0, n);
        while i < hi_i {
            let mid = (i + hi_i) / 2;
            if fmt::entry_key(&self.map, &self.header, mid) < l { i = mid + 1 } else { hi_i = mid }
        }
        let mut out: Vec<(Key, Vec<IndexEntry>)> = Vec::new();
        while i < n && fmt::entry_key(&self.map, &self.header, i) <= h {
            // Verified by CRC at open; a decode failure here is a programming error.
            if let Ok(e) = fmt::decode_entry(&self.map, &self.header, i) {
                match out.last_mut() {
                    Some((k, entries)) if *k == e.key => entries.push(e),
                    _ => out.push((e.key.clone(), vec![e])),
                }
            }
            i += 1;
        }
        out
    }

    /// Up to `max` distinct keys after `after` (all keys when `None`), in order.
    pub fn keys_after(&self, after: Option<&Key>, max: usize) -> Vec<Key> {
        let n = self.header.entry_count as usize;
        let mut i = match after {
            None => 0,
            Some(a) => {
                let a = a.as_bytes();
                let (mut lo, mut hi) = (0, n);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if fmt::entry_key(&self.map, &self.header, mid) <= a { lo = mid + 1 } else { hi = mid }
                }
                lo
            }
        };
        let mut out: Vec<Key> = Vec::new();
        while i < n && out.len() < max {
            let k = fmt::entry_key(&self.map, &self.header, i);
            if out.last().is_none_or(|l| l.as_bytes() != k)
                && let Some(key) = Key::from_encoded(k)
            {
                out.push(key);
            }
            i += 1;
        }
        out
    }

    /// All entries in key order.
    pub fn entries(&self) -> Result<Vec<IndexEntry>> {
        (0..self.header.entry_count as usize)
            .map(|i| {
                fmt::decode_entry(&self.map, &self.header, i).map_err(|source| EngineError::Corrupt {
                    file: self.path.display().to_string(),
                    offset: self.header.entry_pos(i) as u64,
                    source,
                })
            })
            .collect()
    }
}

/// Folds the entries of one key found in one source into the running state
/// (`ttl`: the newest TTL update seen so far, as (expiry, lsn)). Returns
/// `Some` once the answer is final. A TTL update applies only to a put it
/// follows: one left over from a put that compaction dropped must not
/// change a later put of the same id.
///
/// A put newer than a tombstone in the same source wins over it: only a
/// deleted *version* is ever written again (a blob id never is).
pub(crate) fn fold(ttl: &mut Option<(u64, u64)>, segment_id: u64, entries: impl Iterator<Item = IndexEntry>) -> Option<KeyState> {
    let mut put: Option<IndexEntry> = None;
    let mut deleted_at = None;
    for e in entries {
        match e.kind {
            EntryKind::Delete => deleted_at = deleted_at.max(Some(e.lsn)),
            EntryKind::TtlUpdate => {
                if ttl.is_none_or(|(_, lsn)| lsn < e.lsn) {
                    *ttl = Some((e.expiry_ms, e.lsn));
                }
            }
            EntryKind::Put => put = Some(e),
        }
    }
    if let Some(d) = deleted_at
        && put.as_ref().is_none_or(|p| p.lsn < d)
    {
        return Some(KeyState::Deleted);
    }
    put.map(|e| {
        let expiry_ms = match *ttl {
            Some((expiry, lsn)) if lsn > e.lsn => expiry,
            _ => e.expiry_ms,
        };
        KeyState::Live { put: Located { segment_id, entry: e }, expiry_ms }
    })
}

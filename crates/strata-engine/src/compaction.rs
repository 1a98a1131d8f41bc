//! Compaction: rewrites a sealed segment without the puts of deleted and
//! expired blobs, the versions its key kind's retention rule drops and the
//! tombstones of versioned keys every replica has (`versions.rs`), while
//! the replica keeps serving reads and writes.
//!
//! Each segment is rewritten as a new generation, and the phases are recorded
//! in `compaction.log` with an fsync each, so recovery knows what to do:
//! `Begin` without `Commit` → delete the new generation (roll back);
//! `Commit` without `Done` → delete the old generation (roll forward).
//! The new generation's log and index are durable before `Commit` is written.

use crate::error::{Result, io};
use crate::fsutil;
use crate::index::{IndexFile, KeyState, Memtable};
use crate::replica::{Replica, located};
use crate::segment::{Segment, log_name, parse_name};
use crate::versions::Retention;
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use strata_format::headers::{COMPACTION_RECORD_BYTES, SEGMENT_HEADER_BYTES};
use strata_format::{CompactionPhase, CompactionRecord, EntryKind, IndexEntry, SegmentHeader};

/// Name of the compaction phase log.
pub const COMPACTION_LOG: &str = "compaction.log";

/// What a compaction pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CompactionReport {
    /// Segments rewritten.
    pub segments_compacted: usize,
    /// Bytes of log reclaimed.
    pub bytes_reclaimed: u64,
    /// Segments worth rewriting that were left because the disk had no room
    /// for their live records (they are tried again on the next pass).
    pub segments_skipped_for_space: usize,
}

/// Room kept beyond a rewrite's own bytes (its header, index and the
/// directory's growth), so compaction never fills a disk to the last block.
const REWRITE_SLACK_BYTES: u64 = 256 << 10;

/// An active segment at least this garbage is sealed early so compaction
/// can reclaim it ("mostly garbage").
const SEAL_EARLY_FRACTION: f64 = 0.5;

fn log_phase(dir: &Path, rec: CompactionRecord) -> Result<()> {
    let path = dir.join(COMPACTION_LOG);
    let ctx = || format!("append {}", path.display());
    let mut f = OpenOptions::new().create(true).append(true).open(&path).map_err(io(ctx()))?;
    f.write_all(&rec.encode()).map_err(io(ctx()))?;
    f.sync_data().map_err(io(ctx()))?;
    fsutil::fsync_dir(dir)
}

fn remove_generation(dir: &Path, segment_id: u64, generation: u32) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(io(format!("list {}", dir.display())))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some((id, g, _)) = parse_name(&name)
            && id == segment_id
            && g == generation
        {
            std::fs::remove_file(entry.path()).map_err(io(format!("remove {name}")))?;
        }
    }
    fsutil::fsync_dir(dir)
}

/// Bytes of a segment of `len` that compaction would reclaim, keeping `keep`.
fn reclaimable(keep: &[IndexEntry], len: u64) -> u64 {
    len.saturating_sub(SEGMENT_HEADER_BYTES as u64 + keep.iter().map(|e| e.record_len as u64).sum::<u64>())
}

/// Finishes or rolls back an interrupted compaction, then clears the log.
pub fn recover(dir: &Path) -> Result<()> {
    let path = dir.join(COMPACTION_LOG);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(format!("read {}", path.display()))(e)),
    };
    let mut last: BTreeMap<(u64, u32, u32), CompactionPhase> = BTreeMap::new();
    // A torn final record is simply not there: its phase was never reached.
    for chunk in bytes.chunks_exact(COMPACTION_RECORD_BYTES) {
        match CompactionRecord::decode(chunk) {
            Ok(r) => {
                last.insert((r.segment_id, r.from_generation, r.to_generation), r.phase);
            }
            Err(_) => break,
        }
    }
    for ((seg, from, to), phase) in last {
        match phase {
            CompactionPhase::Begin => {
                tracing::warn!(segment = seg, generation = to, "rolling back an interrupted compaction");
                remove_generation(dir, seg, to)?;
            }
            CompactionPhase::Commit => {
                tracing::warn!(segment = seg, generation = from, "finishing an interrupted compaction");
                remove_generation(dir, seg, from)?;
            }
            CompactionPhase::Done => {}
        }
    }
    std::fs::remove_file(&path).map_err(io(format!("remove {}", path.display())))?;
    fsutil::fsync_dir(dir)
}

impl Replica {
    /// Compacts sealed segments whose reclaimable fraction reaches the
    /// configured threshold, or every sealed segment with anything to reclaim
    /// when `force` is set.
    pub fn compact(&self, force: bool) -> Result<CompactionReport> {
        self.compact_until(force, None)
    }

    /// Like [`Replica::compact`], but stops dead right after writing
    /// `stop_after` for the first segment, as a crash there would. For
    /// recovery tests; the replica must be reopened afterwards.
    #[doc(hidden)]
    pub fn compact_until(&self, force: bool, stop_after: Option<CompactionPhase>) -> Result<CompactionReport> {
        let sh = &self.shared;
        let _guard = sh.compaction.lock().unwrap_or_else(|p| p.into_inner());
        let mut report = CompactionReport::default();
        // Damage known only in memory must reach the disk before any record
        // can be left behind.
        if let Err(e) = sh.damage.persist_if_dirty(&sh.dir) {
            tracing::warn!(partition = sh.partition, error = %e, "compaction waits: the damage list cannot be written");
            return Ok(report);
        }
        // The active segment is sealed early when it is mostly garbage, when
        // forced, or when the replica is short of space: on a small disk
        // with large segments nothing else would ever be reclaimed.
        let active = sh.read_state().active().clone();
        let (keep, active_len) = self.live_entries(&active)?;
        let active_reclaim = reclaimable(&keep, active_len);
        let short_of_space = self.status().read_only.is_some_and(|r| r != crate::ReadOnlyReason::IoFailed);
        if active_reclaim > 0 && (force || short_of_space || active_reclaim as f64 >= SEAL_EARLY_FRACTION * active_len as f64) {
            match self.seal_active() {
                Ok(()) => {
                    tracing::info!(partition = sh.partition, segment = active.id, reclaimable = active_reclaim, "sealed the active segment early to compact it")
                }
                Err(e) => tracing::warn!(partition = sh.partition, error = %e, "could not seal the active segment for compaction"),
            }
        }
        let mut sealed: Vec<(Arc<Segment>, Vec<IndexEntry>, u64, u64)> = Vec::new();
        let segments: Vec<Arc<Segment>> = {
            let unresolved = sh.compaction_unresolved.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let st = sh.read_state();
            let active = st.active().id;
            st.segments.values().filter(|s| s.id != active && !unresolved.contains(&s.id)).cloned().collect()
        };
        for seg in segments {
            let (keep, seg_len) = self.live_entries(&seg)?;
            let reclaim = reclaimable(&keep, seg_len);
            let fraction = reclaim as f64 / seg_len.max(1) as f64;
            if reclaim == 0 || (!force && !short_of_space && fraction < sh.config.compaction_reclaim_fraction) {
                continue;
            }
            sealed.push((seg, keep, seg_len, reclaim));
        }
        // Most garbage first: on a nearly full disk, what frees the most
        // for the least writing goes first.
        sealed.sort_by(|a, b| (b.3 as f64 / b.2.max(1) as f64).total_cmp(&(a.3 as f64 / a.2.max(1) as f64)));
        for (seg, keep, seg_len, reclaim) in sealed {
            // The rewrite needs room for what it keeps; the disk reserve that
            // puts may not touch is what it uses on a full disk.
            // What it keeps is the segment less what it reclaims.
            let needed = seg_len - reclaim + keep.len() as u64 * 128 + REWRITE_SLACK_BYTES;
            let free = crate::fsutil::free_bytes(&sh.dir)?;
            if free < needed {
                tracing::warn!(partition = sh.partition, segment = seg.id, needed, free, "not enough free space to compact this segment now");
                report.segments_skipped_for_space += 1;
                continue;
            }
            match self.rewrite(&seg, keep, seg_len, stop_after) {
                Ok(true) => return Ok(report),
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(partition = sh.partition, segment = seg.id, error = %e, "compacting a segment failed; it keeps its old generation");
                    report.segments_skipped_for_space +=
                        usize::from(matches!(&e, crate::EngineError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC)));
                    continue;
                }
            }
            report.segments_compacted += 1;
            report.bytes_reclaimed += reclaim;
            sh.stats.segments_compacted.fetch_add(1, Ordering::Relaxed);
            sh.stats.bytes_reclaimed.fetch_add(reclaim, Ordering::Relaxed);
        }
        if report.segments_compacted > 0 {
            // Space came back: puts may go on (the space monitor would
            // notice within a second; this is at once).
            sh.compute_read_only(true);
        }
        if report.segments_compacted > 0 {
            let p = sh.dir.join(COMPACTION_LOG);
            std::fs::remove_file(&p).map_err(io(format!("remove {}", p.display())))?;
            fsutil::fsync_dir(&sh.dir)?;
        }
        Ok(report)
    }

    /// The entries of a segment still worth keeping, in log order, and the
    /// segment's length (for the active segment, its memtable's entries too).
    fn live_entries(&self, seg: &Segment) -> Result<(Vec<IndexEntry>, u64)> {
        let sh = &self.shared;
        let now = sh.clock.now_ms();
        let grace = sh.config.compaction_expiry_grace_ms;
        // Hold the state lock only to snapshot the file list and for each
        // lookup: the writer needs it to publish batches. A verdict that goes
        // stale meanwhile is harmless: what is dead never comes back.
        let (files, memtable, active_len) = {
            let st = sh.read_state();
            let files: Vec<Arc<IndexFile>> = st.index_files.iter().filter(|f| f.segment_id() == seg.id).cloned().collect();
            let is_active = st.active().id == seg.id;
            let memtable: Vec<IndexEntry> = if is_active { st.memtable.iter().map(|l| l.entry.clone()).collect() } else { Vec::new() };
            (files, memtable, is_active.then_some(st.active_len))
        };
        let mut newest: BTreeMap<(strata_types::Key, u8), IndexEntry> = BTreeMap::new();
        let mut seg_len = active_len.unwrap_or(SEGMENT_HEADER_BYTES as u64);
        for e in memtable {
            newest.insert((e.key.clone(), e.kind as u8), e);
        }
        for f in &files {
            seg_len = seg_len.max(f.header.log_end);
            for e in f.entries()? {
                let k = (e.key.clone(), e.kind as u8);
                if newest.get(&k).is_none_or(|old: &IndexEntry| old.lsn < e.lsn) {
                    newest.insert(k, e);
                }
            }
        }
        let horizon = sh.reclaim_horizon.load(Ordering::Acquire);
        // Per version group: its newest live version (NewestOnly retention).
        let mut newest_live: BTreeMap<Vec<u8>, Option<u64>> = BTreeMap::new();
        let mut keep: Vec<IndexEntry> = newest
            .into_values()
            .filter(|e| match (e.kind, sh.read_state().lookup(&e.key)) {
                // A versioned key's tombstone goes once every replica has
                // it and no put of its key is left in another segment.
                (EntryKind::Delete, _) if e.key.kind().is_versioned() => e.lsn > horizon || self.put_elsewhere(&e.key, seg.id),
                (EntryKind::Delete, _) => true,
                // A TTL update stays as long as its put does, expired or
                // not: the put may live in a segment this pass does not
                // rewrite (below the threshold, or a crash cuts the pass
                // short), and without the update it would come back
                // with the expiry it was put with.
                (EntryKind::TtlUpdate, KeyState::Live { .. }) => true,
                (EntryKind::Put, KeyState::Live { put, expiry_ms }) => {
                    let dead = expiry_ms != 0 && expiry_ms.saturating_add(grace) <= now;
                    let superseded = Retention::of(e.key.kind()) == Retention::NewestOnly
                        && e.key.version_group().is_some_and(|g| {
                            let newest = *newest_live.entry(g.to_vec()).or_insert_with(|| self.newest_live_version(&e.key, now));
                            newest.is_some_and(|n| Some(n) > e.key.version())
                        });
                    !dead && !superseded && put.segment_id == seg.id && put.entry.lsn == e.lsn
                }
                _ => false,
            })
            .collect();
        keep.sort_by_key(|e| e.record_offset);
        Ok((keep, seg_len))
    }

    /// Whether a put record of `key` is indexed in a segment other than `seg`.
    fn put_elsewhere(&self, key: &strata_types::Key, seg: u64) -> bool {
        let st = self.shared.read_state();
        let in_memtable = st.active().id != seg && st.memtable.find(key).any(|l| l.entry.kind == EntryKind::Put);
        in_memtable || st.index_files.iter().filter(|f| f.segment_id() != seg).any(|f| f.find(key).iter().any(|e| e.kind == EntryKind::Put))
    }

    /// The newest version of `key`'s body that is live at `now`.
    fn newest_live_version(&self, key: &strata_types::Key, now: u64) -> Option<u64> {
        let st = self.shared.read_state();
        st.version_states_between(key, 0, u64::MAX).into_iter().rev().find_map(|(k, state)| match state {
            KeyState::Live { expiry_ms, .. } if expiry_ms == 0 || expiry_ms > now => k.version(),
            _ => None,
        })
    }

    /// Returns true if it stopped at `stop_after`.
    fn rewrite(&self, seg: &Arc<Segment>, keep: Vec<IndexEntry>, seg_len: u64, stop_after: Option<CompactionPhase>) -> Result<bool> {
        let sh = &self.shared;
        let (from, to) = (seg.generation, seg.generation + 1);
        let rec = |phase| CompactionRecord { phase, segment_id: seg.id, from_generation: from, to_generation: to };
        log_phase(&sh.dir, rec(CompactionPhase::Begin))?;
        // Until `Commit` is written the new generation is scratch: a failure
        // (a full disk) removes it, as recovery would.
        let (index, new_seg, off) = match self.write_generation(seg, &keep, to) {
            Ok(done) => done,
            Err(e) => {
                if let Err(rm) = remove_generation(&sh.dir, seg.id, to) {
                    tracing::warn!(partition = sh.partition, segment = seg.id, error = %rm, "could not remove an unfinished compacted generation");
                }
                return Err(e);
            }
        };
        if stop_after == Some(CompactionPhase::Begin) {
            return Ok(true);
        }
        if let Err(e) = log_phase(&sh.dir, rec(CompactionPhase::Commit)) {
            // Whether `Commit` reached the disk is unknown: recovery decides
            // (roll forward or back). Until then neither generation may be
            // touched, so this segment is not compacted again.
            sh.compaction_unresolved.lock().unwrap_or_else(|p| p.into_inner()).insert(seg.id);
            return Err(e);
        }
        if stop_after == Some(CompactionPhase::Commit) {
            return Ok(true);
        }
        {
            let mut st = sh.write_state();
            st.index_files.retain(|f| f.segment_id() != seg.id);
            let pos = st.index_files.partition_point(|f| f.segment_id() < seg.id);
            st.index_files.insert(pos, Arc::new(index));
            st.segments.insert(seg.id, new_seg);
            st.used_bytes = st.used_bytes + off - seg_len;
        }
        // Readers still holding the old segment keep its mapping; unlinking
        // is safe. Past `Commit` nothing may undo the new generation: a
        // failure here leaves the old files, which recovery removes.
        if let Err(e) = remove_generation(&sh.dir, seg.id, from).and_then(|_| log_phase(&sh.dir, rec(CompactionPhase::Done))) {
            tracing::warn!(partition = sh.partition, segment = seg.id, error = %e, "compacted, but could not finish cleaning up; the next start does");
        }
        Ok(false)
    }

    /// Writes generation `to` of `seg` holding the records of `keep` (those
    /// that still check out), its index, and opens it.
    fn write_generation(&self, seg: &Arc<Segment>, keep: &[IndexEntry], to: u32) -> Result<(IndexFile, Arc<Segment>, u64)> {
        let sh = &self.shared;
        let path = sh.dir.join(log_name(seg.id, to));
        let header = SegmentHeader { partition: sh.partition, segment_id: seg.id, generation: to, incarnation: sh.meta.incarnation };
        let mut file = crate::writer::create_segment_file(&path, &header)?;
        let mut memtable = Memtable::default();
        let mut off = SEGMENT_HEADER_BYTES as u64;
        for e in keep {
            let bytes = seg.slice(e.record_offset, e.record_len as u64);
            // Copy only what still checks out: compaction must not launder
            // corruption. A record that fails is quarantined (its key then
            // answers "damaged" until repaired) and left behind.
            let decoded = match strata_format::record::decode(bytes, true) {
                Ok(d) => d,
                Err(source) => {
                    // Leaving it behind is safe only once the damage is on
                    // disk: otherwise a restart would forget it.
                    let cause = seg.corrupt(e.record_offset, source);
                    sh.quarantine_durably(seg, e.record_offset, e.record_len as u64, Some(&e.key), &cause).map_err(|_| cause)?;
                    continue;
                }
            };
            file.write_all(bytes).map_err(io(format!("write {}", path.display())))?;
            memtable.insert(located(seg.id, off, &decoded));
            off += bytes.len() as u64;
        }
        file.sync_all().map_err(io(format!("fsync {}", path.display())))?;
        let index = IndexFile::write(&sh.dir, seg.id, to, SEGMENT_HEADER_BYTES as u64, off, &memtable.sorted_entries())?;
        let new_seg = Arc::new(Segment::open(&path, seg.id, to, off)?);
        Ok((index, new_seg, off))
    }
}

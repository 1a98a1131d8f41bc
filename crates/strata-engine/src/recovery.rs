//! Opening a replica: finish or roll back an interrupted compaction, check
//! every index file, rebuild what is missing from the log, and cut a torn
//! tail off the active segment. The index is derivable, the log is the truth.

use crate::cache::{Recent, WriteCache};
use crate::compaction;
use crate::config::EngineConfig;
use crate::damage::{Damage, DamageSet};
use crate::error::{EngineError, Result, io};
use crate::fsutil;
use crate::index::KeyState;
use crate::index::{IndexFile, Memtable};
use crate::journal::{Journal, JournalEntry};
use crate::replica::{Replica, Shared, State, located};
use crate::segment::{Segment, log_name, parse_name};
use crate::writer::{LSN_FILE, LsnReserve, Writer, create_segment_file};
use std::collections::BTreeMap;
use std::fs::OpenOptions;

mod scan;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64};
use std::sync::{Arc, Mutex, RwLock, mpsc};
use strata_format::headers::SEGMENT_HEADER_BYTES;
use strata_format::{IndexEntry, ReplicaMeta, SegmentHeader};
use strata_types::{Clock, PartitionId};

/// Name of the replica metadata file.
pub const META_FILE: &str = "replica.meta";
/// Bound of the write queue in requests (bytes are bounded separately).
const QUEUE_REQUESTS_MAX: usize = 8192;

/// Creates a new, empty replica directory.
pub fn create(dir: &Path, partition: PartitionId, capacity_bytes: u64, clock: &dyn Clock) -> Result<()> {
    use rand::{RngCore, SeedableRng};
    std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
    let mut incarnation = [0u8; 16];
    rand::rngs::StdRng::from_os_rng().fill_bytes(&mut incarnation);
    let meta = ReplicaMeta { partition, incarnation, created_ms: clock.now_ms(), capacity_bytes };
    let header = SegmentHeader { partition, segment_id: 0, generation: 0, incarnation };
    create_segment_file(&dir.join(log_name(0, 0)), &header)?;
    // The meta file is written last: a directory without it is an unfinished creation.
    fsutil::write_atomic(&dir.join(META_FILE), &meta.encode())?;
    fsutil::fsync_dir(dir.parent().unwrap_or(dir))
}

/// Opens a replica, recovering as needed, and starts its writer thread.
pub(crate) fn open(dir: &Path, config: EngineConfig, clock: Arc<dyn Clock>, cache: Arc<WriteCache>) -> Result<Replica> {
    let meta_bytes = std::fs::read(dir.join(META_FILE)).map_err(io(format!("read {}/{META_FILE}", dir.display())))?;
    let meta = ReplicaMeta::decode(&meta_bytes).map_err(|source| EngineError::Corrupt { file: META_FILE.into(), offset: 0, source })?;
    compaction::recover(dir)?;

    let mut logs: BTreeMap<u64, u32> = BTreeMap::new();
    let mut idx: BTreeMap<(u64, u32, u64), std::path::PathBuf> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(io(format!("list {}", dir.display())))? {
        let entry = entry.map_err(io(format!("list {}", dir.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".tmp") {
            let _ = std::fs::remove_file(entry.path());
            continue;
        }
        match parse_name(&name) {
            Some((id, generation, None)) => {
                let g = logs.entry(id).or_insert(generation);
                *g = (*g).max(generation);
            }
            Some((id, generation, Some(start))) => {
                idx.insert((id, generation, start), entry.path());
            }
            None => {}
        }
    }
    if logs.is_empty() {
        return Err(EngineError::Corrupt {
            file: dir.display().to_string(),
            offset: 0,
            source: strata_format::FormatError::Invalid { what: "replica", detail: "no log segments".into() },
        });
    }
    // Index files of generations that are not current are leftovers.
    idx.retain(|(id, g, _), p| {
        let keep = logs.get(id) == Some(g);
        if !keep {
            let _ = std::fs::remove_file(p.as_path());
        }
        keep
    });

    let last_id = *logs.keys().next_back().expect("checked non-empty");
    // A segment whose header never became durable was a roll interrupted by
    // a crash: no record in it was ever acknowledged, because a new
    // segment's header is fsync'd before anything is written after it. Its
    // header is missing, cut short, or still all zeros (the file grew, the
    // header's block never reached the disk). With nothing after the header
    // it is removed; with bytes after it (a torn batch written past a
    // missing header) it is set aside as `.interrupted`, never parsed.
    if logs.len() > 1 {
        let p = dir.join(log_name(last_id, logs[&last_id]));
        let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        let mut head = vec![0u8; SEGMENT_HEADER_BYTES.min(len as usize)];
        if let Err(e) = std::fs::File::open(&p).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head)) {
            return Err(io(format!("read {}", p.display()))(e));
        }
        let never_written = head.iter().all(|b| *b == 0);
        if len <= SEGMENT_HEADER_BYTES as u64 && Segment::open(&p, last_id, logs[&last_id], SEGMENT_HEADER_BYTES as u64).is_err() {
            tracing::warn!(file = %p.display(), "removing a segment whose creation was interrupted");
            std::fs::remove_file(&p).map_err(io(format!("remove {}", p.display())))?;
            logs.remove(&last_id);
        } else if never_written {
            let aside = p.with_extension("log.interrupted");
            tracing::warn!(file = %p.display(), to = %aside.display(), "setting aside a segment whose header was never written");
            std::fs::rename(&p, &aside).map_err(io(format!("rename {}", p.display())))?;
            fsutil::fsync_dir(dir)?;
            logs.remove(&last_id);
        }
    }
    let last_id = *logs.keys().next_back().expect("checked non-empty");

    let stats = crate::replica::ReplicaStats::default();
    let mut damaged: Vec<strata_format::DamagedRange> = Vec::new();
    let mut damage = DamageSet::load(dir, meta.partition, clock.now_ms())?;
    let mut segments = BTreeMap::new();
    let mut index_files = Vec::new();
    let mut memtable = Memtable::default();
    let mut memtable_start = SEGMENT_HEADER_BYTES as u64;
    let mut active_len = SEGMENT_HEADER_BYTES as u64;
    let mut used_bytes = 0;
    let mut max_lsn = 0u64;
    let mut tail: Vec<JournalEntry> = Vec::new();
    for (&id, &generation) in &logs {
        let path = dir.join(log_name(id, generation));
        let is_last = id == last_id;
        let file_len = std::fs::metadata(&path).map_err(io(format!("stat {}", path.display())))?.len();
        let map_len = if is_last { config.segment_bytes.max(file_len) } else { file_len };
        let seg = Arc::new(Segment::open(&path, id, generation, map_len)?);
        // Persisted index files must cover the segment contiguously from its header.
        let mut cover = SEGMENT_HEADER_BYTES as u64;
        let mut seg_files = Vec::new();
        for ((_, _, start), p) in idx.range((id, generation, 0)..=(id, generation, u64::MAX)) {
            let ok = *start == cover
                && match IndexFile::open(p) {
                    Ok(f) if f.header.segment_id == id && f.header.generation == generation && f.header.log_start == *start && f.header.log_end <= file_len => {
                        cover = f.header.log_end;
                        seg_files.push(Arc::new(f));
                        true
                    }
                    Ok(_) => false,
                    Err(e) => {
                        tracing::warn!(file = %p.display(), error = %e, "discarding an index file; rebuilding from the log");
                        false
                    }
                };
            if !ok {
                let _ = std::fs::remove_file(p);
            }
        }
        if let Some(f) = seg_files.last() {
            max_lsn = max_lsn.max(f.entries()?.iter().map(|e| e.lsn).max().unwrap_or(0));
        }
        let found = scan::scan(&seg, cover, file_len, is_last, (max_lsn > 0).then_some(max_lsn));
        let stop = found.end;
        let mut sealed_damage = false;
        for d in &found.damaged {
            tracing::error!(file = %path.display(), offset = d.offset, len = d.len, key = ?d.key.as_ref().map(|k| k.to_string()), "damaged records in the log: quarantined, valid records after them kept");
            let range = strata_format::DamagedRange {
                segment_id: id,
                generation,
                offset: d.offset,
                len: d.len,
                detected_ms: clock.now_ms(),
                key: d.key.clone(),
                after_lsn: d.after_lsn,
                hides_others: d.hides_others,
            };
            if is_last {
                damaged.push(range);
            } else if damage.insert(range) {
                // A sealed segment gets its index file below, after which no
                // open rescans it: the damage must be on disk before that.
                sealed_damage = true;
                stats.damage_found.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if sealed_damage {
            damage
                .persist(dir)
                .map_err(|e| EngineError::Invalid(format!("cannot record the damage found in {}: {e}; free some space and start again", path.display())))?;
        }
        if stop < file_len {
            // Zeros after the last record are space the writer zero-filled
            // ahead (fsutil::zero_fill_ahead), not a tear: cut them quietly.
            // Anything else is a torn tail: the last batch was cut short by a
            // crash before its fsync, so none of it was acknowledged. A
            // record that is whole but fails its CRC is not a tear, and the
            // scan kept it (quarantined) above.
            if let Some(e) = &found.torn {
                tracing::warn!(file = %path.display(), offset = stop, dropped_bytes = file_len - stop, error = %e, "truncating torn log tail");
                stats.torn_bytes_truncated.fetch_add(file_len - stop, std::sync::atomic::Ordering::Relaxed);
            }
            let f = OpenOptions::new().write(true).open(&path).map_err(io(format!("open {}", path.display())))?;
            f.set_len(stop).and_then(|_| f.sync_all()).map_err(io(format!("truncate {}", path.display())))?;
        }
        let records = found.records;
        for (_, r) in &records {
            max_lsn = max_lsn.max(r.lsn);
        }
        if is_last {
            // The journal reaches back into the part of the log the index
            // already covers, as far as it has room: a reader of the journal
            // (a change-capture sender, a replication peer) that was behind
            // when the node stopped cleanly resumes where it was instead of
            // finding the journal starting at the restart.
            tail.extend(indexed_tail(&seg, &seg_files, cover, config.journal_entries.saturating_sub(records.len())));
            for (off, r) in &records {
                memtable.insert(located(id, *off, r));
                tail.push(journal_entry(r));
            }
            memtable_start = cover;
            active_len = stop;
        } else if !records.is_empty() {
            let mut m = Memtable::default();
            for (off, r) in &records {
                m.insert(located(id, *off, r));
            }
            let entries: Vec<IndexEntry> = m.sorted_entries();
            seg_files.push(Arc::new(IndexFile::write(dir, id, generation, cover, stop, &entries)?));
        }
        used_bytes += stop;
        index_files.extend(seg_files);
        segments.insert(id, seg);
    }

    // Lsns never repeat: restart above every lsn ever handed out, even
    // those of records cut off or quarantined above, which peers may have
    // pulled already (their tokens are past them).
    let mut lsns = open_lsn_reservation(dir, meta.partition)?;
    let next_lsn = (max_lsn + 1).max(lsns.lsn_limit);
    lsns.cover(next_lsn)?;
    // Nothing lies between the newest record and `next_lsn`, so the
    // journal is complete from just after the newest record.
    let mut journal = Journal::new(config.journal_entries, tail.first().map_or(max_lsn + 1, |e| e.lsn));
    for e in tail {
        journal.push(e);
    }
    let active = segments.values().next_back().expect("non-empty").clone();
    let file = OpenOptions::new().write(true).open(&active.path).map_err(io(format!("open {}", active.path.display())))?;
    // The state reports one past the newest record (what peers compare
    // their tokens with); the writer hands out lsns from `next_lsn`, which
    // may be far above it after a restart.
    let state = State { segments, index_files, memtable, memtable_start, journal, next_lsn: max_lsn + 1, active_len, used_bytes };
    // Damage found in the active segment joins the list, except where a
    // later put or delete of the same key (a repair) supersedes it.
    let mut new_damage = 0u64;
    for mut d in damaged {
        if superseded(&state, &d) {
            // The key was repaired (or deleted) after the damage; what
            // else the range may hide still counts.
            if !d.hides_others {
                continue;
            }
            d.key = None;
        }
        if damage.insert(d) {
            new_damage += 1;
        }
    }
    let mut dirty = false;
    if new_damage > 0 {
        stats.damage_found.fetch_add(new_damage, std::sync::atomic::Ordering::Relaxed);
        // The active segment's unindexed part is rescanned at every open, so
        // a full disk need not keep the replica from opening: the list stays
        // dirty and index flushes wait for it.
        if let Err(e) = damage.persist(dir) {
            tracing::error!(partition = meta.partition, error = %e, "could not write the damage list; index flushes and compaction wait until it is written");
            dirty = true;
        }
    }
    let shared = Arc::new(Shared {
        partition: meta.partition,
        dir: dir.to_owned(),
        config,
        clock,
        meta,
        state: RwLock::new(state),
        compaction: Mutex::new(()),
        stats,
        queued_bytes: AtomicU64::new(0),
        io_failed: AtomicBool::new(false),
        flush_on_close: AtomicBool::new(true),
        read_only: AtomicU8::new(0),
        direct: cache.direct.clone(),
        tail: cache.tail.clone(),
        damage: {
            let d = Damage::new(damage);
            if dirty {
                d.mark_dirty();
            }
            d
        },
        compaction_unresolved: Mutex::new(Default::default()),
        reclaim_horizon: AtomicU64::new(0),
    });
    let (tx, rx) = mpsc::sync_channel(QUEUE_REQUESTS_MAX);
    let direct_file = crate::writer::open_direct(&active.path);
    let writer = Writer { shared: shared.clone(), file, direct_file, next_lsn, recent: Recent::new(cache), zeroed: active_len, lsns };
    let handle =
        std::thread::Builder::new().name(format!("strata-writer-{}", meta.partition)).spawn(move || writer.run(rx)).map_err(io("spawn writer thread"))?;
    Ok(Replica { shared, tx: Mutex::new(Some(tx)), writer: Mutex::new(Some(handle)) })
}

/// Opens `replica.lsn`, creating it for a replica written before it
/// existed (whose lsns restart after its newest record, as they did then).
/// A reservation that fails its CRC (a torn rewrite) cannot say how far
/// lsns went, so the counter jumps by 2^40, beyond any real count.
fn open_lsn_reservation(dir: &Path, partition: PartitionId) -> Result<LsnReserve> {
    let path = dir.join(LSN_FILE);
    let ctx = || format!("open {}", path.display());
    let existed = path.exists();
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io(ctx()))?;
    if !existed {
        fsutil::fsync_dir(dir)?;
    }
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut &file, &mut buf).map_err(io(ctx()))?;
    let lsn_limit = if buf.is_empty() {
        0
    } else {
        match strata_format::LsnReservation::decode(&buf) {
            Ok(r) if r.partition == partition => r.lsn_limit,
            Ok(r) => {
                return Err(EngineError::Corrupt {
                    file: path.display().to_string(),
                    offset: 0,
                    source: strata_format::FormatError::Invalid { what: "lsn reservation", detail: format!("names partition {}", r.partition) },
                });
            }
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "the lsn reservation is damaged; lsns jump ahead by 2^40");
                1 << 40
            }
        }
    };
    Ok(LsnReserve { file, partition, lsn_limit })
}

/// Whether a damaged range is superseded by a valid later put or delete of
/// its key: the key was repaired (or deleted) after the damage, so the
/// damage no longer says anything about it. Ranges of unknown keys never are.
fn superseded(state: &State, d: &strata_format::DamagedRange) -> bool {
    let Some(key) = &d.key else { return false };
    match state.lookup(key) {
        KeyState::Deleted => true,
        KeyState::Live { put, .. } => (put.segment_id, put.entry.record_offset) > (d.segment_id, d.offset),
        KeyState::Missing => false,
    }
}

fn journal_entry(r: &strata_format::DecodedRecord) -> JournalEntry {
    JournalEntry::of(r, (!r.actor.is_empty()).then(|| Arc::from(r.actor.as_str())))
}

/// The last records, at most `room` of them or a few more, of the part of
/// the active segment `seg` its index `files` cover (up to `cover`), in log
/// order, for the journal: from the offset of the oldest of the newest
/// `room` indexed records on, every record after it (records an index
/// entry no longer names, superseded by a later one of the same key, are
/// walked through too, so the journal holds every record from its first
/// one on). Only headers and properties are read, never the data. Empty
/// if a record there does not decode (damage quarantined in place): the
/// journal then starts after the index, as it would without this.
fn indexed_tail(seg: &Segment, files: &[Arc<IndexFile>], cover: u64, room: usize) -> Vec<JournalEntry> {
    if room == 0 || files.is_empty() {
        return Vec::new();
    }
    let mut indexed: Vec<(u64, u64)> = Vec::new();
    for f in files {
        match f.entries() {
            Ok(entries) => indexed.extend(entries.iter().filter(|e| e.record_offset < cover).map(|e| (e.lsn, e.record_offset))),
            Err(_) => return Vec::new(),
        }
    }
    indexed.sort_unstable_by(|a, b| b.cmp(a));
    let Some(start) = indexed.iter().take(room).map(|(_, off)| *off).min() else { return Vec::new() };
    let mut out = Vec::new();
    let mut off = start;
    while off < cover {
        let head = seg.slice(off, (cover - off).min(RECORD_HEAD_PEEK));
        let Ok(len) = strata_format::record::peek_len(head) else { return Vec::new() };
        if off + len as u64 > cover {
            return Vec::new();
        }
        match seg.record_at(off, len, false) {
            Ok(r) => out.push(journal_entry(&r)),
            Err(_) => return Vec::new(),
        }
        off += len as u64;
    }
    out
}

/// Bytes enough to read a record's length from its header.
const RECORD_HEAD_PEEK: u64 = 64;

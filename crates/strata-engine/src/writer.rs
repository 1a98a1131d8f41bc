//! The group-commit writer: one thread per replica drains the write queue,
//! validates each write against the index, appends the whole batch with one
//! vectored write and one fdatasync, and only then publishes the records to
//! the index and acknowledges them. Nothing unacknowledged is ever visible.

use crate::cache::Recent;
use crate::config::FlushPolicy;
use crate::direct::ALIGN;
use crate::error::{EngineError, ReadOnlyReason, Result, io};
use crate::fsutil;
use crate::index::{IndexFile, KeyState};
use crate::journal::JournalEntry;
use crate::replica::{Queued, Shared, WriteAck, WriteOp, WriteReq, located};
use crate::segment::{Segment, log_name};
use bytes::Bytes;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use strata_format::headers::SEGMENT_HEADER_BYTES;
use strata_format::record::{self, DecodedRecord};
use strata_format::{PutProps, SegmentHeader};
use strata_types::Key;

/// A validated write, encoded and ready to append.
struct Encoded {
    reply: tokio::sync::oneshot::Sender<Result<WriteAck>>,
    parts: Vec<Bytes>,
    len: usize,
    rec: DecodedRecord,
    /// Who made the change, for the journal (the record holds it too).
    actor: Option<Arc<str>>,
    /// The write repairs (or deletes) a quarantined key: once durable, the
    /// key leaves the damage list.
    clears_damage: bool,
    /// Later writes of the same batch refused because of this one (a second
    /// delete of a key this one deletes, say). Their answers go out only
    /// once this write is durable: before that, "already deleted" would
    /// acknowledge a delete that a crash can still undo.
    followers: Vec<(tokio::sync::oneshot::Sender<Result<WriteAck>>, EngineError)>,
}

impl Encoded {
    /// Acknowledges the durable write, then the writes refused because of it.
    fn acknowledge(self, ack: WriteAck) {
        let _ = self.reply.send(Ok(ack));
        for (reply, e) in self.followers {
            let _ = reply.send(Err(e));
        }
    }

    /// Fails the write, and the writes judged against it (the state they
    /// were refused by never became durable).
    fn fail(self, e: &EngineError) {
        let _ = self.reply.send(Err(clone_err(e)));
        for (reply, _) in self.followers {
            let _ = reply.send(Err(clone_err(e)));
        }
    }
}

/// The simplified state of a key while validating a batch.
#[derive(Clone, Copy)]
enum Pending {
    Missing,
    Deleted,
    Live(u64),
}

pub(crate) struct Writer {
    pub shared: Arc<Shared>,
    pub file: File,
    /// The active segment opened with `O_DIRECT` (`None` where the
    /// filesystem refuses it): large groups are written through it from
    /// the tail cache (`tail.rs`).
    pub direct_file: Option<File>,
    pub next_lsn: u64,
    /// Recently written ranges still counted against the page-cache window.
    pub recent: Recent,
    /// Length of the active segment file; `[active_len, zeroed)` is zeros
    /// written ahead (see [`fsutil::zero_fill_ahead`]).
    pub zeroed: u64,
    /// The lsn reservation (`replica.lsn`): no lsn at or above
    /// `lsn_limit` is handed out before the file says so durably.
    pub lsns: LsnReserve,
}

/// Lsns are reserved this many at a time: one small fdatasync'd write per
/// this many records (and one per open), so the reservation costs nothing
/// measurable while a restart can always start above every lsn handed out.
pub(crate) const LSN_RESERVE_STEP: u64 = 1 << 20;

/// Name of a replica's lsn reservation file.
pub(crate) const LSN_FILE: &str = "replica.lsn";

/// The open `replica.lsn` and the limit it holds. It is rewritten in place
/// (32 bytes within one sector, then fdatasync), so a full disk never keeps
/// it from moving; a torn rewrite fails its CRC and recovery then jumps far
/// ahead instead (see `recovery.rs`).
pub(crate) struct LsnReserve {
    pub file: File,
    pub partition: u64,
    pub lsn_limit: u64,
}

impl LsnReserve {
    /// Makes sure lsns below `need` may be handed out.
    pub fn cover(&mut self, need: u64) -> Result<()> {
        if need <= self.lsn_limit {
            return Ok(());
        }
        use std::os::unix::fs::FileExt;
        let limit = need.saturating_add(LSN_RESERVE_STEP);
        let bytes = strata_format::LsnReservation { partition: self.partition, lsn_limit: limit }.encode();
        self.file.write_all_at(&bytes, 0).and_then(|_| self.file.sync_data()).map_err(io(format!("write {LSN_FILE} of partition {}", self.partition)))?;
        self.lsn_limit = limit;
        Ok(())
    }
}

/// Batches smaller than this write into space zero-filled ahead of the
/// log's end ([`fsutil::zero_fill_ahead`]), so their fdatasync needs no
/// journal commit. Bigger ones just append: the commit is small beside
/// their own writing, and zeroing ahead would write their bytes twice.
const ZERO_AHEAD_BELOW: u64 = 256 << 10;

/// Groups of this size or more are written with `O_DIRECT` from the tail
/// cache when it has room (`tail.rs`); smaller ones through the page cache.
const DIRECT_WRITE_BYTES: u64 = ZERO_AHEAD_BELOW;

/// Records of this size or more in a direct group stay readable from the
/// tail cache; smaller ones are read through the page cache.
pub(crate) const TAIL_RECORD_BYTES: u32 = 64 << 10;

/// Opens a segment for direct writes; `None` where `O_DIRECT` is refused.
pub(crate) fn open_direct(path: &std::path::Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .inspect_err(|e| tracing::debug!(path = %path.display(), error = %e, "no O_DIRECT here; large writes go through the page cache"))
        .ok()
}

impl Writer {
    pub fn run(mut self, rx: Receiver<Queued>) {
        let c = self.shared.config.clone();
        while let Ok(first) = rx.recv() {
            let first = match first {
                Queued::Write(w) => w,
                Queued::Seal(reply) => {
                    let _ = reply.send(self.seal());
                    continue;
                }
            };
            let mut bytes = first.len;
            let mut batch = vec![first];
            let mut seal = None;
            while batch.len() < c.batch_records_max && bytes < c.batch_bytes_max {
                match rx.try_recv() {
                    Ok(Queued::Write(r)) => {
                        bytes += r.len;
                        batch.push(r);
                    }
                    Ok(Queued::Seal(reply)) => {
                        seal = Some(reply);
                        break;
                    }
                    Err(_) => break,
                }
            }
            self.shared.queued_bytes.fetch_sub(bytes as u64, Ordering::SeqCst);
            self.process(batch);
            if let Some(reply) = seal {
                let _ = reply.send(self.seal());
            }
        }
        if self.shared.flush_on_close.load(Ordering::SeqCst)
            && !self.shared.io_failed.load(Ordering::SeqCst)
            && let Err(e) = self.flush_memtable()
        {
            tracing::warn!(partition = self.shared.partition, error = %e, "could not persist the index on close; it will be rebuilt from the log");
        }
    }

    fn validate(&mut self, batch: Vec<WriteReq>) -> Vec<Encoded> {
        // Every lsn this batch may take is reserved durably first.
        if let Err(e) = self.lsns.cover(self.next_lsn + batch.len() as u64) {
            tracing::error!(partition = self.shared.partition, error = %e, "could not reserve lsns; refusing the batch");
            for req in batch {
                let _ = req.reply.send(Err(clone_err(&e)));
            }
            return Vec::new();
        }
        let has_puts = batch.iter().any(|r| matches!(r.op, WriteOp::Put { .. } | WriteOp::ReplicaPut { .. }));
        let ro = self.shared.compute_read_only(has_puts);
        let now = self.shared.clock.now_ms();
        let partition = self.shared.partition;
        // Per key: its state as this batch leaves it, whether it is
        // quarantined, and which accepted write of the batch set the state
        // (None: the index, which is durable).
        let mut pending: HashMap<Key, (Pending, bool, Option<usize>)> = HashMap::new();
        let mut out: Vec<Encoded> = Vec::with_capacity(batch.len());
        let st = self.shared.read_state();
        for req in batch {
            let key = req.op.key().clone();
            // `damaged`: this replica's copy of the key is quarantined.
            let (cur, damaged, set_by) = *pending.entry(key.clone()).or_insert_with(|| {
                let state = match st.lookup(&key) {
                    KeyState::Missing => Pending::Missing,
                    KeyState::Deleted => Pending::Deleted,
                    KeyState::Live { expiry_ms, .. } => Pending::Live(expiry_ms),
                };
                (state, self.shared.damage.has_key(&key), None)
            });
            let expired = |e: u64| e != 0 && e <= now;
            let verdict = match (&req.op, cur) {
                (_, _) if ro == Some(ReadOnlyReason::IoFailed) => Err(EngineError::ReadOnly { partition, reason: ReadOnlyReason::IoFailed }),
                // A quarantined key: a whole copy from a peer repairs it, a
                // delete retires it, anything else waits for the repair.
                (WriteOp::ReplicaPut { .. }, Pending::Missing | Pending::Live(_)) if damaged && ro == Some(ReadOnlyReason::DiskFull) => {
                    Err(EngineError::ReadOnly { partition, reason: ReadOnlyReason::DiskFull })
                }
                (WriteOp::ReplicaPut { props, .. }, Pending::Missing | Pending::Live(_)) if damaged => Ok(Pending::Live(props.expiry_ms)),
                (WriteOp::Delete { .. } | WriteOp::ReplicaDelete { .. }, Pending::Missing | Pending::Live(_)) if damaged => Ok(Pending::Deleted),
                // With damage anywhere, "missing" is unsure (the key's put or
                // tombstone may be what was damaged): a delete is written.
                (WriteOp::Delete { .. }, Pending::Missing) if self.shared.damage.blocks(&key, None) => Ok(Pending::Deleted),
                (WriteOp::Put { .. }, _) if damaged => Err(EngineError::AlreadyExists),
                (WriteOp::TtlUpdate { .. }, Pending::Missing | Pending::Live(_)) if damaged => Err(self.shared.damaged(&key)),
                (WriteOp::ReplicaPut { .. }, _) if ro == Some(ReadOnlyReason::DiskFull) => {
                    Err(EngineError::ReadOnly { partition, reason: ReadOnlyReason::DiskFull })
                }
                (WriteOp::ReplicaPut { props, .. }, Pending::Missing) => Ok(Pending::Live(props.expiry_ms)),
                (WriteOp::ReplicaPut { .. }, _) => Err(EngineError::AlreadyExists),
                (WriteOp::ReplicaDelete { .. }, Pending::Deleted) => Err(EngineError::Deleted),
                (WriteOp::ReplicaDelete { .. }, _) => Ok(Pending::Deleted),
                (WriteOp::Put { .. }, _) if ro.is_some() => Err(EngineError::ReadOnly { partition, reason: ro.expect("checked") }),
                (WriteOp::Put { props, .. }, Pending::Missing) => Ok(Pending::Live(props.expiry_ms)),
                // A deleted version may be written again (a store truncated
                // and restored); a blob id never is.
                (WriteOp::Put { key, props, .. }, Pending::Deleted) if key.kind().is_versioned() => Ok(Pending::Live(props.expiry_ms)),
                (WriteOp::Put { .. }, _) => Err(EngineError::AlreadyExists),
                (_, Pending::Missing) => Err(EngineError::NotFound),
                (_, Pending::Deleted) => Err(EngineError::Deleted),
                (WriteOp::Delete { .. }, Pending::Live(_)) => Ok(Pending::Deleted),
                (WriteOp::TtlUpdate { .. }, Pending::Live(e)) if expired(e) => Err(EngineError::Expired),
                (WriteOp::TtlUpdate { expiry_ms, .. }, Pending::Live(_)) => Ok(Pending::Live(*expiry_ms)),
            };
            match verdict {
                // Judged against a write of this batch: answered once that
                // write is durable (or failed with it).
                Err(e) if let Some(i) = set_by => out[i].followers.push((req.reply, e)),
                Err(e) => {
                    let _ = req.reply.send(Err(e));
                }
                Ok(next) => match encode(req.op, self.next_lsn, now, req.actor.as_deref().unwrap_or("")) {
                    Ok((parts, rec)) => {
                        pending.insert(key, (next, false, Some(out.len())));
                        self.next_lsn += 1;
                        let (len, actor) = (rec.total_len as usize, req.actor);
                        out.push(Encoded { reply: req.reply, len, parts, rec, actor, clears_damage: damaged, followers: Vec::new() });
                    }
                    Err(e) => {
                        let _ = req.reply.send(Err(e));
                    }
                },
            }
        }
        out
    }

    fn process(&mut self, batch: Vec<WriteReq>) {
        let accepted = self.validate(batch);
        let seg_max = self.shared.config.segment_bytes;
        let mut rest = accepted.into_iter().peekable();
        while rest.peek().is_some() {
            let active_len = self.shared.read_state().active_len;
            let mut group = Vec::new();
            let mut group_len = 0u64;
            while let Some(e) = rest.peek() {
                if active_len + group_len + e.len as u64 > seg_max && !(group.is_empty() && active_len == SEGMENT_HEADER_BYTES as u64) {
                    break;
                }
                group_len += e.len as u64;
                group.push(rest.next().expect("peeked"));
            }
            if group.is_empty() {
                if let Err(e) = self.roll() {
                    self.fail_all(rest.collect(), &e);
                    return;
                }
                continue;
            }
            if let Err(e) = self.append(group, active_len, group_len) {
                self.fail_all(rest.collect(), &e);
                return;
            }
        }
        if self.shared.read_state().memtable.len() >= self.shared.config.index_flush_entries
            && let Err(e) = self.flush_memtable()
        {
            tracing::warn!(partition = self.shared.partition, error = %e, "index flush failed; the memtable keeps growing");
        }
    }

    fn fail_all(&self, rest: Vec<Encoded>, e: &EngineError) {
        for r in rest {
            r.fail(e);
        }
    }

    /// Appends one group to the active segment, makes it durable, then
    /// publishes it to the index and acknowledges it.
    fn append(&mut self, group: Vec<Encoded>, start: u64, len: u64) -> Result<()> {
        let seg = self.shared.read_state().active().clone();
        let tail = self.shared.tail.clone();
        let direct = match &tail {
            Some(t) if len >= DIRECT_WRITE_BYTES => self.write_direct(t, &seg, &group, start, len),
            _ => None,
        };
        let (mut res, alloc) = match direct {
            Some((res, alloc)) => (res, Some(alloc)),
            None => {
                let slices: Vec<IoSlice<'_>> = group.iter().flat_map(|e| e.parts.iter().map(|p| IoSlice::new(p))).collect();
                self.zero_ahead(start, len);
                (self.file.seek(SeekFrom::Start(start)).and_then(|_| write_all_vectored(&mut self.file, slices)), None)
            }
        };
        if res.is_ok() {
            self.zeroed = self.zeroed.max(start + len);
        }
        if res.is_ok() && self.shared.config.flush == FlushPolicy::EveryBatch {
            #[allow(clippy::disallowed_methods)]
            let t = std::time::Instant::now();
            res = self.file.sync_data();
            let s = &self.shared.stats;
            s.fsyncs.fetch_add(1, Ordering::Relaxed);
            s.fsync_nanos.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        if res.is_ok() && self.shared.config.fail_appends.as_ref().is_some_and(|f| f.load(Ordering::SeqCst)) {
            res = Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        if let Err(err) = res {
            let full = err.raw_os_error() == Some(libc::ENOSPC);
            // Cut the partial batch off so the next batch starts at a record boundary.
            let cut = self.file.set_len(start).and_then(|_| self.file.sync_data());
            self.zeroed = start;
            let e = if full && cut.is_ok() {
                self.shared.read_only.store(1 + ReadOnlyReason::DiskFull as u8, Ordering::Relaxed);
                EngineError::ReadOnly { partition: self.shared.partition, reason: ReadOnlyReason::DiskFull }
            } else {
                // After a failed fsync the page cache may not match the disk:
                // refuse writes until a restart re-reads the log.
                self.shared.io_failed.store(true, Ordering::SeqCst);
                self.shared.read_only.store(1 + ReadOnlyReason::IoFailed as u8, Ordering::Relaxed);
                io(format!("append to partition {}", self.shared.partition))(err)
            };
            tracing::error!(partition = self.shared.partition, error = %e, "write failed");
            self.fail_all(group, &e);
            return Err(e);
        }
        let s = &self.shared.stats;
        s.batches.fetch_add(1, Ordering::Relaxed);
        s.records.fetch_add(group.len() as u64, Ordering::Relaxed);
        s.bytes_written.fetch_add(len, Ordering::Relaxed);
        let direct = alloc.is_some();
        if let (Some(t), Some(alloc)) = (&tail, alloc) {
            // Readable from memory before anyone can learn the records exist.
            let a = start / ALIGN as u64 * ALIGN as u64;
            let mut off = start;
            let mut kept = Vec::new();
            for e in &group {
                if e.rec.total_len >= TAIL_RECORD_BYTES {
                    kept.push(((self.shared.partition, seg.id, seg.generation, off), (off - a) as usize, e.len));
                }
                off += e.len as u64;
            }
            t.publish(alloc, &kept);
            s.direct_writes.fetch_add(1, Ordering::Relaxed);
        } else if tail.is_some() && len >= DIRECT_WRITE_BYTES && self.direct_file.is_some() {
            s.tail_cache_full.fetch_add(1, Ordering::Relaxed);
        }
        let mut acks = Vec::with_capacity(group.len());
        let repaired: Vec<Key> = group.iter().filter(|e| e.clears_damage).map(|e| e.rec.key.clone()).collect();
        {
            let mut st = self.shared.write_state();
            let seg_id = seg.id;
            let mut off = start;
            for e in group {
                st.memtable.insert(located(seg_id, off, &e.rec));
                st.journal.push(JournalEntry::of(&e.rec, e.actor.clone()));
                off += e.len as u64;
                let ack = WriteAck { lsn: e.rec.lsn, time_ms: e.rec.time_ms };
                acks.push((e, ack));
            }
            st.active_len = off;
            st.used_bytes += len;
            st.next_lsn = self.next_lsn;
        }
        // A repaired key leaves the damage list once its new copy is
        // durable and indexed; if the list cannot be rewritten, the key
        // stays quarantined (a later repair tries again), never wrongly served.
        if !repaired.is_empty() {
            match self.shared.damage.clear(&self.shared.dir, &repaired) {
                Ok(n) => {
                    s.damage_cleared.fetch_add(n as u64, Ordering::Relaxed);
                    tracing::info!(partition = self.shared.partition, keys = n, "repaired quarantined keys");
                }
                Err(e) => tracing::error!(partition = self.shared.partition, error = %e, "could not rewrite the damage list after a repair"),
            }
        }
        for (e, ack) in acks {
            e.acknowledge(ack);
        }
        // A direct group left nothing in the page cache but its last page.
        if !direct {
            let dropped = self.recent.wrote(&seg, start, start + len);
            s.cache_dropped_bytes.fetch_add(dropped, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Writes a group at `start` through the tail cache: copies the part of
    /// the log's last page before `start` and the group into the ring,
    /// writes the whole pages with `O_DIRECT` and the last partial page
    /// through the page cache (so the next group finds it there and a small
    /// write after it reads nothing from disk). `None` when there is no
    /// direct file or no room in the ring: the caller writes buffered.
    fn write_direct<'t>(
        &self,
        tail: &'t crate::tail::TailCache,
        seg: &Segment,
        group: &[Encoded],
        start: u64,
        len: u64,
    ) -> Option<(std::io::Result<()>, crate::tail::Alloc<'t>)> {
        use std::os::unix::fs::FileExt;
        let fd = self.direct_file.as_ref()?;
        let a = start / ALIGN as u64 * ALIGN as u64;
        let pre = (start - a) as usize;
        let span = pre + len as usize;
        let mut alloc = tail.alloc(span)?;
        let buf = alloc.buf();
        // Durable bytes of a record already acknowledged: read from the
        // page cache (the previous group left that page there).
        buf[..pre].copy_from_slice(seg.slice(a, pre as u64));
        let mut at = pre;
        for p in group.iter().flat_map(|e| e.parts.iter()) {
            buf[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        let end = start + len;
        let b = end / ALIGN as u64 * ALIGN as u64;
        let whole = (b - a) as usize;
        let res = fd.write_all_at(&buf[..whole], a).and_then(|_| if end > b { self.file.write_all_at(&buf[whole..span], b) } else { Ok(()) });
        Some((res, alloc))
    }

    /// Before a small batch, zero-fills the segment past it (not beyond the
    /// segment's size). The batch's own fdatasync makes the zeros durable.
    fn zero_ahead(&mut self, start: u64, len: u64) {
        if len < ZERO_AHEAD_BELOW {
            self.zeroed = fsutil::zero_fill_ahead(&self.file, self.zeroed, start + len, self.shared.config.segment_bytes);
        }
    }

    /// Persists the memtable as an index file covering the active segment
    /// from the memtable start to the durable end.
    pub fn flush_memtable(&mut self) -> Result<()> {
        // An index file stops recovery from rescanning what it covers: damage
        // found there must be on disk first.
        self.shared.damage.persist_if_dirty(&self.shared.dir)?;
        let (seg, start, end, entries) = {
            let st = self.shared.read_state();
            if st.memtable.is_empty() {
                return Ok(());
            }
            (st.active().clone(), st.memtable_start, st.active_len, st.memtable.sorted_entries())
        };
        let file = IndexFile::write(&self.shared.dir, seg.id, seg.generation, start, end, &entries)?;
        let mut st = self.shared.write_state();
        st.index_files.push(Arc::new(file));
        st.memtable.clear();
        st.memtable_start = end;
        Ok(())
    }

    /// Seals the active segment for compaction, unless it holds nothing.
    fn seal(&mut self) -> Result<()> {
        if self.shared.read_state().active_len == SEGMENT_HEADER_BYTES as u64 {
            return Ok(());
        }
        self.roll()
    }

    /// Seals the active segment (its index persisted first) and starts the next.
    fn roll(&mut self) -> Result<()> {
        self.flush_memtable()?;
        // The sealed segment ends at its last record: cut the zeros ahead.
        let (end, path) = {
            let st = self.shared.read_state();
            (st.active_len, st.active().path.clone())
        };
        if self.zeroed > end {
            self.file.set_len(end).and_then(|_| self.file.sync_all()).map_err(io(format!("truncate {}", path.display())))?;
        }
        let (id, partition) = (self.shared.read_state().active().id + 1, self.shared.partition);
        let header = SegmentHeader { partition, segment_id: id, generation: 0, incarnation: self.shared.meta.incarnation };
        let path = self.shared.dir.join(log_name(id, 0));
        let file = create_segment_file(&path, &header)?;
        let seg = Segment::open(&path, id, 0, self.shared.config.segment_bytes)?;
        self.file = file;
        self.direct_file = open_direct(&path);
        self.zeroed = SEGMENT_HEADER_BYTES as u64;
        let mut st = self.shared.write_state();
        st.segments.insert(id, Arc::new(seg));
        st.active_len = SEGMENT_HEADER_BYTES as u64;
        st.memtable_start = SEGMENT_HEADER_BYTES as u64;
        st.used_bytes += SEGMENT_HEADER_BYTES as u64;
        Ok(())
    }
}

/// Creates a segment file holding only its header, durably (file and directory).
///
/// A file whose header could not be written (a full disk) is removed again,
/// so the next roll can create it once there is room: left behind, it would
/// make every later roll fail (`create_new`) and leave a headerless newest
/// segment for recovery to explain.
pub(crate) fn create_segment_file(path: &std::path::Path, header: &SegmentHeader) -> Result<File> {
    let ctx = || format!("create {}", path.display());
    let mut f = OpenOptions::new().create_new(true).write(true).open(path).map_err(io(ctx()))?;
    let written = f.write_all(&header.encode()).and_then(|()| f.sync_all());
    if let Err(e) = written {
        drop(f);
        if let Err(rm) = std::fs::remove_file(path) {
            tracing::warn!(file = %path.display(), error = %rm, "could not remove a segment whose header failed to write");
        }
        return Err(io(ctx())(e));
    }
    fsutil::fsync_dir(path.parent().expect("segments live in a directory"))?;
    Ok(f)
}

fn write_all_vectored(file: &mut File, mut slices: Vec<IoSlice<'_>>) -> std::io::Result<()> {
    let mut bufs = &mut slices[..];
    while !bufs.is_empty() {
        match file.write_vectored(bufs) {
            Ok(0) => return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The record of `op` by `actor`. The decoded form it returns (for the
/// index) leaves the actor out: the journal takes it from the request.
fn encode(op: WriteOp, lsn: u64, now: u64, actor: &str) -> Result<(Vec<Bytes>, DecodedRecord)> {
    let (parts, rec) = match op {
        WriteOp::ReplicaPut { key, props, data, created_ms } => return encode(WriteOp::Put { key, props, data }, lsn, created_ms, actor),
        WriteOp::Put { key, props, data } => {
            let (prefix, crc) = record::encode_put(lsn, now, &key, &props, actor, &data).map_err(|e| EngineError::Invalid(e.to_string()))?;
            let data_offset = prefix.len() as u32;
            let total = (prefix.len() + data.len() + 4) as u32;
            let rec = DecodedRecord {
                kind: record::RecordKind::Put,
                lsn,
                time_ms: now,
                key,
                total_len: total,
                expiry_ms: props.expiry_ms,
                props: None::<PutProps>,
                data_offset,
                data_len: data.len() as u64,
                actor: String::new(),
            };
            (vec![Bytes::from(prefix), data, Bytes::copy_from_slice(&crc)], rec)
        }
        WriteOp::Delete { key } | WriteOp::ReplicaDelete { key } => small(record::RecordKind::Delete, lsn, now, key, 0, actor)?,
        WriteOp::TtlUpdate { key, expiry_ms } => small(record::RecordKind::TtlUpdate, lsn, now, key, expiry_ms, actor)?,
    };
    Ok((parts, rec))
}

fn small(kind: record::RecordKind, lsn: u64, now: u64, key: Key, expiry_ms: u64, actor: &str) -> Result<(Vec<Bytes>, DecodedRecord)> {
    let b = record::encode_small(kind, lsn, now, &key, expiry_ms, actor).map_err(|e| EngineError::Invalid(e.to_string()))?;
    let rec =
        DecodedRecord { kind, lsn, time_ms: now, key, total_len: b.len() as u32, props: None, expiry_ms, data_offset: 0, data_len: 0, actor: String::new() };
    Ok((vec![Bytes::from(b)], rec))
}

/// Errors are not Clone (io::Error); a batch failure is reported to each write.
pub(crate) fn clone_err(e: &EngineError) -> EngineError {
    match e {
        EngineError::ReadOnly { partition, reason } => EngineError::ReadOnly { partition: *partition, reason: *reason },
        EngineError::Damaged { partition, detail } => EngineError::Damaged { partition: *partition, detail: detail.clone() },
        EngineError::Io { context, source } => EngineError::Io { context: context.clone(), source: std::io::Error::new(source.kind(), source.to_string()) },
        other => EngineError::Invalid(other.to_string()),
    }
}

//! A partition replica: one append-only log (Ambry §2.2) with its index,
//! journal, writer thread and compactor.

use crate::config::EngineConfig;
use crate::error::{EngineError, ReadOnlyReason, Result};
use crate::index::{IndexFile, KeyState, Located, Memtable, fold};
use crate::journal::{Journal, JournalEntry};
use crate::segment::{FileRange, Segment, segment_bytes};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, mpsc};
use std::task::{Context, Poll};
use strata_format::record::{put_record_len, small_record_len};
use strata_format::{PutProps, RecordKind, ReplicaMeta};
use strata_types::{Clock, Key, PartitionId};
use tokio::sync::oneshot;

/// Records of this size or more are read in with one readahead request
/// before they are touched (see [`Segment::will_need`]).
const WILL_NEED_BYTES: u32 = 64 << 10;

/// Records of this size or more that are not in the page cache are read
/// with `O_DIRECT` (see `direct.rs`).
const DIRECT_READ_BYTES: u32 = 1 << 20;

use crate::writer::TAIL_RECORD_BYTES;

/// A write to a replica.
#[derive(Debug, Clone)]
pub enum WriteOp {
    /// Stores a new blob; fails if the key exists (even deleted).
    Put {
        /// Key.
        key: Key,
        /// Properties and user metadata.
        props: PutProps,
        /// The bytes.
        data: Bytes,
    },
    /// Writes a tombstone for a live or expired key.
    Delete {
        /// Key.
        key: Key,
    },
    /// Sets a new expiry (0 = never) on a live key.
    TtlUpdate {
        /// Key.
        key: Key,
        /// New absolute expiry in ms.
        expiry_ms: u64,
    },
    /// A put copied from a peer replica by replication: keeps the origin's
    /// creation time and is accepted by a replica that is read-only only
    /// because it is full by policy (the peers hold the blob already). An
    /// existing key (live or deleted) answers `AlreadyExists`: done.
    ReplicaPut {
        /// Key.
        key: Key,
        /// Properties as put at the origin.
        props: PutProps,
        /// The bytes.
        data: Bytes,
        /// Creation time at the origin.
        created_ms: u64,
    },
    /// A delete copied from a peer by replication: writes a tombstone even
    /// when the put has not arrived, so a late copy of the put cannot bring
    /// the blob back. A key already deleted answers `Deleted`: done.
    ReplicaDelete {
        /// Key.
        key: Key,
    },
}

impl WriteOp {
    /// The key written.
    pub fn key(&self) -> &Key {
        match self {
            Self::Put { key, .. } | Self::Delete { key } | Self::TtlUpdate { key, .. } | Self::ReplicaPut { key, .. } | Self::ReplicaDelete { key } => key,
        }
    }
    /// Encoded record length, the record made by `actor`.
    pub fn record_len(&self, actor: &str) -> usize {
        match self {
            Self::Put { key, props, data } | Self::ReplicaPut { key, props, data, .. } => put_record_len(key, props, data.len(), actor),
            Self::Delete { key } | Self::ReplicaDelete { key } => small_record_len(key, false, actor),
            Self::TtlUpdate { key, .. } => small_record_len(key, true, actor),
        }
    }
}

/// What a durable write reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteAck {
    /// Sequence number given to the record.
    pub lsn: u64,
    /// Time recorded in it.
    pub time_ms: u64,
}

pub(crate) struct WriteReq {
    pub op: WriteOp,
    /// Who asked for it (recorded in the record; change capture's `who`).
    pub actor: Option<Arc<str>>,
    pub len: usize,
    pub reply: oneshot::Sender<Result<WriteAck>>,
}

/// What the writer thread's queue carries.
pub(crate) enum Queued {
    /// A write.
    Write(WriteReq),
    /// Seal the active segment now (after the writes queued before it), so
    /// compaction can rewrite it; answers once sealed.
    Seal(oneshot::Sender<Result<()>>),
}

/// A write on its way to durability. Await it from async code, or
/// [`PendingWrite::wait`] from a thread.
pub struct PendingWrite(Inner);

enum Inner {
    Ready(Option<Result<WriteAck>>),
    Waiting(oneshot::Receiver<Result<WriteAck>>),
}

impl PendingWrite {
    fn ready(r: Result<WriteAck>) -> Self {
        Self(Inner::Ready(Some(r)))
    }
    /// Blocks the calling thread until the write is durable or failed.
    pub fn wait(self) -> Result<WriteAck> {
        match self.0 {
            Inner::Ready(r) => r.unwrap_or(Err(EngineError::Closed)),
            Inner::Waiting(rx) => rx.blocking_recv().unwrap_or(Err(EngineError::Closed)),
        }
    }
}

impl Future for PendingWrite {
    type Output = Result<WriteAck>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            Inner::Ready(r) => Poll::Ready(r.take().unwrap_or(Err(EngineError::Closed))),
            Inner::Waiting(rx) => Pin::new(rx).poll(cx).map(|r| r.unwrap_or(Err(EngineError::Closed))),
        }
    }
}

/// A stored blob as read back.
#[derive(Debug, Clone)]
pub struct BlobRecord {
    /// Key.
    pub key: Key,
    /// Properties and user metadata as put.
    pub props: PutProps,
    /// When the put was accepted.
    pub created_ms: u64,
    /// Effective expiry after TTL updates (0 = never).
    pub expiry_ms: u64,
    /// Size of the data.
    pub size: u64,
    /// The data (empty for `info`), a zero-copy view of the log.
    pub data: Bytes,
    /// Where the data lies in its segment file (gets only), for `sendfile(2)`.
    pub file_range: Option<FileRange>,
    /// Who put it (empty: not known; records before format version 4).
    pub actor: String,
}

/// Counters of one replica, read by the metrics exporter.
#[derive(Debug, Default)]
pub struct ReplicaStats {
    /// Group-commit batches written.
    pub batches: AtomicU64,
    /// Records written.
    pub records: AtomicU64,
    /// Bytes appended to the log.
    pub bytes_written: AtomicU64,
    /// fdatasync calls on the write path.
    pub fsyncs: AtomicU64,
    /// Total nanoseconds spent in those fsyncs.
    pub fsync_nanos: AtomicU64,
    /// Compaction passes that rewrote a segment.
    pub segments_compacted: AtomicU64,
    /// Bytes reclaimed by compaction.
    pub bytes_reclaimed: AtomicU64,
    /// Bytes cut off a torn log tail at recovery.
    pub torn_bytes_truncated: AtomicU64,
    /// Bytes of durable log dropped from the page cache behind the write window.
    pub cache_dropped_bytes: AtomicU64,
    /// Records read with `O_DIRECT` because they were not in the page cache.
    pub direct_reads: AtomicU64,
    /// Bytes read that way.
    pub direct_read_bytes: AtomicU64,
    /// Write groups written with `O_DIRECT` from the tail cache.
    pub direct_writes: AtomicU64,
    /// Large write groups that went through the page cache because the
    /// tail cache had no free region.
    pub tail_cache_full: AtomicU64,
    /// Records read from the tail cache.
    pub tail_cache_hits: AtomicU64,
    /// Bytes read that way.
    pub tail_cache_hit_bytes: AtomicU64,
    /// Records read from the disk into the tail cache (counted in
    /// `direct_reads` too).
    pub tail_cache_fills: AtomicU64,
    /// Damaged log ranges found (by recovery, reads or compaction) and
    /// quarantined.
    pub damage_found: AtomicU64,
    /// Damaged keys repaired (a whole copy written from a peer) or deleted.
    pub damage_cleared: AtomicU64,
}

/// Where a large record's bytes were read from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The tail cache held them.
    Tail,
    /// The disk, into the tail cache (checked as they arrived).
    Filled,
    /// The disk, into a direct-read buffer.
    Disk,
}

pub(crate) struct State {
    pub segments: BTreeMap<u64, Arc<Segment>>,
    /// Ordered by (segment id, log start).
    pub index_files: Vec<Arc<IndexFile>>,
    pub memtable: Memtable,
    pub memtable_start: u64,
    pub journal: Journal,
    pub next_lsn: u64,
    /// Durable length of the active (last) segment.
    pub active_len: u64,
    pub used_bytes: u64,
}

impl State {
    pub fn active(&self) -> &Arc<Segment> {
        self.segments.values().next_back().expect("a replica always has an active segment")
    }

    pub fn lookup(&self, key: &Key) -> KeyState {
        let mut ttl = None;
        if let Some(s) = fold(&mut ttl, self.active().id, self.memtable.find(key).map(|l| l.entry.clone())) {
            return s;
        }
        for f in self.index_files.iter().rev() {
            let found = f.find(key);
            if !found.is_empty()
                && let Some(s) = fold(&mut ttl, f.segment_id(), found.into_iter())
            {
                return s;
            }
        }
        KeyState::Missing
    }
}

pub(crate) struct Shared {
    pub partition: PartitionId,
    pub dir: PathBuf,
    pub config: EngineConfig,
    pub clock: Arc<dyn Clock>,
    pub meta: ReplicaMeta,
    pub state: RwLock<State>,
    pub compaction: Mutex<()>,
    pub stats: ReplicaStats,
    pub queued_bytes: AtomicU64,
    pub io_failed: AtomicBool,
    pub flush_on_close: AtomicBool,
    /// 0 read-write, else 1 + ReadOnlyReason as last seen by the writer.
    pub read_only: AtomicU8,
    /// The store's buffers for direct reads of cold records.
    pub direct: Arc<crate::direct::DirectReads>,
    /// The store's memory for direct writes and reads of recent records.
    pub tail: Option<Arc<crate::tail::TailCache>>,
    /// Quarantined ranges of the log (`damage.rs`).
    pub damage: crate::damage::Damage,
    /// Segments whose compaction `Commit` may or may not be durable (its
    /// write failed): left alone until the next open resolves them.
    pub compaction_unresolved: Mutex<std::collections::HashSet<u64>>,
    /// Every replica holds this replica's records up to this lsn
    /// ([`Replica::set_reclaim_horizon`]); 0 until the caller says so.
    pub reclaim_horizon: AtomicU64,
}

impl Shared {
    /// Decides whether puts are refused, and why; records the verdict for
    /// [`Replica::is_writable`]. Free space is only looked up when
    /// `check_disk` is set (a syscall; skipped for batches without puts).
    pub fn compute_read_only(&self, check_disk: bool) -> Option<ReadOnlyReason> {
        let c = &self.config;
        let last_disk_full = self.read_only.load(Ordering::Relaxed) == 1 + ReadOnlyReason::DiskFull as u8;
        let reason = if self.io_failed.load(Ordering::SeqCst) {
            Some(ReadOnlyReason::IoFailed)
        } else if self.read_state().used_bytes as f64 >= c.read_only_fraction * self.meta.capacity_bytes as f64 {
            Some(ReadOnlyReason::Capacity)
        } else if check_disk {
            crate::fsutil::free_bytes(&self.dir).map_or(true, |f| f < c.disk_reserve_bytes).then_some(ReadOnlyReason::DiskFull)
        } else {
            last_disk_full.then_some(ReadOnlyReason::DiskFull)
        };
        self.read_only.store(reason.map_or(0, |r| 1 + r as u8), Ordering::Relaxed);
        reason
    }

    /// The error a read of a quarantined key answers.
    pub fn damaged(&self, key: &Key) -> EngineError {
        EngineError::Damaged { partition: self.partition, detail: format!("this replica's copy of key {key} is damaged and quarantined until repaired") }
    }

    /// Quarantines the range of a record that failed its checks, logs it
    /// and counts it; returns the error the read answers. If the damage
    /// list cannot be written, the damage is known in memory and the list
    /// is dirty ([`crate::damage::Damage::persist_if_dirty`]).
    pub fn quarantine(&self, seg: &Segment, offset: u64, len: u64, key: Option<&Key>, cause: &EngineError) -> EngineError {
        self.quarantine_durably(seg, offset, len, key, cause).unwrap_or_else(|e| e)
    }

    /// [`Shared::quarantine`], `Err` (with the read's error) when the damage
    /// list could not be written: compaction must then keep the record.
    pub fn quarantine_durably(&self, seg: &Segment, offset: u64, len: u64, key: Option<&Key>, cause: &EngineError) -> Result<EngineError, EngineError> {
        let range =
            // The index named this record's key and kind, so it hides no other key.
            strata_format::DamagedRange {
                segment_id: seg.id,
                generation: seg.generation,
                offset,
                len,
                detected_ms: self.clock.now_ms(),
                key: key.cloned(),
                after_lsn: 0,
                hides_others: false,
            };
        tracing::error!(partition = self.partition, file = %seg.name(), offset, len, key = ?key.map(|k| k.to_string()), error = %cause, "quarantining a damaged record");
        let answer = match key {
            Some(k) => self.damaged(k),
            None => EngineError::Damaged { partition: self.partition, detail: format!("damaged record in {} at {offset}", seg.name()) },
        };
        match self.damage.add(&self.dir, [range]) {
            Ok(n) => {
                self.stats.damage_found.fetch_add(n as u64, Ordering::Relaxed);
                Ok(answer)
            }
            Err(e) => {
                tracing::error!(partition = self.partition, error = %e, "could not write the damage list; index flushes and compaction wait until it is written");
                self.stats.damage_found.fetch_add(1, Ordering::Relaxed);
                Err(answer)
            }
        }
    }

    pub fn read_state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }
    pub fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// A partition replica on one disk.
pub struct Replica {
    pub(crate) shared: Arc<Shared>,
    pub(crate) tx: Mutex<Option<mpsc::SyncSender<Queued>>>,
    pub(crate) writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A summary of a replica for status pages.
#[derive(Debug, Clone)]
pub struct ReplicaStatus {
    /// Partition id.
    pub partition: PartitionId,
    /// Bytes of log on disk.
    pub used_bytes: u64,
    /// Configured capacity.
    pub capacity_bytes: u64,
    /// Why puts are refused, if they are.
    pub read_only: Option<ReadOnlyReason>,
    /// Number of log segments.
    pub segments: usize,
    /// Number of persisted index files.
    pub index_files: usize,
    /// Entries in the in-memory index segment.
    pub memtable_entries: usize,
    /// One past the newest record's sequence number (the next one handed
    /// out may be higher: lsns are reserved in blocks across restarts).
    pub next_lsn: u64,
    /// Quarantined ranges of the log awaiting repair.
    pub damaged_ranges: usize,
    /// Of those, the ranges whose key is unknown.
    pub damaged_unknown: usize,
}

impl Replica {
    /// Partition id.
    pub fn partition(&self) -> PartitionId {
        self.shared.partition
    }
    /// Directory holding the replica.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }
    /// Random id of this replica's life.
    pub fn incarnation(&self) -> [u8; 16] {
        self.shared.meta.incarnation
    }
    /// Counters.
    pub fn stats(&self) -> &ReplicaStats {
        &self.shared.stats
    }

    /// Queues a write for the group-commit writer. Fails fast (without
    /// queueing) on oversized or invalid input and when the queue is full.
    /// The record names no actor: Strata's own writes (replication without
    /// one, the sweep, tracts, transactions).
    pub fn submit(&self, op: WriteOp) -> PendingWrite {
        self.submit_as(op, None)
    }

    /// [`Replica::submit`], the record naming `actor` as who made the
    /// change (an access key id, `node`, `anonymous`: change capture's
    /// `who`, docs/events.md); at most 255 bytes.
    pub fn submit_as(&self, op: WriteOp, actor: Option<Arc<str>>) -> PendingWrite {
        let c = &self.shared.config;
        let name = actor.as_deref().unwrap_or("");
        if name.len() > strata_format::record::MAX_ACTOR_LEN {
            return PendingWrite::ready(Err(EngineError::Invalid(format!(
                "the actor is {} bytes, limit {}",
                name.len(),
                strata_format::record::MAX_ACTOR_LEN
            ))));
        }
        let len = op.record_len(name);
        if let WriteOp::Put { props, .. } | WriteOp::ReplicaPut { props, .. } = &op {
            if len as u64 > c.record_bytes_max {
                return PendingWrite::ready(Err(EngineError::TooLarge { size: len as u64, max: c.record_bytes_max }));
            }
            if let Err(e) = props.validate() {
                return PendingWrite::ready(Err(EngineError::Invalid(e.to_string())));
            }
        }
        let queued = self.shared.queued_bytes.fetch_add(len as u64, Ordering::SeqCst);
        if queued > 0 && queued + len as u64 > c.queue_bytes_max {
            self.shared.queued_bytes.fetch_sub(len as u64, Ordering::SeqCst);
            return PendingWrite::ready(Err(EngineError::Busy { partition: self.partition() }));
        }
        let (reply, rx) = oneshot::channel();
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let sent = match tx.as_ref() {
            Some(tx) => tx.try_send(Queued::Write(WriteReq { op, actor, len, reply })).map_err(|e| match e {
                mpsc::TrySendError::Full(_) => EngineError::Busy { partition: self.partition() },
                mpsc::TrySendError::Disconnected(_) => EngineError::Closed,
            }),
            None => Err(EngineError::Closed),
        };
        match sent {
            Ok(()) => PendingWrite(Inner::Waiting(rx)),
            Err(e) => {
                self.shared.queued_bytes.fetch_sub(len as u64, Ordering::SeqCst);
                PendingWrite::ready(Err(e))
            }
        }
    }

    /// Asks the writer to seal the active segment (a new one takes the
    /// next writes) and waits for it. An empty active segment stays.
    pub(crate) fn seal_active(&self) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        let sent = match self.tx.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(tx) => tx.send(Queued::Seal(reply)).map_err(|_| EngineError::Closed),
            None => Err(EngineError::Closed),
        };
        sent?;
        rx.blocking_recv().unwrap_or(Err(EngineError::Closed))
    }

    /// What the index says of `key`.
    pub fn state_of(&self, key: &Key) -> KeyState {
        self.shared.read_state().lookup(key)
    }

    /// Reads a blob for a peer's replication: like [`Replica::get`], but an
    /// expired blob is returned too (it must reach every replica as it is).
    pub fn get_for_replication(&self, key: &Key) -> Result<BlobRecord> {
        self.read_at(key, true, false)
    }

    fn read(&self, key: &Key, with_data: bool) -> Result<BlobRecord> {
        self.read_at(key, with_data, true)
    }

    fn read_at(&self, key: &Key, with_data: bool, check_expiry: bool) -> Result<BlobRecord> {
        let sh = &self.shared;
        let (put, expiry_ms, seg) = {
            let st = sh.read_state();
            match st.lookup(key) {
                KeyState::Missing if sh.damage.blocks(key, None) => return Err(sh.damaged(key)),
                KeyState::Missing => return Err(EngineError::NotFound),
                KeyState::Deleted => return Err(EngineError::Deleted),
                KeyState::Live { ref put, .. } if sh.damage.blocks(key, Some(put.entry.lsn)) => return Err(sh.damaged(key)),
                KeyState::Live { put, expiry_ms } => {
                    let seg = st.segments.get(&put.segment_id).cloned().ok_or(EngineError::Closed)?;
                    (put, expiry_ms, seg)
                }
            }
        };
        if check_expiry && expiry_ms != 0 && expiry_ms <= sh.clock.now_ms() {
            return Err(EngineError::Expired);
        }
        self.read_located(key, &put, expiry_ms, &seg, with_data)
    }

    /// Reads the put record `put` of `key` from `seg` (taken under the same
    /// state lock as `put`, so a compaction in between cannot move it); a
    /// record that fails its checks is quarantined.
    pub(crate) fn read_located(&self, key: &Key, put: &Located, expiry_ms: u64, seg: &Arc<Segment>, with_data: bool) -> Result<BlobRecord> {
        match self.read_put(key, put, expiry_ms, seg, with_data) {
            Err(e @ EngineError::Corrupt { .. }) => Err(self.shared.quarantine(seg, put.entry.record_offset, put.entry.record_len as u64, Some(key), &e)),
            r => r,
        }
    }

    /// Reads the put record `put` of `key`. Its CRC is checked whenever
    /// the configuration asks, data or not, so a HEAD of a damaged blob
    /// fails like its GET (bytes from the tail cache are the ones this
    /// store wrote, and are not checked again).
    fn read_put(&self, key: &Key, put: &Located, expiry_ms: u64, seg: &Arc<Segment>, with_data: bool) -> Result<BlobRecord> {
        let e = &put.entry;
        let verify = self.shared.config.verify_crc_on_read;
        // A recent large record is read from the tail cache (tail.rs): the
        // bytes this store wrote to the disk from that memory, so their CRC
        // guards nothing a read could catch.
        let at = (self.shared.partition, seg.id, seg.generation, e.record_offset);
        let tail = self.shared.tail.as_ref().filter(|_| with_data && e.record_len >= TAIL_RECORD_BYTES);
        let from_tail = tail.and_then(|t| t.get(&at)).filter(|b| b.len() == e.record_len as usize).map(|b| (b, Source::Tail));
        // A large record outside the page cache is read past it (direct.rs),
        // into the tail cache when it has room, so that reading it again
        // costs no disk read; its CRC is checked before any reader sees it.
        let direct = match from_tail {
            Some(hit) => Some(hit),
            None if with_data && e.record_len >= DIRECT_READ_BYTES && !seg.resident(e.record_offset, e.record_len as u64) => {
                let check = |b: &[u8]| strata_format::record::decode(b, verify).map(drop).map_err(|err| seg.corrupt(e.record_offset, err));
                match tail.and_then(|t| seg.read_direct_into_tail(t, at, e.record_offset, e.record_len as u64, check)) {
                    Some(filled) => Some((filled?, Source::Filled)),
                    None => seg.read_direct(&self.shared.direct, e.record_offset, e.record_len as u64).transpose()?.map(|b| (b, Source::Disk)),
                }
            }
            None => None,
        };
        if direct.is_none() && with_data && e.record_len >= WILL_NEED_BYTES {
            seg.will_need(e.record_offset, e.record_len as u64);
        }
        let rec = match &direct {
            Some((buf, source)) => strata_format::record::decode(buf, verify && *source == Source::Disk).map_err(|err| seg.corrupt(e.record_offset, err))?,
            None => seg.record_at(e.record_offset, e.record_len, verify)?,
        };
        if rec.key != *key || rec.kind != RecordKind::Put {
            return Err(
                seg.corrupt(e.record_offset, strata_format::FormatError::Invalid { what: "indexed record", detail: "key or kind differs from index".into() })
            );
        }
        let data_start = e.record_offset + rec.data_offset as u64;
        let (data, file_range) = match direct {
            Some((buf, source)) => {
                let s = &self.shared.stats;
                let (n, bytes) = if source == Source::Tail { (&s.tail_cache_hits, &s.tail_cache_hit_bytes) } else { (&s.direct_reads, &s.direct_read_bytes) };
                n.fetch_add(1, Ordering::Relaxed);
                bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
                if source == Source::Filled {
                    s.tail_cache_fills.fetch_add(1, Ordering::Relaxed);
                }
                let at = rec.data_offset as usize;
                // No sendfile: the bytes are in our buffer, not the page cache.
                (buf.slice(at..at + rec.data_len as usize), None)
            }
            None if with_data => (segment_bytes(seg, data_start, rec.data_len), Some(FileRange::new(seg, data_start, rec.data_len))),
            None => (Bytes::new(), None),
        };
        Ok(BlobRecord {
            key: key.clone(),
            props: rec.props.unwrap_or_default(),
            created_ms: rec.time_ms,
            expiry_ms,
            size: rec.data_len,
            data,
            file_range,
            actor: rec.actor,
        })
    }

    /// Reads a live blob: its properties and a zero-copy view of its data.
    pub fn get(&self, key: &Key) -> Result<BlobRecord> {
        self.read(key, true)
    }

    /// Reads a live blob's properties without its data.
    pub fn info(&self, key: &Key) -> Result<BlobRecord> {
        self.read(key, false)
    }

    /// Every key the index knows with its state. For admin tools and checkers;
    /// costs a walk of the whole index.
    pub fn keys(&self) -> Result<Vec<(Key, KeyState)>> {
        let st = self.shared.read_state();
        let mut keys = std::collections::BTreeSet::new();
        keys.extend(st.memtable.iter().map(|l| l.entry.key.clone()));
        for f in &st.index_files {
            keys.extend(f.entries()?.into_iter().map(|e| e.key));
        }
        Ok(keys
            .into_iter()
            .map(|k| {
                let s = st.lookup(&k);
                (k, s)
            })
            .collect())
    }

    /// Records after sequence number `after` from the journal, or `None` when
    /// the journal no longer reaches back that far.
    pub fn journal_since(&self, after: u64, max: usize) -> Option<Vec<JournalEntry>> {
        self.shared.read_state().journal.since(after, max)
    }

    /// The first lsn the journal holds every record from (older records
    /// are only in the log and the index).
    pub fn journal_reach(&self) -> u64 {
        self.shared.read_state().journal.reach()
    }

    /// Settles the damaged ranges found before `before_ms`: a comparison with
    /// a peer replica (scrub) since then brought every key here to the
    /// peer's state, so what they may have hidden (other keys' deletes) is
    /// known again. Ranges that name a key keep blocking that key.
    pub fn settle_damage(&self, before_ms: u64) -> Result<bool> {
        self.shared.damage.settle(&self.shared.dir, before_ms)
    }

    /// Whether this replica's copy of `key` is quarantined.
    pub fn is_damaged(&self, key: &Key) -> bool {
        self.shared.damage.has_key(key)
    }

    /// The quarantined ranges of this replica's log, awaiting repair.
    pub fn damage(&self) -> Vec<strata_format::DamagedRange> {
        self.shared.damage.ranges()
    }

    /// A status summary.
    pub fn status(&self) -> ReplicaStatus {
        let (damaged_ranges, damaged_unknown) = self.shared.damage.counts();
        let st = self.shared.read_state();
        let ro = match self.shared.read_only.load(Ordering::Relaxed) {
            1 => Some(ReadOnlyReason::Capacity),
            2 => Some(ReadOnlyReason::DiskFull),
            3 => Some(ReadOnlyReason::IoFailed),
            _ => None,
        };
        ReplicaStatus {
            partition: self.partition(),
            used_bytes: st.used_bytes,
            capacity_bytes: self.shared.meta.capacity_bytes,
            read_only: ro,
            segments: st.segments.len(),
            index_files: st.index_files.len(),
            memtable_entries: st.memtable.len(),
            next_lsn: st.next_lsn,
            damaged_ranges,
            damaged_unknown,
        }
    }

    /// Re-evaluates whether puts are accepted (capacity, free space), so a
    /// replica that was full becomes writable again once space is freed.
    pub fn refresh_read_only(&self) -> Option<ReadOnlyReason> {
        self.shared.compute_read_only(true)
    }

    /// True if puts are currently accepted (as last evaluated).
    pub fn is_writable(&self) -> bool {
        self.shared.read_only.load(Ordering::Relaxed) == 0
    }

    /// Stops the writer after it drains queued writes, and persists the
    /// memtable so the next open need not rebuild it. Idempotent.
    pub fn close(&self) {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.join();
        }
    }

    /// Stops the writer without persisting the memtable: what a crash leaves
    /// behind, for recovery tests.
    pub fn close_without_flush(&self) {
        self.shared.flush_on_close.store(false, Ordering::SeqCst);
        self.close();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.close();
    }
}

pub(crate) fn located(segment_id: u64, offset: u64, rec: &strata_format::DecodedRecord) -> Located {
    Located {
        segment_id,
        entry: strata_format::IndexEntry {
            key: rec.key.clone(),
            kind: rec.kind,
            expiry_ms: rec.expiry_ms,
            lsn: rec.lsn,
            record_offset: offset,
            record_len: rec.total_len,
            data_offset: rec.data_offset,
        },
    }
}

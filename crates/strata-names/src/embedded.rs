//! The single-node name index: the state in memory, every op appended to
//! `names.log` and fsync'd before it is acknowledged (group commit: one
//! fdatasync covers every op written before it started), and a snapshot
//! (`names.snap`) that absorbs the log once it grows past a limit. The fold
//! runs beside the writes: the full log is set aside as `names.old`, a new
//! `names.log` takes the next ops at once, and a background thread replays
//! `names.old` onto the last snapshot, writes the new one and removes
//! `names.old` (so no request waits while the whole state is serialized).
//! All three files are sequences of checksummed frames (docs/formats.md,
//! "Name index"); recovery loads the snapshot, replays `names.old` and then
//! `names.log` by lsn, and cuts a torn tail.

use crate::{NameError, NameIndex, NameOp, NameState, Outcome};
use futures_util::future::BoxFuture;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use strata_format::frame::{decode_frame, encode_frame, frame_len};
use strata_fs::{replace_file as write_atomic, zero_fill_ahead};

/// Frame kind of a log record: postcard `(lsn: u64, op: NameOp)`.
pub const KIND_NAME_OP: u16 = 0x40;
/// Frame kind of the snapshot: postcard `(lsn: u64, state: NameState)`.
pub const KIND_NAME_SNAPSHOT: u16 = 0x41;
/// The log is folded into a new snapshot past this size.
const LOG_BYTES_MAX: u64 = 64 << 20;

const SNAP: &str = "names.snap";
const OLD: &str = "names.old";
const LOG: &str = "names.log";

struct Log {
    file: Arc<File>,
    lsn: u64,
    /// End of the last frame.
    bytes: u64,
    /// Length of the file: `[bytes, zeroed)` is zeros.
    zeroed: u64,
}

impl Log {
    /// Writes `frame` at the end, into space zero-filled ahead so its
    /// fdatasync needs no journal commit ([`zero_fill_ahead`]).
    fn write(&mut self, frame: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let end = self.bytes + frame.len() as u64;
        self.zeroed = zero_fill_ahead(&self.file, self.zeroed, end, u64::MAX);
        self.file.write_all_at(frame, self.bytes)?;
        self.bytes = end;
        Ok(())
    }
}

/// The embedded index; see the module docs.
pub struct EmbeddedIndex {
    dir: PathBuf,
    state: RwLock<NameState>,
    log: Mutex<Log>,
    /// Highest lsn written to the log file (maybe not yet durable).
    written: AtomicU64,
    /// Highest lsn known durable.
    durable: AtomicU64,
    sync: tokio::sync::Mutex<()>,
    poisoned: AtomicBool,
    /// Log size past which it is folded.
    fold_bytes: u64,
    /// A fold is running (or failed: then the log grows until a restart
    /// folds it).
    folding: Arc<AtomicBool>,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> NameError {
    NameError::Unavailable(format!("{what} {}: {e}", path.display()))
}

impl EmbeddedIndex {
    /// Opens (or creates) the index in `dir`, recovering from a crash.
    pub fn open(dir: &Path) -> Result<Self, NameError> {
        Self::open_with(dir, LOG_BYTES_MAX)
    }

    /// [`Self::open`], folding the log past `fold_bytes`.
    pub fn open_with(dir: &Path, fold_bytes: u64) -> Result<Self, NameError> {
        std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
        let (mut lsn, mut state) = read_snapshot(dir)?;
        // A fold cut short by a crash left its log aside: its records come
        // before the current log's.
        let old_path = dir.join(OLD);
        let had_old = match std::fs::read(&old_path) {
            Ok(b) => {
                replay(&b, &old_path, &mut lsn, &mut state)?;
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(io("reading", &old_path, e)),
        };
        let log_path = dir.join(LOG);
        let bytes = match std::fs::read(&log_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io("reading", &log_path, e)),
        };
        let (off, replayed) = replay(&bytes, &log_path, &mut lsn, &mut state)?;
        // Zeros after the last frame are the zero-filled space ahead (see
        // zero_fill_ahead); anything else there is a torn tail.
        if bytes[off..].iter().any(|b| *b != 0) {
            tracing::warn!(path = %log_path.display(), valid = off, len = bytes.len(), "cutting a torn tail off the name log");
        }
        let file = OpenOptions::new().create(true).write(true).truncate(false).open(&log_path).map_err(|e| io("opening", &log_path, e))?;
        file.set_len(off as u64).map_err(|e| io("truncating", &log_path, e))?;
        file.sync_all().map_err(|e| io("syncing", &log_path, e))?;
        tracing::debug!(lsn, replayed, "name index open");
        let index = Self {
            dir: dir.to_path_buf(),
            state: RwLock::new(state),
            log: Mutex::new(Log { file: Arc::new(file), lsn, bytes: off as u64, zeroed: off as u64 }),
            written: AtomicU64::new(lsn),
            durable: AtomicU64::new(lsn),
            sync: tokio::sync::Mutex::new(()),
            poisoned: AtomicBool::new(false),
            fold_bytes,
            folding: Arc::new(AtomicBool::new(false)),
        };
        // At startup a fold runs in line: nothing waits on it yet.
        if had_old {
            fold_files(dir)?;
        }
        if off as u64 > fold_bytes {
            let mut log = index.log.lock().map_err(|_| NameError::Unavailable("log lock poisoned".into()))?;
            index.set_aside(&mut log)?;
            drop(log);
            fold_files(dir)?;
            index.folding.store(false, Ordering::SeqCst);
        }
        Ok(index)
    }

    fn poison(&self, e: NameError) -> NameError {
        self.poisoned.store(true, Ordering::SeqCst);
        tracing::error!(error = %e, "the name index stops taking writes");
        e
    }

    // Validates, applies and writes `op` (not yet durable); returns its lsn.
    fn append(&self, op: NameOp) -> Result<(u64, Outcome), NameError> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(NameError::Unavailable("an earlier write failed; restart the server".into()));
        }
        let mut log = self.log.lock().map_err(|_| NameError::Unavailable("log lock poisoned".into()))?;
        let lsn = log.lsn + 1;
        let frame = encode_frame(KIND_NAME_OP, &postcard::to_allocvec(&(lsn, &op)).map_err(|e| NameError::Unavailable(e.to_string()))?);
        let out = {
            let mut state = self.state.write().map_err(|_| NameError::Unavailable("state lock poisoned".into()))?;
            state.apply(op)?
        };
        // The state has changed: from here a failure to log it is fatal.
        if let Err(e) = log.write(&frame) {
            return Err(self.poison(io("writing", &self.dir.join(LOG), e)));
        }
        log.lsn = lsn;
        self.written.store(lsn, Ordering::SeqCst);
        if log.bytes > self.fold_bytes && !self.folding.load(Ordering::SeqCst) {
            self.set_aside(&mut log).map_err(|e| self.poison(e))?;
            self.spawn_fold();
        }
        Ok((lsn, out))
    }

    /// Sets the full log aside as `names.old` and starts an empty
    /// `names.log`, marking a fold as running. The old log is made durable
    /// first: the group commit syncs only the current file.
    fn set_aside(&self, log: &mut Log) -> Result<(), NameError> {
        self.folding.store(true, Ordering::SeqCst);
        let (old, path) = (self.dir.join(OLD), self.dir.join(LOG));
        log.file.sync_data().map_err(|e| io("syncing", &path, e))?;
        self.durable.fetch_max(log.lsn, Ordering::SeqCst);
        std::fs::rename(&path, &old).map_err(|e| io("renaming", &path, e))?;
        let file = OpenOptions::new().create_new(true).write(true).open(&path).map_err(|e| io("creating", &path, e))?;
        strata_fs::fsync_dir(&self.dir).map_err(|e| NameError::Unavailable(e.to_string()))?;
        log.file = Arc::new(file);
        log.bytes = 0;
        log.zeroed = 0;
        Ok(())
    }

    /// Folds `names.old` into the snapshot on a thread of its own.
    fn spawn_fold(&self) {
        let (dir, folding) = (self.dir.clone(), self.folding.clone());
        let spawned = std::thread::Builder::new().name("strata-names-fold".into()).spawn(move || match fold_files(&dir) {
            Ok(()) => folding.store(false, Ordering::SeqCst),
            // `folding` stays set: the log grows until a restart folds it.
            Err(e) => tracing::error!(error = %e, "could not fold the name log into a snapshot; it keeps growing until a restart"),
        });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "could not start the name log fold; the log keeps growing until a restart");
        }
    }

    /// Whether a fold is running (tests wait for it).
    #[cfg(test)]
    fn folding(&self) -> bool {
        self.folding.load(Ordering::SeqCst)
    }

    // Returns once `lsn` is durable; concurrent callers share one fdatasync.
    async fn sync_to(&self, lsn: u64) -> Result<(), NameError> {
        if self.durable.load(Ordering::SeqCst) >= lsn {
            return Ok(());
        }
        let _turn = self.sync.lock().await;
        if self.durable.load(Ordering::SeqCst) >= lsn {
            return Ok(());
        }
        let (file, upto) = {
            let log = self.log.lock().map_err(|_| NameError::Unavailable("log lock poisoned".into()))?;
            (log.file.clone(), self.written.load(Ordering::SeqCst))
        };
        let done = tokio::task::spawn_blocking(move || file.sync_data()).await;
        match done {
            Ok(Ok(())) => {
                self.durable.fetch_max(upto, Ordering::SeqCst);
                Ok(())
            }
            Ok(Err(e)) => Err(self.poison(io("syncing", &self.dir.join(LOG), e))),
            Err(e) => Err(self.poison(NameError::Unavailable(format!("sync task: {e}")))),
        }
    }
}

/// The snapshot's lsn and state (0 and empty without one).
fn read_snapshot(dir: &Path) -> Result<(u64, NameState), NameError> {
    let snap_path = dir.join(SNAP);
    match std::fs::read(&snap_path) {
        Ok(b) => {
            let (kind, payload) = decode_frame(&b).map_err(|e| NameError::Unavailable(format!("{}: {e}", snap_path.display())))?;
            if kind != KIND_NAME_SNAPSHOT {
                return Err(NameError::Unavailable(format!("{}: frame kind {kind} is not a name snapshot", snap_path.display())));
            }
            NameState::decode_with_lsn(payload).map_err(|e| NameError::Unavailable(format!("{}: {e}", snap_path.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((0, NameState::default())),
        Err(e) => Err(io("reading", &snap_path, e)),
    }
}

/// Replays the whole, valid frames of a log whose lsn is above `lsn`; the
/// first torn one (incomplete, or failing its CRC) ends the log (an op is
/// acknowledged only after its frame is durable, so a bad tail was never
/// acknowledged). Returns where the valid frames end and how many were
/// applied.
fn replay(bytes: &[u8], path: &Path, lsn: &mut u64, state: &mut NameState) -> Result<(usize, u64), NameError> {
    let mut off = 0usize;
    let mut replayed = 0u64;
    while off < bytes.len() {
        let Ok(n) = frame_len(&bytes[off..]) else { break };
        if off + n > bytes.len() {
            break;
        }
        // A bad checksum is a torn (never acknowledged) tail. A whole frame
        // that does not decode was written by a newer Strata (a new op):
        // cutting it would lose every op after it, so refuse to start.
        let Ok((kind, payload)) = decode_frame(&bytes[off..off + n]) else { break };
        let newer = |what: &str| NameError::Unavailable(format!("{}: {what} at byte {off}; was it written by a newer Strata?", path.display()));
        if kind != KIND_NAME_OP {
            return Err(newer(&format!("frame kind {kind:#x}")));
        }
        let (rec_lsn, op) = postcard::from_bytes::<(u64, NameOp)>(payload).map_err(|e| newer(&format!("a name op that does not decode ({e})")))?;
        if rec_lsn > *lsn {
            if let Err(e) = state.apply(op) {
                return Err(NameError::Unavailable(format!("{}: record {rec_lsn} does not replay: {e}", path.display())));
            }
            *lsn = rec_lsn;
            replayed += 1;
        }
        off += n;
    }
    Ok((off, replayed))
}

/// Folds `names.old` into `names.snap`: replays it onto the snapshot,
/// replaces the snapshot atomically, then removes `names.old`. A crash
/// before the replacement leaves both as they were; after it, the old
/// log's records are at or below the snapshot's lsn and replay as nothing.
fn fold_files(dir: &Path) -> Result<(), NameError> {
    let old = dir.join(OLD);
    let (mut lsn, mut state) = read_snapshot(dir)?;
    let bytes = std::fs::read(&old).map_err(|e| io("reading", &old, e))?;
    replay(&bytes, &old, &mut lsn, &mut state)?;
    let payload = postcard::to_allocvec(&(lsn, &state)).map_err(|e| NameError::Unavailable(e.to_string()))?;
    write_atomic(&dir.join(SNAP), &encode_frame(KIND_NAME_SNAPSHOT, &payload)).map_err(|e| NameError::Unavailable(e.to_string()))?;
    std::fs::remove_file(&old).map_err(|e| io("removing", &old, e))?;
    strata_fs::fsync_dir(dir).map_err(|e| NameError::Unavailable(e.to_string()))?;
    tracing::debug!(lsn, "name log folded into a snapshot");
    Ok(())
}

impl NameIndex for EmbeddedIndex {
    fn apply(&self, op: NameOp) -> BoxFuture<'_, Result<Outcome, NameError>> {
        Box::pin(async move {
            let (lsn, out) = self.append(op)?;
            self.sync_to(lsn).await?;
            Ok(out)
        })
    }

    fn barrier(&self) -> BoxFuture<'_, Result<(), NameError>> {
        Box::pin(async { Ok(()) })
    }

    fn state(&self) -> &RwLock<NameState> {
        &self.state
    }

    fn kind(&self) -> &'static str {
        "embedded"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObjectMeta;
    use strata_types::{BlobId, BlobKind};

    fn put(key: &str, n: u8) -> NameOp {
        let object = ObjectMeta {
            blob: BlobId::from_parts(BlobKind::Simple, 0, [n; 16]),
            size: u64::from(n),
            etag: format!("{n}"),
            content_type: String::new(),
            meta: vec![],
            modified_ms: 5,
            expiry_ms: 0,
            parts: 0,
        };
        NameOp::PutObject { bucket: "b".into(), key: key.into(), object, if_absent: false }
    }

    /// Creates bucket `b`, which every test here starts with.
    fn create_b() -> NameOp {
        NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }
    }

    #[tokio::test]
    async fn reopening_replays_the_log_and_cuts_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let whole = {
            let ix = EmbeddedIndex::open(dir.path()).unwrap();
            ix.apply(create_b()).await.unwrap();
            for n in 0..50u8 {
                ix.apply(put(&format!("k{n}"), n)).await.unwrap();
            }
            assert!(ix.apply(NameOp::DeleteBucket { name: "b".into(), now_ms: 2 }).await.is_err());
            ix.log.lock().unwrap().bytes as usize
        };
        // The file is zero-filled past the last record.
        let log = dir.path().join("names.log");
        let mut bytes = std::fs::read(&log).unwrap();
        assert_eq!(bytes.len() as u64, strata_fs::ZERO_STEP);
        assert!(bytes[whole..].iter().all(|b| *b == 0));
        // A torn record at the end, as a crash mid-write leaves it.
        let extra = encode_frame(KIND_NAME_OP, &postcard::to_allocvec(&(999u64, put("torn", 1))).unwrap());
        bytes[whole..whole + extra.len() - 3].copy_from_slice(&extra[..extra.len() - 3]);
        std::fs::write(&log, &bytes).unwrap();
        let ix = EmbeddedIndex::open(dir.path()).unwrap();
        assert_eq!(std::fs::metadata(&log).unwrap().len(), whole as u64);
        {
            let s = ix.state().read().unwrap();
            assert_eq!(s.buckets["b"].objects.len(), 50);
            assert!(!s.buckets["b"].objects.contains_key("torn"));
        }
        // Appends go on at the end of the records, over the cut tail.
        ix.apply(put("after", 7)).await.unwrap();
        drop(ix);
        let ix = EmbeddedIndex::open(dir.path()).unwrap();
        let s = ix.state().read().unwrap();
        assert_eq!(s.buckets["b"].objects.len(), 51);
        assert!(s.buckets["b"].objects.contains_key("after"));
    }

    fn snapshot_lsn(dir: &Path) -> u64 {
        read_snapshot(dir).unwrap().0
    }

    async fn wait_for_fold(ix: &EmbeddedIndex) {
        for _ in 0..500 {
            if !ix.folding() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the fold did not finish");
    }

    /// An index with a bucket and one object whose log was just set aside.
    async fn one_op_set_aside() -> (tempfile::TempDir, EmbeddedIndex) {
        let dir = tempfile::tempdir().unwrap();
        let ix = EmbeddedIndex::open(dir.path()).unwrap();
        ix.apply(create_b()).await.unwrap();
        ix.apply(put("a", 1)).await.unwrap();
        ix.set_aside(&mut ix.log.lock().unwrap()).unwrap();
        (dir, ix)
    }

    #[tokio::test]
    async fn a_snapshot_and_the_logs_after_it_give_the_same_state() {
        // A fold in the background, while more ops arrive.
        let (dir, ix) = one_op_set_aside().await;
        ix.spawn_fold();
        ix.apply(put("b", 2)).await.unwrap();
        wait_for_fold(&ix).await;
        assert!(!dir.path().join(OLD).exists());
        assert_eq!(snapshot_lsn(dir.path()), 2);
        ix.apply(put("a", 3)).await.unwrap();
        let want = ix.state().read().unwrap().clone();
        drop(ix);
        let ix = EmbeddedIndex::open(dir.path()).unwrap();
        assert_eq!(*ix.state().read().unwrap(), want);
    }

    #[tokio::test]
    async fn a_fold_cut_short_by_a_crash_loses_nothing() {
        // The log set aside, and the process dies before the fold runs.
        let (dir, ix) = one_op_set_aside().await;
        ix.apply(put("b", 2)).await.unwrap();
        let want = ix.state().read().unwrap().clone();
        drop(ix);
        let old = std::fs::read(dir.path().join(OLD)).unwrap();
        // Reopening replays names.old then names.log, and folds names.old.
        let ix = EmbeddedIndex::open(dir.path()).unwrap();
        assert_eq!(*ix.state().read().unwrap(), want);
        assert!(!dir.path().join(OLD).exists());
        assert_eq!(snapshot_lsn(dir.path()), 2);
        drop(ix);
        // Dying after the new snapshot, before names.old is removed: its
        // records are at or below the snapshot's lsn and replay as nothing.
        std::fs::write(dir.path().join(OLD), &old).unwrap();
        let ix = EmbeddedIndex::open(dir.path()).unwrap();
        assert_eq!(*ix.state().read().unwrap(), want);
        assert!(!dir.path().join(OLD).exists());
    }

    #[tokio::test]
    async fn folds_run_beside_concurrent_writes_and_lose_none() {
        let dir = tempfile::tempdir().unwrap();
        let ix = Arc::new(EmbeddedIndex::open_with(dir.path(), 8 << 10).unwrap());
        ix.apply(create_b()).await.unwrap();
        let tasks: Vec<_> = (0..8u8)
            .map(|t| {
                let ix = ix.clone();
                tokio::spawn(async move {
                    for n in 0..100u8 {
                        ix.apply(put(&format!("t{t}/k{n}"), n)).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        wait_for_fold(&ix).await;
        // 800 ops of ~60 bytes past an 8 KiB limit: several folds ran.
        assert!(snapshot_lsn(dir.path()) > 100, "no fold ran");
        let want = ix.state().read().unwrap().clone();
        assert_eq!(want.buckets["b"].objects.len(), 800);
        drop(ix);
        let ix = EmbeddedIndex::open(dir.path()).unwrap();
        assert_eq!(*ix.state().read().unwrap(), want);
    }

    #[tokio::test]
    async fn a_whole_frame_that_does_not_decode_stops_recovery_instead_of_cutting() {
        let dir = tempfile::tempdir().unwrap();
        let end = {
            let ix = EmbeddedIndex::open(dir.path()).unwrap();
            ix.apply(create_b()).await.unwrap();
            ix.apply(put("a", 1)).await.unwrap();
            ix.log.lock().unwrap().bytes as usize
        };
        // A frame with a good CRC and an op this version does not know
        // (variant 200), then a good op after it.
        let log = dir.path().join(LOG);
        let mut bytes = std::fs::read(&log).unwrap();
        bytes.truncate(end);
        bytes.extend(encode_frame(KIND_NAME_OP, &[3, 200, 1, 2, 3]));
        bytes.extend(encode_frame(KIND_NAME_OP, &postcard::to_allocvec(&(4u64, put("c", 3))).unwrap()));
        std::fs::write(&log, &bytes).unwrap();
        let err = EmbeddedIndex::open(dir.path()).err().expect("a frame it cannot read must stop recovery");
        assert!(err.to_string().contains("newer Strata"), "{err}");
        assert_eq!(std::fs::read(&log).unwrap(), bytes, "nothing was cut");
    }

    #[tokio::test]
    async fn concurrent_writers_share_syncs_and_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let ix = Arc::new(EmbeddedIndex::open(dir.path()).unwrap());
        ix.apply(create_b()).await.unwrap();
        let tasks: Vec<_> = (0..64u8)
            .map(|n| {
                let ix = ix.clone();
                tokio::spawn(async move { ix.apply(put(&format!("k{n}"), n)).await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        drop(ix);
        let ix = EmbeddedIndex::open(dir.path()).unwrap();
        assert_eq!(ix.state().read().unwrap().buckets["b"].objects.len(), 64);
    }
}

//! The single-node name index: the state in memory, every op appended to
//! `names.log` and fsync'd before it is acknowledged (group commit: one
//! fdatasync covers every op written before it started), and a snapshot
//! (`names.snap`) that replaces the log once it grows past a limit. Both
//! files are sequences of checksummed frames (docs/formats.md, "Name
//! index"); recovery loads the snapshot, replays the log records after it,
//! and cuts a torn tail.

use crate::{NameError, NameIndex, NameOp, NameState, Outcome};
use futures_util::future::BoxFuture;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use strata_engine::fsutil::{write_atomic, zero_fill_ahead};
use strata_format::frame::{decode_frame, encode_frame, frame_len};

/// Frame kind of a log record: postcard `(lsn: u64, op: NameOp)`.
pub const KIND_NAME_OP: u16 = 0x40;
/// Frame kind of the snapshot: postcard `(lsn: u64, state: NameState)`.
pub const KIND_NAME_SNAPSHOT: u16 = 0x41;
/// The log is folded into a new snapshot past this size.
const LOG_BYTES_MAX: u64 = 64 << 20;

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
        self.zeroed = zero_fill_ahead(&self.file, self.zeroed, end, u64::MAX)?;
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
}

fn io(what: &str, path: &Path, e: std::io::Error) -> NameError {
    NameError::Unavailable(format!("{what} {}: {e}", path.display()))
}

impl EmbeddedIndex {
    /// Opens (or creates) the index in `dir`, recovering from a crash.
    pub fn open(dir: &Path) -> Result<Self, NameError> {
        std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
        let snap_path = dir.join("names.snap");
        let (mut lsn, mut state) = match std::fs::read(&snap_path) {
            Ok(b) => {
                let (kind, payload) = decode_frame(&b).map_err(|e| NameError::Unavailable(format!("{}: {e}", snap_path.display())))?;
                if kind != KIND_NAME_SNAPSHOT {
                    return Err(NameError::Unavailable(format!("{}: frame kind {kind} is not a name snapshot", snap_path.display())));
                }
                postcard::from_bytes::<(u64, NameState)>(payload).map_err(|e| NameError::Unavailable(format!("{}: {e}", snap_path.display())))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (0, NameState::default()),
            Err(e) => return Err(io("reading", &snap_path, e)),
        };
        let log_path = dir.join("names.log");
        let bytes = match std::fs::read(&log_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io("reading", &log_path, e)),
        };
        // Replay whole, valid frames; the first torn or corrupt one ends the
        // log (an op is acknowledged only after its frame is durable, so a
        // bad tail was never acknowledged).
        let mut off = 0usize;
        let mut replayed = 0u64;
        while off < bytes.len() {
            let Ok(n) = frame_len(&bytes[off..]) else { break };
            if off + n > bytes.len() {
                break;
            }
            let Ok((KIND_NAME_OP, payload)) = decode_frame(&bytes[off..off + n]) else { break };
            let Ok((rec_lsn, op)) = postcard::from_bytes::<(u64, NameOp)>(payload) else { break };
            if rec_lsn > lsn {
                if let Err(e) = state.apply(op) {
                    return Err(NameError::Unavailable(format!("{}: record {rec_lsn} does not replay: {e}", log_path.display())));
                }
                lsn = rec_lsn;
                replayed += 1;
            }
            off += n;
        }
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
        };
        if off as u64 > LOG_BYTES_MAX {
            let mut log = index.log.lock().map_err(|_| NameError::Unavailable("log lock poisoned".into()))?;
            index.fold(&mut log)?;
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
            return Err(self.poison(io("writing", &self.dir.join("names.log"), e)));
        }
        log.lsn = lsn;
        self.written.store(lsn, Ordering::SeqCst);
        if log.bytes > LOG_BYTES_MAX {
            self.fold(&mut log).map_err(|e| self.poison(e))?;
        }
        Ok((lsn, out))
    }

    // Writes the state as a snapshot and starts an empty log.
    fn fold(&self, log: &mut Log) -> Result<(), NameError> {
        let bytes = {
            let state = self.state.read().map_err(|_| NameError::Unavailable("state lock poisoned".into()))?;
            postcard::to_allocvec(&(log.lsn, &*state)).map_err(|e| NameError::Unavailable(e.to_string()))?
        };
        let snap = self.dir.join("names.snap");
        write_atomic(&snap, &encode_frame(KIND_NAME_SNAPSHOT, &bytes)).map_err(|e| NameError::Unavailable(e.to_string()))?;
        // The snapshot holds every record; a crash before the log is emptied
        // replays none of them (their lsns are not above the snapshot's).
        let path = self.dir.join("names.log");
        write_atomic(&path, &[]).map_err(|e| NameError::Unavailable(e.to_string()))?;
        log.file = Arc::new(OpenOptions::new().write(true).open(&path).map_err(|e| io("opening", &path, e))?);
        log.bytes = 0;
        log.zeroed = 0;
        self.durable.fetch_max(log.lsn, Ordering::SeqCst);
        Ok(())
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
            Ok(Err(e)) => Err(self.poison(io("syncing", &self.dir.join("names.log"), e))),
            Err(e) => Err(self.poison(NameError::Unavailable(format!("sync task: {e}")))),
        }
    }
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

    #[tokio::test]
    async fn reopening_replays_the_log_and_cuts_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let whole = {
            let ix = EmbeddedIndex::open(dir.path()).unwrap();
            ix.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).await.unwrap();
            for n in 0..50u8 {
                ix.apply(put(&format!("k{n}"), n)).await.unwrap();
            }
            assert!(ix.apply(NameOp::DeleteBucket { name: "b".into(), now_ms: 2 }).await.is_err());
            ix.log.lock().unwrap().bytes as usize
        };
        // The file is zero-filled past the last record.
        let log = dir.path().join("names.log");
        let mut bytes = std::fs::read(&log).unwrap();
        assert_eq!(bytes.len() as u64, strata_engine::fsutil::ZERO_STEP);
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

    #[tokio::test]
    async fn a_snapshot_and_the_log_after_it_give_the_same_state() {
        let dir = tempfile::tempdir().unwrap();
        let ix = EmbeddedIndex::open(dir.path()).unwrap();
        ix.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).await.unwrap();
        ix.apply(put("a", 1)).await.unwrap();
        {
            let mut log = ix.log.lock().unwrap();
            ix.fold(&mut log).unwrap();
        }
        ix.apply(put("b", 2)).await.unwrap();
        ix.apply(put("a", 3)).await.unwrap();
        let want = ix.state().read().unwrap().clone();
        drop(ix);
        // Also a crash between writing the snapshot and emptying the log:
        // records the snapshot holds are skipped by lsn.
        let ix = EmbeddedIndex::open(dir.path()).unwrap();
        assert_eq!(*ix.state().read().unwrap(), want);
        let snap = std::fs::read(dir.path().join("names.snap")).unwrap();
        let (_, payload) = decode_frame(&snap).unwrap();
        let (lsn, _): (u64, NameState) = postcard::from_bytes(payload).unwrap();
        assert_eq!(lsn, 2);
    }

    #[tokio::test]
    async fn concurrent_writers_share_syncs_and_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let ix = Arc::new(EmbeddedIndex::open(dir.path()).unwrap());
        ix.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).await.unwrap();
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

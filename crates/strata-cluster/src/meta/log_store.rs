//! The Raft log and vote on disk.
//!
//! `raft-log` holds entries as frames back to back; a torn tail is cut off on
//! open. `raft-vote`, `raft-purged` and `raft-committed` are single frames
//! replaced atomically. Entries are fsync'd before openraft hears they are
//! flushed, and the vote before `save_vote` returns.

use super::TypeConfig;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, Entry, LogId, RaftLogReader, StorageError, StorageIOError, Vote};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use strata_format::frame::{decode_frame, encode_frame, frame_len};
use strata_fs::replace_file as write_atomic;
use tokio::sync::Mutex;

const KIND_ENTRY: u16 = 1;
const KIND_VOTE: u16 = 2;
const KIND_PURGED: u16 = 3;
const KIND_COMMITTED: u16 = 4;

type SErr = StorageError<u64>;

fn io_err(e: impl std::error::Error + 'static) -> AnyError {
    AnyError::new(&e)
}

struct Inner {
    dir: PathBuf,
    file: File,
    file_len: u64,
    /// Index -> (entry, offset of its frame in the file).
    entries: BTreeMap<u64, (Entry<TypeConfig>, u64)>,
    last_purged: Option<LogId<u64>>,
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
}

/// The log store; clones share one log.
#[derive(Clone)]
pub struct LogStore(Arc<Mutex<Inner>>);

fn read_single<T: serde::de::DeserializeOwned>(path: &Path, kind: u16) -> std::io::Result<Option<T>> {
    let b = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = |d: String| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {d}", path.display()));
    let (k, payload) = decode_frame(&b).map_err(|e| bad(e.to_string()))?;
    if k != kind {
        return Err(bad(format!("frame kind {k}, expected {kind}")));
    }
    postcard::from_bytes(payload).map(Some).map_err(|e| bad(e.to_string()))
}

fn write_single<T: serde::Serialize>(path: &Path, kind: u16, v: &T) -> std::io::Result<()> {
    let payload = postcard::to_stdvec(v).map_err(std::io::Error::other)?;
    write_atomic(path, &encode_frame(kind, &payload))
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, cutting off a torn tail.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("raft-log");
        let mut file = OpenOptions::new().create(true).read(true).append(true).open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let last_purged: Option<LogId<u64>> = read_single(&dir.join("raft-purged"), KIND_PURGED)?;
        let mut entries = BTreeMap::new();
        let mut off = 0usize;
        while off < bytes.len() {
            let rest = &bytes[off..];
            let Ok(len) = frame_len(rest) else { break };
            if rest.len() < len {
                break;
            }
            let Ok((KIND_ENTRY, payload)) = decode_frame(&rest[..len]) else { break };
            let Ok(entry) = postcard::from_bytes::<Entry<TypeConfig>>(payload) else { break };
            // A truncate followed by appends leaves no stale frames (the file
            // is cut), so a later index always supersedes.
            if last_purged.is_none_or(|p| entry.log_id.index > p.index) {
                entries.insert(entry.log_id.index, (entry, off as u64));
            }
            off += len;
        }
        if off < bytes.len() {
            tracing::warn!(path = %path.display(), at = off, dropped = bytes.len() - off, "cutting a torn tail off the metadata log");
            file.set_len(off as u64)?;
            file.sync_all()?;
        }
        let vote = read_single(&dir.join("raft-vote"), KIND_VOTE)?;
        let committed = read_single::<Option<LogId<u64>>>(&dir.join("raft-committed"), KIND_COMMITTED)?.flatten();
        Ok(Self(Arc::new(Mutex::new(Inner { dir: dir.to_path_buf(), file, file_len: off as u64, entries, last_purged, vote, committed }))))
    }
}

impl Inner {
    /// Rewrites the log file with only the live entries (after purges).
    fn compact_file(&mut self) -> std::io::Result<()> {
        let path = self.dir.join("raft-log");
        let tmp = self.dir.join("raft-log.tmp");
        let mut out = Vec::new();
        let mut offsets = Vec::new();
        for (idx, (e, _)) in &self.entries {
            offsets.push((*idx, out.len() as u64));
            out.extend_from_slice(&encode_frame(KIND_ENTRY, &postcard::to_stdvec(e).map_err(std::io::Error::other)?));
        }
        let mut f = File::create(&tmp)?;
        f.write_all(&out)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        File::open(&self.dir)?.sync_all()?;
        self.file = OpenOptions::new().read(true).append(true).open(&path)?;
        self.file_len = out.len() as u64;
        for (idx, off) in offsets {
            if let Some(v) = self.entries.get_mut(&idx) {
                v.1 = off;
            }
        }
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + std::fmt::Debug + Send>(&mut self, range: RB) -> Result<Vec<Entry<TypeConfig>>, SErr> {
        let g = self.0.lock().await;
        Ok(g.entries.range(range).map(|(_, (e, _))| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, SErr> {
        let g = self.0.lock().await;
        let last = g.entries.values().next_back().map(|(e, _)| e.log_id).or(g.last_purged);
        Ok(LogState { last_purged_log_id: g.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), SErr> {
        let mut g = self.0.lock().await;
        write_single(&g.dir.join("raft-vote"), KIND_VOTE, vote).map_err(|e| StorageIOError::write_vote(io_err(e)))?;
        g.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, SErr> {
        Ok(self.0.lock().await.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), SErr> {
        let mut g = self.0.lock().await;
        write_single(&g.dir.join("raft-committed"), KIND_COMMITTED, &committed).map_err(|e| StorageIOError::write(io_err(e)))?;
        g.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, SErr> {
        Ok(self.0.lock().await.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), SErr>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut g = self.0.lock().await;
        let mut buf = Vec::new();
        let mut placed = Vec::new();
        for e in entries {
            let payload = postcard::to_stdvec(&e).map_err(|x| StorageIOError::write_logs(io_err(x)))?;
            placed.push((g.file_len + buf.len() as u64, e));
            buf.extend_from_slice(&encode_frame(KIND_ENTRY, &payload));
        }
        let r = g.file.write_all(&buf).and_then(|()| g.file.sync_data());
        if let Err(e) = r {
            let msg = e.to_string();
            callback.log_io_completed(Err(std::io::Error::other(msg.clone())));
            return Err(StorageIOError::write_logs(io_err(e)).into());
        }
        g.file_len += buf.len() as u64;
        for (off, e) in placed {
            g.entries.insert(e.log_id.index, (e, off));
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), SErr> {
        let mut g = self.0.lock().await;
        let Some(off) = g.entries.range(log_id.index..).next().map(|(_, (_, off))| *off) else { return Ok(()) };
        g.file.set_len(off).and_then(|()| g.file.sync_all()).map_err(|e| StorageIOError::write_logs(io_err(e)))?;
        g.file_len = off;
        g.entries.retain(|&i, _| i < log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), SErr> {
        let mut g = self.0.lock().await;
        write_single(&g.dir.join("raft-purged"), KIND_PURGED, &Some(log_id)).map_err(|e| StorageIOError::write_logs(io_err(e)))?;
        g.last_purged = Some(log_id);
        g.entries.retain(|&i, _| i > log_id.index);
        // Rewrite the file once purged frames fill most of it.
        let first_live = g.entries.values().next().map_or(g.file_len, |(_, off)| *off);
        if first_live > 1 << 20 && first_live * 2 > g.file_len {
            g.compact_file().map_err(|e| StorageIOError::write_logs(io_err(e)))?;
        }
        Ok(())
    }
}

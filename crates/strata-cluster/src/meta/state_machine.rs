//! The state machine: the cluster map and the S3 API's name state, rebuilt
//! from the log, snapshotted to `raft-snapshot` (a frame holding the
//! snapshot's meta, the encoded map and the encoded names). Every applied
//! map change is published on a watch channel for map readers, and the last
//! applied index on another, for reads that wait for their read index.

use super::TypeConfig;
use crate::codec::{decode_map, encode_map};
use crate::map::{ClusterMap, Outcome};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{AnyError, Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError, StoredMembership};
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use strata_format::frame::{decode_frame, encode_frame};
use strata_fs::replace_file as write_atomic;
use strata_names::NameState;
use tokio::sync::{Mutex, watch};

const KIND_SNAPSHOT: u16 = 5;
type SErr = StorageError<u64>;
type Meta = SnapshotMeta<u64, openraft::BasicNode>;

struct Inner {
    dir: PathBuf,
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
    map: ClusterMap,
    snapshot: Option<(Meta, Vec<u8>)>,
    builds: u64,
}

/// The map's state machine; clones share it.
#[derive(Clone)]
pub struct StateMachine {
    inner: Arc<Mutex<Inner>>,
    tx: Arc<watch::Sender<Arc<ClusterMap>>>,
    names: Arc<RwLock<NameState>>,
    applied: Arc<watch::Sender<u64>>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotFile {
    meta: Meta,
    map: Vec<u8>,
    /// postcard of the `NameState` (absent in snapshots written before S3).
    names: Vec<u8>,
}

#[derive(serde::Deserialize)]
struct SnapshotFileV1 {
    meta: Meta,
    map: Vec<u8>,
}

fn decode_snapshot(b: &[u8]) -> Result<(Meta, ClusterMap, NameState, Vec<u8>), String> {
    let (kind, payload) = decode_frame(b).map_err(|e| e.to_string())?;
    if kind != KIND_SNAPSHOT {
        return Err(format!("frame kind {kind} is not a snapshot"));
    }
    let f: SnapshotFile = match postcard::from_bytes(payload) {
        Ok(f) => f,
        Err(_) => {
            let old: SnapshotFileV1 = postcard::from_bytes(payload).map_err(|e| e.to_string())?;
            SnapshotFile { meta: old.meta, map: old.map, names: Vec::new() }
        }
    };
    let map = decode_map(&f.map).map_err(|e| e.to_string())?;
    let names = if f.names.is_empty() { NameState::default() } else { NameState::decode(&f.names).map_err(|e| format!("names: {e}"))? };
    Ok((f.meta, map, names, b.to_vec()))
}

impl StateMachine {
    /// Opens the state machine in `dir`, starting from its snapshot if any.
    pub fn open(dir: &std::path::Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            last_applied: None,
            membership: StoredMembership::default(),
            map: ClusterMap::default(),
            snapshot: None,
            builds: 0,
        };
        let mut names = NameState::default();
        match std::fs::read(dir.join("raft-snapshot")) {
            Ok(b) => {
                let (meta, map, n, bytes) =
                    decode_snapshot(&b).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("raft-snapshot: {e}")))?;
                inner.last_applied = meta.last_log_id;
                inner.membership = meta.last_membership.clone();
                inner.map = map;
                names = n;
                inner.snapshot = Some((meta, bytes));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let (tx, _) = watch::channel(Arc::new(inner.map.clone()));
        let (applied, _) = watch::channel(inner.last_applied.map_or(0, |l| l.index));
        Ok(Self { inner: Arc::new(Mutex::new(inner)), tx: Arc::new(tx), names: Arc::new(RwLock::new(names)), applied: Arc::new(applied) })
    }

    /// The S3 API's name state, as applied so far.
    pub fn names(&self) -> &RwLock<NameState> {
        &self.names
    }

    /// Waits until the entry at `index` has been applied here.
    pub async fn wait_applied(&self, index: u64) {
        let mut rx = self.applied.subscribe();
        let _ = rx.wait_for(|&a| a >= index).await;
    }

    /// The map as last applied; `changed()` wakes on every change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterMap>> {
        self.tx.subscribe()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, SErr> {
        let mut g = self.inner.lock().await;
        g.builds += 1;
        let id = match g.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, g.builds),
            None => format!("empty-{}", g.builds),
        };
        let meta = Meta { last_log_id: g.last_applied, last_membership: g.membership.clone(), snapshot_id: id };
        let names = {
            let n = self.names.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            postcard::to_stdvec(&*n).map_err(|e| StorageIOError::write_snapshot(None, AnyError::new(&e)))?
        };
        let file = SnapshotFile { meta: meta.clone(), map: encode_map(&g.map), names };
        let bytes = encode_frame(KIND_SNAPSHOT, &postcard::to_stdvec(&file).map_err(|e| StorageIOError::write_snapshot(None, AnyError::new(&e)))?);
        write_atomic(&g.dir.join("raft-snapshot"), &bytes).map_err(|e| StorageIOError::write_snapshot(None, AnyError::new(&e)))?;
        g.snapshot = Some((meta.clone(), bytes.clone()));
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId<u64>>, StoredMembership<u64, openraft::BasicNode>), SErr> {
        let g = self.inner.lock().await;
        Ok((g.last_applied, g.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, SErr>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut g = self.inner.lock().await;
        let mut out = Vec::new();
        for e in entries {
            g.last_applied = Some(e.log_id);
            let epoch = g.map.epoch;
            out.push(match e.payload {
                EntryPayload::Blank => Outcome::Applied { epoch },
                EntryPayload::Normal(crate::map::Command::Names(op)) => {
                    Outcome::Names(self.names.write().unwrap_or_else(std::sync::PoisonError::into_inner).apply(op))
                }
                EntryPayload::Normal(cmd) => {
                    // A cluster change and its event are one entry (docs/events.md).
                    let event = match &cmd {
                        crate::map::Command::As { who, now_ms, cmd } => cmd.event(&g.map).map(|(kind, name)| (kind, name, who.clone(), *now_ms)),
                        _ => None,
                    };
                    let out = g.map.apply(&cmd);
                    if let (Some((kind, name, who, now_ms)), Outcome::Applied { .. } | Outcome::PartitionsAdded { .. }) = (event, &out) {
                        self.names.write().unwrap_or_else(std::sync::PoisonError::into_inner).outbox.note(kind, who, now_ms, name);
                    }
                    out
                }
                EntryPayload::Membership(m) => {
                    g.membership = StoredMembership::new(Some(e.log_id), m);
                    Outcome::Applied { epoch }
                }
            });
        }
        if g.map.epoch != self.tx.borrow().epoch {
            self.tx.send_replace(Arc::new(g.map.clone()));
        }
        self.applied.send_replace(g.last_applied.map_or(0, |l| l.index));
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, SErr> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(&mut self, meta: &Meta, snapshot: Box<Cursor<Vec<u8>>>) -> Result<(), SErr> {
        let bytes = snapshot.into_inner();
        let (file_meta, map, names, bytes) = decode_snapshot(&bytes).map_err(|e| StorageIOError::read_snapshot(None, AnyError::error(e)))?;
        if file_meta.last_log_id != meta.last_log_id {
            return Err(StorageIOError::read_snapshot(None, AnyError::error("snapshot data does not match its meta")).into());
        }
        let mut g = self.inner.lock().await;
        write_atomic(&g.dir.join("raft-snapshot"), &bytes).map_err(|e| StorageIOError::write_snapshot(None, AnyError::new(&e)))?;
        g.last_applied = meta.last_log_id;
        g.membership = meta.last_membership.clone();
        g.map = map;
        *self.names.write().unwrap_or_else(std::sync::PoisonError::into_inner) = names;
        g.snapshot = Some((meta.clone(), bytes));
        self.tx.send_replace(Arc::new(g.map.clone()));
        self.applied.send_replace(g.last_applied.map_or(0, |l| l.index));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, SErr> {
        let g = self.inner.lock().await;
        Ok(g.snapshot.as_ref().map(|(meta, bytes)| Snapshot { meta: meta.clone(), snapshot: Box::new(Cursor::new(bytes.clone())) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_from_before_named_blobs_still_decode() {
        #[derive(serde::Serialize)]
        struct V1 {
            meta: Meta,
            map: Vec<u8>,
        }
        let meta = Meta { last_log_id: None, last_membership: StoredMembership::default(), snapshot_id: "s".into() };
        let map = ClusterMap::default();
        let v1 = encode_frame(KIND_SNAPSHOT, &postcard::to_stdvec(&V1 { meta: meta.clone(), map: encode_map(&map) }).unwrap());
        let (m, decoded, names, _) = decode_snapshot(&v1).unwrap();
        assert_eq!((m.snapshot_id.as_str(), decoded, names), ("s", map.clone(), NameState::default()));
        // And version 2 carries the names.
        let mut state = NameState::default();
        state.apply(strata_names::NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).unwrap();
        let v2 = SnapshotFile { meta, map: encode_map(&map), names: postcard::to_stdvec(&state).unwrap() };
        let (_, _, names, _) = decode_snapshot(&encode_frame(KIND_SNAPSHOT, &postcard::to_stdvec(&v2).unwrap())).unwrap();
        assert_eq!(names, state);
    }
}

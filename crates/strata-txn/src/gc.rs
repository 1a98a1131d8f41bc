//! The version garbage collector (Týr §IV-E), on a row's primary: a
//! version of a chunk (or of a blob record) that is not the newest goes
//! once its successor has been part of the blob's version, as the blob's
//! version manager answers readers, for longer than the read lease.
//!
//! Why that is safe: a reader sees a version `x` of a chunk only through a
//! blob version below its successor `y`, and the version manager answers
//! blob versions below `y` only until it has installed `y`; from then on
//! every new reader gets `y` or later. A reader's blob version expires
//! after the read lease (a chunk read under an older one is refused with
//! `SnapshotTooOld`, never answered from older data). So once the version
//! manager has shown `y` for a lease, no reader may still ask for `x`.
//! Týr also piggybacks the versions in use on commit messages to reclaim
//! sooner; this collector waits out the lease instead (what Týr's
//! collector falls back to for versions no message speaks of).

use crate::error::TxnError;
use crate::model::Guid;
use crate::participant::RowWriter;
use crate::store;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Mutex;
use strata_engine::{KeyState, Replica, WriteOp};
use strata_types::{Key, KeyKind};

/// What one pass did on one row.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct GcPass {
    /// Chunks and blob records with more than one version.
    pub versioned: usize,
    /// Versions deleted.
    pub deleted: u64,
    /// Superseded versions kept for now (their successor not yet shown
    /// for a lease).
    pub waiting: u64,
}

/// The collector's memory: when each successor version was first seen in
/// its blob's version (ms). Lost on a restart: the lease starts again.
#[derive(Default)]
pub struct Collector {
    seen: Mutex<HashMap<Key, u64>>,
}

fn guid_index(body: &[u8]) -> Option<(Guid, u64)> {
    if body.len() != 24 {
        return None;
    }
    let g: Guid = body[..16].try_into().ok()?;
    let i = u64::from_be_bytes(body[16..].try_into().ok()?);
    Some((g, i))
}

impl Collector {
    /// One pass over `replica`'s row: `blob_version(g)` is blob `g`'s
    /// version as its version manager answers readers now.
    pub async fn pass<W, F, Fut>(&self, replica: &Replica, io: &W, now_ms: u64, lease_ms: u64, blob_version: F) -> Result<GcPass, TxnError>
    where
        W: RowWriter,
        F: Fn(Guid) -> Fut,
        Fut: Future<Output = Result<u64, TxnError>>,
    {
        let mut groups: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
        for (key, state) in replica.keys()? {
            if key.kind() != KeyKind::ChunkVersion || !matches!(state, KeyState::Live { .. }) {
                continue;
            }
            if let (Some(body), Some(v)) = (key.versioned_body(), key.version()) {
                groups.entry(body.to_vec()).or_default().push(v);
            }
        }
        let mut pass = GcPass::default();
        let mut versions: HashMap<Guid, u64> = HashMap::new();
        let mut deletes = Vec::new();
        let mut done = Vec::new();
        for (body, mut vs) in groups {
            if vs.len() < 2 {
                continue;
            }
            let Some((g, i)) = guid_index(&body) else { continue };
            pass.versioned += 1;
            vs.sort_unstable();
            let shown = match versions.get(&g) {
                Some(v) => *v,
                None => {
                    let v = blob_version(g).await?;
                    versions.insert(g, v);
                    v
                }
            };
            for w in vs.windows(2) {
                let (x, y) = (w[0], w[1]);
                let successor = store::chunk_key(&g, i, y);
                let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
                match seen.get(&successor) {
                    Some(t) if now_ms.saturating_sub(*t) >= lease_ms => {
                        deletes.push(WriteOp::Delete { key: store::chunk_key(&g, i, x) });
                        done.push(successor);
                    }
                    Some(_) => pass.waiting += 1,
                    None => {
                        if shown >= y {
                            seen.insert(successor, now_ms);
                        }
                        pass.waiting += 1;
                    }
                }
            }
        }
        pass.deleted = deletes.len() as u64;
        if !deletes.is_empty() {
            io.write_all(deletes).await?;
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            for k in done {
                seen.remove(&k);
            }
        }
        Ok(pass)
    }
}

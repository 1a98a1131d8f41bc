//! The version garbage collector (Týr §IV-E), on a row's primary: a
//! version of a chunk (or of a blob record) that is not the newest goes
//! once the blob's version manager clears it, or once its successor has
//! been part of the blob's version, as the version manager answers
//! readers, for longer than the read lease.
//!
//! Clearing: each pass asks the version manager of every blob with
//! superseded versions here for the versions in use ([`Usage`]): the blob
//! version every reader gets from now on (`shown`) and the blob versions
//! its running readers read. A chunk version `x` superseded by `y` is
//! cleared when `y <= shown` (no new reader finds `x`) and no running
//! reader's blob version lies in `[x, y)` (none finds it now). Týr
//! piggybacks the versions in use on commit messages, as Bloom filters;
//! here the collector already asks the version manager once per blob and
//! pass, so the usage rides on that answer, exact (the distinct versions
//! in use are few: concurrent readers share the newest).
//!
//! The lease, which clears what no usage can (a version manager that has
//! led the row for less than a lease does not know the readers an earlier
//! one served): a reader sees a version `x` of a chunk only through a blob
//! version below its successor `y`, and the version manager answers blob
//! versions below `y` only until it has installed `y`; from then on every
//! new reader gets `y` or later. A reader's blob version expires after the
//! read lease (a chunk read under an older one is refused with
//! `SnapshotTooOld`, never answered from older data). So once the version
//! manager has shown `y` for a lease, no reader may still ask for `x`.

use crate::error::TxnError;
use crate::model::{Guid, Usage};
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
    /// Of those, cleared by the version manager's usage (the others
    /// waited out the lease).
    pub cleared: u64,
    /// Superseded versions kept for now (in use, or their successor not
    /// yet shown for a lease).
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
    /// One pass over `replica`'s row: `usage(g)` is what blob `g`'s
    /// version manager says of its versions in use now.
    pub async fn pass<W, F, Fut>(&self, replica: &Replica, io: &W, now_ms: u64, lease_ms: u64, usage: F) -> Result<GcPass, TxnError>
    where
        W: RowWriter,
        F: Fn(Guid) -> Fut,
        Fut: Future<Output = Result<Usage, TxnError>>,
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
        let mut usages: HashMap<Guid, Usage> = HashMap::new();
        let mut deletes = Vec::new();
        let mut done = Vec::new();
        for (body, mut vs) in groups {
            if vs.len() < 2 {
                continue;
            }
            let Some((g, i)) = guid_index(&body) else { continue };
            pass.versioned += 1;
            vs.sort_unstable();
            let u = match usages.entry(g) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(usage(g).await?),
            };
            let shown = u.shown;
            for w in vs.windows(2) {
                let (x, y) = (w[0], w[1]);
                let successor = store::chunk_key(&g, i, y);
                let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
                if u.clears(x, y) {
                    deletes.push(WriteOp::Delete { key: store::chunk_key(&g, i, x) });
                    done.push(successor);
                    pass.cleared += 1;
                    continue;
                }
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

//! One node's replica of read-write store data: versions of keys kept in
//! an engine replica, with the checks a replica makes on its own (Spock
//! §3.1.3). A put whose clock does not follow or stand beside every
//! version held is obsolete; one that follows some of them replaces them.
//! A key's check and submission run under its stripe lock, with the
//! versions still on their way to the disk counted as held, so two puts
//! of the same clock cannot both pass and a put replaces every version it
//! follows.

use crate::clock::Occurred;
use crate::clock::VectorClock;
use crate::error::{Result, RwError};
use crate::value::{self, Versioned};
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use strata_engine::{EngineError, PendingWrite, Replica, WriteOp};
use strata_format::PutProps;

const LOCK_STRIPES: usize = 256;

/// What a put did on this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutOutcome {
    /// Versions it made obsolete (and deleted).
    pub replaced: usize,
}

/// Versions submitted to the engine and not yet durable, by (store, key):
/// the check of a later put must see them as held.
type InFlight = std::collections::HashMap<(String, Bytes), Vec<VectorClock>>;

/// Versions held, by (store, version group, key).
type Held = std::collections::BTreeMap<(String, Vec<u8>, Bytes), Vec<Versioned>>;

/// Read-write store data in one engine replica.
pub struct LocalStore {
    replica: Arc<Replica>,
    locks: Vec<Mutex<InFlight>>,
}

/// Takes a version out of the in-flight set when its write is done (or
/// abandoned): `S` is how the landing reaches the store (a borrow, or an
/// `Arc` for a write awaited elsewhere).
struct Landing<S: std::ops::Deref<Target = LocalStore>> {
    store: S,
    at: (String, Bytes),
    clock: VectorClock,
}

impl<S: std::ops::Deref<Target = LocalStore>> Drop for Landing<S> {
    fn drop(&mut self) {
        let mut f = self.store.stripe(&self.at.0, &self.at.1);
        if let Some(v) = f.get_mut(&self.at) {
            v.retain(|c| *c != self.clock);
            if v.is_empty() {
                f.remove(&self.at);
            }
        }
    }
}

/// A put checked and submitted, not yet durable ([`LocalStore::begin_put`]).
pub struct BegunPut {
    pending: PendingWrite,
    replaced: Vec<VectorClock>,
    landing: Landing<Arc<LocalStore>>,
}

impl BegunPut {
    /// Waits for the write to be durable; what it did.
    pub async fn land(self) -> Result<PutOutcome> {
        let BegunPut { pending, replaced, landing } = self;
        let written = pending.await;
        landing.store.finish(&landing.at.0, &landing.at.1, &landing.clock, written, replaced)
    }
}

impl LocalStore {
    /// Serves read-write data from `replica`.
    pub fn new(replica: Arc<Replica>) -> Self {
        Self { replica, locks: (0..LOCK_STRIPES).map(|_| Mutex::new(InFlight::new())).collect() }
    }

    /// The engine replica underneath.
    pub fn replica(&self) -> &Arc<Replica> {
        &self.replica
    }

    fn stripe(&self, store: &str, key: &[u8]) -> std::sync::MutexGuard<'_, InFlight> {
        let h = xxhash_rust::xxh3::xxh3_64(&[store.as_bytes(), &[0], key].concat());
        self.locks[(h as usize) % LOCK_STRIPES].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every version of `key` held here, deletes included, oldest engine
    /// version first.
    pub fn get(&self, store: &str, key: &[u8]) -> Result<Vec<Versioned>> {
        let mut out = Vec::new();
        for rec in self.replica.live_versions(&value::group_key(store, key))? {
            let stored = value::decode(&rec.data).map_err(|e| RwError::Corrupt { key: rec.key.to_string(), detail: e.to_string() })?;
            // A different key whose hash collides: not this key's version.
            if stored.store == store && stored.key == key {
                out.push(stored.versioned);
            }
        }
        Ok(out)
    }

    /// Stores `v` unless a version held follows it or has its clock
    /// (`Obsolete`); versions it follows are deleted once it is durable.
    /// Waits for durability without blocking a thread.
    pub async fn put(&self, store: &str, key: &[u8], v: &Versioned) -> Result<PutOutcome> {
        let (pending, replaced, landing) = self.check_and_submit(store, key, v)?;
        let landing = Landing { store: self, at: landing.0, clock: landing.1 };
        let written = pending.await;
        drop(landing);
        self.finish(store, key, &v.clock, written, replaced)
    }

    /// [`LocalStore::put`] in two steps: the check and the submission now
    /// (`Obsolete` at once), the wait for durability in
    /// [`BegunPut::land`], which the caller may overlap with other work
    /// (a pseudo-master's writes to the other replicas).
    pub fn begin_put(self: &Arc<Self>, store: &str, key: &Bytes, v: &Versioned) -> Result<BegunPut> {
        let (pending, replaced, (at, clock)) = self.check_and_submit(store, key, v)?;
        Ok(BegunPut { pending, replaced, landing: Landing { store: self.clone(), at, clock } })
    }

    /// The replica's check and the write's submission, under the key's
    /// stripe lock. Versions submitted and not yet durable count as held
    /// (the in-flight set), so the lock need not be held while the write
    /// waits for its group commit: a later put of the same clock is
    /// refused, and one that follows a pending version replaces it.
    /// Returns the write, the versions it replaces, and its place in the
    /// in-flight set, which a [`Landing`] must take it out of.
    #[allow(clippy::type_complexity)]
    fn check_and_submit(&self, store: &str, key: &[u8], v: &Versioned) -> Result<(PendingWrite, Vec<VectorClock>, ((String, Bytes), VectorClock))> {
        let mut inflight = self.stripe(store, key);
        let at = (store.to_string(), Bytes::copy_from_slice(key));
        let mut held: Vec<VectorClock> = self.get(store, key)?.into_iter().map(|h| h.clock).collect();
        held.extend(inflight.get(&at).into_iter().flatten().cloned());
        let mut replaced = Vec::new();
        for h in held {
            match v.clock.compare(&h) {
                Occurred::Before | Occurred::Equal => return Err(RwError::Obsolete { store: store.into(), held: h, given: v.clock.clone() }),
                Occurred::After => replaced.push(h),
                Occurred::Concurrent => {}
            }
        }
        let data = Bytes::from(value::encode(store, key, v));
        let ek = value::engine_key(store, key, &v.clock);
        let pending = self.replica.submit(WriteOp::Put { key: ek, props: PutProps::default(), data });
        inflight.entry(at.clone()).or_default().push(v.clock.clone());
        Ok((pending, replaced, (at, v.clock.clone())))
    }

    fn finish(
        &self,
        store: &str,
        key: &[u8],
        clock: &VectorClock,
        written: strata_engine::Result<strata_engine::WriteAck>,
        replaced: Vec<VectorClock>,
    ) -> Result<PutOutcome> {
        match written {
            Ok(_) => {}
            // The same clock, written (or being written) here already.
            Err(EngineError::AlreadyExists) => return Err(RwError::Obsolete { store: store.into(), held: clock.clone(), given: clock.clone() }),
            Err(e) => return Err(e.into()),
        }
        // Replaced versions go without waiting: a crash before their
        // tombstones are durable leaves both, and reads resolve them.
        for c in &replaced {
            drop(self.replica.submit(WriteOp::Delete { key: value::engine_key(store, key, c) }));
        }
        Ok(PutOutcome { replaced: replaced.len() })
    }

    /// Deletes the version of `key` with `clock` (a delivered hint).
    pub fn remove(&self, store: &str, key: &[u8], clock: &VectorClock) -> Result<bool> {
        let _guard = self.stripe(store, key);
        match self.replica.submit(WriteOp::Delete { key: value::engine_key(store, key, clock) }).wait() {
            Ok(_) => Ok(true),
            Err(EngineError::NotFound | EngineError::Deleted) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes many versions as they are, clocks kept (a stream in, the
    /// copies of a rebalancing): each passes the replica's check, all are
    /// submitted before any is waited for, so they share group commits.
    /// Returns the versions written and those held already (or followed by
    /// one held).
    pub async fn put_many(&self, store: &str, entries: Vec<(Bytes, Vec<Versioned>)>) -> Result<(u64, u64)> {
        let mut submitted = Vec::new();
        let mut skipped = 0;
        for (key, versions) in &entries {
            for v in versions {
                match self.check_and_submit(store, key, v) {
                    Ok((pending, replaced, (at, clock))) => submitted.push((key, v, pending, replaced, Landing { store: self, at, clock })),
                    Err(e) if e.is_obsolete() => skipped += 1,
                    Err(e) => return Err(e),
                }
            }
        }
        let mut written = 0;
        for (key, v, pending, replaced, landing) in submitted {
            let done = pending.await;
            drop(landing);
            match self.finish(store, key, &v.clock, done, replaced) {
                Ok(_) => written += 1,
                Err(e) if e.is_obsolete() => skipped += 1,
                Err(e) => return Err(e),
            }
        }
        Ok((written, skipped))
    }

    /// Every (key, versions) of `store` held here, for streaming a store out
    /// and for rebalancing. Costs a walk of the whole index; each record is
    /// read once.
    pub fn entries(&self, store: &str) -> Result<Vec<(Bytes, Vec<Versioned>)>> {
        Ok(self.walk(Some(store))?.into_iter().map(|((_, _, key), versions)| (key, versions)).collect())
    }

    /// Every version held here of `store` (of every store when `None`), by
    /// (store, version group, key): a walk of the whole index, each live
    /// record read once.
    fn walk(&self, store: Option<&str>) -> Result<Held> {
        let mut out = Held::new();
        for (k, state) in self.replica.keys()? {
            if k.kind() != strata_types::KeyKind::KvValue || !matches!(state, strata_engine::KeyState::Live { .. }) {
                continue;
            }
            let Some(group) = k.version_group().map(<[u8]>::to_vec) else { continue };
            let rec = match self.replica.get(&k) {
                Ok(r) => r,
                Err(EngineError::NotFound | EngineError::Deleted | EngineError::Expired) => continue,
                Err(e) => return Err(e.into()),
            };
            let stored = value::decode(&rec.data).map_err(|e| RwError::Corrupt { key: k.to_string(), detail: e.to_string() })?;
            if store.is_none_or(|s| stored.store == s) {
                out.entry((stored.store, group, stored.key)).or_default().push(stored.versioned);
            }
        }
        Ok(out)
    }

    /// The keys whose only version held here is a delete written at or
    /// before `before_ms` (its clock's time): the candidates for
    /// reclaiming, as (store, key, the delete's clock). Hints (the slop
    /// store) are not among them. A walk of the whole index.
    pub fn sole_deletes(&self, before_ms: u64) -> Result<Vec<(String, Bytes, VectorClock)>> {
        Ok(self
            .walk(None)?
            .into_iter()
            .filter(|((store, _, _), _)| store != crate::coordinator::SLOP_STORE)
            .filter_map(|((store, _, key), mut versions)| match versions.pop() {
                Some(v) if versions.is_empty() && v.value.is_none() && v.clock.timestamp_ms <= before_ms => Some((store, key, v.clock)),
                _ => None,
            })
            .collect())
    }

    /// Reclaims each delete of `deletes` (store, key, clock) that is still
    /// the only version of its key held here, with no put of the key on
    /// its way to the disk: deletes its record (whose tombstone compaction
    /// then reclaims), all in shared group commits. Returns how many went.
    /// Blocks until they are durable.
    pub fn reclaim_deletes(&self, deletes: &[(String, Bytes, VectorClock)]) -> Result<u64> {
        let mut pending = Vec::new();
        for (store, key, clock) in deletes {
            let inflight = self.stripe(store, key);
            if inflight.contains_key(&(store.clone(), key.clone())) {
                continue;
            }
            let held = self.get(store, key)?;
            if matches!(&held[..], [v] if v.value.is_none() && v.clock.compare(clock) == Occurred::Equal) {
                pending.push(self.replica.submit(WriteOp::Delete { key: value::engine_key(store, key, clock) }));
            }
        }
        deleted(pending)
    }

    /// Deletes every version of `store` held here (truncate), of the keys
    /// `which` selects, in shared group commits. Returns how many versions
    /// went.
    pub fn truncate(&self, store: &str, which: impl Fn(&[u8]) -> bool) -> Result<usize> {
        let mut pending = Vec::new();
        for (key, versions) in self.entries(store)? {
            if !which(&key) {
                continue;
            }
            let _guard = self.stripe(store, &key);
            pending.extend(versions.iter().map(|v| self.replica.submit(WriteOp::Delete { key: value::engine_key(store, &key, &v.clock) })));
        }
        Ok(deleted(pending)? as usize)
    }
}

/// Waits for submitted deletes (sharing group commits); how many deleted
/// something (a version gone meanwhile is not counted).
fn deleted(pending: Vec<PendingWrite>) -> Result<u64> {
    let mut n = 0;
    for p in pending {
        match p.wait() {
            Ok(_) => n += 1,
            Err(EngineError::NotFound | EngineError::Deleted) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

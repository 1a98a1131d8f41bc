//! Coordinating a request over a key's preference list (Spock §3.1.2–§3.1.4):
//! reads from the store's required reads with read repair, writes through
//! the key's pseudo-master with required writes and hinted handoff.
//!
//! The preference list comes from the caller (the ring, reordered by zone
//! proximity); other nodes are reached through [`Transport`], this node's
//! own replica directly. A put runs on the pseudo-master, the first node
//! of the preference list that is up: it increments its own entry of the
//! clock, checks and writes its replica first (two puts with the same clock
//! cannot both pass there: that is applyUpdate's optimistic lock), then
//! writes the others. Once the required writes are in, the rest finish in
//! the background, and a node that could not be written gets a hint in
//! this node's slop store (a replica of its own, so pushing the hints
//! reads only the hints), pushed to it by [`Coordinator::push_hints`].
//! A put that misses its required writes fails, but what it wrote stays
//! (read repair spreads or supersedes it), as in Spock. applyUpdate is the
//! client's (`strata_kv_client::RwClient::apply_update`): a get, then a put
//! with the covering clock, again when the put comes back obsolete.

use crate::clock::{Occurred, VectorClock};
use crate::error::{Result, RwError};
use crate::local::{LocalStore, PutOutcome};
use crate::value::Versioned;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use strata_types::Clock;

/// The store that holds hints (never a user store: user names are letters,
/// digits, '-' and '_').
pub const SLOP_STORE: &str = "~slop";

/// How long a delete is kept before it may be reclaimed, by default
/// (Cassandra's `gc_grace_seconds` plays the same part, with the same ten
/// days): hints live half of it, so a node may be down five days and still
/// get every put it missed by hinted handoff.
pub const DELETE_GRACE_MS: u64 = 10 * 24 * 3_600_000;

/// What a coordinator needs of a store's definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorePolicy {
    /// Name.
    pub name: String,
    /// Replicas that must answer a get.
    pub required_reads: u32,
    /// Replicas that must take a put.
    pub required_writes: u32,
    /// Largest value, in bytes.
    pub value_limit: usize,
}

/// Reaches other nodes' replicas.
pub trait Transport: Send + Sync + 'static {
    /// Every version of `key` node `node` holds.
    fn get(&self, node: u64, store: &str, key: &Bytes) -> BoxFuture<'static, Result<Vec<Versioned>>>;
    /// Writes `v` on node `node`'s replica (its own checks apply).
    fn put(&self, node: u64, store: &str, key: &Bytes, v: &Versioned) -> BoxFuture<'static, Result<PutOutcome>>;
    /// Every version of each of `keys` node `node` holds, in order: one
    /// request where the transport can (this default asks key by key).
    fn get_many(&self, node: u64, store: &str, keys: Vec<Bytes>) -> BoxFuture<'static, Result<Vec<Vec<Versioned>>>> {
        let asked: Vec<_> = keys.iter().map(|k| self.get(node, store, k)).collect();
        Box::pin(async move { futures_util::future::join_all(asked).await.into_iter().collect() })
    }
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct RwStats {
    /// Versions written to stale replicas by read repair.
    pub read_repairs: AtomicU64,
    /// Hints written for nodes a put could not reach.
    pub hints_written: AtomicU64,
    /// Hints delivered (or found no longer needed).
    pub hints_pushed: AtomicU64,
    /// Hint pushes that failed (kept for the next pass).
    pub hints_failed: AtomicU64,
    /// Puts refused as obsolete.
    pub obsolete: AtomicU64,
    /// Hints held, as of the last push pass plus those written since
    /// (0 after a restart until the first pass).
    pub hints_pending: AtomicU64,
    /// Hints dropped undelivered, older than the hint lifetime.
    pub hints_expired: AtomicU64,
    /// Deletes reclaimed: every replica held the delete (or nothing),
    /// past the delete grace.
    pub deletes_reclaimed: AtomicU64,
}

/// Candidate deletes a reclaim pass checks at once (each other replica is
/// asked for them in one request).
const RECLAIM_KEYS: usize = 1000;

/// A key's preference list, by store and key (`None` for a store that is gone).
pub type Route<'a> = dyn Fn(&str, &[u8]) -> Option<Vec<u64>> + Send + Sync + 'a;

/// What a pass of delete reclaiming did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReclaimReport {
    /// Keys whose only version here was a delete older than the grace.
    pub examined: u64,
    /// Deletes reclaimed here.
    pub reclaimed: u64,
    /// Kept: a replica did not answer, or held another version.
    pub kept: u64,
}

/// What a pass of hint pushing did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HintReport {
    /// Delivered.
    pub pushed: u64,
    /// Failed, kept.
    pub failed: u64,
    /// Dropped undelivered: older than the hint lifetime.
    pub expired: u64,
    /// Left after the pass.
    pub pending: u64,
}

struct Inner {
    node: u64,
    local: Arc<LocalStore>,
    /// The hints, in the store [`SLOP_STORE`].
    slop: Arc<LocalStore>,
    /// Whether `local` was checked for hints an earlier version wrote there.
    legacy_hints_moved: std::sync::atomic::AtomicBool,
    /// How long a delete is kept before it may be reclaimed; hints live
    /// half of it.
    delete_grace_ms: AtomicU64,
    transport: Arc<dyn Transport>,
    clock: Arc<dyn Clock>,
    stats: RwStats,
}

/// A node's coordinator of read-write store requests.
#[derive(Clone)]
pub struct Coordinator(Arc<Inner>);

/// Keeps the versions no other version follows: the current value, or
/// the siblings of concurrent writes. Equal clocks count once.
pub fn resolve(versions: impl IntoIterator<Item = Versioned>) -> Vec<Versioned> {
    let mut out: Vec<Versioned> = Vec::new();
    for v in versions {
        if out.iter().any(|o| matches!(v.clock.compare(&o.clock), Occurred::Before | Occurred::Equal)) {
            continue;
        }
        out.retain(|o| v.clock.compare(&o.clock) != Occurred::After);
        out.push(v);
    }
    out
}

/// The slop store's key of a hint: the target node, then the store and key.
fn hint_key(target: u64, store: &str, key: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(9 + store.len() + key.len());
    b.extend_from_slice(&target.to_be_bytes());
    b.push(store.len() as u8);
    b.extend_from_slice(store.as_bytes());
    b.extend_from_slice(key);
    b
}

fn parse_hint_key(b: &[u8]) -> Option<(u64, String, Bytes)> {
    let target = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
    let n = *b.get(8)? as usize;
    let store = std::str::from_utf8(b.get(9..9 + n)?).ok()?.to_string();
    Some((target, store, Bytes::copy_from_slice(&b[9 + n..])))
}

/// Whether a replica that answered `held` lacks one of the `newest`
/// versions (read repair writes it there).
fn lacks_any(held: &[Versioned], newest: &[Versioned]) -> bool {
    newest.iter().any(|r| !held.iter().any(|h| h.clock.compare(&r.clock) == Occurred::Equal))
}

/// An error of node `n`'s answer, naming the node once.
fn from_node(n: u64, e: &RwError) -> String {
    match e {
        RwError::Unreachable { node, .. } if *node == n => e.to_string(),
        e => format!("node {n}: {e}"),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| RwError::Invalid(format!("a blocking task failed: {e}")))?
}

impl Coordinator {
    /// The coordinator of node `node`, whose replica is `local` and whose
    /// hints are kept in `slop` (another replica).
    pub fn new(node: u64, local: Arc<LocalStore>, slop: Arc<LocalStore>, transport: Arc<dyn Transport>, clock: Arc<dyn Clock>) -> Self {
        Self(Arc::new(Inner {
            node,
            local,
            slop,
            legacy_hints_moved: Default::default(),
            delete_grace_ms: AtomicU64::new(DELETE_GRACE_MS),
            transport,
            clock,
            stats: RwStats::default(),
        }))
    }

    /// Sets how long a delete is kept before it may be reclaimed (at least
    /// 2 ms); hints live half of it.
    pub fn set_delete_grace_ms(&self, ms: u64) {
        self.0.delete_grace_ms.store(ms.max(2), Ordering::Relaxed);
    }

    /// How long a delete is kept before it may be reclaimed.
    pub fn delete_grace_ms(&self) -> u64 {
        self.0.delete_grace_ms.load(Ordering::Relaxed)
    }

    /// How long a hint is kept undelivered: half the delete grace, so every
    /// hint of a version older than a delete is gone before the delete may
    /// be reclaimed (with half a grace to spare for clocks that disagree).
    pub fn hint_lifetime_ms(&self) -> u64 {
        self.delete_grace_ms() / 2
    }

    /// This node.
    pub fn node(&self) -> u64 {
        self.0.node
    }

    /// This node's replica.
    pub fn local(&self) -> &Arc<LocalStore> {
        &self.0.local
    }

    /// The counters.
    pub fn stats(&self) -> &RwStats {
        &self.0.stats
    }

    fn ask_get(&self, node: u64, store: &str, key: &Bytes) -> BoxFuture<'static, Result<Vec<Versioned>>> {
        if node == self.0.node {
            // Reads of the engine's mapped files: no thread hop.
            let (local, store, key) = (self.0.local.clone(), store.to_string(), key.clone());
            Box::pin(async move { local.get(&store, &key) })
        } else {
            self.0.transport.get(node, store, key)
        }
    }

    fn ask_get_many(&self, node: u64, store: &str, keys: Vec<Bytes>) -> BoxFuture<'static, Result<Vec<Vec<Versioned>>>> {
        if node == self.0.node {
            let (local, store) = (self.0.local.clone(), store.to_string());
            Box::pin(async move { keys.iter().map(|k| local.get(&store, k)).collect() })
        } else {
            self.0.transport.get_many(node, store, keys)
        }
    }

    fn ask_put(&self, node: u64, store: &str, key: &Bytes, v: &Versioned) -> BoxFuture<'static, Result<PutOutcome>> {
        if node == self.0.node {
            let (local, store, key, v) = (self.0.local.clone(), store.to_string(), key.clone(), v.clone());
            Box::pin(async move { local.put(&store, &key, &v).await })
        } else {
            self.0.transport.put(node, store, key, v)
        }
    }

    /// The current versions of `key` (deletes included: a caller shows
    /// them as absent) from the store's required reads among `pref`; stale
    /// replicas among all that answer are repaired in the background.
    pub async fn get(&self, policy: &StorePolicy, pref: &[u64], key: Bytes) -> Result<Vec<Versioned>> {
        let mut pending: FuturesUnordered<_> = pref
            .iter()
            .map(|&n| {
                let f = self.ask_get(n, &policy.name, &key);
                async move { (n, f.await) }
            })
            .collect();
        let mut answers: Vec<(u64, Vec<Versioned>)> = Vec::new();
        let mut errors = Vec::new();
        while answers.len() < policy.required_reads as usize {
            match pending.next().await {
                Some((n, Ok(v))) => answers.push((n, v)),
                Some((n, Err(e))) => errors.push(from_node(n, &e)),
                None => break,
            }
        }
        if answers.len() < policy.required_reads as usize {
            return Err(RwError::InsufficientReplicas {
                op: "get",
                store: policy.name.clone(),
                got: answers.len() as u32,
                required: policy.required_reads,
                errors: errors.join("; "),
            });
        }
        let resolved = resolve(answers.iter().flat_map(|(_, v)| v.iter().cloned()));
        if pending.is_empty() && !answers.iter().any(|(_, held)| lacks_any(held, &resolved)) {
            return Ok(resolved);
        }
        // The others' answers and the repairs go on without the caller.
        let this = self.clone();
        let store = policy.name.clone();
        tokio::spawn(async move {
            while let Some((n, r)) = pending.next().await {
                if let Ok(v) = r {
                    answers.push((n, v));
                }
            }
            this.read_repair(&store, &key, answers).await;
        });
        Ok(resolved)
    }

    /// [`Coordinator::get`] of many keys, each with its preference list,
    /// with one request per node for all the keys it holds (Spock's
    /// getAll): each key's answer waits for its required reads, and what
    /// came back stale is repaired in the background as a get's is. Fails
    /// if any key misses its required reads.
    pub async fn get_many(&self, policy: &StorePolicy, keys: Vec<(Bytes, Vec<u64>)>) -> Result<Vec<Vec<Versioned>>> {
        let mut by_node: std::collections::BTreeMap<u64, Vec<usize>> = std::collections::BTreeMap::new();
        for (i, (_, pref)) in keys.iter().enumerate() {
            for &n in pref {
                by_node.entry(n).or_default().push(i);
            }
        }
        let mut pending: FuturesUnordered<_> = by_node
            .into_iter()
            .map(|(n, which)| {
                let f = self.ask_get_many(n, &policy.name, which.iter().map(|&i| keys[i].0.clone()).collect());
                async move { (n, which, f.await) }
            })
            .collect();
        let mut answers: Vec<Vec<(u64, Vec<Versioned>)>> = vec![Vec::new(); keys.len()];
        let mut errors: Vec<Vec<String>> = vec![Vec::new(); keys.len()];
        let need = policy.required_reads as usize;
        while answers.iter().any(|a| a.len() < need) {
            match pending.next().await {
                Some((n, which, Ok(held))) => {
                    for (i, h) in which.into_iter().zip(held) {
                        answers[i].push((n, h));
                    }
                }
                Some((n, which, Err(e))) => {
                    for i in which {
                        errors[i].push(from_node(n, &e));
                    }
                }
                None => break,
            }
        }
        if let Some(i) = answers.iter().position(|a| a.len() < need) {
            return Err(RwError::InsufficientReplicas {
                op: "get",
                store: policy.name.clone(),
                got: answers[i].len() as u32,
                required: policy.required_reads,
                errors: errors[i].join("; "),
            });
        }
        let resolved: Vec<Vec<Versioned>> = answers.iter().map(|a| resolve(a.iter().flat_map(|(_, v)| v.iter().cloned()))).collect();
        let any_stale = answers.iter().zip(&resolved).any(|(a, r)| a.iter().any(|(_, held)| lacks_any(held, r)));
        if pending.is_empty() && !any_stale {
            return Ok(resolved);
        }
        let this = self.clone();
        let store = policy.name.clone();
        tokio::spawn(async move {
            while let Some((n, which, r)) = pending.next().await {
                if let Ok(held) = r {
                    for (i, h) in which.into_iter().zip(held) {
                        answers[i].push((n, h));
                    }
                }
            }
            for ((key, _), answers) in keys.into_iter().zip(answers) {
                this.read_repair(&store, &key, answers).await;
            }
        });
        Ok(resolved)
    }

    /// Writes the newest versions to every replica among `answers` that lacks one.
    async fn read_repair(&self, store: &str, key: &Bytes, answers: Vec<(u64, Vec<Versioned>)>) {
        let newest = resolve(answers.iter().flat_map(|(_, v)| v.iter().cloned()));
        for (node, held) in &answers {
            for v in &newest {
                if held.iter().any(|h| h.clock.compare(&v.clock) == Occurred::Equal) {
                    continue;
                }
                match self.ask_put(*node, store, key, v).await {
                    Ok(_) => {
                        self.0.stats.read_repairs.fetch_add(1, Ordering::Relaxed);
                    }
                    // It got something newer meanwhile.
                    Err(e) if e.is_obsolete() => {}
                    Err(e) => tracing::debug!(node, store, error = %e, "read repair failed"),
                }
            }
        }
    }

    /// A put on the key's pseudo-master (this node, the first node of
    /// `pref` that is up): `clock` is what the client read (empty for a
    /// key it never read), `value` `None` for a delete. Returns the clock
    /// written.
    pub async fn put(&self, policy: &StorePolicy, pref: &[u64], key: Bytes, value: Option<Bytes>, clock: &VectorClock) -> Result<VectorClock> {
        if let Some(v) = &value
            && v.len() > policy.value_limit
        {
            return Err(RwError::TooLarge { store: policy.name.clone(), size: v.len(), limit: policy.value_limit });
        }
        if !pref.contains(&self.0.node) {
            return Err(RwError::Invalid(format!("node {} is not in the key's preference list {pref:?}: it cannot coordinate the put", self.0.node)));
        }
        let v = Versioned { value, clock: clock.incremented(self.0.node, self.0.clock.now_ms()) };
        // The master's own replica's check first: it is the optimistic
        // lock (a version submitted there counts as held at once, so a
        // second put of the same clock is refused while this one is on its
        // way to the disk).
        let own = match self.0.local.begin_put(&policy.name, &key, &v) {
            Ok(b) => b,
            Err(e) => {
                if e.is_obsolete() {
                    self.0.stats.obsolete.fetch_add(1, Ordering::Relaxed);
                }
                return Err(e);
            }
        };
        // The other replicas' writes go out while the master's own is on
        // its way to the disk; the put is acknowledged only once that one
        // is durable too.
        let mut pending: FuturesUnordered<_> = pref
            .iter()
            .filter(|&&n| n != self.0.node)
            .map(|&n| {
                let f = self.ask_put(n, &policy.name, &key, &v);
                async move { (n, f.await) }
            })
            .collect();
        let mut own = std::pin::pin!(own.land());
        let mut own_done = false;
        let mut acks = 0u32;
        let mut missed = Vec::new();
        let mut errors = Vec::new();
        while !own_done || acks < policy.required_writes {
            tokio::select! {
                r = &mut own, if !own_done => {
                    r?;
                    own_done = true;
                    acks += 1;
                }
                next = pending.next() => match next {
                    // That replica holds this clock already, or a newer one:
                    // either way it needs nothing from this put.
                    Some((_, Ok(_))) => acks += 1,
                    Some((_, Err(e))) if e.is_obsolete() => acks += 1,
                    Some((n, Err(e))) => {
                        errors.push(from_node(n, &e));
                        missed.push(n);
                    }
                    None if own_done => break,
                    None => {
                        own.as_mut().await?;
                        own_done = true;
                        acks += 1;
                    }
                },
            }
        }
        if acks < policy.required_writes {
            return Err(RwError::InsufficientReplicas {
                op: if v.value.is_some() { "put" } else { "delete" },
                store: policy.name.clone(),
                got: acks,
                required: policy.required_writes,
                errors: errors.join("; "),
            });
        }
        let this = self.clone();
        let (store, written) = (policy.name.clone(), v.clone());
        tokio::spawn(async move {
            while let Some((n, r)) = pending.next().await {
                if let Err(e) = r
                    && !e.is_obsolete()
                {
                    missed.push(n);
                }
            }
            for n in missed {
                if let Err(e) = this.write_hint(n, &store, &key, &written).await {
                    tracing::warn!(node = n, store, error = %e, "could not write a hint; read repair is left to fix that replica");
                }
            }
        });
        Ok(v.clock)
    }

    async fn write_hint(&self, target: u64, store: &str, key: &Bytes, v: &Versioned) -> Result<()> {
        let hk = hint_key(target, store, key);
        match self.0.slop.put(SLOP_STORE, &hk, v).await {
            Ok(_) => {
                self.0.stats.hints_written.fetch_add(1, Ordering::Relaxed);
                self.0.stats.hints_pending.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            // A newer hint for the same key is there already.
            Err(e) if e.is_obsolete() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A put through a transform: the new value is the transform of the
    /// current one (no siblings allowed) and the put's value, written with
    /// the current clock; retried when a concurrent put gets in between.
    pub async fn put_transformed(&self, policy: &StorePolicy, pref: &[u64], key: Bytes, given: Bytes, transform: &str) -> Result<VectorClock> {
        let t = crate::transform::by_name(transform)?;
        let mut last = None;
        for _ in 0..8 {
            let held = resolve(self.0.local.get(&policy.name, &key)?);
            let live: Vec<&Bytes> = held.iter().filter_map(|v| v.value.as_ref()).collect();
            if live.len() > 1 {
                return Err(RwError::Invalid(format!("key has {} concurrent versions: read them and put a resolved value first", live.len())));
            }
            let clock = VectorClock::covering(held.iter().map(|v| &v.clock));
            let new =
                t.on_put(live.first().map(|b| &b[..]), &given).ok_or_else(|| RwError::Invalid(format!("transform {transform} does not apply to puts")))??;
            match self.put(policy, pref, key.clone(), Some(Bytes::from(new)), &clock).await {
                Err(e) if e.is_obsolete() => last = Some(e),
                r => return r,
            }
        }
        Err(last.unwrap_or_else(|| RwError::Invalid("the transformed put kept meeting concurrent puts".into())))
    }

    /// Pushes every hint this node holds to its node: delivered ones (or
    /// ones the node no longer needs) are deleted, others kept.
    pub async fn push_hints(&self) -> Result<HintReport> {
        if !self.0.legacy_hints_moved.load(Ordering::Acquire) {
            self.move_legacy_hints().await?;
        }
        let slop = self.0.slop.clone();
        let hints = blocking(move || slop.entries(SLOP_STORE)).await?;
        let mut report = HintReport::default();
        let (now, lifetime) = (self.0.clock.now_ms(), self.hint_lifetime_ms());
        for (hk, versions) in hints {
            let Some((target, store, key)) = parse_hint_key(&hk) else {
                tracing::warn!("a hint with a malformed key; dropped");
                continue;
            };
            for v in versions {
                if now.saturating_sub(v.clock.timestamp_ms) > lifetime {
                    // Too old to deliver: a delete that followed it may be
                    // reclaimed soon, and this copy would bring the value back.
                    let (slop, hk, clock) = (self.0.slop.clone(), hk.clone(), v.clock.clone());
                    blocking(move || slop.remove(SLOP_STORE, &hk, &clock)).await?;
                    report.expired += 1;
                    self.0.stats.hints_expired.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let delivered = match self.0.transport.put(target, &store, &key, &v).await {
                    Ok(_) => true,
                    Err(e) if e.is_obsolete() => true,
                    Err(e) => {
                        tracing::debug!(node = target, store, error = %e, "hint not delivered; kept");
                        false
                    }
                };
                if delivered {
                    let (slop, hk, clock) = (self.0.slop.clone(), hk.clone(), v.clock.clone());
                    blocking(move || slop.remove(SLOP_STORE, &hk, &clock)).await?;
                    report.pushed += 1;
                    self.0.stats.hints_pushed.fetch_add(1, Ordering::Relaxed);
                } else {
                    report.failed += 1;
                    report.pending += 1;
                    self.0.stats.hints_failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.0.stats.hints_pending.store(report.pending, Ordering::Relaxed);
        Ok(report)
    }

    /// Hints held now.
    pub async fn hints_pending(&self) -> Result<u64> {
        let slop = self.0.slop.clone();
        Ok(blocking(move || slop.entries(SLOP_STORE)).await?.iter().map(|(_, v)| v.len() as u64).sum())
    }

    /// Reclaims the deletes held here that are older than the delete grace
    /// and that every replica of their key holds too: for each key whose
    /// only version here is such a delete, every other node of its
    /// preference list (`route`; `None` for a store that is gone) is asked
    /// what it holds, and the delete goes from this replica only if each
    /// answers with that delete alone or with nothing (a replica that
    /// reclaimed it already). A node that does not answer, or holds an
    /// older value, a sibling or a newer version, keeps it here: it is
    /// still needed to refuse or replace what that replica holds.
    ///
    /// Why nothing older comes back afterwards: replicas hold nothing
    /// older (checked); hints live half the grace and are dropped
    /// undelivered after that, and a hint of an older version was written
    /// before the delete existed; puts in flight end long before a grace.
    pub async fn reclaim_deletes(&self, route: &Route<'_>) -> Result<ReclaimReport> {
        let mut report = ReclaimReport::default();
        let Some(before) = self.0.clock.now_ms().checked_sub(self.delete_grace_ms()) else { return Ok(report) };
        let local = self.0.local.clone();
        let candidates = blocking(move || local.sole_deletes(before)).await?;
        report.examined = candidates.len() as u64;
        for chunk in candidates.chunks(RECLAIM_KEYS) {
            // Each other node of each key's preference list, asked once for
            // all its keys of a store; a key is settled when every one of
            // them answered with the delete alone or with nothing.
            let mut asks: std::collections::BTreeMap<(&str, u64), Vec<usize>> = std::collections::BTreeMap::new();
            let mut waiting: Vec<Option<usize>> = vec![None; chunk.len()];
            for (i, (store, key, _)) in chunk.iter().enumerate() {
                let Some(pref) = route(store, key) else { continue };
                let others: Vec<u64> = pref.into_iter().filter(|&n| n != self.0.node).collect();
                waiting[i] = Some(others.len());
                for n in others {
                    asks.entry((store.as_str(), n)).or_default().push(i);
                }
            }
            let answers = futures_util::future::join_all(asks.into_iter().map(|((store, n), which)| {
                let f = self.0.transport.get_many(n, store, which.iter().map(|&i| chunk[i].1.clone()).collect());
                async move { (which, f.await) }
            }))
            .await;
            for (which, r) in answers {
                let Ok(held) = r else { continue };
                for (i, h) in which.into_iter().zip(held) {
                    let clock = &chunk[i].2;
                    if h.is_empty() || matches!(&h[..], [v] if v.value.is_none() && v.clock.compare(clock) == Occurred::Equal) {
                        waiting[i] = waiting[i].map(|w| w - 1);
                    }
                }
            }
            let settled: Vec<(String, Bytes, VectorClock)> = chunk.iter().zip(&waiting).filter(|(_, w)| **w == Some(0)).map(|(c, _)| c.clone()).collect();
            let local = self.0.local.clone();
            let reclaimed = blocking(move || local.reclaim_deletes(&settled)).await?;
            report.reclaimed += reclaimed;
            report.kept += chunk.len() as u64 - reclaimed;
            self.0.stats.deletes_reclaimed.fetch_add(reclaimed, Ordering::Relaxed);
        }
        Ok(report)
    }

    /// Moves hints that a version before the slop replica kept in the data
    /// replica into the slop replica (once per process: a walk of the data
    /// replica's index).
    async fn move_legacy_hints(&self) -> Result<()> {
        let local = self.0.local.clone();
        let old = blocking(move || local.entries(SLOP_STORE)).await?;
        let mut moved = 0;
        for (hk, versions) in old {
            for v in versions {
                match self.0.slop.put(SLOP_STORE, &hk, &v).await {
                    Ok(_) => {}
                    Err(e) if e.is_obsolete() => {}
                    Err(e) => return Err(e),
                }
                let (local, hk, clock) = (self.0.local.clone(), hk.clone(), v.clock.clone());
                blocking(move || local.remove(SLOP_STORE, &hk, &clock)).await?;
                moved += 1;
            }
        }
        if moved > 0 {
            tracing::info!(moved, "hints moved from the read-write stores' replica to the slop replica");
        }
        self.0.legacy_hints_moved.store(true, Ordering::Release);
        Ok(())
    }
}

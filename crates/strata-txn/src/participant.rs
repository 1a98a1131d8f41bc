//! A participant of the commit chain: what the primary of a row does with
//! a forward-pass step, a backward-pass decision and a question to a
//! decider (docs/transactions.md gives the protocol and why it is
//! serializable).
//!
//! Per row, the participant holds in memory which transactions hold which
//! items: one writer per item, any number of readers, and the intents
//! behind them, each also written to every replica of the row before the
//! step answers. A node that becomes the row's primary adds the intents it
//! finds on its replica to what it holds, so a failed primary's locks
//! carry over; locks are only ever added that way, never dropped, and a
//! stale one ends when its intent times out and is resolved.
//!
//! A step never waits on a lock held by a later hop of the same chain
//! order, so waits cannot form a cycle (each transaction visits the rows
//! in one global order and waits only at the hop it is at); a wait is
//! bounded all the same, and a step that waits too long aborts.

use crate::error::TxnError;
use crate::model::{Decision, Guid, Hop, Intent, Item, Op, Read, Snapshot, Step, StepAnswer, TxnId, Write, decode, encode};
use crate::store;
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_engine::{Replica, WriteOp};
use strata_types::Key;

/// Writes to every replica of a row, durably, before it completes (the
/// node's part: its own replica and the others through the replica RPC).
pub trait RowWriter: Send + Sync {
    /// Applies `ops` on every replica of the row; a put of a key a replica
    /// holds and a delete of a key it lacks count as done.
    fn write_all(&self, ops: Vec<WriteOp>) -> impl Future<Output = Result<(), TxnError>> + Send;
    /// Like [`write_all`](Self::write_all), but on the other replicas
    /// first and this node's own only once they all took it: a decision
    /// they refused (this node no longer leads the row) is written nowhere.
    fn write_others_first(&self, ops: Vec<WriteOp>) -> impl Future<Output = Result<(), TxnError>> + Send;
    /// The record under `key` on every other replica of the row (`None`
    /// where there is none). A replica that knows this node no longer
    /// leads the row refuses, so an answer also proves that, as of now,
    /// no other primary has acted on the row.
    fn read_others(&self, key: Key) -> impl Future<Output = Result<Vec<Option<Bytes>>, TxnError>> + Send;
}

/// What validation checks: the correct protocol, or a deliberately
/// broken one the history checker must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Reads validated and held until the transaction ends: serializable.
    #[default]
    Serializable,
    /// Broken on purpose: reads are neither validated nor held.
    SkipReadValidation,
    /// Broken on purpose: only reads of items the transaction also
    /// writes are validated (first committer wins), as snapshot isolation
    /// does: write skew gets through.
    SnapshotIsolation,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "serializable" => Ok(Self::Serializable),
            "skip-read-validation" => Ok(Self::SkipReadValidation),
            "snapshot-isolation" => Ok(Self::SnapshotIsolation),
            _ => Err(format!("transaction mode {s:?}: want serializable, skip-read-validation or snapshot-isolation")),
        }
    }
}

/// A participant's settings.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Longest a step waits for another transaction's lock.
    pub wait: Duration,
    /// After this long an intent is resolved with its decider.
    pub intent_timeout: Duration,
    /// Validation.
    pub mode: Mode,
    /// How long a reader's blob version may be read under (Týr's read
    /// timeout); the version collector keeps a superseded version at
    /// least that long after its successor became visible.
    pub read_lease: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self { wait: Duration::from_secs(2), intent_timeout: Duration::from_secs(5), mode: Mode::Serializable, read_lease: Duration::from_secs(300) }
    }
}

#[derive(Default)]
struct Locks {
    /// Who holds each item for writing: one transaction for a chunk and
    /// for a blob record it grows, any number for a blob record none of
    /// them grows.
    writers: HashMap<Item, Vec<TxnId>>,
    readers: HashMap<Item, HashSet<TxnId>>,
    /// The transaction growing a blob, and the size it grows it to.
    grows: HashMap<Guid, (TxnId, u64)>,
    held: HashMap<(TxnId, bool), Intent>,
}

impl Locks {
    fn add(&mut self, intent: Intent, mode: Mode) {
        let s = &intent.step;
        for w in &s.writes {
            self.writers.entry(w.item).or_default().push(s.txn);
            if let Item::Blob(g) = &w.item
                && intent.grows.contains(g)
            {
                self.grows.insert(*g, (s.txn, grow_of(w)));
            }
        }
        for r in held_reads(s, mode) {
            self.readers.entry(r.item).or_default().insert(s.txn);
        }
        self.held.insert((s.txn, s.hop().chunks), intent);
    }

    fn remove(&mut self, txn: &TxnId, hop: &Hop) -> Option<Intent> {
        let intent = self.held.remove(&(*txn, hop.chunks))?;
        for w in &intent.step.writes {
            if let Some(v) = self.writers.get_mut(&w.item) {
                v.retain(|t| t != txn);
                if v.is_empty() {
                    self.writers.remove(&w.item);
                }
            }
            if let Item::Blob(g) = &w.item
                && self.grows.get(g).is_some_and(|(t, _)| t == txn)
            {
                self.grows.remove(g);
            }
        }
        for r in &intent.step.reads {
            if let Some(set) = self.readers.get_mut(&r.item) {
                set.remove(txn);
                if set.is_empty() {
                    self.readers.remove(&r.item);
                }
            }
        }
        Some(intent)
    }

    /// Another transaction holding `item` for writing.
    fn other_writer(&self, item: &Item, me: &TxnId) -> Option<TxnId> {
        self.writers.get(item).and_then(|v| v.iter().find(|t| *t != me)).copied()
    }

    /// The lowest bound of the transactions writing blob `g` here: no
    /// commit sequence of theirs is below it.
    fn pending_floor(&self, g: &Guid) -> Option<u64> {
        let writers = self.writers.get(&Item::Blob(*g))?;
        writers.iter().filter_map(|t| self.held.get(&(*t, false)).map(|i| i.bound)).min()
    }
}

/// The size a blob-record write grows the blob to.
fn grow_of(w: &Write) -> u64 {
    w.ops.iter().filter_map(|op| if let Op::Grow { size, .. } = op { Some(*size) } else { None }).max().unwrap_or(0)
}

/// The reads a mode validates and holds.
fn held_reads(s: &Step, mode: Mode) -> impl Iterator<Item = &Read> {
    s.reads.iter().filter(move |r| match mode {
        Mode::Serializable => true,
        Mode::SkipReadValidation => false,
        Mode::SnapshotIsolation => s.writes.iter().any(|w| w.item == r.item),
    })
}

struct RowState {
    /// The row version whose intents were last read from the replica.
    built_at: Mutex<u64>,
    locks: Mutex<Locks>,
    changed: tokio::sync::Notify,
    decide: tokio::sync::Mutex<()>,
}

/// What a step found when it checked its items.
enum Check {
    Go { bound: u64, grows: Vec<Guid> },
    Wait(TxnId),
    Abort(String),
}

/// The participant of one node, for every row it is the primary of.
pub struct Participant {
    config: Config,
    rows: Mutex<HashMap<u64, Arc<RowState>>>,
    /// The version collector's memory.
    pub gc: crate::gc::Collector,
    /// The blob versions running transactions read through this node as
    /// their version manager: per transaction, (blob, version, when taken).
    /// A reader is entered as [`PENDING`] before its snapshot is taken, so
    /// a usage that reads the registry after computing its `shown` either
    /// sees the reader (pending or with its version) or knows the reader's
    /// snapshot comes after its `shown`. Never held across engine reads.
    readers: Mutex<HashMap<TxnId, Vec<Reading>>>,
    /// Per metadata row, the version at which this node first answered a
    /// usage for it, and when (ms): its usages are complete a read lease
    /// later (readers an earlier primary served have expired by then).
    usage_since: Mutex<HashMap<u64, (u64, u64)>>,
    /// What this node decided or refused (its metrics).
    pub stats: Stats,
}

/// Counts of what a participant decided or refused, since it started.
/// A transaction is counted once: by the hop that refused it, or by its
/// decider.
#[derive(Debug, Default)]
pub struct Stats {
    /// Transactions this node, as their decider, decided committed
    /// (read-only ones included).
    pub committed: std::sync::atomic::AtomicU64,
    /// Transactions a step here refused (a conflict, or a wait that ran
    /// out): they abort with no effect.
    pub aborted: std::sync::atomic::AtomicU64,
    /// Transactions this node, asked to resolve them, found undecided and
    /// decided aborted (their client presumed gone).
    pub presumed_aborted: std::sync::atomic::AtomicU64,
}

impl Stats {
    fn add(counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// (committed, aborted, presumed aborted).
    pub fn get(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.committed.load(Relaxed), self.aborted.load(Relaxed), self.presumed_aborted.load(Relaxed))
    }
}

/// A blob version a reader read: (blob, version, when it was taken, ms).
type Reading = (Guid, u64, u64);

/// The version of a reading whose snapshot is being taken.
const PENDING: u64 = u64::MAX;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn latest_chunk(replica: &Replica, g: &Guid, i: u64) -> Result<u64, TxnError> {
    Ok(store::chunk_as_of(replica, g, i, u64::MAX)?.map_or(0, |(v, _)| v))
}

fn latest_blob(replica: &Replica, g: &Guid) -> Result<(u64, Option<store::BlobRecord>), TxnError> {
    Ok(store::blob_as_of(replica, g, u64::MAX)?.map_or((0, None), |(v, r)| (v, Some(r))))
}

fn hex(g: &Guid) -> String {
    g.iter().map(|b| format!("{b:02x}")).collect()
}

impl Participant {
    /// A participant with these settings.
    pub fn new(config: Config) -> Self {
        Self { config, rows: Mutex::default(), gc: Default::default(), readers: Mutex::default(), usage_since: Mutex::default(), stats: Stats::default() }
    }

    /// Its settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The state of `row`, adding the intents found on `replica` when the
    /// row's version changed since they were last read.
    fn row(&self, row: u64, version: u64, replica: &Replica) -> Result<Arc<RowState>, TxnError> {
        let st = lock(&self.rows)
            .entry(row)
            .or_insert_with(|| Arc::new(RowState { built_at: Mutex::new(0), locks: Mutex::default(), changed: Default::default(), decide: Default::default() }))
            .clone();
        let mut built = lock(&st.built_at);
        if *built != version {
            let found = store::intents(replica)?;
            let mut l = lock(&st.locks);
            for intent in found {
                if !l.held.contains_key(&(intent.step.txn, intent.step.hop().chunks)) {
                    l.add(intent, self.config.mode);
                }
            }
            *built = version;
        }
        drop(built);
        Ok(st)
    }

    fn check(&self, l: &Locks, replica: &Replica, s: &Step) -> Result<Check, TxnError> {
        // What the lock table alone says first: a step that must wait
        // re-checks on every release, and should not read the engine for it.
        for w in &s.writes {
            let chunk_readers = || match w.item {
                Item::Chunk(..) => l.readers.get(&w.item).and_then(|set| set.iter().find(|t| **t != s.txn)).copied(),
                Item::Blob(_) => None,
            };
            if let Some(t) = l.other_writer(&w.item, &s.txn).or_else(chunk_readers) {
                return Ok(Check::Wait(t));
            }
        }
        let mut bound = s.bound;
        let mut seen_version = |v: u64| bound = bound.max(v.saturating_add(1));
        let mut grows = Vec::new();
        for r in held_reads(s, self.config.mode) {
            match r.item {
                Item::Chunk(g, i) => {
                    let latest = latest_chunk(replica, &g, i)?;
                    seen_version(latest);
                    if latest != r.seen {
                        return Ok(Check::Abort(format!("chunk {i} of blob {} changed since it was read (version {latest}, read {})", hex(&g), r.seen)));
                    }
                    if let Some(t) = l.other_writer(&r.item, &s.txn) {
                        return Ok(Check::Abort(format!("chunk {i} of blob {} is being written by transaction {t}", hex(&g))));
                    }
                }
                Item::Blob(g) => {
                    let (v, rec) = latest_blob(replica, &g)?;
                    seen_version(v);
                    let size = rec.map_or(0, |r| r.size);
                    if size != r.seen {
                        return Ok(Check::Abort(format!("blob {} is {size} bytes long, read {}", hex(&g), r.seen)));
                    }
                    if let Some((t, n)) = l.grows.get(&g)
                        && *t != s.txn
                        && *n > size
                    {
                        return Ok(Check::Abort(format!("blob {} is being grown by transaction {t}", hex(&g))));
                    }
                }
            }
        }
        // Other writers of these items, and readers of these chunks, were
        // waited for above; what is left needs the engine.
        for w in &s.writes {
            match w.item {
                Item::Chunk(g, i) => seen_version(latest_chunk(replica, &g, i)?),
                Item::Blob(g) => {
                    let (v, rec) = latest_blob(replica, &g)?;
                    seen_version(v);
                    if let Some(rec) = rec
                        && rec.chunk_bytes != w.chunk_bytes
                    {
                        return Err(TxnError::Invalid(format!("blob {} has chunks of {} bytes, the write used {}", hex(&g), rec.chunk_bytes, w.chunk_bytes)));
                    }
                    // Writers of a blob hold its record one at a time (the
                    // check above; sharing it among writes that do not grow
                    // the blob would starve read-only transactions:
                    // docs/transactions.md). A grower also waits for the
                    // readers of the size.
                    if grow_of(w) > rec.map_or(0, |r| r.size) {
                        if let Some(t) = l.readers.get(&w.item).and_then(|set| set.iter().find(|t| **t != s.txn)).copied() {
                            return Ok(Check::Wait(t));
                        }
                        grows.push(g);
                    }
                }
            }
        }
        Ok(Check::Go { bound, grows })
    }

    /// A forward-pass step on `replica`'s row, of which this node is the
    /// primary at row version `version`.
    pub async fn step<W: RowWriter>(&self, replica: &Replica, version: u64, io: &W, s: Step, now_ms: u64) -> Result<StepAnswer, TxnError> {
        if s.index as usize >= s.chain.len() || s.chain.is_empty() {
            return Err(TxnError::Invalid(format!("step {} of a chain of {}", s.index, s.chain.len())));
        }
        let hop = s.hop();
        if hop.row != replica.partition() {
            return Err(TxnError::Invalid(format!("a step of row {} sent to row {}", hop.row, replica.partition())));
        }
        for w in &s.writes {
            let ok = match w.item {
                Item::Blob(_) => !hop.chunks && w.ops.iter().all(|o| matches!(o, Op::Grow { .. })),
                Item::Chunk(..) => hop.chunks && w.ops.iter().all(|o| !matches!(o, Op::Grow { .. })),
            };
            if !ok || w.chunk_bytes == 0 {
                return Err(TxnError::Invalid(format!(
                    "a write of {:?} does not belong on a {} hop",
                    w.item,
                    if hop.chunks { "chunk" } else { "version-manager" }
                )));
            }
        }
        let st = self.row(hop.row, version, replica)?;
        if s.decides()
            && let Some(d) = store::decision(replica, &s.txn)?
        {
            return Ok(answer_of(d));
        }
        let deadline = tokio::time::Instant::now() + self.config.wait;
        let outcome: Result<(u64, bool), String> = loop {
            let notified = st.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut l = lock(&st.locks);
                if let Some(i) = l.held.get(&(s.txn, hop.chunks)) {
                    break Ok((i.bound, false));
                }
                match self.check(&l, replica, &s)? {
                    Check::Go { bound, grows } => {
                        l.add(Intent { step: s.clone(), placed_ms: now_ms, bound, grows }, self.config.mode);
                        break Ok((bound, true));
                    }
                    Check::Abort(reason) => break Err(reason),
                    Check::Wait(other) => {
                        if tokio::time::Instant::now() >= deadline {
                            break Err(format!("waited {:?} for transaction {other}", self.config.wait));
                        }
                    }
                }
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        };
        let (bound, fresh) = match outcome {
            Ok(held) => held,
            Err(reason) => {
                self.done_reading(&s.txn);
                Stats::add(&self.stats.aborted);
                return Ok(StepAnswer::Aborted { reason });
            }
        };
        let release = |st: &RowState| {
            lock(&st.locks).remove(&s.txn, &hop);
            st.changed.notify_waiters();
        };
        // The decider of a read-only transaction keeps nothing: its
        // validation is the decision, and there is nothing to install.
        // It asks the row's other replicas first, though: a primary cut off
        // from them, that a newer map has replaced, must not validate
        // against its stale copy of the row (docs/transactions.md,
        // "Failures").
        if s.decides() && s.read_only {
            let fenced = io.read_others(store::decision_key(&s.txn)).await;
            release(&st);
            self.done_reading(&s.txn);
            if fenced.is_ok() {
                Stats::add(&self.stats.committed);
            }
            return fenced.map(|_| StepAnswer::Committed { seq: 0 });
        }
        if fresh {
            let intent = lock(&st.locks).held.get(&(s.txn, hop.chunks)).cloned();
            let Some(intent) = intent else { return Err(TxnError::Invalid("the step's hold vanished".into())) };
            if let Err(e) = io.write_all(vec![store::put(store::intent_key(&s.txn, &hop), encode(&intent))]).await {
                release(&st);
                return Err(e);
            }
        }
        if !s.decides() {
            return Ok(StepAnswer::Prepared { bound });
        }
        let decision = {
            let _one = st.decide.lock().await;
            match store::decision(replica, &s.txn)? {
                Some(d) => d,
                None => {
                    let d = Decision::Commit(bound);
                    io.write_others_first(vec![store::put(store::decision_key(&s.txn), encode(&d))]).await?;
                    Stats::add(&self.stats.committed);
                    d
                }
            }
        };
        self.finish(replica, version, io, &s.txn, &hop, decision).await?;
        Ok(answer_of(decision))
    }

    /// The backward pass on one hop: installs the transaction's writes
    /// here at the commit sequence (or drops them), then lets its locks
    /// go. Done already (or never held) is no error.
    pub async fn finish<W: RowWriter>(&self, replica: &Replica, version: u64, io: &W, txn: &TxnId, hop: &Hop, decision: Decision) -> Result<(), TxnError> {
        // Decided: the transaction reads no more.
        self.done_reading(txn);
        let st = self.row(hop.row, version, replica)?;
        let Some(intent) = lock(&st.locks).held.get(&(*txn, hop.chunks)).cloned() else { return Ok(()) };
        if let Decision::Commit(seq) = decision {
            let mut puts = Vec::new();
            for w in &intent.step.writes {
                match w.item {
                    Item::Chunk(g, i) => {
                        let cur = store::chunk_as_of(replica, &g, i, u64::MAX)?;
                        if cur.as_ref().is_some_and(|(v, _)| *v >= seq) {
                            continue; // installed before (a retried finish)
                        }
                        let mut data = cur.map(|(_, r)| r.data).unwrap_or_default();
                        store::apply(&mut data, &w.ops, w.chunk_bytes)?;
                        puts.push(store::put(store::chunk_key(&g, i, seq), encode(&store::ChunkRecord { txn: *txn, data })));
                    }
                    Item::Blob(g) => {
                        // Writers that share a record install it in any
                        // order (none of them changes the size); a grower
                        // installs alone. A version written before (a
                        // retried finish) is written again as done.
                        let (_, rec) = latest_blob(replica, &g)?;
                        let size = rec.map_or(0, |r| r.size).max(grow_of(w));
                        let chunk_bytes = rec.map_or(w.chunk_bytes, |r| r.chunk_bytes);
                        puts.push(store::put(store::blob_key(&g, seq), encode(&store::BlobRecord { size, chunk_bytes, txn: *txn })));
                    }
                }
            }
            if !puts.is_empty() {
                io.write_all(puts).await?;
            }
        }
        io.write_all(vec![WriteOp::Delete { key: store::intent_key(txn, hop) }]).await?;
        lock(&st.locks).remove(txn, hop);
        st.changed.notify_waiters();
        Ok(())
    }

    /// A decider's answer to "what became of `txn`?": its decision, and
    /// Abort, recorded, when it has none (so a forward pass that reaches
    /// it later aborts).
    pub async fn resolve<W: RowWriter>(&self, replica: &Replica, version: u64, io: &W, txn: &TxnId) -> Result<Decision, TxnError> {
        let st = self.row(replica.partition(), version, replica)?;
        let _one = st.decide.lock().await;
        if let Some(d) = store::decision(replica, txn)? {
            return Ok(d);
        }
        // A decision the other replicas hold and this one lacks (a primary
        // that wrote it failed before this node had it) is the decision:
        // it was reached by the row's primary of the time, and no hop has
        // been told otherwise. Only when no replica has one is it abort.
        let mut found: Option<Decision> = None;
        for bytes in io.read_others(store::decision_key(txn)).await?.into_iter().flatten() {
            let d: Decision = decode(&bytes)?;
            if found.is_some_and(|f| f != d) {
                return Err(TxnError::Corrupt(format!("the replicas of row {} hold different decisions for transaction {txn}", replica.partition())));
            }
            found = Some(d);
        }
        let d = found.unwrap_or(Decision::Abort);
        io.write_others_first(vec![store::put(store::decision_key(txn), encode(&d))]).await?;
        if found.is_none() {
            Stats::add(&self.stats.presumed_aborted);
        }
        Ok(d)
    }

    /// The intents held longer than the intent timeout on the rows of
    /// `primary_of` (a row's version, or `None` when this node is no
    /// longer its primary): what the node must resolve with their deciders.
    pub fn expired(&self, now_ms: u64, primary_of: impl Fn(u64) -> Option<(Arc<Replica>, u64)>) -> Vec<(Arc<Replica>, u64, Intent)> {
        let rows: Vec<(u64, Arc<RowState>)> = lock(&self.rows).iter().map(|(r, s)| (*r, s.clone())).collect();
        let limit = self.config.intent_timeout.as_millis() as u64;
        let mut out = Vec::new();
        for (row, st) in rows {
            let Some((replica, version)) = primary_of(row) else { continue };
            // Intents a former primary left are read in here too.
            let Ok(st) = self.row(row, version, &replica).map(|_| st) else { continue };
            for i in lock(&st.locks).held.values() {
                if i.placed_ms.saturating_add(limit) <= now_ms {
                    out.push((replica.clone(), version, i.clone()));
                }
            }
        }
        out
    }

    /// Reads the intents of a row this node just became the primary of
    /// (the recovery sweep calls it for every row it leads, so intents a
    /// failed primary left are resolved even when no new step comes).
    pub fn adopt(&self, replica: &Replica, version: u64) -> Result<(), TxnError> {
        self.row(replica.partition(), version, replica).map(|_| ())
    }

    /// Blob `g`'s version for a reader, on the primary of its version
    /// managers' row: the newest version below every commit sequence a
    /// writer of `g` still holding it here may get, so every write at or
    /// below it is installed everywhere and none will come later.
    pub fn snapshot(&self, replica: &Replica, version: u64, g: &Guid) -> Result<Snapshot, TxnError> {
        let st = self.row(replica.partition(), version, replica)?;
        let floor = lock(&st.locks).pending_floor(g);
        let newest = store::blob_as_of(replica, g, u64::MAX)?.map_or(0, |(v, _)| v);
        let as_of = floor.map_or(newest, |f| newest.min(f.saturating_sub(1)));
        Ok(match store::blob_as_of(replica, g, as_of)? {
            Some((_, r)) => Snapshot { version: as_of, size: r.size, chunk_bytes: r.chunk_bytes },
            None => Snapshot { version: as_of, size: 0, chunk_bytes: 0 },
        })
    }

    /// [`snapshot`](Self::snapshot) for reader `txn` (a transaction, or a
    /// read in progress outside one under an id of its own), registered as
    /// a user of the version until [`done_reading`](Self::done_reading) or
    /// the read lease.
    pub fn snapshot_for(&self, replica: &Replica, version: u64, g: &Guid, txn: TxnId, now_ms: u64) -> Result<Snapshot, TxnError> {
        lock(&self.readers).entry(txn).or_default().push((*g, PENDING, now_ms));
        self.serving_since(replica.partition(), version, now_ms);
        let snap = self.snapshot(replica, version, g);
        let mut readers = lock(&self.readers);
        if let Some(mine) = readers.get_mut(&txn) {
            if let Some(at) = mine.iter().position(|(rg, v, _)| rg == g && *v == PENDING) {
                mine.remove(at);
            }
            if let Ok(s) = &snap
                && !mine.iter().any(|(rg, v, _)| rg == g && *v == s.version)
            {
                mine.push((*g, s.version, now_ms));
            }
            if mine.is_empty() {
                readers.remove(&txn);
            }
        }
        snap
    }

    /// Reader `txn` is done: its transaction was decided, or its read
    /// outside one answered.
    pub fn done_reading(&self, txn: &TxnId) {
        lock(&self.readers).remove(txn);
    }

    /// The versions of blob `g` in use (Týr §IV-E), on the primary of its
    /// metadata row: what a new reader gets now, and what running readers
    /// registered here read (those older than the read lease dropped). A
    /// reader whose snapshot is still being taken makes it incomplete.
    pub fn usage(&self, replica: &Replica, version: u64, g: &Guid, now_ms: u64) -> Result<crate::model::Usage, TxnError> {
        let lease = self.config.read_lease.as_millis() as u64;
        // `shown` first: a reader not yet registered when the registry is
        // read below takes its snapshot later, at `shown` or above.
        let shown = self.snapshot(replica, version, g)?.version;
        let mut readers = lock(&self.readers);
        readers.retain(|_, reads| {
            reads.retain(|(_, _, taken)| taken.saturating_add(lease) > now_ms);
            !reads.is_empty()
        });
        let mut in_use: Vec<u64> = readers.values().flatten().filter(|(rg, _, _)| rg == g).map(|(_, v, _)| *v).collect();
        drop(readers);
        in_use.sort_unstable();
        in_use.dedup();
        let pending = in_use.last() == Some(&PENDING);
        in_use.retain(|v| *v != PENDING);
        let first = self.serving_since(replica.partition(), version, now_ms);
        Ok(crate::model::Usage { shown, in_use, complete: !pending && now_ms.saturating_sub(first) >= lease })
    }

    /// When this node first served readers of `row`, or a usage of it, at
    /// row version `version` (not before it became the row's primary).
    fn serving_since(&self, row: u64, version: u64, now_ms: u64) -> u64 {
        let mut since = lock(&self.usage_since);
        since
            .entry(row)
            .and_modify(|e| {
                if e.0 != version {
                    *e = (version, now_ms)
                }
            })
            .or_insert((version, now_ms))
            .1
    }

    /// Readers registered now (transactions, and reads in progress).
    pub fn readers(&self) -> usize {
        lock(&self.readers).len()
    }

    /// Transactions held now, over all rows.
    pub fn held(&self) -> usize {
        lock(&self.rows).values().map(|s| lock(&s.locks).held.len()).sum()
    }
}

fn answer_of(d: Decision) -> StepAnswer {
    match d {
        Decision::Commit(seq) => StepAnswer::Committed { seq },
        Decision::Abort => StepAnswer::Aborted { reason: "the transaction was decided aborted (its client was presumed gone)".into() },
    }
}

//! Change capture's sending side on a node (docs/events.md): one sender per
//! configured target, reading the names' outbox (`strata_names::events`)
//! and delivering through `strata-events`.
//!
//! A node's own logs are sources too, for targets of every event: each
//! partition's journal (native blob records) and each read-only store's
//! history of versions (`strata_kv::latest`), one sender per target and
//! source with a cursor file of its own.
//!
//! The targets and their delivered positions are in the names, so the
//! senders run where the names are written: on the one node, or on the
//! metadata leader of a cluster (a new leader resumes where the old one
//! stopped; a batch the old one sent but had not recorded is sent again,
//! as at-least-once delivery allows). A target that takes every event gets
//! the whole outbox; any other only the events of buckets whose
//! notification configuration names it and matches them.

use crate::worker::{Next, Workers};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_events::{Event, EventError, Notification, Progress, Read, Sender, SenderStatus, Source, Subject, TargetSpec};
use strata_names::{NameEvent, NameIndex, NameOp, read};
use strata_types::Clock;

/// The `node` field of names events: the metadata group, whichever member
/// sends them (ids stay the same across a change of leader).
pub const NAMES_NODE: &str = "meta";
/// How often a sender stores its delivered position at most: a crash
/// repeats up to this much of a stream (delivery is at least once).
pub const POSITION_EVERY_MS: u64 = 1000;

/// Events per batch at most. Small enough that a batch's buffers (its
/// events, their JSON) stay well below the allocator's large-allocation
/// threshold, whose allocations consolidate the heap each time (measured:
/// with 1,000 that was a visible share of a busy node's CPU); large enough
/// that a busy stream costs tens of deliveries a second, not thousands.
const BATCH: usize = 256;

/// The `source` field of names events.
pub const NAMES_SOURCE: &str = "names";

/// A names event in the schema.
pub fn event_of(e: &NameEvent) -> Event {
    if let Some(name) = &e.name {
        // A cluster event: about a node, a disk or a rebalancing.
        let subject = Subject { name: Some(name.clone()), ..Subject::default() };
        return Event::new(NAMES_NODE, NAMES_SOURCE, e.seq, e.time_ms, &e.kind, e.who.clone(), subject);
    }
    let subject = Subject {
        bucket: Some(e.bucket.clone()),
        key: e.key.clone(),
        version_id: e.version_id.clone(),
        size: e.size,
        etag: e.etag.clone(),
        ..Subject::default()
    };
    Event::new(NAMES_NODE, NAMES_SOURCE, e.seq, e.time_ms, &e.kind, e.who.clone(), subject)
}

/// The outbox as one target sees it.
struct Outbox {
    names: Arc<dyn NameIndex>,
    target: String,
    all: bool,
}

impl Source for Outbox {
    fn read_after(&self, after: u64, max: usize) -> Result<Read, EventError> {
        // Under the state's lock only the batch's handles are taken (and,
        // for a notification target, the rules of its buckets): writers
        // wait on nothing longer than that.
        let (batch, rules) = read(&*self.names, |s| {
            let batch: Vec<Arc<NameEvent>> = s.outbox.after(after, max).cloned().collect();
            let mut rules: BTreeMap<String, Option<Notification>> = BTreeMap::new();
            if !self.all {
                for e in batch.iter().filter(|e| e.name.is_none()) {
                    if !rules.contains_key(&e.bucket) {
                        let n = s.bucket_doc(&e.bucket, strata_names::events::NOTIFICATION_DOC).and_then(|d| serde_json::from_str(d).ok());
                        rules.insert(e.bucket.clone(), n);
                    }
                }
            }
            (batch, rules)
        });
        let upto = batch.last().map_or(after, |e| e.seq);
        let events = batch
            .iter()
            .map(|e| event_of(e))
            .filter(|e| {
                self.all || {
                    let bucket = e.subject.bucket.as_deref().unwrap_or("");
                    rules.get(bucket).and_then(Option::as_ref).is_some_and(|n| n.sends(&self.target, e))
                }
            })
            .collect::<Vec<_>>();
        Ok(Read { events, upto })
    }

    fn last(&self) -> u64 {
        read(&*self.names, |s| s.outbox.last_seq)
    }
}

/// A target's delivered position, kept in the names (`TrimEvents`).
struct Delivered {
    names: Arc<dyn NameIndex>,
    target: String,
}

impl Progress for Delivered {
    fn seq(&self) -> u64 {
        read(&*self.names, |s| s.outbox.targets.get(&self.target).map_or(0, |t| t.delivered))
    }

    fn store(&self, seq: u64) -> futures_util::future::BoxFuture<'_, Result<(), EventError>> {
        Box::pin(async move {
            self.names.apply(NameOp::TrimEvents { target: self.target.clone(), seq }).await.map(|_| ()).map_err(|e| EventError::Source(e.to_string()))
        })
    }
}

/// One partition's log, as events.
struct Journal {
    replica: Arc<strata_engine::Replica>,
    node: String,
    source: String,
    lost: Arc<std::sync::atomic::AtomicU64>,
}

impl Source for Journal {
    fn read_after(&self, after: u64, max: usize) -> Result<Read, EventError> {
        let (after, entries) = match self.replica.journal_since(after, max) {
            Some(e) => (after, e),
            None => {
                // The journal no longer reaches back: what lies between is lost.
                let reach = self.replica.journal_reach();
                let lost = reach.saturating_sub(after + 1);
                self.lost.fetch_add(lost, Ordering::Relaxed);
                tracing::error!(source = %self.source, lost, "a target fell behind the partition's journal; its records in between are not sent");
                let from = reach.saturating_sub(1);
                (from, self.replica.journal_since(from, max).unwrap_or_default())
            }
        };
        let events: Vec<Event> = entries
            .iter()
            .filter_map(|e| {
                let blob = e.key.blob_id()?;
                let kind = match e.kind {
                    strata_format::RecordKind::Put => "strata:BlobPut",
                    strata_format::RecordKind::Delete => "strata:BlobDeleted",
                    strata_format::RecordKind::TtlUpdate => "strata:BlobTtlUpdated",
                };
                let c = blob.container();
                let subject = Subject { blob: Some(blob.to_string()), container: Some(format!("{}/{}", c.account, c.container)), ..Subject::default() };
                Some(Event::new(&self.node, &self.source, e.lsn, e.time_ms, kind, e.actor.as_deref().map(String::from), subject))
            })
            .collect();
        Ok(Read { upto: entries.last().map_or(after, |e| e.lsn), events })
    }

    fn last(&self) -> u64 {
        self.replica.status().next_lsn.saturating_sub(1)
    }
}

/// One read-only store's history of versions, as events.
struct StoreHistory {
    store: Arc<strata_kv::ReadOnlyStore>,
    node: String,
    source: String,
    lost: Arc<std::sync::atomic::AtomicU64>,
}

impl Source for StoreHistory {
    fn read_after(&self, after: u64, max: usize) -> Result<Read, EventError> {
        let (changes, reaches) = self.store.changes_after(after);
        if !reaches && let Some(first) = changes.first() {
            let lost = first.seq.saturating_sub(after + 1);
            self.lost.fetch_add(lost, Ordering::Relaxed);
            tracing::error!(source = %self.source, lost, "a target fell behind a store's kept history; the changes in between are not sent");
        }
        let events: Vec<Event> = changes
            .into_iter()
            .take(max)
            .map(|c| {
                let kind = match c.kind {
                    strata_kv::ChangeKind::Loaded => "strata:StoreVersionLoaded",
                    strata_kv::ChangeKind::Swapped => "strata:StoreVersionSwapped",
                    strata_kv::ChangeKind::RolledBack => "strata:StoreVersionRolledBack",
                };
                let subject = Subject { name: Some(self.store.def().name.clone()), version_id: Some(c.version.to_string()), ..Subject::default() };
                Event::new(&self.node, &self.source, c.seq, c.time_ms, kind, c.who, subject)
            })
            .collect();
        Ok(Read::all(after, events))
    }

    fn last(&self) -> u64 {
        self.store.last_change()
    }
}

/// A source of this node's own: a partition's journal or a store's history.
enum Local {
    Partition(Arc<strata_engine::Replica>),
    Store(Arc<strata_kv::ReadOnlyStore>),
}

impl Local {
    fn last(&self) -> u64 {
        match self {
            Self::Partition(r) => r.status().next_lsn.saturating_sub(1),
            Self::Store(s) => s.last_change(),
        }
    }
}

/// What local capture needs: the node's replicas and stores, where
/// cursors live, and which partitions this node sends.
pub struct BlobCapture {
    /// The node's disks.
    pub disks: Arc<crate::Disks>,
    /// The node's read-only stores.
    pub stores: Arc<dyn Fn() -> Vec<Arc<strata_kv::ReadOnlyStore>> + Send + Sync>,
    /// Cursor files go under here (`<data>/events`).
    pub dir: std::path::PathBuf,
    /// The node's name in event ids.
    pub node: String,
    /// Whether this node sends a partition's events.
    pub leads: Arc<dyn Fn(strata_types::PartitionId) -> bool + Send + Sync>,
}

struct Running {
    spec: String,
    all: bool,
    sender: Arc<Sender>,
    stop: Arc<AtomicBool>,
}

/// Where capture stands (`GET /admin/events`, the metrics).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CaptureStatus {
    /// Whether this node sends (the one node, or the metadata leader).
    pub sending: bool,
    /// Events made since the names began (the outbox's last sequence number).
    pub produced: u64,
    /// Events in the outbox (not yet with every target).
    pub outbox: u64,
    /// Events dropped undelivered because the outbox was full.
    pub dropped: u64,
    /// The targets.
    pub targets: Vec<TargetStatus>,
    /// This node's own sources (native blob events per partition it
    /// sends, store version events per store), per target.
    pub blob_senders: Vec<SenderStatus>,
    /// Events lost because a target fell behind a partition's journal or a
    /// store's kept history.
    pub blob_lost: u64,
}

/// One target's status.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TargetStatus {
    /// What it is (never a secret).
    pub describe: String,
    /// Every event, or only bucket notifications naming it.
    pub all: bool,
    /// Delivery (from its sender; its position from the names where this
    /// node does not send).
    #[serde(flatten)]
    pub sender: SenderStatus,
}

/// The senders of this node.
pub struct Capture {
    names: Arc<dyn NameIndex>,
    clock: Arc<dyn Clock>,
    sends: Arc<dyn Fn() -> bool + Send + Sync>,
    running: Mutex<BTreeMap<String, Running>>,
    blobs: Mutex<Option<Arc<BlobCapture>>>,
    /// Senders of this node's own sources by (target, source).
    blob_running: Mutex<BTreeMap<(String, String), Running>>,
    lost: Arc<std::sync::atomic::AtomicU64>,
    idle: Duration,
}

impl Capture {
    /// Senders of `names`' outbox, running while `sends` says this node
    /// should (always on one node; the metadata leader's in a cluster).
    pub fn new(names: Arc<dyn NameIndex>, clock: Arc<dyn Clock>, sends: Arc<dyn Fn() -> bool + Send + Sync>) -> Arc<Self> {
        Arc::new(Self {
            names,
            clock,
            sends,
            running: Mutex::new(BTreeMap::new()),
            blobs: Mutex::new(None),
            blob_running: Mutex::new(BTreeMap::new()),
            lost: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            // Batches gather for this long once a sender has caught up: each
            // batch costs the target an fsync (a file), a request (a webhook,
            // Kafka) and a position write, so fewer, bigger ones keep capture
            // cheap under load; events are still delivered within a fraction
            // of a second.
            idle: Duration::from_millis(200),
        })
    }

    /// The target a stored spec names.
    fn target(&self, name: &str, spec: &str) -> Result<Arc<dyn strata_events::Target>, EventError> {
        serde_json::from_str::<TargetSpec>(spec)?.build(name, self.clock.clone())
    }

    /// Starts `sender` on a task of its own, until its stop flag is set.
    fn run(&self, spec: String, all: bool, sender: Arc<Sender>) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        tokio::spawn({
            let (sender, stop, idle) = (sender.clone(), stop.clone(), self.idle);
            async move { sender.run(idle, stop).await }
        });
        Running { spec, all, sender, stop }
    }

    /// Also sends the native blob events of the node's partitions, as `b` says.
    pub fn capture_blobs(&self, b: BlobCapture) {
        *self.blobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(b));
    }

    /// Starts the worker that keeps one sender per configured target.
    pub fn start(self: &Arc<Self>, workers: &Workers) {
        let me = self.clone();
        workers.spawn("events", Next::Now, move || {
            let me = me.clone();
            async move {
                me.reconcile();
                Ok(Next::After(Duration::from_millis(500)))
            }
        });
    }

    /// Starts senders for new or changed targets and stops those of
    /// targets removed (all of them where this node does not send).
    pub fn reconcile(&self) {
        let wanted: BTreeMap<String, (String, bool)> = if (self.sends)() {
            read(&*self.names, |s| s.outbox.targets.iter().map(|(n, t)| (n.clone(), (t.spec.clone(), t.all))).collect())
        } else {
            BTreeMap::new()
        };
        let mut running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        running.retain(|name, r| {
            let keep = wanted.get(name).is_some_and(|(spec, all)| *spec == r.spec && *all == r.all);
            if !keep {
                r.stop.store(true, Ordering::Relaxed);
            }
            keep
        });
        for (name, (spec, all)) in wanted {
            if running.contains_key(&name) {
                continue;
            }
            let target = match self.target(&name, &spec) {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(target_name = %name, error = %e, "an event target's spec is unusable; it gets nothing until replaced");
                    continue;
                }
            };
            let source = Arc::new(Outbox { names: self.names.clone(), target: name.clone(), all });
            let progress = Arc::new(Delivered { names: self.names.clone(), target: name.clone() });
            let sender =
                Arc::new(Sender::with_progress(source, target, progress, self.clock.clone()).with_batch(BATCH).with_position_every_ms(POSITION_EVERY_MS));
            running.insert(name, self.run(spec, all, sender));
        }
        drop(running);
        self.reconcile_blobs();
    }

    /// One sender per (target taking every event, source of this node's
    /// own: a partition it sends, a store).
    fn reconcile_blobs(&self) {
        let Some(b) = self.blobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone() else { return };
        let targets: BTreeMap<String, (String, u64)> =
            read(&*self.names, |s| s.outbox.targets.iter().filter(|(_, t)| t.all).map(|(n, t)| (n.clone(), (t.spec.clone(), t.created_ms))).collect());
        let mut sources: BTreeMap<String, Local> = BTreeMap::new();
        if !targets.is_empty() {
            for r in b.disks.replicas().into_iter().filter(|r| (b.leads)(r.partition())) {
                sources.insert(format!("partition-{}", r.partition()), Local::Partition(r));
            }
            for s in (b.stores)() {
                sources.insert(format!("store-{}", s.def().name), Local::Store(s));
            }
        }
        let mut running = self.blob_running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        running.retain(|(name, source), r| {
            let keep = sources.contains_key(source) && targets.get(name).is_some_and(|(spec, _)| *spec == r.spec);
            if !keep {
                r.stop.store(true, Ordering::Relaxed);
            }
            keep
        });
        for (name, (spec, created_ms)) in &targets {
            for (source_name, local) in &sources {
                if running.contains_key(&(name.clone(), source_name.clone())) {
                    continue;
                }
                let started = self.target(name, spec).and_then(|target| {
                    // A target's cursors are its own: a target removed and
                    // added again under the name starts afresh.
                    let path = b.dir.join(format!("{name}-{created_ms}")).join(format!("{source_name}.cursor"));
                    let fresh = !path.exists();
                    if let Some(d) = path.parent() {
                        std::fs::create_dir_all(d).map_err(|e| EventError::Io { what: format!("creating {}", d.display()), source: e })?;
                    }
                    let mut cursor = strata_events::Cursor::open(&path)?;
                    if fresh {
                        // A new target starts at the end, as with the names.
                        cursor.store(local.last())?;
                    }
                    let (node, source) = (b.node.clone(), source_name.clone());
                    let source: Arc<dyn Source> = match local {
                        Local::Partition(r) => Arc::new(Journal { replica: r.clone(), node, source, lost: self.lost.clone() }),
                        Local::Store(s) => Arc::new(StoreHistory { store: s.clone(), node, source, lost: self.lost.clone() }),
                    };
                    Ok(Arc::new(Sender::new(source, target, cursor, self.clock.clone()).with_batch(BATCH).with_position_every_ms(POSITION_EVERY_MS)))
                });
                match started {
                    Ok(sender) => {
                        running.insert((name.clone(), source_name.clone()), self.run(spec.clone(), true, sender));
                    }
                    Err(e) => tracing::error!(target_name = %name, source = %source_name, error = %e, "could not start an event sender"),
                }
            }
        }
    }

    /// Where capture stands.
    pub fn status(&self) -> CaptureStatus {
        let running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let blob_senders = self
            .blob_running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|((_, source), r)| {
                let st = r.sender.status();
                SenderStatus { target: format!("{}/{source}", st.target), ..st }
            })
            .collect();
        let blob_lost = self.lost.load(Ordering::Relaxed);
        read(&*self.names, |s| CaptureStatus {
            blob_senders,
            blob_lost,
            sending: (self.sends)(),
            produced: s.outbox.last_seq,
            outbox: s.outbox.events.len() as u64,
            dropped: s.outbox.dropped,
            targets: s
                .outbox
                .targets
                .iter()
                .map(|(name, t)| TargetStatus {
                    describe: serde_json::from_str::<TargetSpec>(&t.spec).map_or_else(|e| format!("unusable spec: {e}"), |s| s.describe()),
                    all: t.all,
                    sender: running.get(name).map(|r| r.sender.status()).unwrap_or_else(|| SenderStatus {
                        target: name.clone(),
                        delivered_seq: t.delivered,
                        pending: s.outbox.last_seq.saturating_sub(t.delivered),
                        ..SenderStatus::default()
                    }),
                })
                .collect(),
        })
    }

    /// Stops every sender.
    pub fn stop(&self) {
        for r in self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values() {
            r.stop.store(true, Ordering::Relaxed);
        }
        for r in self.blob_running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values() {
            r.stop.store(true, Ordering::Relaxed);
        }
    }
}

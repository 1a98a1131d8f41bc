//! The orphan sweep: frees chunks and S3 blobs that nothing points at.
//!
//! Blobs become orphans when a process dies between two steps: a chunked
//! put's chunks are written before the composite blob that lists them; an
//! S3 object's blob is written before its name, and freed after the name
//! moves to another blob; an upload's part before the part is recorded.
//! Such a blob costs disk space, never a live object. The sweep finds them
//! and frees them, and must never free a reachable one.
//!
//! What may be swept: **chunks** (reachable only through a composite) and
//! blobs written by the S3 API (owner [`strata_router::S3_OWNER`]:
//! reachable only through a name, an upload's part list or, for a part,
//! the composite of the object it completed into). A blob written through
//! the native API is the client's: its id is the only reference, so it is
//! never swept. A candidate must also be older than the **grace period**
//! (`orphan_grace_ms`, 24 h by default).
//!
//! A pass, at time `T0`:
//! 1. lists every key of every partition — the union of all replicas'
//!    indexes (a replica that cannot be listed stops the pass);
//! 2. reads every composite's chunk list: those chunks are referenced;
//! 3. reads the names (after a barrier, so every name op that returned
//!    before is seen): objects' and upload parts' blobs are referenced;
//! 4. lists the composites again and reads the lists of those not seen in
//!    step 1;
//! 5. frees each listed key that is unreferenced, sweepable and created
//!    before `T0 - grace`: its record only (a composite's chunks are judged
//!    on their own, in a later pass). One that expires within the grace
//!    anyway is left to expire (a replaced S3 object keeps its minutes for
//!    the GETs still streaming it).
//!
//! Why no reachable blob is freed: every step that makes a blob reachable
//! happens within half the grace of that blob's put starting (a later one
//! fails, [`strata_router::Router::check_naming_deadline`]), so for a blob
//! created before `T0 - grace` it happened before `T0` (clocks may differ by
//! less than half the grace) and steps 1–3 see its result. Steps that move
//! a reference from one holder to another always add the new holder first:
//! completing an upload writes the object's composite (listing the parts'
//! chunks) before the name op that drops the upload, and drops the parts'
//! composites only after. If step 3 ran after that name op, the new
//! composite existed before step 4 began; if step 1 listed a part's
//! composite, its chunks are referenced. Any unreadable composite (damaged
//! everywhere, a replica down) stops the pass before anything is freed.
//! The model test in `tests/sweep.rs` races puts, names and passes.

use crate::worker::{Next, Workers};
use serde::Serialize;
use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_names::NameIndex;
use strata_router::{Router, RouterError};
use strata_types::{BlobId, BlobKind, Clock};

/// Most recent errors kept for the status page.
const ERRORS_KEPT: usize = 16;

/// When the sweep runs.
#[derive(Debug, Clone, Copy)]
pub struct SweepConfig {
    /// Time between the starts of two scheduled passes (`None`: only on request).
    pub interval: Option<Duration>,
}

impl Default for SweepConfig {
    fn default() -> Self {
        Self { interval: Some(Duration::from_secs(24 * 3600)) }
    }
}

/// What the sweep is doing and has done.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SweepStatus {
    /// A pass is running.
    pub running: bool,
    /// What the running pass is doing (`listing`, `reading chunk lists`,
    /// `reading names`, `freeing`, or `done`).
    pub phase: String,
    /// Passes finished (stopped ones included).
    pub passes: u64,
    /// When the running (or last) pass started, ms since the epoch.
    pub started_ms: u64,
    /// When the last pass finished (0: none yet).
    pub finished_ms: u64,
    /// Grace period of the running (or last) pass, ms.
    pub grace_ms: u64,
    /// Partitions in the pass, and how many are listed.
    pub partitions_total: usize,
    /// Partitions listed.
    pub partitions_listed: usize,
    /// Keys listed.
    pub keys: u64,
    /// Composite chunk lists read.
    pub composites_read: u64,
    /// Blobs referenced by a chunk list, a name or an upload.
    pub referenced: u64,
    /// Unreferenced records that may be swept (chunks, S3 blobs).
    pub candidates: u64,
    /// Candidates left because they are younger than the grace period.
    pub too_young: u64,
    /// Candidates left because they expire within the grace period anyway.
    pub expiring: u64,
    /// Records freed.
    pub freed: u64,
    /// Why the pass stopped before freeing anything, if it did.
    pub stopped: Option<String>,
    /// The most recent errors.
    pub errors: Vec<String>,
}

/// Counters over every pass, for `/metrics`.
#[derive(Debug, Default)]
pub struct SweepTotals {
    /// Passes finished.
    pub passes: AtomicU64,
    /// Passes stopped before freeing (a replica or composite unreadable).
    pub stopped: AtomicU64,
    /// Records freed.
    pub freed: AtomicU64,
    /// Candidates left for being younger than the grace period.
    pub too_young: AtomicU64,
}

/// The node's orphan sweep.
pub struct Sweeper {
    router: Arc<Router>,
    names: Option<Arc<dyn NameIndex>>,
    clock: Arc<dyn Clock>,
    status: Mutex<SweepStatus>,
    /// Totals for metrics.
    pub totals: SweepTotals,
    running: AtomicBool,
    wake: Arc<tokio::sync::Notify>,
    requested: AtomicBool,
    /// On a cluster node: scheduled passes run only while it leads the
    /// metadata group, so one node sweeps at a time.
    cluster: Option<Arc<crate::node::ClusterNode>>,
    /// Test-only: skip step 4 and the grace period, to show the model
    /// test catches a sweep that frees reachable blobs.
    broken: AtomicBool,
}

/// Why a pass stopped before freeing.
struct Stop(String);

impl Sweeper {
    /// A sweep through `router`; `names` are the S3 names (without them,
    /// only chunks are swept).
    pub fn new(router: Arc<Router>, names: Option<Arc<dyn NameIndex>>, cluster: Option<Arc<crate::node::ClusterNode>>) -> Arc<Self> {
        let clock = router.clock().clone();
        // Before the first pass the status already says the grace in force.
        let status = SweepStatus { phase: "idle".into(), grace_ms: router.config().orphan_grace_ms, ..SweepStatus::default() };
        Arc::new(Self {
            router,
            names,
            clock,
            status: Mutex::new(status),
            totals: SweepTotals::default(),
            running: AtomicBool::new(false),
            wake: Arc::default(),
            requested: AtomicBool::new(false),
            cluster,
            broken: AtomicBool::new(false),
        })
    }

    /// Test-only: makes passes ignore the grace period and skip the second
    /// listing of composites, so they free blobs that are still reachable.
    #[doc(hidden)]
    pub fn set_broken(&self, broken: bool) {
        self.broken.store(broken, Ordering::SeqCst);
    }

    /// The current status.
    pub fn status(&self) -> SweepStatus {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Asks for a pass now; false if one is running already.
    pub fn request(&self) -> bool {
        if self.running.load(Ordering::SeqCst) {
            return false;
        }
        self.requested.store(true, Ordering::SeqCst);
        self.wake.notify_one();
        true
    }

    /// Runs passes on schedule (on a cluster, only while this node leads
    /// the metadata group) and on request, as the worker `sweep`.
    pub fn start(self: &Arc<Self>, workers: &Workers, config: SweepConfig) {
        let me = self.clone();
        workers.spawn("sweep", Next::requested_or(&self.wake, config.interval), move || {
            let requested = me.requested.swap(false, Ordering::SeqCst);
            let next = Next::requested_or(&me.wake, config.interval);
            let me = me.clone();
            async move {
                if requested || me.leads() {
                    me.pass().await;
                }
                Ok(next)
            }
        });
    }

    /// Whether this node sweeps on schedule: a single node always, a
    /// cluster node while it leads the metadata group.
    fn leads(&self) -> bool {
        match &self.cluster {
            None => true,
            Some(node) => node.meta.as_ref().is_some_and(|m| {
                let st = m.status();
                st.leader == Some(st.id)
            }),
        }
    }

    fn update(&self, f: impl FnOnce(&mut SweepStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    fn error(&self, e: String) {
        tracing::warn!(error = %e, "orphan sweep");
        self.update(|s| {
            if s.errors.len() == ERRORS_KEPT {
                s.errors.remove(0);
            }
            s.errors.push(e);
        });
    }

    /// One pass; returns its status.
    pub async fn pass(&self) -> SweepStatus {
        if self.running.swap(true, Ordering::SeqCst) {
            return self.status();
        }
        let started_ms = self.clock.now_ms();
        let grace_ms = self.router.config().orphan_grace_ms;
        self.update(|s| {
            let passes = s.passes;
            *s = SweepStatus { running: true, phase: "listing".into(), passes, started_ms, grace_ms, ..SweepStatus::default() };
        });
        tracing::info!(grace_ms, "orphan sweep started");
        if let Err(Stop(why)) = self.run(started_ms, grace_ms).await {
            tracing::warn!(reason = %why, "orphan sweep stopped before freeing anything");
            self.totals.stopped.fetch_add(1, Ordering::Relaxed);
            self.update(|s| s.stopped = Some(why));
        }
        let finished_ms = self.clock.now_ms();
        self.totals.passes.fetch_add(1, Ordering::Relaxed);
        self.update(|s| {
            s.running = false;
            s.phase = "done".into();
            s.passes += 1;
            s.finished_ms = finished_ms;
        });
        let st = self.status();
        tracing::info!(
            keys = st.keys,
            referenced = st.referenced,
            candidates = st.candidates,
            freed = st.freed,
            too_young = st.too_young,
            "orphan sweep finished"
        );
        self.running.store(false, Ordering::SeqCst);
        st
    }

    async fn run(&self, started_ms: u64, grace_ms: u64) -> Result<(), Stop> {
        let broken = self.broken.load(Ordering::SeqCst);
        let cutoff = if broken { u64::MAX } else { started_ms.saturating_sub(grace_ms) };
        let mut partitions = self.router.all_partitions();
        partitions.sort_unstable();
        self.update(|s| s.partitions_total = partitions.len());
        // 1. Every key, every replica.
        let listed = self.list(&partitions, true).await?;
        // 2. Chunk lists of the composites listed.
        self.update(|s| s.phase = "reading chunk lists".into());
        let mut referenced: HashSet<BlobId> = HashSet::new();
        let composites: BTreeSet<BlobId> = listed.iter().copied().filter(|id| id.kind() == BlobKind::Composite).collect();
        self.read_lists(&composites, &mut referenced).await?;
        // 3. Names, after every name op that returned before now.
        self.update(|s| s.phase = "reading names".into());
        if let Some(names) = &self.names {
            names.barrier().await.map_err(|e| Stop(format!("reading the names: {e}")))?;
            // Current objects, older versions, parts of uploads in progress.
            strata_names::read(&**names, |st| referenced.extend(st.named_blobs()));
        }
        // 4. Composites written since step 1 listed their partition.
        if !broken {
            self.update(|s| s.phase = "reading chunk lists".into());
            let again: BTreeSet<BlobId> =
                self.list(&partitions, false).await?.into_iter().filter(|id| id.kind() == BlobKind::Composite && !composites.contains(id)).collect();
            self.read_lists(&again, &mut referenced).await?;
        }
        let n_ref = referenced.len() as u64;
        self.update(|s| {
            s.referenced = n_ref;
            s.phase = "freeing".into();
        });
        // 5. Free what nothing holds and the grace period has passed for.
        for id in listed {
            if referenced.contains(&id) {
                continue;
            }
            let sweepable_kind = id.kind() == BlobKind::Chunk || self.names.is_some();
            if !sweepable_kind {
                continue;
            }
            let (owner, created_ms, expiry_ms) = match self.router.provenance(id).await {
                Ok(p) => p,
                Err(RouterError::NotFound | RouterError::Deleted | RouterError::Expired) => continue,
                Err(e) => {
                    self.error(format!("{id}: reading its owner: {e}"));
                    continue;
                }
            };
            if id.kind() != BlobKind::Chunk && owner != strata_router::S3_OWNER {
                continue;
            }
            self.update(|s| s.candidates += 1);
            if created_ms >= cutoff && !broken {
                self.totals.too_young.fetch_add(1, Ordering::Relaxed);
                self.update(|s| s.too_young += 1);
                continue;
            }
            // Expiring within the grace period anyway: a replaced S3 object
            // kept for the GETs still streaming it (they get their minutes).
            if expiry_ms != 0 && expiry_ms <= started_ms.saturating_add(grace_ms) && !broken {
                self.update(|s| s.expiring += 1);
                continue;
            }
            match self.router.remove_record(id).await {
                Ok(()) => {
                    tracing::info!(blob = %id, owner = %owner, created_ms, "orphan sweep freed a record nothing points at");
                    self.totals.freed.fetch_add(1, Ordering::Relaxed);
                    self.update(|s| s.freed += 1);
                }
                Err(RouterError::NotFound | RouterError::Expired) => {}
                Err(e) => self.error(format!("{id}: freeing it: {e}")),
            }
        }
        Ok(())
    }

    /// The blob ids present on any replica of `partitions`.
    async fn list(&self, partitions: &[u64], count: bool) -> Result<BTreeSet<BlobId>, Stop> {
        let mut out = BTreeSet::new();
        for (i, p) in partitions.iter().enumerate() {
            let keys = self.router.list_keys(*p).await.map_err(|e| Stop(format!("listing partition {p}: {e}")))?;
            let n = keys.len() as u64;
            out.extend(keys.iter().filter_map(|k| k.blob_id()));
            if count {
                self.update(|s| {
                    s.partitions_listed = i + 1;
                    s.keys += n;
                });
            }
        }
        Ok(out)
    }

    /// Adds the chunks of `composites` to `referenced`. A composite gone
    /// meanwhile holds nothing; one that cannot be read stops the pass.
    async fn read_lists(&self, composites: &BTreeSet<BlobId>, referenced: &mut HashSet<BlobId>) -> Result<(), Stop> {
        for id in composites {
            match self.router.chunks_of(*id).await {
                Ok(chunks) => referenced.extend(chunks),
                Err(RouterError::NotFound | RouterError::Deleted | RouterError::Expired) => {}
                Err(e) => return Err(Stop(format!("reading the chunk list of {id}: {e}"))),
            }
            self.update(|s| s.composites_read += 1);
        }
        Ok(())
    }
}

//! The scrubber (Ceph's scrub is the model): a background pass, throttled
//! and scheduled, over every replica on this node.
//!
//! Each pass, for every local replica:
//! 1. **Verify**: every live record is read back from the disk (past the
//!    page cache where the filesystem allows) and its CRC checked; one that
//!    fails is quarantined (`strata-engine`'s damage list), so its key
//!    answers "damaged" instead of wrong bytes.
//! 2. **Compare** (cluster): the replica's index against each peer
//!    replica's, a page of key digests at a time (light); a deep pass also
//!    compares each blob's data checksum. A key live on a peer but missing
//!    or damaged here is copied from the peer; a key deleted on a peer is
//!    deleted here; replicas whose checksums differ are reported.
//!
//! Each node repairs only its own replicas, so a pass never writes to a
//! peer. Progress is `GET /admin/scrub` (`strata scrub status`); `POST
//! /admin/scrub` starts a pass now (`strata scrub now`).

use crate::disks::Disks;
use crate::node::ClusterNode;
use crate::worker::{Next, Workers};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_engine::{EngineError, KeyState, Replica, Verified, WriteOp};
use strata_rpc::{DigestRequest, Fetched};
use strata_types::{Clock, Key};

/// Keys verified (and compared) per step; between steps the pass sleeps
/// to keep to its rate.
const PAGE_KEYS: usize = 1000;
/// Most data checksums a deep pass keeps for one replica to compare with
/// its peers (about 100 bytes each); past it the rest is compared lightly.
const DEEP_KEYS_MAX: usize = 4 << 20;
/// Most recent errors kept for the status page.
const ERRORS_KEPT: usize = 16;

/// When and how fast the scrubber runs.
#[derive(Debug, Clone, Copy)]
pub struct ScrubConfig {
    /// Time between the starts of two scheduled passes (`None`: only on request).
    pub interval: Option<Duration>,
    /// Bytes read per second at most while verifying.
    pub rate_bytes_per_sec: u64,
    /// Every this many scheduled passes is deep (data checksums compared).
    pub deep_every: u64,
}

impl Default for ScrubConfig {
    fn default() -> Self {
        Self { interval: Some(Duration::from_secs(24 * 3600)), rate_bytes_per_sec: 64 << 20, deep_every: 7 }
    }
}

/// What the scrubber is doing and has done.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ScrubStatus {
    /// A pass is running.
    pub running: bool,
    /// The running (or last) pass compares data checksums with peers.
    pub deep: bool,
    /// Passes finished since start.
    pub passes: u64,
    /// When the running (or last) pass started, ms since the epoch.
    pub started_ms: u64,
    /// When the last pass finished (0: none yet).
    pub finished_ms: u64,
    /// Replicas in the running (or last) pass, and how many are done.
    pub replicas_total: usize,
    /// Replicas done.
    pub replicas_done: usize,
    /// Keys checked in the running (or last) pass.
    pub keys_checked: u64,
    /// Record bytes read back and verified in it.
    pub bytes_verified: u64,
    /// Records found damaged (and quarantined) in it.
    pub damaged_found: u64,
    /// Keys copied here from a peer (missing or damaged here).
    pub repaired: u64,
    /// Deletes applied here because a peer had deleted the key.
    pub deletes_applied: u64,
    /// Keys whose data differs between two replicas that both check out.
    pub inconsistent: u64,
    /// Damaged ranges left after the pass (no peer could repair them, or
    /// a single node has no peer).
    pub unrepaired: u64,
    /// The most recent errors (peers unreachable and the like).
    pub errors: Vec<String>,
}

/// Counters over every pass, for `/metrics`.
#[derive(Debug, Default)]
pub struct ScrubTotals {
    /// Passes finished.
    pub passes: AtomicU64,
    /// Keys checked.
    pub keys_checked: AtomicU64,
    /// Bytes verified.
    pub bytes_verified: AtomicU64,
    /// Damaged records found.
    pub damaged_found: AtomicU64,
    /// Keys repaired from peers.
    pub repaired: AtomicU64,
    /// Deletes applied from peers.
    pub deletes_applied: AtomicU64,
    /// Inconsistent keys found.
    pub inconsistent: AtomicU64,
}

/// The node's scrubber.
pub struct Scrubber {
    disks: Arc<Disks>,
    cluster: Option<Arc<ClusterNode>>,
    clock: Arc<dyn Clock>,
    status: Mutex<ScrubStatus>,
    /// Totals for metrics.
    pub totals: ScrubTotals,
    running: AtomicBool,
    wake: Arc<tokio::sync::Notify>,
    requested_deep: AtomicBool,
    requested: AtomicBool,
}

impl Scrubber {
    /// A scrubber over `disks` (and, on a cluster node, its peers).
    pub fn new(disks: Arc<Disks>, cluster: Option<Arc<ClusterNode>>, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            disks,
            cluster,
            clock,
            status: Mutex::new(ScrubStatus::default()),
            totals: ScrubTotals::default(),
            running: AtomicBool::new(false),
            wake: Arc::default(),
            requested_deep: AtomicBool::new(false),
            requested: AtomicBool::new(false),
        })
    }

    /// The current status.
    pub fn status(&self) -> ScrubStatus {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Asks for a pass now; false if one is running already.
    pub fn request(&self, deep: bool) -> bool {
        if self.running.load(Ordering::SeqCst) {
            return false;
        }
        self.requested_deep.store(deep, Ordering::SeqCst);
        self.requested.store(true, Ordering::SeqCst);
        self.wake.notify_one();
        true
    }

    /// Runs passes on schedule and on request, as the worker `scrub`.
    pub fn start(self: &Arc<Self>, workers: &Workers, config: ScrubConfig) {
        let me = self.clone();
        let mut scheduled = 0u64;
        workers.spawn("scrub", Next::requested_or(&self.wake, config.interval), move || {
            let deep = if me.requested.swap(false, Ordering::SeqCst) {
                me.requested_deep.load(Ordering::SeqCst)
            } else {
                scheduled += 1;
                config.deep_every > 0 && scheduled.is_multiple_of(config.deep_every)
            };
            let next = Next::requested_or(&me.wake, config.interval);
            let me = me.clone();
            async move {
                me.pass(deep, config.rate_bytes_per_sec).await;
                Ok(next)
            }
        });
    }

    fn update(&self, f: impl FnOnce(&mut ScrubStatus)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    fn error(&self, e: String) {
        tracing::warn!(error = %e, "scrub");
        self.update(|s| {
            if s.errors.len() == ERRORS_KEPT {
                s.errors.remove(0);
            }
            s.errors.push(e);
        });
    }

    /// One pass over every local replica.
    pub async fn pass(&self, deep: bool, rate_bytes_per_sec: u64) {
        self.running.store(true, Ordering::SeqCst);
        let replicas = self.disks.replicas();
        let started_ms = self.clock.now_ms();
        self.update(|s| {
            let passes = s.passes;
            *s = ScrubStatus { running: true, deep, passes, started_ms, replicas_total: replicas.len(), ..ScrubStatus::default() };
        });
        tracing::info!(replicas = replicas.len(), deep, "scrub pass started");
        let pace = Pace::new(rate_bytes_per_sec);
        for replica in replicas {
            let crcs = self.verify(&replica, deep && self.cluster.is_some(), &pace).await;
            if let Some(node) = &self.cluster {
                self.compare(node, &replica, crcs.as_ref()).await;
            }
            let unrepaired = replica.damage().len() as u64;
            self.update(|s| {
                s.replicas_done += 1;
                s.unrepaired += unrepaired;
            });
        }
        let finished_ms = self.clock.now_ms();
        self.totals.passes.fetch_add(1, Ordering::Relaxed);
        self.update(|s| {
            s.running = false;
            s.passes += 1;
            s.finished_ms = finished_ms;
        });
        let st = self.status();
        tracing::info!(
            keys = st.keys_checked,
            bytes = st.bytes_verified,
            damaged = st.damaged_found,
            repaired = st.repaired,
            inconsistent = st.inconsistent,
            "scrub pass finished"
        );
        self.running.store(false, Ordering::SeqCst);
    }

    /// Step 1: reads back and checks every live record of `replica`. With
    /// `keep_crcs`, returns each live key's data checksum for step 2.
    async fn verify(&self, replica: &Arc<Replica>, keep_crcs: bool, pace: &Pace) -> Option<HashMap<Key, u32>> {
        let mut crcs = keep_crcs.then(HashMap::new);
        let mut after: Option<Key> = None;
        loop {
            let r = replica.clone();
            let from = after.clone();
            let page = tokio::task::spawn_blocking(move || {
                let keys = r.keys_after(from.as_ref(), PAGE_KEYS);
                let mut out = Vec::with_capacity(keys.len());
                for (key, state) in keys {
                    let verified = match state {
                        KeyState::Live { .. } => r.verify_key(&key),
                        _ => Ok(Verified::NotLive),
                    };
                    out.push((key, verified));
                }
                out
            })
            .await;
            let Ok(page) = page else {
                self.error(format!("partition {}: a verify step panicked", replica.partition()));
                return None;
            };
            let Some((last, _)) = page.last() else { return crcs };
            after = Some(last.clone());
            let (mut bytes, mut damaged) = (0u64, 0u64);
            for (key, v) in &page {
                match v {
                    Ok(Verified::Whole { data_crc, bytes: b }) => {
                        bytes += b;
                        if let Some(c) = crcs.as_mut()
                            && c.len() < DEEP_KEYS_MAX
                        {
                            c.insert(key.clone(), *data_crc);
                        }
                    }
                    Ok(Verified::Quarantined) => damaged += 1,
                    Ok(Verified::NotLive) => {}
                    Err(e) => self.error(format!("partition {}: verifying {key}: {e}", replica.partition())),
                }
            }
            let keys = page.len() as u64;
            self.totals.keys_checked.fetch_add(keys, Ordering::Relaxed);
            self.totals.bytes_verified.fetch_add(bytes, Ordering::Relaxed);
            self.totals.damaged_found.fetch_add(damaged, Ordering::Relaxed);
            self.update(|s| {
                s.keys_checked += keys;
                s.bytes_verified += bytes;
                s.damaged_found += damaged;
            });
            pace.spent(bytes).await;
        }
    }

    /// Step 2: compares `replica` with each peer replica of its partition
    /// and repairs this one from them.
    async fn compare(&self, node: &Arc<ClusterNode>, replica: &Arc<Replica>, crcs: Option<&HashMap<Key, u32>>) {
        let partition = replica.partition();
        let map = node.map();
        let Some(p) = map.partitions.get(&partition) else { return };
        let peers: Vec<(u64, String)> =
            p.replicas.iter().filter(|r| r.node != node.id()).filter_map(|r| map.nodes.get(&r.node).map(|n| (r.node, n.addr.clone()))).collect();
        let started_ms = self.clock.now_ms();
        let mut agreed = false;
        for (peer, addr) in peers {
            match self.compare_with(node, replica, peer, &addr, crcs).await {
                Ok(()) => agreed = true,
                Err(e) => self.error(format!("partition {partition}: comparing with node {peer}: {e}")),
            }
        }
        // Every key of a peer is now here as it is there (or quarantined):
        // damage found before this comparison no longer hides anything.
        if agreed && let Err(e) = replica.settle_damage(started_ms) {
            self.error(format!("partition {partition}: settling damage: {e}"));
        }
    }

    async fn compare_with(
        &self,
        node: &Arc<ClusterNode>,
        replica: &Arc<Replica>,
        peer: u64,
        addr: &str,
        crcs: Option<&HashMap<Key, u32>>,
    ) -> Result<(), String> {
        let partition = replica.partition();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let req = DigestRequest { partition, after: after.clone(), max: PAGE_KEYS as u32, deep: crcs.is_some() };
            let page = node.rpc().digest(addr, &req).await.map_err(|e| e.to_string())?;
            let Some(last) = page.last() else { return Ok(()) };
            after = Some(last.key.clone());
            let (mut fetch, mut deletes, mut inconsistent) = (Vec::new(), Vec::new(), 0u64);
            for d in &page {
                let Some(key) = Key::from_encoded(&d.key) else { return Err("the peer sent a malformed key".into()) };
                let here = replica.state_of(&key);
                let damaged_here = replica.is_damaged(&key);
                match (d.state, &here) {
                    // Live there; missing or damaged here: copy it.
                    (1, KeyState::Missing) => fetch.push(key),
                    (1, KeyState::Live { .. }) if damaged_here => fetch.push(key),
                    // Deleted there: delete here.
                    (2, KeyState::Missing | KeyState::Live { .. }) => deletes.push(key),
                    (1, KeyState::Live { .. }) => {
                        if let (Some(theirs), Some(ours)) = (d.data_crc, crcs.and_then(|c| c.get(&key)))
                            && theirs != *ours
                        {
                            tracing::error!(partition, peer, key = %key, theirs, ours, "replicas hold different data under one key");
                            inconsistent += 1;
                        }
                    }
                    _ => {}
                }
            }
            let repaired = self.copy_from(node, replica, addr, fetch).await?;
            let mut deleted = 0u64;
            for key in deletes {
                match replica.submit(WriteOp::ReplicaDelete { key }).await {
                    Ok(_) => deleted += 1,
                    Err(EngineError::Deleted) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            self.totals.repaired.fetch_add(repaired, Ordering::Relaxed);
            self.totals.deletes_applied.fetch_add(deleted, Ordering::Relaxed);
            self.totals.inconsistent.fetch_add(inconsistent, Ordering::Relaxed);
            self.update(|s| {
                s.repaired += repaired;
                s.deletes_applied += deleted;
                s.inconsistent += inconsistent;
            });
            if page.len() < PAGE_KEYS {
                return Ok(());
            }
        }
    }

    /// Copies `keys` from the peer at `addr` into `replica`; returns how many landed.
    async fn copy_from(&self, node: &Arc<ClusterNode>, replica: &Arc<Replica>, addr: &str, keys: Vec<Key>) -> Result<u64, String> {
        let mut n = 0;
        for batch in keys.chunks(64) {
            let got = node.rpc().fetch(addr, replica.partition(), batch).await.map_err(|e| e.to_string())?;
            for (key, (state, data)) in batch.iter().zip(got) {
                let op = match state {
                    Fetched::Live(rec) => {
                        let mut props: strata_format::PutProps = rec.props.into();
                        props.expiry_ms = rec.expiry_ms;
                        WriteOp::ReplicaPut { key: key.clone(), props, data, created_ms: rec.created_ms }
                    }
                    Fetched::Deleted => WriteOp::ReplicaDelete { key: key.clone() },
                    Fetched::Missing | Fetched::Damaged => continue,
                };
                match replica.submit(op).await {
                    Ok(_) => {
                        tracing::info!(partition = replica.partition(), key = %key, "scrub copied a key from a peer");
                        n += 1;
                    }
                    Err(EngineError::AlreadyExists | EngineError::Deleted) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
        Ok(n)
    }
}

/// Keeps a pass to its rate: after `bytes`, sleeps until the pass's bytes
/// so far would have taken that long at the rate.
struct Pace {
    rate: u64,
    start: tokio::time::Instant,
    bytes: AtomicU64,
}

impl Pace {
    fn new(rate: u64) -> Self {
        Self { rate, start: tokio::time::Instant::now(), bytes: AtomicU64::new(0) }
    }
    async fn spent(&self, bytes: u64) {
        let total = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if self.rate == 0 {
            return;
        }
        let due = self.start + Duration::from_secs_f64(total as f64 / self.rate as f64);
        tokio::time::sleep_until(due).await;
    }
}

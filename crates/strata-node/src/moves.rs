//! Replica moves, driven by the node that receives the replica (worker
//! `moves`). The map holds the move (`strata_cluster::Move`), so it
//! survives a crash or a leader change of any party: whoever restarts
//! picks it up from the map.
//!
//! 1. `StartMove` (an operator, a removal, a rebalance, re-replication):
//!    this node's reconciler creates the new replica, which pulls from the
//!    partition's replicas like any replica does. It serves nothing.
//! 2. Once it has caught up with every replica that serves (a round with
//!    each, after the move was seen, applied all the peer had), this node
//!    proposes `PromoteMove`: the new replica takes the old one's place
//!    and serves; the old one takes no more writes (its node refuses
//!    them, so a router with an older map learns of the move).
//! 3. Draining: the old replica stands still (it takes no writes and pulls
//!    from no one); the new one keeps pulling from it until two rounds at
//!    least a second apart, both answered by the old one at the promotion's
//!    epoch or later, applied all it had at the same position. Then `FinishMove`;
//!    the old node's reconciler drops its replica and files. If the old
//!    replica's node is down or its disk not up, there is nothing to drain
//!    and the move finishes at once (re-replication reads the survivors).

use crate::node::ClusterNode;
use crate::worker::{Next, PassFailed};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use strata_cluster::{Command, MovePhase, Outcome, ReplicaLoc};
use strata_types::PartitionId;

/// How often the worker looks at the moves this node receives.
const EVERY: Duration = Duration::from_millis(200);
/// Two clean drain rounds must be this far apart.
const DRAIN_SETTLE_MS: u64 = 1_000;

/// Paces the bytes this node copies into the replicas a rebalancing
/// fills, all of them together, to a rate: each batch is given the next
/// free slot of the node's budget, and waits for it.
#[derive(Default)]
pub(crate) struct Pacer {
    next: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Pacer {
    /// How long a batch of `bytes` waits at `rate` bytes/s, asked at `now`:
    /// the budget used by earlier batches that has not elapsed yet.
    fn reserve(&self, bytes: u64, rate: u64, now: std::time::Instant) -> Duration {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let start = next.filter(|n| *n > now).unwrap_or(now);
        *next = Some(start + Duration::from_secs_f64(bytes as f64 / rate.max(1) as f64));
        start - now
    }

    /// Waits for a batch's slot.
    pub(crate) async fn wait(&self, bytes: u64, rate: u64) {
        let d = self.reserve(bytes, rate, std::time::Instant::now());
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }
}

/// How far the copy into one replica this node receives stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MoveCopy {
    /// Partition.
    pub partition: PartitionId,
    /// The replica being filled (on this node).
    pub to: ReplicaLoc,
    /// Bytes of blob data copied into it so far.
    pub copied_bytes: u64,
    /// Bytes the largest source replica's log held at the last round: the
    /// copy is done at about this much (less what was deleted).
    pub source_bytes: u64,
    /// Bytes its own log holds now.
    pub local_bytes: u64,
    /// When the first round that copied began, and when the last round
    /// that copied ended (this node's clock, ms).
    pub first_ms: u64,
    /// See `first_ms`.
    pub last_ms: u64,
}

impl MoveCopy {
    /// Bytes per second from the first copying round's start to the last
    /// one's end.
    pub fn rate(&self) -> f64 {
        let secs = self.last_ms.saturating_sub(self.first_ms) as f64 / 1000.0;
        if secs > 0.0 { self.copied_bytes as f64 / secs } else { 0.0 }
    }
}

/// The copies into the replicas this node receives by moves: what the
/// console shows as a move's progress and MB/s, and the metric
/// `strata_move_bytes_copied_total`.
#[derive(Default)]
pub struct MoveCopies {
    total: std::sync::atomic::AtomicU64,
    each: std::sync::Mutex<BTreeMap<PartitionId, MoveCopy>>,
}

impl MoveCopies {
    /// Counts `bytes` copied into `to` by a round that began at `began_ms`
    /// and ended at `now_ms`, the sources holding `source_bytes` and the
    /// replica `local_bytes`. A copy into another disk than the one
    /// remembered starts over (a new move).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn note(&self, partition: PartitionId, to: ReplicaLoc, bytes: u64, source_bytes: u64, local_bytes: u64, began_ms: u64, now_ms: u64) {
        self.total.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        let mut each = self.each.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = MoveCopy { partition, to, copied_bytes: 0, source_bytes: 0, local_bytes: 0, first_ms: began_ms, last_ms: began_ms };
        let c = each.entry(partition).or_insert(fresh);
        if c.to != to {
            *c = fresh;
        }
        c.copied_bytes += bytes;
        c.source_bytes = c.source_bytes.max(source_bytes);
        c.local_bytes = local_bytes;
        if bytes > 0 {
            c.last_ms = now_ms;
        }
    }

    /// Bytes copied by moves into this node since it started.
    pub fn total(&self) -> u64 {
        self.total.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The copies of the moves `live` says are still under way (others
    /// are forgotten).
    pub fn current(&self, live: impl Fn(PartitionId, ReplicaLoc) -> bool) -> Vec<MoveCopy> {
        let mut each = self.each.lock().unwrap_or_else(|p| p.into_inner());
        each.retain(|p, c| live(*p, c.to));
        each.values().copied().collect()
    }
}

/// What the worker remembers between passes (this node's clock).
#[derive(Default)]
struct MoveWatch {
    /// When each move was first seen here.
    seen: BTreeMap<(PartitionId, ReplicaLoc), u64>,
    /// The first clean drain round of each move: when, at which token.
    drained: BTreeMap<(PartitionId, ReplicaLoc), (u64, u64)>,
}

impl ClusterNode {
    /// Bytes per second this node may copy, all its filling replicas of a
    /// rebalancing together, if its replica of `partition` is one of them:
    /// the plan's throttle; `None` otherwise.
    pub(crate) fn move_throttle(&self, partition: PartitionId) -> Option<u64> {
        let map = self.map();
        let plan = map.rebalance.as_ref().filter(|r| r.throttle_mb_s > 0)?;
        let p = map.partitions.get(&partition)?;
        let m = p.moving.filter(|m| m.to.node == self.id() && m.phase == MovePhase::Filling)?;
        plan.moves.iter().any(|pm| pm.partition == partition && pm.to == m.to).then_some(u64::from(plan.throttle_mb_s) << 20)
    }

    /// The copies into the replicas this node receives by moves under way.
    pub fn move_copies(&self) -> Vec<MoveCopy> {
        let (map, me) = (self.map(), self.id());
        self.move_copies.current(|p, to| map.partitions.get(&p).and_then(|p| p.moving).is_some_and(|m| m.to == to && m.to.node == me))
    }

    /// Where this node's replica of `partition` is being filled by a move,
    /// if it is.
    pub(crate) fn filling(&self, partition: PartitionId) -> Option<ReplicaLoc> {
        let map = self.map();
        map.partitions.get(&partition)?.moving.filter(|m| m.to.node == self.id() && m.phase == MovePhase::Filling).map(|m| m.to)
    }

    /// Starts the worker `moves`.
    pub(crate) fn start_mover(self: &Arc<Self>) {
        let me = self.clone();
        let watch = Arc::new(std::sync::Mutex::new(MoveWatch::default()));
        self.workers.spawn("moves", Next::After(EVERY), move || {
            let (me, watch) = (me.clone(), watch.clone());
            async move {
                let mut failed = Vec::new();
                for cmd in me.move_steps(&watch) {
                    match me.propose(cmd.clone()).await {
                        Ok(Outcome::Refused(e)) => tracing::debug!(command = ?cmd, error = %e, "move step refused (the map moved on)"),
                        Ok(_) => tracing::info!(command = ?cmd, "replica move advanced"),
                        Err(e) => failed.push(format!("{cmd:?}: {e}")),
                    }
                }
                if failed.is_empty() { Ok(Next::After(EVERY)) } else { Err(PassFailed::new(failed.join("; "), EVERY)) }
            }
        });
    }

    /// The commands that advance the moves this node receives.
    fn move_steps(&self, watch: &std::sync::Mutex<MoveWatch>) -> Vec<Command> {
        let map = self.map();
        let me = self.id();
        let now = self.clock().now_ms();
        let mut w = watch.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        let mut live = std::collections::BTreeSet::new();
        for p in map.partitions.values() {
            let Some(m) = p.moving.filter(|m| m.to.node == me) else { continue };
            let at = (p.id, m.to);
            live.insert(at);
            let seen = *w.seen.entry(at).or_insert(now);
            if self.disks.get(m.to.disk).and_then(|s| s.replica(p.id)).is_none() {
                continue; // The reconciler has not created it yet.
            }
            match m.phase {
                MovePhase::Filling => {
                    let sources: Vec<ReplicaLoc> = p.replicas.iter().copied().filter(|r| r.node != me && map.serves(*r)).collect();
                    let ready = !sources.is_empty()
                        && sources.iter().all(|r| self.replication.pair(p.id, r.node).is_some_and(|l| l.applied_all() && l.last_ok_ms() > seen));
                    if ready {
                        out.push(Command::PromoteMove { partition: p.id, to: m.to });
                    }
                }
                MovePhase::Draining { since_epoch } => {
                    if !map.serves(m.from) {
                        out.push(Command::FinishMove { partition: p.id, to: m.to });
                        continue;
                    }
                    match self.replication.pair(p.id, m.from.node).filter(|l| l.applied_all() && l.answer_epoch >= since_epoch && l.last_ok_ms() > seen) {
                        Some(l) => match w.drained.get(&at).copied() {
                            Some((first, token)) if token == l.token_lsn && now.saturating_sub(first) >= DRAIN_SETTLE_MS => {
                                out.push(Command::FinishMove { partition: p.id, to: m.to });
                            }
                            Some((_, token)) if token == l.token_lsn => {}
                            _ => {
                                w.drained.insert(at, (now, l.token_lsn));
                            }
                        },
                        None => {
                            w.drained.remove(&at);
                        }
                    }
                }
            }
        }
        w.seen.retain(|k, _| live.contains(k));
        w.drained.retain(|k, _| live.contains(k));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy's bytes add up per move; one into another disk starts over;
    /// a move no longer under way is forgotten; the total keeps counting.
    #[test]
    fn move_copies_count_per_move_and_forget_finished_ones() {
        let c = MoveCopies::default();
        let to = ReplicaLoc { node: 4, disk: 0 };
        c.note(1, to, 1000, 5000, 1000, 10_000, 11_000);
        c.note(1, to, 3000, 6000, 4000, 11_500, 12_000);
        c.note(1, to, 0, 6000, 4000, 13_000, 14_000);
        let now = c.current(|_, _| true);
        assert_eq!(now.len(), 1);
        assert_eq!((now[0].copied_bytes, now[0].source_bytes, now[0].local_bytes), (4000, 6000, 4000));
        assert_eq!(now[0].rate(), 2000.0);
        c.note(1, ReplicaLoc { node: 4, disk: 1 }, 10, 10, 10, 15_000, 15_000);
        assert_eq!(c.current(|_, _| true)[0].copied_bytes, 10);
        assert!(c.current(|_, _| false).is_empty());
        assert_eq!(c.total(), 4010);
    }

    /// Batches from every filling replica share one budget: at 1 MB/s,
    /// three 1 MB batches asked at once wait 0, 1 and 2 s; one asked after
    /// the budget has elapsed does not wait.
    #[test]
    fn the_pacer_shares_one_rate_across_batches() {
        let p = Pacer::default();
        let t = std::time::Instant::now();
        let mb = 1u64 << 20;
        let waits: Vec<f64> = (0..3).map(|_| p.reserve(mb, mb, t).as_secs_f64()).collect();
        assert_eq!(waits, vec![0.0, 1.0, 2.0]);
        assert_eq!(p.reserve(mb, mb, t + Duration::from_secs(10)), Duration::ZERO);
    }
}

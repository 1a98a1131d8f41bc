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

/// What the worker remembers between passes (this node's clock).
#[derive(Default)]
struct MoveWatch {
    /// When each move was first seen here.
    seen: BTreeMap<(PartitionId, ReplicaLoc), u64>,
    /// The first clean drain round of each move: when, at which token.
    drained: BTreeMap<(PartitionId, ReplicaLoc), (u64, u64)>,
}

impl ClusterNode {
    /// Bytes per second this node may copy into its replica of `partition`:
    /// the rebalancing's throttle while that replica fills as one of its
    /// moves; `None` otherwise.
    pub(crate) fn move_throttle(&self, partition: PartitionId) -> Option<u64> {
        let map = self.map();
        let plan = map.rebalance.as_ref().filter(|r| r.throttle_mb_s > 0)?;
        let p = map.partitions.get(&partition)?;
        let m = p.moving.filter(|m| m.to.node == self.id() && m.phase == MovePhase::Filling)?;
        plan.moves.iter().any(|pm| pm.partition == partition && pm.to == m.to).then_some(u64::from(plan.throttle_mb_s) << 20)
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

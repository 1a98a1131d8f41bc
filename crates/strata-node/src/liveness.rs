//! The node's side of failure detection in the map (FDS §3.2): every node
//! heartbeats the metadata members with the health of its disks (worker
//! `heartbeat`); every member records what it hears, and the one that
//! leads turns silence and failing disks into map commands (worker
//! `liveness`, deciding with `strata_cluster::Liveness`), then moves
//! replicas off what must be left (`ClusterMap::evacuation`: removed nodes
//! and disks, failed disks, nodes down past `--down-out-ms`).

use crate::node::ClusterNode;
use crate::worker::{Next, PassFailed};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use strata_cluster::{DiskReport, Heartbeat, KIND_HEARTBEAT};

/// How long a disk's probe (a small write and fsync) may take before the
/// disk counts as not answering.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Probes in flight, one per disk, so a hung disk does not pile up threads.
#[derive(Default)]
pub(crate) struct Probes {
    busy: std::sync::Mutex<std::collections::BTreeMap<u32, Arc<AtomicBool>>>,
}

impl ClusterNode {
    /// Records a heartbeat a node sent this member; answers with this
    /// member's map epoch.
    pub fn record_heartbeat(&self, hb: &Heartbeat) -> u64 {
        let now = self.clock().now_ms();
        self.liveness.lock().unwrap_or_else(|p| p.into_inner()).heartbeat(hb, now);
        self.map().epoch
    }

    /// When this member last heard from `node` (ms since the epoch).
    pub fn last_heard(&self, node: strata_cluster::NodeId) -> Option<u64> {
        self.liveness.lock().unwrap_or_else(|p| p.into_inner()).last_seen(node)
    }

    /// The health of every disk the map gives this node.
    pub async fn disk_reports(&self) -> Vec<DiskReport> {
        let map = self.map();
        let Some(me) = map.nodes.get(&self.id()) else { return Vec::new() };
        let mut out = Vec::new();
        for (i, disk) in me.disks.iter().enumerate() {
            let i = i as u32;
            let report = |healthy: bool, detail: String| DiskReport { disk: i, healthy, detail };
            let Some(store) = self.disks.get(i) else {
                // Not opened yet (the reconciler has not seen the disk) is
                // no failure; a failed open is.
                if let Some(e) = self.open_failures.lock().unwrap_or_else(|p| p.into_inner()).get(&i) {
                    out.push(report(false, format!("disk {} could not be opened: {e}", disk.path)));
                }
                continue;
            };
            if let Some(r) = store.replicas().iter().find(|r| r.status().read_only == Some(strata_engine::ReadOnlyReason::IoFailed)) {
                out.push(report(false, format!("partition {} on disk {} had an I/O failure", r.partition(), disk.path)));
                continue;
            }
            out.push(match self.probe(i, self.config.data_dir.join(&disk.path)).await {
                Ok(()) => report(true, String::new()),
                Err(e) => report(false, e),
            });
        }
        out
    }

    /// Writes, fsyncs and removes a small file on the disk, off the async
    /// threads, within [`PROBE_TIMEOUT`].
    async fn probe(&self, disk: u32, dir: PathBuf) -> Result<(), String> {
        let busy = self.probes.busy.lock().unwrap_or_else(|p| p.into_inner()).entry(disk).or_default().clone();
        if busy.swap(true, Ordering::SeqCst) {
            return Err(format!("{}: the last probe has not returned", dir.display()));
        }
        let shown = dir.display().to_string();
        let flag = busy.clone();
        let task = tokio::task::spawn_blocking(move || {
            let r = (|| -> std::io::Result<()> {
                use std::io::Write;
                let path = dir.join(".strata-probe");
                let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&path)?;
                f.write_all(b"strata disk probe")?;
                f.sync_data()?;
                drop(f);
                std::fs::remove_file(&path)
            })();
            flag.store(false, Ordering::SeqCst);
            r
        });
        match tokio::time::timeout(PROBE_TIMEOUT, task).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(format!("{shown}: probe write failed: {e}")),
            Ok(Err(e)) => Err(format!("{shown}: probe panicked: {e}")),
            Err(_) => Err(format!("{shown}: no answer within {PROBE_TIMEOUT:?}")),
        }
    }

    /// Starts the worker `heartbeat`: every period, the disks' health to
    /// every metadata member.
    pub(crate) fn start_heartbeat(self: &Arc<Self>) {
        let me = self.clone();
        let net = strata_net::Client::new();
        let every = self.config.heartbeat;
        self.workers.spawn("heartbeat", Next::Now, move || {
            let (me, net) = (me.clone(), net.clone());
            async move {
                let hb = Heartbeat { node: me.id(), epoch: me.map().epoch, disks: me.disk_reports().await };
                let payload = postcard::to_stdvec(&hb).map_err(|e| PassFailed::new(e.to_string(), every))?;
                let members: Vec<String> = me.config.meta_peers.values().cloned().collect();
                let sends = members.iter().map(|addr| net.post_frame(addr, "/meta/v1/heartbeat", KIND_HEARTBEAT, &payload, every.max(Duration::from_secs(1))));
                let answers = futures_util::future::join_all(sends).await;
                let mut heard = false;
                let mut errors = Vec::new();
                for a in answers {
                    match a.map(|b| postcard::from_bytes::<u64>(&b)) {
                        Ok(Ok(epoch)) => {
                            heard = true;
                            me.saw_epoch(epoch);
                        }
                        Ok(Err(e)) => errors.push(e.to_string()),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                if heard || members.is_empty() {
                    Ok(Next::After(every))
                } else {
                    Err(PassFailed::new(format!("no metadata member heard the heartbeat: {}", errors.join("; ")), every))
                }
            }
        });
    }

    /// On a metadata member, starts the worker `liveness`: while this
    /// member leads, it marks silent nodes down (and back up) and failing
    /// disks failed in the map.
    pub(crate) fn start_liveness(self: &Arc<Self>) {
        let Some(meta) = self.meta.clone() else { return };
        let me = self.clone();
        let every = (self.config.heartbeat / 2).max(Duration::from_millis(50));
        self.workers.spawn("liveness", Next::After(every), move || {
            let (me, meta) = (me.clone(), meta.clone());
            async move {
                let st = meta.status();
                let leading = st.leader == Some(st.id);
                let map = me.map();
                let now = me.clock().now_ms();
                let mut cmds = me.liveness.lock().unwrap_or_else(|p| p.into_inner()).decide(&map, now, leading);
                // Evacuation (removals, failed disks, nodes down past the
                // down-out time) once the map says nothing else is to change.
                if leading && cmds.is_empty() {
                    cmds = map.evacuation(
                        now,
                        me.config.down_out.as_millis() as u64,
                        me.config.tract_down_out.as_millis() as u64,
                        me.config.max_moves,
                        me.config.recovery_placement,
                    );
                }
                // Then the rebalancing under way, a few moves at a time.
                if leading && cmds.is_empty() {
                    cmds = map.rebalance_steps(now);
                }
                let mut failed = Vec::new();
                for cmd in cmds {
                    match meta.propose(cmd.clone().by_system(now)).await {
                        // Already so: the map had not caught up with the last pass.
                        Ok(strata_cluster::Outcome::Refused(e)) => tracing::debug!(command = ?cmd, error = %e, "failure detection: refused"),
                        Ok(_) => tracing::warn!(command = ?cmd, "failure detection or evacuation changed the cluster map"),
                        Err(e) => failed.push(format!("{cmd:?}: {e}")),
                    }
                }
                if failed.is_empty() { Ok(Next::After(every)) } else { Err(PassFailed::new(failed.join("; "), every)) }
            }
        });
    }
}

//! A node of a cluster: its cached cluster map (from its own metadata
//! member, or pulled from the members), its disks and replicas as the map
//! places them, and the replica RPCs it answers.

use crate::Disks;
use crate::replication::Replication;
use crate::worker::{Next, PassFailed, Workers};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use strata_cluster::meta::{MapFeed, MetaConfig, MetaError, MetaService};
use strata_cluster::{ClusterMap, Command, NodeId, Outcome, decode_map, encode_map};
use strata_engine::{EngineConfig, Replica, Store};
use strata_rpc::{ReplicaHost, RpcClient};
use strata_types::{Clock, PartitionId};
use tokio::sync::watch;

/// How a cluster node is set up.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// This node's id (as `strata node add` registered it).
    pub node_id: NodeId,
    /// Data directory: metadata, the cached map, and relative disk paths.
    pub data_dir: PathBuf,
    /// The metadata group: member id → `host:port`.
    pub meta_peers: BTreeMap<NodeId, String>,
    /// Engine settings for every store.
    pub engine: EngineConfig,
    /// Idle period of intra-zone replication.
    pub intra_period: Duration,
    /// Idle period of inter-zone replication.
    pub inter_period: Duration,
    /// On a node outside the metadata group: follow the group's log as a
    /// Raft learner, so this node holds the names too and can serve S3.
    pub names_learner: bool,
    /// How often the node heartbeats the metadata members.
    pub heartbeat: Duration,
    /// How long a node may be silent before the leader marks it down.
    pub down_after: Duration,
    /// How long a node may stay down before the leader moves its replicas
    /// elsewhere (Ceph's down-out interval).
    pub down_out: Duration,
    /// How long a node may stay down before the leader re-creates its
    /// replicas of tract rows elsewhere (FDS: at once).
    pub tract_down_out: Duration,
    /// Moves under way at most, cluster-wide, for evacuation.
    pub max_moves: usize,
    /// Where evacuation re-creates a replica.
    pub recovery_placement: strata_cluster::RecoveryPlacement,
    /// How often read-write store hints are pushed to their nodes.
    pub hint_period: Duration,
    /// How long a read-write store delete is kept before it may be
    /// reclaimed; hints live half of it.
    pub delete_grace: Duration,
}

/// Errors of cluster operations.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The metadata service failed.
    #[error(transparent)]
    Meta(#[from] MetaError),
    /// This node is not a metadata member and no member answered.
    #[error("no metadata member answered: {0}")]
    NoMeta(String),
    /// A store could not be opened.
    #[error("{0}")]
    Storage(String),
}

/// One cluster node.
pub struct ClusterNode {
    /// Configuration.
    pub config: ClusterConfig,
    /// The node's stores.
    pub disks: Arc<Disks>,
    /// The metadata member, if this node is one.
    pub meta: Option<Arc<MetaService>>,
    /// On a node outside the group with `names_learner`: its Raft learner,
    /// which applies the group's log (the names, for S3) without voting.
    pub learner: Option<Arc<MetaService>>,
    /// Replication state (lag, counters).
    pub replication: Arc<Replication>,
    /// The node's background workers.
    pub workers: Arc<Workers>,
    /// On a metadata member: the heartbeats it heard.
    pub(crate) liveness: std::sync::Mutex<strata_cluster::Liveness>,
    pub(crate) probes: crate::liveness::Probes,
    /// Disks the reconciler could not open, and why.
    pub(crate) open_failures: std::sync::Mutex<BTreeMap<u32, String>>,
    /// Paces the copies a rebalancing makes into this node.
    pub(crate) pacer: crate::moves::Pacer,
    /// The copies into the replicas this node receives by moves.
    pub move_copies: crate::moves::MoveCopies,
    map_tx: watch::Sender<Arc<ClusterMap>>,
    /// Held while a map is published, so a slower older map never replaces
    /// a newer one (the feed and a catch-up publish concurrently).
    publishing: std::sync::Mutex<()>,
    feed: std::sync::OnceLock<MapFeed>,
    clock: Arc<dyn Clock>,
    rpc: RpcClient,
    /// This node, for what it hands out (the read-write stores' transport).
    pub(crate) me: std::sync::OnceLock<std::sync::Weak<ClusterNode>>,
    /// The read-write stores, once the first disk is open (`rw.rs`).
    pub(crate) rw: std::sync::OnceLock<crate::rw::RwService>,
    /// Blobs whose metadata this node, as a row's primary, is changing.
    pub(crate) tract_locks: crate::tracts::MetaLocks,
    /// Týr's participant for the rows this node leads.
    txn: std::sync::OnceLock<strata_txn::Participant>,
    /// Writes and reads of a tract row this node refused because the
    /// caller's map disagreed with the row's version (`ReplicaHost::fence`).
    pub fenced: std::sync::atomic::AtomicU64,
}

impl ClusterNode {
    /// Starts the node: its metadata member (if listed among the peers), the
    /// map feed, the reconciler that opens the replicas the map places here,
    /// replication, heartbeats (and, on a member, failure detection). Its
    /// loops run as `workers`.
    pub async fn start(config: ClusterConfig, clock: Arc<dyn Clock>, workers: Arc<Workers>) -> Result<Arc<Self>, ClusterError> {
        std::fs::create_dir_all(&config.data_dir).map_err(|e| ClusterError::Storage(format!("{}: {e}", config.data_dir.display())))?;
        // A member and a learner run the same Raft node; only its role differs.
        let member = config.meta_peers.contains_key(&config.node_id);
        let raft =
            if member || config.names_learner { Some(MetaService::start(MetaConfig::new(config.node_id, config.data_dir.join("meta"))).await?) } else { None };
        let (meta, learner) = if member { (raft, None) } else { (None, raft) };
        // Start from the cached map so the node serves before the group answers.
        let cached = std::fs::read(config.data_dir.join("cluster-map")).ok().and_then(|b| decode_map(&b).ok()).unwrap_or_default();
        let (map_tx, _) = watch::channel(Arc::new(cached));
        let node = Arc::new(Self {
            disks: Arc::new(Disks::default()),
            meta,
            learner,
            replication: Arc::new(Replication::new(clock.clone())),
            workers,
            liveness: std::sync::Mutex::new(strata_cluster::Liveness::new(config.down_after.as_millis() as u64)),
            probes: Default::default(),
            open_failures: Default::default(),
            pacer: Default::default(),
            move_copies: Default::default(),
            map_tx,
            publishing: std::sync::Mutex::new(()),
            feed: std::sync::OnceLock::new(),
            clock,
            rpc: RpcClient::new(Duration::from_secs(10)),
            me: std::sync::OnceLock::new(),
            rw: std::sync::OnceLock::new(),
            tract_locks: Default::default(),
            fenced: Default::default(),
            txn: std::sync::OnceLock::new(),
            config,
        });
        let _ = node.me.set(Arc::downgrade(&node));
        // The cached map opens the disks at once; only a map from the
        // metadata group takes replicas away (the cache can be older than
        // the replicas on disk if writing it failed).
        node.reconcile(&node.map(), false);
        node.clone().spawn_map_feed();
        node.clone().spawn_reconciler();
        node.clone().spawn_full_partition_reporter();
        node.clone().spawn_learner_join();
        crate::replication::spawn(&node);
        node.start_heartbeat();
        node.start_liveness();
        node.start_mover();
        let hint_period = node.config.hint_period;
        node.clone().spawn_hint_pusher(hint_period);
        node.clone().spawn_delete_reclaimer();
        Ok(node)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.config.node_id
    }

    /// The current cluster map.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map_tx.borrow().clone()
    }

    /// A receiver of map changes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterMap>> {
        self.map_tx.subscribe()
    }

    /// Týr's participant (default settings unless [`Self::set_txn_config`] came first).
    pub fn txn(&self) -> &strata_txn::Participant {
        self.txn.get_or_init(|| strata_txn::Participant::new(Default::default()))
    }

    /// Sets the participant's settings; false when it already runs.
    pub fn set_txn_config(&self, config: strata_txn::participant::Config) -> bool {
        self.txn.set(strata_txn::Participant::new(config)).is_ok()
    }

    /// A node reported epoch `epoch`: refresh the map if it is newer.
    pub fn saw_epoch(&self, epoch: u64) {
        if let Some(feed) = self.feed.get() {
            feed.saw_epoch(epoch);
        }
    }

    /// The RPC client.
    pub fn rpc(&self) -> &RpcClient {
        &self.rpc
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Brings this node's map up to the newest the metadata group has
    /// committed (a read index from the leader, applied here, published),
    /// for a request naming a partition the map does not hold yet. Gives up
    /// after 3 s (no leader, cut off): the map stays as it was.
    pub async fn catch_up(&self) {
        let Some(raft) = self.raft_node() else { return };
        let caught = tokio::time::timeout(Duration::from_secs(3), async {
            let index = raft.read_index().await.ok()?;
            raft.wait_applied(index).await;
            Some(raft.map())
        });
        if let Ok(Some(map)) = caught.await {
            self.publish(map);
        }
    }

    fn publish(&self, map: Arc<ClusterMap>) {
        let _one_at_a_time = self.publishing.lock().unwrap_or_else(|p| p.into_inner());
        if map.epoch <= self.map().epoch && self.map().epoch != 0 {
            return;
        }
        if let Err(e) = strata_engine::fsutil::write_atomic(&self.config.data_dir.join("cluster-map"), &encode_map(&map)) {
            tracing::warn!(error = %e, "could not cache the cluster map");
        }
        self.map_tx.send_replace(map);
    }

    /// Publishes the maps of the node's metadata member, or, on a node
    /// outside the group, the maps pulled from the members.
    fn spawn_map_feed(self: Arc<Self>) {
        let mut rx = match self.meta.clone() {
            Some(meta) => meta.subscribe(),
            None => {
                let members: Vec<String> = self.config.meta_peers.values().cloned().collect();
                let feed = MapFeed::pull(members, self.map(), Duration::from_secs(2));
                let _ = self.feed.set(feed.clone());
                feed.subscribe()
            }
        };
        let me = self.clone();
        self.workers.spawn("map-feed", Next::Now, move || {
            let m = rx.borrow_and_update().clone();
            me.publish(m);
            let next = Next::on_change(rx.clone());
            async move { Ok(next) }
        });
    }

    /// The Raft node this node runs, member or learner: the one that
    /// answers Raft messages sent here.
    pub fn raft_node(&self) -> Option<Arc<MetaService>> {
        self.meta.clone().or_else(|| self.learner.clone())
    }

    /// A learner asks the group to add it, once the map says at which
    /// address the others reach this node, and asks again whenever it finds
    /// itself outside the membership (on every map change, and every 2 s).
    fn spawn_learner_join(self: Arc<Self>) {
        let Some(learner) = self.learner.clone() else { return };
        let members: Vec<String> = self.config.meta_peers.values().cloned().collect();
        let mut maps = self.subscribe();
        let me = self.clone();
        self.workers.spawn("learner-join", Next::Now, move || {
            let (me, learner, members) = (me.clone(), learner.clone(), members.clone());
            let _ = maps.borrow_and_update();
            let mut changed = maps.clone();
            async move {
                let mut result = Ok(());
                if !learner.in_membership()
                    && let Some(addr) = me.map().nodes.get(&me.config.node_id).map(|n| n.addr.clone())
                {
                    match learner.ask_to_learn(&members, &addr).await {
                        Ok(()) => tracing::info!(addr, "joined the metadata group as a learner"),
                        Err(e) => result = Err(e.to_string()),
                    }
                }
                // Again on every map change, and every 2 s.
                let next = Next::Until(Box::pin(async move { !matches!(tokio::time::timeout(Duration::from_secs(2), changed.changed()).await, Ok(Err(_))) }));
                match result {
                    Ok(()) => Ok(next),
                    Err(e) => Err(PassFailed::new(format!("could not join the metadata group as a learner yet: {e}"), Duration::from_secs(2))),
                }
            }
        });
    }

    fn spawn_reconciler(self: Arc<Self>) {
        let mut rx = self.subscribe();
        let me = self.clone();
        self.workers.spawn("reconciler", Next::on_change(rx.clone()), move || {
            let map = rx.borrow_and_update().clone();
            let next = Next::on_change(rx.clone());
            let me = me.clone();
            async move {
                tokio::task::spawn_blocking(move || me.reconcile(&map, true))
                    .await
                    .map_err(|e| PassFailed::new(format!("reconciler panicked: {e}"), Duration::from_secs(1)))?;
                Ok(next)
            }
        });
    }

    /// Every 5 s: a local replica full by policy (past its capacity
    /// fraction) makes its partition read-only in the map, so routers stop
    /// choosing it for puts (Ambry's partition states). Disk-full and I/O
    /// failures are this node's own trouble and stay local.
    fn spawn_full_partition_reporter(self: Arc<Self>) {
        let me = self.clone();
        self.workers.spawn("full-partition-reporter", Next::After(Duration::from_secs(5)), move || {
            let me = me.clone();
            async move {
                let map = me.map();
                let mut failed = None;
                for r in me.disks.replicas() {
                    let full = r.status().read_only == Some(strata_engine::ReadOnlyReason::Capacity);
                    let listed_rw = map.partitions.get(&r.partition()).is_some_and(|p| p.state == strata_cluster::PartitionState::ReadWrite);
                    if full && listed_rw {
                        let cmd = Command::SetPartitionState { partition: r.partition(), state: strata_cluster::PartitionState::ReadOnly };
                        match me.propose(cmd).await {
                            Ok(_) => tracing::info!(partition = r.partition(), "partition is full: marked read-only in the cluster map"),
                            Err(e) => failed = Some(format!("could not mark full partition {} read-only: {e}", r.partition())),
                        }
                    }
                }
                match failed {
                    None => Ok(Next::After(Duration::from_secs(5))),
                    Some(e) => Err(PassFailed::new(e, Duration::from_secs(5))),
                }
            }
        });
    }

    /// Opens the store of every disk the map gives this node, creates every
    /// replica it places here (a new replica, or the destination of a move,
    /// then fills itself through replication), and, with `may_drop`, drops
    /// the replicas it no longer places here (a finished or cancelled move)
    /// with their files.
    fn reconcile(&self, map: &ClusterMap, may_drop: bool) {
        let me_id = self.config.node_id;
        let Some(me) = map.nodes.get(&me_id) else {
            // Removed from the map (decommissioned): its replicas of the
            // map's partitions have all moved away.
            if may_drop && map.epoch > 0 {
                self.drop_unplaced(map);
            }
            return;
        };
        // The memory budgets are the node's, shared by its disks.
        let mut engine = self.config.engine.clone();
        engine.tail_cache_bytes /= me.disks.len().max(1) as u64;
        engine.write_cache_bytes /= me.disks.len().max(1) as u64;
        for (i, disk) in me.disks.iter().enumerate() {
            let i = i as u32;
            if self.disks.get(i).is_some() {
                continue;
            }
            let path = self.config.data_dir.join(&disk.path);
            match Store::open(&path, engine.clone(), self.clock.clone()) {
                Ok(s) => {
                    self.disks.insert(i, Arc::new(s));
                    self.open_failures.lock().unwrap_or_else(|p| p.into_inner()).remove(&i);
                }
                Err(e) => {
                    tracing::error!(disk = %path.display(), error = %e, "cannot open disk");
                    self.open_failures.lock().unwrap_or_else(|p| p.into_inner()).insert(i, e.to_string());
                }
            }
        }
        for p in map.partitions.values() {
            for r in map.holders(p.id).into_iter().filter(|r| r.node == me_id) {
                let Some(store) = self.disks.get(r.disk) else { continue };
                if store.replica(p.id).is_none() {
                    match store.create_replica(p.id) {
                        Ok(_) => tracing::info!(partition = p.id, disk = r.disk, "created replica"),
                        Err(e) => tracing::error!(partition = p.id, error = %e, "cannot create replica"),
                    }
                }
            }
        }
        if may_drop {
            self.drop_unplaced(map);
        }
    }

    /// Drops the replicas the map no longer places here, with their files.
    /// Only a map that knows the partition can take a replica away (an
    /// empty or foreign map never does).
    fn drop_unplaced(&self, map: &ClusterMap) {
        let me_id = self.config.node_id;
        for (i, store) in self.disks.indexed() {
            for r in store.replicas() {
                let pid = r.partition();
                if !map.partitions.contains_key(&pid) || map.holders(pid).contains(&strata_cluster::ReplicaLoc { node: me_id, disk: i }) {
                    continue;
                }
                drop(r);
                match store.drop_replica(pid) {
                    Ok(_) => tracing::info!(partition = pid, disk = i, epoch = map.epoch, "dropped a replica the map moved away"),
                    Err(e) => tracing::error!(partition = pid, disk = i, error = %e, "cannot drop a replica the map moved away"),
                }
            }
        }
    }

    /// Commits a change to the map: through this node's member, or through
    /// any member that answers. A command that does not say who asked is
    /// recorded as the cluster's own work (`strata`, docs/events.md).
    pub async fn propose(&self, cmd: Command) -> Result<Outcome, ClusterError> {
        let cmd = cmd.by_system(self.clock().now_ms());
        if let Some(meta) = &self.meta {
            return Ok(meta.propose(cmd).await?);
        }
        let http = strata_net::Client::new();
        let body = serde_json::to_vec(&cmd).map_err(|e| ClusterError::NoMeta(e.to_string()))?;
        let mut last = String::from("no metadata members configured");
        for addr in self.config.meta_peers.values() {
            match http.post_json(addr, "/admin/cluster/command", body.clone(), Duration::from_secs(10)).await {
                Ok(b) => {
                    // A refusal carries its message beside the outcome.
                    let mut v: serde_json::Value = serde_json::from_slice(&b).map_err(|e| ClusterError::NoMeta(e.to_string()))?;
                    if let Some(o) = v.as_object_mut() {
                        o.remove("message");
                    }
                    return serde_json::from_value(v).map_err(|e| ClusterError::NoMeta(e.to_string()));
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(ClusterError::NoMeta(last))
    }
}

impl ReplicaHost for ClusterNode {
    fn epoch(&self) -> u64 {
        self.map().epoch
    }
    fn rw(&self) -> Option<&dyn strata_rpc::RwHost> {
        ClusterNode::rw(self).map(|s| s as &dyn strata_rpc::RwHost)
    }
    fn replica(&self, partition: PartitionId) -> Option<Arc<Replica>> {
        self.disks.replica(partition)
    }
    fn writable(&self, partition: PartitionId) -> Option<Arc<Replica>> {
        let map = self.map();
        // Writes go to the partition's replicas only: not to one that is
        // leaving (draining into its successor) or that the map no longer
        // places here. Before the map knows this node, as before.
        let me = self.id();
        if map.nodes.contains_key(&me)
            && let Some(p) = map.partitions.get(&partition)
            && !p.replicas.iter().any(|r| r.node == me)
            && p.moving.is_none_or(|m| m.to.node != me)
        {
            return None;
        }
        self.disks.replica(partition)
    }
    fn fence(&self, partition: PartitionId, caller_epoch: u64) -> strata_rpc::RwFuture<'_, ()> {
        Box::pin(async move {
            let is_row = |map: &ClusterMap| map.partitions.get(&partition).map(|p| (p.kind == strata_cluster::PartitionKind::Tract, p.version));
            let Some((true, _)) = is_row(&self.map()) else { return Ok(()) };
            if caller_epoch > self.map().epoch {
                // The caller knows a newer map: the row may have changed
                // in it. Catch up before judging (a cut-off node cannot,
                // and refuses).
                self.catch_up().await;
            }
            let map = self.map();
            let row_version = is_row(&map).map_or(0, |(_, v)| v);
            if caller_epoch < row_version || caller_epoch > map.epoch {
                self.fenced.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Err(strata_rpc::WireError::Fenced { partition, caller_epoch, node_epoch: map.epoch, row_version });
            }
            Ok(())
        })
    }
}

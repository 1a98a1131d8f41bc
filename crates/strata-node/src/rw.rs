//! The node's read-write stores (Spock §3.1): its replica of their data
//! (one engine replica on its first disk, partition [`RW_PARTITION`],
//! which the cluster map never places and so never moves or drops), the
//! coordinator that serves any key of any store (server-side routing:
//! gets from here, puts handed to the key's pseudo-master), the replica
//! RPCs other nodes' coordinators call, and the hint pusher (a worker).

use crate::node::ClusterNode;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use std::sync::{Arc, Weak};
use strata_cluster::{ClusterMap, NodeId, NodeState};
use strata_rpc::{RpcClient, RpcError, RwCoordinateRequest, RwFuture, RwGetManyRequest, RwGetRequest, RwHost, RwPutRequest, WireError, WireVersion};
use strata_rwstore::{Coordinator, LocalStore, PutOutcome, RwError, StorePolicy, Transport, VectorClock, Versioned};

/// One pass of a read-write store worker.
type RwPass = for<'a> fn(&'a RwService) -> BoxFuture<'a, Result<(), RwError>>;

/// The engine partition holding a node's read-write store data.
pub const RW_PARTITION: u64 = 1 << 40;
/// The replica holding this node's hints for other nodes (Spock's slop
/// store), beside [`RW_PARTITION`]: pushing them reads only them.
pub const RW_SLOP_PARTITION: u64 = RW_PARTITION + 1;

/// A node's read-write stores.
pub struct RwService {
    node: Weak<ClusterNode>,
    coordinator: Coordinator,
    /// Replica tables by store, for one map epoch: computing one walks the
    /// whole ring, which no request should pay for.
    tables: std::sync::Mutex<(u64, Tables)>,
}

/// Each store's replica table (its ring partitions' nodes in replica order).
type Tables = std::collections::HashMap<String, Arc<Vec<Vec<u32>>>>;

struct RpcTransport {
    node: Weak<ClusterNode>,
    rpc: RpcClient,
}

fn addr_of(node: &Weak<ClusterNode>, id: NodeId) -> Result<String, RwError> {
    let n = node.upgrade().ok_or_else(|| RwError::Unreachable { node: id, detail: "shutting down".into() })?;
    n.map().nodes.get(&id).map(|n| n.addr.clone()).ok_or_else(|| RwError::Unreachable { node: id, detail: "not in the cluster map".into() })
}

fn from_rpc(node: u64, e: RpcError) -> RwError {
    match e {
        RpcError::Remote(WireError::Obsolete(m)) => RwError::ObsoleteElsewhere(m),
        RpcError::Remote(WireError::Unavailable(m)) => RwError::UnavailableElsewhere(m),
        RpcError::Remote(WireError::Invalid(m)) => RwError::Invalid(m),
        e => RwError::Unreachable { node, detail: e.to_string() },
    }
}

fn to_wire(v: &Versioned) -> WireVersion {
    WireVersion { clock: v.clock.encode(), value: v.value.as_ref().map(|b| b.to_vec()) }
}

fn from_wire(w: WireVersion) -> Result<Versioned, RwError> {
    Ok(Versioned { clock: VectorClock::decode(&w.clock)?, value: w.value.map(Bytes::from) })
}

fn wire_error(e: RwError) -> WireError {
    match e {
        RwError::Obsolete { .. } | RwError::ObsoleteElsewhere(_) => WireError::Obsolete(e.to_string()),
        RwError::InsufficientReplicas { .. } | RwError::UnavailableElsewhere(_) => WireError::Unavailable(e.to_string()),
        RwError::NoSuchStore(_)
        | RwError::Clock(_)
        | RwError::Invalid(_)
        | RwError::TooLarge { .. }
        | RwError::UnknownTransform(_)
        | RwError::Transform { .. } => WireError::Invalid(e.to_string()),
        RwError::Engine(e) => e.into(),
        RwError::Corrupt { .. } | RwError::Unreachable { .. } => WireError::Internal(e.to_string()),
    }
}

impl Transport for RpcTransport {
    fn get(&self, node: u64, store: &str, key: &Bytes) -> BoxFuture<'static, Result<Vec<Versioned>, RwError>> {
        let (rpc, addr) = (self.rpc.clone(), addr_of(&self.node, node));
        let req = RwGetRequest { store: store.into(), key: key.to_vec() };
        Box::pin(async move {
            let got = rpc.rw_get(&addr?, &req).await.map_err(|e| from_rpc(node, e))?;
            got.into_iter().map(from_wire).collect()
        })
    }
    fn get_many(&self, node: u64, store: &str, keys: Vec<Bytes>) -> BoxFuture<'static, Result<Vec<Vec<Versioned>>, RwError>> {
        let (rpc, addr) = (self.rpc.clone(), addr_of(&self.node, node));
        let req = RwGetManyRequest { store: store.into(), keys: keys.iter().map(|k| k.to_vec()).collect() };
        Box::pin(async move {
            let addr = addr?;
            let got = match rpc.rw_get_many(&addr, &req).await {
                Ok(got) => got,
                // A node of a release before rw-get-many: key by key.
                Err(RpcError::Remote(WireError::Invalid(m))) if m.contains("unknown message kind") => {
                    let asked = req.keys.into_iter().map(|key| {
                        let (rpc, addr, store) = (rpc.clone(), addr.clone(), req.store.clone());
                        async move { rpc.rw_get(&addr, &RwGetRequest { store, key }).await }
                    });
                    futures_util::future::join_all(asked).await.into_iter().collect::<Result<Vec<_>, _>>().map_err(|e| from_rpc(node, e))?
                }
                Err(e) => return Err(from_rpc(node, e)),
            };
            got.into_iter().map(|versions| versions.into_iter().map(from_wire).collect()).collect()
        })
    }
    fn put(&self, node: u64, store: &str, key: &Bytes, v: &Versioned) -> BoxFuture<'static, Result<PutOutcome, RwError>> {
        let (rpc, addr) = (self.rpc.clone(), addr_of(&self.node, node));
        let req = RwPutRequest { store: store.into(), key: key.to_vec(), version: to_wire(v) };
        Box::pin(async move {
            let replaced = rpc.rw_put(&addr?, &req).await.map_err(|e| from_rpc(node, e))?;
            Ok(PutOutcome { replaced: replaced as usize })
        })
    }
}

impl RwService {
    /// The service of `node` (`me`), its data in `local`.
    pub(crate) fn new(me: Weak<ClusterNode>, node: &ClusterNode, local: Arc<LocalStore>, slop: Arc<LocalStore>) -> Self {
        let transport = RpcTransport { node: me.clone(), rpc: node.rpc().clone() };
        let coordinator = Coordinator::new(node.id(), local, slop, Arc::new(transport), node.clock().clone());
        coordinator.set_delete_grace_ms(u64::try_from(node.config.delete_grace.as_millis()).unwrap_or(u64::MAX));
        Self { node: me, coordinator, tables: Default::default() }
    }

    /// The coordinator (its counters feed `/metrics`).
    pub fn coordinator(&self) -> &Coordinator {
        &self.coordinator
    }

    fn map(&self) -> Result<Arc<ClusterMap>, RwError> {
        Ok(self.node.upgrade().ok_or_else(|| RwError::Invalid("the node is shutting down".into()))?.map())
    }

    /// A store's policy and a key's preference list, from the map.
    pub fn route(&self, store: &str, key: &[u8]) -> Result<(StorePolicy, Vec<NodeId>), RwError> {
        let map = self.map()?;
        let spec = map.rw_stores.get(store).ok_or_else(|| RwError::NoSuchStore(store.to_string()))?;
        let table = {
            let mut t = self.tables.lock().unwrap_or_else(|p| p.into_inner());
            if t.0 != map.epoch {
                *t = (map.epoch, Default::default());
            }
            match t.1.get(store) {
                Some(table) => table.clone(),
                None => {
                    let table = Arc::new(map.rw_table(store).map_err(|e| RwError::Invalid(e.to_string()))?);
                    t.1.insert(store.to_string(), table.clone());
                    table
                }
            }
        };
        let row = table.get(map.rw_partition_of(key) as usize).ok_or_else(|| RwError::Invalid("the ring changed size".into()))?;
        let pref: Vec<NodeId> = row.iter().map(|&n| u64::from(n)).collect();
        let policy = StorePolicy {
            name: store.into(),
            required_reads: spec.required_reads,
            required_writes: spec.required_writes,
            value_limit: spec.value_limit as usize,
        };
        Ok((policy, pref))
    }

    /// The entries of `store` this node's replica holds, of the ring
    /// partitions `partitions` (all when `None`): for streaming a store
    /// out and for the copies of a rebalancing.
    pub async fn entries(&self, store: &str, partitions: Option<std::collections::BTreeSet<u32>>) -> Result<Vec<(Bytes, Vec<Versioned>)>, RwError> {
        let map = self.map()?;
        let local = self.coordinator.local().clone();
        let name = store.to_string();
        let all = tokio::task::spawn_blocking(move || local.entries(&name)).await.map_err(|e| RwError::Invalid(e.to_string()))??;
        Ok(all.into_iter().filter(|(k, _)| partitions.as_ref().is_none_or(|p| p.contains(&map.rw_partition_of(k)))).collect())
    }

    /// Writes versions into this node's replica as they are, clocks kept
    /// (a stream in, or a copy from another node): each passes the
    /// replica's own check. Returns the versions written and those held
    /// already (or followed by one held).
    pub async fn import(&self, store: &str, entries: Vec<(Bytes, Vec<Versioned>)>) -> Result<(u64, u64), RwError> {
        self.coordinator.local().put_many(store, entries).await
    }

    /// Deletes every version of `store` this node's replica holds, of the
    /// ring partitions `partitions` (all when `None`): a truncate, or the
    /// leftovers of partitions this node held before and is given again.
    pub async fn truncate(&self, store: &str, partitions: Option<std::collections::BTreeSet<u32>>) -> Result<usize, RwError> {
        let map = self.map()?;
        let local = self.coordinator.local().clone();
        let name = store.to_string();
        tokio::task::spawn_blocking(move || local.truncate(&name, |k| partitions.as_ref().is_none_or(|p| p.contains(&map.rw_partition_of(k)))))
            .await
            .map_err(|e| RwError::Invalid(e.to_string()))?
    }

    /// Reclaims the deletes every replica of their key holds, older than
    /// the delete grace ([`Coordinator::reclaim_deletes`]).
    pub async fn reclaim_deletes(&self) -> Result<strata_rwstore::ReclaimReport, RwError> {
        self.coordinator.reclaim_deletes(&|store, key| self.route(store, key).ok().map(|(_, pref)| pref)).await
    }

    /// The current versions of a key (deletes included), coordinated here.
    pub async fn get(&self, store: &str, key: Bytes) -> Result<Vec<Versioned>, RwError> {
        let (policy, pref) = self.route(store, &key)?;
        self.coordinator.get(&policy, &pref, key).await
    }

    /// The current versions of each of `keys` of `store`, coordinated
    /// here with one request per node ([`Coordinator::get_many`]).
    pub async fn get_many(&self, store: &str, keys: Vec<Bytes>) -> Result<Vec<Vec<Versioned>>, RwError> {
        let mut policy = None;
        let mut routed = Vec::with_capacity(keys.len());
        for key in keys {
            let (p, pref) = self.route(store, &key)?;
            policy.get_or_insert(p);
            routed.push((key, pref));
        }
        match policy {
            Some(policy) => self.coordinator.get_many(&policy, routed).await,
            None => Ok(Vec::new()),
        }
    }

    /// A put (or a delete, `value` `None`), coordinated by the key's
    /// pseudo-master: this node if it is the first of the preference list
    /// that is up, else that node (the next one if it cannot be reached).
    pub async fn put(&self, store: &str, key: Bytes, value: Option<Bytes>, clock: &VectorClock, transform: Option<&str>) -> Result<VectorClock, RwError> {
        let (policy, pref) = self.route(store, &key)?;
        if let Some(v) = value.as_ref().filter(|v| v.len() > policy.value_limit) {
            return Err(RwError::TooLarge { store: store.into(), size: v.len(), limit: policy.value_limit });
        }
        if let Some(t) = transform {
            strata_rwstore::transform::by_name(t)?;
        }
        let map = self.map()?;
        let up = |n: &NodeId| map.nodes.get(n).is_some_and(|node| matches!(node.state, NodeState::Up));
        let mut errors = Vec::new();
        for master in pref.iter().copied().filter(up) {
            if master == self.coordinator.node() {
                return match transform {
                    Some(t) => self.coordinator.put_transformed(&policy, &pref, key, value.unwrap_or_default(), t).await,
                    None => self.coordinator.put(&policy, &pref, key, value, clock).await,
                };
            }
            let req = RwCoordinateRequest {
                store: store.into(),
                key: key.to_vec(),
                version: WireVersion { clock: clock.encode(), value: value.as_ref().map(|b| b.to_vec()) },
                transform: transform.map(str::to_string),
            };
            let Ok(addr) = addr_of(&self.node, master) else { continue };
            let rpc = self.node.upgrade().map(|n| n.rpc().clone()).ok_or_else(|| RwError::Invalid("the node is shutting down".into()))?;
            match rpc.rw_coordinate(&addr, &req).await.map_err(|e| from_rpc(master, e)) {
                Ok(clock) => return Ok(VectorClock::decode(&clock)?),
                // Not reached (or a failure of its own): the next node coordinates.
                Err(RwError::Unreachable { detail, .. }) => errors.push(format!("node {master}: {detail}")),
                Err(e) => return Err(e),
            }
        }
        Err(RwError::InsufficientReplicas {
            op: "put",
            store: store.into(),
            got: 0,
            required: policy.required_writes,
            errors: format!("no pseudo-master reachable: {}", errors.join("; ")),
        })
    }
}

impl RwHost for RwService {
    fn rw_get(&self, req: RwGetRequest) -> RwFuture<'_, Vec<WireVersion>> {
        let local = self.coordinator.local().clone();
        Box::pin(async move { Ok(local.get(&req.store, &req.key).map_err(wire_error)?.iter().map(to_wire).collect()) })
    }
    fn rw_get_many(&self, req: RwGetManyRequest) -> RwFuture<'_, Vec<Vec<WireVersion>>> {
        let local = self.coordinator.local().clone();
        Box::pin(async move {
            req.keys.iter().map(|k| Ok(local.get(&req.store, k).map_err(wire_error)?.iter().map(to_wire).collect())).collect::<Result<Vec<_>, WireError>>()
        })
    }
    fn rw_put(&self, req: RwPutRequest) -> RwFuture<'_, u32> {
        let local = self.coordinator.local().clone();
        Box::pin(async move {
            let v = from_wire(req.version).map_err(wire_error)?;
            Ok(local.put(&req.store, &req.key, &v).await.map_err(wire_error)?.replaced as u32)
        })
    }
    fn rw_coordinate(&self, req: RwCoordinateRequest) -> RwFuture<'_, Vec<u8>> {
        Box::pin(async move {
            let (policy, pref) = self.route(&req.store, &req.key).map_err(wire_error)?;
            let clock = VectorClock::decode(&req.version.clock).map_err(|e| wire_error(e.into()))?;
            let key = Bytes::from(req.key);
            let value = req.version.value.map(Bytes::from);
            let written = match req.transform {
                Some(t) => self.coordinator.put_transformed(&policy, &pref, key, value.unwrap_or_default(), &t).await,
                None => self.coordinator.put(&policy, &pref, key, value, &clock).await,
            };
            Ok(written.map_err(wire_error)?.encode())
        })
    }
}

impl ClusterNode {
    /// The node's read-write stores if something used them since it started
    /// (never creates their replica).
    pub fn rw_if_open(&self) -> Option<&RwService> {
        self.rw.get()
    }

    /// The node's read-write stores, once its first disk is open.
    pub fn rw(&self) -> Option<&RwService> {
        if let Some(s) = self.rw.get() {
            return Some(s);
        }
        let me = self.me.get()?.clone();
        let store = self.disks.get(0)?;
        let open = |id: u64| match store.replica(id) {
            Some(r) => Some(r),
            None => match store.create_replica(id) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::error!(error = %e, partition = id, "cannot create a replica of the read-write stores");
                    None
                }
            },
        };
        let (replica, slop) = (open(RW_PARTITION)?, open(RW_SLOP_PARTITION)?);
        // Every version a tombstone here replaced is followed by one this
        // replica holds (or was truncated), so a copy of it arriving later
        // is refused by the replica's own check: tombstones need not wait
        // for the other replicas, and compaction may reclaim them all. A
        // hint's tombstone marks it delivered; nothing copies hints.
        replica.set_reclaim_horizon(u64::MAX);
        slop.set_reclaim_horizon(u64::MAX);
        let _ = self.rw.set(RwService::new(me, self, Arc::new(LocalStore::new(replica)), Arc::new(LocalStore::new(slop))));
        self.rw.get()
    }

    /// Reclaims the deletes of read-write stores that every replica holds,
    /// as the worker `rw-deletes`: a pass walks the replica's whole index,
    /// so it runs every eighth of the delete grace (at least every second,
    /// at most every hour).
    pub(crate) fn spawn_delete_reclaimer(self: Arc<Self>) {
        let period = (self.config.delete_grace / 8).clamp(std::time::Duration::from_secs(1), std::time::Duration::from_secs(3600));
        self.spawn_rw_worker("rw-deletes", period, |rw| Box::pin(async move { rw.reclaim_deletes().await.map(drop) }));
    }

    /// Pushes the hints of read-write store puts to their nodes every
    /// `period` (Spock's slop pusher), as the worker `rw-hints`.
    pub(crate) fn spawn_hint_pusher(self: Arc<Self>, period: std::time::Duration) {
        self.spawn_rw_worker("rw-hints", period, |rw| Box::pin(async move { rw.coordinator().push_hints().await.map(drop) }));
    }

    /// Runs `pass` on the read-write stores every `period` as the worker
    /// `name`. Only a node that holds read-write data runs it: the worker
    /// never creates the replica (it would show in the partition listings).
    fn spawn_rw_worker(self: Arc<Self>, name: &'static str, period: std::time::Duration, pass: RwPass) {
        let me = self.clone();
        self.workers.spawn(name, crate::worker::Next::After(period), move || {
            let me = me.clone();
            async move {
                let holds = me.rw.get().is_some() || me.disks.get(0).is_some_and(|s| s.replica(RW_PARTITION).is_some());
                let Some(rw) = me.rw().filter(|_| holds) else { return Ok(crate::worker::Next::After(period)) };
                match pass(rw).await {
                    Ok(()) => Ok(crate::worker::Next::After(period)),
                    Err(e) => Err(crate::worker::PassFailed::new(e.to_string(), period)),
                }
            }
        });
    }
}

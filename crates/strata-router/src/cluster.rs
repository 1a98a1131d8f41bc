//! The router's view of a cluster: the cached cluster map, this node's own
//! replicas called directly, and every other replica through RPCs guarded
//! by the failure detector.

use crate::failure::FailureDetector;
use crate::local::LocalReplica;
use crate::{ClusterView, ReplicaError, ReplicaHandle};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use std::sync::Arc;
use strata_cluster::{ClusterMap, NodeId, PartitionKind, PartitionState};
use strata_engine::{BlobRecord, Replica, WriteAck, WriteOp};
use strata_rpc::{RpcClient, RpcError, WireError};
use strata_types::{Key, PartitionId};
use tokio::sync::watch;

/// This node's replicas, if the router runs on a datanode.
pub trait LocalReplicas: Send + Sync {
    /// The local replica of `partition`, if open.
    fn replica(&self, partition: PartitionId) -> Option<Arc<Replica>>;
}

/// A cluster seen through its map.
pub struct ClusterMapView {
    map: watch::Receiver<Arc<ClusterMap>>,
    node: Option<NodeId>,
    zone: Option<String>,
    local: Option<Arc<dyn LocalReplicas>>,
    rpc: RpcClient,
    detector: Arc<FailureDetector>,
    on_stale: Arc<dyn Fn(u64) + Send + Sync>,
    catch_up: Option<CatchUp>,
}

/// Brings a node's map up to the newest the cluster has committed.
pub type CatchUp = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

impl ClusterMapView {
    /// A view for a router on datanode `node` (its zone comes from the map)
    /// or, with `node = None`, a frontend in `zone`. `on_stale` is called
    /// with a newer epoch a node reported, to refresh the map.
    pub fn new(
        map: watch::Receiver<Arc<ClusterMap>>,
        node: Option<NodeId>,
        zone: Option<String>,
        local: Option<Arc<dyn LocalReplicas>>,
        rpc: RpcClient,
        detector: Arc<FailureDetector>,
        on_stale: Arc<dyn Fn(u64) + Send + Sync>,
    ) -> Self {
        Self { map, node, zone, local, rpc, detector, on_stale, catch_up: None }
    }

    /// How this view catches up with the cluster's newest map when a blob
    /// names a partition its copy does not hold yet.
    pub fn with_catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = Some(catch_up);
        self
    }

    /// The failure detector.
    pub fn detector(&self) -> &Arc<FailureDetector> {
        &self.detector
    }

    fn zone_of(&self, map: &ClusterMap) -> Option<String> {
        self.zone.clone().or_else(|| self.node.and_then(|n| map.nodes.get(&n)).map(|n| n.zone.clone()))
    }

    fn handles(&self, partition: PartitionId, local_zone: bool) -> Vec<Arc<dyn ReplicaHandle>> {
        let map = self.map.borrow().clone();
        let Some(p) = map.partitions.get(&partition) else { return Vec::new() };
        let zone = self.zone_of(&map);
        let mut out: Vec<Arc<dyn ReplicaHandle>> = Vec::new();
        for r in &p.replicas {
            let Some(node) = map.nodes.get(&r.node) else { continue };
            if (zone.as_deref() == Some(node.zone.as_str())) != local_zone {
                continue;
            }
            // A node the map holds down, a disk down or failed: skipped at
            // once, by every router (the metadata leader decided it).
            if !map.serves(*r) {
                continue;
            }
            if Some(r.node) == self.node
                && let Some(local) = self.local.as_ref().and_then(|l| l.replica(partition))
            {
                out.push(Arc::new(LocalReplica(local)));
                continue;
            }
            out.push(Arc::new(RemoteReplica {
                node: r.node,
                addr: node.addr.clone(),
                partition,
                epoch: map.epoch,
                rpc: self.rpc.clone(),
                detector: self.detector.clone(),
                on_stale: self.on_stale.clone(),
            }));
        }
        out
    }
}

impl ClusterView for ClusterMapView {
    fn writable_partitions(&self) -> Vec<PartitionId> {
        let map = self.map.borrow().clone();
        let zone = self.zone_of(&map);
        map.partitions
            .values()
            .filter(|p| p.state == PartitionState::ReadWrite && p.kind == PartitionKind::Blob)
            .filter(|p| p.replicas.iter().any(|r| map.nodes.get(&r.node).is_some_and(|n| Some(n.zone.as_str()) == zone.as_deref())))
            .map(|p| p.id)
            .collect()
    }
    fn replicas(&self, partition: PartitionId) -> Vec<Arc<dyn ReplicaHandle>> {
        self.handles(partition, true)
    }
    fn remote_replicas(&self, partition: PartitionId) -> Vec<Arc<dyn ReplicaHandle>> {
        self.handles(partition, false)
    }
    fn has_partition(&self, partition: PartitionId) -> bool {
        self.map.borrow().partitions.contains_key(&partition)
    }
    fn replica_count(&self, partition: PartitionId) -> usize {
        self.map.borrow().partitions.get(&partition).map_or(0, |p| p.replicas.len())
    }
    fn policies(&self) -> Option<strata_types::Policies> {
        Some(self.map.borrow().policies)
    }
    fn all_partitions(&self) -> Vec<PartitionId> {
        self.map.borrow().partitions.values().filter(|p| p.kind == PartitionKind::Blob).map(|p| p.id).collect()
    }
    fn holds_locally(&self, partition: PartitionId) -> bool {
        let Some(node) = self.node else { return false };
        let map = self.map.borrow();
        let serving_here = map.partitions.get(&partition).is_some_and(|p| p.replicas.iter().any(|r| r.node == node && map.serves(*r)));
        serving_here && self.local.as_ref().is_some_and(|l| l.replica(partition).is_some())
    }
    fn catch_up(&self) -> BoxFuture<'_, ()> {
        match &self.catch_up {
            Some(f) => f(),
            None => Box::pin(async {}),
        }
    }
}

struct RemoteReplica {
    node: NodeId,
    addr: String,
    partition: PartitionId,
    epoch: u64,
    rpc: RpcClient,
    detector: Arc<FailureDetector>,
    on_stale: Arc<dyn Fn(u64) + Send + Sync>,
}

impl RemoteReplica {
    /// Books the outcome of a call with the failure detector and the map.
    fn settle<T>(&self, r: Result<(u64, T), RpcError>) -> Result<T, ReplicaError> {
        match r {
            Ok((epoch, v)) => {
                self.detector.success(self.node);
                if epoch > self.epoch {
                    (self.on_stale)(epoch);
                }
                Ok(v)
            }
            Err(RpcError::Remote(e)) => {
                if let WireError::NoReplica { node_epoch, stale: true, .. } = &e {
                    (self.on_stale)(*node_epoch);
                }
                match e {
                    // The replica failed: that is held against it, as an
                    // unanswered call is, and is no answer about the blob.
                    WireError::Internal(m) => {
                        self.detector.failure(self.node);
                        Err(ReplicaError::Failed(format!("node {}: {m}", self.node)))
                    }
                    e => {
                        if matches!(&e, WireError::ReadOnly { reason, .. } if reason == "io_failed") {
                            self.detector.failure(self.node);
                        } else {
                            self.detector.success(self.node);
                        }
                        Err(ReplicaError::Engine(e.into_engine()))
                    }
                }
            }
            Err(e) => {
                self.detector.failure(self.node);
                Err(ReplicaError::Unreachable(format!("node {}: {e}", self.node)))
            }
        }
    }

    fn skip(&self) -> Option<ReplicaError> {
        (!self.detector.allow(self.node)).then(|| ReplicaError::Unreachable(format!("node {} is marked down", self.node)))
    }
}

impl ReplicaHandle for RemoteReplica {
    fn write(&self, op: WriteOp) -> BoxFuture<'static, Result<WriteAck, ReplicaError>> {
        self.write_as(op, None)
    }

    fn write_as(&self, op: WriteOp, actor: Option<Arc<str>>) -> BoxFuture<'static, Result<WriteAck, ReplicaError>> {
        if let Some(e) = self.skip() {
            return futures_util::future::ready(Err(e)).boxed();
        }
        let me = self.clone_handle();
        async move {
            let r = me.rpc.write(&me.addr, me.epoch, me.partition, &op, actor.as_deref()).await;
            me.settle(r).map(|a| WriteAck { lsn: a.lsn, time_ms: a.time_ms })
        }
        .boxed()
    }

    fn read(&self, key: Key, with_data: bool) -> BoxFuture<'static, Result<BlobRecord, ReplicaError>> {
        if let Some(e) = self.skip() {
            return futures_util::future::ready(Err(e)).boxed();
        }
        let me = self.clone_handle();
        async move {
            let r = me.rpc.read(&me.addr, me.epoch, me.partition, &key, with_data).await.map(|(e, rec, data)| (e, (rec, data)));
            let (rec, data) = me.settle(r)?;
            Ok(BlobRecord {
                key,
                props: rec.props.into(),
                created_ms: rec.created_ms,
                expiry_ms: rec.expiry_ms,
                size: rec.size,
                data,
                file_range: None,
                actor: rec.actor.unwrap_or_default(),
            })
        }
        .boxed()
    }

    fn keys_page(&self, after: Option<Key>, max: usize) -> BoxFuture<'static, Result<Vec<Key>, ReplicaError>> {
        if let Some(e) = self.skip() {
            return futures_util::future::ready(Err(e)).boxed();
        }
        let me = self.clone_handle();
        async move {
            let req = strata_rpc::DigestRequest {
                partition: me.partition,
                after: after.map(|k| k.as_bytes().to_vec()),
                max: u32::try_from(max).unwrap_or(u32::MAX),
                deep: false,
            };
            // A digest answer carries no epoch: the current one stands in.
            let page = me.settle(me.rpc.digest(&me.addr, &req).await.map(|p| (me.epoch, p)))?;
            page.into_iter()
                .filter(|d| d.state != 2)
                .map(|d| strata_rpc::decode_key(&d.key).map_err(|e| ReplicaError::Unreachable(format!("node {} sent a bad key: {e}", me.node))))
                .collect()
        }
        .boxed()
    }
}

impl RemoteReplica {
    fn clone_handle(&self) -> Self {
        Self {
            node: self.node,
            addr: self.addr.clone(),
            partition: self.partition,
            epoch: self.epoch,
            rpc: self.rpc.clone(),
            detector: self.detector.clone(),
            on_stale: self.on_stale.clone(),
        }
    }
}

//! The embedded single-node view: every partition has one local replica.

use crate::{ClusterView, ReplicaError, ReplicaHandle};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use std::sync::Arc;
use strata_engine::{BlobRecord, Replica, Store, WriteAck, WriteOp};
use strata_types::{Key, PartitionId};

/// A cluster of one node: the replicas of a local [`Store`].
pub struct LocalView {
    store: Arc<Store>,
}

impl LocalView {
    /// A view over `store`.
    pub fn new(store: Arc<Store>) -> Self {
        Self { store }
    }
}

/// A replica on this node, called directly.
pub(crate) struct LocalReplica(pub(crate) Arc<Replica>);

impl ReplicaHandle for LocalReplica {
    fn write(&self, op: WriteOp) -> BoxFuture<'static, Result<WriteAck, ReplicaError>> {
        self.write_as(op, None)
    }
    fn write_as(&self, op: WriteOp, actor: Option<Arc<str>>) -> BoxFuture<'static, Result<WriteAck, ReplicaError>> {
        self.0.submit_as(op, actor).map(|r| r.map_err(ReplicaError::from)).boxed()
    }
    fn read(&self, key: Key, with_data: bool) -> BoxFuture<'static, Result<BlobRecord, ReplicaError>> {
        let r = if with_data { self.0.get(&key) } else { self.0.info(&key) };
        futures_util::future::ready(r.map_err(ReplicaError::from)).boxed()
    }
    fn keys_page(&self, after: Option<Key>, max: usize) -> BoxFuture<'static, Result<Vec<Key>, ReplicaError>> {
        let page = self
            .0
            .digest_after(after.as_ref(), max, false)
            .map(|page| page.into_iter().filter(|d| d.state != strata_engine::DigestState::Deleted).map(|d| d.key).collect());
        futures_util::future::ready(page.map_err(ReplicaError::from)).boxed()
    }
}

impl ClusterView for LocalView {
    fn writable_partitions(&self) -> Vec<PartitionId> {
        self.store.replicas().iter().filter(|r| r.is_writable()).map(|r| r.partition()).collect()
    }
    fn replicas(&self, partition: PartitionId) -> Vec<Arc<dyn ReplicaHandle>> {
        self.store.replica(partition).map(|r| vec![Arc::new(LocalReplica(r)) as Arc<dyn ReplicaHandle>]).unwrap_or_default()
    }
    fn all_partitions(&self) -> Vec<PartitionId> {
        self.store.replicas().iter().map(|r| r.partition()).collect()
    }
}

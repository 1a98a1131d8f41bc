//! The router library (Ambry §4.2.1): turns blob operations into replica
//! operations. Chooses a partition for each put, fans operations out to the
//! partition's replicas under a quorum policy, splits large blobs into chunks
//! written in parallel, and streams chunked gets with a sliding window.
//!
//! The HTTP frontend embeds it; Rust clients can too. It reaches replicas only
//! through [`ClusterView`] and [`ReplicaHandle`], so the same code serves the
//! embedded single node (local replicas) and a cluster (RPC replicas).
//! Read-only stores' client-side routing is not here: it is a client of the
//! HTTP API, in `strata-kv-client`.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-format, strata-engine, strata-cluster, strata-rpc,
//! strata-placement; never the server, `strata-client`, or an HTTP crate.

mod chunking;
mod cluster;
mod error;
mod failure;
mod local;
mod read;

pub use chunking::{BlobBody, BlobData, ByteRange};
pub use cluster::{CatchUp, ClusterMapView, LocalReplicas};
pub use error::{ReplicaError, RouterError, Unavailable};
pub use failure::{FailureDetector, FailureDetectorConfig, NodeHealth};
pub use local::LocalView;
pub use strata_types::{Policies, Policy};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use rand::{Rng, SeedableRng};
use std::sync::{Arc, Mutex};
use strata_engine::{BlobRecord, EngineError, WriteAck, WriteOp};
use strata_format::PutProps;
use strata_types::{BlobId, BlobKind, Clock, ContainerRef, Key, PartitionId};

/// One replica of a partition, local or remote.
pub trait ReplicaHandle: Send + Sync {
    /// Applies a write; resolves once it is durable on that replica.
    fn write(&self, op: WriteOp) -> BoxFuture<'static, Result<WriteAck, ReplicaError>>;
    /// [`ReplicaHandle::write`], the record naming `actor` as who made the
    /// change (change capture's `who`). A handle that cannot record it
    /// writes without.
    fn write_as(&self, op: WriteOp, actor: Option<Arc<str>>) -> BoxFuture<'static, Result<WriteAck, ReplicaError>> {
        let _ = actor;
        self.write(op)
    }
    /// Reads a blob record (data included when `with_data`).
    fn read(&self, key: Key, with_data: bool) -> BoxFuture<'static, Result<BlobRecord, ReplicaError>>;
    /// Up to `max` keys after `after` (from the first when `None`), in key
    /// order, that are live or damaged on this replica (deleted and expired
    /// keys left out): a page of its index, for the orphan sweep.
    fn keys_page(&self, after: Option<Key>, max: usize) -> BoxFuture<'static, Result<Vec<Key>, ReplicaError>>;
}

/// The router's view of the cluster: which partitions take writes, and the
/// replicas of each partition.
pub trait ClusterView: Send + Sync {
    /// Partitions that currently accept puts.
    fn writable_partitions(&self) -> Vec<PartitionId>;
    /// The replicas of a partition in the local zone, where writes go
    /// synchronously and gets look first (empty if it does not exist).
    fn replicas(&self, partition: PartitionId) -> Vec<Arc<dyn ReplicaHandle>>;
    /// The replicas in other zones, for gets that miss locally (proxy
    /// requests, Ambry §4.2.2). None by default.
    fn remote_replicas(&self, _partition: PartitionId) -> Vec<Arc<dyn ReplicaHandle>> {
        Vec::new()
    }
    /// The cluster's default policies, if the cluster sets them (the
    /// router's configuration applies otherwise).
    fn policies(&self) -> Option<Policies> {
        None
    }
    /// Whether the partition exists at all (in any zone).
    fn has_partition(&self, partition: PartitionId) -> bool {
        !self.replicas(partition).is_empty() || !self.remote_replicas(partition).is_empty()
    }
    /// How many replicas the partition has in every zone, reachable or not
    /// (a policy of "all" counts a replica on a down disk too).
    fn replica_count(&self, partition: PartitionId) -> usize {
        self.replicas(partition).len() + self.remote_replicas(partition).len()
    }
    /// Every partition of the cluster, writable or not.
    fn all_partitions(&self) -> Vec<PartitionId>;
    /// Brings the view up to the newest map the cluster has committed. A
    /// blob id can name a partition this node's copy of the map does not
    /// hold yet (another node acknowledged a put to a partition created a
    /// moment ago): the router calls this before it answers that the
    /// partition does not exist. Nothing to do by default.
    fn catch_up(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    /// Whether this node holds a serving replica of the partition itself
    /// (a router on a datanode). None by default (a frontend).
    fn holds_locally(&self, _partition: PartitionId) -> bool {
        false
    }
}

/// Owners starting with this are reserved for blobs Strata writes for
/// itself; the native API refuses them from clients.
pub const RESERVED_OWNER_PREFIX: &str = "strata:";
/// The owner of every blob the S3 API writes. Such a blob is only reachable
/// through a name or an upload's part list, so the orphan sweep frees it
/// once none holds it (and the grace period has passed).
pub const S3_OWNER: &str = "strata:s3";

/// Router counters, read by the metrics exporter.
#[derive(Debug, Default)]
pub struct RouterStats {
    /// Gets forwarded to other zones after missing locally.
    pub proxied_gets: std::sync::atomic::AtomicU64,
    /// Puts where a replica already held the blob because replication
    /// copied it first (not a collision).
    pub put_replication_races: std::sync::atomic::AtomicU64,
    /// Times a streamed put waited for room in the upload buffer.
    pub upload_buffer_waits: std::sync::atomic::AtomicU64,
    /// Damaged replica copies repaired by a read that found a whole copy
    /// elsewhere (read repair).
    pub read_repairs: std::sync::atomic::AtomicU64,
    /// Read repairs that failed (the damaged replica refused or did not answer).
    pub read_repair_failures: std::sync::atomic::AtomicU64,
    /// Replica writes that completed after their operation was
    /// acknowledged (the replicas beyond the policy's count).
    pub late_writes_done: std::sync::atomic::AtomicU64,
    /// Late writes that failed (replication brings those replicas the blob).
    pub late_writes_failed: std::sync::atomic::AtomicU64,
    /// Late writes cancelled because too many bytes were already in flight
    /// after their acknowledgements (a slow replica; replication catches it up).
    pub late_writes_dropped: std::sync::atomic::AtomicU64,
    /// Bytes of late writes in flight now.
    pub late_write_bytes: std::sync::atomic::AtomicU64,
}

/// Bytes of late writes (see [`RouterStats::late_writes_done`]) a router
/// lets run at once; beyond them a late write is cancelled.
const LATE_WRITE_BYTES_MAX: u64 = 256 << 20;

/// Most puts that join one group (see [`PutGroup`]) before the next put
/// draws a partition afresh, so that partitions' shares stay even under a
/// load that never pauses.
const PUTS_PER_GROUP: u32 = 32;

/// Most bytes a group holds in flight. Large puts fill an fsync alone and
/// gain more from partitions written in parallel (a writer thread and a
/// log file each) than from sharing one: one node's 1 MiB PUTs x16 ran a
/// fifth slower when they shared a partition.
const GROUP_BYTES_MAX: u64 = 1 << 20;

/// The puts in flight on the partition a router chose last. A put that
/// starts while others of the group are still in flight joins them on
/// their partition instead of drawing one at random: each replica's group
/// commit then gathers the concurrent puts into one fsync (and, in a
/// cluster, into fewer replica writes in flight per peer), where a draw per
/// put spread them about one per replica and paid an fsync per record. A
/// put that starts alone draws at random, as does every put once the group
/// has taken [`PUTS_PER_GROUP`], so a sequential writer still spreads its
/// puts over every partition.
#[derive(Debug, Clone, Copy)]
struct PutGroup {
    partition: PartitionId,
    /// Tells a group from a later one on the same partition.
    generation: u64,
    in_flight: u32,
    bytes_in_flight: u64,
    joined: u32,
}

/// A put's membership of a [`PutGroup`]; leaves it when dropped.
struct GroupMember<'a> {
    router: &'a Router,
    generation: u64,
    bytes: u64,
}

impl Drop for GroupMember<'_> {
    fn drop(&mut self) {
        let mut group = self.router.group.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = group.as_mut().filter(|g| g.generation == self.generation) {
            g.in_flight = g.in_flight.saturating_sub(1);
            g.bytes_in_flight = g.bytes_in_flight.saturating_sub(self.bytes);
        }
    }
}

/// Router tunables.
#[derive(Debug, Clone)]
pub struct RouterConfig {
    /// Blobs larger than this are split into chunks of this size (Ambry: 4 MiB).
    pub chunk_size: usize,
    /// Chunks put or fetched in parallel for one blob.
    pub chunk_window: usize,
    /// Largest blob accepted.
    pub blob_bytes_max: u64,
    /// How many replica acks each operation needs.
    pub policies: Policies,
    /// Partitions tried for one put before giving up.
    pub put_attempts: usize,
    /// A get waits this long for the replicas it asked before also asking
    /// the next ones (a slow or paused node delays a get by this much, not
    /// by the RPC deadline).
    pub hedge_after: std::time::Duration,
    /// Bytes of streamed put bodies held at once, over every put (chunks
    /// being filled or written). A put that would pass it waits for room,
    /// so many concurrent uploads slow their clients down (TCP flow
    /// control) instead of exhausting memory.
    pub upload_buffer_bytes: u64,
    /// The orphan sweep's grace period: it frees an unreferenced chunk or
    /// S3 blob only once it is older than this. In turn nothing may make a
    /// blob reachable (a chunked put's composite, an S3 name) more than half
    /// of it after the blob's put began: such a late step fails instead
    /// (see [`Router::check_naming_deadline`]).
    pub orphan_grace_ms: u64,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            chunk_size: 4 << 20,
            chunk_window: 4,
            blob_bytes_max: 64 << 30,
            policies: Policies::default(),
            put_attempts: 4,
            hedge_after: std::time::Duration::from_millis(250),
            upload_buffer_bytes: 1 << 30,
            orphan_grace_ms: 24 * 3600 * 1000,
        }
    }
}

/// Properties of a blob, as a user sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobInfo {
    /// The id.
    pub id: BlobId,
    /// Size in bytes.
    pub size: u64,
    /// MIME type.
    pub content_type: String,
    /// Owner.
    pub owner: String,
    /// User metadata.
    pub meta: Vec<(String, String)>,
    /// Creation time, ms since the epoch.
    pub created_ms: u64,
    /// Expiry, ms since the epoch (0 = never).
    pub expiry_ms: u64,
    /// Number of chunks (0 for a simple blob).
    pub chunks: usize,
}

/// What a put needs besides the bytes.
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    /// Time to live in ms (None = forever).
    pub ttl_ms: Option<u64>,
    /// MIME type.
    pub content_type: String,
    /// Owner.
    pub owner: String,
    /// User metadata.
    pub meta: Vec<(String, String)>,
    /// Acks this put needs, overriding the cluster's put policy.
    pub policy: Option<Policy>,
    /// Who puts it (an access key id, `node`, `anonymous`), recorded with
    /// the blob and its chunks for change capture (docs/events.md, `who`).
    pub actor: Option<Arc<str>>,
    /// The container (account and container ids) the blob and its chunks
    /// belong to; their ids say so.
    pub container: ContainerRef,
    /// The body's length as its sender announced it (`Content-Length`):
    /// the upload buffer is sized for it instead of a whole chunk, so a
    /// small blob does not take (and fault in) chunk-sized memory. Only a
    /// hint: a body longer or shorter than it is still taken whole.
    pub size_hint: Option<u64>,
}

/// The router.
pub struct Router {
    view: Arc<dyn ClusterView>,
    config: RouterConfig,
    clock: Arc<dyn Clock>,
    rng: Mutex<rand::rngs::SmallRng>,
    /// The group of puts in flight that a new put joins.
    group: Mutex<Option<PutGroup>>,
    stats: Arc<RouterStats>,
    /// The upload buffer, in [`chunking::UPLOAD_UNIT`]s.
    uploads: Arc<tokio::sync::Semaphore>,
}

impl Router {
    /// A router over `view`. `seed` fixes partition choice and ids for tests
    /// and the simulator; `None` seeds from the OS.
    pub fn new(view: Arc<dyn ClusterView>, config: RouterConfig, clock: Arc<dyn Clock>, seed: Option<u64>) -> Self {
        let rng = match seed {
            Some(s) => rand::rngs::SmallRng::seed_from_u64(s),
            None => rand::rngs::SmallRng::from_os_rng(),
        };
        let units = chunking::upload_units(config.upload_buffer_bytes);
        Self {
            view,
            config,
            clock,
            rng: Mutex::new(rng),
            group: Mutex::new(None),
            stats: Arc::default(),
            uploads: Arc::new(tokio::sync::Semaphore::new(units)),
        }
    }

    /// Bytes of the upload buffer held by puts now.
    pub fn upload_buffer_held(&self) -> u64 {
        let total = chunking::upload_units(self.config.upload_buffer_bytes);
        (total.saturating_sub(self.uploads.available_permits()) * chunking::UPLOAD_UNIT) as u64
    }

    /// The clock the router (and what embeds it) reads time from.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Counters.
    pub fn stats(&self) -> &RouterStats {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// The policies in force: the cluster's defaults if it sets them, else
    /// the router's configuration.
    pub fn policies(&self) -> Policies {
        self.view.policies().unwrap_or(self.config.policies)
    }

    /// A new id on a partition of `partitions` for a put of `bytes`: the
    /// group's in flight if it may take one more put, else one drawn at
    /// random (see [`PutGroup`]).
    fn new_id(&self, kind: BlobKind, container: ContainerRef, partitions: &[PartitionId], bytes: u64) -> Option<(BlobId, GroupMember<'_>)> {
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        if partitions.is_empty() {
            return None;
        }
        let mut group = self.group.lock().unwrap_or_else(|p| p.into_inner());
        let g = match group.as_mut() {
            Some(g) if g.in_flight > 0 && g.joined < PUTS_PER_GROUP && g.bytes_in_flight + bytes <= GROUP_BYTES_MAX && partitions.contains(&g.partition) => {
                g.in_flight += 1;
                g.bytes_in_flight += bytes;
                g.joined += 1;
                *g
            }
            _ => {
                let generation = group.map_or(0, |g| g.generation + 1);
                let partition = partitions[rng.random_range(0..partitions.len())];
                *group.insert(PutGroup { partition, generation, in_flight: 1, bytes_in_flight: bytes, joined: 1 })
            }
        };
        let member = GroupMember { router: self, generation: g.generation, bytes };
        Some((BlobId::new_in(kind, g.partition, container, &mut *rng), member))
    }

    /// Puts one blob of at most one chunk (simple, chunk or composite kind)
    /// on a writable partition (the [`PutGroup`]'s in flight, else one
    /// drawn at random), retrying elsewhere when a partition
    /// is read-only or busy. A router on a datanode draws from the writable
    /// partitions this node holds a replica of, while there are any: one
    /// copy is then written here rather than sent over the network (at 6
    /// nodes and 3 replicas, a put otherwise sent three copies out as
    /// often as not). Clients spread over the nodes still spread the puts
    /// over every partition.
    pub(crate) async fn put_one(
        &self,
        kind: BlobKind,
        container: ContainerRef,
        props: PutProps,
        data: Bytes,
        policy: Policy,
        actor: &Option<Arc<str>>,
    ) -> Result<BlobId, RouterError> {
        let mut last = RouterError::NoWritablePartition;
        let mut candidates = self.view.writable_partitions();
        for _ in 0..self.config.put_attempts {
            let local: Vec<PartitionId> = candidates.iter().copied().filter(|p| self.view.holds_locally(*p)).collect();
            let Some((id, _member)) = self.new_id(kind, container, if local.is_empty() { &candidates } else { &local }, data.len() as u64) else { break };
            let op = WriteOp::Put { key: id.key(), props: props.clone(), data: data.clone() };
            match self.write_quorum(id.partition(), op, policy, actor).await {
                Ok(()) => return Ok(id),
                Err(e @ (RouterError::PartitionReadOnly(_) | RouterError::Unavailable(_))) => {
                    candidates.retain(|p| *p != id.partition());
                    last = e;
                }
                // A fresh random id collided: vanishingly rare, just draw again.
                Err(RouterError::AlreadyExists) => {}
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// Sends a write to every local-zone replica of `partition` and waits
    /// for `policy` acks. A put that a replica refuses as existing counts as
    /// an ack when that replica holds exactly this blob: replication copied
    /// it from a faster replica first. Anything else is a collision.
    async fn write_quorum(&self, partition: PartitionId, op: WriteOp, policy: Policy, actor: &Option<Arc<str>>) -> Result<(), RouterError> {
        let mut replicas = self.view.replicas(partition);
        if replicas.is_empty() && !self.view.has_partition(partition) {
            self.view.catch_up().await;
            replicas = self.view.replicas(partition);
        }
        if replicas.is_empty() {
            return Err(if self.view.has_partition(partition) {
                Unavailable::NoLocalReplica { partition }.into()
            } else {
                RouterError::NoSuchPartition(partition)
            });
        }
        // A local policy writes to the local zone only (Ambry); any other
        // counts every zone's replicas, so the write goes to all of them.
        let total = self.view.replica_count(partition);
        let needed = policy.write_acks(replicas.len(), total).map_err(|needed| Unavailable::PolicyExceedsReplicas {
            partition,
            policy: policy.to_string(),
            needed,
            replicas: total,
        })?;
        if !policy.is_local() {
            replicas.extend(self.view.remote_replicas(partition));
        }
        if replicas.len() < needed {
            return Err(Unavailable::TooFewReachable { partition, policy: policy.to_string(), needed, reachable: replicas.len(), replicas: total }.into());
        }
        let mut pending: futures_util::stream::FuturesUnordered<_> = replicas
            .iter()
            .map(|r| {
                let (r, op, actor) = (r.clone(), op.clone(), actor.clone());
                async move {
                    let res = r.write_as(op.clone(), actor).await;
                    match (res, &op) {
                        (Err(ReplicaError::Engine(EngineError::AlreadyExists)), WriteOp::Put { key, props, data }) => match r.read(key.clone(), true).await {
                            Ok(rec) if rec.props == *props && rec.data == *data => Ok(true),
                            _ => Err(ReplicaError::Engine(EngineError::AlreadyExists)),
                        },
                        (res, _) => res.map(|_| false),
                    }
                }
            })
            .collect();
        let (mut acks, mut errors) = (0, Vec::new());
        use futures_util::StreamExt;
        while let Some(r) = pending.next().await {
            match r {
                Ok(raced) => {
                    if raced {
                        self.stats.put_replication_races.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    acks += 1;
                    if acks >= needed {
                        self.finish_late(pending, &op);
                        return Ok(());
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        Err(RouterError::from_replica_errors(partition, needed, acks, errors))
    }

    /// Lets the replica writes still running after an operation's
    /// acknowledgement finish in the background (Ambry: the put is
    /// acknowledged at the policy's count, every replica still gets the
    /// write). Dropping them instead would cancel requests mid-flight,
    /// closing their connections (the next request pays a new TLS
    /// handshake) and leaving those replicas to copy the blob by pull
    /// replication. Bounded by [`LATE_WRITE_BYTES_MAX`] in flight.
    fn finish_late<F>(&self, mut pending: futures_util::stream::FuturesUnordered<F>, op: &WriteOp)
    where
        F: std::future::Future<Output = Result<bool, ReplicaError>> + Send + 'static,
    {
        use futures_util::StreamExt;
        use std::sync::atomic::Ordering::Relaxed;
        if pending.is_empty() {
            return;
        }
        let bytes = match op {
            WriteOp::Put { data, .. } | WriteOp::ReplicaPut { data, .. } => data.len() as u64,
            _ => 0,
        } * pending.len() as u64;
        let stats = self.stats.clone();
        let room = stats.late_write_bytes.fetch_add(bytes, Relaxed) + bytes <= LATE_WRITE_BYTES_MAX;
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if room => runtime,
            _ => {
                stats.late_write_bytes.fetch_sub(bytes, Relaxed);
                stats.late_writes_dropped.fetch_add(pending.len() as u64, Relaxed);
                return;
            }
        };
        runtime.spawn(async move {
            while let Some(r) = pending.next().await {
                match r {
                    Ok(_) => stats.late_writes_done.fetch_add(1, Relaxed),
                    Err(_) => stats.late_writes_failed.fetch_add(1, Relaxed),
                };
            }
            stats.late_write_bytes.fetch_sub(bytes, Relaxed);
        });
    }

    /// The properties of a blob.
    pub async fn info(&self, id: BlobId) -> Result<BlobInfo, RouterError> {
        if id.kind() == BlobKind::Chunk {
            return Err(RouterError::BadRequest("chunk ids are internal: use the id the put returned".into()));
        }
        let rec = self.read_record(id, id.kind() == BlobKind::Composite).await?;
        let chunks = if id.kind() == BlobKind::Composite { Some(chunking::decode_list(&rec)?) } else { None };
        Ok(info_of(id, &rec, chunks.as_ref()))
    }

    /// Deletes a blob (and, for a chunked blob, its chunks).
    pub async fn delete(&self, id: BlobId) -> Result<(), RouterError> {
        self.delete_with(id, None, None).await
    }

    /// Deletes a blob, with `policy` acks instead of the cluster's delete
    /// policy, made by `actor` (recorded with the tombstone).
    pub async fn delete_with(&self, id: BlobId, policy: Option<Policy>, actor: Option<Arc<str>>) -> Result<(), RouterError> {
        let policy = policy.unwrap_or(self.policies().delete);
        let list = self.chunk_list_if_composite(id).await?;
        match self.write_quorum(id.partition(), WriteOp::Delete { key: id.key() }, policy, &actor).await {
            Ok(()) | Err(RouterError::Deleted) => {}
            Err(e) => return Err(e),
        }
        if let Some(list) = list {
            for (chunk, _) in list.chunks {
                if let Err(e) = self.write_quorum(chunk.partition(), WriteOp::Delete { key: chunk.key() }, policy, &actor).await {
                    // The composite is gone, so the chunk is unreachable; compaction
                    // reclaims it once it expires or a later sweep deletes it.
                    tracing::warn!(%chunk, error = %e, "could not delete a chunk of a deleted blob");
                }
            }
        }
        Ok(())
    }

    /// Sets a new time to live (None = forever), counted from now.
    pub async fn update_ttl(&self, id: BlobId, ttl_ms: Option<u64>) -> Result<(), RouterError> {
        self.update_ttl_with(id, ttl_ms, None, None).await
    }

    /// Sets a new time to live with `policy` acks instead of the cluster's,
    /// made by `actor` (recorded with the update).
    pub async fn update_ttl_with(&self, id: BlobId, ttl_ms: Option<u64>, policy: Option<Policy>, actor: Option<Arc<str>>) -> Result<(), RouterError> {
        let policy = policy.unwrap_or(self.policies().ttl_update);
        let expiry_ms = ttl_ms.map_or(0, |t| self.clock.now_ms().saturating_add(t.max(1)));
        let list = self.chunk_list_if_composite(id).await?;
        // Chunks first: a blob whose composite outlives its chunks would be broken.
        if let Some(list) = list {
            for (chunk, _) in list.chunks {
                self.write_quorum(chunk.partition(), WriteOp::TtlUpdate { key: chunk.key(), expiry_ms }, policy, &actor).await?;
            }
        }
        self.write_quorum(id.partition(), WriteOp::TtlUpdate { key: id.key(), expiry_ms }, policy, &actor).await
    }

    async fn chunk_list_if_composite(&self, id: BlobId) -> Result<Option<strata_format::ChunkList>, RouterError> {
        match id.kind() {
            BlobKind::Chunk => Err(RouterError::BadRequest("chunk ids are internal: use the id the put returned".into())),
            BlobKind::Simple => Ok(None),
            BlobKind::Composite => match self.read_record(id, true).await {
                Ok(rec) => Ok(Some(chunking::decode_list(&rec)?)),
                // Let the write itself report deleted / not found. A
                // composite whose chunk list is damaged everywhere can still
                // be deleted; its chunks are left to the orphan sweep.
                Err(RouterError::Deleted | RouterError::NotFound | RouterError::Expired | RouterError::Corrupt(_)) => Ok(None),
                Err(e) => Err(e),
            },
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Fails with [`RouterError::TooSlow`] if a blob whose put began at
    /// `started_ms` may no longer be made reachable (by a composite or a
    /// name): more than half the orphan grace period has passed, so the
    /// sweep may be about to take it for an orphan.
    pub fn check_naming_deadline(&self, started_ms: u64) -> Result<(), RouterError> {
        let limit = self.config.orphan_grace_ms / 2;
        let age = self.now_ms().saturating_sub(started_ms);
        if age > limit {
            return Err(RouterError::TooSlow(format!("the put began {age} ms ago; a blob must be named within {limit} ms")));
        }
        Ok(())
    }

    /// Every partition of the cluster, writable or not.
    pub fn all_partitions(&self) -> Vec<PartitionId> {
        self.view.all_partitions()
    }

    /// Every key present (live, expired or damaged) on any replica of
    /// `partition`, in every zone: the union of their indexes. Fails if a
    /// replica cannot be listed, because a key only it holds would be
    /// missed.
    pub async fn list_keys(&self, partition: PartitionId) -> Result<std::collections::BTreeSet<Key>, RouterError> {
        const PAGE: usize = 5000;
        let replicas: Vec<_> = self.view.replicas(partition).into_iter().chain(self.view.remote_replicas(partition)).collect();
        if replicas.len() < self.view.replica_count(partition) {
            return Err(Unavailable::NotAllListable { partition, listable: replicas.len(), replicas: self.view.replica_count(partition) }.into());
        }
        let mut keys = std::collections::BTreeSet::new();
        for r in replicas {
            let mut after = None;
            loop {
                let page = r.keys_page(after.clone(), PAGE).await.map_err(|failure| Unavailable::ListingFailed { partition, failure })?;
                let full = page.len() >= PAGE;
                after = page.last().cloned();
                keys.extend(page);
                if !full {
                    break;
                }
            }
        }
        Ok(keys)
    }

    /// Who wrote a blob or chunk and when, and when it expires: its owner,
    /// creation time and expiry (0 = never), read from a replica without
    /// the data.
    pub async fn provenance(&self, id: BlobId) -> Result<(String, u64, u64), RouterError> {
        let rec = self.read_record(id, false).await?;
        Ok((rec.props.owner, rec.created_ms, rec.expiry_ms))
    }

    /// The chunks a composite blob lists (chunks included: this is the
    /// orphan sweep's view, not a user's).
    pub async fn chunks_of(&self, id: BlobId) -> Result<Vec<BlobId>, RouterError> {
        if id.kind() != BlobKind::Composite {
            return Err(RouterError::BadRequest(format!("{id} is not a composite blob")));
        }
        let rec = self.read_record(id, true).await?;
        Ok(chunking::decode_list(&rec)?.chunks.into_iter().map(|c| c.0).collect())
    }

    /// Deletes one record, whatever its kind, and nothing else: a composite
    /// keeps its chunks. For the orphan sweep, which decides on every
    /// record by itself.
    pub async fn remove_record(&self, id: BlobId) -> Result<(), RouterError> {
        match self.write_quorum(id.partition(), WriteOp::Delete { key: id.key() }, self.policies().delete, &None).await {
            Ok(()) | Err(RouterError::Deleted) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

fn info_of(id: BlobId, rec: &BlobRecord, list: Option<&strata_format::ChunkList>) -> BlobInfo {
    BlobInfo {
        id,
        size: list.map_or(rec.size, |l| l.total_size),
        content_type: rec.props.content_type.clone(),
        owner: rec.props.owner.clone(),
        meta: rec.props.meta.clone(),
        created_ms: rec.created_ms,
        expiry_ms: rec.expiry_ms,
        chunks: list.map_or(0, |l| l.chunks.len()),
    }
}

fn summarize(errors: &[ReplicaError]) -> String {
    errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")
}
